package mirror

// The lifecycle operations on mirror topics: pause, resume, stop (failover
// or promote) and recover. Plan checks every partition of every topic named
// against partition.Transition before anything changes, so a refused
// request leaves every state as it was; Execute carries it out. Pause
// completes before it returns (it only halts partition mirrors); the others
// return at once and callers poll describe.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// StopMode is how a stop ends mirroring.
type StopMode string

// The stop modes.
const (
	// StopFailover stops at once, with the source reachable or not: what
	// was mirrored stays, what was not stays on the source only.
	StopFailover StopMode = "failover"
	// StopPromote waits until the source has nothing the destination
	// lacks (RPO 0): the source's open transactions decided (last stable
	// offset = high watermark) and the destination end at the source high
	// watermark; then it stops as failover does.
	StopPromote StopMode = "promote"
)

// ErrUnknownTopic is returned for a topic the mirror does not mirror.
var ErrUnknownTopic = errors.New("unknown topic")

// lifecycle is what the lifecycle operations keep of a mirror's partitions
// between the calls that move them: how those being stopped stop and how
// those stopped stopped, the deadlines of promotes, and what a recover
// cleared until its next start. It calls nothing, so the runner may call it
// with its own lock held.
type lifecycle struct {
	// ends serializes the end of partition stops (Runner.finishStop), so
	// that the last partition of a topic to stop sees the others STOPPED.
	ends sync.Mutex

	mu        sync.Mutex
	stopModes map[fetcher.TP]StopMode  // stops under way
	stoppedBy map[fetcher.TP]StopMode  // how STOPPED partitions stopped (describe's stop_mode)
	promoteBy map[fetcher.TP]time.Time // promote deadlines
	// recovering: partitions and topics a recover cleared, until their
	// next start.
	recoverTPs    map[fetcher.TP]bool
	recoverTopics map[string]bool
}

func newLifecycle() *lifecycle {
	return &lifecycle{
		stopModes: map[fetcher.TP]StopMode{}, stoppedBy: map[fetcher.TP]StopMode{}, promoteBy: map[fetcher.TP]time.Time{},
		recoverTPs: map[fetcher.TP]bool{}, recoverTopics: map[string]bool{},
	}
}

// stopping records that a stop of tp in mode is under way.
func (l *lifecycle) stopping(tp fetcher.TP, mode StopMode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopModes[tp] = mode
}

// stopMode is the mode of tp's stop under way; ok is false when none is.
func (l *lifecycle) stopMode(tp fetcher.TP) (mode StopMode, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mode, ok = l.stopModes[tp]
	return mode, ok
}

// stopped records how tp stopped; its stop stays under way until endStop.
func (l *lifecycle) stopped(tp fetcher.TP, mode StopMode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stoppedBy[tp] = mode
}

// endStop records that tp's stop is over.
func (l *lifecycle) endStop(tp fetcher.TP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.stopModes, tp)
}

// modeOf is the stop mode describe and the partition record show for tp in
// state: how it stops while STOPPING, how it stopped once STOPPED.
func (l *lifecycle) modeOf(tp fetcher.TP, state partition.State) StopMode {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case partition.Stopping:
		return l.stopModes[tp]
	case partition.Stopped:
		return l.stoppedBy[tp]
	}
	return ""
}

// newPromote records a promote of tp asked now, which gives up at
// deadline.
func (l *lifecycle) newPromote(tp fetcher.TP, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopModes[tp] = StopPromote
	l.promoteBy[tp] = deadline
}

// promoteDeadline records that tp's promote waits now and returns its
// deadline: the one it was asked with, else (a promote resumed after a
// restart) fallback.
func (l *lifecycle) promoteDeadline(tp fetcher.TP, fallback time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopModes[tp] = StopPromote
	deadline, ok := l.promoteBy[tp]
	if !ok {
		deadline = fallback
		l.promoteBy[tp] = deadline
	}
	return deadline
}

// endPromote records that tp's promote ended without a stop (the
// partition failed, or the promote timed out).
func (l *lifecycle) endPromote(tp fetcher.TP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.stopModes, tp)
	delete(l.promoteBy, tp)
}

// promoted records that tp's promote stopped it.
func (l *lifecycle) promoted(tp fetcher.TP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.promoteBy, tp)
}

// recovering records that a recover cleared tp.
func (l *lifecycle) recovering(tp fetcher.TP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recoverTPs[tp] = true
	l.recoverTopics[tp.Topic] = true
}

