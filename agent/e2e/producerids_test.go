package e2e

// The agent's own producer ids change under it: a transactional id whose
// epoch is exhausted (32,767 InitProducerId calls) or that expired
// (transactional.id.expiration.ms) gets a new producer id, and a mirror
// deleted and created again gets a new plain producer id. The batches the
// old ids wrote stay in the destination log, and a resync must recognise
// them as the agent's (the ids it owned are kept in the state topic), not
// fail the partition as a foreign write; a really foreign write is still
// one (TestFailures/foreign_write).

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/partition"
)

// produceMixed writes to every partition of topic plain records, a
// committed transaction (its marker gets a filler: ".fill") and an aborted
// one (mirrored through ".abort"), so that each partition's tail is a
// marker of the agent's ".abort" transactional id.
func produceMixed(t *testing.T, p *pair, topic string, parts int32, tag string) {
	t.Helper()
	ctx := testCtx(t)
	src := p.producer(t)
	for part := range parts {
		produceN(t, src, topic, part, 5, tag+" plain", true)
		tx := p.txnProducer(t, fmt.Sprintf("app-%s-%d", tag, part))
		beginTxn(t, tx, topic, part, 3, tag+" committed")
		endTxn(t, ctx, tx, true)
		beginTxn(t, tx, topic, part, 2, tag+" aborted")
		endTxn(t, ctx, tx, false)
	}
}

// txnProducerIDs returns the producer id the destination's coordinator
// holds for each of the agent's transactional ids of topic's partitions.
func (p *pair) txnProducerIDs(t *testing.T, topic string, parts int32) map[string]int64 {
	t.Helper()
	ctx := testCtx(t)
	out := map[string]int64{}
	for part := range parts {
		for _, kind := range []string{"fill", "abort"} {
			id := fmt.Sprintf("kmirror.%s.%s.%d.%s", mirrorName, topic, part, kind)
			ds, err := p.dstAdm.DescribeTransactions(ctx, id)
			if err != nil {
				t.Fatalf("describing %s: %v", id, err)
			}
			d, ok := ds[id]
			if !ok || d.Err != nil {
				t.Fatalf("describing %s: %v", id, d.Err)
			}
			out[id] = d.ProducerID
		}
	}
	return out
}

// exhaustEpoch bumps transactional id's epoch with InitProducerId until the
// next InitProducerId, the agent's, exhausts it: the destination then hands
// the agent a new producer id, as Kafka does at epoch 32,767.
func exhaustEpoch(ctx context.Context, t *testing.T, cl *kgo.Client, id string) {
	t.Helper()
	for {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(id)
		req.TransactionTimeoutMillis = 60000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			t.Errorf("InitProducerId %s: %v", id, err)
			return
		}
		if resp.ProducerEpoch >= math.MaxInt16-1 {
			return
		}
	}
}

