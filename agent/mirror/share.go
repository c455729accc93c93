package mirror

// A runner's share of its mirror. Without one (the writer lease, a lone
// agent) a runner runs all of its mirror. When the agents of a group divide
// a mirror's partitions among them (agent/coordinator, group mode), each
// agent that has some of it runs a runner with a share:
//
//   - The home runs the mirror's own work: it creates and grows the
//     destination topics and keeps their configs, ids and read-only ACLs,
//     discovers topics, syncs metadata, and carries out lifecycle
//     operations. In a group of one, it also starts a partition that was
//     never given to an agent of the group (listed false) and has no
//     record yet: the partition runs with its mirror, and its record makes
//     it an item of the group, which goes to the home's agent first. In a
//     group of several agents the home holds a new partition back instead
//     (holdBack): it writes the partition's record, marked unplaced, and
//     runs it only if the group gives it to its agent, as it may give it
//     to any: a partition placed where it will run is not handed on during
//     its first copy.
//   - Every runner runs the partitions given to its agent, each write of
//     one checked against the group (its gate), and stops those taken from
//     it, telling Released once a stopped partition's writes all returned.
//
// Whether a runner is the home is fixed for its life: the coordinator
// starts another runner when it changes.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// shared is a runner's share of its mirror; nil runs all of it.
type shared struct {
	home     bool
	released func(tp fetcher.TP)
	// view is what SetParts gave last. The writer asks partitionCheck
	// for every request, so it is read without the runner's lock (a part
	// never takes the runner's lock).
	view atomic.Pointer[shareView]
}

// shareView is one SetParts: the partitions given to this agent, each with
// the check of its unit, which partitions were ever given to an agent, and
// whether the home holds new ones back for the group to place.
type shareView struct {
	parts  map[fetcher.TP]func() error
	listed func(tp fetcher.TP) bool
	place  bool
}

// errNotShared refuses a write of a partition no longer in the runner's
// share (it is being stopped and handed on).
var errNotShared = errors.New("the partition is no longer this agent's to write")

// Share makes the runner run a share of its mirror (see above): its own
// work when home, and the partitions SetParts gives it. released is told
// each partition it stopped because SetParts left it out, once its writes
// all returned. Call it before Start.
func (m *Runner) Share(home bool, released func(tp fetcher.TP)) {
	if released == nil {
		released = func(fetcher.TP) {}
	}
	m.shared = &shared{home: home, released: released}
	m.shared.view.Store(&shareView{parts: map[fetcher.TP]func() error{}, listed: func(fetcher.TP) bool { return true }})
}

// Home says whether the runner runs its mirror's own work: always without
// a share.
func (m *Runner) Home() bool { return m.shared == nil || m.shared.home }

// SetParts gives the runner the partitions its agent was given, each with
// the check its writes must pass, says which partitions were ever given to
// an agent (the home runs the others), and whether the home holds new
// partitions back for the group to place (holdBack; place: the group has
// other agents to place them on). Partitions it runs and no
// longer may are stopped; those it now may start at its next look, which
// this brings forward. A partition that ran with the home and is now
// given to this agent as a unit of its own runs on: its writes check the
// unit from now on (partitionCheck).
func (m *Runner) SetParts(parts map[fetcher.TP]func() error, listed func(tp fetcher.TP) bool, place bool) {
	if m.shared == nil {
		return
	}
	m.mu.Lock()
	old := m.shared.view.Swap(&shareView{parts: parts, listed: listed, place: place})
	var drop, idle []fetcher.TP
	for tp := range m.parts {
		if !m.runs(tp) {
			drop = append(drop, tp)
		}
	}
	for tp := range old.parts {
		if !m.runs(tp) && m.parts[tp] == nil {
			idle = append(idle, tp) // taken before it started: nothing to stop
		}
	}
	m.mu.Unlock()
	for _, tp := range idle {
		m.shared.released(tp)
	}
	for _, tp := range drop {
		m.ops.Go(func() { m.drop(tp) })
	}
	m.kick()
}

