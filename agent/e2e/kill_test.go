package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestKillRestart kills the agent process with SIGKILL twenty times at
// random moments while producers keep writing to the source, each time
// starting a new agent process on the same config and state topic, and then
// checks that the destination is offset-identical to the source: no record
// lost, none duplicated, every offset the same, at both isolation levels.
// One topic gets plain records, the other transactions, a third of them
// aborted (destination transactions, fillers and the restart protocol that
// settles the agent's transactional ids).
//
// The destination delays every produce request of the mirror topics by a
// few milliseconds (network latency), so that many kills land with a write
// in flight. A request whose agent was killed while it was delayed is held
// further, until a new agent has read that partition's log end (its
// ListOffsets for the high watermark) and then written 0 to 7 batches
// there: the late request of a killed process that DESIGN §3 says the
// broker must deduplicate or reject (same producer id, epoch and sequence
// as the new agent's write of the same batch).
//
// KMIRROR_KILL_SEED=N replays a run's kill delays and latencies.
func TestKillRestart(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KMIRROR_KILL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("KMIRROR_KILL_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (rerun with KMIRROR_KILL_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))

	const kills = 20
	specs := []workload.Spec{{
		Topic: "orders", Partitions: 3, Seed: seed,
		Codecs:       workload.AllCodecs,
		NullKeyEvery: 17, EmptyKeyEvery: 23, NullValueEvery: 29, EmptyValueEvery: 31,
		Headers: true, ExplicitTimestamps: true,
	}, {
		Topic: "payments", Partitions: 3, Seed: seed + 1,
		Codecs:  []string{workload.CodecZstd, workload.CodecNone, workload.CodecLz4, workload.CodecSnappy, workload.CodecGzip},
		Headers: true, ExplicitTimestamps: true,
		TransactionalID: "payments", AbortEvery: 3,
	}}
	topics := specTopics(specs)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.Brokers(3), devcluster.KfakeOptions(kfake.SeedTopics(3, topics...)))
	dst := devclustertest.Start(t, devcluster.Name("dst"), devcluster.Brokers(3))
	lat := injectLatency(t, dst.Kfake(), topics, seed)

	stopProducing := runProducers(ctx, t, src, specs, 1000, 200)

	setup := writeAgentConfig(t, dst, agentMirror{Name: "dr", Source: src, Topics: topics})
	a := startAgentProcess(t, setup, "agent-00")
	var inFlight, copying, starting int
	for i := 1; i <= kills; i++ {
		delay := 100*time.Millisecond + time.Duration(rng.Int64N(int64(1400*time.Millisecond)))
		select {
		case <-ctx.Done():
			t.Fatalf("kill %d: %v", i, ctx.Err())
		case <-a.exited:
			t.Fatalf("%s exited on its own: %v", a.name, a.waitErr)
		case <-time.After(delay): // the deliberate random kill moment
		}
		// What the agent was doing: its own describe, then whether a
		// write of it is in flight at the destination.
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		ms, derr := a.Describe(dctx)
		dcancel()
		busy := lat.InFlight()
		a.Kill()
		lat.Killed()
		a.TailLines = 12
		var mirrored int64
		var retries int
		mirroring := derr == nil
		for _, p := range describedPartitions(ms) {
			mirrored += p.Records
			retries += p.Retries
			if p.State == mirrorapi.StateFailed {
				logBatches(ctx, t, dst, p.Topic, p.Partition)
				t.Fatalf("before kill %d: %s/%d FAILED: %s", i, p.Topic, p.Partition, p.Reason)
			}
			mirroring = mirroring && p.State == mirrorapi.StateMirroring
		}
		switch {
		case busy > 0:
			inFlight++
		case mirroring && mirrored > 0:
			copying++
		default:
			starting++
		}
		t.Logf("kill %2d after %4dms: writes in flight %d, partitions mirroring %v, records mirrored by this process %d, retries %d",
			i, delay.Milliseconds(), busy, mirroring, mirrored, retries)
		lat.Arm()
		a = startAgentProcess(t, setup, fmt.Sprintf("agent-%02d", i))
	}
	stats := stopProducing()
	t.Logf("%d kills: %d with a write in flight, %d more while copying, %d before copying started", kills, inFlight, copying, starting)
	for _, st := range stats {
		t.Logf("%s: %d records produced (%d aborted), per partition %v, batches by codec %v",
			st.Spec.Topic, st.Records, st.Aborted, st.PerPartition, st.Batches)
	}

	ends := assertSettled(ctx, t, src, dst, topics, lat, a)
	for _, st := range stats {
		topic := st.Spec.Topic
		// Markers take offsets too: a transactional topic ends past its
		// records.
		plain := st.Spec.TransactionalID == ""
		for p, n := range st.PerPartition {
			if e := ends[topic][p]; (plain && e != n) || e < n {
				t.Errorf("%s/%d: source high watermark %d, but the producer had %d records acknowledged", topic, p, e, n)
			}
		}
	}
	a.Stop()
}

