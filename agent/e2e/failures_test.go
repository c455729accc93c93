package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/verify"
)

// TestFailures provokes each cause that DESIGN §3 moves a partition to
// FAILED for, one subtest each, and checks three things: the partition goes
// FAILED with a reason naming the cause; the other partitions (of the same
// topic, or of another topic when the cause hits a whole topic) keep
// mirroring records produced after the failure, identical to the source;
// and, for some causes, FAILED survives an agent restart with its reason.
// A source transaction left hanging is reported, not FAILED: that case
// checks the reason comes and goes while the partition stays MIRRORING.
//
// The causes real brokers can be driven to by clients (a foreign write, a
// topic deleted and created again, keyless records under a compacted
// policy, an open transaction) run on every engine; those that need kfake's
// fault hooks are TestFailureHooks.
func TestFailures(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, e engine)
	}{
		{"foreign write", failForeignWrite},
		{"destination log end went back", failDestinationTruncated},
		{"destination topic recreated", failDestinationRecreated},
		{"source topic recreated", failSourceRecreated},
		{"keyless records on a compacted destination", failKeyless},
		{"hanging source transaction reported", reportHanging},
	}
	forEngines(t, func(t *testing.T, e engine) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
		}
	})
}

// TestFailureHooks is TestFailures for the causes that kfake's fault hooks
// imitate (embedded engine only): duplicate markers (devcluster
// DuplicateMarkers; TestBrokerFaults shows Kafka writing one at a
// destination leader change), a destination transaction aborted by its
// timeout, and a source truncated below the mirrored end.
func TestFailureHooks(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"duplicate marker before a visible record", failDuplicateMarker},
		{"duplicate marker absorbed by a compaction hole", absorbDuplicateMarker},
		{"duplicate marker absorbed by the next marker", absorbDuplicateBeforeMarker},
		{"destination transaction aborted by its timeout", failTimeoutAbort},
		{"source truncated below the mirrored end", failSourceTruncated},
	}
	for _, tc := range cases {
		t.Run(tc.name, tc.run)
	}
}

// failForeignWrite: a client writes to destination partition 0 of a mirror
// topic; the agent's next write there lands one offset late. The failure is
// persisted and survives a restart, while partitions 1 and 2 go on.
func failForeignWrite(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "orders", partitions: 3})
	topic := p.topic
	src := p.producer(t)
	for part := range int32(3) {
		produceN(t, src, topic, part, 20, "before", true)
	}
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, 30*time.Second)

	foreign := p.dstProducer(t)
	produceN(t, foreign, topic, 0, 1, "foreign", true)
	for part := range int32(3) {
		produceN(t, src, topic, part, 10, "after", true)
	}
	st := waitFailed(t, a, topic, 0, `foreign write|something else wrote to this mirror topic`)
	t.Logf("p0 FAILED: %s", st.Reason)
	p.waitMirroredParts(t, a, topic, []int32{1, 2})
	p.assertIdenticalParts(t, topic, []int32{1, 2}, 60)

	// Restart: p0 stays FAILED with its reason and is not written; the
	// others resume and take new records.
	p.waitPersistedFailed(t, topic, 0, st.Reason)
	dstEnd := ends(t, p.dstAdm, topic)[0]
	a.stop()
	a = p.startAgent(t, agentOpts{})
	waitRestored(t, a, topic, 0, st.Reason)
	for part := range int32(3) {
		produceN(t, src, topic, part, 5, "restarted", true)
	}
	p.waitMirroredParts(t, a, topic, []int32{1, 2})
	p.assertIdenticalParts(t, topic, []int32{1, 2}, 70)
	if got := a.partitions(topic)[0]; got.State != partition.Failed || got.Reason != st.Reason {
		t.Fatalf("p0 after the restart: %s (%s), want FAILED (%s)", got.State, got.Reason, st.Reason)
	}
	if got := ends(t, p.dstAdm, topic)[0]; got != dstEnd {
		t.Fatalf("destination p0 end moved from %d to %d while FAILED", dstEnd, got)
	}
}

