package netshape

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// pipe is one direction of one connection through a link: the bytes written
// and not yet read, each chunk with the time it becomes readable.
type pipe struct {
	link *Link
	dir  *direction

	mu       sync.Mutex
	chunks   []chunk
	queued   int       // bytes in chunks
	last     time.Time // due time of the newest chunk: a later one never overtakes it
	end      error     // set by closeWrite: what read returns once chunks are drained
	closed   bool      // set by abort
	readDL   time.Time // read deadline; zero: none
	writeDL  time.Time // write deadline; zero: none
	readable chan struct{}
	writable chan struct{}
	done     chan struct{} // closed by abort
	once     sync.Once
}

type chunk struct {
	b   []byte
	due time.Time
}

func newPipe(l *Link, d *direction) *pipe {
	return &pipe{
		link:     l,
		dir:      d,
		readable: make(chan struct{}, 1),
		writable: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// signal wakes a waiter on ch, if any, without blocking; a wake-up nobody
// waits for stays in the channel for the next one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// wait blocks until ch is signalled, the pipe is aborted, or until (when not
// zero) passes.
func (p *pipe) wait(ch chan struct{}, until time.Time) {
	if until.IsZero() {
		select {
		case <-ch:
		case <-p.done:
		}
		return
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ch:
	case <-p.done:
	case <-t.C:
	}
}

// earliest returns the earlier of two times, a zero time counting as never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// write copies b into the pipe in chunks, blocking while the connection has
// Window bytes in flight.
func (p *pipe) write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		p.mu.Lock()
		for p.queued >= Window && !p.closed && p.end == nil {
			if !p.writeDL.IsZero() && !time.Now().Before(p.writeDL) {
				p.mu.Unlock()
				return n, os.ErrDeadlineExceeded
			}
			dl := p.writeDL
			p.mu.Unlock()
			p.wait(p.writable, dl)
			p.mu.Lock()
		}
		if p.closed || p.end != nil {
			p.mu.Unlock()
			return n, net.ErrClosed
		}
		k := min(len(b), chunkSize, Window-p.queued)
		c := chunk{b: append([]byte(nil), b[:k]...), due: p.dir.due(p.link.Shape(), k)}
		if c.due.Before(p.last) { // the delay was lowered: keep the stream in order
			c.due = p.last
		}
		p.last = c.due
		p.chunks = append(p.chunks, c)
		p.queued += k
		p.mu.Unlock()
		signal(p.readable)
		b, n = b[k:], n+k
	}
	return n, nil
}

// read copies into b the bytes that are due, waiting for the first of them;
// once the write end is closed and every byte read, it returns the error
// closeWrite gave.
func (p *pipe) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, net.ErrClosed
		}
		now := time.Now()
		if !p.readDL.IsZero() && !now.Before(p.readDL) {
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		var next time.Time
		switch {
		case len(p.chunks) > 0 && !p.chunks[0].due.After(now):
			n := 0
			for n < len(b) && len(p.chunks) > 0 && !p.chunks[0].due.After(now) {
				c := &p.chunks[0]
				k := copy(b[n:], c.b)
				n += k
				if c.b = c.b[k:]; len(c.b) == 0 {
					p.chunks[0] = chunk{}
					p.chunks = p.chunks[1:]
				}
			}
			p.queued -= n
			p.mu.Unlock()
			signal(p.writable)
			return n, nil
		case len(p.chunks) > 0:
			next = p.chunks[0].due
		case p.end != nil:
			err := p.end
			p.mu.Unlock()
			return 0, err
		}
		dl := p.readDL
		p.mu.Unlock()
		p.wait(p.readable, earliest(next, dl))
	}
}

// closeWrite ends the pipe's stream: the reader gets err (io.EOF for a
// clean end) after the bytes already written, and later writes fail.
func (p *pipe) closeWrite(err error) {
	p.mu.Lock()
	if p.end == nil {
		p.end = err
	}
	p.mu.Unlock()
	signal(p.readable)
	signal(p.writable)
}

// abort ends the pipe at once, dropping what it holds; both ends fail.
func (p *pipe) abort() {
	p.mu.Lock()
	p.closed = true
	p.chunks, p.queued = nil, 0
	p.mu.Unlock()
	p.once.Do(func() { close(p.done) })
}

func (p *pipe) setReadDeadline(t time.Time) {
	p.mu.Lock()
	p.readDL = t
	p.mu.Unlock()
	signal(p.readable)
}

func (p *pipe) setWriteDeadline(t time.Time) {
	p.mu.Lock()
	p.writeDL = t
	p.mu.Unlock()
	signal(p.writable)
}

// pump reads src into p until src ends, then closes p's stream with io.EOF
// or the read error.
func pump(src io.Reader, p *pipe) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := p.write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			p.closeWrite(err)
			return
		}
	}
}

// drain writes what comes out of p to dst until p's stream ends, returning
// the error it ended with (io.EOF for a clean end). A failed write aborts p.
func drain(p *pipe, dst io.Writer) error {
	buf := make([]byte, chunkSize)
	for {
		n, err := p.read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				p.abort()
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}