// assertSettled waits until a has mirrored each topic up to the source's
// ends, lets every late produce request lat holds land, and checks that no
// log end moved then, that each topic is offset-identical to the source at
// both isolation levels, and that no transaction of an agent is left open
// on the destination (the source is fully decided by then). It returns the
// topics' ends.
func assertSettled(ctx context.Context, t *testing.T, src, dst *devcluster.Cluster, topics []string, lat *latency, a *agentProcess) map[string]map[int32]int64 {
	t.Helper()
	srcCl := newClient(t, src)
	dstCl := newClient(t, dst)
	ends := map[string]map[int32]int64{}
	for _, topic := range topics {
		ends[topic] = waitCaughtUp(ctx, t, srcCl, dstCl, topic, a, 60*time.Second)
	}
	// Every request of a killed or frozen agent must have been applied
	// (or refused) before the comparison, or it could land after it.
	lat.ReleaseAll(ctx, t)
	held, late := lat.Stats()
	t.Logf("late produce requests of killed or frozen agents: %d held past the kill or takeover, released %v", held, late)
	for _, topic := range topics {
		if again := waitCaughtUp(ctx, t, srcCl, dstCl, topic, a, 30*time.Second); fmt.Sprint(again) != fmt.Sprint(ends[topic]) {
			t.Errorf("%s: log ends moved after the late requests settled: %v, then %v", topic, ends[topic], again)
		}
		assertIdentical(ctx, t, srcCl, dstCl, topic)
	}
	assertNoOpenAgentTxns(t, kadm.NewClient(dstCl))
	return ends
}

