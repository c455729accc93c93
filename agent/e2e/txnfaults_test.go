package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/recordbatch"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// txnFaultTopic is the topic every TestTxnFaults case mirrors.
const (
	txnFaultTopic      = "txnfaults"
	txnFaultPartitions = 3
)

// txnRun is one TestTxnFaults case: a source written by a transactional
// producer (every fourth transaction aborted) mirrored by an in-process
// agent.
type txnRun struct {
	t    *testing.T
	p    *pair
	a    *agent
	prod *workload.Producer
	stop func() workload.Stats
}

// startTxnRun starts the clusters, the agent and the transactional
// producer, and waits until mirroring runs.
func startTxnRun(t *testing.T, seed int64) *txnRun {
	t.Helper()
	p := newPair(t, pairOpts{topic: txnFaultTopic, partitions: txnFaultPartitions})
	a := p.startAgent(t, agentOpts{apply: new(p.spec(txnFaultTopic))})
	// 30 records a transaction (10 per partition), about 50 transactions a
	// second: each partition sees a commit or abort marker every ~20 ms,
	// so fillers and aborted destination transactions are frequent.
	prod := workload.NewProducer(p.srcOpts(), workload.Spec{
		Topic: txnFaultTopic, Partitions: txnFaultPartitions, Seed: seed,
		Codecs: []string{workload.CodecZstd, workload.CodecNone}, ChunkRecords: 30,
		TransactionalID: fmt.Sprintf("app%d", seed), AbortEvery: 4, Headers: true,
	}, 1500)
	r := &txnRun{t: t, p: p, a: a, prod: prod, stop: runProducer(t, prod)}
	r.progress()
	return r
}

// progress waits until the producer acknowledged a few more transactions
// and the destination has gone past what the source held before them.
func (r *txnRun) progress() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	src := ends(r.t, r.p.srcAdm, txnFaultTopic)
	var acked int64
	for _, n := range r.prod.Acked() {
		acked += n
	}
	if err := r.prod.WaitAcked(ctx, acked+300); err != nil {
		r.t.Fatal(err)
	}
	want := map[int32]int64{}
	for part, end := range src {
		want[part] = end + 1
	}
	r.p.waitProgress(r.t, r.a, txnFaultTopic, want, failWait)
}

// finish stops the producer (its last transaction decided), waits until the
// mirror caught up with every partition MIRRORING, and checks the
// invariant and that no destination transaction of the agent is open.
func (r *txnRun) finish() workload.Stats {
	r.t.Helper()
	st := r.stop()
	r.p.waitMirrored(r.t, r.a, txnFaultTopic, time.Minute)
	r.p.assertIdentical(r.t, txnFaultTopic, identityOpts{wantRecords: st.Records})
	assertNoOpenAgentTxns(r.t, r.p.dstAdm)
	return st
}