// failDuplicateMarker: the destination's coordinator appends a marker of
// the agent twice (review B1) where the source has a transaction marker and
// then a visible record: the extra offset cannot be absorbed. The marker is
// the agent's filler for a commit marker (".fill"), or the abort of its
// transaction holding an aborted source transaction's records (".abort").
func failDuplicateMarker(t *testing.T) {
	for _, c := range []struct {
		name   string
		txnID  string // the agent's transactional id whose markers double
		commit bool   // the source transaction's fate
	}{
		{"filler", "fill", true},
		{"abort", "abort", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			const topic = "dup"
			p := newPair(t, pairOpts{topic: topic, partitions: 2})
			ctx := testCtx(t)
			src := p.producer(t)
			produceN(t, src, topic, 0, 3, "plain", true) // 0-2
			tx := p.txnProducer(t, "app")
			beginTxn(t, tx, topic, 0, 2, "txn")          // 3-4
			endTxn(t, ctx, tx, c.commit)                 // marker at 5
			produceN(t, src, topic, 0, 2, "after", true) // 6-7: visible right after the marker
			produceN(t, src, topic, 1, 10, "plain", true)

			dup := p.dst.DuplicateMarkers(devcluster.DuplicateMarkers{
				TransactionalID: fmt.Sprintf("kmirror.%s.%s.0.%s", mirrorName, topic, c.txnID),
				Topic:           topic, Partitions: []int32{0},
			})
			a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
			st := waitFailed(t, a, topic, 0, `^duplicate transaction marker at destination offset 6 where the source has a visible record`)
			t.Logf("p0 FAILED: %s", st.Reason)
			if d := dup.Duplicates(); len(d) != 1 || d[0].Commit {
				t.Fatalf("duplicate markers written: %+v, want one ABORT", d)
			}
			// The agent's marker at 5, its duplicate at 6, and nothing after.
			if got := ends(t, p.dstAdm, topic)[0]; got != 7 {
				t.Fatalf("destination p0 end %d, want 7", got)
			}
			p.assertPartitionOneGoesOn(t, a, src, topic, 20)
		})
	}
}

// absorbDuplicateMarker: the same duplicate, where the source has two
// invisible offsets in a row (a compaction hole): the duplicate takes the
// second, the partition stays MIRRORING and both logs are identical.
func absorbDuplicateMarker(t *testing.T) {
	const topic = "dupok"
	p := newPair(t, pairOpts{})
	ctx := testCtx(t)
	createTopic(t, p.srcCl, topic, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")})
	src := p.producer(t)
	// One batch per record: a@0 b@1 b@2 b@3 c@4. The cleaner drops b@1 and
	// b@2, leaving the hole [1, 3).
	for _, k := range []string{"a", "b", "b", "b", "c"} {
		if err := src.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte(k), Value: []byte("v-" + k)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produceN(t, src, topic, 1, 5, "p1", true)
	p.src.Kfake().Compact()
	var bases []int64
	for _, b := range rawBatches(t, p.srcCl, topic, 0, 0, 5) {
		bases = append(bases, b.Base)
	}
	if !slices.Equal(bases, []int64{0, 3, 4}) {
		t.Fatalf("source p0 batches at %v after compaction, want [0 3 4]", bases)
	}

	dup := p.dst.DuplicateMarkers(devcluster.DuplicateMarkers{
		TransactionalID: fmt.Sprintf("kmirror.%s.%s.0.fill", mirrorName, topic),
		Topic:           topic, Partitions: []int32{0},
	})
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, 30*time.Second)
	if n := dup.Written(); n != 1 {
		t.Fatalf("%d duplicate markers written, want 1", n)
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: 3 + 5})
	// The filler and its duplicate fill the hole.
	var layout []string
	for _, b := range rawBatches(t, p.dstCl, topic, 0, 0, 5) {
		layout = append(layout, fmt.Sprintf("%d-%d", b.Base, b.Last))
	}
	if want := []string{"0-0", "1-1", "2-2", "3-3", "4-4"}; !slices.Equal(layout, want) {
		t.Fatalf("destination p0 batches %v, want %v", layout, want)
	}
}

