package e2e

// Lifecycle drills: stop (failover, with the source up and with it gone;
// promote, with producers writing through the switch), pause and resume,
// and agent restarts keeping PAUSED and STOPPED.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/recordbatch"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// lifecycleTopic is the base name of the lifecycle tests' topic; on a
// shared cluster it is p.name(lifecycleTopic) (p.topic of a pair made with
// topic: lifecycleTopic), which the helpers below use.
const lifecycleTopic = "orders"

// lifecycleProducers runs a plain and a transactional producer (every
// third transaction aborted) on the source's lifecycle topic; stop stops
// both.
func (p *pair) lifecycleProducers(t *testing.T, seed int64) (stop func(), txn *workload.Producer) {
	t.Helper()
	topic := p.name(lifecycleTopic)
	plain := workload.NewProducer(p.srcOpts(), workload.Spec{Topic: topic, Partitions: 3, Seed: seed}, 3000)
	txn = workload.NewProducer(p.srcOpts(), workload.Spec{Topic: topic, Partitions: 3, Seed: seed + 1,
		TransactionalID: p.name(fmt.Sprintf("app-%d", seed)), AbortEvery: 3, ChunkRecords: 60}, 2000)
	s1, s2 := runProducer(t, plain), runProducer(t, txn)
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	if err := txn.WaitAcked(ctx, 600); err != nil {
		t.Fatal(err)
	}
	if err := plain.WaitAcked(ctx, 600); err != nil {
		t.Fatal(err)
	}
	return func() { s1(); s2() }, txn
}

// waitStates polls until every partition of topic is in want.
func waitStates(t *testing.T, a *agent, topic string, n int, want partition.State, timeout time.Duration) map[int32]partition.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ps := a.partitions(topic)
		ok := len(ps) == n
		for _, st := range ps {
			ok = ok && st.State == want
		}
		if ok {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not every partition %s within %s:\n%s", topic, want, timeout, a.describe())
		}
		time.Sleep(pollEvery)
	}
}

// assertNoAgentTxn checks that no transaction the agent opened for topic
// (its transactional ids are kmirror.MIRROR.TOPIC.PARTITION...) is open on
// the destination. Other tests' agents share a Kafka destination, so only
// topic's ids are looked at.
func assertNoAgentTxn(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "kmirror." + mirrorName + "." + topic + "."
	for _, l := range listed.Sorted() {
		if strings.HasPrefix(l.TxnID, prefix) && l.State == "Ongoing" {
			t.Errorf("destination transaction %s of the agent is still open", l.TxnID)
		}
	}
}

// assertStoppedIdentical compares every partition of the stopped topic
// over [0, last mirrored + 1) with verify, and checks where the destination
// ends (stoppedEnd).
func (p *pair) assertStoppedIdentical(t *testing.T, topic string, ps map[int32]partition.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var total int64
	for part, st := range ps {
		p.stoppedEnd(t, topic, part, st.LastMirrored)
		rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic, Partitions: []int32{part}, To: st.LastMirrored + 1})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			var b strings.Builder
			_ = rep.WriteText(&b)
			t.Errorf("partition %d up to the last mirrored offset %d:\n%s", part, st.LastMirrored, b.String())
		}
		for _, pr := range rep.Partitions {
			total += pr.Compared
		}
	}
	if total == 0 {
		t.Fatal("nothing compared")
	}
}

// stoppedEnd returns the destination end of partition part of the stopped
// topic, checked against its last mirrored offset: right after it, or one
// further when the stop aborted an open transaction of aborted source
// records (partition.Mirror.Finish), whose abort marker then takes that
// offset and stands for no source offset.
func (p *pair) stoppedEnd(t *testing.T, topic string, part int32, last int64) int64 {
	t.Helper()
	end := ends(t, p.dstAdm, topic)[part]
	switch {
	case end == last+1:
	case end == last+2:
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		defer cancel()
		for h, err := range fetcher.ReadRange(ctx, p.dstCl, leaders.New(p.dstCl), fetcher.TP{Topic: topic, Partition: part}, last+1, end, 1<<20) {
			if err != nil {
				t.Fatalf("reading the destination's offset %d of %s/%d: %v", last+1, topic, part, err)
			}
			if commit, err := recordbatch.ControlRecord(h.Raw); err != nil || commit {
				t.Errorf("partition %d: last mirrored offset %d, destination end %d, and offset %d is no abort marker (%v)", part, last, end, last+1, err)
			}
			t.Logf("partition %d: the stop aborted a transaction of aborted records: its marker at %d, last mirrored offset %d", part, last+1, last)
			return end
		}
		t.Errorf("partition %d: destination offset %d not found", part, last+1)
	default:
		t.Errorf("partition %d: last mirrored offset %d, destination end %d", part, last, end)
	}
	return end
}