// assertNoOpenAgentTxns checks on the destination that none of the agent's
// transactional ids ("kmirror." ones) has a transaction Ongoing: once the
// source is decided and mirrored, every aborted source transaction's
// destination transaction must have been aborted at its marker, and every
// filler transaction settled; an open one would hold the destination's last
// stable offset (read_committed consumers stall) until its timeout aborts
// it at a later offset.
func assertNoOpenAgentTxns(t *testing.T, dstAdm *kadm.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listed, err := dstAdm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatalf("listing destination transactions: %v", err)
	}
	var ids []string
	for _, id := range listed.TransactionalIDs() {
		if strings.HasPrefix(id, "kmirror.") {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("the destination lists no transactional id of the agent (listed: %v): the check would prove nothing", listed.TransactionalIDs())
	}
	for _, l := range listed.Sorted() {
		if strings.HasPrefix(l.TxnID, "kmirror.") && l.State == "Ongoing" {
			t.Errorf("ListTransactions: %s (producer id %d) is Ongoing", l.TxnID, l.ProducerID)
		}
	}
	described, err := dstAdm.DescribeTransactions(ctx, ids...)
	if err != nil {
		t.Fatalf("describing destination transactions %v: %v", ids, err)
	}
	states := map[string]int{}
	for _, d := range described.Sorted() {
		states[d.State]++
		if d.State == "Ongoing" || strings.HasPrefix(d.State, "Prepare") {
			t.Errorf("DescribeTransactions: %s is %s with partitions %v", d.TxnID, d.State, d.Topics)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("destination transactional ids of the agent: %d, states %v: none open", len(ids), states)
}

// fillID is the filler transactional id of a partition of txnFaultTopic.
func fillID(part int32) string {
	return fmt.Sprintf("kmirror.%s.%s.%d.fill", mirrorName, txnFaultTopic, part)
}

// TestTxnFaults mirrors a transactional workload while a fault of the
// destination's transaction coordinator or partition leader is armed, then
// checks that every partition is MIRRORING with both sides identical at
// both isolation levels (no offset shifted) and that no destination
// transaction of the agent was left open.
func TestTxnFaults(t *testing.T) {
	// CONCURRENT_TRANSACTIONS (review §1.2): after every EndTxn of the
	// agent, the coordinator keeps the transaction in PrepareAbort for a
	// window and answers CONCURRENT_TRANSACTIONS to the id's next
	// AddPartitionsToTxn/InitProducerId/EndTxn meanwhile.
	t.Run("concurrent transactions", func(t *testing.T) {
		r := startTxnRun(t, 1)
		// Phase 1: a 30 ms window after every EndTxn of every agent id.
		// The agent waits for Complete* (DescribeTransactions) after each
		// marker before the id's next AddPartitionsToTxn, so it normally
		// never even meets the error: the windows only slow it down.
		ct := r.p.dst.ConcurrentTransactions(devcluster.ConcurrentTransactions{Window: 30 * time.Millisecond, Count: -1})
		for range 4 {
			r.progress()
		}
		opened, answered := ct.Opened(), ct.Answered()
		ct.Remove()
		if opened == 0 {
			t.Fatalf("no EndTxn of the agent opened a CONCURRENT_TRANSACTIONS window")
		}
		t.Logf("phase 1: %d windows opened (every one waited out through PrepareAbort → CompleteAbort), %d requests answered CONCURRENT_TRANSACTIONS", opened, answered)

		// Phase 2: a window that stays open (markers "in flight") on the
		// filler id of partition 0 while the agent restarts: the new
		// agent's InitProducerId on that id (settling its filler id
		// before reading the destination end, review B4) is answered
		// CONCURRENT_TRANSACTIONS until the markers land, and it must
		// retry, not give up or write meanwhile.
		held := r.p.dst.ConcurrentTransactions(devcluster.ConcurrentTransactions{TransactionalID: fillID(0), Window: 0, Count: 1})
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		defer cancel()
		if err := held.WaitOpened(ctx, 1); err != nil {
			t.Fatalf("no filler transaction of partition 0 ended: %v\n%s", err, r.a.describe())
		}
		r.a.stop()
		before := ends(t, r.p.dstAdm, txnFaultTopic)[0]
		r.a = r.p.startAgent(t, agentOpts{})
		if err := held.WaitAnswered(ctx, 2); err != nil {
			t.Fatalf("the restarted agent was answered CONCURRENT_TRANSACTIONS %d times, want ≥ 2 (retries): %v", held.Answered(), err)
		}
		// While the markers are "in flight", partition 0 must not write.
		time.Sleep(200 * time.Millisecond)
		if after := ends(t, r.p.dstAdm, txnFaultTopic)[0]; after != before {
			t.Fatalf("partition 0 wrote (end %d → %d) while its filler id was still PrepareAbort", before, after)
		}
		held.Complete()
		answeredHeld := held.Answered()
		held.Remove()
		r.progress()
		st := r.finish()
		t.Logf("phase 2: the restarted agent was answered CONCURRENT_TRANSACTIONS %d times and retried; %d records (%d aborted) mirrored",
			answeredHeld, st.Records, st.Aborted)
	})

	// Producer state expiry (review §1.4, B3): the destination forgets the
	// plain writer's idempotent state while the agent is down. The
	// restarted agent reads its next sequence from the destination log
	// (deterministic sequences, never bumped), and its first batch after the
	// expiry is accepted whatever its sequence, re-seeding the state that
	// later batches are checked against. What expiry changes: until that
	// first batch, a late request of the dead agent would not be
	// deduplicated but appended (an offset shift; the preflight check
	// requires producer.id.expiration.ms ≥ source retention for that
	// reason); without such a request, identity holds.
	t.Run("producer state expiry", func(t *testing.T) {
		r := startTxnRun(t, 2)
		r.progress()
		r.a.stop()
		var hs []*devcluster.ProducerExpiry
		for part := range int32(txnFaultPartitions) {
			// -1: every producer; on the destination only the agent's
			// plain writer has idempotent state to lose here.
			hs = append(hs, r.p.dst.ExpireProducerState(txnFaultTopic, part, -1))
		}
		r.a = r.p.startAgent(t, agentOpts{})
		r.progress()
		r.progress()
		st := r.finish()
		for part, h := range hs {
			if h.Rewritten() == 0 {
				t.Errorf("partition %d: no batch was written after the expiry (the fault never applied)", part)
			}
			t.Logf("partition %d: %d batches written on re-seeded producer state", part, h.Rewritten())
		}
		t.Logf("%d records (%d aborted) mirrored across an expiry and a restart", st.Records, st.Aborted)
	})

	// A very late duplicate marker (review §1.2, B1): the coordinator
	// appends the markers of some of the agent's transactions a second
	// time, 150 ms after the EndTxn was answered, after the agent's later
	// writes. The agent must absorb it (the source has an invisible offset
	// there) or fail the partition saying so; it must never let a record
	// land one offset late silently.
	t.Run("late duplicate markers", func(t *testing.T) {
		r := startTxnRun(t, 3)
		dup := r.p.dst.DuplicateMarkers(devcluster.DuplicateMarkers{Count: 3, Delay: 150 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		defer cancel()
		if err := dup.Wait(ctx, 3); err != nil {
			t.Fatalf("%d duplicate markers written, want 3: %v (fault error: %v)", dup.Written(), err, dup.Err())
		}
		dup.Remove()
		if err := dup.Err(); err != nil {
			t.Fatal(err)
		}
		// More source records after the duplicates, so that the agent
		// writes over where they landed.
		if err := r.prod.WaitAcked(ctx, totalAcked(r.prod)+600); err != nil {
			t.Fatal(err)
		}
		st := r.stop()
		duped := map[int32]bool{}
		for _, d := range dup.Duplicates() {
			duped[d.Partition] = true
		}
		statuses := waitSettledOrFailed(t, r.p, r.a, time.Minute)
		var failed, mirroring []int32
		dupAt := map[int32]int64{}
		for part, s := range statuses {
			switch s.State {
			case partition.Failed:
				failed = append(failed, part)
				if !duped[part] {
					t.Errorf("partition %d failed without a duplicate marker: %s", part, s.Reason)
				}
				dupAt[part] = checkDuplicateReason(t, r.p, part, s.Reason, dup.Duplicates())
			default:
				mirroring = append(mirroring, part)
			}
		}
		slices.Sort(failed)
		slices.Sort(mirroring)
		t.Logf("duplicates %v; FAILED %v, MIRRORING %v", dup.Duplicates(), failed, mirroring)
		if len(failed) == 0 {
			// Every duplicate absorbed: the whole topic is identical.
			r.p.waitMirrored(t, r.a, txnFaultTopic, time.Minute)
			r.p.assertIdentical(t, txnFaultTopic, identityOpts{wantRecords: st.Records})
		} else {
			// MIRRORING partitions identical to their end; FAILED ones up
			// to the duplicate marker the reason names (nothing shifted
			// below it; the duplicate itself, at the destination's end,
			// is what the partition stopped for).
			for part, s := range statuses {
				o := verify.Options{Topic: txnFaultTopic, Partitions: []int32{part}}
				if s.State == partition.Failed {
					o.To = min(s.DestinationOffset, dupAt[part])
				}
				compareRange(t, r.p, o)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		assertNoOpenAgentTxns(t, r.p.dstAdm)
	})
}

// checkDuplicateReason checks that a partition FAILED because of a duplicate
// marker, named as such, and that the destination really holds one of the
// duplicated markers at the offset the reason names.
func checkDuplicateReason(t *testing.T, p *pair, part int32, reason string, dups []devcluster.DuplicatedMarker) (at int64) {
	t.Helper()
	at = -1
	if _, err := fmt.Sscanf(reason, "duplicate transaction marker at destination offset %d", &at); err != nil {
		t.Errorf("partition %d failed for another reason than the duplicate marker: %q", part, reason)
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := fetcher.ReadAt(ctx, p.dstCl, leaders.New(p.dstCl), fetcher.TP{Topic: txnFaultTopic, Partition: part}, at, 1<<20)
	if err != nil {
		t.Fatalf("reading destination p%d at %d: %v", part, at, err)
	}
	for h, err := range recordbatch.All(c.Records) {
		if err != nil {
			t.Fatal(err)
		}
		if h.BaseOffset != at {
			continue
		}
		if !h.IsControl() || !slices.ContainsFunc(dups, func(d devcluster.DuplicatedMarker) bool {
			return d.Partition == part && d.ProducerID == h.ProducerID
		}) {
			t.Errorf("partition %d: the reason names a duplicate marker at %d, but the destination holds %+v there", part, at, h.Header)
		}
		return at
	}
	t.Errorf("partition %d: no batch starts at destination offset %d, which the reason names", part, at)
	return at
}

func totalAcked(prod *workload.Producer) int64 {
	var n int64
	for _, v := range prod.Acked() {
		n += v
	}
	return n
}

// waitSettledOrFailed waits until every partition of txnFaultTopic is either
// MIRRORING at the source end with lag 0, or FAILED, and returns their
// statuses.
func waitSettledOrFailed(t *testing.T, p *pair, a *agent, timeout time.Duration) map[int32]partition.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		src := ends(t, p.srcAdm, txnFaultTopic)
		dst := ends(t, p.dstAdm, txnFaultTopic)
		ps := a.partitions(txnFaultTopic)
		done := len(ps) == len(src)
		for part, end := range src {
			s := ps[part]
			switch {
			case s.State == partition.Failed:
			case s.State == partition.Mirroring && s.Lag == 0 && s.DestinationOffset == end && dst[part] == end:
			default:
				done = false
			}
		}
		if done {
			return ps
		}
		select {
		case <-ctx.Done():
			t.Fatalf("partitions neither caught up nor FAILED within %v: source %v destination %v\n%s", timeout, src, dst, a.describe())
		case <-time.After(pollEvery):
		}
	}
}

// compareRange runs verify.Compare with o at both isolation levels and fails
// the test on a mismatch.
func compareRange(t *testing.T, p *pair, o verify.Options) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, o)
	if err != nil {
		t.Fatalf("verify %+v: %v", o, err)
	}
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("verify %+v found mismatches:\n%s", o, b.String())
	}
	var n int64
	for _, pr := range rep.Partitions {
		if pr.Isolation == verify.ReadUncommitted {
			n += pr.Compared
		}
	}
	t.Logf("verify p%v [%d, %d): %d records identical at both isolation levels", o.Partitions, o.From, o.To, n)
}