// absorbDuplicateBeforeMarker: the same duplicate where the source has two
// commit markers back to back (two producers' transactions ending one after
// the other), then a record: DESIGN §3 absorbs the duplicate as the filler
// of the second marker.
func absorbDuplicateBeforeMarker(t *testing.T) {
	const topic = "dupmarkers"
	p := newPair(t, pairOpts{topic: topic, partitions: 1})
	ctx := testCtx(t)
	t1, t2 := p.txnProducer(t, "app-1"), p.txnProducer(t, "app-2")
	beginTxn(t, t1, topic, 0, 1, "one") // 0
	beginTxn(t, t2, topic, 0, 1, "two") // 1
	endTxn(t, ctx, t1, true)            // marker at 2
	endTxn(t, ctx, t2, true)            // marker at 3
	produceN(t, p.producer(t), topic, 0, 2, "after", true)

	dup := p.dst.DuplicateMarkers(devcluster.DuplicateMarkers{
		TransactionalID: fmt.Sprintf("kmirror.%s.%s.0.fill", mirrorName, topic),
		Topic:           topic, Partitions: []int32{0},
	})
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, 30*time.Second)
	if n := dup.Written(); n != 1 {
		t.Fatalf("%d duplicate markers written, want 1", n)
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: 4})
}

// failTimeoutAbort: the agent holds aborted source records in its ".abort"
// destination transaction while the source's last stable offset stops it
// before their marker (another transaction is open behind them). The
// destination coordinator aborts that transaction by timeout (review B8),
// which puts an ABORT marker at the destination end and fences the agent's
// epoch; when the source moves on, the agent's next write in the
// transaction is refused.
func failTimeoutAbort(t *testing.T) {
	const topic = "pay"
	p := newPair(t, pairOpts{topic: topic, partitions: 2})
	ctx := testCtx(t)
	src := p.producer(t)
	produceN(t, src, topic, 0, 5, "plain", true) // 0-4
	produceN(t, src, topic, 1, 5, "plain", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, 30*time.Second)

	aborted, open := p.txnProducer(t, "app-a"), p.txnProducer(t, "app-x")
	beginTxn(t, aborted, topic, 0, 3, "aborted") // 5-7
	beginTxn(t, open, topic, 0, 2, "held")       // 8-9
	endTxn(t, ctx, aborted, false)               // marker at 10; the source LSO stays at 8
	p.waitProgress(t, a, topic, map[int32]int64{0: 8}, 30*time.Second)
	txnID := fmt.Sprintf("kmirror.%s.%s.0.abort", mirrorName, topic)
	waitTxnState(t, p.dstAdm, txnID, "Ongoing")

	res, err := p.dst.TimeoutAbort(ctx, txnID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timed out %s: %+v", txnID, res)
	endTxn(t, ctx, open, false) // 8-9 aborted too, marker at 11
	st := waitFailed(t, a, topic, 0, `the destination transaction was aborted \(transaction timeout\)`)
	t.Logf("p0 FAILED: %s", st.Reason)
	p.assertPartitionOneGoesOn(t, a, src, topic, 15)
}

// failDestinationTruncated: the destination loses the records of a mirror
// topic (kfake cannot truncate a log, so the topic is deleted and created
// again with the same partition count, which leaves an empty log) while the
// agent runs. The partition mirror notices at its next resync that the
// destination end is below the end it had reached. The coordinator's
// metadata refresh, which would notice the new topic id, is kept out of the
// way (see failDestinationRecreated). Another topic goes on.
func failDestinationTruncated(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "trunc", partitions: 1})
	topic, other := p.topic, p.name("kept")
	createTopic(t, p.srcCl, other, 2, nil)
	src := p.producer(t)
	produceN(t, src, topic, 0, 20, "before", true)
	produceN(t, src, other, 0, 10, "before", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic, other)), refreshInterval: 10 * time.Minute})
	p.waitMirrored(t, a, topic, 30*time.Second)
	p.waitMirrored(t, a, other, 30*time.Second)

	retries := a.partitions(topic)[0].Retries
	deleteTopic(t, p.dstAdm, topic)
	// A write to the missing topic fails; the partition mirror retries
	// from a resync, which fails too until the topic is back.
	produceN(t, src, topic, 0, 5, "after", true)
	waitStatus(t, a, topic, 0, "a retry after the deletion", func(s partition.Status) bool { return s.Retries > retries })
	createTopic(t, p.dstCl, topic, 1, nil)

	st := waitFailed(t, a, topic, 0, `^the destination log end went back from 20 to 0: records were lost on the destination`)
	t.Logf("p0 FAILED: %s", st.Reason)
	if got := ends(t, p.dstAdm, topic)[0]; got != 0 {
		t.Fatalf("the agent wrote %d offsets to the truncated destination", got)
	}
	produceN(t, src, other, 0, 10, "after", true)
	produceN(t, src, other, 1, 10, "after", true)
	p.waitMirrored(t, a, other, 30*time.Second)
	p.assertIdentical(t, other, identityOpts{wantRecords: 30})
}

