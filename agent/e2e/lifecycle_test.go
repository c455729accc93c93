package e2e

// Lifecycle drills: stop (failover, with the source up and with it gone;
// promote, with producers writing through the switch), pause and resume,
// and agent restarts keeping PAUSED and STOPPED.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

const lifecycleTopic = "orders"

// lifecycleProducers runs a plain and a transactional producer (every
// third transaction aborted) on the source; stop stops both.
func (p *pair) lifecycleProducers(t *testing.T, seed int64) (stop func(), txn *workload.Producer) {
	t.Helper()
	plain := workload.NewProducer(p.srcOpts(), workload.Spec{Topic: lifecycleTopic, Partitions: 3, Seed: seed}, 3000)
	txn = workload.NewProducer(p.srcOpts(), workload.Spec{Topic: lifecycleTopic, Partitions: 3, Seed: seed + 1,
		TransactionalID: fmt.Sprintf("app-%d", seed), AbortEvery: 3, ChunkRecords: 60}, 2000)
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

// assertNoAgentTxn checks that no transaction of the agent is open on the
// destination.
func assertNoAgentTxn(t *testing.T, adm *kadm.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listed.Sorted() {
		if strings.HasPrefix(l.TxnID, "kmirror.") && l.State == "Ongoing" {
			t.Errorf("destination transaction %s of the agent is still open", l.TxnID)
		}
	}
}

// assertMirroredUpTo compares every partition of the topic over
// [0, last mirrored + 1) and checks that the destination ends right there.
func (p *pair) assertMirroredUpTo(t *testing.T, ps map[int32]partition.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dst := ends(t, p.dstAdm, lifecycleTopic)
	var total int64
	for part, st := range ps {
		if st.LastMirrored != dst[part]-1 {
			t.Errorf("partition %d: last mirrored offset %d, destination end %d", part, st.LastMirrored, dst[part])
		}
		rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: lifecycleTopic, Partitions: []int32{part}, To: st.LastMirrored + 1})
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

// assertWritable writes a record with a normal producer to each partition
// of the stopped topic: it lands right after the last mirrored offset.
func (p *pair) assertWritable(t *testing.T, ps map[int32]partition.Status) {
	t.Helper()
	cl := p.dstProducer(t)
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	for part, st := range ps {
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: lifecycleTopic, Partition: part, Value: []byte("after failover")}).First()
		if err != nil {
			t.Fatalf("producing to the stopped topic: %v", err)
		}
		if r.Offset != st.LastMirrored+1 {
			t.Errorf("partition %d: a new write landed at %d, want %d (right after the last mirrored offset)", part, r.Offset, st.LastMirrored+1)
		}
	}
}

func lifecycleAgent(t *testing.T, p *pair, apply bool) *agent {
	spec := p.spec(lifecycleTopic)
	o := agentOpts{refreshInterval: 200 * time.Millisecond}
	if apply {
		o.apply = &spec
	}
	return p.startAgentWith(t, o, func(c *coordinator.Config) {
		c.StopTimeout = 10 * time.Second
		c.PromoteTimeout = time.Minute
	})
}

// TestStopFailover: producers write through a failover stop; every record
// up to each last mirrored offset is identical, the destination takes new
// writes right after it, no destination transaction of the agent is left
// open, and a restarted agent keeps the topic STOPPED and never writes it.
func TestStopFailover(t *testing.T) {
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 3})
	a := lifecycleAgent(t, p, true)
	stop, _ := p.lifecycleProducers(t, 10)
	p.waitProgress(t, a, lifecycleTopic, map[int32]int64{0: 300, 1: 300, 2: 300}, failWait)
	started := time.Now()
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, lifecycleTopic, 3, partition.Stopped, 15*time.Second)
	t.Logf("stopped in %s", time.Since(started))
	stop()
	assertNoAgentTxn(t, p.dstAdm)
	p.assertMirroredUpTo(t, ps)
	p.assertWritable(t, ps)

	// A restart keeps it STOPPED; the agent writes nothing more.
	before := ends(t, p.dstAdm, lifecycleTopic)
	a.stop()
	produceN(t, p.producer(t), lifecycleTopic, 0, 50, "late", false)
	a2 := lifecycleAgent(t, p, false)
	waitStates(t, a2, lifecycleTopic, 3, partition.Stopped, failWait)
	time.Sleep(time.Second)
	if after := ends(t, p.dstAdm, lifecycleTopic); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("destination ends moved after the restart of a stopped topic: %v, then %v", before, after)
	}
	ps2 := a2.partitions(lifecycleTopic)
	for part, st := range ps {
		if ps2[part].LastMirrored != st.LastMirrored {
			t.Errorf("partition %d: last mirrored offset %d after the restart, %d before", part, ps2[part].LastMirrored, st.LastMirrored)
		}
		if st.StopMode != mirrorapi.StopModeFailover || ps2[part].StopMode != mirrorapi.StopModeFailover {
			t.Errorf("partition %d: stop mode %q, %q after the restart; want failover", part, st.StopMode, ps2[part].StopMode)
		}
	}
	err := a2.co.ResumeTopics(testCtx(t), mirrorName, []string{lifecycleTopic})
	if err == nil || !strings.Contains(err.Error(), "topic orders is STOPPED: a stopped topic is writable on the destination and cannot mirror again") {
		t.Errorf("resume of a stopped topic: %v", err)
	}
}