// assertWritable writes a record with a normal producer to each partition
// of the stopped lifecycle topic: it lands at the destination end, right
// after the last mirrored offset (stoppedEnd).
func (p *pair) assertWritable(t *testing.T, ps map[int32]partition.Status) {
	t.Helper()
	cl := p.dstProducer(t)
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	topic := p.name(lifecycleTopic)
	for part, st := range ps {
		want := p.stoppedEnd(t, topic, part, st.LastMirrored)
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Value: []byte("after failover")}).First()
		if err != nil {
			t.Fatalf("producing to the stopped topic: %v", err)
		}
		if r.Offset != want {
			t.Errorf("partition %d: a new write landed at %d, want %d (the destination end after the last mirrored offset %d)", part, r.Offset, want, st.LastMirrored)
		}
	}
}

// lifecycleAgent runs the agent of the lifecycle topic, with the mirror
// applied or (apply false) from the state topic.
func lifecycleAgent(t *testing.T, p *pair, apply bool) *agent {
	return lifecycleAgentWith(t, p, apply, func(*coordinator.Config) {})
}

// lifecycleAgentWith is lifecycleAgent with more coordinator settings.
func lifecycleAgentWith(t *testing.T, p *pair, apply bool, tune func(*coordinator.Config)) *agent {
	spec := p.spec(p.name(lifecycleTopic))
	o := agentOpts{refreshInterval: 200 * time.Millisecond}
	if apply {
		o.apply = &spec
	}
	return p.startAgentWith(t, o, func(c *coordinator.Config) {
		c.StopTimeout = 10 * time.Second
		c.PromoteTimeout = time.Minute
		tune(c)
	})
}

// TestStopFailover: producers write through a failover stop; every record
// up to each last mirrored offset is identical, the destination takes new
// writes right after it, no destination transaction of the agent is left
// open, and a restarted agent keeps the topic STOPPED and never writes it.
func TestStopFailover(t *testing.T) {
	forEngines(t, testStopFailover)
}

func testStopFailover(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 3})
	topic := p.topic
	a := lifecycleAgent(t, p, true)
	stop, _ := p.lifecycleProducers(t, 10)
	p.waitProgress(t, a, topic, map[int32]int64{0: 300, 1: 300, 2: 300}, failWait)
	started := time.Now()
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, topic, 3, partition.Stopped, failWait)
	t.Logf("stopped in %s", time.Since(started))
	stop()
	assertNoAgentTxn(t, p.dstAdm, topic)
	p.assertStoppedIdentical(t, topic, ps)
	p.assertWritable(t, ps)

	// A restart keeps it STOPPED; the agent writes nothing more.
	before := ends(t, p.dstAdm, topic)
	a.stop()
	produceN(t, p.producer(t), topic, 0, 50, "late", false)
	a2 := lifecycleAgent(t, p, false)
	waitStates(t, a2, topic, 3, partition.Stopped, failWait)
	// Nothing can be waited for here: the claim is that nothing happens.
	time.Sleep(time.Second)
	if after := ends(t, p.dstAdm, topic); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("destination ends moved after the restart of a stopped topic: %v, then %v", before, after)
	}
	ps2 := a2.partitions(topic)
	for part, st := range ps {
		if ps2[part].LastMirrored != st.LastMirrored {
			t.Errorf("partition %d: last mirrored offset %d after the restart, %d before", part, ps2[part].LastMirrored, st.LastMirrored)
		}
		if st.StopMode != mirrorapi.StopModeFailover || ps2[part].StopMode != mirrorapi.StopModeFailover {
			t.Errorf("partition %d: stop mode %q, %q after the restart; want failover", part, st.StopMode, ps2[part].StopMode)
		}
	}
	err := a2.co.ResumeTopics(testCtx(t), mirrorName, []string{topic})
	if want := fmt.Sprintf("topic %s is STOPPED: a stopped topic is writable on the destination and cannot mirror again", topic); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("resume of a stopped topic: %v", err)
	}
}