// failDestinationRecreated: the same deletion and creation of the
// destination topic, seen by the coordinator's metadata refresh: the topic
// id is not the one mirrored into, and every partition of the topic goes
// FAILED. Another topic goes on.
func failDestinationRecreated(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "recreated", partitions: 2})
	topic, other := p.topic, p.name("kept")
	createTopic(t, p.srcCl, other, 1, nil)
	src := p.producer(t)
	produceN(t, src, topic, 0, 10, "before", true)
	produceN(t, src, other, 0, 10, "before", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic, other)), refreshInterval: 300 * time.Millisecond})
	p.waitMirrored(t, a, topic, 30*time.Second)
	p.waitMirrored(t, a, other, 30*time.Second)

	// The agent's refresh may create it first, which recreates it too.
	recreateTopic(t, p.dstAdm, topic, 2)
	for part := range int32(2) {
		st := waitFailed(t, a, topic, part, fmt.Sprintf(`^destination topic %q was recreated \(topic id `, topic))
		t.Logf("p%d FAILED: %s", part, st.Reason)
	}
	produceN(t, src, other, 0, 10, "after", true)
	p.waitMirrored(t, a, other, 30*time.Second)
	p.assertIdentical(t, other, identityOpts{wantRecords: 20})
}

// mirrorTwoTopics mirrors topic (2 partitions of 10 records) and other (1
// partition of 10 records) with an agent refreshing metadata every 300ms,
// and returns once both are mirrored; src is the source producer and opts
// the agent's.
func mirrorTwoTopics(t *testing.T, e engine, topic, other string) (p *pair, src *kgo.Client, a *agent, opts agentOpts) {
	t.Helper()
	p = newPairOn(t, e, pairOpts{topic: topic, partitions: 2})
	topic, other = p.topic, p.name(other)
	createTopic(t, p.srcCl, other, 1, nil)
	src = p.producer(t)
	for part := range int32(2) {
		produceN(t, src, topic, part, 10, "before", true)
	}
	produceN(t, src, other, 0, 10, "before", true)
	opts = agentOpts{apply: new(p.spec(topic, other)), refreshInterval: 300 * time.Millisecond}
	a = p.startAgent(t, opts)
	p.waitMirrored(t, a, topic, failWait)
	p.waitMirrored(t, a, other, failWait)
	return p, src, a, opts
}

// recreateSourceTopic deletes topic (2 partitions) on the source, creates
// it again and writes 3 records to it with a new producer (the old one
// holds the old topic id), which it returns, and waits until each
// partition is FAILED saying its source topic was recreated.
func recreateSourceTopic(t *testing.T, p *pair, a *agent, topic string) (*kgo.Client, map[int32]partition.Status) {
	t.Helper()
	recreateTopic(t, p.srcAdm, topic, 2)
	src := p.producer(t)
	produceN(t, src, topic, 0, 3, "new", true)
	failed := map[int32]partition.Status{}
	for part := range int32(2) {
		failed[part] = waitFailed(t, a, topic, part, fmt.Sprintf(`^source topic %q was recreated \(topic id `, topic))
	}
	return src, failed
}

// failSourceRecreated: the source topic is deleted and created again under
// the same name: its offsets no longer match the destination's, so every
// partition of the topic goes FAILED, persisted, and stays so after a
// restart. Another topic goes on before and after the restart.
func failSourceRecreated(t *testing.T, e engine) {
	p, src, a, opts := mirrorTwoTopics(t, e, "gone", "kept")
	topic, other := p.topic, p.name("kept")
	_, failed := recreateSourceTopic(t, p, a, topic)
	reasons := map[int32]string{}
	for part, st := range failed {
		reasons[part] = st.Reason
		t.Logf("p%d FAILED: %s", part, st.Reason)
	}
	produceN(t, src, other, 0, 10, "after", true)
	p.waitMirrored(t, a, other, 30*time.Second)
	p.assertIdentical(t, other, identityOpts{wantRecords: 20})

	for part, r := range reasons {
		p.waitPersistedFailed(t, topic, part, r)
	}
	dstEnds := ends(t, p.dstAdm, topic)
	a.stop()
	opts.apply = nil
	a = p.startAgent(t, opts)
	for part, r := range reasons {
		waitRestored(t, a, topic, part, r)
	}
	produceN(t, src, other, 0, 10, "restarted", true)
	p.waitMirrored(t, a, other, 30*time.Second)
	p.assertIdentical(t, other, identityOpts{wantRecords: 30})
	for part, r := range reasons {
		if got := a.partitions(topic)[part]; got.State != partition.Failed || got.Reason != r {
			t.Fatalf("p%d after the restart: %s (%s), want FAILED (%s)", part, got.State, got.Reason, r)
		}
	}
	if got := ends(t, p.dstAdm, topic); !maps.Equal(got, dstEnds) {
		t.Fatalf("destination ends moved from %v to %v while FAILED", dstEnds, got)
	}
}