// TestStopFailoverSourceGone: the source cluster is gone; a failover stop
// still completes within the stop timeout.
func TestStopFailoverSourceGone(t *testing.T) {
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 3})
	a := lifecycleAgent(t, p, true)
	stop, _ := p.lifecycleProducers(t, 20)
	p.waitProgress(t, a, lifecycleTopic, map[int32]int64{0: 300, 1: 300, 2: 300}, failWait)
	stop() // (producers against a dead cluster would hang the test's end)
	p.src.Close()
	time.Sleep(500 * time.Millisecond)
	started := time.Now()
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, lifecycleTopic, 3, partition.Stopped, 12*time.Second)
	t.Logf("stopped with the source gone in %s", time.Since(started))
	assertNoAgentTxn(t, p.dstAdm)
	dst := ends(t, p.dstAdm, lifecycleTopic)
	for part, st := range ps {
		if st.LastMirrored != dst[part]-1 || st.LastMirrored < 100 {
			t.Errorf("partition %d: last mirrored offset %d, destination end %d", part, st.LastMirrored, dst[part])
		}
	}
	p.assertWritable(t, ps)
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
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 3})
	var stopProducers func()
	fenced := false
	spec := p.spec(lifecycleTopic)
	a := p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.PromoteTimeout = time.Minute
		c.SourceFence = fenceFunc(func() error {
			stopProducers()
			fenced = true
			return nil
		})
	})
	stopProducers, _ = p.lifecycleProducers(t, 30)
	tx := p.txnProducer(t, "open-at-promote")
	beginTxn(t, tx, lifecycleTopic, 1, 5, "open")
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	if !fenced {
		t.Fatal("the promote did not call the source fence")
	}
	st := waitStatus(t, a, lifecycleTopic, 1, "a promote waiting for the open source transaction", func(s partition.Status) bool {
		return s.State == partition.Stopping && strings.Contains(s.Reason, "open transactions to be decided")
	})
	t.Logf("partition 1: %s", st.Reason)
	time.Sleep(500 * time.Millisecond)
	if st := a.partitions(lifecycleTopic)[1]; st.State != partition.Stopping {
		t.Fatalf("partition 1 with a source transaction open: %s (%s)", st.State, st.Reason)
	}
	produceN(t, tx, lifecycleTopic, 1, 5, "more", true)
	endTxn(t, testCtx(t), tx, true)
	ps := waitStates(t, a, lifecycleTopic, 3, partition.Stopped, failWait)
	src, dst := ends(t, p.srcAdm, lifecycleTopic), ends(t, p.dstAdm, lifecycleTopic)
	for part, st := range ps {
		if dst[part] != src[part] || st.LastMirrored != src[part]-1 {
			t.Errorf("partition %d: source end %d, destination end %d, last mirrored %d", part, src[part], dst[part], st.LastMirrored)
		}
		if st.StopMode != mirrorapi.StopModePromote {
			t.Errorf("partition %d: stop mode %q, want promote", part, st.StopMode)
		}
	}
	p.assertIdentical(t, lifecycleTopic, identityOpts{})
	assertNoAgentTxn(t, p.dstAdm)
	p.assertWritable(t, ps)
}

