package netshape

import (
	"net"
	"sync"
	"time"
)

// closeGrace bounds how long a closed connection keeps sending what was
// written before Close, to a peer that stopped reading.
const closeGrace = 10 * time.Second

// Listener returns a listener whose connections cross l: what a client
// writes reaches the server's Read through l's client-to-server direction,
// and what the server writes reaches the client through the other.
func (l *Link) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, link: l} }

type listener struct {
	net.Listener
	link *Link
}

func (ln *listener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return ln.link.serverConn(c), nil
}

// conn is the server's end of a connection through a link. Two goroutines
// move the bytes: one reads the socket into the incoming pipe, one writes
// the outgoing pipe to the socket as its bytes fall due.
type conn struct {
	net.Conn // the socket; its addresses are the connection's
	in, out  *pipe
	once     sync.Once
}

func (l *Link) serverConn(raw net.Conn) *conn {
	c := &conn{Conn: raw, in: newPipe(l, &l.up), out: newPipe(l, &l.down)}
	go pump(raw, c.in)
	go func() {
		// Ends after Close, once what was written before it is sent,
		// or when the client stops taking bytes.
		_ = drain(c.out, raw)
		raw.Close()
	}()
	return c
}

func (c *conn) Read(b []byte) (int, error)  { return c.in.read(b) }
func (c *conn) Write(b []byte) (int, error) { return c.out.write(b) }

// Close ends the connection for its user at once; the bytes written before
// it still reach the client, as a closed TCP socket still sends its buffer.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.in.abort()
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.out.link.Shape().Delay + closeGrace))
		c.out.closeWrite(net.ErrClosed)
	})
	return nil
}

func (c *conn) SetDeadline(t time.Time) error {
	c.in.setReadDeadline(t)
	c.out.setWriteDeadline(t)
	return nil
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.in.setReadDeadline(t)
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.out.setWriteDeadline(t)
	return nil
}
