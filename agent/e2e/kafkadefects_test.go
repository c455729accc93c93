package e2e

// Destinations whose broker settings only real Kafka enforces, for defects
// that the embedded engine hid: a transaction.max.timeout.ms below the 15
// minutes the agent once asked for, producer state that expires while the
// mirror is idle (and a plain writer's sequence wrapping at 2^31), and the
// agent's transactional ids expiring, which gives them new producer ids.
// The tests share one destination cluster per Kafka engine
// (defectDestinationConfigs) and the compaction tests' source.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// defectDestinationConfigs: transactions of at most a minute; a producer's
// state forgotten 3s after its last record's timestamp (checked every
// 500ms); a transactional id forgotten after 10s without a transaction
// (checked every 500ms). All are static broker configs but
// producer.id.expiration.ms.
var defectDestinationConfigs = map[string]string{
	"transaction.max.timeout.ms":                                 "60000",
	"producer.id.expiration.ms":                                  "3000",
	"producer.id.expiration.check.interval.ms":                   "500",
	"transactional.id.expiration.ms":                             "10000",
	"transaction.remove.expired.transaction.cleanup.interval.ms": "500",
}

// defectPair is a pair on the shared clusters of these tests, with topic of
// partitions partitions.
func defectPair(t *testing.T, e engine, topic string, partitions int32) *pair {
	return newPairOn(t, e, pairOpts{topic: topic, partitions: partitions, srcConfigs: tunedSourceConfigs, dstConfigs: defectDestinationConfigs})
}

// produceMixedOn is produceMixed with transactional ids of the test's own
// (the source cluster is shared): to every partition plain records, a
// committed transaction (its marker gets a filler) and an aborted one
// (mirrored through ".abort"), 10 records in all.
func produceMixedOn(t *testing.T, p *pair, topic string, parts int32, tag string) {
	t.Helper()
	ctx := testCtx(t)
	src := p.producer(t)
	for part := range parts {
		produceN(t, src, topic, part, 5, tag+" plain", true)
		tx := p.txnProducer(t, p.name(fmt.Sprintf("app-%s-%d", tag, part)))
		beginTxn(t, tx, topic, part, 3, tag+" committed")
		endTxn(t, ctx, tx, true)
		beginTxn(t, tx, topic, part, 2, tag+" aborted")
		endTxn(t, ctx, tx, false)
	}
}

// mirrorTxnIDs are the agent's destination transactional ids of topic's
// partitions (partition.Config.TxnIDPrefix's default).
func mirrorTxnIDs(topic string, parts int32) []string {
	var ids []string
	for part := range parts {
		for _, kind := range []string{"fill", "abort"} {
			ids = append(ids, fmt.Sprintf("kmirror.%s.%s.%d.%s", mirrorName, topic, part, kind))
		}
	}
	return ids
}