// takeRecovering says whether a recover cleared tp since its last start,
// and forgets it.
func (l *lifecycle) takeRecovering(tp fetcher.TP) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.recoverTPs[tp]
	delete(l.recoverTPs, tp)
	return r
}

// takeRecoveringTopic says whether a recover cleared a partition of topic
// since the topic's last sync, and forgets it.
func (l *lifecycle) takeRecoveringTopic(topic string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.recoverTopics[topic]
	delete(l.recoverTopics, topic)
	return r
}

// target is one partition an operation moves.
type target struct {
	tp       fetcher.TP
	from, to partition.State
}

// Plan is a lifecycle operation on topics of the mirror, checked against
// the state of every partition (Runner.Plan) and not yet carried out
// (Runner.Execute).
type Plan struct {
	op      partition.Op
	topics  []string
	targets []target
	// Unmirrored are topics a failover stop forgets rather than stops:
	// never mirrored, with no partition known and nothing on the
	// destination (a typo'd or not yet created source topic).
	Unmirrored []string
}

// Empty says whether the plan moves no partition.
func (p *Plan) Empty() bool { return len(p.targets) == 0 }

// Plan checks op on every partition of topics against
// partition.Transition and returns what Execute does, changing nothing: a
// refused operation leaves every state as it was. The caller has checked
// that topics are the mirror's, each once.
func (m *Runner) Plan(ctx context.Context, op partition.Op, topics []string) (*Plan, error) {
	p := &Plan{op: op, topics: topics}
	for _, t := range topics {
		tps, err := m.partitionsOf(ctx, t)
		if op == partition.OpStopFailover && errors.Is(err, ErrUnknownTopic) {
			// Never mirrored: no partition known, nothing on the
			// destination (a typo'd or not yet created source topic).
			// Stopping it forgets it, so that it does not stay listed.
			p.Unmirrored = append(p.Unmirrored, t)
			continue
		}
		if err != nil {
			return nil, err
		}
		parts := make([]partitionState, len(tps))
		for i, tp := range tps {
			st, code := m.stateOf(tp)
			parts[i] = partitionState{tp: tp, state: st, code: code, stopMode: m.stopModeOf(tp)}
		}
		targets, err := planTopic(op, t, parts)
		if err != nil {
			return nil, err
		}
		p.targets = append(p.targets, targets...)
	}
	return p, nil
}

// partitionState is a partition as Plan finds it.
type partitionState struct {
	tp       fetcher.TP
	state    partition.State
	code     reason.Code // of its reason
	stopMode StopMode    // of a stop under way
}

// recreateOnly are the failures whose destination log holds the agent's
// own records at the wrong offsets: a resync would take them as mirrored
// and go on after them, so only a recover with recreate may clear them.
var recreateOnly = []reason.Code{reason.MarkersRefused}

// planTopic is the partitions of topic that op moves, and where to, or why
// op is refused on one of them.
func planTopic(op partition.Op, topic string, parts []partitionState) ([]target, error) {
	states := map[partition.State]bool{}
	for _, p := range parts {
		states[p.state] = true
	}
	var targets []target
	for _, p := range parts {
		tp, from := p.tp, p.state
		if (op == partition.OpRecover || op == partition.OpRecoverRecreate) && states[partition.Failed] && (from == partition.Initializing ||
			from == partition.Preparing || from == partition.Mirroring || from == partition.Paused) {
			if op == partition.OpRecoverRecreate {
				// Recreating deletes the whole destination topic: the
				// partitions that did not fail are mirrored again with
				// the failed ones (recreateTopic halts them first).
				targets = append(targets, target{tp: tp, from: from, to: partition.Initializing})
			}
			// A plain recover of a topic clears its failed
			// partitions and leaves the others as they are.
			continue
		}
		if op == partition.OpStopPromote && from == partition.Stopping && p.stopMode == StopPromote {
			// Asked again (a terraform apply after its wait timed
			// out): the promote under way goes on.
			targets = append(targets, target{tp: tp, from: from, to: from})
			continue
		}
		to, err := partition.Transition(from, op)
		if err == nil && op == partition.OpRecover && from == partition.Failed && slices.Contains(recreateOnly, p.code) {
			err = &partition.TransitionError{From: from, Op: op,
				Msg: fmt.Sprintf("it failed with %s: its destination log holds records at the wrong offsets, which a plain recover would resume after; recover with recreate", p.code)}
		}
		if err != nil {
			var te *partition.TransitionError
			if errors.As(err, &te) {
				te.Subject = fmt.Sprintf("topic %s", topic)
				if len(states) > 1 {
					te.Subject = fmt.Sprintf("topic %s partition %d", topic, tp.Partition)
				}
			}
			return nil, err
		}
		targets = append(targets, target{tp: tp, from: from, to: to})
	}
	return targets, nil
}