// failSourceTruncated: the source loses mirrored records (an unclean leader
// election). Imitated: kfake cannot truncate a log, so the source's
// ListOffsets answers, for partition 0 only, a high watermark 5 below the
// real one, which the destination has already reached; the log itself and
// fetches are untouched. The partition reads the source high watermark only
// at resync, so one NOT_LEADER_FOR_PARTITION answer to a destination Produce
// of partition 0 makes it resync. Partition 1 goes on.
func failSourceTruncated(t *testing.T) {
	const topic = "srctrunc"
	p := newPair(t, pairOpts{topic: topic, partitions: 2})
	src := p.producer(t)
	produceN(t, src, topic, 0, 20, "before", true)
	produceN(t, src, topic, 1, 10, "before", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, 30*time.Second)

	var lowered atomic.Int64 // the high watermark answered for p0; < 0: off
	lowered.Store(-1)
	var lowHits atomic.Int32
	kc := p.src.Kfake()
	kc.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		hw := lowered.Load()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if hw < 0 || req.IsolationLevel != 0 || len(req.Topics) != 1 || req.Topics[0].Topic != topic || len(req.Topics[0].Partitions) != 1 {
			return nil, nil, false
		}
		if rp := req.Topics[0].Partitions[0]; rp.Partition != 0 || rp.Timestamp != -1 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.SetVersion(req.Version)
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = topic
		sp := kmsg.NewListOffsetsResponseTopicPartition()
		sp.Partition, sp.Offset, sp.Timestamp, sp.LeaderEpoch = 0, hw, -1, -1
		rt.Partitions = append(rt.Partitions, sp)
		resp.Topics = append(resp.Topics, rt)
		lowHits.Add(1)
		return resp, nil, true
	})
	lowered.Store(15)
	nl := p.dst.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotLeaderForPartition})
	produceN(t, src, topic, 0, 3, "after", true)

	st := waitFailed(t, a, topic, 0, `^destination log end 20 is beyond the source high watermark 15`)
	t.Logf("p0 FAILED: %s", st.Reason)
	if nl.Hits() != 1 || lowHits.Load() == 0 {
		t.Fatalf("destination produce fault answered %d requests, lowered high watermark %d", nl.Hits(), lowHits.Load())
	}
	lowered.Store(-1)
	p.assertPartitionOneGoesOn(t, a, src, topic, 20)
	if got := ends(t, p.dstAdm, topic)[0]; got != 20 {
		t.Fatalf("destination p0 end %d, want 20 (nothing written after the failure)", got)
	}
}

// failKeyless: records without a key were written to the source while its
// cleanup.policy was delete, then the topic became compacted (review B11).
// The destination, created compact,delete, refuses them.
func failKeyless(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{})
	topic := p.name("keyless")
	ctx := testCtx(t)
	createTopic(t, p.srcCl, topic, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")})
	src := p.producer(t)
	produceN(t, src, topic, 0, 5, "keyed", true)    // 0-4
	produceN(t, src, topic, 0, 3, "keyless", false) // 5-7
	produceN(t, src, topic, 0, 2, "keyed", true)
	produceN(t, src, topic, 1, 10, "keyed", true)
	resps, err := p.srcAdm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, topic)
	if err == nil {
		_, err = resps.On(topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}

	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	st := waitFailed(t, a, topic, 0, `^the destination refused the batch for offset 5: .*a compacted destination topic refuses records without a key`)
	t.Logf("p0 FAILED: %s", st.Reason)
	if got := ends(t, p.dstAdm, topic)[0]; got != 5 {
		t.Fatalf("destination p0 end %d, want 5 (the keyed records before the keyless ones)", got)
	}
	p.assertPartitionOneGoesOn(t, a, src, topic, 20)
}

