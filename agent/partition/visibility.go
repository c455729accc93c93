package partition

import (
	"sort"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// abortTracker decides which source transactional batches belong to aborted
// transactions, the way Kafka's read_committed consumer does: an aborted
// transaction (producer id, first offset) from the fetch response opens for
// that producer at its first offset and closes at the producer's ABORT
// marker. Fetches list every aborted transaction that overlaps the fetched
// range, so entries repeat across fetches and are deduplicated.
type abortTracker struct {
	pending []fetcher.Aborted // not yet reached, sorted by first offset
	seen    map[fetcher.Aborted]bool
	open    map[int64]bool // producer ids inside an aborted transaction
	// lastMarker is the offset of each producer's last marker read: a
	// producer's transactions do not overlap, so an aborted transaction
	// starting at or before it has already ended, however often a broker
	// lists it again.
	lastMarker map[int64]int64
}

func (a *abortTracker) reset() {
	a.pending = nil
	a.seen = map[fetcher.Aborted]bool{}
	a.open = map[int64]bool{}
	a.lastMarker = map[int64]int64{}
}

// add records aborted transactions listed by a fetch response.
func (a *abortTracker) add(list []fetcher.Aborted) {
	if a.seen == nil {
		a.reset()
	}
	added := false
	for _, e := range list {
		if m, ok := a.lastMarker[e.ProducerID]; a.seen[e] || ok && e.FirstOffset <= m {
			continue
		}
		a.seen[e] = true
		a.pending = append(a.pending, e)
		added = true
	}
	if added {
		sort.Slice(a.pending, func(i, j int) bool { return a.pending[i].FirstOffset < a.pending[j].FirstOffset })
	}
}

// reach opens every aborted transaction that starts at or before last, the
// last offset of the batch about to be read.
func (a *abortTracker) reach(last int64) {
	for len(a.pending) > 0 && a.pending[0].FirstOffset <= last {
		if a.open == nil {
			a.open = map[int64]bool{}
		}
		a.open[a.pending[0].ProducerID] = true
		a.pending = a.pending[1:]
	}
}

// aborted says whether a data batch's records belong to an aborted
// transaction.
func (a *abortTracker) aborted(h recordbatch.Header) bool {
	return h.IsTransactional() && a.open[h.ProducerID]
}

// marker records a producer's marker at offset, which closes its aborted
// transaction when it is an ABORT.
func (a *abortTracker) marker(pid, offset int64, commit bool) {
	if a.lastMarker == nil {
		a.reset()
	}
	a.lastMarker[pid] = offset
	if commit {
		return
	}
	delete(a.open, pid)
	for e := range a.seen {
		if e.ProducerID == pid && !a.pendingHas(e) {
			delete(a.seen, e)
		}
	}
}

func (a *abortTracker) pendingHas(e fetcher.Aborted) bool {
	for _, p := range a.pending {
		if p == e {
			return true
		}
	}
	return false
}
