package verify_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

const topic = "t"

// base is the timestamp of record 0: recent, so that no retention check on
// any broker drops the records.
var base = time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)

// cluster is one side: an in-process kfake cluster with topic t and a client.
type cluster struct {
	c  *kfake.Cluster
	cl *kgo.Client
}

func newCluster(t *testing.T, partitions int32, configs map[string]string) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	if err := c.CreateTopic(topic, partitions, configs); err != nil {
		t.Fatalf("creating topic: %v", err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &cluster{c: c, cl: cl}
}

// produce writes the records in one batch per partition, in order.
func (c *cluster) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	if err := c.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// each writes every record in its own batch, so that compaction can remove
// them one by one.
func (c *cluster) each(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		c.produce(t, r)
	}
}

var txnSeq atomic.Int64

// txn writes the records in one transaction, committed or aborted: the
// records take offsets and the marker takes one more.
func (c *cluster) txn(t *testing.T, commit bool, recs ...*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.c.ListenAddrs()...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(fmt.Sprintf("verify-test-%d", txnSeq.Add(1))),
	)
	if err != nil {
		t.Fatalf("transactional client: %v", err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("transactional produce: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction: %v", err)
	}
}

// rec is record i of the reference data set: key k<i>, value v<i>, one
// header, timestamp base+i.
func rec(i int) *kgo.Record {
	return &kgo.Record{
		Key:       fmt.Appendf(nil, "k%d", i),
		Value:     fmt.Appendf(nil, "v%d", i),
		Headers:   []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "x%d", i)}},
		Timestamp: base.Add(time.Duration(i) * time.Millisecond),
	}
}

func recs(from, to int) []*kgo.Record {
	var out []*kgo.Record
	for i := from; i < to; i++ {
		out = append(out, rec(i))
	}
	return out
}

// with returns rec(i) changed by f.
func with(i int, f func(r *kgo.Record)) *kgo.Record {
	r := rec(i)
	f(r)
	return r
}

func onPartition(p int32, rs ...*kgo.Record) []*kgo.Record {
	for _, r := range rs {
		r.Partition = p
	}
	return rs
}

// both names a mismatch expected at both isolation levels.
func both(p int32, offset int64, kind verify.Kind) []string {
	return []string{
		mm(verify.ReadUncommitted, p, offset, kind),
		mm(verify.ReadCommitted, p, offset, kind),
	}
}

func mm(iso verify.Isolation, p int32, offset int64, kind verify.Kind) string {
	return fmt.Sprintf("%s p%d @%d %s", iso, p, offset, kind)
}

