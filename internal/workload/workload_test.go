package workload

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func cluster(t *testing.T, partitions int32) []kgo.Opt {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "w"))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
}

// consume reads partitions of w from their start at the given isolation
// level until each partition p has given want[p] records.
func consume(t *testing.T, opts []kgo.Opt, want map[int32]int, iso kgo.IsolationLevel) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	parts := map[int32]kgo.Offset{}
	for p := range want {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"w": parts}),
		kgo.FetchIsolationLevel(iso))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[int32][]*kgo.Record{}
	done := func() bool {
		for p, n := range want {
			if len(out[p]) < n {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume: %v (have %d records of partition 0)", err, len(out[0]))
		}
		fs.EachRecord(func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], r) })
	}
	return out
}

func sameRecord(t *testing.T, i int, got, want *kgo.Record) {
	t.Helper()
	if got.Partition != want.Partition || (got.Key == nil) != (want.Key == nil) || !bytes.Equal(got.Key, want.Key) ||
		(got.Value == nil) != (want.Value == nil) || !bytes.Equal(got.Value, want.Value) ||
		!got.Timestamp.Equal(want.Timestamp) || len(got.Headers) != len(want.Headers) {
		t.Fatalf("record %d:\n got  p%d key %q value %q ts %v headers %v\n want p%d key %q value %q ts %v headers %v", i,
			got.Partition, got.Key, got.Value, got.Timestamp, got.Headers,
			want.Partition, want.Key, want.Value, want.Timestamp, want.Headers)
	}
	for h := range got.Headers {
		g, w := got.Headers[h], want.Headers[h]
		if g.Key != w.Key || (g.Value == nil) != (w.Value == nil) || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("record %d header %d: got %q=%q, want %q=%q", i, h, g.Key, g.Value, w.Key, w.Value)
		}
	}
}