// TestPromoteTimeout: a promote that cannot reach lag 0 (a source
// transaction left open) times out saying what it waited for, and the
// partition mirrors on.
func TestPromoteTimeout(t *testing.T) {
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 1})
	spec := p.spec(lifecycleTopic)
	a := p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.PromoteTimeout = 2 * time.Second
	})
	produceN(t, p.producer(t), lifecycleTopic, 0, 10, "plain", false)
	tx := p.txnProducer(t, "hanging")
	beginTxn(t, tx, lifecycleTopic, 0, 5, "open")
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, a, lifecycleTopic, 0, "MIRRORING after the promote timed out", func(s partition.Status) bool {
		return s.State == partition.Mirroring && strings.Contains(s.Reason, "promote timed out")
	})
	if !strings.Contains(st.Reason, "open transactions to be decided") {
		t.Errorf("reason %q does not say what the promote waited for", st.Reason)
	}
	endTxn(t, testCtx(t), tx, true)
	p.waitMirrored(t, a, lifecycleTopic, failWait)
}

// TestPauseResume: a pause while producers write stops the destination at
// a batch boundary; it stays paused across an agent restart; resume
// catches up with no gap and no duplicate.
func TestPauseResume(t *testing.T) {
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 3})
	a := lifecycleAgent(t, p, true)
	stop, _ := p.lifecycleProducers(t, 40)
	p.waitProgress(t, a, lifecycleTopic, map[int32]int64{0: 200, 1: 200, 2: 200}, failWait)
	if err := a.co.PauseTopics(testCtx(t), mirrorName, []string{lifecycleTopic}); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, lifecycleTopic, 3, partition.Paused, time.Second)
	paused := ends(t, p.dstAdm, lifecycleTopic)
	for part, st := range ps {
		if st.LastMirrored != paused[part]-1 {
			t.Errorf("partition %d: paused at last mirrored %d, destination end %d", part, st.LastMirrored, paused[part])
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if now := ends(t, p.dstAdm, lifecycleTopic); fmt.Sprint(now) != fmt.Sprint(paused) {
		t.Fatalf("the destination moved while paused: %v, then %v", paused, now)
	}
	// A restart keeps it paused.
	a.stop()
	a = lifecycleAgent(t, p, false)
	waitStates(t, a, lifecycleTopic, 3, partition.Paused, failWait)
	time.Sleep(time.Second)
	if now := ends(t, p.dstAdm, lifecycleTopic); fmt.Sprint(now) != fmt.Sprint(paused) {
		t.Fatalf("the destination moved while paused across a restart: %v, then %v", paused, now)
	}
	if err := a.co.ResumeTopics(testCtx(t), mirrorName, []string{lifecycleTopic}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, lifecycleTopic, 3, partition.Mirroring, failWait)
	stop()
	p.waitMirrored(t, a, lifecycleTopic, time.Minute)
	p.assertIdentical(t, lifecycleTopic, identityOpts{})
	assertNoAgentTxn(t, p.dstAdm)
}

// TestRecover: a partition FAILED because its destination topic was
// recreated recovers and mirrors the whole source into the new topic; one
// FAILED because its source topic was recreated cannot be re-aligned, and
// the recover says so.
func TestRecover(t *testing.T) {
	const dstGone, srcGone = "dstgone", "srcgone"
	p := newPair(t, pairOpts{topic: dstGone, partitions: 1})
	createTopic(t, p.srcAdm, srcGone, 1, nil)
	src := p.producer(t)
	produceN(t, src, dstGone, 0, 10, "before", true)
	produceN(t, src, srcGone, 0, 10, "before", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(dstGone, srcGone)), refreshInterval: 300 * time.Millisecond})
	p.waitMirrored(t, a, dstGone, failWait)
	p.waitMirrored(t, a, srcGone, failWait)

	deleteTopic(t, p.dstAdm, dstGone)
	createTopic(t, p.dstAdm, dstGone, 1, nil)
	waitFailed(t, a, dstGone, 0, fmt.Sprintf(`^destination topic %q was recreated`, dstGone))
	deleteTopic(t, p.srcAdm, srcGone)
	createTopic(t, p.srcAdm, srcGone, 1, nil)
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
	if err == nil || !strings.Contains(err.Error(), "topic dstgone is MIRRORING: recover applies to FAILED partitions only") {
		t.Errorf("recover of a mirroring topic: %v", err)
	}
}
