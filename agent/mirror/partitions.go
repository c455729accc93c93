package mirror

// The runner's partitions: the partition mirror of each (running, or idle
// and showing a restored state), how the runner takes one over to halt it,
// and their records in the state topic.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// runningPartition is a partition mirror and how to stop it.
type runningPartition struct {
	pm *partition.Mirror
	// stop cancels its Run; nil when it does not run under the current
	// source connection (restored, or taken over by a lifecycle operation).
	stop context.CancelFunc
	// done is closed when its Run has returned (at once when it never ran).
	done chan struct{}
	// placeholder: the mirror starts a new partition mirror in its place
	// at its next look (resume, recover, promote).
	placeholder bool
}

// closedDone is the done channel of a partition that does not run.
func closedDone() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// partitionsOf lists topic's partitions the agent knows: running or
// persisted, or, when none is, those of the destination topic.
func (m *Runner) partitionsOf(ctx context.Context, topic string) ([]fetcher.TP, error) {
	set := map[int32]bool{}
	m.mu.Lock()
	for tp := range m.parts {
		if tp.Topic == topic {
			set[tp.Partition] = true
		}
	}
	m.mu.Unlock()
	for p := range persistedPartitions(m.cfg.Store, m.rec.Spec.Name, topic) {
		set[p] = true
	}
	if len(set) == 0 {
		tds, err := m.cfg.Admin.ListTopics(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("listing destination topic %q: %w", topic, err)
		}
		td, ok := tds[topic]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return nil, fmt.Errorf("topics: %q has no partitions on the destination yet (the mirror has not created it; see its error in describe): %w", topic, ErrUnknownTopic)
		}
		for p := range td.Partitions {
			set[p] = true
		}
	}
	out := make([]fetcher.TP, 0, len(set))
	for p := range set {
		out = append(out, fetcher.TP{Topic: topic, Partition: p})
	}
	slices.SortFunc(out, func(a, b fetcher.TP) int { return int(a.Partition - b.Partition) })
	return out, nil
}

// stopModeOf is how tp is stopping: the mode of a stop under way, or of the
// persisted record when tp does not run.
func (m *Runner) stopModeOf(tp fetcher.TP) StopMode {
	if mode, ok := m.life.stopMode(tp); ok {
		return mode
	}
	var pr partitionRecord
	if ReadRecord(m.cfg.Store, PartitionKey(m.rec.Spec.Name, tp), &pr) && pr.State == partition.Stopping {
		return pr.StopMode
	}
	return ""
}

// stateOf is tp's state: its partition mirror's, else its persisted one.
func (m *Runner) stateOf(tp fetcher.TP) (partition.State, reason.Code) {
	m.mu.Lock()
	rp := m.parts[tp]
	m.mu.Unlock()
	if rp != nil {
		st := rp.pm.Status()
		return st.State, st.ReasonCode
	}
	var pr partitionRecord
	if ReadRecord(m.cfg.Store, PartitionKey(m.rec.Spec.Name, tp), &pr) && pr.State != "" {
		return pr.State, pr.ReasonCode
	}
	return partition.Initializing, ""
}

// idlePartition is a partition mirror that does not run: it reports a
// restored state and can finish a stop (it reaches the destination only).
func (m *Runner) idlePartition(tp fetcher.TP) *partition.Mirror {
	return partition.New(partition.Config{
		Mirror: m.rec.Spec.Name, TP: tp, Writer: m.cfg.Writer, Fillers: m.cfg.Fillers,
		ProducerID: m.rec.ProducerID, Epoch: m.rec.Epoch, Logger: m.log.Named("partition"),
		ClosedAt: m.closedAt(tp), OnClose: func(at int64) { m.noteClosed(m.ctx, tp, at) },
	})
}

// take takes tp's partition mirror over from the source connection: the
// caller halts it (stop is nil when it does not run).
func (m *Runner) take(tp fetcher.TP) (rp *runningPartition, stop context.CancelFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rp = m.parts[tp]
	if rp == nil {
		rp = &runningPartition{pm: m.idlePartition(tp), done: closedDone()}
		m.parts[tp] = rp
	}
	stop, rp.stop = rp.stop, nil
	rp.placeholder = false
	return rp, stop
}

// halt halts a running partition mirror at a batch boundary, or cancels it
// after grace; it says whether its Run returned within grace plus wait.
func halt(rp *runningPartition, stop context.CancelFunc, clean bool, grace, wait time.Duration) bool {
	if stop == nil {
		select {
		case <-rp.done:
			return true
		case <-time.After(grace + wait):
			return false
		}
	}
	rp.pm.Halt(clean)
	select {
	case <-rp.done:
		stop()
		return true
	case <-time.After(grace):
	}
	stop()
	select {
	case <-rp.done:
		return true
	case <-time.After(wait):
		return false
	}
}