func got(r verify.Report) []string {
	var out []string
	for _, m := range r.Mismatches {
		out = append(out, mm(m.Isolation, m.Partition, m.Offset, m.Kind))
	}
	return out
}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	// Report order: all read_uncommitted mismatches, then read_committed.
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Compare(strings.SplitN(b, " ", 2)[0], strings.SplitN(a, " ", 2)[0])
	})
	return out
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name       string
		partitions int32
		dstParts   int32 // when it differs from partitions
		src, dst   func(t *testing.T, c *cluster)
		opts       verify.Options
		want       []string // every mismatch, in report order
		check      func(t *testing.T, r verify.Report)
	}{
		{
			name: "identical",
			src: func(t *testing.T, c *cluster) {
				c.produce(t, recs(0, 5)...)
				c.txn(t, true, recs(5, 7)...)  // 5, 6, marker 7
				c.txn(t, false, recs(8, 9)...) // 8 aborted, marker 9
				c.produce(t, with(10, func(r *kgo.Record) { r.Key, r.Value, r.Headers = nil, []byte{}, nil }))
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, recs(0, 5)...)
				c.txn(t, true, recs(5, 7)...)
				c.txn(t, false, recs(8, 9)...)
				c.produce(t, with(10, func(r *kgo.Record) { r.Key, r.Value, r.Headers = nil, []byte{}, nil }))
			},
			check: func(t *testing.T, r verify.Report) {
				for _, p := range r.Partitions {
					// 11 offsets: 0-4 plain, 5-6 committed, 7 marker, 8 aborted, 9 marker, 10.
					wantVisible := int64(9) // read_uncommitted sees the aborted record
					if p.Isolation == verify.ReadCommitted {
						wantVisible = 8
					}
					if p.From != 0 || p.To != 11 || p.Compared != wantVisible ||
						p.SourceVisible != wantVisible || p.DestinationVisible != wantVisible {
						t.Errorf("%s: range [%d, %d) compared %d visible %d/%d, want [0, 11) and %d everywhere",
							p.Isolation, p.From, p.To, p.Compared, p.SourceVisible, p.DestinationVisible, wantVisible)
					}
				}
			},
		},
		{
			name: "value differs",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0), rec(1), with(2, func(r *kgo.Record) { r.Value = []byte("other") }), rec(3), rec(4))
			},
			want: both(0, 2, verify.KindValue),
		},
		{
			name: "null versus empty value",
			src:  func(t *testing.T, c *cluster) { c.produce(t, with(0, func(r *kgo.Record) { r.Value = nil })) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, with(0, func(r *kgo.Record) { r.Value = []byte{} })) },
			want: both(0, 0, verify.KindValue),
		},
		{
			name: "null versus empty key",
			src:  func(t *testing.T, c *cluster) { c.produce(t, rec(0), with(1, func(r *kgo.Record) { r.Key = nil })) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0), with(1, func(r *kgo.Record) { r.Key = []byte{} }))
			},
			want: both(0, 1, verify.KindKey),
		},
		{
			name: "header value differs",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 3)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0), with(1, func(r *kgo.Record) { r.Headers[0].Value = []byte("y") }), rec(2))
			},
			want: both(0, 1, verify.KindHeaders),
		},
		{
			name: "header null versus empty value",
			src: func(t *testing.T, c *cluster) {
				c.produce(t, with(0, func(r *kgo.Record) { r.Headers[0].Value = nil }))
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, with(0, func(r *kgo.Record) { r.Headers[0].Value = []byte{} }))
			},
			want: both(0, 0, verify.KindHeaders),
		},
		{
			name: "header order differs",
			src: func(t *testing.T, c *cluster) {
				c.produce(t, with(0, func(r *kgo.Record) { r.Headers = []kgo.RecordHeader{{Key: "a"}, {Key: "b"}} }))
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, with(0, func(r *kgo.Record) { r.Headers = []kgo.RecordHeader{{Key: "b"}, {Key: "a"}} }))
			},
			want: both(0, 0, verify.KindHeaders),
		},
		{
			name: "timestamp differs",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0), rec(1), rec(2), with(3, func(r *kgo.Record) { r.Timestamp = r.Timestamp.Add(time.Millisecond) }), rec(4))
			},
			want: both(0, 3, verify.KindTimestamp),
		},
		{
			// The destination has a transaction marker where the source
			// has a record: the record is missing, the rest lines up.
			name: "record missing in the middle",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, recs(0, 2)...)
				c.txn(t, true, rec(2)) // 2, marker at 3
				c.produce(t, rec(4))
			},
			want: both(0, 3, verify.KindMissing),
		},
		{
			name: "record missing at the end",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 4)...) },
			want: both(0, 4, verify.KindEnd),
		},
		{
			name: "destination behind is accepted with AllowLag",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 4)...) },
			opts: verify.Options{AllowLag: true},
		},
		{
			name: "destination ahead is never accepted",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 4)...) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			opts: verify.Options{AllowLag: true},
			want: both(0, 4, verify.KindEnd),
		},
		{
			name: "extra record in the middle",
			src: func(t *testing.T, c *cluster) {
				c.produce(t, recs(0, 2)...)
				c.txn(t, true, rec(2)) // marker at 3
				c.produce(t, rec(4))
			},
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			want: both(0, 3, verify.KindExtra),
		},
		{
			// An inserted record moves every later record up by one.
			name: "offset shift",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0), rec(1), rec(100), rec(2), rec(3), rec(4))
			},
			want: join(
				both(0, 2, verify.KindKey),
				both(0, 3, verify.KindShift),
				both(0, 4, verify.KindShift),
				both(0, 5, verify.KindEnd),
			),
			check: func(t *testing.T, r verify.Report) {
				for _, m := range r.Mismatches {
					if m.Kind == verify.KindShift && !strings.Contains(m.Destination, "shifted by +1") {
						t.Errorf("shift at %d described as %q, want it to say shifted by +1", m.Offset, m.Destination)
					}
				}
			},
		},
		{
			// Same offsets, same records, different fate: only a
			// read_committed consumer can tell.
			name: "aborted on one side, committed on the other",
			src: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0))
				c.txn(t, false, rec(1), rec(2)) // aborted 1-2, marker 3
				c.produce(t, rec(4))
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0))
				c.txn(t, true, rec(1), rec(2))
				c.produce(t, rec(4))
			},
			want: []string{
				mm(verify.ReadCommitted, 0, 1, verify.KindExtra),
				mm(verify.ReadCommitted, 0, 2, verify.KindExtra),
			},
		},
		{
			name: "log start differs",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, recs(0, 5)...)
				if err := c.c.DeleteRecords(topic, 0, 2); err != nil {
					t.Fatal(err)
				}
			},
			want: both(0, 0, verify.KindLogStart),
			check: func(t *testing.T, r verify.Report) {
				for _, p := range r.Partitions {
					if p.From != 2 || p.Compared != 3 {
						t.Errorf("%s: compared %d from %d, want 3 from the later log start 2", p.Isolation, p.Compared, p.From)
					}
				}
			},
		},
		{
			name: "log start differs outside the requested range",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, recs(0, 5)...)
				if err := c.c.DeleteRecords(topic, 0, 2); err != nil {
					t.Fatal(err)
				}
			},
			opts: verify.Options{From: 2},
		},
		{
			name: "difference outside From and To",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 6)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, with(0, func(r *kgo.Record) { r.Value = nil }), rec(1), rec(2), rec(3),
					with(4, func(r *kgo.Record) { r.Value = nil }), rec(5))
			},
			opts: verify.Options{From: 1, To: 4},
			check: func(t *testing.T, r verify.Report) {
				for _, p := range r.Partitions {
					if p.From != 1 || p.To != 4 || p.Compared != 3 {
						t.Errorf("%s: compared %d over [%d, %d), want 3 over [1, 4)", p.Isolation, p.Compared, p.From, p.To)
					}
				}
			},
		},
		{
			name: "writes after the last mirrored offset left out (PartitionTo)",
			src: func(t *testing.T, c *cluster) {
				c.produce(t, append(recs(0, 4), with(4, func(r *kgo.Record) { r.Value = []byte("source only") }))...)
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, append(recs(0, 4), with(4, func(r *kgo.Record) { r.Value = []byte("after failover") }), rec(5))...)
			},
			opts: verify.Options{PartitionTo: map[int32]int64{0: 4}, To: 6},
			check: func(t *testing.T, r verify.Report) {
				for _, p := range r.Partitions {
					if p.To != 4 || p.Compared != 4 {
						t.Errorf("%s: compared %d over [%d, %d), want 4 over [0, 4)", p.Isolation, p.Compared, p.From, p.To)
					}
				}
			},
		},
		{
			name:       "PartitionTo bounds only its partition",
			partitions: 2,
			src: func(t *testing.T, c *cluster) {
				c.produce(t, onPartition(0, recs(0, 5)...)...)
				c.produce(t, onPartition(1, recs(0, 5)...)...)
			},
			dst: func(t *testing.T, c *cluster) {
				for p := range int32(2) {
					c.produce(t, onPartition(p, append(recs(0, 3), with(3, func(r *kgo.Record) { r.Value = []byte("after failover") }), rec(4))...)...)
				}
			},
			opts: verify.Options{PartitionTo: map[int32]int64{1: 3}},
			want: both(0, 3, verify.KindValue),
		},
		{
			name: "PartitionTo at From compares nothing (nothing mirrored)",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 2)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, with(0, func(r *kgo.Record) { r.Value = []byte("written after failover") }))
			},
			opts: verify.Options{PartitionTo: map[int32]int64{0: 0}},
			check: func(t *testing.T, r verify.Report) {
				for _, p := range r.Partitions {
					if p.Compared != 0 || p.To != 0 {
						t.Errorf("%s: compared %d over [%d, %d), want nothing", p.Isolation, p.Compared, p.From, p.To)
					}
				}
			},
		},
		{
			name: "ends differ past To",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 4)...) },
			opts: verify.Options{To: 3},
		},
		{
			name: "ends differ before From",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 4)...) },
			opts: verify.Options{From: 6},
		},
		{
			name: "one end inside the range",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 5)...) },
			dst:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 4)...) },
			opts: verify.Options{From: 4},
			want: both(0, 4, verify.KindEnd),
		},
		{
			name:       "difference in one partition of three",
			partitions: 3,
			src: func(t *testing.T, c *cluster) {
				for p := range int32(3) {
					c.produce(t, onPartition(p, recs(0, 4)...)...)
				}
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, onPartition(0, recs(0, 4)...)...)
				c.produce(t, onPartition(1, rec(0), rec(1), rec(2), with(3, func(r *kgo.Record) { r.Key = nil }))...)
				c.produce(t, onPartition(2, recs(0, 4)...)...)
			},
			want: both(1, 3, verify.KindKey),
		},
		{
			name:       "partition on one side only",
			partitions: 2,
			dstParts:   1,
			src: func(t *testing.T, c *cluster) {
				c.produce(t, onPartition(0, recs(0, 2)...)...)
				c.produce(t, onPartition(1, recs(0, 2)...)...)
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, onPartition(0, recs(0, 2)...)...)
			},
			want: []string{mm("", 1, -1, verify.KindPartition)},
		},
		{
			name:       "selected partitions only",
			partitions: 2,
			src: func(t *testing.T, c *cluster) {
				c.produce(t, onPartition(0, recs(0, 2)...)...)
				c.produce(t, onPartition(1, recs(0, 2)...)...)
			},
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, onPartition(0, recs(0, 2)...)...)
				c.produce(t, onPartition(1, recs(5, 7)...)...)
			},
			opts: verify.Options{Partitions: []int32{0}},
		},
		{
			name: "one isolation level",
			src:  func(t *testing.T, c *cluster) { c.produce(t, recs(0, 2)...) },
			dst: func(t *testing.T, c *cluster) {
				c.produce(t, rec(0), with(1, func(r *kgo.Record) { r.Value = nil }))
			},
			opts: verify.Options{Isolation: []verify.Isolation{verify.ReadCommitted}},
			want: []string{mm(verify.ReadCommitted, 0, 1, verify.KindValue)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := tt.partitions
			if parts == 0 {
				parts = 1
			}
			src := newCluster(t, parts, nil)
			dstParts := tt.dstParts
			if dstParts == 0 {
				dstParts = parts
			}
			dst := newCluster(t, dstParts, nil)
			tt.src(t, src)
			tt.dst(t, dst)

			opts := tt.opts
			opts.Topic = topic
			opts.MaxMismatches = -1
			r, err := verify.Compare(context.Background(), src.cl, dst.cl, opts)
			if err != nil {
				t.Fatalf("Compare: %v", err)
			}
			if g := got(r); !slices.Equal(g, tt.want) {
				var buf bytes.Buffer
				_ = r.WriteText(&buf)
				t.Errorf("mismatches:\n got  %q\n want %q\nreport:\n%s", g, tt.want, buf.String())
			}
			if r.OK() != (len(tt.want) == 0) || r.TotalMismatches != int64(len(tt.want)) {
				t.Errorf("OK() = %v, TotalMismatches = %d, want %d", r.OK(), r.TotalMismatches, len(tt.want))
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestCompareKeyAware compacts the source only, which (in kfake) also moves
// its log start: the lone records on the destination were all superseded, so
// a key-aware comparison passes and a plain one does not.
func TestCompareKeyAware(t *testing.T) {
	cfg := map[string]string{"cleanup.policy": "compact"}
	src := newCluster(t, 1, cfg)
	dst := newCluster(t, 1, cfg)
	kv := func(i int, k string) *kgo.Record {
		r := rec(i)
		r.Key = []byte(k)
		return r
	}
	data := []*kgo.Record{kv(0, "a"), kv(1, "b"), kv(2, "a"), kv(3, "c"), kv(4, "b"), kv(5, "a"), kv(6, "d")}
	src.each(t, data...)
	dst.each(t, data...)
	src.c.Compact()

	ctx := context.Background()
	r, err := verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic, KeyAware: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		var buf bytes.Buffer
		_ = r.WriteText(&buf)
		t.Fatalf("key-aware comparison of a compacted source failed:\n%s", buf.String())
	}
	for _, p := range r.Partitions {
		// a@0, b@1, a@2 are superseded by b@4 and a@5 (kfake drops them
		// and moves the source log start to 3).
		if p.Superseded != 3 || p.Source.LogStart != 3 || p.From != 0 {
			t.Errorf("%s: superseded %d, source log start %d, range from %d; want 3, 3, 0",
				p.Isolation, p.Superseded, p.Source.LogStart, p.From)
		}
	}

	plain, err := verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if g, want := got(plain), both(0, 0, verify.KindLogStart); !slices.Equal(g, want) {
		t.Errorf("plain comparison: got %q, want %q", g, want)
	}

	// A lone record whose key never comes back on both sides is a real
	// difference even for a key-aware comparison.
	src.each(t, kv(7, "e"))
	dst.txn(t, true, kv(7, "e")) // same record, but now the destination has a marker at 8
	src.each(t, kv(8, "f"))      // 8 exists on the source only: key f never reappears
	dst.each(t, kv(9, "g"))
	src.each(t, kv(9, "g"))
	r, err = verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic, KeyAware: true, MaxMismatches: -1})
	if err != nil {
		t.Fatal(err)
	}
	if g, want := got(r), both(0, 8, verify.KindMissing); !slices.Equal(g, want) {
		t.Errorf("lone record never superseded: got %q, want %q", g, want)
	}
}