// newClient returns a plain client of c, closed with the test.
func newClient(t testing.TB, c *devcluster.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitCaughtUp polls until every partition's destination high watermark
// equals its source high watermark and the agent describes every partition
// as MIRRORING with no lag, and returns the ends.
func waitCaughtUp(ctx context.Context, t testing.TB, srcCl, dstCl *kgo.Client, topic string, a *agentProcess, timeout time.Duration) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sa, da := kadm.NewClient(srcCl), kadm.NewClient(dstCl)
	var last string
	for {
		ends, why := caughtUp(ctx, sa, da, topic, a)
		if why == "" {
			return ends
		}
		if strings.Contains(why, string(mirrorapi.StateFailed)) {
			t.Fatalf("the mirror will not catch up: %s", why) // FAILED stays until recovered
		}
		last = why
		select {
		case <-ctx.Done():
			// A goroutine dump in the agent's log shows where it waits.
			_ = a.cmd.Process.Signal(syscall.SIGQUIT)
			<-a.exited
			a.TailLines = 3000
			t.Fatalf("the destination did not catch up within %v: %s", timeout, last)
		case <-a.exited:
			t.Fatalf("%s exited: %v", a.name, a.waitErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// caughtUp returns the source ends when the mirror has caught up, else why
// not. The agent's describe comes first: until the agent has created the
// destination topic, a client's lookup of it is remembered as unknown for
// the client's metadata min age (5s), which would slow the poll down.
func caughtUp(ctx context.Context, sa, da *kadm.Client, topic string, a *agentProcess) (map[int32]int64, string) {
	ms, err := a.Describe(ctx)
	if err != nil {
		return nil, fmt.Sprintf("describe: %v", err)
	}
	var ps []mirrorapi.Partition
	for _, p := range describedPartitions(ms) {
		if p.Topic == topic {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return nil, "describe shows no partition of " + topic
	}
	for _, p := range ps {
		if p.State != mirrorapi.StateMirroring || p.Lag != 0 {
			return nil, fmt.Sprintf("%s/%d: %s %s, destination offset %d, lag %d (source high watermark %d, last stable offset %d)",
				topic, p.Partition, p.State, p.Reason, p.DestinationOffset, p.Lag, p.SourceOffset, p.SourceLastStable)
		}
	}
	se, err := sa.ListEndOffsets(ctx, topic)
	if err == nil {
		err = se.Error()
	}
	if err != nil {
		return nil, fmt.Sprintf("source offsets: %v", err)
	}
	de, err := da.ListEndOffsets(ctx, topic)
	if err == nil {
		err = de.Error()
	}
	if err != nil {
		return nil, fmt.Sprintf("destination offsets: %v", err)
	}
	ends := map[int32]int64{}
	var why string
	se.Each(func(o kadm.ListedOffset) {
		ends[o.Partition] = o.Offset
		if d, ok := de.Lookup(o.Topic, o.Partition); !ok || d.Offset != o.Offset {
			why += fmt.Sprintf("partition %d: source end %d, destination end %d; ", o.Partition, o.Offset, d.Offset)
		}
	})
	if why != "" {
		return nil, why
	}
	if len(ps) != len(ends) {
		return nil, fmt.Sprintf("describe shows %d partitions, the source has %d", len(ps), len(ends))
	}
	for _, p := range ps {
		if p.DestinationOffset != ends[p.Partition] {
			return nil, fmt.Sprintf("partition %d: describe says destination offset %d, the source ends at %d", p.Partition, p.DestinationOffset, ends[p.Partition])
		}
	}
	return ends, ""
}

// assertIdentical runs verify at both isolation levels and fails the test
// with its report on any mismatch.
func assertIdentical(ctx context.Context, t testing.TB, srcCl, dstCl *kgo.Client, topic string) verify.Report {
	t.Helper()
	r, err := verify.Compare(ctx, srcCl, dstCl, verify.Options{
		Topic: topic, Isolation: []verify.Isolation{verify.ReadUncommitted, verify.ReadCommitted},
	})
	var buf bytes.Buffer
	_ = r.WriteText(&buf)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, buf.String())
	}
	if !r.OK() {
		t.Fatalf("the destination is not offset-identical to the source:\n%s", buf.String())
	}
	var compared int64
	for _, p := range r.Partitions {
		compared += p.Compared
	}
	if compared == 0 {
		t.Fatalf("verify compared nothing:\n%s", buf.String())
	}
	t.Logf("verify: %d records compared\n%s", compared, buf.String())
	return r
}

// latency delays the destination's produce requests for one topic, like a
// slow network, and holds those of a killed agent until a new agent has read
// the log end of their partitions and then written 0 to 7 batches there
// (chosen at random): 0 puts the late request between the new agent's read
// of the end and its write of the same batch, so the broker appends the late
// one and deduplicates the new one; 1 to 5 make the late request a
// duplicate of a batch in the broker's window of the producer's last five;
// 6 and 7 make it a sequence the broker refuses as out of order.
// A request whose new agent is stopped before that lands then.
type latency struct {
	t      testing.TB
	kc     *kfake.Cluster
	topics []string
	done   chan struct{}

	mu    sync.Mutex
	rng   *rand.Rand
	gen   int  // incremented at every kill
	armed bool // a new agent runs: its requests release held ones
	held  map[*heldProduce]struct{}
	late  map[string]int // held requests released, by when

	inFlight  atomic.Int32
	heldTotal atomic.Int32 // requests held past their agent's death
}

type heldProduce struct {
	gen     int
	parts   []fetcher.TP
	release chan struct{}
	// Under latency.mu:
	killed   bool // its agent died while it was delayed
	readSeen bool // a new agent has read the end of its partition
	wait     int  // writes of the new agent to wait for after that
	after    int  // of which still to come
	released bool
	when     string // what released it
}

func injectLatency(t testing.TB, kc *kfake.Cluster, topics []string, seed int64) *latency {
	l := &latency{t: t, kc: kc, topics: topics, done: make(chan struct{}),
		rng:  rand.New(rand.NewPCG(uint64(seed), 2)),
		held: map[*heldProduce]struct{}{}, late: map[string]int{}}
	t.Cleanup(func() { close(l.done) })
	kc.ControlKey(int16(kmsg.Produce), l.onProduce)
	kc.ControlKey(int16(kmsg.ListOffsets), l.onListOffsets)
	return l
}

func (l *latency) onProduce(req kmsg.Request) (kmsg.Response, error, bool) {
	var parts []fetcher.TP
	for _, rt := range req.(*kmsg.ProduceRequest).Topics {
		if slices.Contains(l.topics, rt.Topic) {
			for _, rp := range rt.Partitions {
				parts = append(parts, fetcher.TP{Topic: rt.Topic, Partition: rp.Partition})
			}
		}
	}
	if len(parts) == 0 {
		return nil, nil, false
	}
	l.mu.Lock()
	d := time.Millisecond + time.Duration(l.rng.Int64N(int64(15*time.Millisecond)))
	h := &heldProduce{gen: l.gen, parts: parts, release: make(chan struct{}), wait: l.rng.IntN(8)}
	h.after = h.wait
	l.held[h] = struct{}{}
	l.mu.Unlock()
	l.inFlight.Add(1)
	l.kc.SleepControl(func() {
		select {
		case <-time.After(d):
		case <-l.done:
			return
		}
		l.mu.Lock()
		h.killed = h.gen < l.gen
		l.mu.Unlock()
		if !h.killed {
			return
		}
		// The agent that sent this died while it was on the way.
		l.heldTotal.Add(1)
		select {
		case <-h.release:
		case <-l.done:
		case <-time.After(20 * time.Second):
			l.mu.Lock()
			l.t.Errorf("a produce request of a killed agent was not released within 20s: partitions %v, sent at generation %d (now %d, armed %v), new agent read the end: %v, writes to wait for %d, still to come %d",
				h.parts, h.gen, l.gen, l.armed, h.readSeen, h.wait, h.after)
			l.mu.Unlock()
		}
	})
	l.mu.Lock()
	delete(l.held, h)
	if h.killed {
		l.late[h.when]++
	}
	if !h.killed && h.gen == l.gen && l.armed {
		// A write of the running agent, about to be applied: held
		// requests waiting for it go right after it.
		for o := range l.held {
			if o.readSeen && !o.released && o.after > 0 && overlaps(o.parts, parts) {
				if o.after--; o.after == 0 {
					when := "after 1-5 writes of the new agent (a duplicate within the broker's window)"
					if o.wait > 5 {
						when = "after 6-7 writes of the new agent (out of sequence)"
					}
					l.releaseLocked(o, when)
				}
			}
		}
	}
	l.mu.Unlock()
	l.inFlight.Add(-1)
	return nil, nil, false
}

// onListOffsets notes the partitions whose high watermark a new agent asks
// for, releasing the held requests that wait for no write. The ListOffsets
// request is answered before a released produce request runs: both are
// handled on the cluster's one request goroutine, busy with this one.
func (l *latency) onListOffsets(req kmsg.Request) (kmsg.Response, error, bool) {
	lo := req.(*kmsg.ListOffsetsRequest)
	if lo.IsolationLevel != 0 {
		return nil, nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed {
		return nil, nil, false
	}
	for _, rt := range lo.Topics {
		if !slices.Contains(l.topics, rt.Topic) {
			continue
		}
		for _, rp := range rt.Partitions {
			if rp.Timestamp != -1 {
				continue
			}
			for h := range l.held {
				if h.gen < l.gen && !h.readSeen && overlaps(h.parts, []fetcher.TP{{Topic: rt.Topic, Partition: rp.Partition}}) {
					h.readSeen = true
					if h.after == 0 {
						l.releaseLocked(h, "between the new agent's read of the end and its write")
					}
				}
			}
		}
	}
	return nil, nil, false
}

func (l *latency) releaseLocked(h *heldProduce, when string) {
	if h.released {
		return
	}
	h.released, h.when = true, when
	close(h.release)
}

func overlaps(a, b []fetcher.TP) bool {
	for _, p := range a {
		for _, q := range b {
			if p == q {
				return true
			}
		}
	}
	return false
}

// InFlight is the number of the topic's produce requests being delayed or
// held.
func (l *latency) InFlight() int { return int(l.inFlight.Load()) }

// Killed marks the requests delayed now as those of a dead agent; call it
// once the agent is gone. Requests still held from the agent before land
// now: the agent whose writes they waited for is gone too (on a
// transactional partition whose invisible offsets are filler markers, a
// produce request comes once per committed source transaction, so seven
// may take longer than an agent lives here), and a frozen agent may be the
// next to run, whose own requests would queue behind its held one on the
// same connection, waiting for writes only it could make.
func (l *latency) Killed() {
	l.mu.Lock()
	for h := range l.held {
		if h.gen < l.gen {
			l.releaseLocked(h, "when the agent after its own was stopped too")
		}
	}
	l.gen++
	l.armed = false
	l.mu.Unlock()
}

// Arm lets the requests of the next agent release held ones: call it just
// before starting that agent.
func (l *latency) Arm() {
	l.mu.Lock()
	l.armed = true
	l.mu.Unlock()
}

// ReleaseAll releases every held request (production has stopped, so some
// may wait for writes that will not come) and waits until none is left.
func (l *latency) ReleaseAll(ctx context.Context, t testing.TB) {
	t.Helper()
	l.mu.Lock()
	for h := range l.held {
		if h.gen < l.gen {
			l.releaseLocked(h, "after the new agent caught up")
		}
	}
	l.mu.Unlock()
	for l.InFlight() > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("produce requests still delayed: %d", l.InFlight())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stats returns how many requests were held past their agent's death and
// when they were released.
func (l *latency) Stats() (held int, late map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	late = map[string]int{}
	for k, v := range l.late {
		late[k] = v
	}
	return int(l.heldTotal.Load()), late
}

// logBatches logs the headers of the last batches of a destination
// partition: who wrote what at the offsets where a partition failed.
func logBatches(ctx context.Context, t testing.TB, c *devcluster.Cluster, topic string, partition int32) {
	t.Helper()
	hs := readBatchHeaders(ctx, t, newClient(t, c), topic, partition)
	var lines []string
	for _, h := range hs[max(0, len(hs)-25):] {
		lines = append(lines, fmt.Sprintf("[%d, %d] producer id %d epoch %d sequence %d, %d records, transactional %v, control %v",
			h.BaseOffset, h.LastOffset(), h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.NumRecords, h.IsTransactional(), h.IsControl()))
	}
	t.Logf("destination %s/%d, last %d of %d batches:\n%s", topic, partition, len(lines), len(hs), strings.Join(lines, "\n"))
}

// TestKillRestartKafka is TestKillRestart on real Apache Kafka brokers,
// where no hook can hold a request: the agent process is SIGKILLed at
// random moments while two transactional sources with aborts are mirrored,
// a franz-go producer and the Java client of the engine's Kafka release
// (transaction.version 2 on 4.x: an epoch bump at every transaction end),
// half of the kills as soon as the destination shows a transaction of the
// agent open (an aborted source transaction being copied), and a new agent
// process is started on the same config and state topic each time. At the
// end the destination must be offset-identical at both isolation levels,
// its consumers must see exactly what the producers committed and aborted,
// and no destination transaction of the agent may be left open.
//
// KMIRROR_KILL_SEED=N replays a run's kill delays.
func TestKillRestartKafka(t *testing.T) {
	forKafkaEngines(t, true, testKillRestartKafka)
}

func testKillRestartKafka(t *testing.T, e engine) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KMIRROR_KILL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("KMIRROR_KILL_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (rerun with KMIRROR_KILL_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	begin := time.Now()
	elapsed := func() string { return time.Since(begin).Round(100 * time.Millisecond).String() }

	const kills, partitions = 6, 3
	p := newPairOn(t, e, pairOpts{srcBrokers: 3, topic: "payments", partitions: partitions})
	java := txnClients(e)[0]
	javaTopic := p.name("payments-" + java.name)
	createTopic(t, p.srcCl, javaTopic, partitions, nil)
	topics := []string{p.topic, javaTopic}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stopProducing := runProducers(ctx, t, p.src, []workload.Spec{{
		Topic: p.topic, Partitions: partitions, Seed: seed,
		Codecs:  []string{workload.CodecZstd, workload.CodecNone, workload.CodecLz4, workload.CodecSnappy, workload.CodecGzip},
		Headers: true, ExplicitTimestamps: true,
		TransactionalID: p.name("payments"), AbortEvery: 3,
	}}, 600, 100)
	// The Java client runs again and again with the same transactional
	// id until the kills are over.
	jt := &clientTxns{op: clientop.ProduceTxn{
		Conn:  clientop.Conn{Bootstrap: p.src.BootstrapString()},
		Topic: javaTopic, TransactionalID: p.name(java.name),
		Transactions: 24, RecordsPerTxn: 6, AbortEvery: 3, Compression: workload.CodecZstd,
	}}
	javaStop, javaDone := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			if err := jt.produce(ctx, java); err != nil {
				javaDone <- err
				return
			}
			select {
			case <-javaStop:
				javaDone <- nil
				return
			default:
			}
		}
	}()
	stopJava := func() {
		t.Helper()
		close(javaStop)
		if err := <-javaDone; err != nil {
			t.Fatalf("%s: %v", java.name, err)
		}
	}

	ids := agentTxnIDs(topics, partitions)
	setup := writeAgentConfigWith(t, p.dst, fmt.Sprintf("coordination = \"single\"\nstate_topic = %q\n", p.stateTopic),
		agentMirror{Name: mirrorName, Source: p.src, Topics: topics})
	a := startAgentProcess(t, setup, "agent-00")
	var leftOpen, waitedOpen int
	// Kills go on (up to twice as many) until one has left a destination
	// transaction open, the case this test is for.
	var i int
	for i = 1; i <= kills || (leftOpen == 0 && i <= 2*kills); i++ {
		delay := 200*time.Millisecond + time.Duration(rng.Int64N(int64(1800*time.Millisecond)))
		select {
		case <-ctx.Done():
			t.Fatalf("kill %d: %v", i, ctx.Err())
		case <-a.exited:
			t.Fatalf("%s exited on its own: %v", a.name, a.waitErr)
		case <-time.After(delay): // the deliberate random kill moment
		}
		// Every other kill waits (a little) for a destination
		// transaction of the agent to be open.
		inTxn := i%2 == 0 && waitOpenTxn(ctx, p.dstAdm, ids, 3*time.Second)
		if inTxn {
			waitedOpen++
		}
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		ms, derr := a.Describe(dctx)
		dcancel()
		a.Kill()
		a.TailLines = 12
		open, err := openTxns(ctx, p.dstAdm, ids)
		if err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		if len(open) > 0 {
			leftOpen++
		}
		var mirrored int64
		for _, ps := range describedPartitions(ms) {
			mirrored += ps.Records
			if ps.State == mirrorapi.StateFailed {
				logBatches(ctx, t, p.dst, ps.Topic, ps.Partition)
				t.Fatalf("before kill %d: %s/%d FAILED: %s", i, ps.Topic, ps.Partition, ps.Reason)
			}
		}
		t.Logf("%s: kill %d after %dms (waited for an open transaction: %v; describe error: %v): records mirrored by this process %d, destination transactions of the agent left open %v",
			elapsed(), i, delay.Milliseconds(), inTxn, derr, mirrored, open)
		a = startAgentProcess(t, setup, fmt.Sprintf("agent-%02d", i))
	}
	stats := stopProducing()
	stopJava()
	t.Logf("%s: %d kills, %d of them right after seeing a destination transaction open, %d leaving one open", elapsed(), i-1, waitedOpen, leftOpen)
	if leftOpen == 0 {
		t.Fatalf("none of %d kills left a destination transaction of the agent open: the test did not kill the agent inside a transaction", i-1)
	}

	for _, topic := range topics {
		waitCaughtUp(ctx, t, p.srcCl, p.dstCl, topic, a, time.Minute)
	}
	st := stats[0]
	t.Logf("%s: caught up; %s: %d records produced (%d aborted); %s: %+v over %d runs", elapsed(), p.topic, st.Records, st.Aborted, javaTopic, jt.sum, jt.runs)
	p.assertIdentical(t, p.topic, identityOpts{kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted}, wantRecords: st.Records})
	p.assertIdentical(t, javaTopic, identityOpts{kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted},
		wantRecords: int64(jt.sum.CommittedRecords + jt.sum.AbortedRecords)})
	if got := kcatCounts(ctx, t, p.dst.BootstrapString(), p.topic, partitions); got[kcat.ReadUncommitted] != st.Records || got[kcat.ReadCommitted] != st.Records-st.Aborted {
		t.Fatalf("%s: destination consumers see %d records read_uncommitted and %d read_committed; the producer acknowledged %d, %d of them aborted",
			p.topic, got[kcat.ReadUncommitted], got[kcat.ReadCommitted], st.Records, st.Aborted)
	}
	jt.check(ctx, t, p.dst.BootstrapString(), partitions)
	assertNoOpenTxns(t, p.dstAdm, ids)
	a.Stop()
}

// agentTxnIDs are the destination transactional ids of the agent for the
// partitions of topics (partition.go names them).
func agentTxnIDs(topics []string, partitions int32) []string {
	var ids []string
	for _, topic := range topics {
		for part := range partitions {
			for _, kind := range []string{"abort", "fill"} {
				ids = append(ids, fmt.Sprintf("kmirror.%s.%s.%d.%s", mirrorName, topic, part, kind))
			}
		}
	}
	return ids
}

// openTxns returns those of ids whose transaction the destination lists as
// Ongoing (ListTransactions: the destination may be shared with other
// tests, whose ids are left out).
func openTxns(ctx context.Context, adm *kadm.Client, ids []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		return nil, fmt.Errorf("listing destination transactions: %v", err)
	}
	var open []string
	for _, l := range listed.Sorted() {
		if slices.Contains(ids, l.TxnID) && l.State == "Ongoing" {
			open = append(open, l.TxnID)
		}
	}
	return open, nil
}

