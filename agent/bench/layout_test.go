package bench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// rounds is what a source's layout asks of the writes that mirror it to a
// one-broker destination. A write request carries at most one batch of a
// partition, or the partition's markers in a row; a partition's next item
// waits for the answer to its last (a marker must not take the offset of
// a batch the broker refused). So every round of requests advances each
// partition by one item at most.
type rounds struct {
	// least is the rounds any schedule needs: the items of the longest
	// partition.
	least int
	// greedy is what a schedule that knows the whole layout needs when
	// each round writes the kind of item most partitions are at (markers
	// on a tie), one request a round.
	greedy int
}

// layoutRounds reads the batch headers of every partition of topic.
func layoutRounds(ctx context.Context, b testing.TB, cl *kgo.Client, topic string, parts int32) rounds {
	b.Helper()
	items := make([][]bool, parts) // true: markers
	eachBatch(ctx, b, cl, topic, parts, func(p int32, batch recordbatch.Batch) {
		marker := batch.IsControl()
		if n := len(items[p]); marker && n > 0 && items[p][n-1] {
			return // markers in a row go together
		}
		items[p] = append(items[p], marker)
	})
	return roundsOf(items)
}

// logCount is what a topic's log holds: the broker appended each batch on
// its own (a filler marker is a control batch of one record).
type logCount struct {
	batches, control int64 // control: of batches
	offsets          int64 // from the log starts to the high watermarks
}

// countLog reads the batch headers of every partition of topic.
func countLog(ctx context.Context, b testing.TB, cl *kgo.Client, topic string, parts int32) logCount {
	b.Helper()
	var c logCount
	eachBatch(ctx, b, cl, topic, parts, func(_ int32, batch recordbatch.Batch) {
		c.batches++
		if batch.IsControl() {
			c.control++
		}
		c.offsets += batch.LastOffset() + 1 - batch.BaseOffset
	})
	return c
}

// eachBatch calls fn with every batch of every partition of topic, in
// order, from its log start to its high watermark.
func eachBatch(ctx context.Context, b testing.TB, cl *kgo.Client, topic string, parts int32, fn func(int32, recordbatch.Batch)) {
	b.Helper()
	meta := leaders.New(cl)
	for p := range parts {
		bounds, err := meta.Bounds(ctx, topic, p)
		if err != nil {
			b.Fatal(err)
		}
		tp := fetcher.TP{Topic: topic, Partition: p}
		for batch, err := range fetcher.ReadRange(ctx, cl, meta, tp, bounds.LogStart, bounds.HighWatermark, 8<<20) {
			if err != nil {
				b.Fatalf("reading the batches of %s: %v", tp, err)
			}
			fn(p, batch)
		}
	}
}

// roundsOf computes rounds from each partition's items in order (true:
// markers in a row, false: a batch).
func roundsOf(items [][]bool) rounds {
	var r rounds
	next := make([]int, len(items))
	for _, p := range items {
		r.least = max(r.least, len(p))
	}
	for {
		var batches, markers int
		for i, p := range items {
			if next[i] < len(p) {
				if p[next[i]] {
					markers++
				} else {
					batches++
				}
			}
		}
		if batches+markers == 0 {
			return r
		}
		kind := markers >= batches
		for i, p := range items {
			if next[i] < len(p) && p[next[i]] == kind {
				next[i]++
			}
		}
		r.greedy++
	}
}

func TestRoundsOf(t *testing.T) {
	const B, M = false, true
	for _, tc := range []struct {
		name  string
		items [][]bool
		want  rounds
	}{
		{"none", nil, rounds{}},
		{"partitions in step", [][]bool{{B, M, B, M}, {B, M, B, M}}, rounds{4, 4}},
		{"half a step apart", [][]bool{{B, M, B, M}, {M, B, M, B}}, rounds{4, 5}},
		{"two batches in a row", [][]bool{{B, B, M}, {B, M, B}, {B, M, B}}, rounds{3, 4}},
		{"plain", [][]bool{{B, B}, {B}}, rounds{2, 2}},
	} {
		if got := roundsOf(tc.items); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestCountLog counts a log of a transaction (a batch, then its commit
// marker) and a plain batch of three records.
func TestCountLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := devclustertest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.TransactionalID("count"), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := createTopic(ctx, kadm.NewClient(cl), "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("in a transaction")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.DefaultProduceTopic("t"), kgo.ProducerLinger(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	// One batch: produced together and flushed at once, before the linger.
	for _, v := range []string{"a", "b", "c"} {
		plain.Produce(ctx, kgo.StringRecord(v), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := plain.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := countLog(ctx, t, cl, "t", 1), (logCount{batches: 3, control: 1, offsets: 5}); got != want {
		t.Errorf("countLog = %+v, want %+v", got, want)
	}
}