// TestCompareLong streams partitions much larger than one fetch, with
// compressed batches, and finds a single difference deep inside.
func TestCompareLong(t *testing.T) {
	src := newCluster(t, 3, nil)
	dst := newCluster(t, 3, nil)
	const perPartition = 6000
	value := bytes.Repeat([]byte("0123456789abcdef"), 16) // 256 bytes: ~1.5 MiB per partition
	mk := func(p int32, i int) *kgo.Record {
		r := rec(i)
		r.Partition = p
		r.Value = append(fmt.Appendf(nil, "%d-", i), value...)
		return r
	}
	for _, side := range []*cluster{src, dst} {
		var batch []*kgo.Record
		for p := range int32(3) {
			for i := range perPartition {
				r := mk(p, i)
				if side == dst && p == 1 && i == 4321 {
					r.Value[len(r.Value)-1] ^= 1
				}
				batch = append(batch, r)
			}
		}
		side.produce(t, batch...)
	}
	r, err := verify.Compare(context.Background(), src.cl, dst.cl, verify.Options{Topic: topic, Isolation: []verify.Isolation{verify.ReadUncommitted}})
	if err != nil {
		t.Fatal(err)
	}
	if g, want := got(r), []string{mm(verify.ReadUncommitted, 1, 4321, verify.KindValue)}; !slices.Equal(g, want) {
		t.Errorf("got %q, want %q", g, want)
	}
	var compared int64
	for _, p := range r.Partitions {
		compared += p.Compared
	}
	if compared != 3*perPartition {
		t.Errorf("compared %d records, want %d", compared, 3*perPartition)
	}
}

