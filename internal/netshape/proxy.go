package netshape

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the connection to the proxy's target; a target that
// is down refuses at once on loopback.
const dialTimeout = 10 * time.Second

// Proxy forwards every connection it accepts to one target address across a
// link, for servers that run elsewhere (a broker JVM): clients connect to
// the proxy, and their bytes reach the target, and the target's reach them,
// shaped as through the link.
type Proxy struct {
	ln     net.Listener
	target string
	link   *Link

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Proxy serves ln until Close, forwarding each connection to target
// (host:port, dialled once per connection) across l. A connection whose
// target cannot be reached is closed, as a refused one would be.
func (l *Link) Proxy(ln net.Listener, target string) *Proxy {
	p := &Proxy{ln: ln, target: target, link: l, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Close stops accepting, ends every forwarded connection and waits for the
// proxy's goroutines to finish.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

// track records c so that Close ends it; false if the proxy is closed (c is
// closed then).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// forward moves client's bytes to a new connection to the target and back,
// each direction through a pipe of the link. A side that closes cleanly
// half-closes the other (the bytes before its end still arrive first); an
// error on either side ends both.
func (p *Proxy) forward(client net.Conn) {
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil || !p.track(server) {
		return
	}
	defer p.untrack(server)
	up, down := newPipe(p.link, &p.link.up), newPipe(p.link, &p.link.down)
	var wg sync.WaitGroup
	half := func(pp *pipe, dst net.Conn) {
		defer wg.Done()
		err := drain(pp, dst)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && errors.Is(err, io.EOF) {
			_ = cw.CloseWrite()
			return
		}
		// Broken: end both connections, so that every goroutine here
		// returns.
		up.abort()
		down.abort()
		client.Close()
		server.Close()
	}
	wg.Add(4)
	go func() { defer wg.Done(); pump(client, up) }()
	go func() { defer wg.Done(); pump(server, down) }()
	go half(up, server)
	go half(down, client)
	wg.Wait()
}