// TestStopFailoverInsideAbortedTransaction: a failover stop lands while the
// agent copies the records inside an aborted source transaction, its
// destination transaction of aborted records open (a throttle keeps it open
// for seconds). The stop aborts it; its marker takes the destination end,
// where the source has a record that was not mirrored, so the last mirrored
// offset is the one before the marker, and everything up to it is
// identical.
func TestStopFailoverInsideAbortedTransaction(t *testing.T) {
	forEngines(t, testStopFailoverInsideAbortedTransaction)
}

func testStopFailoverInsideAbortedTransaction(t *testing.T, e engine) {
	const rate = 256 << 10
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 1})
	topic := p.topic
	// The aborted transaction's first record at offset 0, about 3 MB of
	// plain records inside it, its abort marker, and records after it.
	txn := p.txnProducer(t, p.name("app-inside"))
	beginTxn(t, txn, topic, 0, 1, "aborted")
	produceBacklog(t, p, topic, 1, 3000, 1000)
	ctx := testCtx(t)
	endTxn(t, ctx, txn, false)
	produceN(t, p.producer(t), topic, 0, 10, "after", false)

	a := p.startThrottled(t, mirrorapi.Throttle{RateBytesPerSecond: rate}, topic)
	waitBytes(t, a, topic, 512<<10, failWait)
	waitTxnState(t, p.dstAdm, fmt.Sprintf("kmirror.%s.%s.0.abort", mirrorName, topic), "Ongoing")
	if err := a.co.StopTopics(ctx, mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, topic, 1, partition.Stopped, failWait)
	assertNoAgentTxn(t, p.dstAdm, topic)
	if end := p.stoppedEnd(t, topic, 0, ps[0].LastMirrored); end != ps[0].LastMirrored+2 {
		t.Errorf("destination end %d, last mirrored offset %d: the stop's abort marker is not after the last mirrored offset", end, ps[0].LastMirrored)
	}
	if src := ends(t, p.srcAdm, topic)[0]; ps[0].LastMirrored >= src-12 {
		t.Errorf("last mirrored offset %d: the stop did not land inside the aborted transaction (source end %d)", ps[0].LastMirrored, src)
	}
	p.assertStoppedIdentical(t, topic, ps)
	p.assertWritable(t, ps)
}

// TestStopFailoverSourceGone: the source cluster is gone (its brokers
// ended: on Kafka, a cluster of this test's own, killed); a failover stop
// still completes within the stop timeout.
func TestStopFailoverSourceGone(t *testing.T) {
	forEngines(t, testStopFailoverSourceGone)
}

func testStopFailoverSourceGone(t *testing.T, e engine) {
	// The shared source of the Kafka engines serves other tests: this one
	// gets a source of its own, which it can end.
	p := newPairWithSource(t, e, startOwnSource(t, e), pairOpts{topic: lifecycleTopic, partitions: 3})
	topic := p.topic
	a := lifecycleAgent(t, p, true)
	stop, _ := p.lifecycleProducers(t, 20)
	p.waitProgress(t, a, topic, map[int32]int64{0: 300, 1: 300, 2: 300}, failWait)
	stop() // (producers against a dead cluster would hang the test's end)
	p.src.Close()
	// The agent finds out on its own (its fetches fail); the stop must
	// not depend on it having noticed, nor on it not having.
	time.Sleep(500 * time.Millisecond)
	started := time.Now()
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	// The stop timeout is 10s (lifecycleAgent): STOPPED must come within
	// it, with margin for a loaded machine, as the design promises a
	// failover with the source gone.
	ps := waitStates(t, a, topic, 3, partition.Stopped, failWait)
	t.Logf("stopped with the source gone in %s", time.Since(started))
	assertNoAgentTxn(t, p.dstAdm, topic)
	for part, st := range ps {
		if p.stoppedEnd(t, topic, part, st.LastMirrored); st.LastMirrored < 100 {
			t.Errorf("partition %d: last mirrored offset %d: the records mirrored before the source went are not counted", part, st.LastMirrored)
		}
	}
	p.assertWritable(t, ps)
}

