package devcluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// logBatch is one batch of a partition's log as a fetch returns it.
type logBatch struct {
	kmsg.RecordBatch
	// marker is the control record's type for a control batch: commit or
	// abort.
	marker string
}

func (b logBatch) String() string {
	if b.marker != "" {
		return fmt.Sprintf("@%d %s marker pid %d epoch %d", b.FirstOffset, b.marker, b.ProducerID, b.ProducerEpoch)
	}
	return fmt.Sprintf("@%d %d records pid %d epoch %d seq %d", b.FirstOffset, b.NumRecords, b.ProducerID, b.ProducerEpoch, b.FirstSequence)
}

// readLog returns every batch of the partition, control batches included,
// with a raw read_uncommitted fetch to its leader.
func readLog(t *testing.T, c *Cluster, cl *kgo.Client, topic string, partition int32) []logBatch {
	t.Helper()
	info := c.Kfake().TopicInfo(topic)
	if info == nil {
		t.Fatalf("no topic %s", topic)
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, info.TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl.Broker(int(c.Kfake().LeaderFor(topic, partition))))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch answered %d topics", len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("fetch %s/%d: %v", topic, partition, err)
	}
	var out []logBatch
	for raw := p.RecordBatches; len(raw) >= 12; {
		n := 12 + int(binary.BigEndian.Uint32(raw[8:]))
		var b logBatch
		if err := b.ReadFrom(raw[:n]); err != nil {
			t.Fatalf("batch at byte %d: %v", len(p.RecordBatches)-len(raw), err)
		}
		if b.Attributes&attrControl != 0 {
			var r kmsg.Record
			var key kmsg.ControlRecordKey
			if err := r.ReadFrom(b.Records); err != nil {
				t.Fatal(err)
			}
			if err := key.ReadFrom(r.Key); err != nil {
				t.Fatal(err)
			}
			b.marker = map[kmsg.ControlRecordKeyType]string{kmsg.ControlRecordKeyTypeAbort: "abort", kmsg.ControlRecordKeyTypeCommit: "commit"}[key.Type]
		}
		out = append(out, b)
		raw = raw[n:]
	}
	return out
}

// markersAt returns the offsets of the log's control batches.
func markersAt(log []logBatch) []int64 {
	var offs []int64
	for _, b := range log {
		if b.marker != "" {
			offs = append(offs, b.FirstOffset)
		}
	}
	return offs
}

// runTxn runs one transaction of n records on a kgo transactional
// producer and ends it.
func runTxn(t *testing.T, p *kgo.Client, n int, commit kgo.TransactionEndTry) error {
	t.Helper()
	ctx := testCtx(t)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := p.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("txn")}).FirstErr(); err != nil {
			t.Fatalf("transactional produce: %v", err)
		}
	}
	return p.EndTransaction(ctx, commit)
}

