package writer

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// relay is a TCP proxy in front of each broker connection a client dials,
// recording how each client side ended: EOF (a graceful close, whose
// unsent bytes the kernel would still deliver) or a reset. While it holds
// (hold), it keeps what clients send instead of passing it on, as a
// network partition would; a client that resets its connection meanwhile
// loses what was held (a reset drops what the sender's kernel has not
// delivered), and what is held when it stops holding goes on with the
// client's next bytes.
type relay struct {
	mu      sync.Mutex
	ended   []error // how each client side's reading ended, in order
	holding bool
	dropped int // bytes held when their connection ended
}

// dial is a kgo.Dialer: a proxy to addr, and a connection to it.
func (r *relay) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		defer ln.Close()
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial(network, addr)
		if err != nil {
			in.Close()
			return
		}
		go func() { _, _ = io.Copy(in, out); in.Close() }()
		err = r.forward(out, in) // io.EOF: a graceful close
		r.mu.Lock()
		r.ended = append(r.ended, err)
		r.mu.Unlock()
		out.Close()
	}()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", ln.Addr().String())
}

// forward copies what the client sends to the broker, keeping it back while
// the relay holds, until the client's side ends (io.EOF for a graceful
// close).
func (r *relay) forward(out, in net.Conn) error {
	buf := make([]byte, 64<<10)
	var held []byte
	for {
		n, err := in.Read(buf)
		held = append(held, buf[:n]...)
		r.mu.Lock()
		holding := r.holding
		r.mu.Unlock()
		if !holding && len(held) > 0 {
			if _, werr := out.Write(held); werr != nil {
				return werr
			}
			held = held[:0]
		}
		if err != nil {
			r.mu.Lock()
			r.dropped += len(held)
			r.mu.Unlock()
			return err
		}
	}
}

// waitReset waits up to 5 s for a client side to end with a reset, and
// fails t if one ended with a graceful close (EOF) or none was reset.
func (r *relay) waitReset(t *testing.T) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		reset := false
		for _, e := range r.endings() {
			reset = reset || errors.Is(e, syscall.ECONNRESET)
			if errors.Is(e, io.EOF) {
				t.Fatalf("a connection of the writer ended with a graceful close (EOF), not a reset")
			}
		}
		if reset {
			return
		}
	}
	t.Fatalf("no connection ended with a reset; endings %v", r.endings())
}

// hold makes the relay keep what clients send from now on (true), or pass
// it on again.
func (r *relay) hold(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = on
}

// droppedBytes is what the relay held of connections that ended.
func (r *relay) droppedBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

func (r *relay) endings() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.ended...)
}