func TestMaxMismatchesAndText(t *testing.T) {
	src := newCluster(t, 1, nil)
	dst := newCluster(t, 1, nil)
	src.produce(t, recs(0, 50)...)
	var other []*kgo.Record
	for i := range 50 {
		other = append(other, with(i, func(r *kgo.Record) { r.Value = []byte("different") }))
	}
	dst.produce(t, other...)

	r, err := verify.Compare(context.Background(), src.cl, dst.cl, verify.Options{Topic: topic, MaxMismatches: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		mm(verify.ReadUncommitted, 0, 0, verify.KindValue),
		mm(verify.ReadUncommitted, 0, 1, verify.KindValue),
		mm(verify.ReadUncommitted, 0, 2, verify.KindValue),
		mm(verify.ReadUncommitted, 0, 3, verify.KindValue),
		mm(verify.ReadUncommitted, 0, 4, verify.KindValue),
	}
	if g := got(r); !slices.Equal(g, want) || r.TotalMismatches != 100 {
		t.Errorf("got %q (total %d), want %q (total 100)", g, r.TotalMismatches, want)
	}

	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, s := range []string{
		"topic t: 100 mismatches (first 5 shown below)",
		"read_committed    0          [0, 50)  50        50/50",
		"partition 0 offset 4 (read_uncommitted): value: the records differ",
		`source:      value "v4"`,
		`destination: value "different"`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("text report lacks %q:\n%s", s, text)
		}
	}
}

