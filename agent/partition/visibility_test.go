package partition

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// tb is one source batch as the abort tracker sees it: its header fields,
// and for a marker whether it commits.
type tb struct {
	base, last int64
	pid        int64
	txn        bool
	marker     bool
	commit     bool
}

func (b tb) header() recordbatch.Header {
	h := recordbatch.Header{BaseOffset: b.base, LastOffsetDelta: int32(b.last - b.base), ProducerID: b.pid}
	if b.txn || b.marker {
		h.Attributes |= recordbatch.AttrTransactional
	}
	if b.marker {
		h.Attributes |= recordbatch.AttrControl
	}
	return h
}

func data(pid, base, last int64) tb   { return tb{base: base, last: last, pid: pid, txn: true} }
func plainB(pid, base, last int64) tb { return tb{base: base, last: last, pid: pid} }
func abortM(pid, at int64) tb         { return tb{base: at, last: at, pid: pid, marker: true} }
func commitM(pid, at int64) tb        { return tb{base: at, last: at, pid: pid, marker: true, commit: true} }

// trackerFetch is one fetch: the batches it returned and the aborted
// transactions it listed; reset starts a new tracker first (a resync).
type trackerFetch struct {
	reset   bool
	from    int64 // the fetch offset: batches ending below it are skipped, as forward does
	batches []tb
	aborted []fetcher.Aborted
}

// drive feeds fetches to a tracker the way handle and forward do and returns,
// for every data batch forwarded, whether the tracker called it aborted.
func drive(fetches []trackerFetch) map[int64]bool {
	var a abortTracker // zero value: handle never resets before the first add
	got := map[int64]bool{}
	for _, f := range fetches {
		if f.reset {
			a.reset()
		}
		a.add(f.aborted)
		for _, b := range f.batches {
			if b.last < f.from {
				continue
			}
			a.reach(b.last)
			if b.marker {
				a.marker(b.pid, b.base, b.commit)
				continue
			}
			got[b.base] = a.aborted(b.header())
		}
	}
	return got
}