// Execute carries out p. Pause completes before it returns (it only halts
// partition mirrors); the others return at once and callers poll describe.
func (m *Runner) Execute(ctx context.Context, p *Plan) error {
	op, topics, targets := p.op, p.topics, p.targets
	if op == partition.OpStopPromote {
		if err := m.fenceSource(ctx, topics); err != nil {
			return err
		}
	}
	m.log.Info("lifecycle operation", "op", op, "topics", topics, "partitions", len(targets))
	if op == partition.OpRecoverRecreate {
		for _, t := range topics {
			if err := m.recreateTopic(ctx, t, targets); err != nil {
				return err
			}
		}
		m.kick()
		return nil
	}
	done := make(chan struct{}, len(targets))
	n := 0
	for _, tg := range targets {
		if alreadyThere(op, tg) {
			continue
		}
		switch op {
		case partition.OpPause:
			// Partitions halt in parallel; pause returns once all have.
			n++
			go func() {
				m.pause(tg.tp)
				done <- struct{}{}
			}()
		case partition.OpResume:
			m.restartPartition(tg.tp, stateRecord(partition.Initializing, reason.New(reason.Resuming, "resuming from the destination end")), false)
		case partition.OpRecover:
			m.recover(tg.tp)
		case partition.OpStopFailover:
			m.stopFailover(tg.tp)
		case partition.OpStopPromote:
			m.stopPromote(tg.tp)
		}
	}
	for range n {
		<-done
	}
	m.kick()
	return nil
}

// alreadyThere says whether op leaves tg as it is: a STOPPED partition, a
// repeated operation (but a repeated failover stop, which retries one that
// failed), a resume of a partition that is not paused.
func alreadyThere(op partition.Op, tg target) bool {
	return tg.from == partition.Stopped ||
		tg.from == tg.to && op != partition.OpStopFailover ||
		op == partition.OpResume && tg.from != partition.Paused
}

// pauseGrace is how long a pause waits for a batch boundary where no
// destination transaction is open before it cancels the partition mirror.
const pauseGrace = 5 * time.Second