// waitOpenTxn polls until the destination has a transaction of ids open,
// and says whether it saw one within timeout.
func waitOpenTxn(ctx context.Context, adm *kadm.Client, ids []string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if open, err := openTxns(ctx, adm, ids); err == nil && len(open) > 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// assertNoOpenTxns checks that no transaction of ids is open on the
// destination, by ListTransactions and DescribeTransactions: once the
// source is decided and mirrored, every destination transaction of an
// aborted source transaction must have been aborted at its marker and every
// filler settled, whatever the kills interrupted. An open one would hold
// the destination's last stable offset until its timeout aborts it at a
// later offset. assertNoOpenAgentTxns is this for a destination of the
// test's own.
func assertNoOpenTxns(t *testing.T, adm *kadm.Client, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open, err := openTxns(ctx, adm, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Errorf("ListTransactions: %v Ongoing", open)
	}
	described, err := adm.DescribeTransactions(ctx, ids...)
	if err != nil {
		t.Fatalf("describing destination transactions %v: %v", ids, err)
	}
	states := map[string]int{}
	for _, d := range described.Sorted() {
		if d.Err != nil {
			states[d.Err.Error()]++
			continue
		}
		states[d.State]++
		if d.State == "Ongoing" || strings.HasPrefix(d.State, "Prepare") {
			t.Errorf("DescribeTransactions: %s is %s with partitions %v", d.TxnID, d.State, d.Topics)
		}
	}
	if states["CompleteAbort"]+states["CompleteCommit"]+states["Empty"] == 0 {
		t.Errorf("DescribeTransactions found no settled transaction of the agent among %v (states %v): the check would prove nothing", ids, states)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("destination transactional ids of the agent: %d, states %v: none open", len(ids), states)
}
