package mirror

// Mirror throttles (KIP-1279's mirror.replication.throttled.rate and
// .replicas): a byte-rate ceiling over some or all partitions of a mirror,
// enforced by its fetchers (fetcher.Throttle) and changed live. The
// coordinator persists throttles and sets their source quotas; a runner
// enforces its mirror's.

import (
	"fmt"
	"slices"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// SetThrottle makes the mirror's fetchers follow t (nil: no throttle).
func (m *Runner) SetThrottle(t *mirrorapi.Throttle) {
	m.mu.Lock()
	if t == nil {
		m.throttleSpec = nil
	} else {
		cp := *t
		cp.Partitions = slices.Clone(t.Partitions)
		m.throttleSpec = &cp
	}
	m.mu.Unlock()
	if t == nil {
		m.throttle.Set(0, false, nil)
		return
	}
	var all bool
	var tps []fetcher.TP
	for _, p := range t.Partitions {
		topic, part, isAll, err := mirrorapi.ParseThrottlePartition(p)
		if err != nil {
			continue // validated before it was persisted
		}
		all = all || isAll
		tps = append(tps, fetcher.TP{Topic: topic, Partition: part})
	}
	m.throttle.Set(t.RateBytesPerSecond, all || len(t.Partitions) == 0, tps)
}

// throttleStatusLocked puts into st what describe shows of the mirror's
// throttle and fetches; m.mu must be held.
func (m *Runner) throttleStatusLocked(st *mirrorapi.Mirror) {
	if m.throttleSpec != nil {
		t := *m.throttleSpec
		t.Partitions = slices.Clone(t.Partitions)
		st.Throttle = &t
		// A partition of a topic the mirror does not have (yet) is
		// allowed, as it may be added later, but likely a typo.
		for _, p := range t.Partitions {
			if topic, _, all, err := mirrorapi.ParseThrottlePartition(p); err == nil && !all && !slices.Contains(m.spec.Topics, topic) {
				st.Warnings = append(st.Warnings, fmt.Sprintf("throttle: partition %s: the mirror has no topic %q; nothing is throttled there until it does", p, topic))
			}
		}
	}
	st.Fetch = mirrorapi.FetchStats{
		Requests:        m.counters.Requests.Load(),
		Errors:          m.counters.Errors.Load(),
		Bytes:           m.counters.Bytes.Load(),
		DeadFetchers:    m.counters.Failing.Load(),
		ThrottledMillis: m.throttle.ThrottledTime().Milliseconds(),
	}
}
