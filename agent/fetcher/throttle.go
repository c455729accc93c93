package fetcher

import (
	"sync"
	"sync/atomic"
	"time"
)

// Throttle is one mirror's replication byte-rate ceiling (KIP-1279's
// mirror.replication.throttled.rate over the partitions of
// mirror.replication.throttled.replicas), enforced where bytes enter the
// agent: the fetch path.
//
// It is a token bucket that may go into debt: throttled partitions are
// fetched while the bucket holds tokens, the bytes a fetch returns for them
// are taken afterwards (however many there are), and while the bucket is in
// debt they are left out of fetches, like a paused partition, until it
// refills. Partitions it does not cover, and partitions of other mirrors,
// keep being fetched meanwhile. The long-run rate is exact; over any window
// it is off by at most the burst plus one fetch's worth of throttled bytes,
// which Chunk keeps small.
//
// A Throttle outlives the fetchers that use it (a mirror reconnects with a
// new Fetcher), and Set takes effect at the next fetch: no restart, no
// reconnect. The zero value is not usable; a nil *Throttle throttles nothing.
type Throttle struct {
	mu     sync.Mutex
	rate   float64 // bytes per second; 0: no throttle
	all    bool
	parts  map[TP]bool
	tokens float64
	last   time.Time
	// changed is closed and replaced by Set, so that fetch loops waiting
	// for the bucket look again at once.
	changed chan struct{}

	// throttled sums the time the bucket was in debt: the time throttled
	// partitions were held back.
	throttled atomic.Int64
}

// NewThrottle returns a throttle that throttles nothing until Set.
func NewThrottle() *Throttle {
	return &Throttle{changed: make(chan struct{})}
}

// Set makes the ceiling rate bytes per second over the listed partitions, or
// over every partition when all is set. A rate of 0 or less removes the
// throttle.
func (t *Throttle) Set(rate int64, all bool, parts []TP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.refillLocked(now)
	if rate <= 0 {
		t.rate, t.all, t.parts, t.tokens = 0, false, nil, 0
	} else {
		wasOff := t.rate == 0
		t.rate, t.all = float64(rate), all
		t.parts = make(map[TP]bool, len(parts))
		for _, tp := range parts {
			t.parts[tp] = true
		}
		if wasOff {
			// A new throttle starts with a full bucket, not with
			// the debt of fetches it did not govern.
			t.tokens = t.burstLocked()
		}
		t.tokens = min(t.tokens, t.burstLocked())
	}
	t.last = now
	close(t.changed)
	t.changed = make(chan struct{})
}

// Rate returns the ceiling in bytes per second, 0 when there is none.
func (t *Throttle) Rate() int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(t.rate)
}

// ThrottledTime returns how long throttled partitions were held back since
// the throttle was made.
func (t *Throttle) ThrottledTime() time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	t.refillLocked(time.Now())
	t.mu.Unlock()
	return time.Duration(t.throttled.Load())
}

// Applies says whether tp is throttled.
func (t *Throttle) Applies(tp TP) bool { return t.scope().applies(tp) }

// throttleScope is the set of throttled partitions at one moment. The fetch
// path takes one per request or response, under one lock, rather than a
// lock for every partition it looks at.
type throttleScope struct {
	on, all bool
	// parts is the Throttle's map itself: Set replaces the map rather
	// than change it, so reading it without the lock is safe.
	parts map[TP]bool
}

func (s throttleScope) applies(tp TP) bool { return s.on && (s.all || s.parts[tp]) }

func (t *Throttle) scopeLocked() throttleScope {
	return throttleScope{on: t.rate > 0, all: t.all, parts: t.parts}
}

// scope returns the partitions throttled now; none for a nil Throttle.
func (t *Throttle) scope() throttleScope {
	if t == nil {
		return throttleScope{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.scopeLocked()
}

// minChunk is the smallest per-partition fetch size of a throttled
// partition: below it, fetch requests would outnumber batches.
const minChunk = 16 << 10

// chunkLocked is the most a throttled partition asks for in one fetch: a
// tenth of a second at the ceiling, at least minChunk, so that one fetch
// moves the window's figure by little.
func (t *Throttle) chunkLocked() float64 {
	return max(t.rate/10, minChunk)
}

// burstLocked is the most the bucket holds: what a fetch may take at once.
func (t *Throttle) burstLocked() float64 { return t.chunkLocked() }

// Chunk returns the partition max bytes of a throttled partition's fetch.
func (t *Throttle) Chunk() int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int32(min(t.chunkLocked(), 1<<30))
}

func (t *Throttle) refillLocked(now time.Time) {
	if t.rate == 0 {
		t.last = now
		return
	}
	elapsed := now.Sub(t.last)
	if elapsed <= 0 {
		return
	}
	if t.tokens < 0 {
		// In debt for -tokens/rate of the elapsed time at most.
		debt := time.Duration(-t.tokens / t.rate * float64(time.Second))
		t.throttled.Add(int64(min(debt, elapsed)))
	}
	t.tokens = min(t.tokens+t.rate*elapsed.Seconds(), t.burstLocked())
	t.last = now
}

// ready says whether throttled partitions may be fetched now; when not, it
// returns how long until they may, and a channel closed by the next Set.
func (t *Throttle) ready() (ok bool, wait time.Duration, changed <-chan struct{}) {
	_, ok, wait, changed = t.readyScope()
	return ok, wait, changed
}

// readyScope is ready and scope under one lock, for a fetch request.
func (t *Throttle) readyScope() (s throttleScope, ok bool, wait time.Duration, changed <-chan struct{}) {
	if t == nil {
		return throttleScope{}, true, 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s = t.scopeLocked()
	if t.rate == 0 {
		return s, true, 0, t.changed
	}
	t.refillLocked(time.Now())
	if t.tokens > 0 {
		return s, true, 0, t.changed
	}
	// Until the debt is paid, plus a millisecond so that the bucket holds
	// tokens when the fetch loop looks again.
	return s, false, time.Duration(-t.tokens/t.rate*float64(time.Second)) + time.Millisecond, t.changed
}

// take charges n fetched bytes of a throttled partition.
func (t *Throttle) take(n int64) {
	if t == nil || n == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rate == 0 {
		return
	}
	t.refillLocked(time.Now())
	t.tokens -= float64(n)
}

// Counters are one mirror's fetch figures. Like a Throttle they outlive the
// fetchers that count into them, so that the figures of a mirror survive its
// reconnects.
type Counters struct {
	Requests atomic.Int64 // fetch requests sent
	Errors   atomic.Int64 // of those, failed ones
	Bytes    atomic.Int64 // record batch bytes fetched
	// Failing counts the broker fetch loops whose last fetch failed: they
	// retry with backoff rather than die, so this is what KIP-1279's
	// DeadThreadCount becomes.
	Failing atomic.Int64
}
