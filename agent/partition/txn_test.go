package partition

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	rb "github.com/kmirror/kmirror/internal/recordbatch"
)

// TestChunkMarkers checks where a chunk's markers end, and which of them
// more invisible offsets follow at once.
func TestChunkMarkers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *logBuilder)
		want  markerEnds
	}{
		{name: "no records", build: func(*logBuilder) {}, want: markerEnds{-1, -1}},
		{name: "no marker", build: func(b *logBuilder) {
			b.plain(prodP, rb.CodecNone, 2)
			b.gap(1)
			b.plain(prodP, rb.CodecNone, 1)
		}, want: markerEnds{-1, -1}},
		{name: "a marker a record follows", build: func(b *logBuilder) {
			b.txn(prodA, rb.CodecNone, 2)
			b.abort(prodA)
			b.plain(prodP, rb.CodecNone, 1)
		}, want: markerEnds{last: 3, absorbing: -1}},
		{name: "markers back to back", build: func(b *logBuilder) {
			b.txn(prodA, rb.CodecNone, 1)
			b.txn(prodB, rb.CodecNone, 1)
			b.abort(prodA)
			b.commit(prodB)
			b.plain(prodP, rb.CodecNone, 1)
			b.txn(prodC, rb.CodecNone, 1)
			b.abort(prodC)
		}, want: markerEnds{last: 7, absorbing: 3}},
		{name: "a gap after a marker", build: func(b *logBuilder) {
			b.txn(prodA, rb.CodecNone, 1)
			b.abort(prodA)
			b.gap(2)
			b.plain(prodP, rb.CodecNone, 1)
		}, want: markerEnds{last: 2, absorbing: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newLog(t, 0, 0)
			tc.build(b)
			if got := chunkMarkers(bytes.Join(b.done().batches, nil)); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDataTxnKeptOpen mirrors aborted source transactions served in one
// chunk and counts the destination transactions of aborted records that
// ended (EndTxn of the data transactional id): with FillMarkers one covers
// the chunk's aborted transactions, ended at its last marker or rather at
// one that more invisible offsets follow, unless its AbortSpan ran out; the
// coordinator's fillers end one per source transaction. The destination
// must be identical either way.
func TestDataTxnKeptOpen(t *testing.T) {
	abortedRuns := func(b *logBuilder) {
		for i := range 4 {
			b.plain(prodP, rb.CodecNone, 1)
			b.txn(prodA, rb.CodecNone, 2)
			b.txn(prodB, rb.CodecNone, 1)
			b.abort(prodA)
			b.plain(prodP, rb.CodecNone, 1)
			b.commit(prodB)
			if i == 1 {
				b.gap(1) // after a marker: more invisible offsets at once
			}
			b.plain(prodP, rb.CodecNone, 1)
		}
	}
	src := startSource(t)
	dst := devclustertest.Start(t)
	for i, tc := range []struct {
		name   string
		method FillerMethod
		span   time.Duration
		ended  int32
	}{
		// Up to the gap after the second run's commit, then the last marker.
		{"markers", FillMarkers, 0, 2},
		{"markers, span over at once", FillMarkers, time.Nanosecond, 4},
		{"coordinator", FillCoordinator, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := shape(abortedRuns).log(t)
			r := newRig(t, src, dst, fmt.Sprintf("keptopen%d", i), l, tc.method)
			r.abortSpan = tc.span
			data, _ := r.txnIDs()
			var ended atomic.Int32
			r.destControl(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
				if req := kreq.(*kmsg.EndTxnRequest); req.TransactionalID == data && !req.Commit {
					ended.Add(1)
				}
				return nil, false, false, nil
			})
			p := r.start()
			r.waitMirrored(p, l.end)
			p.kill()
			r.checkIdentical()
			if got := ended.Load(); got != tc.ended {
				t.Errorf("%d destination transactions of aborted records ended, want %d", got, tc.ended)
			}
		})
	}
}

// TestFinishWithDataTxnOpen stops a partition mirror (a failover stop: its
// Run cancelled, not halted at a clean point) while its transaction of
// aborted source records is open, the source's next offset a visible
// record. Finish aborts the transaction, whose marker lands at the
// destination end; that marker stands for no source offset, so the last
// mirrored offset is the one before it.
func TestFinishWithDataTxnOpen(t *testing.T) {
	src := startSource(t)
	dst := devclustertest.Start(t)
	for i, method := range []FillerMethod{FillMarkers, FillCoordinator} {
		t.Run(string(method), func(t *testing.T) {
			l := shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 2)
				b.txn(prodA, rb.CodecNone, 2)
				b.plain(prodP, rb.CodecNone, 1)
				b.abort(prodA)
			}).log(t)
			l.setServed(4) // up to the aborted records: the transaction stays open
			r := newRig(t, src, dst, fmt.Sprintf("finishopen%d", i), l, method)
			p := r.start()
			r.waitMirrored(p, 4)
			data, _ := r.txnIDs()
			ctx := context.Background()
			if st, err := r.dw.DescribeTxn(ctx, data); err != nil || !st.Open() {
				t.Fatalf("the transaction of aborted records is not open before the stop: %+v, %v", st, err)
			}
			p.cancel()
			<-p.done
			var noted []int64
			p.m.cfg.OnClose = func(at int64) {
				if st, err := r.dw.DescribeTxn(ctx, data); err != nil || !st.Open() {
					t.Errorf("OnClose called with the transaction not open (%+v, %v): called after the abort", st, err)
				}
				noted = append(noted, at)
			}
			last, err := p.m.Finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if last != 3 {
				t.Errorf("last mirrored offset %d, want 3 (the abort marker at 4 stands for no source offset)", last)
			}
			if len(noted) != 1 || noted[0] != 4 {
				t.Errorf("OnClose heard %v, want [4]: the end before the abort marker", noted)
			}
			// An agent restarted before the stop was recorded finishes it
			// with a mirror of its own: with the figure OnClose gave it
			// reports 3 again; without, the marker would count.
			for _, c := range []struct {
				closedAt, want int64
			}{{4, 3}, {0, 4}} {
				cfg := p.cfg
				cfg.ClosedAt, cfg.OnClose = c.closedAt, nil
				if got, err := New(cfg).Finish(ctx); err != nil || got != c.want {
					t.Errorf("Finish of a new mirror with ClosedAt %d: last mirrored %d, %v; want %d", c.closedAt, got, err, c.want)
				}
			}
			if st := p.m.Status(); st.LastMirrored != last || st.DestinationOffset != 5 {
				t.Errorf("status: last mirrored %d, destination offset %d; want %d, 5", st.LastMirrored, st.DestinationOffset, last)
			}
			if st, err := r.dw.DescribeTxn(ctx, data); err != nil || !st.Settled() {
				t.Errorf("the transaction of aborted records is not settled after Finish: %+v, %v", st, err)
			}
			if b := r.bounds(); b.HighWatermark != 5 || b.LastStable != 5 {
				t.Errorf("destination end %d, last stable %d; want 5, 5 (the abort marker at 4)", b.HighWatermark, b.LastStable)
			}
		})
	}
}