// TestDestinationTxnMaxTimeout: a destination whose transaction.max.timeout.ms
// (60s) is below the 15 minutes the agent used to ask for. Before the
// agent took the destination's maximum, every InitProducerId of its
// transactional ids failed with INVALID_TRANSACTION_TIMEOUT, at every
// resync, and no partition ever mirrored. Now the preflight reads the
// setting: the partitions mirror a transactional source with aborts,
// describe says where the timeout came from, and the destination's
// coordinator holds the agent's ids with that timeout.
func TestDestinationTxnMaxTimeout(t *testing.T) {
	forKafkaEngines(t, true, func(t *testing.T, e engine) {
		const parts = 2
		p := defectPair(t, e, "ledger", parts)
		topic := p.topic
		produceMixedOn(t, p, topic, parts, "first")
		a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
		p.waitMirrored(t, a, topic, failWait)
		// At once: the ids expire after 10s idle.
		ds, err := p.dstAdm.DescribeTransactions(testCtx(t), mirrorTxnIDs(topic, parts)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range mirrorTxnIDs(topic, parts) {
			if d, ok := ds[id]; !ok || d.Err != nil || d.TimeoutMillis != 60000 {
				t.Errorf("the destination holds %s as %+v (found %v), want a timeout of 60000ms", id, d, ok)
			}
		}
		st, _ := a.status()
		if st.TxnTimeoutMs != 60000 || !strings.Contains(st.TxnTimeoutFrom, "destination transaction.max.timeout.ms=60000") {
			t.Errorf("describe shows the destination transaction timeout as %dms from %q, want 60000ms from the destination's transaction.max.timeout.ms",
				st.TxnTimeoutMs, st.TxnTimeoutFrom)
		}
		p.assertIdentical(t, topic, identityOpts{wantRecords: parts * 10})

		// And after a restart, which initializes the ids again.
		a.stop()
		a = p.startAgent(t, agentOpts{})
		produceMixedOn(t, p, topic, parts, "second")
		p.waitMirrored(t, a, topic, failWait)
		p.assertIdentical(t, topic, identityOpts{wantRecords: 2 * parts * 10})
	})
}

// TestDestinationProducerExpiry: the destination forgets the plain writer's
// producer state while the mirror is idle (producer.id.expiration.ms after
// its last record's timestamp, design-review B3). The broker then takes any
// sequence as the first of an unknown producer, so the agent goes on with
// its own, and the broker holds that from then on. Then the sequence wraps
// at 2^31 on a real broker: with the writer's state forgotten, a batch with
// a base sequence just below 2^31 written as the agent's producer (exactly
// the source batch at that offset, as the agent would have written it) is
// accepted as the first of an unknown producer; the restarted agent must go
// on from it across the wrap (2^31-1 is followed by 0), which the broker
// checks.
func TestDestinationProducerExpiry(t *testing.T) {
	forKafkaEngines(t, true, func(t *testing.T, e engine) {
		p := defectPair(t, e, "expiry", 1)
		topic := p.topic
		src := failClient(t, append(p.srcOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(50*time.Millisecond))...)
		produceAt(t, src, topic, 10, "first", time.Time{})
		a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
		p.waitMirrored(t, a, topic, failWait)
		pid, epoch := plainProducer(t, p, topic)

		waitProducerForgotten(t, p, topic, pid)
		// Timestamps 3s ahead keep the state long enough to look at it.
		produceAt(t, src, topic, 10, "after expiry", time.Now().Add(3*time.Second))
		p.waitMirrored(t, a, topic, failWait)
		if dp, ok := activeProducer(t, p.dstAdm, topic, 0, pid); !ok || dp.LastSequence != 19 || dp.ProducerEpoch != epoch {
			t.Fatalf("after the expiry the destination holds producer %d as %+v (known %v), want epoch %d, last sequence 19 (the agent's own)", pid, dp, ok, epoch)
		}
		a.stop()

		// The wrap. Timestamps 10 minutes ahead keep the state to the end.
		waitProducerForgotten(t, p, topic, pid)
		future := time.Now().Add(10 * time.Minute)
		at := ends(t, p.srcAdm, topic)[0]
		produceAt(t, src, topic, 5, "just below 2^31", future)
		b := rawBatch(t, p.srcCl, topic, at)
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		const base = math.MaxInt32 - 6
		if err := recordbatch.Rewrite(b, pid, epoch, base, false); err != nil {
			t.Fatal(err)
		}
		wcl := failClient(t, writer.ClientOpts([]kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...)})...)
		if off, err := writer.New(wcl, leaders.New(wcl)).Produce(testCtx(t), topic, 0, b); err != nil || off != at {
			t.Fatalf("writing the source batch at %d with base sequence %d as producer %d: offset %d, %v", at, base, pid, off, err)
		}
		written := h.NumRecords
		a = p.startAgent(t, agentOpts{})
		produceAt(t, src, topic, 10, "across 2^31", future)
		produceAt(t, src, topic, 10, "past 2^31", future)
		p.waitMirrored(t, a, topic, failWait)
		if st := a.partitions(topic)[0]; st.State != partition.Mirroring || st.Reason != "" {
			t.Fatalf("p0: %s (%s)", st.State, st.Reason)
		}
		written += int32(ends(t, p.srcAdm, topic)[0] - (at + int64(h.NumRecords)))
		want := int32((int64(base) + int64(written) - 1) % (1 << 31))
		if dp, ok := activeProducer(t, p.dstAdm, topic, 0, pid); !ok || dp.LastSequence != want || want >= base {
			t.Fatalf("the destination holds producer %d as %+v (known %v), want last sequence %d (%d records from %d, past 2^31)", pid, dp, ok, want, written, base)
		}
		t.Logf("producer %d: %d records from base sequence %d, last sequence %d", pid, written, base, want)
		p.assertIdentical(t, topic, identityOpts{wantRecords: 45})
	})
}