// TestOwnProducerIDChanges: the destination gives the agent's filler and
// abort transactional ids of every partition a new producer id at the
// agent's next InitProducerId (epoch exhaustion). After a restart each
// partition's tail holds markers and batches of the old ids; every
// partition must stay MIRRORING, mirror what comes next, and survive
// another restart with batches of both ids in its log.
func TestOwnProducerIDChanges(t *testing.T) {
	const topic = "ledger"
	const parts = 2
	p := newPair(t, pairOpts{topic: topic, partitions: parts})
	produceMixed(t, p, topic, parts, "first")
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, failWait)
	a.stop()
	before := p.txnProducerIDs(t, topic, parts)

	// Caught up with every source transaction decided, so none of the
	// agent's transactions is open while the epochs run out.
	// 32,766 InitProducerId calls per id: seconds alone, minutes on a
	// machine busy with the Kafka engines' JVMs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	started := time.Now()
	for id := range before {
		cl := failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...))
		wg.Go(func() { exhaustEpoch(ctx, t, cl, id) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("epochs of %d transactional ids at %d in %v", len(before), math.MaxInt16-1, time.Since(started))

	a = p.startAgent(t, agentOpts{})
	p.waitMirrored(t, a, topic, failWait)
	after := p.txnProducerIDs(t, topic, parts)
	for id, pid := range before {
		if after[id] == pid {
			t.Fatalf("%s still has producer id %d after its epoch ran out", id, pid)
		}
	}
	t.Logf("producer ids before %v, after %v", before, after)
	produceMixed(t, p, topic, parts, "second")
	p.waitMirrored(t, a, topic, failWait)
	p.assertIdentical(t, topic, identityOpts{wantRecords: 2 * parts * 10})

	// Batches of the old and the new ids in the log, a marker of the new
	// ".abort" id at the tail.
	p.restartAndMirror(t, a, topic, func() { produceMixed(t, p, topic, parts, "third") }, 3*parts*10)
}

// TestMirrorDeletedAndCreatedAgain: a mirror deleted (with force: its topic
// stays) and created again under the same name mirrors on into the same
// destination topic. The new mirror has a new plain producer id; the old
// one's batches are the agent's own, not a foreign write.
func TestMirrorDeletedAndCreatedAgain(t *testing.T) {
	const topic = "ledger"
	const parts = 2
	p := newPair(t, pairOpts{topic: topic, partitions: parts})
	produceMixed(t, p, topic, parts, "first")
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, failWait)

	if err := a.co.Delete(testCtx(t), mirrorName, true); err != nil {
		t.Fatal(err)
	}
	produceMixed(t, p, topic, parts, "while deleted")
	if err := a.co.Apply(testCtx(t), p.spec(topic)); err != nil {
		t.Fatal(err)
	}
	p.waitMirrored(t, a, topic, failWait)
	produceMixed(t, p, topic, parts, "created again")
	p.waitMirrored(t, a, topic, failWait)
	p.assertIdentical(t, topic, identityOpts{wantRecords: 3 * parts * 10})

	// And across a restart, with both mirrors' batches in the log.
	p.restartAndMirror(t, a, topic, func() { produceMixed(t, p, topic, parts, "restarted") }, 4*parts*10)
}

// TestForeignWriteWhileStopped: an application writes to a mirror topic
// while the agent is down, after the agent's producer ids changed (so the
// state topic holds several ids for the partition); the resync at the
// restart finds the application's batch in the destination tail and fails
// that partition as a foreign write, while the other one mirrors on.
func TestForeignWriteWhileStopped(t *testing.T) {
	const topic = "ledger"
	const parts = 2
	p := newPair(t, pairOpts{topic: topic, partitions: parts})
	produceMixed(t, p, topic, parts, "first")
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, failWait)
	a.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // see TestOwnProducerIDChanges
	defer cancel()
	for id := range p.txnProducerIDs(t, topic, parts) {
		exhaustEpoch(ctx, t, failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...)), id)
	}
	a = p.startAgent(t, agentOpts{})
	p.waitMirrored(t, a, topic, failWait)
	a.stop()

	produceN(t, p.dstProducer(t), topic, 0, 1, "foreign", true)
	produceMixed(t, p, topic, parts, "second")
	a = p.startAgent(t, agentOpts{})
	st := waitFailed(t, a, topic, 0, `^the destination has a batch at offsets 12 to 12 from producer id \d+, which the agent does not own \(a foreign write to a mirror topic\)$`)
	t.Logf("p0 FAILED: %s", st.Reason)
	p.waitMirroredParts(t, a, topic, []int32{1})
	p.assertIdenticalParts(t, topic, []int32{1}, 20)
}

// restartAndMirror stops a and starts a new agent, has produce write more,
// and checks that the new agent mirrors it: every partition MIRRORING
// with no reason, and the topic identical with want records.
func (p *pair) restartAndMirror(t *testing.T, a *agent, topic string, produce func(), want int64) {
	t.Helper()
	a.stop()
	a = p.startAgent(t, agentOpts{})
	produce()
	p.waitMirrored(t, a, topic, failWait)
	for part, st := range a.partitions(topic) {
		if st.State != partition.Mirroring || st.Reason != "" {
			t.Fatalf("p%d after the restart: %s (%s)", part, st.State, st.Reason)
		}
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: want})
}