// startOwnSource starts a one-broker source cluster of the test's own on
// engine e, closed when the test ends: for a test that ends its source's
// brokers or gives it users the shared clusters lack. opts are added.
func startOwnSource(t *testing.T, e engine, opts ...devcluster.Option) *devcluster.Cluster {
	t.Helper()
	o := []devcluster.Option{devcluster.Name("src")}
	if e.kind != devcluster.Embedded {
		o = append(o, devcluster.Engine(e.kind), devcluster.KafkaVersion(e.version), devcluster.Logger(testLogger(t, "devcluster-own-src")))
		if e.txnVersion != 0 {
			o = append(o, devcluster.TransactionVersion(e.txnVersion))
		}
	}
	start := time.Now()
	c := devclustertest.Start(t, append(o, opts...)...)
	if e.kind != devcluster.Embedded {
		t.Logf("started a %s source of this test's own in %v: %s", e.name, time.Since(start).Round(time.Millisecond), c.BootstrapString())
	}
	return c
}

// newPairWithSource is newPairOn with src as the source cluster: the
// destination is a new cluster on the embedded engine and the shared one on
// Kafka (secured when o.secured), names are the test's own as newPairOn
// makes them, and o.topic is created on src. With o.secured the pair's
// clients authenticate as the agent on both clusters.
func newPairWithSource(t *testing.T, e engine, src *devcluster.Cluster, o pairOpts) *pair {
	t.Helper()
	p := &pair{eng: e, src: src}
	if e.kind == devcluster.Embedded {
		dstOpts := []devcluster.Option{devcluster.Name("dst")}
		if o.secured {
			dstOpts = securedOpts("dst")
		}
		p.dst = devclustertest.Start(t, dstOpts...)
	} else {
		p.dst = sharedCluster(t, e, sharedKey{engine: e.name, role: "dst", brokers: max(o.dstBrokers, 1), secured: o.secured, configs: canonical(o.dstConfigs)})
		p.ownNames()
	}
	p.setUp(t, o)
	return p
}

// fenceFunc is a SourceFence for tests.
type fenceFunc func() error

func (f fenceFunc) Fence(context.Context, coordinator.FenceRequest) (coordinator.FenceResult, error) {
	return coordinator.FenceResult{Fenced: true}, f()
}

// TestStopPromote: producers write through a promote. The test's source
// fence stops them, as the DENY WRITE ACL would; a source transaction left
// open holds the promote (STOPPING, saying so) until it is committed; then
// the destination is identical to the source: no acknowledged record lost.
func TestStopPromote(t *testing.T) {
	forEngines(t, testStopPromote)
}

