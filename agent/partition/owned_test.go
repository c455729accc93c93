package partition

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// TestOwnBatch: the foreign-write decision of recoverSequences over a
// destination tail, for the ids the writers hold now and the ids recorded
// before.
func TestOwnBatch(t *testing.T) {
	const (
		plain    = 1000 // the plain writer now
		data     = 2000 // the abort transactional id now
		fill     = 3000 // the filler transactional id now
		oldPlain = 1001 // a deleted mirror's plain writer
		oldData  = 2001 // the abort id before its epoch ran out
		oldFill  = 3001 // the filler id before it expired
		stranger = 4000 // an application's producer on the destination
	)
	rec := func(pid int64) recordbatch.Header { return recordbatch.Header{ProducerID: pid} }
	txnRec := func(pid int64) recordbatch.Header {
		return recordbatch.Header{ProducerID: pid, Attributes: recordbatch.AttrTransactional}
	}
	marker := func(pid int64) recordbatch.Header {
		return recordbatch.Header{ProducerID: pid, Attributes: recordbatch.AttrTransactional | recordbatch.AttrControl}
	}
	none := map[int64]bool{}
	all := map[int64]bool{plain: true, data: true, fill: true, oldPlain: true, oldData: true, oldFill: true}
	for _, tc := range []struct {
		name  string
		tail  []recordbatch.Header
		owned map[int64]bool
		fill  int64 // the filler id now (-1: FillMarkers)
		ok    bool
	}{
		{"the writers' own batches", []recordbatch.Header{rec(plain), txnRec(data), marker(data), marker(fill), marker(plain)}, none, fill, true},
		{"markers of FillMarkers", []recordbatch.Header{rec(plain), marker(markerPID)}, none, -1, true},
		{"empty tail", nil, none, fill, true},

		// The agent's ids changed: foreign unless recorded.
		{"old filler marker, not recorded", []recordbatch.Header{rec(plain), marker(oldFill)}, none, fill, false},
		{"old filler marker, recorded", []recordbatch.Header{rec(plain), marker(oldFill)}, all, fill, true},
		{"old abort id's records and marker, not recorded", []recordbatch.Header{txnRec(oldData), marker(oldData)}, none, fill, false},
		{"old abort id's records and marker, recorded", []recordbatch.Header{txnRec(oldData), marker(oldData), rec(plain)}, all, fill, true},
		{"deleted mirror's plain batches, not recorded", []recordbatch.Header{rec(oldPlain), marker(fill)}, none, fill, false},
		{"deleted mirror's plain batches, recorded", []recordbatch.Header{rec(oldPlain), marker(oldFill), rec(plain)}, all, fill, true},

		// A really foreign write stays one, whatever the agent recorded.
		{"application batch", []recordbatch.Header{rec(plain), rec(stranger)}, all, fill, false},
		{"application transaction", []recordbatch.Header{txnRec(stranger), marker(stranger)}, all, fill, false},
		{"non-idempotent producer", []recordbatch.Header{rec(-1)}, map[int64]bool{-1: true}, fill, false},
		{"records of the filler id", []recordbatch.Header{txnRec(fill)}, all, fill, false},
		{"records of FillMarkers' id", []recordbatch.Header{rec(markerPID)}, all, -1, false},
		{"FillMarkers: producer id 0 is not a filler", []recordbatch.Header{marker(0)}, none, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := true
			for _, h := range tc.tail {
				if !ownBatch(h, plain, data, tc.fill, tc.owned) {
					ok = false
				}
			}
			if ok != tc.ok {
				t.Fatalf("tail %+v with owned %v: ours %v, want %v", tc.tail, tc.owned, ok, tc.ok)
			}
		})
	}
}

// fakeProducers is an OwnedProducers in memory.
type fakeProducers struct {
	ids   map[fetcher.TP][]int64
	adds  int
	fails error
}

func (f *fakeProducers) OwnedProducers(tp fetcher.TP) []int64 { return f.ids[tp] }

func (f *fakeProducers) AddOwnedProducers(_ context.Context, tp fetcher.TP, ids []int64) error {
	if f.fails != nil {
		return f.fails
	}
	f.adds++
	f.ids[tp] = append(f.ids[tp], ids...)
	return nil
}

// TestOwn: a new id is persisted before it counts as owned, once; a failed
// persist leaves it not owned (and fails the caller, which then does not
// write with it); persisted ids are merged at the next resync.
func TestOwn(t *testing.T) {
	tp := fetcher.TP{Topic: "t", Partition: 2}
	fp := &fakeProducers{ids: map[fetcher.TP][]int64{tp: {5}}}
	m := New(Config{Mirror: "m", TP: tp, Producers: fp})
	ctx := context.Background()
	m.loadOwned()
	if !m.owned[5] {
		t.Fatal("persisted id 5 not loaded")
	}
	if err := m.own(ctx, 5, -1); err != nil || fp.adds != 0 {
		t.Fatalf("own of a known and a negative id: %v, %d writes", err, fp.adds)
	}
	if err := m.own(ctx, 7, 8, 7); err != nil || fp.adds != 1 || !slices.Equal(fp.ids[tp], []int64{5, 7, 8}) {
		t.Fatalf("own(7, 8): %v, %d writes, persisted %v", err, fp.adds, fp.ids[tp])
	}
	if !m.owned[7] || !m.owned[8] {
		t.Fatal("7 and 8 not owned after own")
	}
	fp.fails = errors.New("lease lost")
	if err := m.own(ctx, 9); err == nil || m.owned[9] {
		t.Fatalf("own with a failing store: %v, owned %v", err, m.owned[9])
	}
	fp.fails = nil
	fp.ids[tp] = append(fp.ids[tp], 11) // another run recorded it
	m.loadOwned()
	if !m.owned[11] || !m.owned[7] {
		t.Fatalf("after a reload: owned %v", m.owned)
	}
}