// TestProduce100k is the size the package promises: 100k records over 3
// partitions, all codecs, every kind of null and empty, in a few seconds;
// then every record is read back where Spec.Record says it is.
func TestProduce100k(t *testing.T) {
	opts := cluster(t, 3)
	spec := Spec{
		Topic: "w", Partitions: 3, Records: 100_000, Seed: 42,
		Codecs:       AllCodecs,
		NullKeyEvery: 7, EmptyKeyEvery: 11, NullValueEvery: 13, EmptyValueEvery: 17,
		Headers: true, ExplicitTimestamps: true,
	}
	st, err := Produce(context.Background(), opts, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("produced %d records (%d bytes) in %v; batches %v", st.Records, st.Bytes, st.Elapsed, st.Batches)
	if st.Records != 100_000 || st.PerPartition[0] != 33_334 || st.PerPartition[1] != 33_333 || st.PerPartition[2] != 33_333 {
		t.Errorf("acknowledged %d records, per partition %v", st.Records, st.PerPartition)
	}
	for _, c := range AllCodecs {
		if st.Batches[c] == 0 {
			t.Errorf("no %s batch on the wire: %v", c, st.Batches)
		}
	}
	// Not a benchmark, a guard against a pathological slowdown on a
	// shared machine.
	if st.Elapsed > 30*time.Second {
		t.Errorf("took %v", st.Elapsed)
	}
	if age := time.Since(st.Spec.TimestampBase); age > time.Hour || age < 30*time.Minute {
		t.Errorf("timestamp base %v is %v old", st.Spec.TimestampBase, age)
	}

	got := consume(t, opts, map[int32]int{0: 33_334, 1: 33_333, 2: 33_333}, kgo.ReadUncommitted())
	for i := range spec.Records {
		want := st.Spec.Record(i)
		recs := got[want.Partition]
		off := i / 3
		if off >= len(recs) {
			t.Fatalf("record %d: partition %d has only %d records", i, want.Partition, len(recs))
		}
		if recs[off].Offset != int64(off) {
			t.Fatalf("record %d at offset %d, want %d", i, recs[off].Offset, off)
		}
		sameRecord(t, i, recs[off], want)
	}
}

func TestProduceTransactional(t *testing.T) {
	opts := cluster(t, 2)
	spec := Spec{Topic: "w", Partitions: 2, Records: 3000, ChunkRecords: 500, Codecs: []string{CodecZstd, CodecNone},
		TransactionalID: "wl", AbortEvery: 3, ExplicitTimestamps: true}
	st, err := Produce(context.Background(), opts, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Chunks 2 and 5 (records 1000-1499 and 2500-2999) are aborted.
	if st.Records != 3000 || st.Aborted != 1000 {
		t.Errorf("records %d aborted %d, want 3000 and 1000", st.Records, st.Aborted)
	}
	committed := consume(t, opts, map[int32]int{0: 1000, 1: 1000}, kgo.ReadCommitted())
	var visible []*kgo.Record
	for p := range int32(2) {
		visible = append(visible, committed[p]...)
	}
	if len(visible) != 2000 {
		t.Fatalf("read_committed sees %d records, want 2000", len(visible))
	}
	// Every chunk ends with a marker per partition: 6 chunks, 2 partitions.
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if end, _ := ends.Lookup("w", p); end.Offset != 1500+6 {
			t.Errorf("partition %d ends at %d, want 1506 (1500 records, 6 markers)", p, end.Offset)
		}
	}
	if n := sameCommitted(t, st, committed, 0); n != 2000 {
		t.Errorf("%d committed records expected by the spec, want 2000", n)
	}
}

// TestProduceTransactionalCommitLost loses every try of the first
// commit with its connection, as when the coordinator's broker is killed:
// production goes on, the chunk is counted as unsettled, and the client's
// abort after it fenced the transaction, so read_committed never sees it.
func TestProduceTransactionalCommitLost(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "w"))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	var lost atomic.Int32
	var first atomic.Pointer[kmsg.EndTxnRequest]
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if req.Commit {
			first.CompareAndSwap(nil, req)
		}
		if f := first.Load(); f != nil && req.ProducerID == f.ProducerID && req.ProducerEpoch == f.ProducerEpoch {
			lost.Add(1)
			return nil, errors.New("coordinator gone"), true // closes the connection
		}
		return nil, nil, false
	})
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequestRetries(2), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond })}
	spec := Spec{Topic: "w", Partitions: 2, Records: 3000, ChunkRecords: 500, Codecs: []string{CodecZstd},
		TransactionalID: "wl", AbortEvery: 3, ExplicitTimestamps: true}
	st, err := Produce(context.Background(), opts, spec)
	if err != nil {
		t.Fatalf("production stopped at the lost commit: %v", err)
	}
	if lost.Load() == 0 {
		t.Fatal("no commit was lost: the test tested nothing")
	}
	// Chunk 0's commit is lost; chunks 2 and 5 are aborted.
	if st.Records != 3000 || st.Aborted != 1000 || st.Unsettled != 500 {
		t.Errorf("records %d aborted %d unsettled %d, want 3000, 1000 and 500", st.Records, st.Aborted, st.Unsettled)
	}
	consume(t, opts, map[int32]int{0: 1500, 1: 1500}, kgo.ReadUncommitted())
	committed := consume(t, opts, map[int32]int{0: 750, 1: 750}, kgo.ReadCommitted())
	if n := sameCommitted(t, st, committed, 500); n != 1500 {
		t.Errorf("%d committed records from record 500 on expected by the spec, want 1500", n)
	}
}

// sameCommitted checks that committed holds, per partition and in order,
// the records of st's spec from record from on that the spec does not
// abort, and returns how many that is.
func sameCommitted(t *testing.T, st Stats, committed map[int32][]*kgo.Record, from int) int {
	t.Helper()
	n := 0
	for i := from; i < st.Spec.Records; i++ {
		if st.Spec.Aborted(i) {
			continue
		}
		want := st.Spec.Record(i)
		got := committed[want.Partition]
		if len(got) == 0 {
			t.Fatalf("record %d missing", i)
		}
		sameRecord(t, i, got[0], want)
		committed[want.Partition] = got[1:]
		n++
	}
	return n
}