func testStopPromote(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 3})
	topic := p.topic
	var stopProducers func()
	fenced := false
	a := lifecycleAgentWith(t, p, true, func(c *coordinator.Config) {
		c.SourceFence = fenceFunc(func() error {
			stopProducers()
			fenced = true
			return nil
		})
	})
	stopProducers, _ = p.lifecycleProducers(t, 30)
	// A stop needs the destination topic the mirror creates.
	p.waitProgress(t, a, topic, map[int32]int64{0: 100, 1: 100, 2: 100}, failWait)
	tx := p.txnProducer(t, p.name("open-at-promote"))
	beginTxn(t, tx, topic, 1, 5, "open")
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	if !fenced {
		t.Fatal("the promote did not call the source fence")
	}
	st := waitStatus(t, a, topic, 1, "a promote waiting for the open source transaction", func(s partition.Status) bool {
		return s.State == partition.Stopping && strings.Contains(s.Reason, "open transactions to be decided")
	})
	t.Logf("partition 1: %s", st.Reason)
	// The claim is that nothing happens while the transaction is open.
	time.Sleep(500 * time.Millisecond)
	if st := a.partitions(topic)[1]; st.State != partition.Stopping {
		t.Fatalf("partition 1 with a source transaction open: %s (%s)", st.State, st.Reason)
	}
	produceN(t, tx, topic, 1, 5, "more", true)
	endTxn(t, testCtx(t), tx, true)
	ps := waitStates(t, a, topic, 3, partition.Stopped, failWait)
	src, dst := ends(t, p.srcAdm, topic), ends(t, p.dstAdm, topic)
	for part, st := range ps {
		if dst[part] != src[part] || st.LastMirrored != src[part]-1 {
			t.Errorf("partition %d: source end %d, destination end %d, last mirrored %d", part, src[part], dst[part], st.LastMirrored)
		}
		if st.StopMode != mirrorapi.StopModePromote {
			t.Errorf("partition %d: stop mode %q, want promote", part, st.StopMode)
		}
	}
	p.assertIdentical(t, topic, identityOpts{})
	assertNoAgentTxn(t, p.dstAdm, topic)
	p.assertWritable(t, ps)
}

// TestPromoteTimeout: a promote that cannot reach lag 0 (a source
// transaction left open) times out saying what it waited for, and the
// partition mirrors on.
func TestPromoteTimeout(t *testing.T) {
	forEngines(t, testPromoteTimeout)
}

func testPromoteTimeout(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 1})
	topic := p.topic
	a := p.startAgentWith(t, agentOpts{apply: new(p.spec(topic)), refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.PromoteTimeout = 2 * time.Second
	})
	produceN(t, p.producer(t), topic, 0, 10, "plain", false)
	// A stop needs the destination topic the mirror creates.
	p.waitProgress(t, a, topic, map[int32]int64{0: 10}, failWait)
	tx := p.txnProducer(t, p.name("hanging"))
	beginTxn(t, tx, topic, 0, 5, "open")
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, a, topic, 0, "MIRRORING after the promote timed out", func(s partition.Status) bool {
		return s.State == partition.Mirroring && strings.Contains(s.Reason, "promote timed out")
	})
	if !strings.Contains(st.Reason, "open transactions to be decided") {
		t.Errorf("reason %q does not say what the promote waited for", st.Reason)
	}
	endTxn(t, testCtx(t), tx, true)
	p.waitMirrored(t, a, topic, failWait)
	p.assertIdentical(t, topic, identityOpts{wantRecords: 15})
}

// TestPauseResume: a pause while producers write stops the destination at
// a batch boundary; it stays paused across an agent restart; resume
// catches up with no gap and no duplicate.
func TestPauseResume(t *testing.T) {
	forEngines(t, testPauseResume)
}

func testPauseResume(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 3})
	topic := p.topic
	a := lifecycleAgent(t, p, true)
	stop, _ := p.lifecycleProducers(t, 40)
	p.waitProgress(t, a, topic, map[int32]int64{0: 200, 1: 200, 2: 200}, failWait)
	if err := a.co.PauseTopics(testCtx(t), mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	// Pause returns once every partition has halted.
	ps := a.partitions(topic)
	for part, st := range ps {
		if st.State != partition.Paused {
			t.Fatalf("partition %d right after the pause returned: %s (%s)", part, st.State, st.Reason)
		}
	}
	paused := ends(t, p.dstAdm, topic)
	for part, st := range ps {
		if st.LastMirrored != paused[part]-1 {
			t.Errorf("partition %d: paused at last mirrored %d, destination end %d", part, st.LastMirrored, paused[part])
		}
	}
	// The claim is that nothing happens while paused.
	time.Sleep(1500 * time.Millisecond)
	if now := ends(t, p.dstAdm, topic); fmt.Sprint(now) != fmt.Sprint(paused) {
		t.Fatalf("the destination moved while paused: %v, then %v", paused, now)
	}
	// A restart keeps it paused.
	a.stop()
	a = lifecycleAgent(t, p, false)
	waitStates(t, a, topic, 3, partition.Paused, failWait)
	time.Sleep(time.Second)
	if now := ends(t, p.dstAdm, topic); fmt.Sprint(now) != fmt.Sprint(paused) {
		t.Fatalf("the destination moved while paused across a restart: %v, then %v", paused, now)
	}
	if err := a.co.ResumeTopics(testCtx(t), mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, topic, 3, partition.Mirroring, failWait)
	stop()
	p.waitMirrored(t, a, topic, time.Minute)
	p.assertIdentical(t, topic, identityOpts{})
	assertNoAgentTxn(t, p.dstAdm, topic)
}