func TestCompareErrors(t *testing.T) {
	src := newCluster(t, 1, nil)
	dst := newCluster(t, 1, nil)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		opts verify.Options
		want string
	}{
		{"no topic", verify.Options{}, "a topic is required"},
		{"unknown topic", verify.Options{Topic: "nope"}, "nope"},
		{"negative From", verify.Options{Topic: topic, From: -1}, "negative"},
		{"bad isolation", verify.Options{Topic: topic, Isolation: []verify.Isolation{"read_everything"}}, "unknown isolation"},
		{"unknown partition", verify.Options{Topic: topic, Partitions: []int32{7}}, "partition 7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := verify.Compare(ctx, src.cl, dst.cl, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestRecordDiff(t *testing.T) {
	a := verify.Record{Offset: 1, Key: []byte("k"), Value: []byte{}, Headers: []verify.Header{{Key: "h"}}, Timestamp: 5}
	for _, tt := range []struct {
		name string
		b    verify.Record
		want []verify.Kind
	}{
		{"equal", a, nil},
		{"offset", verify.Record{Offset: 2, Key: []byte("k"), Value: []byte{}, Headers: []verify.Header{{Key: "h"}}, Timestamp: 5}, []verify.Kind{verify.KindOffset}},
		{"null value", verify.Record{Offset: 1, Key: []byte("k"), Headers: []verify.Header{{Key: "h"}}, Timestamp: 5}, []verify.Kind{verify.KindValue}},
		{"empty header value", verify.Record{Offset: 1, Key: []byte("k"), Value: []byte{}, Headers: []verify.Header{{Key: "h", Value: []byte{}}}, Timestamp: 5}, []verify.Kind{verify.KindHeaders}},
		{"everything", verify.Record{Offset: 0, Timestamp: 6}, []verify.Kind{verify.KindOffset, verify.KindKey, verify.KindValue, verify.KindHeaders, verify.KindTimestamp}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if g := a.Diff(tt.b); !slices.Equal(g, tt.want) {
				t.Errorf("Diff = %v, want %v", g, tt.want)
			}
			if a.Equal(tt.b) != (len(tt.want) == 0) {
				t.Errorf("Equal disagrees with Diff")
			}
		})
	}
}

