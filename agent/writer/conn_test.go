package writer

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
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
// delivered). What is held goes on once it stops holding, or, with pass,
// while it goes on holding what comes next.
type relay struct {
	mu      sync.Mutex
	ended   []error // how each client side's reading ended, in order
	holding bool
	passes  int // each connection passes on what it held once per pass
	dropped int // bytes held when their connection ended
}

// relayPoll is how often a relayed connection looks whether to pass on
// what it holds while its client sends nothing.
const relayPoll = 5 * time.Millisecond

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
	r.mu.Lock()
	passed := r.passes
	r.mu.Unlock()
	for {
		_ = in.SetReadDeadline(time.Now().Add(relayPoll))
		n, err := in.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
		}
		held = append(held, buf[:n]...)
		r.mu.Lock()
		send := !r.holding || passed < r.passes
		passed = r.passes
		r.mu.Unlock()
		if send && len(held) > 0 {
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

// pass has every connection pass on what it holds now, and go on holding
// what comes next while the relay holds.
func (r *relay) pass() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes++
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
// markers deadline deadline (0: none), and a topic "d" of two partitions
// on c.
func relayedWriter(t *testing.T, c *devcluster.Cluster, deadline time.Duration) (*relay, *fixture) {
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
	f.topic(t, "d", 2)
	return r, f
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
	r, f := relayedWriter(t, c, deadline)
	w := f.w
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
			r, f := relayedWriter(t, devclustertest.Start(t, devcluster.Engine(engine)), deadline)
			w := f.w
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

// slowWrites is a net.Conn whose first n writes each wait d first: a broker
// slow to answer for a moment, as the handshake's timing sees it (one
// write per request).
type slowWrites struct {
	net.Conn
	n int
	d time.Duration
}

func (c *slowWrites) Write(b []byte) (int, error) {
	if c.n > 0 {
		c.n--
		time.Sleep(c.d)
	}
	return c.Conn.Write(b)
}

// TestSlowMomentNotFar (both engines): a near broker whose first three
// answers took 15 ms each is measured near, by the round trips the
// handshake asks for after them (rttConfirm); without them it measures 15
// ms or more, far.
func TestSlowMomentNotFar(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) {
			c := devclustertest.Start(t, devcluster.Engine(engine))
			const slow = 15 * time.Millisecond
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &slowWrites{Conn: nc, n: rttProbes, d: slow}, nil
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(dial))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, tc := range []struct {
				confirm time.Duration
				far     bool
			}{{0, true}, {farRTT, false}} {
				oc, err := dialOrdered(ctx, cl, c.Bootstrap()[0], 10*time.Second, 0, tc.confirm)
				if err != nil {
					t.Fatal(err)
				}
				oc.fail(errClosed)
				if far := oc.rtt >= farRTT; far != tc.far || (tc.far && oc.rtt < slow) {
					t.Errorf("confirm %v: round trip %v, far %v; want far %v", tc.confirm, oc.rtt, far, tc.far)
				}
			}
		})
	}
}

// TestBrokerMeasuredFar: the writer measures a broker's round trip on the
// first connection to it, before a partition takes a lane there; a broker
// behind a link of 15 ms each way is far: two lanes, the far window, and
// the connection's measured round trip at least the link's. A partition
// that took a lane before its broker was measured (its caller's context
// ended first) keeps it, and its sink becomes far; one on loopback is near.
func TestBrokerMeasuredFar(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) {
			const oneWay = 15 * time.Millisecond
			f := start(t, devcluster.Engine(engine), devcluster.Latency(oneWay))
			f.topic(t, "m", 4)
			ctx := context.Background()
			l, err := f.w.meta.Leader(ctx, "m", 0)
			if err != nil {
				t.Fatal(err)
			}
			node := l.Leader

			ended, cancel := context.WithCancel(ctx)
			cancel()
			early := f.w.sink(ended, node, topicPart{"m", 0})
			if early.lane != (lane{node, 0}) || early.reach().window != NearWindow {
				t.Fatalf("m/0 before its broker is measured: lane %v, window %d; want lane 0 and the near window", early.lane, early.reach().window)
			}
			var lanes []int
			for p := range int32(4) {
				lanes = append(lanes, f.w.laneOf(ctx, node, "m", p).n)
			}
			f.w.mu.Lock()
			rtt, measured := f.w.rtts[node]
			f.w.mu.Unlock()
			if !measured || rtt < 2*oneWay {
				t.Fatalf("round trip to broker %d: %v (measured: %v), want at least %v", node, rtt, measured, 2*oneWay)
			}
			t.Logf("round trip to broker %d across %v each way: %v", node, oneWay, rtt)
			addr, _ := f.w.meta.Broker(node)
			if i := slices.IndexFunc(ReadReaches(), func(r Reach) bool { return r.Addr == addr }); i < 0 {
				t.Errorf("ReadReaches %v: no broker %s", ReadReaches(), addr)
			} else if r := ReadReaches()[i]; r.RTT != rtt || r.Lanes != 2 {
				t.Errorf("ReadReaches for %s: %+v, want round trip %v and 2 lanes", addr, r, rtt)
			}
			if want := []int{0, 1, 0, 1}; !slices.Equal(lanes, want) {
				t.Errorf("lanes of m/0..3: %v, want %v (m/0 keeps the lane it took first)", lanes, want)
			}
			if w := early.reach().window; w != FarWindow {
				t.Errorf("m/0's sink, made before the broker was measured: window %d, want the far window %d", w, FarWindow)
			}
			// The writes land, over both lanes.
			for p := range int32(4) {
				if x := land(t, f.w, "m", p); x.s.lane.n != lanes[p] {
					t.Errorf("m/%d written on lane %d, want %d", p, x.s.lane.n, lanes[p])
				}
			}
			f.w.mu.Lock()
			conns := 0
			for l := range f.w.conns {
				if l.node == node {
					conns++
				}
			}
			f.w.mu.Unlock()
			if conns != 2 {
				t.Errorf("%d connections to broker %d, want 2 lanes", conns, node)
			}

			near := start(t, devcluster.Engine(engine))
			near.topic(t, "m", 2)
			for p := range int32(2) {
				if x := land(t, near.w, "m", p); x.Window() != NearWindow || x.s.lane.n != 0 {
					t.Errorf("m/%d on loopback: window %d, lane %d; want the near window and lane 0", p, x.Window(), x.s.lane.n)
				}
			}
		})
	}
}

// land writes a batch of one record to an empty partition, again while its
// new leader is not known yet, and returns the item that landed at 0.
func land(t *testing.T, w *Writer, topic string, p int32) *Pending {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		x, err := w.ProduceAsync(ctx, topic, p, plain(t, 1))
		var off int64
		if err == nil {
			off, err = x.Wait(ctx)
		}
		switch {
		case err == nil && off == 0:
			return x
		case err == nil:
			t.Fatalf("%s/%d: landed at %d, want 0", topic, p, off)
		case !leaders.IsLeadershipError(err) || ctx.Err() != nil:
			t.Fatalf("%s/%d: %v", topic, p, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