func plainRecords(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	for i := range n {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "p%d", i), Value: []byte("plain")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// TestDuplicateMarkers shows the duplicate on a kgo transactional producer:
// an unselected transaction of two records takes three offsets, a selected
// one four, the fourth a second commit marker of the same producer and
// epoch; the next transaction (Count spent) takes three again, and
// read_committed consumers see every record.
func TestDuplicateMarkers(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("dm", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	h := c.DuplicateMarkers(DuplicateMarkers{TransactionalID: "dm-txn"})
	defer h.Remove()

	other := newClient(t, c, kgo.TransactionalID("other-txn"), kgo.DefaultProduceTopic("dm"))
	if err := runTxn(t, other, 2, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if hw := highWatermark(t, c, "dm", 0); hw != 3 {
		t.Fatalf("unselected transaction: high watermark %d, want 3 (2 records + 1 marker)", hw)
	}

	p := newClient(t, c, kgo.TransactionalID("dm-txn"), kgo.DefaultProduceTopic("dm"))
	if err := runTxn(t, p, 2, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if hw := highWatermark(t, c, "dm", 0); hw != 7 {
		t.Fatalf("selected transaction: high watermark %d, want 7 (one more than without: a duplicate marker)", hw)
	}
	if h.Written() != 1 || h.Err() != nil {
		t.Fatalf("written %d, err %v; want 1 and nil", h.Written(), h.Err())
	}

	if err := runTxn(t, p, 2, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if hw := highWatermark(t, c, "dm", 0); hw != 10 {
		t.Fatalf("after Count is spent: high watermark %d, want 10", hw)
	}

	log := readLog(t, c, cl, "dm", 0)
	if got := markersAt(log); !slices.Equal(got, []int64{2, 5, 6, 9}) {
		t.Fatalf("markers at %v, want [2 5 6 9]; log %v", got, log)
	}
	at := func(off int64) logBatch {
		for _, b := range log {
			if b.FirstOffset == off {
				return b
			}
		}
		t.Fatalf("no batch at %d: %v", off, log)
		return logBatch{}
	}
	m, dup := at(5), at(6)
	if m.marker != "commit" || dup.marker != "commit" || m.ProducerID != dup.ProducerID || m.ProducerEpoch != dup.ProducerEpoch {
		t.Fatalf("marker %v and duplicate %v differ", m, dup)
	}
	if d := h.Duplicates(); len(d) != 1 || d[0] != (DuplicatedMarker{Topic: "dm", Partition: 0, ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: true}) {
		t.Fatalf("Duplicates() = %+v", d)
	}

	rc := newClient(t, c, kgo.ConsumeTopics("dm"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var offs []int64
	for _, r := range pollN(t, rc, 6) {
		offs = append(offs, r.Offset)
	}
	if !slices.Equal(offs, []int64{0, 1, 3, 4, 7, 8}) {
		t.Fatalf("read_committed offsets %v", offs)
	}
}

// TestDuplicateMarkersLater shows duplicates that land after other writes:
// held until Release, and delayed.
func TestDuplicateMarkersLater(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("dml", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	p := newClient(t, c, kgo.TransactionalID("dml-txn"), kgo.DefaultProduceTopic("dml"))

	held := c.DuplicateMarkers(DuplicateMarkers{TransactionalID: "dml-txn", Hold: true})
	if err := runTxn(t, p, 2, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	plainRecords(t, cl, "dml", 2) // offsets 3 and 4
	if hw := highWatermark(t, c, "dml", 0); hw != 5 || held.Written() != 0 {
		t.Fatalf("before Release: high watermark %d, written %d; want 5 and 0", hw, held.Written())
	}
	if err := held.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	held.Remove()

	delayed := c.DuplicateMarkers(DuplicateMarkers{TransactionalID: "dml-txn", Delay: 10 * time.Millisecond})
	defer delayed.Remove()
	if err := runTxn(t, p, 1, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if err := delayed.Wait(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if err := delayed.Err(); err != nil {
		t.Fatal(err)
	}

	log := readLog(t, c, cl, "dml", 0)
	var got []string
	for _, b := range log {
		got = append(got, fmt.Sprintf("%d:%s", b.FirstOffset, b.marker))
	}
	// 0-1 data, 2 commit, 3-4 plain, 5 the held duplicate commit, 6 aborted
	// data, 7 abort, 8 its delayed duplicate.
	want := []string{"0:", "1:", "2:commit", "3:", "4:", "5:commit", "6:", "7:abort", "8:abort"}
	if !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
	if log[2].ProducerID != log[5].ProducerID || log[7].ProducerID != log[8].ProducerID {
		t.Fatalf("duplicates of another producer: %v", log)
	}
}

// TestDuplicateMarkersPartitions restricts the duplicates to one partition
// of a transaction that spans two.
func TestDuplicateMarkersPartitions(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("dmp", 2, nil); err != nil {
		t.Fatal(err)
	}
	h := c.DuplicateMarkers(DuplicateMarkers{Topic: "dmp", Partitions: []int32{1}})
	defer h.Remove()
	p := newClient(t, c, kgo.TransactionalID("dmp-txn"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for part := range int32(2) {
		if err := p.ProduceSync(testCtx(t), &kgo.Record{Topic: "dmp", Partition: part, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.EndTransaction(testCtx(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if hw0, hw1 := highWatermark(t, c, "dmp", 0), highWatermark(t, c, "dmp", 1); hw0 != 2 || hw1 != 3 {
		t.Fatalf("high watermarks %d and %d, want 2 (no duplicate) and 3", hw0, hw1)
	}
}

// describeTxnState returns the transaction's state as a client sees it.
func describeTxnState(t *testing.T, cl *kgo.Client, id string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{id}
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.TransactionStates) != 1 {
		t.Fatalf("describe %s: %d states", id, len(resp.TransactionStates))
	}
	st := resp.TransactionStates[0]
	if err := kerr.ErrorForCode(st.ErrorCode); err != nil {
		t.Fatalf("describe %s: %v", id, err)
	}
	return st
}

// addPartition sends a raw AddPartitionsToTxn and returns the partition's
// code.
func addPartition(t *testing.T, cl *kgo.Client, id string, pid int64, epoch int16, topic string) int16 {
	t.Helper()
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

// TestConcurrentTransactions shows the coordinator busy after a commit: raw
// requests right after EndTxn get CONCURRENT_TRANSACTIONS (or
// INVALID_TXN_STATE for the opposite EndTxn) and DescribeTransactions says
// PrepareCommit with the partitions; after Complete it says CompleteCommit
// and AddPartitionsToTxn goes through.
func TestConcurrentTransactions(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("ct", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	h := c.ConcurrentTransactions(ConcurrentTransactions{TransactionalID: "ct-txn"})
	defer h.Remove()
	p := newClient(t, c, kgo.TransactionalID("ct-txn"), kgo.DefaultProduceTopic("ct"))
	if err := runTxn(t, p, 2, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if h.Opened() != 1 {
		t.Fatalf("windows opened: %d", h.Opened())
	}

	st := describeTxnState(t, cl, "ct-txn")
	if st.State != "PrepareCommit" || len(st.Topics) != 1 || st.Topics[0].Topic != "ct" || !slices.Equal(st.Topics[0].Partitions, []int32{0}) || st.StartTimestamp <= 0 {
		t.Fatalf("during the window: %+v, want PrepareCommit with ct/0 and a start time", st)
	}
	pid, epoch := st.ProducerID, st.ProducerEpoch

	if code := addPartition(t, cl, "ct-txn", pid, epoch, "ct"); code != kerr.ConcurrentTransactions.Code {
		t.Errorf("AddPartitionsToTxn: %v, want CONCURRENT_TRANSACTIONS", kerr.ErrorForCode(code))
	}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("ct-txn"), 60000
	if resp, err := init.RequestWith(testCtx(t), cl); err != nil {
		t.Fatal(err)
	} else if resp.ErrorCode != kerr.ConcurrentTransactions.Code {
		t.Errorf("InitProducerId: %v, want CONCURRENT_TRANSACTIONS", kerr.ErrorForCode(resp.ErrorCode))
	}
	for _, tc := range []struct {
		commit bool
		want   *kerr.Error
	}{{true, kerr.ConcurrentTransactions}, {false, kerr.InvalidTxnState}} {
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "ct-txn", pid, epoch, tc.commit
		if resp, err := end.RequestWith(testCtx(t), cl); err != nil {
			t.Fatal(err)
		} else if resp.ErrorCode != tc.want.Code {
			t.Errorf("EndTxn commit=%t: %v, want %v", tc.commit, kerr.ErrorForCode(resp.ErrorCode), tc.want)
		}
	}
	if h.Answered() != 4 {
		t.Errorf("answered %d requests, want 4", h.Answered())
	}

	h.Complete()
	if st := describeTxnState(t, cl, "ct-txn"); st.State != "CompleteCommit" || st.ProducerID != pid || st.ProducerEpoch != epoch {
		t.Fatalf("after Complete: %+v, want CompleteCommit", st)
	}
	if code := addPartition(t, cl, "ct-txn", pid, epoch, "ct"); code != 0 {
		t.Fatalf("AddPartitionsToTxn after Complete: %v", kerr.ErrorForCode(code))
	}
	if st := describeTxnState(t, cl, "ct-txn"); st.State != "Ongoing" {
		t.Fatalf("after a new AddPartitionsToTxn: %s, want Ongoing", st.State)
	}
	// Other transactional ids are not affected.
	if code := addPartition(t, cl, "unknown-txn", 1, 0, "ct"); code == kerr.ConcurrentTransactions.Code {
		t.Fatal("another transactional id got CONCURRENT_TRANSACTIONS")
	}
}

// TestConcurrentTransactionsKgo shows a kgo producer meeting the busy
// coordinator: its next transaction's first produce is answered
// CONCURRENT_TRANSACTIONS and retried until the markers "land"; and a timed
// window closes by itself.
func TestConcurrentTransactionsKgo(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("ctk", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	h := c.ConcurrentTransactions(ConcurrentTransactions{TransactionalID: "ctk-txn", Count: -1})
	// kgo negotiates KIP-890 part 2 with kfake: its Produce v13 adds the
	// partition and gets CONCURRENT_TRANSACTIONS, which kgo retries after a
	// metadata refresh, by default at most every 5s.
	p := newClient(t, c, kgo.TransactionalID("ctk-txn"), kgo.DefaultProduceTopic("ctk"), kgo.MetadataMinAge(10*time.Millisecond))
	if err := runTxn(t, p, 1, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		ctx := testCtx(t)
		if err := p.BeginTransaction(); err != nil {
			done <- err
			return
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("second")}).FirstErr(); err != nil {
			done <- err
			return
		}
		done <- p.EndTransaction(ctx, kgo.TryAbort)
	}()
	if err := h.WaitAnswered(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	h.Complete()
	if err := <-done; err != nil {
		t.Fatalf("second transaction: %v", err)
	}
	if err := h.WaitOpened(testCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	h.Complete()
	if st := describeTxnState(t, cl, "ctk-txn"); st.State != "CompleteAbort" {
		t.Fatalf("after the aborted second transaction: %s, want CompleteAbort", st.State)
	}
	h.Remove()
	if st := describeTxnState(t, cl, "ctk-txn"); st.State != "Empty" {
		t.Fatalf("after Remove: %s, want kfake's Empty", st.State)
	}

	timed := c.ConcurrentTransactions(ConcurrentTransactions{TransactionalID: "ctk-txn", Window: time.Millisecond})
	defer timed.Remove()
	if err := runTxn(t, p, 1, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := timed.WaitCompleted(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if st := describeTxnState(t, cl, "ctk-txn"); st.State != "CompleteCommit" {
		t.Fatalf("after the window: %s, want CompleteCommit", st.State)
	}
}

// idemBatch is a batch of n records of an idempotent producer.
func idemBatch(pid int64, seq int32, n int) testBatch {
	return testBatch{producerID: pid, producerEpoch: 0, baseSequence: seq, records: keyed(n)}
}

// TestExpireProducerState shows the broker forgetting an idempotent
// producer: a replayed batch, deduplicated before, is appended after; the
// replay becomes the new state (a second replay is deduplicated, the
// producer's own next sequence is out of order, the sequence after the
// replay is accepted). Other producers keep their state, and the strict
// layer still refuses a bad batch of the expired producer.
func TestExpireProducerState(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("exp", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	send := func(tb testBatch) int16 {
		t.Helper()
		return produceRaw(t, c, cl, nil, partBatch{"exp", 0, tb.encode(t)})["exp/0"]
	}
	first, second := idemBatch(9000, 0, 3), idemBatch(9000, 3, 2)
	for _, tb := range []testBatch{first, second, idemBatch(9001, 0, 1)} {
		if code := send(tb); code != 0 {
			t.Fatalf("setup: %v", kerr.ErrorForCode(code))
		}
	}
	if code := send(first); code != 0 || highWatermark(t, c, "exp", 0) != 6 {
		t.Fatalf("replay before expiry: %v, high watermark %d; want a deduplicated success at 6", kerr.ErrorForCode(code), highWatermark(t, c, "exp", 0))
	}

	h := c.ExpireProducerState("exp", 0, 9000)
	defer h.Remove()
	steps := []struct {
		name string
		tb   testBatch
		want *kerr.Error
		hw   int64
	}{
		{"replay after expiry is appended", first, nil, 9},
		{"second replay is deduplicated", first, nil, 9},
		{"the producer's own next sequence is out of order", idemBatch(9000, 5, 1), kerr.OutOfOrderSequenceNumber, 9},
		{"the sequence after the replay is accepted", idemBatch(9000, 3, 1), nil, 10},
		{"another producer keeps its state", idemBatch(9001, 0, 1), nil, 10},
		{"strict checks still apply", func() testBatch { b := idemBatch(9000, 4, 1); b.badCRC = true; return b }(), kerr.CorruptMessage, 10},
	}
	for _, s := range steps {
		code := send(s.tb)
		if code != errCode(s.want) || highWatermark(t, c, "exp", 0) != s.hw {
			t.Fatalf("%s: %v, high watermark %d; want %v and %d", s.name, kerr.ErrorForCode(code), highWatermark(t, c, "exp", 0), s.want, s.hw)
		}
	}
	alias, ok := h.Alias(9000)
	if !ok || alias == 9000 || h.Rewritten() != 4 {
		t.Fatalf("alias %d %t, rewritten %d", alias, ok, h.Rewritten())
	}
	log := readLog(t, c, cl, "exp", 0)
	var got []string
	for _, b := range log {
		got = append(got, b.String())
	}
	want := []string{
		"@0 3 records pid 9000 epoch 0 seq 0",
		"@3 2 records pid 9000 epoch 0 seq 3",
		"@5 1 records pid 9001 epoch 0 seq 0",
		fmt.Sprintf("@6 3 records pid %d epoch 0 seq 0", alias),
		fmt.Sprintf("@9 1 records pid %d epoch 0 seq 3", alias),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("log:\n%v\nwant:\n%v", got, want)
	}

	// Expiring again starts another alias: the replay lands once more.
	h.Expire()
	if code := send(first); code != 0 || highWatermark(t, c, "exp", 0) != 13 {
		t.Fatalf("replay after a second expiry: %v, high watermark %d; want 13", kerr.ErrorForCode(code), highWatermark(t, c, "exp", 0))
	}
	if a2, _ := h.Alias(9000); a2 == alias {
		t.Fatal("a second expiry kept the alias")
	}
}

func errCode(e *kerr.Error) int16 {
	if e == nil {
		return 0
	}
	return e.Code
}

// TestTimeoutAbort shows an open transaction aborted "by timeout" after
// other writes: the ABORT marker lands at the current end, read_committed
// consumers lose the transaction's records, and the producer is fenced.
func TestTimeoutAbort(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("ta", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	p := newClient(t, c, kgo.TransactionalID("ta-txn"), kgo.DefaultProduceTopic("ta"))
	if _, err := c.TimeoutAbort(testCtx(t), "ta-txn"); err == nil {
		t.Fatal("TimeoutAbort of an unknown transactional id: no error")
	}

	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("orphan")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	plainRecords(t, cl, "ta", 2) // offsets 2 and 3, after the open transaction
	if pi := c.Kfake().PartitionInfo("ta", 0); pi.HighWatermark != 4 || pi.LastStableOffset != 0 {
		t.Fatalf("before the abort: high watermark %d, last stable %d; want 4 and 0", pi.HighWatermark, pi.LastStableOffset)
	}

	res, err := c.TimeoutAbort(testCtx(t), "ta-txn")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Partitions["ta"], []int32{0}) || len(res.Partitions) != 1 {
		t.Fatalf("aborted partitions %v, want ta/0", res.Partitions)
	}
	if pi := c.Kfake().PartitionInfo("ta", 0); pi.HighWatermark != 5 || pi.LastStableOffset != 5 {
		t.Fatalf("after the abort: high watermark %d, last stable %d; want 5 and 5", pi.HighWatermark, pi.LastStableOffset)
	}
	log := readLog(t, c, cl, "ta", 0)
	if last := log[len(log)-1]; last.FirstOffset != 4 || last.marker != "abort" || last.ProducerID != res.ProducerID || last.ProducerEpoch != res.ProducerEpoch {
		t.Fatalf("last batch %v, want the abort marker of pid %d epoch %d at 4", last, res.ProducerID, res.ProducerEpoch)
	}
	rc := newClient(t, c, kgo.ConsumeTopics("ta"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var offs []int64
	for _, r := range pollN(t, rc, 2) {
		offs = append(offs, r.Offset)
	}
	if !slices.Equal(offs, []int64{2, 3}) {
		t.Fatalf("read_committed offsets %v, want [2 3]", offs)
	}

	// The producer's old epoch is fenced: a raw EndTxn v4 (the protocol
	// kmirror pins) gets PRODUCER_FENCED, and the kgo producer fails.
	tv1 := newClient(t, c, pinVersion(kmsg.EndTxn, 4))
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "ta-txn", res.ProducerID, res.ProducerEpoch, true
	resp, err := tv1.Broker(int(c.Kfake().CoordinatorFor("ta-txn"))).Request(testCtx(t), end)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.EndTxnResponse).ErrorCode; code != kerr.ProducerFenced.Code {
		t.Fatalf("EndTxn with the old epoch: %v, want PRODUCER_FENCED", kerr.ErrorForCode(code))
	}
	// kgo (KIP-890 part 2 against kfake) produces with the old epoch.
	if err := p.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("zombie")}).FirstErr(); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("produce with the old epoch: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	if err := p.EndTransaction(testCtx(t), kgo.TryCommit); err == nil {
		t.Fatal("the fenced kgo producer committed")
	}
	if hw := highWatermark(t, c, "ta", 0); hw != 5 {
		t.Fatalf("high watermark %d after the fenced commit, want 5", hw)
	}
}

// sendProduce sends one raw produce request for topic/0 and returns the
// partition's answer or the request's error.
func sendProduce(ctx context.Context, c *Cluster, cl *kgo.Client, topic string, records []byte) (kmsg.ProduceResponseTopicPartition, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, c.Kfake().TopicInfo(topic).TopicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(c.Kfake().LeaderFor(topic, 0))))
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	return resp.Topics[0].Partitions[0], nil
}

// TestLateRequest holds a killed process's produce request while a new
// process writes, then applies it at the new end of the log, for a sender
// whose connection was cut and for one that was left waiting.
func TestLateRequest(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("late", 1, nil); err != nil {
		t.Fatal(err)
	}
	newProc := newClient(t, c)

	cut := c.LateRequest(LateRequest{Topic: "late", ProducerIDs: []int64{9100}, Disconnect: true})
	old := newClient(t, c)
	if _, err := sendProduce(testCtx(t), c, old, "late", idemBatch(9100, 0, 2).encode(t)); err == nil {
		t.Fatal("the held request was answered")
	}
	if err := cut.Wait(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	old.Close() // the process is gone

	waiting := c.LateRequest(LateRequest{Topic: "late", Partitions: []int32{0}, ProducerIDs: []int64{9200}})
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := sendProduce(ctx, c, newClient(t, c), "late", idemBatch(9200, 0, 1).encode(t))
		errc <- err
	}()
	if err := waiting.Wait(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel() // this process gives up waiting
	if err := <-errc; err == nil {
		t.Fatal("the waiting request was answered")
	}

	plainRecords(t, newProc, "late", 3) // the new process writes at 0..2
	if hw := highWatermark(t, c, "late", 0); hw != 3 {
		t.Fatalf("high watermark %d with two requests held, want 3", hw)
	}
	for _, tc := range []struct {
		h    *LateRequestHandle
		base int64
		hw   int64
	}{{cut, 3, 5}, {waiting, 5, 6}} {
		resps, err := tc.h.Release(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(resps) != 1 || resps[0].Topics[0].Partitions[0].ErrorCode != 0 || resps[0].Topics[0].Partitions[0].BaseOffset != tc.base {
			t.Fatalf("release: %+v, want a success at %d", resps, tc.base)
		}
		if hw := highWatermark(t, c, "late", 0); hw != tc.hw {
			t.Fatalf("high watermark %d after release, want %d", hw, tc.hw)
		}
		tc.h.Remove()
	}
	if cut.Held() != 1 || waiting.Held() != 1 {
		t.Fatalf("held %d and %d, want 1 each", cut.Held(), waiting.Held())
	}
}

// TestLateRequestAfterExpiry is design-review B3 end to end, with the
// strict layer, LateRequest and ExpireProducerState chained on Produce: a
// killed process's late batch is deduplicated while the producer state
// lasts, and appended a second time once it expired.
func TestLateRequestAfterExpiry(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("b3", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	if _, err := sendProduce(testCtx(t), c, cl, "b3", idemBatch(9300, 0, 3).encode(t)); err != nil {
		t.Fatal(err)
	}
	next := idemBatch(9300, 3, 2).encode(t)
	hold := func() *LateRequestHandle {
		h := c.LateRequest(LateRequest{ProducerIDs: []int64{9300}, Disconnect: true})
		if _, err := sendProduce(testCtx(t), c, newClient(t, c), "b3", next); err == nil {
			t.Fatal("the held request was answered")
		}
		return h
	}
	release := func(h *LateRequestHandle) kmsg.ProduceResponseTopicPartition {
		resps, err := h.Release(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return resps[0].Topics[0].Partitions[0]
	}

	h := hold()
	// The new process writes the same batch (same producer, epoch,
	// sequence): it lands at 3.
	if p, err := sendProduce(testCtx(t), c, cl, "b3", next); err != nil || p.ErrorCode != 0 || p.BaseOffset != 3 {
		t.Fatalf("new process: %+v %v", p, err)
	}
	if p := release(h); p.ErrorCode != 0 || p.BaseOffset != 3 || highWatermark(t, c, "b3", 0) != 5 {
		t.Fatalf("late batch with producer state: %+v, high watermark %d; want deduplicated at 3, 5", p, highWatermark(t, c, "b3", 0))
	}

	h = hold()
	c.ExpireProducerState("b3", 0, -1)
	if p := release(h); p.ErrorCode != 0 || p.BaseOffset != 5 || highWatermark(t, c, "b3", 0) != 7 {
		t.Fatalf("late batch after expiry: %+v, high watermark %d; want appended again at 5, 7", p, highWatermark(t, c, "b3", 0))
	}
}

// TestFaultHelpersChain arms DuplicateMarkers and ConcurrentTransactions
// for every transactional id on one cluster: both intercept the same EndTxn
// (one relays the other's copy) and both effects show.
func TestFaultHelpersChain(t *testing.T) {
	c := startT(t)
	if err := c.Kfake().CreateTopic("chain", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c)
	ct := c.ConcurrentTransactions(ConcurrentTransactions{Count: -1})
	defer ct.Remove()
	dm := c.DuplicateMarkers(DuplicateMarkers{Count: -1})
	defer dm.Remove()
	p := newClient(t, c, kgo.TransactionalID("chain-txn"), kgo.DefaultProduceTopic("chain"))
	if err := runTxn(t, p, 1, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if hw := highWatermark(t, c, "chain", 0); hw != 3 || dm.Written() != 1 {
		t.Fatalf("high watermark %d, duplicates %d; want 3 and 1", hw, dm.Written())
	}
	if st := describeTxnState(t, cl, "chain-txn"); st.State != "PrepareCommit" {
		t.Fatalf("state %s, want PrepareCommit", st.State)
	}
	ct.Complete()
	if st := describeTxnState(t, cl, "chain-txn"); st.State != "CompleteCommit" {
		t.Fatalf("state %s, want CompleteCommit", st.State)
	}
	if got := markersAt(readLog(t, c, cl, "chain", 0)); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("markers at %v, want [1 2]", got)
	}
}
