package mirror

// Mirror throttles (KIP-1279's mirror.replication.throttled.rate and
// .replicas): a byte-rate ceiling over some or all partitions of a mirror,
// enforced by its fetchers (fetcher.Throttle) and changed live. The
// coordinator persists throttles and sets their source quotas; a runner
// enforces its mirror's.

import (
	"fmt"
	"slices"
	"sync"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// throttle is a mirror's throttle as its fetchers enforce it. The limiter
// and the fetch counters outlive reconnects: every fetcher of the mirror
// shares them.
type throttle struct {
	limiter  *fetcher.Throttle
	counters *fetcher.Counters

	mu   sync.Mutex
	spec *mirrorapi.Throttle // what describe shows, nil: none
}

func newThrottle() *throttle {
	return &throttle{limiter: fetcher.NewThrottle(), counters: &fetcher.Counters{}}
}

// SetThrottle makes the mirror's fetchers follow t (nil: no throttle).
func (m *Runner) SetThrottle(t *mirrorapi.Throttle) { m.throttle.set(t) }

// set makes the fetchers follow spec (nil: no throttle) from their next
// fetch.
func (t *throttle) set(spec *mirrorapi.Throttle) {
	t.mu.Lock()
	if spec == nil {
		t.spec = nil
	} else {
		cp := *spec
		cp.Partitions = slices.Clone(spec.Partitions)
		t.spec = &cp
	}
	t.mu.Unlock()
	if spec == nil {
		t.limiter.Set(0, false, nil)
		return
	}
	var all bool
	var tps []fetcher.TP
	for _, p := range spec.Partitions {
		topic, part, isAll, err := mirrorapi.ParseThrottlePartition(p)
		if err != nil {
			continue // validated before it was persisted
		}
		all = all || isAll
		tps = append(tps, fetcher.TP{Topic: topic, Partition: part})
	}
	t.limiter.Set(spec.RateBytesPerSecond, all || len(spec.Partitions) == 0, tps)
}

// statusInto puts into st what describe shows of the throttle and the
// fetches of a mirror of topics.
func (t *throttle) statusInto(st *mirrorapi.Mirror, topics []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.spec != nil {
		cp := *t.spec
		cp.Partitions = slices.Clone(cp.Partitions)
		st.Throttle = &cp
		// A partition of a topic the mirror does not have (yet) is
		// allowed, as it may be added later, but likely a typo.
		for _, p := range cp.Partitions {
			if topic, _, all, err := mirrorapi.ParseThrottlePartition(p); err == nil && !all && !slices.Contains(topics, topic) {
				st.Warnings = append(st.Warnings, fmt.Sprintf("throttle: partition %s: the mirror has no topic %q; nothing is throttled there until it does", p, topic))
			}
		}
	}
	st.Fetch = mirrorapi.FetchStats{
		Requests:        t.counters.Requests.Load(),
		Errors:          t.counters.Errors.Load(),
		Bytes:           t.counters.Bytes.Load(),
		DeadFetchers:    t.counters.Failing.Load(),
		ThrottledMillis: t.limiter.ThrottledTime().Milliseconds(),
	}
}

// note says, for a promote waiting on lag, that the throttle holds tp back:
// a throttle set low can keep a promote from ever finishing, and the wait
// must say so rather than look stuck.
func (t *throttle) note(tp fetcher.TP) string {
	if !t.limiter.Applies(tp) {
		return ""
	}
	return fmt.Sprintf("; the mirror's throttle (%d bytes/s) holds this partition's fetches back: raise or remove it "+
		"(kafka_mirror_throttle, kmirror throttle) for the promote to finish sooner", t.limiter.Rate())
}
