package writer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writegate"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// observer watches every produce request the cluster gets (a control that
// never handles one), records its partitions and, for the first len(release)
// requests, holds the request until release[i] is closed.
type observer struct {
	kc *kfake.Cluster

	mu       sync.Mutex
	requests [][]topicPart // partitions of each request, in arrival order
	txn      []bool        // whether each request named a transactional id
	dups     []string      // requests with a partition twice

	held    chan int // gets i when request i is held
	release []chan struct{}
}

func observe(t *testing.T, c *devcluster.Cluster, hold int) *observer {
	o := &observer{kc: c.Kfake(), held: make(chan int, hold+1)}
	for range hold {
		o.release = append(o.release, make(chan struct{}))
	}
	t.Cleanup(func() {
		for i := range o.release {
			o.releaseReq(i)
		}
	})
	o.kc.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		o.kc.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		var parts []topicPart
		seen := map[topicPart]bool{}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				tp := topicPart{rt.Topic, rp.Partition}
				if seen[tp] {
					o.mu.Lock()
					o.dups = append(o.dups, fmt.Sprint(tp))
					o.mu.Unlock()
				}
				seen[tp] = true
				parts = append(parts, tp)
			}
		}
		o.mu.Lock()
		i := len(o.requests)
		o.requests = append(o.requests, parts)
		o.txn = append(o.txn, req.TransactionID != nil)
		o.mu.Unlock()
		if i < len(o.release) {
			o.held <- i
			o.kc.SleepControl(func() { <-o.release[i] })
		}
		return nil, nil, false
	})
	return o
}

func (o *observer) releaseReq(i int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-o.release[i]:
	default:
		close(o.release[i])
	}
}

func (o *observer) snapshot() ([][]topicPart, []bool, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]topicPart(nil), o.requests...), append([]bool(nil), o.txn...), append([]string(nil), o.dups...)
}

type fixture struct {
	c   *devcluster.Cluster
	cl  *kgo.Client
	w   *Writer
	adm *kadm.Client
}

func start(t *testing.T, opts ...devcluster.Option) *fixture {
	t.Helper()
	c := devclustertest.Start(t, opts...)
	cl, err := kgo.NewClient(ClientOpts([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)})...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	w := New(cl, leaders.New(cl))
	return &fixture{c: c, cl: cl, w: w, adm: kadm.NewClient(cl)}
}

// oneAtATime keeps one request in flight and one batch per partition, so
// that what follows a held request queues in the sink.
func (f *fixture) oneAtATime() { f.w.near.inflight, f.w.near.window = 1, 1 }

func (f *fixture) topic(t *testing.T, name string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.adm.CreateTopic(ctx, partitions, 1, nil, name); err != nil {
		t.Fatal(err)
	}
}

