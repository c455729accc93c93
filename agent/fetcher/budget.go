package fetcher

import "sync"

// Budget bounds the bytes fetched but not yet written, across every partition
// of every fetcher that shares it, so that memory stays flat however large the
// backlog is.
type Budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	freed chan struct{} // closed and replaced whenever bytes are released
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, freed: make(chan struct{})}
}

// Freed returns a channel that is closed the next time bytes are released:
// taken before a Reserve that fails, it wakes the caller for the next try.
func (b *Budget) Freed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freed
}

// Reserve takes up to want of the bytes still available, if at least least
// are, and returns what it took: 0 when fewer than least are available. A
// fetch reserves its MaxBytes before it is sent and releases them once its
// chunks are taken, so that loops fetching at once (several per broker, of
// several mirrors) never ask for more than the limit between them.
func (b *Budget) Reserve(want, least int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(want, b.limit-b.used)
	if n < least || n <= 0 {
		return 0
	}
	b.used += n
	return n
}

// Take records n fetched bytes. It may overshoot the limit by what one fetch
// response returns beyond the request's MaxBytes (Kafka returns at least one
// whole batch).
func (b *Budget) Take(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// Release returns n bytes once they are written (or dropped).
func (b *Budget) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// Used returns the bytes held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
