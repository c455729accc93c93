package fetcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// testCluster starts a one-broker kfake cluster with topics of parts
// partitions each, and returns a client of it.
func testCluster(t *testing.T, parts int32, topics ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// requested returns the offset each partition of req is fetched from.
func requested(t *testing.T, req *kmsg.FetchRequest) map[TP]int64 {
	t.Helper()
	out := map[TP]int64{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			tp := TP{rt.Topic, rp.Partition}
			if _, dup := out[tp]; dup {
				t.Fatalf("%s is in the request twice", tp)
			}
			out[tp] = rp.FetchOffset
		}
	}
	return out
}

// TestBuildRequestSendsWhatItRecords checks the invariant the fetch session
// rests on: every partition buildRequest records in sess.sent (what the
// broker's session is taken to hold) is in the request it returns, at that
// offset. A partition recorded but not sent is never sent again: an
// incremental fetch leaves it out as unchanged, so the broker serves it from
// an older offset (stale data) or, if the lost request created the session,
// never serves it at all (a stall). Requests for several topics used to lose
// partitions this way, depending on map order, so each case runs many times.
func TestBuildRequestSendsWhatItRecords(t *testing.T) {
	topics := []string{"a", "b", "c"}
	_, cl := testCluster(t, 4, topics...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	meta := leaders.New(cl)
	f := New(cl, meta, Options{})
	var broker int32 = -1
	for _, topic := range topics {
		for p := range int32(4) {
			tp := TP{topic, p}
			f.Assign(tp, 0)
			l, err := meta.Leader(ctx, topic, p)
			if err != nil {
				t.Fatal(err)
			}
			f.parts[tp].leader, f.parts[tp].epoch = l.Leader, l.Epoch
			broker = l.Leader
		}
	}

	// build builds the next request and gives its budget back, as the
	// loop does once a request is answered.
	build := func(sess *session) *kmsg.FetchRequest {
		req, _, _ := f.buildRequest(ctx, loopKey{broker, 0}, sess)
		if req != nil {
			f.opts.Budget.Release(int64(req.MaxBytes))
		}
		return req
	}
	check := func(round int, what string, sess *session, want map[TP]int64) {
		t.Helper()
		req := build(sess)
		if req == nil {
			t.Fatalf("round %d, %s: no request", round, what)
		}
		got := requested(t, req)
		for tp, off := range want {
			if o, ok := got[tp]; !ok || o != off {
				t.Fatalf("round %d, %s: %s is recorded as sent at %d but the request has %v (at %d)", round, what, tp, off, ok, o)
			}
		}
		for tp, s := range sess.sent {
			if o, ok := got[tp]; ok && o != s.offset {
				t.Fatalf("round %d, %s: %s sent at %d, recorded at %d", round, what, tp, o, s.offset)
			}
		}
	}

	for round := range 100 {
		// A new session: a full fetch of every partition.
		sess := newSession(&f.opts)
		all := map[TP]int64{}
		for tp, p := range f.parts {
			all[tp] = p.offset
		}
		check(round, "full fetch", &sess, all)
		if len(sess.sent) != len(all) {
			t.Fatalf("round %d: %d partitions recorded as sent, want %d", round, len(sess.sent), len(all))
		}

		// The session exists; every partition moved: an incremental
		// fetch must carry every new offset.
		sess.id = 1
		moved := map[TP]int64{}
		for tp, p := range f.parts {
			p.offset += int64(1 + round%3)
			moved[tp] = p.offset
		}
		check(round, "incremental fetch", &sess, moved)

		// Nothing moved: nothing to send.
		req := build(&sess)
		if n := len(requested(t, req)); n != 0 {
			t.Fatalf("round %d: an unchanged session re-sends %d partitions", round, n)
		}
	}
}

// TestSessionFetchReachesEveryEnd runs the fetcher against kfake the way the
// agent does (read_committed, incremental sessions, one broker leading
// partitions of two topics) while a transaction spanning every partition
// holds each one's last stable offset below its high watermark, then ends
// the transaction and requires every partition to be fetched to its end.
// With partitions lost from fetch requests (see above), some partition
// stopped being fetched, for good, in most rounds.
//
// With more connections (Options.Connections), the partitions are spread
// over the broker's loops, every loop fetches on its own connection, and
// every partition still reaches its end.
func TestSessionFetchReachesEveryEnd(t *testing.T) {
	for _, conns := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d more connections", conns), func(t *testing.T) { testSessionFetchReachesEveryEnd(t, conns) })
	}
}