// batch builds n records for producer id pid (-1: not idempotent).
func batch(t testing.TB, pid int64, epoch int16, seq int32, attrs int16, n int) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, n)
	now := time.Now().UnixMilli()
	for i := range recs {
		recs[i] = recordbatch.Record{Offset: int64(i), Timestamp: now, Key: []byte("k"), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	b, err := recordbatch.Build(recordbatch.CodecNone, attrs, 0, now, pid, epoch, seq, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func plain(t testing.TB, n int) []byte { return batch(t, -1, -1, -1, 0, n) }

// queued waits until the sink of topic's leader holds n queued batches.
func (f *fixture) queued(t *testing.T, topic string, n int) {
	t.Helper()
	f.await(t, topic, func(s *sink) (bool, string) {
		return len(s.queue) == n, fmt.Sprintf("%d batches queued, want %d", len(s.queue), n)
	})
}

// await waits up to 10 s until ok, called with the sink of the leader of
// topic's partition 0 locked, says so; else it fails t with what ok says.
func (f *fixture) await(t *testing.T, topic string, ok func(*sink) (bool, string)) {
	t.Helper()
	l, err := f.w.meta.Leader(context.Background(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.w.sink(context.Background(), l.Leader, topicPart{topic, 0})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		done, what := ok(s)
		s.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// metadataRequests counts from now on the metadata requests for topic
// alone (the leader cache's lookups).
func (f *fixture) metadataRequests(t *testing.T, topic string) func() int {
	var mu sync.Mutex
	n := 0
	kc := f.c.Kfake()
	kc.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := kr.(*kmsg.MetadataRequest)
		if len(req.Topics) == 1 && req.Topics[0].Topic != nil && *req.Topics[0].Topic == topic {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return nil, nil, false
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

func (f *fixture) end(t *testing.T, topic string, partition int32) int64 {
	t.Helper()
	b, err := f.w.Bounds(context.Background(), topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return b.HighWatermark
}

type result struct {
	off int64
	err error
}

func (f *fixture) async(ctx context.Context, topic string, partition int32, b []byte) <-chan result {
	ch := make(chan result, 1)
	go func() {
		off, err := f.w.Produce(ctx, topic, partition, b)
		ch <- result{off, err}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("produce did not return")
		return result{}
	}
}

// Many partitions of two topics written concurrently, each partition
// sequentially with an idempotent producer as the mirror does: every batch
// lands where expected, requests carry several partitions and never one
// partition twice.
func TestProduceCoalescesConcurrentPartitions(t *testing.T) {
	for _, inflight := range []int{1, 4} {
		t.Run(fmt.Sprintf("inflight=%d", inflight), func(t *testing.T) {
			f := start(t, devcluster.Brokers(2))
			f.w.near.inflight = inflight
			o := observe(t, f.c, 0)
			const parts, batches = 8, 40
			topics := []string{"a", "b"}
			for _, tp := range topics {
				f.topic(t, tp, parts)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pid, epoch, err := f.w.InitProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, len(topics)*parts)
			for _, topic := range topics {
				for p := range int32(parts) {
					wg.Go(func() {
						var next int64
						var seq int32
						for i := range batches {
							n := 1 + (i+int(p))%3
							off, err := f.w.Produce(ctx, topic, p, batch(t, pid, epoch, seq, 0, n))
							if err != nil {
								errs <- err
								return
							}
							if off != next {
								errs <- fmt.Errorf("%s/%d batch %d at offset %d, want %d", topic, p, i, off, next)
								return
							}
							next += int64(n)
							seq += int32(n)
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			reqs, _, dups := o.snapshot()
			if len(dups) > 0 {
				t.Errorf("requests with a partition twice: %v", dups)
			}
			most, total := 0, 0
			for _, r := range reqs {
				most = max(most, len(r))
				total += len(r)
			}
			if want := len(topics) * parts * batches; total != want {
				t.Errorf("%d batches sent, want %d", total, want)
			}
			if most < 2 {
				t.Errorf("no request carried more than one partition (%d requests)", len(reqs))
			}
			t.Logf("%d batches in %d requests, at most %d per request", total, len(reqs), most)
			for _, topic := range topics {
				for p := range int32(parts) {
					var want int64
					for i := range batches {
						want += int64(1 + (i+int(p))%3)
					}
					if got := f.end(t, topic, p); got != want {
						t.Errorf("%s/%d ends at %d, want %d", topic, p, got, want)
					}
				}
			}
		})
	}
}

// A partition's error answers only that partition's caller, and a
// leadership error invalidates the leader cache.
func TestProduceErrorReachesOnlyItsPartition(t *testing.T) {
	f := start(t)
	f.oneAtATime()
	o := observe(t, f.c, 1)
	f.topic(t, "t", 4)
	ctx := context.Background()

	first := f.async(ctx, "t", 0, plain(t, 1))
	<-o.held // request 0 in flight: what follows queues
	fault := f.c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{2}, Err: kerr.NotLeaderForPartition})
	defer fault.Remove()
	var rs []<-chan result
	for p := int32(1); p < 4; p++ {
		rs = append(rs, f.async(ctx, "t", p, plain(t, 2)))
	}
	f.queued(t, "t", 3)
	lookups := f.metadataRequests(t, "t")
	o.releaseReq(0)
	if r := wait(t, first); r.err != nil || r.off != 0 {
		t.Fatalf("first produce: offset %d, %v", r.off, r.err)
	}
	for i, ch := range rs {
		p := int32(i + 1)
		r := wait(t, ch)
		if p == 2 {
			var pe *ProduceError
			if !errors.As(r.err, &pe) || !errors.Is(r.err, kerr.NotLeaderForPartition) || pe.Partition != 2 || pe.Topic != "t" {
				t.Errorf("partition 2: offset %d, error %v; want NOT_LEADER_FOR_PARTITION for t/2", r.off, r.err)
			}
			continue
		}
		if r.err != nil || r.off != 0 {
			t.Errorf("partition %d: offset %d, %v", p, r.off, r.err)
		}
	}
	if fault.Hits() != 1 {
		t.Errorf("fault hit %d times", fault.Hits())
	}
	reqs, _, _ := o.snapshot()
	if len(reqs) != 2 || len(reqs[1]) != 3 {
		t.Fatalf("requests %v, want [t/0] then t/1..3 together", reqs)
	}
	// The partition retries alone and lands, after looking its leader up
	// again: the error invalidated the leader cache.
	before := lookups()
	if off, err := f.w.Produce(ctx, "t", 2, plain(t, 2)); err != nil || off != 0 {
		t.Errorf("retry of t/2: offset %d, %v", off, err)
	}
	if after := lookups(); after != before+1 {
		t.Errorf("%d metadata requests for the retry, want 1: the leader cache was not invalidated", after-before)
	}
	if got := f.end(t, "t", 2); got != 2 {
		t.Errorf("t/2 ends at %d, want 2: only the retry landed", got)
	}
}

// The checks a caller's context carries (writegate: the mirror's owner) are
// asked when its batch leaves, once per request for the batches of one
// mirror, and for those batches alone: a refused batch is not sent and
// answers the refusal; the others of its request land.
func TestProduceGateRefusesOnlyItsItem(t *testing.T) {
	f := start(t)
	f.oneAtATime()
	o := observe(t, f.c, 1)
	f.topic(t, "t", 4)
	ctx := context.Background()
	errNotOwner := errors.New("not the owner")
	var owner atomic.Bool
	var asked atomic.Int32
	owner.Store(true)
	gated := writegate.With(ctx, func() error {
		asked.Add(1)
		if owner.Load() {
			return nil
		}
		return errNotOwner
	})

	first := f.async(ctx, "t", 0, plain(t, 1))
	<-o.held // request 0 in flight: what follows queues
	var rs []<-chan result
	for p := int32(1); p < 4; p++ {
		c := ctx
		if p >= 2 {
			c = gated // t/2 and t/3: one mirror
		}
		rs = append(rs, f.async(c, "t", p, plain(t, 2)))
	}
	f.queued(t, "t", 3)
	owner.Store(false) // after it was queued: the check is when it leaves
	asked.Store(0)
	o.releaseReq(0)
	if r := wait(t, first); r.err != nil || r.off != 0 {
		t.Fatalf("first produce: offset %d, %v", r.off, r.err)
	}
	for i, ch := range rs {
		p := int32(i + 1)
		r := wait(t, ch)
		if p >= 2 {
			var pe *ProduceError
			if !errors.As(r.err, &pe) || !errors.Is(r.err, errNotOwner) || pe.Partition != p {
				t.Errorf("partition %d: offset %d, error %v; want the refusal for t/%d", p, r.off, r.err, p)
			}
			continue
		}
		if r.err != nil || r.off != 0 {
			t.Errorf("partition %d: offset %d, %v", p, r.off, r.err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the mirror's check was asked %d times for one request, want once", n)
	}
	reqs, _, _ := o.snapshot()
	if len(reqs) != 2 || len(reqs[1]) != 1 {
		t.Fatalf("requests %v, want [t/0] then t/1 alone", reqs)
	}
	for _, p := range []int32{2, 3} {
		if got := f.end(t, "t", p); got != 0 {
			t.Errorf("t/%d ends at %d, want 0: its refused batch was sent", p, got)
		}
	}
	// Refused alone: nothing leaves; allowed again, it lands.
	if _, err := f.w.Produce(gated, "t", 2, plain(t, 2)); !errors.Is(err, errNotOwner) {
		t.Errorf("refused produce of t/2 alone: %v, want the refusal", err)
	}
	owner.Store(true)
	if off, err := f.w.Produce(gated, "t", 2, plain(t, 2)); err != nil || off != 0 {
		t.Errorf("t/2 once allowed: offset %d, %v", off, err)
	}
}

// A caller whose context ends returns at once, whether its batch is queued
// (then it is never sent) or in flight with others' (which still land).
func TestProduceCancelOneCaller(t *testing.T) {
	f := start(t)
	f.oneAtATime()
	o := observe(t, f.c, 2)
	f.topic(t, "t", 4)
	ctx := context.Background()

	first := f.async(ctx, "t", 0, plain(t, 1))
	<-o.held

	// Queued, then cancelled: never sent.
	qctx, qcancel := context.WithCancel(ctx)
	queued := f.async(qctx, "t", 3, plain(t, 1))
	f.queued(t, "t", 1)
	qcancel()
	if r := wait(t, queued); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled queued produce: offset %d, %v", r.off, r.err)
	}
	f.queued(t, "t", 0)

	// In flight with another caller's batch, then cancelled.
	ictx, icancel := context.WithCancel(ctx)
	inflight := f.async(ictx, "t", 1, plain(t, 3))
	other := f.async(ctx, "t", 2, plain(t, 2))
	f.queued(t, "t", 2)
	o.releaseReq(0)
	if r := wait(t, first); r.err != nil || r.off != 0 {
		t.Fatalf("first produce: offset %d, %v", r.off, r.err)
	}
	if i := <-o.held; i != 1 {
		t.Fatalf("held request %d", i)
	}
	icancel()
	if r := wait(t, inflight); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled in-flight produce: offset %d, %v", r.off, r.err)
	}
	select {
	case r := <-other:
		t.Fatalf("the other caller returned before its request was answered: %d, %v", r.off, r.err)
	default:
	}
	// The next batch of the cancelled partition waits for the request in
	// flight: a window of one batch per partition.
	next := f.async(ctx, "t", 1, plain(t, 1))
	f.queued(t, "t", 1)
	o.releaseReq(1)
	if r := wait(t, other); r.err != nil || r.off != 0 {
		t.Fatalf("other produce: offset %d, %v", r.off, r.err)
	}
	if r := wait(t, next); r.err != nil || r.off != 3 {
		t.Fatalf("next produce of the cancelled partition: offset %d, %v; want 3 (after the cancelled batch, which landed)", r.off, r.err)
	}
	if got := f.end(t, "t", 3); got != 0 {
		t.Errorf("t/3 ends at %d: the cancelled queued batch was sent", got)
	}
	reqs, _, _ := o.snapshot()
	if len(reqs) != 3 || len(reqs[1]) != 2 || len(reqs[2]) != 1 {
		t.Errorf("requests %v, want [t/0] [t/1 t/2] [t/1]", reqs)
	}
}

// TestCancelledItemHoldsBackItsPartition: a batch cancelled while queued is
// dropped, and the marker its partition queued behind it is answered
// ErrNotSent, never sent: sent, it would take the dropped batch's offset
// and every record after it would be shifted. (A stopping partition
// cancels its first queued batch and then waits for the rest of its
// pipeline: a group agent that took the mirror over 0.7 s after the
// previous agent's clean stop found a marker where the source had a record,
// in 1 of 5 runs of TestAgentGroupAndLeaseDoNotMix on Kafka 4.4.0.)
func TestCancelledItemHoldsBackItsPartition(t *testing.T) {
	f := start(t)
	f.oneAtATime()
	o := observe(t, f.c, 1)
	f.topic(t, "c", 1)
	ctx := context.Background()
	ipid, epoch, err := f.w.InitProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := f.async(ctx, "c", 0, batch(t, ipid, epoch, 0, 0, 1))
	<-o.held
	cctx, cancel := context.WithCancel(ctx)
	cancelled := f.async(cctx, "c", 0, batch(t, ipid, epoch, 1, 0, 1))
	mk, err := f.w.MarkersAsync(ctx, Producer{ID: 1 << 62}, "c", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.queued(t, "c", 2)
	cancel()
	if r := wait(t, cancelled); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled queued batch: offset %d, %v", r.off, r.err)
	}
	o.releaseReq(0)
	if r := wait(t, first); r.err != nil || r.off != 0 {
		t.Fatalf("first batch: offset %d, %v", r.off, r.err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := mk.Wait(wctx); !errors.Is(err, ErrNotSent) {
		t.Fatalf("marker queued behind the cancelled batch: %v, want ErrNotSent", err)
	}
	if got := f.end(t, "c", 0); got != 1 {
		t.Fatalf("c/0 ends at %d, want 1: something queued behind the cancelled batch was written", got)
	}
	// Settled: the partition writes again.
	if r := wait(t, f.async(ctx, "c", 0, batch(t, ipid, epoch, 1, 0, 1))); r.err != nil || r.off != 1 {
		t.Fatalf("next batch once settled: offset %d, %v; want 1", r.off, r.err)
	}
}

// TestAbandonedSentItemIsAnsweredLater: a caller whose context ends while
// its item is in flight gets its context's error, and a later Wait with a
// context that lasts gets the broker's answer. A stopping partition mirror
// waits so for what it has on its way; when the first Wait kept the
// context's error, it returned with filler markers still on their way, and
// the next partition mirror of the same agent read the destination end
// before they landed and wrote a record where they then took its offset
// (TestMirrorRestartedInProcess in agent/partition).
func TestAbandonedSentItemIsAnsweredLater(t *testing.T) {
	f := start(t)
	o := observe(t, f.c, 1)
	f.topic(t, "a", 1)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	x, err := f.w.ProduceAsync(cctx, "a", 0, plain(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	<-o.held
	cancel()
	if _, err := x.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with the ended context: %v, want its error", err)
	}
	if x.Ready() {
		t.Fatal("the item is ready before the broker answered it")
	}
	o.releaseReq(0)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if off, err := x.Wait(wctx); err != nil || off != 0 {
		t.Fatalf("wait for the answer: offset %d, %v; want 0", off, err)
	}
	if got := f.end(t, "a", 0); got != 2 {
		t.Fatalf("a/0 ends at %d, want 2", got)
	}
}

// Transactional batches go alone in their request, even while plain ones
// to the same broker are coalesced.
func TestProduceTxnNotCoalesced(t *testing.T) {
	f := start(t)
	f.oneAtATime()
	o := observe(t, f.c, 1)
	f.topic(t, "t", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := f.w.InitTxn(ctx, "txn", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for part := int32(2); part < 4; part++ {
		if err := f.w.AddPartition(ctx, "txn", p, "t", part); err != nil {
			t.Fatal(err)
		}
	}
	first := f.async(ctx, "t", 0, plain(t, 1))
	<-o.held
	plainNext := f.async(ctx, "t", 1, plain(t, 1))
	f.queued(t, "t", 1)
	txns := make(chan result, 2)
	for part := int32(2); part < 4; part++ {
		go func() {
			off, err := f.w.ProduceTxn(ctx, "txn", "t", part, batch(t, p.ID, p.Epoch, 0, recordbatch.AttrTransactional, 1))
			txns <- result{off, err}
		}()
	}
	// The transactional requests queue behind the held one on the
	// connection, not in the sink.
	time.Sleep(50 * time.Millisecond)
	o.releaseReq(0)
	for _, ch := range []<-chan result{first, plainNext, txns, txns} {
		if r := wait(t, ch); r.err != nil || r.off != 0 {
			t.Errorf("produce: offset %d, %v", r.off, r.err)
		}
	}
	reqs, txn, _ := o.snapshot()
	n := 0
	for i, r := range reqs {
		if txn[i] {
			n++
			if len(r) != 1 {
				t.Errorf("transactional request with %v", r)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d transactional requests, want 2: %v", n, reqs)
	}
	if err := f.w.EndTxn(ctx, "txn", p, true); err != nil {
		t.Fatal(err)
	}
}

// One partition's batches are pipelined: while the first request is held,
// the next batches of the partition leave in requests of their own, up to
// its window (5 here), and the sixth waits; all land in sequence order.
func TestProducePipelinesOnePartition(t *testing.T) {
	f := start(t)
	f.w.near.inflight, f.w.near.window = 10, 5 // the partition's window, not the broker's, is the limit here
	o := observe(t, f.c, 1)
	f.topic(t, "t", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pid, epoch, err := f.w.InitProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ps []*Pending
	seqs := map[int32]int32{} // by partition
	send := func(part int32, n int) *Pending {
		x, err := f.w.ProduceAsync(ctx, "t", part, batch(t, pid, epoch, seqs[part], 0, n))
		if err != nil {
			t.Fatal(err)
		}
		seqs[part] += int32(n)
		return x
	}
	ps = append(ps, send(0, 2))
	<-o.held
	for range 5 {
		ps = append(ps, send(0, 2))
	}
	other := send(1, 1)
	// Five batches of t/0 are in requests (the window), the sixth waits.
	f.queued(t, "t", 1)
	l, err := f.w.meta.Leader(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.w.sink(ctx, l.Leader, topicPart{"t", 0})
	s.mu.Lock()
	busy, inflight := s.busy[topicPart{"t", 0}], s.inflight
	s.mu.Unlock()
	if busy != 5 || inflight < 6 {
		t.Fatalf("t/0 has %d batches in %d requests in flight, want 5, and t/1 in a sixth request", busy, inflight)
	}
	o.releaseReq(0)
	for i, x := range ps {
		off, err := x.Wait(ctx)
		if err != nil || off != int64(2*i) {
			t.Fatalf("batch %d of t/0: offset %d, %v; want %d", i, off, err, 2*i)
		}
	}
	if off, err := other.Wait(ctx); err != nil || off != 0 {
		t.Fatalf("t/1: offset %d, %v", off, err)
	}
	reqs, _, dups := o.snapshot()
	if len(dups) > 0 {
		t.Errorf("requests with a partition twice: %v", dups)
	}
	if len(reqs) < 6 {
		t.Errorf("%d requests for 6 batches of one partition: %v", len(reqs), reqs)
	}
}

// Many partitions, each pipelining its batches from one goroutine with the
// writer's window (full twice over), over two brokers: requests issued from
// several goroutines reach each broker in order, so no batch is refused out
// of sequence and every batch lands where its sequence says. Across a link
// of 15 ms each way too, where the brokers are far: two lanes each, and
// the far window, on Kafka 4.4.0 as well.
func TestProducePipelinedInOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []devcluster.Option
		window int
		lanes  int
	}{
		{"near", nil, NearWindow, 1},
		{"far", []devcluster.Option{devcluster.Latency(15 * time.Millisecond)}, FarWindow, 2},
		{"far/kafka", []devcluster.Option{devcluster.Engine(devcluster.Kafka), devcluster.Latency(15 * time.Millisecond)}, FarWindow, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, append(tc.opts, devcluster.Brokers(2))...)
			const parts = 12
			batches := 2 * tc.window
			f.topic(t, "t", parts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pid, epoch, err := f.w.InitProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A record at offset 0 of each partition first, again while a
			// new topic's leaders settle (Kafka), so that the pipelines
			// below meet no leadership error.
			for p := range int32(parts) {
				land(t, f.w, "t", p)
			}
			errs := make(chan error, parts)
			var wg sync.WaitGroup
			for p := range int32(parts) {
				wg.Go(func() {
					var (
						seq    int32
						next   = int64(1)
						window []*Pending
						wants  []int64
					)
					reap := func() error {
						off, err := window[0].Wait(ctx)
						if err != nil {
							return fmt.Errorf("t/%d batch at %d: %w", p, wants[0], err)
						}
						if off != wants[0] {
							return fmt.Errorf("t/%d: batch landed at %d, want %d", p, off, wants[0])
						}
						window, wants = window[1:], wants[1:]
						return nil
					}
					for i := range batches {
						n := 1 + (i+int(p))%4
						x, err := f.w.ProduceAsync(ctx, "t", p, batch(t, pid, epoch, seq, 0, n))
						if err != nil {
							errs <- err
							return
						}
						if x.Window() != tc.window {
							errs <- fmt.Errorf("t/%d: window %d, want %d", p, x.Window(), tc.window)
							return
						}
						window, wants = append(window, x), append(wants, next)
						seq, next = seq+int32(n), next+int64(n)
						if len(window) == tc.window {
							if err := reap(); err != nil {
								errs <- err
								return
							}
						}
					}
					for len(window) > 0 {
						if err := reap(); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// Every broker carries the partitions it leads over its lanes.
			f.w.mu.Lock()
			defer f.w.mu.Unlock()
			lanes := map[int32]map[int]bool{}
			for _, at := range f.w.laneOfTP {
				if lanes[at.node] == nil {
					lanes[at.node] = map[int]bool{}
				}
				lanes[at.node][at.n] = true
			}
			for node, ns := range lanes {
				if len(ns) != tc.lanes {
					t.Errorf("broker %d: its partitions took lanes %v, want %d lanes (round trip measured %v)", node, ns, tc.lanes, f.w.rtts[node])
				}
			}
			if len(lanes) != 2 {
				t.Errorf("partitions on brokers %v, want both", lanes)
			}
		})
	}
}

// markersRequests records the partitions of each WriteTxnMarkers request
// the cluster gets and how many markers each partition had in it.
func markersRequests(c *devcluster.Cluster) func() []map[topicPart]int {
	var mu sync.Mutex
	var reqs []map[topicPart]int
	kc := c.Kfake()
	kc.ControlKey(int16(kmsg.WriteTxnMarkers), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		n := map[topicPart]int{}
		for _, m := range kr.(*kmsg.WriteTxnMarkersRequest).Markers {
			for _, mt := range m.Topics {
				for _, p := range mt.Partitions {
					n[topicPart{mt.Topic, p}]++
				}
			}
		}
		mu.Lock()
		reqs = append(reqs, n)
		mu.Unlock()
		return nil, nil, false
	})
	return func() []map[topicPart]int {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[topicPart]int(nil), reqs...)
	}
}

// TestMarkersBehindAnsweredBatches: a partition's markers leave once every
// earlier batch of it is answered and nothing is in flight on the
// connection, coalesced with other partitions' markers in one
// WriteTxnMarkers request, and the batches after them land after them;
// after a failed batch, the partition's queued markers and batches are
// answered ErrNotSent, unsent, and once it has nothing left queued or in
// flight it writes again.
func TestMarkersBehindAnsweredBatches(t *testing.T) {
	f := start(t)
	f.w.near.inflight = 4
	o := observe(t, f.c, 1)
	markers := markersRequests(f.c)
	f.topic(t, "m", 3)
	ctx := context.Background()
	pid := Producer{ID: 1 << 62}
	ipid, epoch, err := f.w.InitProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idem := func(seq int32, n int) []byte { return batch(t, ipid, epoch, seq, 0, n) }

	// m/0: a batch held by the broker, then 2 markers and a batch queued
	// behind it; m/1: 3 markers with nothing before them.
	first := f.async(ctx, "m", 0, idem(0, 1))
	<-o.held
	mk0 := waitAsync(f.w.MarkersAsync(ctx, pid, "m", 0, 2))
	after := waitAsync(f.w.ProduceAsync(ctx, "m", 0, idem(1, 1)))
	mk1 := waitAsync(f.w.MarkersAsync(ctx, pid, "m", 1, 3))
	// m/1's markers wait too, for the connection: nothing else goes out
	// while they wait.
	f.queued(t, "m", 3)
	if got := markers(); len(got) != 0 {
		t.Fatalf("WriteTxnMarkers requests %v while a produce request is unanswered on the connection", got)
	}
	o.releaseReq(0)
	if r := wait(t, first); r.err != nil || r.off != 0 {
		t.Fatalf("first batch of m/0: offset %d, %v", r.off, r.err)
	}
	if r := wait(t, mk1); r.err != nil {
		t.Fatalf("markers of m/1: %v", r.err)
	}
	if r := wait(t, mk0); r.err != nil {
		t.Fatalf("markers of m/0: %v", r.err)
	}
	if got := markers(); len(got) != 1 || len(got[0]) != 2 || got[0][topicPart{"m", 1}] != 3 || got[0][topicPart{"m", 0}] != 2 {
		t.Fatalf("WriteTxnMarkers requests %v, want one with 2 markers of m/0 and 3 of m/1", got)
	}
	if got := f.end(t, "m", 1); got != 3 {
		t.Errorf("m/1 ends at %d, want 3", got)
	}
	if r := wait(t, after); r.err != nil || r.off != 3 {
		t.Fatalf("batch after the markers of m/0: offset %d, %v; want 3, behind them", r.off, r.err)
	}
	// Counted once that batch is answered: it leaves right behind the
	// markers, in a request of its own.
	if reqs, _, _ := o.snapshot(); len(reqs) != 2 {
		t.Errorf("produce requests %v, want m/0's first batch, then the one after its markers", reqs)
	}

	// m/2: a refused batch; the markers and the batch queued behind it
	// are not sent; then the partition writes again.
	fault := f.c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "m", Partitions: []int32{2}, Err: kerr.NotLeaderForPartition})
	defer fault.Remove()
	refused := waitAsync(f.w.ProduceAsync(ctx, "m", 2, idem(0, 1)))
	notSent := []<-chan result{
		waitAsync(f.w.MarkersAsync(ctx, pid, "m", 2, 1)),
		waitAsync(f.w.ProduceAsync(ctx, "m", 2, idem(1, 1))),
	}
	if r := wait(t, refused); !errors.Is(r.err, kerr.NotLeaderForPartition) {
		t.Fatalf("refused batch: offset %d, %v", r.off, r.err)
	}
	for i, ch := range notSent {
		if r := wait(t, ch); !errors.Is(r.err, ErrNotSent) {
			t.Errorf("item %d behind the refused batch: offset %d, %v; want ErrNotSent", i, r.off, r.err)
		}
	}
	if got := f.end(t, "m", 2); got != 0 {
		t.Fatalf("m/2 ends at %d: something behind the refused batch was written", got)
	}
	fault.Remove()
	if err := f.w.WriteMarkers(ctx, pid, "m", 2, 1); err != nil {
		t.Fatalf("markers of m/2 once its failure settled: %v", err)
	}
	if got := f.end(t, "m", 2); got != 1 {
		t.Errorf("m/2 ends at %d, want 1", got)
	}
}

// waitAsync waits for x's answer in the background (err: the error of the
// call that queued it).
func waitAsync(x *Pending, err error) <-chan result {
	ch := make(chan result, 1)
	if err != nil {
		ch <- result{-1, err}
		return ch
	}
	go func() {
		off, err := x.Wait(context.Background())
		ch <- result{off, err}
	}()
	return ch
}

// heldFirst is a writer with 4 requests in flight to a broker that holds
// its first produce request: the first batch of topic's partition 0 (of
// parts), written by an idempotent producer. What is queued next waits
// behind it until o.releaseReq(0).
type heldFirst struct {
	f     *fixture
	o     *observer
	ipid  int64
	epoch int16
	first <-chan result
}

func holdFirst(t *testing.T, topic string, parts int32) heldFirst {
	t.Helper()
	h := heldFirst{f: start(t)}
	h.f.w.near.inflight = 4
	h.o = observe(t, h.f.c, 1)
	h.f.topic(t, topic, parts)
	var err error
	if h.ipid, h.epoch, err = h.f.w.InitProducerID(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.first = h.f.async(context.Background(), topic, 0, batch(t, h.ipid, h.epoch, 0, 0, 1))
	<-h.o.held
	return h
}

// TestBatchesWaitForAQueuedMarker: once a partition's next item is a
// marker, waiting for its batch's answer, another partition's batch queued
// meanwhile does not go out in a request of its own, which the marker
// would then wait for too: it leaves right behind the marker, once the
// answer came.
func TestBatchesWaitForAQueuedMarker(t *testing.T) {
	h := holdFirst(t, "q", 2)
	f, o, ipid, epoch, first := h.f, h.o, h.ipid, h.epoch, h.first
	markers := markersRequests(f.c)
	ctx := context.Background()
	mk := waitAsync(f.w.MarkersAsync(ctx, Producer{ID: 1 << 62}, "q", 0, 1))
	other := waitAsync(f.w.ProduceAsync(ctx, "q", 1, batch(t, ipid, epoch, 0, 0, 2)))
	f.queued(t, "q", 2)
	if reqs, _, _ := o.snapshot(); len(reqs) != 1 {
		t.Fatalf("produce requests %v while q/0's marker waits for its batch, want only that batch's", reqs)
	}
	o.releaseReq(0)
	for name, ch := range map[string]<-chan result{"q/0's batch": first, "q/0's marker": mk, "q/1's batch": other} {
		if r := wait(t, ch); r.err != nil || r.off > 0 {
			t.Errorf("%s: offset %d, %v", name, r.off, r.err)
		}
	}
	if got := markers(); len(got) != 1 || got[0][topicPart{"q", 0}] != 1 {
		t.Errorf("WriteTxnMarkers requests %v, want one with q/0's marker", got)
	}
	if reqs, _, _ := o.snapshot(); len(reqs) != 2 || fmt.Sprint(reqs[1]) != fmt.Sprint([]topicPart{{"q", 1}}) {
		t.Errorf("produce requests %v, want q/0's batch, then q/1's", reqs)
	}
}

// TestBatchesFollowTheirMarkers (both engines): the batches queued at the
// head of their partitions leave right behind a markers request, before
// its answer, though markers stay queued: the batch behind the markers and
// another partition's batch, in one produce request; the partition's next
// markers still wait for that batch's answer. The network holds the
// requests until both are written, and the broker then appends every item
// where its place in the queue says.
func TestBatchesFollowTheirMarkers(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) {
			r, f := relayedWriter(t, devclustertest.Start(t, devcluster.Engine(engine)), 0)
			f.w.near.inflight = 4
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			land(t, f.w, "d", 0)
			land(t, f.w, "d", 1)
			pid := Producer{ID: 1 << 62}

			r.hold(true)
			first := waitAsync(f.w.ProduceAsync(ctx, "d", 0, plain(t, 1)))
			f.await(t, "d", func(s *sink) (bool, string) {
				return s.inflight == 1 && len(s.queue) == 0, fmt.Sprintf("%d requests in flight, %d items queued: d/0's first batch not sent", s.inflight, len(s.queue))
			})
			mk1 := waitAsync(f.w.MarkersAsync(ctx, pid, "d", 0, 1))
			behind := waitAsync(f.w.ProduceAsync(ctx, "d", 0, plain(t, 1)))
			mk2 := waitAsync(f.w.MarkersAsync(ctx, pid, "d", 0, 1))
			other := waitAsync(f.w.ProduceAsync(ctx, "d", 1, plain(t, 1)))
			f.queued(t, "d", 4)
			// The first batch goes on to the broker; what the writer sends
			// after its answer stays in the network.
			r.pass()
			f.await(t, "d", func(s *sink) (bool, string) {
				return s.inflight == 2 && len(s.queue) == 1 && s.queue[0].markers > 0,
					fmt.Sprintf("%d requests in flight and %d items queued, want 2 (the markers and the batches behind them) and 1 (d/0's next markers): the batches did not follow the markers", s.inflight, len(s.queue))
			})
			r.hold(false)
			for name, c := range map[string]struct {
				ch   <-chan result
				want int64
			}{"d/0's first batch": {first, 1}, "d/0's batch behind its markers": {behind, 3}, "d/1's batch": {other, 1}} {
				if got := wait(t, c.ch); got.err != nil || got.off != c.want {
					t.Errorf("%s: offset %d, %v; want %d", name, got.off, got.err, c.want)
				}
			}
			for name, ch := range map[string]<-chan result{"d/0's first markers": mk1, "d/0's second markers": mk2} {
				if got := wait(t, ch); got.err != nil {
					t.Errorf("%s: %v", name, got.err)
				}
			}
			if got := f.end(t, "d", 0); got != 5 {
				t.Errorf("d/0 ends at %d, want 5 (a record, then batch, marker, batch, marker)", got)
			}
		})
	}
}

// TestMarkersInARowLeaveTogether: a partition's marker items queued one
// behind the other (a source's commit markers in a row) leave in one
// WriteTxnMarkers request, one entry each in their order, and the batch
// after them lands after both.
func TestMarkersInARowLeaveTogether(t *testing.T) {
	h := holdFirst(t, "r", 2)
	f, o, ipid, epoch, first := h.f, h.o, h.ipid, h.epoch, h.first
	markers := markersRequests(f.c)
	ctx := context.Background()
	pid := Producer{ID: 1 << 62}
	m1 := waitAsync(f.w.MarkersAsync(ctx, pid, "r", 0, 1))
	m2 := waitAsync(f.w.MarkersAsync(ctx, pid, "r", 0, 2))
	other := waitAsync(f.w.MarkersAsync(ctx, pid, "r", 1, 1))
	after := waitAsync(f.w.ProduceAsync(ctx, "r", 0, batch(t, ipid, epoch, 1, 0, 1)))
	f.queued(t, "r", 4)
	o.releaseReq(0)
	for name, ch := range map[string]<-chan result{"r/0's batch": first, "r/0's first markers": m1, "r/0's second markers": m2, "r/1's marker": other} {
		if r := wait(t, ch); r.err != nil {
			t.Errorf("%s: %v", name, r.err)
		}
	}
	if r := wait(t, after); r.err != nil || r.off != 4 {
		t.Errorf("r/0's batch after the markers: offset %d, %v; want 4 (1 record, then 3 markers)", r.off, r.err)
	}
	if got := markers(); len(got) != 1 || got[0][topicPart{"r", 0}] != 3 || got[0][topicPart{"r", 1}] != 1 {
		t.Errorf("WriteTxnMarkers requests %v, want one with r/0's 3 markers and r/1's 1", got)
	}
}

// TestLanesDoNotWaitForEachOther: partitions on different lanes of a broker
// write over connections of their own, so a request the broker holds on
// one does not hold up the other (a broker handles one request of a
// connection at a time); a partition's batches keep their lane.
func TestLanesDoNotWaitForEachOther(t *testing.T) {
	f := start(t)
	f.w.near.lanes = 2
	o := observe(t, f.c, 1)
	f.topic(t, "l", 8)
	ctx := context.Background()
	l, err := f.w.meta.Leader(ctx, "l", 0)
	if err != nil {
		t.Fatal(err)
	}
	other := int32(-1)
	for p := int32(1); p < 8 && other < 0; p++ {
		if f.w.laneOf(ctx, l.Leader, "l", p) != f.w.laneOf(ctx, l.Leader, "l", 0) {
			other = p
		}
	}
	if other < 0 {
		t.Fatal("every partition of l takes the same lane")
	}
	held := f.async(ctx, "l", 0, plain(t, 1))
	<-o.held
	if r := wait(t, f.async(ctx, "l", other, plain(t, 2))); r.err != nil || r.off != 0 {
		t.Fatalf("l/%d while l/0's request is held: offset %d, %v", other, r.off, r.err)
	}
	select {
	case r := <-held:
		t.Fatalf("l/0 answered while held: %d, %v", r.off, r.err)
	default:
	}
	o.releaseReq(0)
	if r := wait(t, held); r.err != nil || r.off != 0 {
		t.Fatalf("l/0: offset %d, %v", r.off, r.err)
	}
}

// TestOrderedConnReopens: a broken ordered connection answers what it had
// in flight with its error, and the lane's next request opens a new one.
func TestOrderedConnReopens(t *testing.T) {
	f := start(t)
	f.topic(t, "r", 1)
	ctx := context.Background()
	if off, err := f.w.Produce(ctx, "r", 0, plain(t, 1)); err != nil || off != 0 {
		t.Fatalf("first produce: offset %d, %v", off, err)
	}
	l, err := f.w.meta.Leader(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	lane := f.w.laneOf(ctx, l.Leader, "r", 0)
	old, err := f.w.current(lane)
	if err != nil || old == nil {
		t.Fatalf("no connection after a produce: %v", err)
	}
	o := observe(t, f.c, 1)
	inFlight := f.async(ctx, "r", 0, plain(t, 1))
	<-o.held
	old.fail(errors.New("cut"))
	if r := wait(t, inFlight); r.err == nil {
		t.Errorf("the batch in flight on the broken connection: offset %d, no error", r.off)
	}
	if old.usable() {
		t.Error("the broken connection is still usable")
	}
	// The broker read the held request before the break: it lands.
	o.releaseReq(0)
	for deadline := time.Now().Add(10 * time.Second); f.end(t, "r", 0) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request read before the break did not land")
		}
	}
	if off, err := f.w.Produce(ctx, "r", 0, plain(t, 1)); err != nil || off != 2 {
		t.Fatalf("produce after the break: offset %d, %v; want 2, after it", off, err)
	}
	if c, _ := f.w.current(lane); c == old || c == nil {
		t.Error("the lane kept the broken connection")
	}
}

// TestLaneOfSpreads: a broker's partitions take its lanes evenly, in the
// order they first write, keep their lane while the broker leads them, and
// a partition whose leader moves frees its place on the old broker.
func TestLaneOfSpreads(t *testing.T) {
	// Both brokers measured, as near ones of three lanes.
	w := &Writer{near: reach{lanes: 3}, farRTT: farRTT, rtts: map[int32]time.Duration{1: 0, 2: 0}, laneOfTP: map[topicPart]laneAt{}, laneUse: map[lane]int{}}
	ctx := context.Background()
	var got []int
	for p := range int32(7) {
		got = append(got, w.laneOf(ctx, 1, "t", p).n)
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("lanes of t/0..6 on broker 1: %v, want %v", got, want)
	}
	for p := range int32(7) {
		if l := w.laneOf(ctx, 1, "t", p); l.n != got[p] {
			t.Errorf("t/%d moved from lane %d to %d while broker 1 leads it", p, got[p], l.n)
		}
	}
	// t/1 and t/4, both on lane 1, move to broker 2: lane 1 of broker 1
	// is then the least used (0, against 3 and 2), and the next new
	// partition takes it.
	if l := w.laneOf(ctx, 2, "t", 1); l != (lane{2, 0}) {
		t.Errorf("t/1 on broker 2: %v, want lane 0", l)
	}
	if l := w.laneOf(ctx, 2, "t", 4); l != (lane{2, 1}) {
		t.Errorf("t/4 on broker 2: %v, want lane 1", l)
	}
	if l := w.laneOf(ctx, 1, "u", 0); l != (lane{1, 1}) {
		t.Errorf("u/0 on broker 1 after lane 1 emptied: %v, want lane 1", l)
	}
	if use := w.laneUse[lane{1, 1}]; use != 1 {
		t.Errorf("lane 1 of broker 1 carries %d partitions, want 1", use)
	}
}

// TestStats: the process-wide counters count every request the writer
// sends, and what it carries: plain produce requests and their batches,
// WriteTxnMarkers requests and their markers, transactional produces.
func TestStats(t *testing.T) {
	f := start(t)
	f.topic(t, "s", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pid, epoch, err := f.w.InitProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := ReadStats()
	if _, err := f.w.Produce(ctx, "s", 0, batch(t, pid, epoch, 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := f.w.WriteMarkers(ctx, Producer{ID: 1 << 62}, "s", 0, 2); err != nil {
		t.Fatal(err)
	}
	p, err := f.w.InitTxn(ctx, "stats", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.w.AddPartition(ctx, "stats", p, "s", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.w.ProduceTxn(ctx, "stats", "s", 1, batch(t, p.ID, p.Epoch, 0, recordbatch.AttrTransactional, 1)); err != nil {
		t.Fatal(err)
	}
	if err := f.w.EndTxn(ctx, "stats", p, false); err != nil {
		t.Fatal(err)
	}
	after := ReadStats()
	got := Stats{
		Produce: after.Produce - before.Produce, ProduceBatches: after.ProduceBatches - before.ProduceBatches,
		Markers: after.Markers - before.Markers, MarkersWritten: after.MarkersWritten - before.MarkersWritten,
		ProduceTxn: after.ProduceTxn - before.ProduceTxn, Transactions: after.Transactions - before.Transactions,
	}
	if want := (Stats{Produce: 1, ProduceBatches: 1, Markers: 1, MarkersWritten: 2, ProduceTxn: 1, Transactions: 1}); got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
}

// TestMarkersOrBatchesFirst: what an idle connection with markers queued
// sends first. Markers when every queued marker may leave now (the batches
// follow them in the same round); else the kind more partitions may send
// next, as the others wait a round. The kind of the first queued item, the
// earlier rule, gives the other order in both cases.
func TestMarkersOrBatchesFirst(t *testing.T) {
	type item struct {
		part   int32
		marker bool
	}
	for _, tc := range []struct {
		name  string
		queue []item
		want  []string // the requests after the held one, in order
	}{
		{"every marker may leave: markers, then the batch behind them",
			[]item{{1, false}, {2, true}}, []string{"markers", "produce"}},
		{"a marker behind its partition's batch: the two batches, then the markers",
			[]item{{2, true}, {0, false}, {0, true}, {1, false}}, []string{"produce", "markers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t)
			f.w.near.inflight = 1
			o := observe(t, f.c, 1)
			var mu sync.Mutex
			var sent []string
			kc := f.c.Kfake()
			for key, kind := range map[int16]string{int16(kmsg.Produce): "produce", int16(kmsg.WriteTxnMarkers): "markers"} {
				kc.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
					kc.KeepControl()
					mu.Lock()
					sent = append(sent, kind)
					mu.Unlock()
					return nil, nil, false
				})
			}
			f.topic(t, "k", 4)
			ctx := context.Background()
			held := f.async(ctx, "k", 3, plain(t, 1))
			<-o.held
			pid := Producer{ID: 1 << 62}
			var answers []<-chan result
			for _, it := range tc.queue {
				if it.marker {
					answers = append(answers, waitAsync(f.w.MarkersAsync(ctx, pid, "k", it.part, 1)))
				} else {
					answers = append(answers, waitAsync(f.w.ProduceAsync(ctx, "k", it.part, plain(t, 1))))
				}
			}
			f.queued(t, "k", len(tc.queue))
			o.releaseReq(0)
			for i, ch := range append(answers, held) {
				if r := wait(t, ch); r.err != nil {
					t.Errorf("item %d: %v", i, r.err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) == 0 || !slices.Equal(sent[1:], tc.want) {
				t.Errorf("requests %v, want the held produce, then %v", sent, tc.want)
			}
		})
	}
}