func (m *Runner) pause(tp fetcher.TP) {
	rp, stop := m.take(tp)
	if !halt(rp, stop, true, pauseGrace, 10*time.Second) {
		m.log.Warn("pause: the partition mirror did not return in time", "partition", tp.String())
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	if b, err := rp.pm.DestinationBounds(ctx); err == nil {
		rp.pm.RestoreOffsets(b.HighWatermark - 1)
	}
	rp.pm.Restore(partition.Paused, reason.Error{})
	m.persist(tp, partitionRecord{State: partition.Paused, LastMirroredOffset: rp.pm.Status().LastMirrored})
}

func (m *Runner) recover(tp fetcher.TP) {
	m.log.Info("recovering partition", "partition", tp.String())
	m.restartPartition(tp, stateRecord(partition.Initializing, reason.New(reason.Recovering, "recovering: re-aligning with the source")), true)
}

// stopFailover moves tp to STOPPING and finishes the stop in the
// background, within StopTimeout.
func (m *Runner) stopFailover(tp fetcher.TP) {
	m.life.stopping(tp, StopFailover)
	rp, stop := m.take(tp)
	r := reason.New(reason.FailoverInProgress, "stopping (failover)")
	rp.pm.SetStopping(r)
	pr := stateRecord(partition.Stopping, r)
	pr.StopMode, pr.LastMirroredOffset = StopFailover, rp.pm.Status().LastMirrored
	m.persist(tp, pr)
	m.ops.Add(1)
	go func() {
		defer m.ops.Done()
		m.finishStop(tp, rp, stop, StopFailover)
	}()
}

// finishStop halts rp and finishes its destination side (partition
// Mirror.Finish), then records STOPPED with the last mirrored offset.
func (m *Runner) finishStop(tp fetcher.TP, rp *runningPartition, stop context.CancelFunc, mode StopMode) {
	timeout := m.cfg.StopTimeout
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	if !halt(rp, stop, false, min(2*time.Second, timeout/4), timeout/4) {
		m.log.Warn("stop: the partition mirror did not return in time; finishing anyway", "partition", tp.String())
	}
	lmo, err := rp.pm.Finish(ctx)
	if err != nil {
		if m.ctx.Err() != nil {
			return // the agent stops; it finishes the stop when it starts again
		}
		r := reason.New(reason.StopTimedOut, "the %s stop did not complete within %s: %v; stop again (mode failover) to retry", mode, timeout, err)
		rp.pm.SetStopping(r)
		pr := stateRecord(partition.Stopping, r)
		pr.StopMode, pr.LastMirroredOffset = StopFailover, rp.pm.Status().LastMirrored
		m.persist(tp, pr)
		m.log.Error("stop failed", "partition", tp.String(), "error", err)
		return
	}
	m.finalGroupSync(ctx, tp) // consumers moving over find the source's last commits
	var r reason.Error
	if mode == StopPromote {
		if note := m.fences.note(tp.Topic); note != "" {
			r = reason.Error{Code: reason.SourceNotFenced, Message: "promoted" + note}
		}
	}
	// The topic is an ordinary writable topic once all its partitions
	// are STOPPED (DESIGN §4): its read-only ACL goes before the last
	// partition shows STOPPED, so that whoever waits for STOPPED (a
	// terraform apply, kmirror stop) can write at once. life.ends orders
	// the partitions stopping together, so that the last sees the others.
	m.life.ends.Lock()
	defer m.life.ends.Unlock()
	m.releaseIfStopped(tp.Topic, tp)
	m.life.stopped(tp, mode)
	rp.pm.Restore(partition.Stopped, r)
	pr := stateRecord(partition.Stopped, r)
	pr.LastMirroredOffset, pr.StopMode = lmo, mode
	m.persist(tp, pr)
	m.life.endStop(tp)
	m.log.Info("partition stopped", "partition", tp.String(), "mode", mode, "last_mirrored_offset", lmo)
}

// restore is what a restarted runner does with a partition from its
// persisted record.
type restore int

const (
	restoreRun    restore = iota // run it: it mirrors, or a promote resumes
	restoreHold                  // hold it as it is: FAILED, PAUSED, STOPPED
	restoreFinish                // finish its failover stop
)

// restoreOf is what becomes of a partition persisted as pr: FAILED, PAUSED
// and STOPPED stay so across restarts until an operation moves them, a
// failover stop under way is finished, and everything else runs (a promote
// under way waits for lag 0 again).
func restoreOf(pr partitionRecord) restore {
	switch pr.State {
	case partition.Failed, partition.Paused, partition.Stopped:
		return restoreHold
	case partition.Stopping:
		if pr.StopMode != StopPromote {
			return restoreFinish
		}
	}
	return restoreRun
}

// restorePartition sets up tp from its persisted record when it must not
// simply run (restoreOf), and says whether it did.
func (m *Runner) restorePartition(tp fetcher.TP, cfg partition.Config, pr partitionRecord) bool {
	if keepsClosedAt(pr) {
		cfg.ClosedAt = pr.ClosedAt
	}
	switch restoreOf(pr) {
	case restoreHold:
		pm := partition.New(cfg)
		pm.Restore(pr.State, pr.why())
		if pr.State != partition.Failed {
			pm.RestoreOffsets(pr.LastMirroredOffset)
		}
		if pr.State == partition.Stopped {
			m.life.stopped(tp, pr.StopMode)
		}
		m.mu.Lock()
		m.parts[tp] = &runningPartition{pm: pm, done: closedDone()}
		m.mu.Unlock()
		return true
	case restoreFinish:
		pm := partition.New(cfg)
		rp := &runningPartition{pm: pm, done: closedDone()}
		m.life.stopping(tp, StopFailover)
		m.mu.Lock()
		m.parts[tp] = rp
		m.mu.Unlock()
		pm.SetStopping(pr.why())
		m.ops.Add(1)
		go func() {
			defer m.ops.Done()
			m.finishStop(tp, rp, nil, StopFailover)
		}()
		return true
	}
	return false
}

// restoreStoppedTopic says whether every persisted partition of topic is
// STOPPED, and then shows them in describe.
func (m *Runner) restoreStoppedTopic(topic string) bool {
	prs := persistedPartitions(m.cfg.Store, m.rec.Spec.Name, topic)
	if len(prs) == 0 {
		return false
	}
	for _, pr := range prs {
		if pr.State != partition.Stopped {
			return false
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, pr := range prs {
		tp := fetcher.TP{Topic: topic, Partition: p}
		if _, ok := m.parts[tp]; ok {
			continue
		}
		pm := m.idlePartition(tp)
		pm.Restore(pr.State, pr.why())
		pm.RestoreOffsets(pr.LastMirroredOffset)
		m.life.stopped(tp, pr.StopMode)
		m.parts[tp] = &runningPartition{pm: pm, done: closedDone()}
	}
	return true
}