// TestAbortTracker: which data batches the tracker calls aborted, for
// fetches shaped as a read_committed fetch returns them.
func TestAbortTracker(t *testing.T) {
	const (
		A, B, C = 10, 20, 30 // transactional producers
		P       = 40         // an idempotent producer
	)
	ab := func(pid, first int64) fetcher.Aborted { return fetcher.Aborted{ProducerID: pid, FirstOffset: first} }
	one := func(aborted []fetcher.Aborted, batches ...tb) []trackerFetch {
		return []trackerFetch{{batches: batches, aborted: aborted}}
	}
	for _, tc := range []struct {
		name    string
		fetches []trackerFetch
		aborted []int64 // base offsets of the data batches that must be aborted; every other one must not
	}{
		{"no transaction", one(nil, plainB(P, 0, 2), plainB(-1, 3, 3)), nil},
		{"committed transaction", one(nil, data(A, 0, 0), data(A, 1, 3), commitM(A, 4), plainB(P, 5, 5)), nil},
		{"aborted transaction", one([]fetcher.Aborted{ab(A, 1)},
			plainB(P, 0, 0), data(A, 1, 1), data(A, 2, 4), abortM(A, 5), plainB(P, 6, 6)), []int64{1, 2}},
		{"a committed transaction of the producer after its aborted one", one([]fetcher.Aborted{ab(A, 0)},
			data(A, 0, 0), abortM(A, 1), data(A, 2, 2), commitM(A, 3)), []int64{0}},
		{"an aborted transaction after a committed one", one([]fetcher.Aborted{ab(A, 2)},
			data(A, 0, 0), commitM(A, 1), data(A, 2, 2), abortM(A, 3)), []int64{2}},
		{"interleaved producers, one aborted", one([]fetcher.Aborted{ab(B, 1)},
			data(A, 0, 0), data(B, 1, 1), plainB(P, 2, 2), data(A, 3, 4), data(B, 5, 5), commitM(A, 6), data(B, 7, 7), abortM(B, 8), plainB(P, 9, 9)),
			[]int64{1, 5, 7}},
		{"two aborted transactions of one producer in one fetch", one([]fetcher.Aborted{ab(A, 0), ab(A, 2)},
			data(A, 0, 0), abortM(A, 1), data(A, 2, 3), abortM(A, 4), data(A, 5, 5), commitM(A, 6)), []int64{0, 2}},
		{"aborted list out of order", one([]fetcher.Aborted{ab(C, 4), ab(A, 0), ab(B, 2)},
			data(A, 0, 0), abortM(A, 1), data(B, 2, 2), abortM(B, 3), data(C, 4, 4), abortM(C, 5)), []int64{0, 2, 4}},
		{"consecutive markers", one([]fetcher.Aborted{ab(B, 1)},
			data(A, 0, 0), data(B, 1, 1), data(C, 2, 2), commitM(A, 3), abortM(B, 4), commitM(C, 5), plainB(P, 6, 6)), []int64{1}},
		{"an idempotent batch of a producer inside an aborted transaction", one([]fetcher.Aborted{ab(A, 0)},
			data(A, 0, 0), plainB(A, 1, 1), abortM(A, 2)), []int64{0}},
		{"listed before it is reached", one([]fetcher.Aborted{ab(A, 5)},
			plainB(P, 0, 3), data(B, 4, 4), data(A, 5, 5), abortM(A, 6), commitM(B, 7)), []int64{5}},
		{"data removed by the cleaner, marker kept", one([]fetcher.Aborted{ab(A, 1)},
			plainB(P, 0, 0), abortM(A, 4), data(A, 5, 5), commitM(A, 6)), nil},
		{"one fetch per batch, listed by each", []trackerFetch{
			{from: 0, batches: []tb{data(A, 0, 0)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{from: 1, batches: []tb{data(A, 1, 1)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{from: 2, batches: []tb{abortM(A, 2)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{from: 3, batches: []tb{data(A, 3, 3)}},
			{from: 4, batches: []tb{commitM(A, 4)}},
		}, []int64{0, 1}},
		{"listed again by a fetch after its marker", []trackerFetch{
			{from: 0, batches: []tb{data(A, 0, 0), abortM(A, 1)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{from: 2, batches: []tb{data(A, 2, 2), commitM(A, 3)}, aborted: []fetcher.Aborted{ab(A, 0)}},
		}, []int64{0}},
		{"a refetch from inside the transaction", []trackerFetch{
			{from: 0, batches: []tb{data(A, 0, 0), data(A, 1, 1)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{from: 1, batches: []tb{data(A, 1, 1), data(A, 2, 2), abortM(A, 3), data(A, 4, 4), commitM(A, 5)}, aborted: []fetcher.Aborted{ab(A, 0)}},
		}, []int64{0, 1, 2}},
		{"restart inside an aborted transaction", []trackerFetch{
			{from: 0, batches: []tb{data(A, 0, 0)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{reset: true, from: 1, batches: []tb{data(A, 1, 1), abortM(A, 2), data(A, 3, 3), commitM(A, 4)}, aborted: []fetcher.Aborted{ab(A, 0)}},
		}, []int64{0, 1}},
		{"restart right after the abort marker", []trackerFetch{
			{from: 0, batches: []tb{data(A, 0, 0), abortM(A, 1)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{reset: true, from: 2, batches: []tb{data(A, 2, 2), commitM(A, 3)}},
		}, []int64{0}},
		{"restart at the marker of a transaction that began before the fetch", []trackerFetch{
			{from: 0, batches: []tb{data(A, 0, 0), data(B, 1, 1)}, aborted: []fetcher.Aborted{ab(A, 0)}},
			{reset: true, from: 2, batches: []tb{abortM(A, 2), data(B, 3, 3), commitM(B, 4)}, aborted: []fetcher.Aborted{ab(A, 0)}},
		}, []int64{0}},
		{"a batch spanning the fetch offset", []trackerFetch{
			{reset: true, from: 3, batches: []tb{data(A, 1, 4), abortM(A, 5)}, aborted: []fetcher.Aborted{ab(A, 1)}},
		}, []int64{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := drive(tc.fetches)
			want := map[int64]bool{}
			for _, o := range tc.aborted {
				want[o] = true
			}
			for o, ab := range got {
				if ab != want[o] {
					t.Errorf("data batch at %d: aborted %v, want %v", o, ab, want[o])
				}
			}
			for o := range want {
				if _, ok := got[o]; !ok {
					t.Errorf("data batch at %d was not forwarded", o)
				}
			}
		})
	}
}

// TestAbortTrackerMatchesMarkers checks the tracker against the definition
// on random source logs: a transactional data batch is aborted exactly when
// its producer's next marker is an ABORT. Each log is read by fetches of a
// random number of batches from random restart points, and every fetch lists
// the aborted transactions that overlap what it returned, as a broker's
// read_committed fetch does (the transaction's marker at or after the fetch
// offset, its first offset before the first offset not returned).
func TestAbortTrackerMatchesMarkers(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 1279))
		log, truth, aborted := randomLog(r)
		var fetches []trackerFetch
		for at := 0; at < len(log); {
			f := trackerFetch{from: log[at].base}
			if at > 0 && r.IntN(8) == 0 {
				f.reset = true
			}
			n := 1 + r.IntN(4)
			end := min(at+n, len(log))
			f.batches = log[at:end]
			upper := int64(1 << 62)
			if end < len(log) {
				upper = log[end].base
			}
			for _, a := range aborted {
				if a.marker >= f.from && a.first < upper {
					f.aborted = append(f.aborted, fetcher.Aborted{ProducerID: a.pid, FirstOffset: a.first})
				}
			}
			r.Shuffle(len(f.aborted), func(i, j int) { f.aborted[i], f.aborted[j] = f.aborted[j], f.aborted[i] })
			fetches = append(fetches, f)
			if f.reset || r.IntN(5) != 0 {
				at = end
			} else {
				// Refetch from inside what was returned (a re-seek): the
				// batches below the fetch offset are skipped.
				at = max(at+1, end-1)
			}
		}
		got := drive(fetches)
		for o, want := range truth {
			if g, ok := got[o]; !ok || g != want {
				t.Fatalf("seed %d: data batch at %d: aborted %v (forwarded %v), want %v\nlog: %s", seed, o, g, ok, want, describeLog(log))
			}
		}
	}
}

type abortedRange struct{ pid, first, marker int64 }

// randomLog returns a log of single-offset batches of three transactional
// producers and one idempotent producer, whether each data batch is aborted
// (from the markers), and the aborted transactions.
func randomLog(r *rand.Rand) ([]tb, map[int64]bool, []abortedRange) {
	var (
		log   []tb
		truth = map[int64]bool{}
		open  = map[int64]int64{} // pid -> first offset of its open transaction
		ofTxn = map[int64][]int64{}
		out   []abortedRange
	)
	n := int64(10 + r.IntN(40))
	for o := int64(0); o < n || len(open) > 0; o++ {
		pid := int64(1 + r.IntN(4))
		_, isOpen := open[pid]
		if o >= n && !isOpen {
			// Past the end: close what is still open, lowest producer first.
			for p := range int64(4) {
				if _, ok := open[p]; ok {
					pid, isOpen = p, true
					break
				}
			}
		}
		switch {
		case o < n && pid == 4:
			log = append(log, plainB(pid, o, o))
		case isOpen && (o >= n || r.IntN(3) == 0):
			commit := r.IntN(2) == 0
			if commit {
				log = append(log, commitM(pid, o))
			} else {
				log = append(log, abortM(pid, o))
				out = append(out, abortedRange{pid, open[pid], o})
			}
			for _, d := range ofTxn[pid] {
				truth[d] = !commit
			}
			delete(open, pid)
			delete(ofTxn, pid)
		default:
			if !isOpen {
				open[pid] = o
			}
			ofTxn[pid] = append(ofTxn[pid], o)
			log = append(log, data(pid, o, o))
		}
	}
	return log, truth, out
}

func describeLog(log []tb) string {
	s := ""
	for _, b := range log {
		switch {
		case b.marker && b.commit:
			s += fmt.Sprintf(" %d:C%d", b.base, b.pid)
		case b.marker:
			s += fmt.Sprintf(" %d:A%d", b.base, b.pid)
		case b.txn:
			s += fmt.Sprintf(" %d:t%d", b.base, b.pid)
		default:
			s += fmt.Sprintf(" %d:p%d", b.base, b.pid)
		}
	}
	return s
}