// persist writes tp's record with the run context of the mirror.
func (m *Runner) persist(tp fetcher.TP, pr partitionRecord) {
	if err := m.writePartition(m.ctx, tp, pr); err != nil {
		m.log.Error("persisting partition state", "partition", tp.String(), "state", pr.State, "error", err)
	}
}

// persistPartition persists tp's status st: its partition mirror's
// OnChange, and the failure of a topic (failTopic).
func (m *Runner) persistPartition(ctx context.Context, tp fetcher.TP, st partition.Status) {
	rec := partitionRecord{State: st.State, Reason: st.Reason, ReasonCode: st.ReasonCode, LastMirroredOffset: st.LastMirrored, StopMode: m.life.modeOf(tp, st.State)}
	if err := m.writePartition(ctx, tp, rec); err != nil && !errors.Is(err, context.Canceled) {
		m.log.Error("persisting partition state", "partition", tp.String(), "error", err)
	}
}

// writePartition writes tp's record pr. A record that keeps ClosedAt
// (keepsClosedAt) takes it from the record it replaces when it has none:
// the state changes that follow a close (FAILED, then a failover stop) do
// not know it.
func (m *Runner) writePartition(ctx context.Context, tp fetcher.TP, pr partitionRecord) error {
	m.recMu.Lock()
	defer m.recMu.Unlock()
	key := PartitionKey(m.rec.Spec.Name, tp)
	if keepsClosedAt(pr) && pr.ClosedAt == 0 {
		var old partitionRecord
		if ReadRecord(m.cfg.Store, key, &old) && keepsClosedAt(old) {
			pr.ClosedAt = old.ClosedAt
		}
	}
	return WriteRecord(ctx, m.cfg.Store, key, pr)
}

// keepsClosedAt says whether a partition recorded as pr may still finish a
// failover stop without running again: FAILED, or STOPPING for a failover.
// A promote runs again until it finishes.
func keepsClosedAt(pr partitionRecord) bool {
	return pr.State == partition.Failed || (pr.State == partition.Stopping && pr.StopMode != StopPromote)
}

// noteClosed records in tp's record where its partition mirror closed the
// transaction of aborted records (partition.Config.OnClose), before the
// abort is asked.
func (m *Runner) noteClosed(ctx context.Context, tp fetcher.TP, closedAt int64) {
	m.recMu.Lock()
	defer m.recMu.Unlock()
	key := PartitionKey(m.rec.Spec.Name, tp)
	var pr partitionRecord
	ReadRecord(m.cfg.Store, key, &pr)
	pr.ClosedAt = closedAt
	if err := WriteRecord(ctx, m.cfg.Store, key, pr); err != nil {
		m.log.Error("persisting where the transaction of aborted records closed", "partition", tp.String(), "closed_at", closedAt, "error", err)
	}
}

// closedAt is the ClosedAt of tp's record, for a partition mirror that does
// not run (restored FAILED or STOPPING, or idle).
func (m *Runner) closedAt(tp fetcher.TP) int64 {
	var pr partitionRecord
	if ReadRecord(m.cfg.Store, PartitionKey(m.rec.Spec.Name, tp), &pr) && keepsClosedAt(pr) {
		return pr.ClosedAt
	}
	return 0
}

// restartPartition persists pr and lets the mirror start tp afresh at its
// next look (from pr's state: INITIALIZING, or a STOPPING promote); the
// current partition mirror stays in describe until then.
func (m *Runner) restartPartition(tp fetcher.TP, pr partitionRecord, recovering bool) {
	m.mu.Lock()
	rp := m.parts[tp]
	m.mu.Unlock()
	if rp != nil && rp.stop != nil {
		halt(rp, rp.stop, false, 2*time.Second, 10*time.Second)
	}
	if pr.LastMirroredOffset == 0 && rp != nil {
		pr.LastMirroredOffset = rp.pm.Status().LastMirrored
	}
	m.persist(tp, pr)
	m.mu.Lock()
	// A topic sync that sees the placeholder sees the recover too.
	if recovering {
		m.life.recovering(tp)
	}
	if rp != nil && m.parts[tp] == rp {
		rp.stop, rp.placeholder = nil, true
		if pr.State == partition.Initializing {
			// Describe shows the restart at once, not the state it
			// leaves until the mirror's next look starts it: a FAILED
			// partition being recovered must not look failed to a
			// caller polling for the recovery (terraform apply).
			rp.pm.Restore(pr.State, pr.why())
		}
	}
	m.mu.Unlock()
	m.kick()
}

// kick makes the mirror look at its topics again at once.
func (m *Runner) kick() {
	select {
	case m.refresh <- struct{}{}:
	default:
	}
}