// TestDestinationTxnIDExpiry: the destination forgets the agent's filler and
// abort transactional ids while the mirror is idle
// (transactional.id.expiration.ms), and the next InitProducerId gives each
// a new producer id (the real-broker form of TestOwnProducerIDChanges). The
// markers of the old ids stay in the log: every resync must recognise them
// as the agent's, not as a foreign write, and a running mirror whose ids
// expired must go on at its next transaction.
func TestDestinationTxnIDExpiry(t *testing.T) {
	forKafkaEngines(t, true, func(t *testing.T, e engine) {
		const parts = 2
		p := defectPair(t, e, "ledger", parts)
		topic := p.topic
		ids := mirrorTxnIDs(topic, parts)
		produceMixedOn(t, p, topic, parts, "first")
		a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
		p.waitMirrored(t, a, topic, failWait)
		before := txnPIDs(t, p, ids)
		a.stop()

		// Forgotten while the agent is down.
		waitTxnIDsForgotten(t, p, ids)
		a = p.startAgent(t, agentOpts{})
		p.waitMirrored(t, a, topic, failWait)
		after := txnPIDs(t, p, ids)
		for _, id := range ids {
			if after[id] == before[id] {
				t.Fatalf("%s still has producer id %d after the destination forgot it", id, before[id])
			}
		}
		t.Logf("producer ids before %v, after %v", before, after)
		produceMixedOn(t, p, topic, parts, "second")
		p.waitMirrored(t, a, topic, failWait)
		p.assertIdentical(t, topic, identityOpts{wantRecords: 2 * parts * 10})

		// Forgotten while the agent runs, idle.
		waitTxnIDsForgotten(t, p, ids)
		produceMixedOn(t, p, topic, parts, "third")
		p.waitMirrored(t, a, topic, failWait)
		p.assertIdentical(t, topic, identityOpts{wantRecords: 3 * parts * 10})

		// A restart over markers of every generation of ids.
		p.restartAndMirror(t, a, topic, func() { produceMixedOn(t, p, topic, parts, "fourth") }, 4*parts*10)
	})
}

// produceAt writes n keyed records to partition 0 of topic in one
// synchronous call, with timestamp ts (the producer's clock when zero).
func produceAt(t *testing.T, cl *kgo.Client, topic string, n int, tag string, ts time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "%s-%d", tag, i), Value: fmt.Appendf(nil, "%s %d", tag, i), Timestamp: ts}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// rawBatch returns a copy of the bytes of partition 0's batch at base.
func rawBatch(t *testing.T, cl *kgo.Client, topic string, base int64) []byte {
	t.Helper()
	c, err := fetcher.ReadAt(testCtx(t), cl, leaders.New(cl), fetcher.TP{Topic: topic, Partition: 0}, base, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for b, err := range recordbatch.All(c.Records) {
		if err == nil && b.BaseOffset == base {
			return slices.Clone(b.Raw)
		}
	}
	t.Fatalf("%s/0 has no batch at %d", topic, base)
	return nil
}

// plainProducer returns the producer id and epoch of the agent's plain
// writer: those of the destination's last data batch outside transactions.
func plainProducer(t *testing.T, p *pair, topic string) (int64, int16) {
	t.Helper()
	hs := rawHeaders(t, p.dstCl, topic, 0, 0, ends(t, p.dstAdm, topic)[0])
	for _, h := range slices.Backward(hs) {
		if !h.IsControl() && !h.IsTransactional() {
			return h.ProducerID, h.ProducerEpoch
		}
	}
	t.Fatalf("the destination's %s/0 has no batch of the plain writer", topic)
	return 0, 0
}

// waitProducerForgotten polls until the destination's leader of topic/0 has
// no state left for producer id pid.
func waitProducerForgotten(t *testing.T, p *pair, topic string, pid int64) {
	t.Helper()
	deadline := time.Now().Add(failWait)
	for {
		dp, ok := activeProducer(t, p.dstAdm, topic, 0, pid)
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the destination still holds producer %d after %v: %+v", pid, failWait, dp)
		}
		time.Sleep(4 * pollEvery)
	}
}

// txnPIDs returns the producer id the destination's coordinators hold for
// each of ids.
func txnPIDs(t *testing.T, p *pair, ids []string) map[string]int64 {
	t.Helper()
	ds, err := p.dstAdm.DescribeTransactions(testCtx(t), ids...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, id := range ids {
		d, ok := ds[id]
		if !ok || d.Err != nil {
			t.Fatalf("describing %s: %+v (found %v)", id, d, ok)
		}
		out[id] = d.ProducerID
	}
	return out
}

// waitTxnIDsForgotten polls until the destination's coordinators know none
// of ids.
func waitTxnIDsForgotten(t *testing.T, p *pair, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := time.Now()
	for {
		ds, err := p.dstAdm.DescribeTransactions(ctx, ids...)
		known := []string{}
		for _, id := range ids {
			if d, ok := ds[id]; err != nil || !ok || !errors.Is(d.Err, kerr.TransactionalIDNotFound) {
				known = append(known, id)
			}
		}
		if len(known) == 0 {
			t.Logf("the destination forgot %d transactional ids in %v", len(ids), time.Since(started).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the destination still knows %v (%v): %v", known, err, ds)
		case <-time.After(10 * pollEvery):
		}
	}
}