// TestProducer runs a paced producer, acts once enough records are
// acknowledged, stops it, and checks that the counts match the topic.
func TestProducer(t *testing.T) {
	opts := cluster(t, 3)
	p := NewProducer(opts, Spec{Topic: "w", Partitions: 3, Codecs: []string{CodecLz4, CodecSnappy}}, 4000)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := p.Run(ctx)
		done <- result{st, err}
	}()

	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := p.WaitAcked(wctx, 1000); err != nil {
		t.Fatal(err)
	}
	mid := p.Acked()
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	st := res.st
	var midTotal int64
	for _, n := range mid {
		midTotal += n
	}
	if midTotal < 1000 || st.Records < midTotal {
		t.Errorf("acked %d midway and %d at the end", midTotal, st.Records)
	}
	// 4000 records a second: 1000 records take about 250 ms. Far too
	// fast means no pacing.
	if rate := float64(st.Records) / st.Elapsed.Seconds(); rate > 8000 {
		t.Errorf("%d records in %v: %.0f a second, want about 4000", st.Records, st.Elapsed, rate)
	}
	if p.Spec().ChunkRecords != 200 {
		t.Errorf("chunk size %d, want 200 (50 ms at 4000/s)", p.Spec().ChunkRecords)
	}

	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	final := p.Acked()
	for part := range int32(3) {
		end, _ := ends.Lookup("w", part)
		if end.Offset != st.PerPartition[part] || final[part] != st.PerPartition[part] {
			t.Errorf("partition %d: high watermark %d, stats %d, Acked %d", part, end.Offset, st.PerPartition[part], final[part])
		}
	}
	if err := p.WaitAcked(wctx, st.Records+1); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("WaitAcked past the end of a stopped producer: %v", err)
	}
}

func TestProducerStopsAtRecords(t *testing.T) {
	opts := cluster(t, 1)
	p := NewProducer(opts, Spec{Topic: "w", Records: 250}, 0)
	st, err := p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 250 || st.Batches[CodecNone] == 0 {
		t.Errorf("records %d, batches %v", st.Records, st.Batches)
	}
}

func TestRecordDeterministic(t *testing.T) {
	s := Spec{Topic: "w", Partitions: 4, Seed: 7, Keys: 10, ValueSize: 64, Headers: true, ExplicitTimestamps: true,
		NullKeyEvery: 5, EmptyKeyEvery: 3, NullValueEvery: 4, EmptyValueEvery: 6}.WithDefaults()
	other := s
	other.Seed = 8
	differs := 0
	for i := range 60 {
		a, b := s.Record(i), s.Record(i)
		sameRecord(t, i, a, b)
		if a.Partition != int32(i%4) {
			t.Errorf("record %d on partition %d", i, a.Partition)
		}
		switch {
		case i%5 == 4:
			if a.Key != nil {
				t.Errorf("record %d: key %q, want null", i, a.Key)
			}
		case i%3 == 2:
			if a.Key == nil || len(a.Key) != 0 {
				t.Errorf("record %d: key %q (nil %v), want empty", i, a.Key, a.Key == nil)
			}
		default:
			if !bytes.HasPrefix(a.Key, []byte("key-")) {
				t.Errorf("record %d: key %q", i, a.Key)
			}
		}
		switch {
		case i%4 == 3:
			if a.Value != nil {
				t.Errorf("record %d: value %q, want null", i, a.Value)
			}
		case i%6 == 5:
			if a.Value == nil || len(a.Value) != 0 {
				t.Errorf("record %d: value %q, want empty", i, a.Value)
			}
		default:
			if len(a.Value) != 64 {
				t.Errorf("record %d: value of %d bytes, want 64", i, len(a.Value))
			}
			if !bytes.Equal(a.Value, other.Record(i).Value) {
				differs++
			}
		}
		if len(a.Headers) != i%3 {
			t.Errorf("record %d: %d headers, want %d", i, len(a.Headers), i%3)
		}
		if want := s.TimestampBase.Add(time.Duration(i) * time.Millisecond); !a.Timestamp.Equal(want) {
			t.Errorf("record %d: timestamp %v, want %v", i, a.Timestamp, want)
		}
	}
	if differs == 0 {
		t.Error("another seed gives the same values")
	}
}

func TestSpecErrors(t *testing.T) {
	opts := cluster(t, 1)
	for _, tt := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no topic", Spec{Records: 1}, "topic"},
		{"unknown codec", Spec{Topic: "w", Records: 1, Codecs: []string{"brotli"}}, "unknown codec"},
		{"abort without transactions", Spec{Topic: "w", Records: 1, AbortEvery: 2}, "TransactionalID"},
		{"negative", Spec{Topic: "w", Records: 1, NullKeyEvery: -1}, "negative"},
		{"empty codec list", Spec{Topic: "w", Records: 1, Codecs: []string{}}, "no codec"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Produce(context.Background(), opts, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
