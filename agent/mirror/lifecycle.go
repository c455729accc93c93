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
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorspec"
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

// FenceRequest is what SourceFence.Fence fences.
type FenceRequest struct {
	Mirror string
	Source mirrorspec.Source
	Topics []string
	// Admin reaches the source as the mirror does: the mirror's own
	// source client, or one made from the same options when the mirror is
	// not connected.
	Admin *kadm.Client
	// Client is the client Admin was made from.
	Client *kgo.Client
}

// SourceFence stops writes to the source topics of a promote, so that the
// source high watermark the promote waits for stops moving: ACLSourceFence
// adds a DENY WRITE ACL for User:* on each source topic (KIP-1279's
// read-only enforcement, applied to the old primary). It plugs in as
// Config.SourceFence; StopTopics calls Fence once, before any state
// changes, when a promote is issued, and again when a promote interrupted
// by an agent restart resumes. An error refuses the promote; a result with
// Fenced false lets it go on, and its reason is shown in describe (the
// partitions' reasons and the mirror's warnings): the promote is not
// silently taken for fenced. Fence must be idempotent. Without a fence
// (NoSourceFence, the default) a promote waits until producers stop on
// their own, and a record acknowledged by the source between the agent's
// last look and the stop sends the partition back to mirroring rather than
// being lost.
type SourceFence interface {
	Fence(ctx context.Context, req FenceRequest) (FenceResult, error)
}

// NoSourceFence fences nothing, and says so.
type NoSourceFence struct{}

