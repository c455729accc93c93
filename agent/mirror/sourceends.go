package mirror

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
)

// sourceEndsTimeout bounds one round of ListOffsets on the source.
const sourceEndsTimeout = 10 * time.Second

// refreshSourceEnds reads, with ListOffsets, the source figures of every
// partition whose figures are older than the metadata refresh interval:
// those not being fetched (paused, failed, stopped, not started yet, held
// back by the throttle). Fetch responses keep the others current. So lag
// is the source's end minus the destination's end in every state, never a
// stale 0; a source that does not answer leaves the figures as they were,
// and their age (source_offset_at) says how old they are.
func (m *Runner) refreshSourceEnds(ctx context.Context, adm *kadm.Client) {
	stale := time.Now().Add(-m.interval())
	pms := map[fetcher.TP]*partition.Mirror{}
	var topics []string
	seen := map[string]bool{}
	m.mu.Lock()
	for tp, rp := range m.parts {
		if rp.pm.Status().SourceOffsetAt.Before(stale) {
			pms[tp] = rp.pm
			if !seen[tp.Topic] {
				seen[tp.Topic] = true
				topics = append(topics, tp.Topic)
			}
		}
	}
	m.mu.Unlock()
	if len(pms) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sourceEndsTimeout)
	defer cancel()
	asOf := time.Now()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		m.log.Debug("reading source ends for lag", "topics", topics, "error", err)
		return
	}
	stable, serr := adm.ListCommittedOffsets(ctx, topics...)
	starts, lerr := adm.ListStartOffsets(ctx, topics...)
	for tp, pm := range pms {
		e, ok := ends.Lookup(tp.Topic, tp.Partition)
		if !ok || e.Err != nil {
			continue
		}
		b := leaders.Bounds{HighWatermark: e.Offset, LastStable: e.Offset}
		if o, ok := stable.Lookup(tp.Topic, tp.Partition); serr == nil && ok && o.Err == nil {
			b.LastStable = o.Offset
		}
		if o, ok := starts.Lookup(tp.Topic, tp.Partition); lerr == nil && ok && o.Err == nil {
			b.LogStart = o.Offset
		}
		pm.SetSourceBounds(b, asOf)
	}
}
