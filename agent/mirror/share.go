package mirror

// A runner's share of its mirror. Without one (the writer lease, a lone
// agent) a runner runs all of its mirror. When the agents of a group divide
// a mirror's partitions among them (agent/coordinator, group mode), each
// agent that has some of it runs a runner with a share:
//
//   - The home runs the mirror's own work: it creates and grows the
//     destination topics and keeps their configs, ids and read-only ACLs,
//     discovers topics, syncs metadata, and carries out lifecycle
//     operations. It also runs every partition that was never given to an
//     agent of the group (Listed false): a new partition runs with its
//     mirror until its record makes it an item of the group, which goes to
//     the home's agent first.
//   - Every runner runs the partitions given to its agent, each write of
//     one checked against the group (its gate), and stops those taken from
//     it, telling Released once a stopped partition's writes all returned.
//
// Whether a runner is the home is fixed for its life: the coordinator
// starts another runner when it changes.

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
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
// the check of its unit, and which partitions were ever given to an agent.
type shareView struct {
	parts  map[fetcher.TP]func() error
	listed func(tp fetcher.TP) bool
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
// the check its writes must pass, and says which partitions were ever
// given to an agent (the home runs the others). Partitions it runs and no
// longer may are stopped; those it now may start at its next look, which
// this brings forward. A partition that ran with the home and is now
// given to this agent as a unit of its own runs on: its writes check the
// unit from now on (partitionCheck).
func (m *Runner) SetParts(parts map[fetcher.TP]func() error, listed func(tp fetcher.TP) bool) {
	if m.shared == nil {
		return
	}
	m.mu.Lock()
	old := m.shared.view.Swap(&shareView{parts: parts, listed: listed})
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