// TestRecover: a partition FAILED because its destination topic was
// recreated recovers and mirrors the whole source into the new topic; one
// FAILED because its source topic was recreated cannot be re-aligned, and
// the recover says so.
func TestRecover(t *testing.T) {
	forEngines(t, testRecover)
}

func testRecover(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "dstgone", partitions: 1})
	dstGone, srcGone := p.topic, p.name("srcgone")
	createTopic(t, p.srcCl, srcGone, 1, nil)
	src := p.producer(t)
	produceN(t, src, dstGone, 0, 10, "before", true)
	produceN(t, src, srcGone, 0, 10, "before", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(dstGone, srcGone)), refreshInterval: 300 * time.Millisecond})
	p.waitMirrored(t, a, dstGone, failWait)
	p.waitMirrored(t, a, srcGone, failWait)

	p.replaceTopic(t, p.dstAdm, dstGone, 1)
	waitFailed(t, a, dstGone, 0, fmt.Sprintf(`^destination topic %q was recreated`, dstGone))
	p.replaceTopic(t, p.srcAdm, srcGone, 1)
	produceN(t, p.producer(t), srcGone, 0, 3, "new", true)
	waitFailed(t, a, srcGone, 0, fmt.Sprintf(`^source topic %q was recreated`, srcGone))

	if err := a.co.RecoverTopics(testCtx(t), mirrorName, []string{dstGone, srcGone}); err != nil {
		t.Fatal(err)
	}
	produceN(t, src, dstGone, 0, 5, "after", true)
	p.waitMirrored(t, a, dstGone, failWait)
	p.assertIdentical(t, dstGone, identityOpts{wantRecords: 15})
	st := waitFailed(t, a, srcGone, 0, `a recover cannot re-align it`)
	t.Logf("%s after recover: %s", srcGone, st.Reason)
	err := a.co.RecoverTopics(testCtx(t), mirrorName, []string{dstGone})
	if want := fmt.Sprintf("topic %s is MIRRORING: recover applies to FAILED partitions only", dstGone); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("recover of a mirroring topic: %v", err)
	}
}

// replaceTopic deletes topic through adm and creates it again with
// partitions partitions, waiting for leaders. Kafka deletes a topic
// asynchronously: the create is retried while it answers
// TOPIC_ALREADY_EXISTS, unless the topic that exists is a new one (an
// agent mirroring into the cluster may create a mirror topic it finds
// missing before the test does).
func (p *pair) replaceTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	oldID := topicIDOf(t, adm, topic)
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	// Not deleteTopic: it waits for the topic to be gone, which a topic
	// the agent creates again at once never is.
	resp, err := adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("deleting %s: %v", topic, err)
	}
	for {
		resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatalf("creating %s again: %v", topic, err)
		}
		if tds, lerr := adm.ListTopics(ctx, topic); lerr == nil {
			if td, ok := tds[topic]; ok && td.Err == nil && td.ID != oldID {
				t.Logf("%s was created again by someone else (topic id %s, before %s)", topic, td.ID, oldID)
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("creating %s again: still %v after %v", topic, err, failWait)
		case <-time.After(pollEvery):
		}
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if d, ok := md.Topics[topic]; ok && d.Err == nil && len(d.Partitions) == int(partitions) && allLeaders(d) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s has no leader for every partition yet: %v", topic, err)
		case <-time.After(pollEvery):
		}
	}
}