// reportHanging: a source transaction stays open on partition 0, holding
// its last stable offset while other records pile up behind it. After
// HangingTxnAfter (1s here) describe gives the reason, with the partition
// still MIRRORING; partition 1 goes on meanwhile. Once the transaction
// commits, the reason clears and the partition catches up.
func reportHanging(t *testing.T, e engine) {
	const after = time.Second
	p := newPairOn(t, e, pairOpts{topic: "hang", partitions: 2})
	topic := p.topic
	ctx := testCtx(t)
	src := p.producer(t)
	produceN(t, src, topic, 0, 5, "before", true) // 0-4
	produceN(t, src, topic, 1, 5, "before", true)
	a := p.startAgentWith(t, agentOpts{apply: new(p.spec(topic))}, func(c *coordinator.Config) { c.HangingTxnAfter = after })
	p.waitMirrored(t, a, topic, 30*time.Second)

	tx := p.txnProducer(t, p.name("slow"))
	beginTxn(t, tx, topic, 0, 2, "open") // 5-6
	opened := time.Now()
	produceN(t, src, topic, 0, 3, "behind", true) // 7-9
	st := waitStatus(t, a, topic, 0, "the hanging transaction reported", func(s partition.Status) bool { return s.Reason != "" })
	if elapsed := time.Since(opened); elapsed < after {
		t.Fatalf("reported after %v, before the %v threshold: %s", elapsed, after, st.Reason)
	}
	if want := "waiting for a source transaction open at offset 5 since "; st.State != partition.Mirroring || !strings.HasPrefix(st.Reason, want) {
		t.Fatalf("p0 %s (%s), want MIRRORING with a reason starting %q", st.State, st.Reason, want)
	}
	t.Logf("p0 %s: %s", st.State, st.Reason)
	if got := ends(t, p.dstAdm, topic)[0]; got != 5 {
		t.Fatalf("destination p0 end %d, want 5 (the source's last stable offset)", got)
	}
	produceN(t, src, topic, 1, 10, "meanwhile", true)
	p.waitMirroredParts(t, a, topic, []int32{1})

	endTxn(t, ctx, tx, true)
	p.waitMirrored(t, a, topic, 30*time.Second)
	if st := a.partitions(topic)[0]; st.Reason != "" {
		t.Fatalf("p0 reason after the commit: %q", st.Reason)
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: 10 + 15})
}

// ---------------------------------------------------------------------------
// Helpers

// failWait bounds every wait of these tests.
const failWait = 90 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// producer returns a plain producer to the source that writes each record to
// the partition it names.
func (p *pair) producer(t *testing.T) *kgo.Client {
	return failClient(t, append(p.srcOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
}

// dstProducer is a producer to the destination: a foreign writer.
func (p *pair) dstProducer(t *testing.T) *kgo.Client {
	return failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// txnProducer is a transactional producer to the source.
func (p *pair) txnProducer(t *testing.T, id string) *kgo.Client {
	return failClient(t, append(p.srcOpts(), kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
}

func failClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceN writes n records to topic/part in one synchronous call, keyed or
// not.
func produceN(t *testing.T, cl *kgo.Client, topic string, part int32, n int, tag string, keyed bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: part, Value: fmt.Appendf(nil, "%s %d", tag, i)}
		if keyed {
			recs[i].Key = fmt.Appendf(nil, "%s-%d", tag, i)
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s/%d: %v", topic, part, err)
	}
}

// beginTxn begins a transaction and writes n records to topic/part in it.
func beginTxn(t *testing.T, cl *kgo.Client, topic string, part int32, n int, tag string) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceN(t, cl, topic, part, n, tag, true)
}

func endTxn(t *testing.T, ctx context.Context, cl *kgo.Client, commit bool) {
	t.Helper()
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

func deleteTopic(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	before, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("listing %s before deleting it: %v", topic, err)
	}
	resp, err := adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("deleting %s: %v", topic, err)
	}
	// A Kafka broker answers before every broker's metadata has lost it.
	// (An agent may create it again at once: a new topic id is gone
	// too.)
	waitUntil(t, failWait, topic+" gone from the metadata", func() (bool, string) {
		tds, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		return !tds.Has(topic) || tds[topic].ID != before[topic].ID, "still listed"
	})
}

// recreateTopic deletes topic and creates it again with partitions
// partitions, waiting until it has a leader for each. Kafka may refuse the
// creation while it is still deleting the old topic (TOPIC_ALREADY_EXISTS),
// which is retried; a topic of a new id that someone else (the agent)
// created meanwhile counts as recreated.
func recreateTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	old, err := adm.ListTopics(ctx, topic)
	if err != nil || !old.Has(topic) {
		t.Fatalf("listing %s before recreating it: %v", topic, err)
	}
	oldID := old[topic].ID
	deleteTopic(t, adm, topic)
	waitUntil(t, failWait, topic+" created again", func() (bool, string) {
		resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatalf("creating %s again: %v", topic, err)
		}
		md, merr := adm.Metadata(ctx, topic)
		if merr != nil {
			return false, merr.Error()
		}
		d, ok := md.Topics[topic]
		switch {
		case !ok || d.Err != nil:
			return false, fmt.Sprintf("creating: %v; metadata: %v", err, d.Err)
		case d.ID == oldID:
			return false, "the old topic is still there"
		case len(d.Partitions) != int(partitions) || !allLeaders(d):
			return false, fmt.Sprintf("%d partitions, not all with a leader", len(d.Partitions))
		}
		return true, ""
	})
}