// TestCompareWorkload compares a realistic stream: many batches, every codec,
// transactions with aborts, nulls, empties and headers. Batching and
// compression are not part of what a consumer sees, so the same records
// written through other codecs compare equal; a different transaction fate
// shows under read_committed only.
func TestCompareWorkload(t *testing.T) {
	ctx := context.Background()
	spec := workload.Spec{
		Topic: topic, Partitions: 2, Records: 12_000, ChunkRecords: 1000, Seed: 3,
		Codecs:       workload.AllCodecs,
		NullKeyEvery: 5, EmptyKeyEvery: 7, NullValueEvery: 11, EmptyValueEvery: 13,
		Headers: true, ExplicitTimestamps: true,
		TransactionalID: "wl", AbortEvery: 4,
	}.WithDefaults()
	src := newCluster(t, 2, nil)
	if _, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(src.c.ListenAddrs()...)}, spec); err != nil {
		t.Fatal(err)
	}

	t.Run("other codecs", func(t *testing.T) {
		dst := newCluster(t, 2, nil)
		other := spec
		other.Codecs = []string{workload.CodecZstd, workload.CodecNone, workload.CodecLz4, workload.CodecGzip, workload.CodecSnappy}
		if _, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(dst.c.ListenAddrs()...)}, other); err != nil {
			t.Fatal(err)
		}
		r, err := verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() {
			var buf bytes.Buffer
			_ = r.WriteText(&buf)
			t.Fatalf("same records through other codecs differ:\n%s", buf.String())
		}
		for _, p := range r.Partitions {
			// 12 chunks of 500 records a partition, each with a
			// marker; chunks 3, 7 and 11 are aborted.
			want := int64(6000)
			if p.Isolation == verify.ReadCommitted {
				want = 4500
			}
			if p.Compared != want || p.To != 6000+12 {
				t.Errorf("%s p%d: compared %d over [%d, %d), want %d over [0, 6012)", p.Isolation, p.Partition, p.Compared, p.From, p.To, want)
			}
		}
	})

	t.Run("committed instead of aborted", func(t *testing.T) {
		dst := newCluster(t, 2, nil)
		other := spec
		other.AbortEvery = 0
		if _, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(dst.c.ListenAddrs()...)}, other); err != nil {
			t.Fatal(err)
		}
		r, err := verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic, MaxMismatches: 3})
		if err != nil {
			t.Fatal(err)
		}
		// Chunk 3 (records 3000-3999) is the first aborted one: its
		// first record on partition 0 is record 3000, at offset 1500
		// plus the 3 markers of chunks 0-2.
		want := []string{
			mm(verify.ReadCommitted, 0, 1503, verify.KindExtra),
			mm(verify.ReadCommitted, 0, 1504, verify.KindExtra),
			mm(verify.ReadCommitted, 0, 1505, verify.KindExtra),
		}
		if g := got(r); !slices.Equal(g, want) || r.TotalMismatches != 3000 {
			t.Errorf("got %q (total %d), want %q (total 3000)", g, r.TotalMismatches, want)
		}
	})
}

// TestCompareFetchErrors: a leader move (a retriable fetch error) is ridden
// out; an error that will not go away fails the comparison with its cause.
func TestCompareFetchErrors(t *testing.T) {
	ctx := context.Background()
	src := newCluster(t, 1, nil)
	dst := newCluster(t, 1, nil)
	src.produce(t, recs(0, 5)...)
	dst.produce(t, recs(0, 5)...)

	h := src.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 3})
	r, err := verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic})
	if err != nil || !r.OK() {
		t.Fatalf("Compare after NOT_LEADER_FOR_PARTITION: ok %v, err %v", r.OK(), err)
	}
	if h.Hits() != 3 {
		t.Errorf("fault hit %d times, want 3", h.Hits())
	}

	dst.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	_, err = verify.Compare(ctx, src.cl, dst.cl, verify.Options{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") || !strings.Contains(err.Error(), "destination") {
		t.Errorf("err = %v, want the destination's TOPIC_AUTHORIZATION_FAILED", err)
	}
}
