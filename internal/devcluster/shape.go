package devcluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kmirror/kmirror/internal/netshape"
)

// A dev cluster can sit behind a wide-area link (package netshape): every
// byte between a client and the brokers takes a one-way delay, and each
// direction carries a capped number of bytes per second, shared by all
// clients. On the embedded engine kfake's listeners are wrapped; on the
// Kafka engine each broker's EXTERNAL listener is advertised on the port of
// a proxy in this process that forwards to the broker's own, so that clients
// only ever reach a broker through the link. Replication and the quorum
// (INTERNAL, CONTROLLER) stay unshaped: the link is the one between the
// clients and the cluster, not inside it.

// Latency delays every byte between clients and the brokers by d, one way:
// a request and its response take 2·d more. Requests in flight at once
// overlap, as on a real link (see netshape).
func Latency(d time.Duration) Option { return option(func(c *config) { c.latency = d }) }

// Bandwidth caps the bytes per second between clients and the brokers, in
// each direction, shared by all connections.
func Bandwidth(bytesPerSecond int64) Option {
	return option(func(c *config) { c.bandwidth = bytesPerSecond })
}

// Link puts the cluster behind l, whose shape the caller may change while
// the cluster runs (a benchmark measures loopback and a shaped link on the
// same clusters, with the same data). Use it instead of Latency and
// Bandwidth, which give the cluster a link of its own.
func Link(l *netshape.Link) Option { return option(func(c *config) { c.link = l }) }

// resolveLink returns the link clients reach the cluster through, nil when
// the options ask for none.
func (c *config) resolveLink() (*netshape.Link, error) {
	switch {
	case c.latency < 0:
		return nil, fmt.Errorf("devcluster: Latency must not be negative, got %s", c.latency)
	case c.bandwidth < 0:
		return nil, fmt.Errorf("devcluster: Bandwidth must not be negative, got %d", c.bandwidth)
	case c.link != nil && (c.latency != 0 || c.bandwidth != 0):
		return nil, errors.New("devcluster: Link comes with its own shape; give it Latency and Bandwidth with SetShape instead of the options")
	case c.link != nil:
		return c.link, nil
	case c.latency != 0 || c.bandwidth != 0:
		return netshape.NewLink(netshape.Shape{Delay: c.latency, Bandwidth: c.bandwidth}), nil
	}
	return nil, nil
}

// Link returns the link clients reach the cluster through, nil when it has
// none. Its SetShape changes the cluster's latency and bandwidth.
func (c *Cluster) Link() *netshape.Link { return c.link }

// startProxies puts a shaping proxy on each node's client port, forwarding
// to the port its broker listens on. A client port taken in the meantime is
// reported as PortInUseError.
func (e *kafkaEngine) startProxies() error {
	if e.link == nil {
		return nil
	}
	for _, n := range e.nodes {
		ln, err := listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)))
		if err != nil {
			return fmt.Errorf("devcluster: the shaping proxy of broker %d: %w", n.id, err)
		}
		n.proxy = e.link.Proxy(ln, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.listen)))
	}
	return nil
}

func (e *kafkaEngine) stopProxies() {
	for _, n := range e.nodes {
		if n.proxy != nil {
			n.proxy.Close()
			n.proxy = nil
		}
	}
}

// describeLink says what clients reach the cluster through, for logs.
func (c *config) describeLink() string {
	if c.link == nil {
		return "loopback"
	}
	return c.link.Shape().String()
}