// holdBack says whether the home leaves partition tp, which it does not
// run, to the group rather than start it: tp was never given to an agent
// (else the home does not run it), and it has a record (it ran somewhere,
// or was held back before), or has none and the group has other agents to
// place it on (place). The first hold writes tp's record, marked unplaced,
// which makes tp an item of the group that it may give to any agent at once.
//
// So the home starts a partition the group never gave an agent only while
// the partition has no record, and once its record exists, its item goes to
// the home's agent unless the record says no agent ever ran it. A record
// the home reads may be newer than the group's view it has: that of a held
// partition the group gave another agent, which runs it already.
func (m *Runner) holdBack(ctx context.Context, tp fetcher.TP) bool {
	if m.shared == nil || !m.shared.home {
		return false
	}
	v := m.shared.view.Load()
	if v.listed(tp) {
		return false
	}
	key := PartitionKey(m.rec.Spec.Name, tp)
	if raw, ok := m.cfg.Store.Get(key); ok {
		if _, unplaced := Placement(raw); unplaced {
			m.hold(tp)
		}
		return true
	}
	if !v.place {
		return false
	}
	if err := WriteRecord(ctx, m.cfg.Store, key, partitionRecord{State: partition.Initializing, LastMirroredOffset: -1, Unplaced: true}); err != nil && ctx.Err() == nil {
		m.log.Warn("holding a new partition back for the agents' group to place: writing its record failed; the next look tries again", "partition", tp.String(), "error", err)
	}
	m.hold(tp)
	return true
}

// hold has describe show tp, held back, until it is placed (Status).
func (m *Runner) hold(tp fetcher.TP) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[fetcher.TP]bool{}
	}
	m.held[tp] = true
}

// heldStatus is how describe shows a partition held back: INITIALIZING,
// until the group places it and its agent starts it.
func heldStatus(name string, tp fetcher.TP) partition.Status {
	why := reason.New(reason.AwaitingPlacement, "new partition: waiting for the agents' group to place it on an agent")
	return partition.Status{Mirror: name, Topic: tp.Topic, Partition: tp.Partition, State: partition.Initializing,
		Reason: why.Message, ReasonCode: why.Code, LastMirrored: -1, Lag: mirrorapi.LagUnknown}
}

// Given says whether the runner has tp as a partition given to its agent
// (always without a share).
func (m *Runner) Given(tp fetcher.TP) bool {
	if m.shared == nil {
		return true
	}
	_, ok := m.shared.view.Load().parts[tp]
	return ok
}

// runs says whether the runner runs tp: given to its agent, or, at the
// home, never given to any.
func (m *Runner) runs(tp fetcher.TP) bool {
	if m.shared == nil {
		return true
	}
	v := m.shared.view.Load()
	if _, ok := v.parts[tp]; ok {
		return true
	}
	return m.shared.home && !v.listed(tp)
}

// partitionCheck is the check of tp's writes beyond the runner's own (its
// home's unit, at the home): its own unit's while it is given to this
// agent, none while it runs with the home, and a refusal once neither
// holds.
func (m *Runner) partitionCheck(tp fetcher.TP) error {
	v := m.shared.view.Load()
	if g, ok := v.parts[tp]; ok {
		return g()
	}
	if m.shared.home && !v.listed(tp) {
		return nil
	}
	return fmt.Errorf("partition %s: %w", tp, errNotShared)
}

// gateOf is what startPartitions adds to tp's context: partitionCheck
// with a share, nothing without.
func (m *Runner) gateOf(tp fetcher.TP) func() error {
	if m.shared == nil {
		return nil
	}
	return func() error { return m.partitionCheck(tp) }
}

// drop stops tp's partition mirror and forgets it, so that a share that
// has it again starts it afresh; one its share left out is released once
// its writes all returned.
func (m *Runner) drop(tp fetcher.TP) {
	m.mu.Lock()
	rp := m.parts[tp]
	m.mu.Unlock()
	if rp != nil {
		if rp.stop != nil {
			rp.stop()
		}
		// Its Run returns once its pipeline is reaped: every write it
		// sent was answered or will never be sent.
		select {
		case <-rp.done:
		case <-time.After(time.Minute):
			m.log.Error("a partition taken from this agent did not stop within a minute; it is not handed on", "partition", tp.String())
			return
		}
	}
	m.mu.Lock()
	if m.parts[tp] == rp {
		delete(m.parts, tp)
	}
	still := m.runs(tp)
	m.mu.Unlock()
	if !still {
		m.shared.released(tp)
	}
	m.kick()
}