// waitStatus polls Describe until topic/part satisfies ok.
func waitStatus(t *testing.T, a *agent, topic string, part int32, what string, ok func(partition.Status) bool) partition.Status {
	t.Helper()
	deadline := time.Now().Add(failWait)
	for {
		st, found := a.partitions(topic)[part]
		if found && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s p%d: no %s within %v: %s (%s)\nDescribe:\n%s", topic, part, what, failWait, st.State, st.Reason, a.describe())
		}
		time.Sleep(pollEvery)
	}
}

// waitFailed waits until topic/part is FAILED with a reason matching
// reason. A topic-wide failure may replace a partition's own reason, so a
// FAILED state with another reason is waited past, not an error at once.
func waitFailed(t *testing.T, a *agent, topic string, part int32, reason string) partition.Status {
	t.Helper()
	re := regexp.MustCompile(reason)
	return waitStatus(t, a, topic, part, "FAILED matching "+reason, func(s partition.Status) bool {
		return s.State == partition.Failed && re.MatchString(s.Reason)
	})
}

// waitRestored waits until a restarted agent shows topic/part FAILED with
// exactly reason.
func waitRestored(t *testing.T, a *agent, topic string, part int32, reason string) {
	t.Helper()
	st := waitStatus(t, a, topic, part, "partition", func(partition.Status) bool { return true })
	if st.State != partition.Failed || st.Reason != reason {
		t.Fatalf("%s p%d after the restart: %s (%s), want FAILED (%s)", topic, part, st.State, st.Reason, reason)
	}
}

// waitPersistedFailed waits until the state topic holds topic/part FAILED
// with reason (Describe shows the state before it is written), so that a
// restart reads it.
func (p *pair) waitPersistedFailed(t *testing.T, topic string, part int32, reason string) {
	t.Helper()
	key := fmt.Sprintf("partition/%s/%s/%d", mirrorName, topic, part)
	deadline := time.Now().Add(failWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		s, err := statestore.Open(ctx, []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...)}, p.stateTopic)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		v, ok := s.Get(key)
		s.Close()
		var rec struct {
			State  partition.State `json:"state"`
			Reason string          `json:"reason"`
		}
		if ok && json.Unmarshal(v, &rec) == nil && rec.State == partition.Failed && rec.Reason == reason {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("state topic %s = %s, want FAILED (%s)", key, v, reason)
		}
		time.Sleep(pollEvery)
	}
}

// waitTxnState waits until the destination describes txnID in state.
func waitTxnState(t *testing.T, adm *kadm.Client, txnID, state string) {
	t.Helper()
	deadline := time.Now().Add(failWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		d, err := adm.DescribeTransactions(ctx, txnID)
		cancel()
		got := ""
		if err == nil {
			if s, ok := d[txnID]; ok {
				got = s.State
			}
		}
		if got == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction %s in state %q (%v), want %q", txnID, got, err, state)
		}
		time.Sleep(pollEvery)
	}
}