// Fence does nothing.
func (NoSourceFence) Fence(_ context.Context, req FenceRequest) (FenceResult, error) {
	return FenceResult{Reason: fmt.Sprintf("source writes to %q were NOT fenced: the agent has no source fence configured; RPO 0 depends on producers having stopped writing to the source", req.Topics)}, nil
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
		states := map[partition.State]bool{}
		for _, tp := range tps {
			states[m.stateOf(tp)] = true
		}
		for _, tp := range tps {
			from := m.stateOf(tp)
			if (op == partition.OpRecover || op == partition.OpRecoverRecreate) && states[partition.Failed] && (from == partition.Initializing ||
				from == partition.Preparing || from == partition.Mirroring || from == partition.Paused) {
				if op == partition.OpRecoverRecreate {
					// Recreating deletes the whole destination topic: the
					// partitions that did not fail are mirrored again with
					// the failed ones (recreateTopic halts them first).
					p.targets = append(p.targets, target{tp: tp, from: from, to: partition.Initializing})
				}
				// A plain recover of a topic clears its failed
				// partitions and leaves the others as they are.
				continue
			}
			if op == partition.OpStopPromote && from == partition.Stopping && m.stopModeOf(tp) == StopPromote {
				// Asked again (a terraform apply after its wait timed
				// out): the promote under way goes on.
				p.targets = append(p.targets, target{tp: tp, from: from, to: from})
				continue
			}
			to, err := partition.Transition(from, op)
			if err != nil {
				var te *partition.TransitionError
				if errors.As(err, &te) {
					te.Subject = fmt.Sprintf("topic %s", t)
					if len(states) > 1 {
						te.Subject = fmt.Sprintf("topic %s partition %d", t, tp.Partition)
					}
				}
				return nil, err
			}
			p.targets = append(p.targets, target{tp: tp, from: from, to: to})
		}
	}
	return p, nil
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
		switch {
		case tg.from == partition.Stopped,
			tg.from == tg.to && op != partition.OpStopFailover,
			op == partition.OpResume && tg.from != partition.Paused:
			continue // already there
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

// fenceSource fences writes on the source topics of a promote (see
// SourceFence) through the mirror's source client, or one made from the same
// options when the mirror is not connected, and records whether it did for
// describe. An error refuses the promote.
func (m *Runner) fenceSource(ctx context.Context, topics []string) error {
	m.mu.Lock()
	src := m.source
	spec := m.spec
	m.mu.Unlock()
	var admCl *kgo.Client
	if src != nil {
		admCl = src.cl
	} else {
		opts, err := m.cfg.SourceOpts(spec)
		if err != nil {
			return fmt.Errorf("promote: connecting to the source to fence writes on %q: %w", topics, err)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("promote: connecting to the source to fence writes on %q: %w", topics, err)
		}
		defer cl.Close()
		admCl = cl
	}
	adm := kadm.NewClient(admCl)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := m.cfg.SourceFence.Fence(fctx, FenceRequest{Mirror: spec.Name, Source: spec.Source, Topics: topics, Admin: adm, Client: admCl})
	if err != nil {
		return fmt.Errorf("promote: fencing writes on the source topics %q: %w", topics, err)
	}
	reason := ""
	if !res.Fenced {
		reason = res.Reason
		if reason == "" {
			reason = fmt.Sprintf("source writes to %q were NOT fenced; RPO 0 depends on producers having stopped writing to the source", topics)
		}
		m.log.Warn("promote: source writes not fenced", "topics", topics, "reason", reason)
	} else {
		m.log.Info("promote: source writes fenced", "topics", topics)
	}
	m.mu.Lock()
	for _, t := range topics {
		m.fenced[t] = fenceState{done: true, reason: reason}
	}
	m.mu.Unlock()
	return nil
}

// fenceState is what the source fence of a topic's promote did.
type fenceState struct {
	done   bool   // fenced or tried, in this run of the mirror
	reason string // why source writes are not fenced; empty when they are
}

// fenceNote is what a promote of topic adds to its partitions' reasons: ""
// when source writes are fenced, else why not.
func (m *Runner) fenceNote(topic string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.fenced[topic].reason; r != "" {
		return "; " + r
	}
	return ""
}

// kick makes the mirror look at its topics again at once.
func (m *Runner) kick() {
	select {
	case m.refresh <- struct{}{}:
	default:
	}
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

// stateOf is tp's state: its partition mirror's, else its persisted one.
// stopModeOf is how tp is stopping: the mode of a stop under way, or of the
// persisted record when tp does not run.
func (m *Runner) stopModeOf(tp fetcher.TP) StopMode {
	m.mu.Lock()
	mode, ok := m.stopModes[tp]
	m.mu.Unlock()
	if ok {
		return mode
	}
	var pr partitionRecord
	if ReadRecord(m.cfg.Store, partitionKey(m.rec.Spec.Name, tp), &pr) && pr.State == partition.Stopping {
		return pr.StopMode
	}
	return ""
}

func (m *Runner) stateOf(tp fetcher.TP) partition.State {
	m.mu.Lock()
	rp := m.parts[tp]
	m.mu.Unlock()
	if rp != nil {
		return rp.pm.Status().State
	}
	var pr partitionRecord
	if ReadRecord(m.cfg.Store, partitionKey(m.rec.Spec.Name, tp), &pr) && pr.State != "" {
		return pr.State
	}
	return partition.Initializing
}

// idlePartition is a partition mirror that does not run: it reports a
// restored state and can finish a stop (it reaches the destination only).
func (m *Runner) idlePartition(tp fetcher.TP) *partition.Mirror {
	return partition.New(partition.Config{
		Mirror: m.rec.Spec.Name, TP: tp, Writer: m.cfg.Writer, Fillers: m.cfg.Fillers,
		ProducerID: m.rec.ProducerID, Epoch: m.rec.Epoch, Logger: m.log.Named("partition"),
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
	if err := WriteRecord(m.ctx, m.cfg.Store, partitionKey(m.rec.Spec.Name, tp), pr); err != nil {
		m.log.Error("persisting partition state", "partition", tp.String(), "state", pr.State, "error", err)
	}
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
	if rp != nil && m.parts[tp] == rp {
		rp.stop, rp.placeholder = nil, true
	}
	if recovering {
		m.recoverTPs[tp] = true
		m.recoverTopics[tp.Topic] = true
	}
	m.mu.Unlock()
	m.kick()
}

func (m *Runner) recover(tp fetcher.TP) {
	m.log.Info("recovering partition", "partition", tp.String())
	m.restartPartition(tp, stateRecord(partition.Initializing, reason.New(reason.Recovering, "recovering: re-aligning with the source")), true)
}

// stopFailover moves tp to STOPPING and finishes the stop in the
// background, within StopTimeout.
func (m *Runner) stopFailover(tp fetcher.TP) {
	m.mu.Lock()
	m.stopModes[tp] = StopFailover
	m.mu.Unlock()
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
		if note := m.fenceNote(tp.Topic); note != "" {
			r = reason.Error{Code: reason.SourceNotFenced, Message: "promoted" + note}
		}
	}
	// The topic is an ordinary writable topic once all its partitions
	// are STOPPED (DESIGN §4): its read-only ACL goes before the last
	// partition shows STOPPED, so that whoever waits for STOPPED (a
	// terraform apply, kmirror stop) can write at once. stopMu orders the
	// partitions stopping together, so that the last sees the others.
	m.stopMu.Lock()
	defer m.stopMu.Unlock()
	m.releaseIfStopped(tp.Topic, tp)
	m.mu.Lock()
	m.stoppedBy[tp] = mode
	m.mu.Unlock()
	rp.pm.Restore(partition.Stopped, r)
	pr := stateRecord(partition.Stopped, r)
	pr.LastMirroredOffset, pr.StopMode = lmo, mode
	m.persist(tp, pr)
	m.mu.Lock()
	delete(m.stopModes, tp)
	m.mu.Unlock()
	m.log.Info("partition stopped", "partition", tp.String(), "mode", mode, "last_mirrored_offset", lmo)
}

// stopPromote moves tp to STOPPING and waits for lag 0 in the background.
func (m *Runner) stopPromote(tp fetcher.TP) {
	m.mu.Lock()
	m.stopModes[tp] = StopPromote
	m.promoteBy[tp] = time.Now().Add(m.cfg.PromoteTimeout)
	rp := m.parts[tp]
	running := rp != nil && rp.stop != nil
	m.mu.Unlock()
	pr := stateRecord(partition.Stopping, m.promoteWaiting(tp.Topic, ""))
	pr.StopMode = StopPromote
	if running {
		pr.LastMirroredOffset = rp.pm.Status().LastMirrored
		m.persist(tp, pr)
		m.startPromote(tp, rp.pm)
		return
	}
	// Paused, or the source is not connected: the mirror starts it at its
	// next look, and the promote waits from there.
	if rp == nil {
		rp, _ = m.take(tp)
	}
	rp.pm.SetStopping(m.promoteWaiting(tp.Topic, " (the partition mirror starts again first)"))
	m.restartPartition(tp, pr, false)
}

const promoteReason = "promote: waiting until the source's last stable offset and the destination end reach the source high watermark"

// promoteWaiting is the reason of a partition a promote of topic waits for:
// promoteReason, then more, then the fence note.
func (m *Runner) promoteWaiting(topic, more string) reason.Error {
	return reason.Error{Code: reason.PromoteInProgress, Message: promoteReason + more + m.fenceNote(topic)}
}

// startPromote waits in the background until pm reaches lag 0, then stops
// it as failover does.
func (m *Runner) startPromote(tp fetcher.TP, pm *partition.Mirror) {
	m.mu.Lock()
	m.stopModes[tp] = StopPromote
	deadline, ok := m.promoteBy[tp]
	if !ok {
		deadline = time.Now().Add(m.cfg.PromoteTimeout)
		m.promoteBy[tp] = deadline
	}
	m.mu.Unlock()
	pm.SetStopping(m.promoteWaiting(tp.Topic, ""))
	m.ops.Add(1)
	go func() {
		defer m.ops.Done()
		m.promote(tp, pm, deadline)
	}()
}

func (m *Runner) promote(tp fetcher.TP, pm *partition.Mirror, deadline time.Time) {
	for m.ctx.Err() == nil {
		m.mu.Lock()
		rp := m.parts[tp]
		mode := m.stopModes[tp]
		m.mu.Unlock()
		if rp == nil || rp.pm != pm || rp.stop == nil || mode != StopPromote {
			return // replaced: reconnected, restarted, or a failover took over
		}
		st := pm.Status()
		if st.State == partition.Failed {
			m.mu.Lock()
			delete(m.stopModes, tp)
			delete(m.promoteBy, tp)
			m.mu.Unlock()
			return
		}
		waitFor := m.promoteWaitsFor(tp, pm, st)
		if waitFor == "" {
			m.promoteStop(tp, rp)
			return
		}
		if time.Now().After(deadline) {
			r := reason.New(reason.PromoteTimedOut, "promote timed out after %s waiting for %s; the partition keeps mirroring: promote again, or stop with mode failover", m.cfg.PromoteTimeout, waitFor)
			m.mu.Lock()
			delete(m.stopModes, tp)
			delete(m.promoteBy, tp)
			m.mu.Unlock()
			pm.ClearStopping(r)
			pr := stateRecord(partition.Mirroring, r)
			pr.LastMirroredOffset = pm.Status().LastMirrored
			m.persist(tp, pr)
			m.log.Warn("promote timed out", "partition", tp.String(), "waiting_for", waitFor)
			return
		}
		pm.SetStopping(reason.Error{Code: reason.PromoteInProgress, Message: "promote: waiting for " + waitFor + m.fenceNote(tp.Topic)})
		select {
		case <-m.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// promoteWaitsFor says what a promote of pm still waits for, "" for
// nothing.
func (m *Runner) promoteWaitsFor(tp fetcher.TP, pm *partition.Mirror, st partition.Status) string {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	src, err := pm.SourceBounds(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("the source to answer (%v)", err)
	case src.LastStable < src.HighWatermark:
		return fmt.Sprintf("the source's open transactions to be decided (last stable offset %d, high watermark %d)", src.LastStable, src.HighWatermark)
	case st.DestinationOffset < src.HighWatermark:
		return fmt.Sprintf("the destination end %d to reach the source high watermark %d (lag %d)%s", st.DestinationOffset, src.HighWatermark, src.HighWatermark-st.DestinationOffset, m.throttleNote(tp))
	}
	return ""
}

// throttleNote says, for a promote waiting on lag, that the mirror's
// throttle holds tp back: a throttle set low can keep a promote from ever
// finishing, and the wait must say so rather than look stuck.
func (m *Runner) throttleNote(tp fetcher.TP) string {
	if !m.throttle.Applies(tp) {
		return ""
	}
	return fmt.Sprintf("; the mirror's throttle (%d bytes/s) holds this partition's fetches back: raise or remove it "+
		"(kafka_mirror_throttle, kmirror throttle) for the promote to finish sooner", m.throttle.Rate())
}

// promoteStop halts a caught-up partition and stops it when nothing
// reached the source in between; otherwise it mirrors on and the promote
// waits again.
func (m *Runner) promoteStop(tp fetcher.TP, rp *runningPartition) {
	m.mu.Lock()
	stop := rp.stop
	rp.stop = nil
	m.mu.Unlock()
	pm := rp.pm
	halted := halt(rp, stop, false, 2*time.Second, 10*time.Second)
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	dst, derr := pm.DestinationBounds(ctx)
	src, serr := pm.SourceBounds(ctx)
	if halted && derr == nil && serr == nil && src.LastStable == src.HighWatermark && dst.HighWatermark == src.HighWatermark {
		m.finishStop(tp, rp, nil, StopPromote)
		m.mu.Lock()
		delete(m.promoteBy, tp)
		m.mu.Unlock()
		return
	}
	m.log.Info("promote: the source moved on while the partition stopped; mirroring on", "partition", tp.String())
	m.mu.Lock()
	still := m.stopModes[tp] == StopPromote
	m.mu.Unlock()
	if still {
		pr := stateRecord(partition.Stopping, m.promoteWaiting(tp.Topic, ""))
		pr.StopMode = StopPromote
		m.restartPartition(tp, pr, false)
	}
}

// restorePartition sets up tp from its persisted record when it must not
// simply run: FAILED, PAUSED and STOPPED stay so, and a failover stop under
// way is finished. It says whether it did.
func (m *Runner) restorePartition(tp fetcher.TP, cfg partition.Config, pr partitionRecord) bool {
	switch pr.State {
	case partition.Failed, partition.Paused, partition.Stopped:
		pm := partition.New(cfg)
		pm.Restore(pr.State, pr.why())
		if pr.State != partition.Failed {
			pm.RestoreOffsets(pr.LastMirroredOffset)
		}
		m.mu.Lock()
		m.parts[tp] = &runningPartition{pm: pm, done: closedDone()}
		if pr.State == partition.Stopped {
			m.stoppedBy[tp] = pr.StopMode
		}
		m.mu.Unlock()
		return true
	case partition.Stopping:
		if pr.StopMode == StopPromote {
			return false
		}
		pm := partition.New(cfg)
		rp := &runningPartition{pm: pm, done: closedDone()}
		m.mu.Lock()
		m.parts[tp] = rp
		m.stopModes[tp] = StopFailover
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
		m.parts[tp] = &runningPartition{pm: pm, done: closedDone()}
		m.stoppedBy[tp] = pr.StopMode
	}
	return true
}