// fetchCounter counts the fetch requests a client writes.
type fetchCounter struct{ n atomic.Int64 }

func (h *fetchCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		h.n.Add(1)
	}
}

func testSessionFetchReachesEveryEnd(t *testing.T, conns int) {
	topics := []string{"ledger", "events"}
	const parts = 4
	c, cl := testCluster(t, parts, topics...)
	var extra []*kgo.Client
	var counters []*fetchCounter
	for range conns {
		h := &fetchCounter{}
		ecl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(h))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ecl.Close)
		extra = append(extra, ecl)
		counters = append(counters, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	plain, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("held-open"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	produce := func(cl *kgo.Client, n int, what string) {
		t.Helper()
		var rs []*kgo.Record
		for _, topic := range topics {
			for p := range int32(parts) {
				for i := range n {
					rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s %d", what, i)})
				}
			}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends := func() map[TP]int64 {
		t.Helper()
		out := map[TP]int64{}
		for _, topic := range topics {
			for p := range int32(parts) {
				b, err := leaders.New(cl).Bounds(ctx, topic, p)
				if err != nil {
					t.Fatal(err)
				}
				out[TP{topic, p}] = b.HighWatermark
			}
		}
		return out
	}

	for round := range 5 {
		// Stable data, then a transaction over every partition, held
		// open, with more plain data behind it.
		produce(plain, 1+round, fmt.Sprintf("round %d before", round))
		stable := ends()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(txn, 2, fmt.Sprintf("round %d txn", round))
		produce(plain, 3, fmt.Sprintf("round %d behind", round))

		// A new fetcher, so a new session, reading everything from 0.
		f := New(cl, leaders.New(cl), Options{MaxWait: 100 * time.Millisecond, Connections: extra})
		fctx, fcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var mu sync.Mutex
		pos := map[TP]int64{}
		moved := make(chan struct{}, 1)
		for _, topic := range topics {
			for p := range int32(parts) {
				tp := TP{topic, p}
				ch, _ := f.Assign(tp, 0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-fctx.Done():
							return
						case ck := <-ch:
							if ck.Err != nil {
								t.Errorf("%s: %v", tp, ck.Err)
							}
							next := int64(-1)
							for b, err := range recordbatch.All(ck.Records) {
								if err != nil {
									t.Errorf("%s: %v", tp, err)
									break
								}
								next = b.LastOffset() + 1
							}
							f.Done(ck)
							mu.Lock()
							if next > pos[tp] {
								pos[tp] = next
							}
							mu.Unlock()
							select {
							case moved <- struct{}{}:
							default:
							}
						}
					}
				}()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.Run(fctx)
		}()
		reach := func(want map[TP]int64, what string) {
			t.Helper()
			deadline := time.After(10 * time.Second)
			for {
				mu.Lock()
				var behind []string
				for tp, end := range want {
					if pos[tp] != end {
						behind = append(behind, fmt.Sprintf("%s at %d of %d", tp, pos[tp], end))
					}
				}
				mu.Unlock()
				if len(behind) == 0 {
					return
				}
				select {
				case <-moved:
				case <-time.After(50 * time.Millisecond):
				case <-deadline:
					t.Fatalf("round %d, %s: partitions stopped being fetched: %v", round, what, behind)
				}
			}
		}
		// read_committed stops at the open transaction...
		reach(stable, "transaction open")
		// ...and goes on to the end once it is committed.
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		reach(ends(), "transaction committed")
		fcancel()
		wg.Wait()
		// Eight partitions of one broker over 1+conns loops: as even as
		// they divide.
		use := make([]int, 1+conns)
		for _, p := range f.parts {
			use[p.stream]++
		}
		for s, n := range use {
			if n < 8/(1+conns) || n > (8+conns)/(1+conns) {
				t.Fatalf("round %d: partitions per loop %v, want them spread evenly", round, use)
			}
			if s > 0 && counters[s-1].n.Load() == 0 {
				t.Fatalf("round %d: loop %d fetched %d partitions, but its connection carried no fetch", round, s, n)
			}
		}
	}
}

// TestShareGrowsWhileFull: a partition whose fetches come back full with a
// backlog behind them gets a larger share of each fetch (one fetch in
// flight per broker moves one share per round trip), and stays under
// growMaxBytes.
func TestShareGrowsWhileFull(t *testing.T) {
	c, cl := testCluster(t, 1, "backlog")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(64<<10),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	value := make([]byte, 1000)
	var rs []*kgo.Record
	for range 8000 { // about 8 MB in batches of up to 64 KiB
		rs = append(rs, &kgo.Record{Topic: "backlog", Value: value})
	}
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	const start = 64 << 10
	f := New(cl, leaders.New(cl), Options{PartitionMaxBytes: start, MaxWait: 50 * time.Millisecond})
	ch, _ := f.Assign(TP{"backlog", 0}, 0)
	go func() { _ = f.Run(ctx) }()
	var largest int
	for got := 0; got < 8000; {
		var ck Chunk
		select {
		case ck = <-ch:
		case <-ctx.Done():
			t.Fatalf("read %d of 8000 records", got)
		}
		largest = max(largest, len(ck.Records))
		for b, err := range recordbatch.All(ck.Records) {
			if err != nil {
				t.Fatal(err)
			}
			got = int(b.LastOffset() + 1)
		}
		f.Done(ck)
	}
	if largest < 8*start {
		t.Errorf("largest chunk %d bytes: the share did not grow from %d while fetches came back full", largest, start)
	}
	if largest > growMaxBytes+(64<<10) {
		t.Errorf("largest chunk %d bytes, above growMaxBytes %d", largest, growMaxBytes)
	}
}

// TestGrowReservation: a loop reserves more while its fetches come back
// full and less while they come back nearly empty (long polls of idle
// partitions), between a partition share and MaxBytes.
func TestGrowReservation(t *testing.T) {
	o := Options{MaxBytes: 32 << 20, PartitionMaxBytes: 1 << 20}
	for _, tc := range []struct {
		name                     string
		want, reserved, returned int64
		next                     int64
	}{
		{"full: doubles", 4 << 20, 4 << 20, 4 << 20, 8 << 20},
		{"three quarters full: doubles", 4 << 20, 4 << 20, 3 << 20, 8 << 20},
		{"an oversized batch: doubles", 1 << 20, 1 << 20, 3 << 20, 2 << 20},
		{"full at MaxBytes: stays", 32 << 20, 32 << 20, 32 << 20, 32 << 20},
		{"half full: stays", 8 << 20, 8 << 20, 4 << 20, 8 << 20},
		{"nearly empty: halves", 8 << 20, 8 << 20, 1 << 10, 4 << 20},
		{"empty at a share: halves", 1 << 20, 1 << 20, 0, 512 << 10},
		{"empty at the idle reservation: stays", idleReservation, idleReservation, 0, idleReservation},
		{"an oversized batch after idling: doubles", idleReservation, idleReservation, 900 << 10, 2 * idleReservation},
		{"reserved less than wanted, full: doubles the want", 8 << 20, 2 << 20, 2 << 20, 16 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := session{want: tc.want}
			s.growReservation(&o, tc.reserved, tc.returned)
			if s.want != tc.next {
				t.Fatalf("next reservation %d, want %d", s.want, tc.next)
			}
		})
	}
}

// TestRequestsReserveBudget: a fetch holds its MaxBytes of the budget until
// it is answered, so loops fetching at once (two per broker here) never ask
// for more than the budget between them, and a loop that finds it taken
// waits for bytes to be released.
func TestRequestsReserveBudget(t *testing.T) {
	_, cl := testCluster(t, 2, "t")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const limit = 5 << 20
	budget := NewBudget(limit)
	// A second loop per broker, on the same client.
	f := New(cl, leaders.New(cl), Options{Budget: budget, MaxBytes: 4 << 20, PartitionMaxBytes: 1 << 20, Connections: []*kgo.Client{cl}})
	for p := range int32(2) {
		f.Assign(TP{"t", p}, 0)
		f.mu.Lock()
		f.setLeaderLocked(f.parts[TP{"t", p}], 0, 0)
		f.mu.Unlock()
	}
	// Both loops are in a backlog: their last fetches came back full.
	var a, b session
	a.reset()
	b.reset()
	a.want, b.want = 4<<20, 4<<20
	first, _, _ := f.buildRequest(ctx, loopKey{0, 0}, &a)
	second, _, _ := f.buildRequest(ctx, loopKey{0, 1}, &b)
	if first == nil || second == nil {
		t.Fatalf("with 5 MiB to share, both loops should fetch: %v, %v", first != nil, second != nil)
	}
	if got := int64(first.MaxBytes) + int64(second.MaxBytes); got > limit {
		t.Fatalf("two fetches at once ask for %d bytes, more than the budget's %d", got, limit)
	}
	if int64(second.MaxBytes) != limit-4<<20 {
		t.Fatalf("the second fetch asks for %d bytes, want what the first left: %d", second.MaxBytes, limit-4<<20)
	}
	// The budget is spoken for: a third request must wait for a release.
	var c session
	c.reset()
	c.want = 1 << 20
	if req, _, wait := f.buildRequest(ctx, loopKey{0, 1}, &c); req != nil || wait == nil {
		t.Fatalf("with the budget reserved, a request went out (%v) or had nothing to wait on", req != nil)
	} else {
		budget.Release(int64(first.MaxBytes))
		select {
		case <-wait:
		case <-ctx.Done():
			t.Fatal("releasing a reservation did not wake the waiting loop")
		}
	}
	if used := budget.Used(); used != int64(second.MaxBytes) {
		t.Fatalf("budget holds %d bytes, want the second fetch's %d", used, second.MaxBytes)
	}
}

// TestShareWithinMaxBytes: a partition share configured above MaxBytes is
// cut to it, so that a loop's first fetch asks for no more than MaxBytes
// (and, with the budget free, is sent at all).
func TestShareWithinMaxBytes(t *testing.T) {
	_, cl := testCluster(t, 1, "t")
	f := New(cl, leaders.New(cl), Options{Budget: NewBudget(8 << 20), MaxBytes: 512 << 10, PartitionMaxBytes: 1 << 20})
	f.Assign(TP{"t", 0}, 0)
	f.mu.Lock()
	f.setLeaderLocked(f.parts[TP{"t", 0}], 0, 0)
	f.mu.Unlock()
	sess := newSession(&f.opts)
	req, _, _ := f.buildRequest(context.Background(), loopKey{0, 0}, &sess)
	if req == nil || req.MaxBytes != 512<<10 {
		t.Fatalf("first fetch %v; want one asking for MaxBytes, 512 KiB", req)
	}
}

// TestIdleLoopsLeaveTheBudget: loops whose partitions have nothing new come
// down to idleReservation each, not a partition share, so that the Budget
// stays with the loops that have data; a record produced then still comes
// back at once.
func TestIdleLoopsLeaveTheBudget(t *testing.T) {
	c, cl := testCluster(t, 4, "t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	budget := NewBudget(64 << 20)
	// A second loop for the broker, on the same client.
	f := New(cl, leaders.New(cl), Options{Budget: budget, MaxWait: 20 * time.Millisecond, Connections: []*kgo.Client{cl}})
	chunks := map[TP]<-chan Chunk{}
	for p := range int32(4) {
		chunks[TP{"t", p}], _ = f.Assign(TP{"t", p}, 0)
	}
	go func() { _ = f.Run(ctx) }()

	// Halving from a share to 64 KiB takes four fetches of each loop.
	time.Sleep(time.Second)
	var most int64
	for range 200 {
		most = max(most, budget.Used())
		time.Sleep(2 * time.Millisecond)
	}
	if most == 0 {
		t.Fatal("no loop held any budget: none fetched")
	}
	if most > 2*idleReservation {
		t.Errorf("two idle loops held up to %d bytes of the budget, want at most %d (%d each)", most, 2*idleReservation, idleReservation)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	big := make([]byte, 300<<10) // one batch above the idle loop's MaxBytes
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: 2, Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for got := false; !got; {
		select {
		case ch := <-chunks[TP{"t", 2}]:
			if ch.Err != nil {
				t.Fatal(ch.Err)
			}
			got = len(ch.Records) >= len(big) // chunks without records carry ends
			f.Done(ch)
		case <-ctx.Done():
			t.Fatal("the record produced to an idle partition never came back")
		}
	}
}

// TestCutFetchGrows: a response that leaves a partition's committed data
// behind though the partition sent nothing (the request's MaxBytes ran out
// before it) counts as full, so the loop's next reservation doubles; one
// whose empty partitions have nothing committed past their offset does not.
func TestCutFetchGrows(t *testing.T) {
	_, cl := testCluster(t, 2, "t")
	ctx := context.Background()
	f := New(cl, leaders.New(cl), Options{})
	gens := map[TP]uint64{}
	for p := range int32(2) {
		tp := TP{"t", p}
		_, gens[tp] = f.Assign(tp, 0)
		f.parts[tp].leader = 0
	}
	batch := oneBatch(t)
	for _, tc := range []struct {
		name string
		lso  int64 // partition 1's last stable offset; it sends no records
		cut  bool
	}{
		{"partition 1 left behind", 5, true},
		{"partition 1 has nothing committed", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for p := range int32(2) {
				f.parts[TP{"t", p}].offset = 0
			}
			resp := kmsg.NewPtrFetchResponse()
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = "t"
			p0, p1 := kmsg.NewFetchResponseTopicPartition(), kmsg.NewFetchResponseTopicPartition()
			p0.Partition, p0.HighWatermark, p0.LastStableOffset, p0.RecordBatches = 0, 1, 1, batch
			p1.Partition, p1.HighWatermark, p1.LastStableOffset = 1, tc.lso, tc.lso
			rt.Partitions = append(rt.Partitions, p0, p1)
			resp.Topics = append(resp.Topics, rt)
			var sess session
			sess.reset()
			returned, cut := f.handleResponse(ctx, loopKey{0, 0}, &sess, resp, gens)
			if returned != int64(len(batch)) || cut != tc.cut {
				t.Fatalf("returned %d, cut %v; want %d, %v", returned, cut, len(batch), tc.cut)
			}
			for p := range int32(2) {
				for len(f.parts[TP{"t", p}].out) > 0 {
					f.Done(<-f.parts[TP{"t", p}].out)
				}
			}
		})
	}
}

// oneBatch is a raw batch of one record at offset 0.
func oneBatch(t *testing.T) []byte {
	t.Helper()
	b, err := recordbatch.Build(recordbatch.CodecNone, 0, 0, 0, -1, -1, -1, []recordbatch.Record{{Offset: 0, Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGenerationsAreNeverReused: a fetch still on its way for a partition
// carries the generation it was built with. A partition removed and
// assigned again (a partition mirror stopped and started again in the same
// agent) must get a generation that no such fetch carries, or that fetch's
// chunk is delivered as the answer to the new offset. The partition mirror
// then took the offsets between the two for a source hole and wrote filler
// markers over records (TestMirrorRestartedInProcess in agent/partition).
func TestGenerationsAreNeverReused(t *testing.T) {
	_, cl := testCluster(t, 1, "a")
	f := New(cl, leaders.New(cl), Options{})
	tp := TP{"a", 0}
	seen := map[uint64]string{}
	note := func(what string, gen uint64) {
		t.Helper()
		if was, ok := seen[gen]; ok {
			t.Fatalf("%s got generation %d, which %s had", what, gen, was)
		}
		seen[gen] = what
	}
	_, g := f.Assign(tp, 0)
	note("the first assign", g)
	note("a seek", f.Seek(tp, 3))
	f.Remove(tp)
	_, g = f.Assign(tp, 5)
	note("the assign after a remove", g)
	f.Assign(TP{"a", 1}, 0)
	note("a seek after another partition's assign", f.Seek(tp, 7))
}