// assertPartitionOneGoesOn checks that a failure of partition 0 does not
// stop partition 1: ten more records written there are mirrored, and the
// partition holds wantRecords identical records on both sides.
func (p *pair) assertPartitionOneGoesOn(t *testing.T, a *agent, src *kgo.Client, topic string, wantRecords int64) {
	t.Helper()
	produceN(t, src, topic, 1, 10, "after failure", true)
	p.waitMirroredParts(t, a, topic, []int32{1})
	p.assertIdenticalParts(t, topic, []int32{1}, wantRecords)
}

// waitMirroredParts is waitMirrored for some partitions of topic only: each
// is MIRRORING at the source high watermark with lag 0, and the destination
// end equals the source's.
func (p *pair) waitMirroredParts(t *testing.T, a *agent, topic string, parts []int32) {
	t.Helper()
	deadline := time.Now().Add(failWait)
	for {
		why := p.partsMirroredNow(a, topic, parts)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s partitions %v not mirrored within %v: %s\nDescribe:\n%s", topic, parts, failWait, why, a.describe())
		}
		time.Sleep(pollEvery)
	}
}

func (p *pair) partsMirroredNow(a *agent, topic string, parts []int32) string {
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	src, err := listBounds(ctx, p.srcAdm, topic)
	if err != nil {
		return fmt.Sprintf("source offsets: %v", err)
	}
	dst, err := listBounds(ctx, p.dstAdm, topic)
	if err != nil {
		return fmt.Sprintf("destination offsets: %v", err)
	}
	ps := a.partitions(topic)
	for _, part := range parts {
		sb, ok := src[part]
		st, inDescribe := ps[part]
		switch {
		case !ok:
			return fmt.Sprintf("the source has no partition %d", part)
		case dst[part][1] != sb[1]:
			return fmt.Sprintf("partition %d: destination end %d, source end %d", part, dst[part][1], sb[1])
		case !inDescribe:
			return fmt.Sprintf("partition %d: not in Describe", part)
		case st.State != partition.Mirroring || st.DestinationOffset != sb[1] || st.Lag != 0:
			return fmt.Sprintf("partition %d: state %s (%s), destination offset %d, lag %d, source end %d",
				part, st.State, st.Reason, st.DestinationOffset, st.Lag, sb[1])
		}
	}
	return ""
}

// assertIdenticalParts checks the invariant on some partitions of topic
// with verify.Compare at both isolation levels: every record and every
// invisible offset the same on both sides, the same log bounds, and
// wantRecords visible records in all (read_uncommitted).
func (p *pair) assertIdenticalParts(t *testing.T, topic string, parts []int32, wantRecords int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic, Partitions: parts})
	if err != nil {
		t.Fatalf("verify %s %v: %v", topic, parts, err)
	}
	if !rep.OK() {
		var buf bytes.Buffer
		_ = rep.WriteText(&buf)
		t.Fatalf("verify %s %v found mismatches:\n%s", topic, parts, buf.String())
	}
	var total int64
	seen := map[verify.Isolation][]int32{}
	for _, pr := range rep.Partitions {
		seen[pr.Isolation] = append(seen[pr.Isolation], pr.Partition)
		if pr.Compared != pr.SourceVisible || pr.Compared != pr.DestinationVisible {
			t.Errorf("verify %s p%d %s: compared %d, source visible %d, destination visible %d", topic, pr.Partition, pr.Isolation,
				pr.Compared, pr.SourceVisible, pr.DestinationVisible)
		}
		if pr.Source.LogStart != pr.Destination.LogStart || pr.Source.HighWatermark != pr.Destination.HighWatermark {
			t.Errorf("verify %s p%d: source log [%d, %d), destination [%d, %d)", topic, pr.Partition,
				pr.Source.LogStart, pr.Source.HighWatermark, pr.Destination.LogStart, pr.Destination.HighWatermark)
		}
		if pr.Isolation == verify.ReadUncommitted {
			total += pr.Compared
		}
	}
	for _, iso := range []verify.Isolation{verify.ReadUncommitted, verify.ReadCommitted} {
		if got := seen[iso]; len(got) != len(parts) {
			t.Errorf("verify %s compared partitions %v at %s, want %v", topic, got, iso, parts)
		}
	}
	if total != wantRecords {
		t.Errorf("verify %s %v compared %d records, want %d", topic, parts, total, wantRecords)
	}
	if t.Failed() {
		t.FailNow()
	}
}