// relayedWriter is a writer to c whose connections go through a relay, with
// markers deadline deadline, and a one-partition topic "d" on c.
func relayedWriter(t *testing.T, c *devcluster.Cluster, deadline time.Duration) (*relay, *Writer) {
	t.Helper()
	r := &relay{}
	cl, err := kgo.NewClient(ClientOpts([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(r.dial)})...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w := New(cl, leaders.New(cl))
	w.SetMarkersDeadline(deadline)
	f := &fixture{c: c, cl: cl, w: w, adm: kadm.NewClient(cl)}
	f.topic(t, "d", 1)
	return r, w
}

// TestMarkersDeadlineResetsTheConnection: filler markers the broker does
// not answer within the writer's markers deadline fail with an error
// saying so, long before the connection's own timeout, and their
// connection ends with a reset, not a graceful close: the kernel then
// drops what the broker has not received instead of resending it (for
// minutes across a network partition, after another agent took the
// partition over). The next write goes over a new connection.
func TestMarkersDeadlineResetsTheConnection(t *testing.T) {
	c := devclustertest.Start(t)
	const deadline = 300 * time.Millisecond
	r, w := relayedWriter(t, c, deadline)
	ctx := context.Background()

	kc := c.Kfake()
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	var held sync.Once
	kc.ControlKey(int16(kmsg.WriteTxnMarkers), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		held.Do(func() { kc.SleepControl(func() { <-release }) })
		return nil, nil, false
	})
	pid, epoch, err := w.InitProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if off, err := w.Produce(ctx, "d", 0, batch(t, pid, epoch, 0, 0, 1)); err != nil || off != 0 {
		t.Fatalf("first batch: offset %d, %v", off, err)
	}
	start := time.Now()
	x, err := w.MarkersAsync(ctx, Producer{ID: 1 << 62}, "d", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = x.Wait(wctx)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "did not answer filler markers within") {
		t.Fatalf("markers held by the broker: %v after %v, want the markers deadline's error", err, took)
	}
	t.Logf("held markers failed after %v (deadline %v): %v", took.Round(time.Millisecond), deadline, err)
	if took < deadline {
		t.Errorf("held markers failed after %v, before the deadline %v", took, deadline)
	}
	// The relay sees the writer's connection end; the reset is what the
	// client side reads.
	r.waitReset(t)
	close(release)
	// A new connection: the partition writes again. The held markers
	// reached the broker before the reset and are applied once released
	// (a reset drops only what the broker has not received), so the next
	// batch lands behind them.
	wctx2, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	for {
		b, err := w.Bounds(wctx2, "d", 0)
		if err != nil {
			t.Fatal(err)
		}
		if b.HighWatermark == 2 {
			break
		}
		if wctx2.Err() != nil {
			t.Fatalf("destination end %d, want 2 once the held markers are applied", b.HighWatermark)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if off, err := w.Produce(ctx, "d", 0, batch(t, pid, epoch, 1, 0, 1)); err != nil || off != 2 {
		t.Fatalf("batch after the reset: offset %d, %v; want 2", off, err)
	}
}

// TestMarkersHeldInTheNetwork: filler markers that do not reach the
// broker (a relay holds them, as a network partition would) fail at the
// writer's markers deadline, and their connection's reset drops them: the
// broker never applies them, so they cannot land after another agent
// wrote the partition. The next batch lands at the offset the markers
// would have taken, over a new connection. On both engines: the deadline
// and the reset are the writer's and TCP's, the broker is real.
func TestMarkersHeldInTheNetwork(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) {
			const deadline = 500 * time.Millisecond
			r, w := relayedWriter(t, devclustertest.Start(t, devcluster.Engine(engine)), deadline)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pid, epoch, err := w.InitProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if off, err := w.Produce(ctx, "d", 0, batch(t, pid, epoch, 0, 0, 1)); err != nil || off != 0 {
				t.Fatalf("first batch: offset %d, %v", off, err)
			}

			r.hold(true)
			start := time.Now()
			x, err := w.MarkersAsync(ctx, Producer{ID: 1 << 62}, "d", 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			_, err = x.Wait(ctx)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "did not answer filler markers within") {
				t.Fatalf("markers held in the network: %v after %v, want the markers deadline's error", err, took)
			}
			if took < deadline {
				t.Errorf("held markers failed after %v, before the deadline %v", took, deadline)
			}
			r.waitReset(t)
			if r.droppedBytes() == 0 {
				t.Fatal("the reset connection had nothing held: the markers were not held in the relay")
			}
			t.Logf("held markers failed after %v (deadline %v); the reset dropped %d bytes held in the relay", took.Round(time.Millisecond), deadline, r.droppedBytes())
			r.hold(false)

			// The markers never reached the broker: the next batch takes
			// their offset, over a new connection, and markers after it
			// land behind it.
			b, err := w.Bounds(ctx, "d", 0)
			if err != nil || b.HighWatermark != 1 {
				t.Fatalf("destination end %d (%v) after the dropped markers, want 1", b.HighWatermark, err)
			}
			if off, err := w.Produce(ctx, "d", 0, batch(t, pid, epoch, 1, 0, 1)); err != nil || off != 1 {
				t.Fatalf("batch after the reset: offset %d, %v; want 1", off, err)
			}
			x, err = w.MarkersAsync(ctx, Producer{ID: 1 << 62}, "d", 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := x.Wait(ctx); err != nil {
				t.Fatalf("markers after the reset: %v", err)
			}
			if b, err := w.Bounds(ctx, "d", 0); err != nil || b.HighWatermark != 3 {
				t.Fatalf("destination end %d (%v) after a batch and markers, want 3", b.HighWatermark, err)
			}
		})
	}
}
