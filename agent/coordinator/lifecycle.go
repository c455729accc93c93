package coordinator

// The lifecycle operations on mirror topics: pause, resume, stop (failover
// or promote) and recover. The coordinator checks the topics named against
// the mirror's spec; the mirror's runner checks every partition of them
// against partition.Transition before it changes anything (Runner.Plan), so
// a refused request leaves every state as it was, then carries the operation
// out (Runner.Execute). Pause completes before it returns; the others
// return at once and callers poll describe.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kmirror/kmirror/agent/mirror"
	"github.com/kmirror/kmirror/agent/partition"
)

// StopMode is how a stop ends mirroring (mirror.StopMode).
type StopMode = mirror.StopMode

// The stop modes.
const (
	StopFailover = mirror.StopFailover
	StopPromote  = mirror.StopPromote
)

// ErrUnknownTopic is returned for a topic the mirror does not mirror.
var ErrUnknownTopic = mirror.ErrUnknownTopic

// Source fences of promotes (mirror.SourceFence).
type (
	SourceFence    = mirror.SourceFence
	FenceRequest   = mirror.FenceRequest
	FenceResult    = mirror.FenceResult
	NoSourceFence  = mirror.NoSourceFence
	ACLSourceFence = mirror.ACLSourceFence
)

// PauseTopics pauses every partition of topics of mirror name: each stops
// writing at a batch boundary and keeps its position; the topics stay
// read-only mirror topics.
func (c *Coordinator) PauseTopics(ctx context.Context, name string, topics []string) error {
	return c.lifecycle(ctx, name, topics, partition.OpPause)
}

// ResumeTopics resumes paused partitions of topics: each resyncs from the
// destination end.
func (c *Coordinator) ResumeTopics(ctx context.Context, name string, topics []string) error {
	return c.lifecycle(ctx, name, topics, partition.OpResume)
}

// StopTopics stops mirroring topics for good (STOPPING, then STOPPED: the
// destination topics become ordinary writable topics, and the last mirrored
// offset of each partition is recorded).
func (c *Coordinator) StopTopics(ctx context.Context, name string, topics []string, mode StopMode) error {
	switch mode {
	case StopFailover:
		return c.lifecycle(ctx, name, topics, partition.OpStopFailover)
	case StopPromote:
		return c.lifecycle(ctx, name, topics, partition.OpStopPromote)
	}
	return invalid("mode: %q is not %q or %q", mode, StopFailover, StopPromote)
}

// RecoverTopics clears the failure of FAILED partitions of topics and
// mirrors them again from a resync that re-aligns them; when the
// destination cannot be aligned, the partition fails again saying so.
func (c *Coordinator) RecoverTopics(ctx context.Context, name string, topics []string) error {
	return c.lifecycle(ctx, name, topics, partition.OpRecover)
}

// RecoverTopicsWith is RecoverTopics; with recreate, for topics with a
// FAILED partition, it halts the topic's other partitions, deletes each
// destination topic and creates it again with the same partitions and
// configs, then mirrors every partition from the source's log start
// (recreate.go).
func (c *Coordinator) RecoverTopicsWith(ctx context.Context, name string, topics []string, recreate bool) error {
	op := partition.OpRecover
	if recreate {
		op = partition.OpRecoverRecreate
	}
	return c.lifecycle(ctx, name, topics, op)
}

// lifecycle checks a lifecycle operation on topics of mirror name, then has
// the mirror's runner plan it against every partition and carry it out.
func (c *Coordinator) lifecycle(ctx context.Context, name string, topics []string, op partition.Op) error {
	if err := c.gather(ctx, name); err != nil {
		return err
	}
	// Partitions the operation leaves paused, stopping, stopped or failed
	// keep the mirror gathered (Items); the others may spread again.
	defer c.ungather(ctx, name)
	adminMu.Lock()
	defer adminMu.Unlock()
	rec, ok, err := c.record(name)
	if err != nil {
		return err
	}
	if ok {
		if err := c.ownerError(name); err != nil {
			return err
		}
		ctx = c.ownerCtx(ctx, name)
	}
	m := c.running(name)
	if !ok || m == nil {
		return fmt.Errorf("mirror %q: %w", name, ErrMirrorNotFound)
	}
	if len(topics) == 0 {
		return invalid("topics: give at least one topic to %s", opVerb(op))
	}
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t] {
			return invalid("topics: %q is listed twice", t)
		}
		seen[t] = true
		if !slices.Contains(rec.Spec.Topics, t) {
			return fmt.Errorf("topics: mirror %q has no topic %q: %w", name, t, ErrUnknownTopic)
		}
	}
	plan, err := m.Plan(ctx, op, topics)
	if err != nil {
		return err
	}
	if forget := plan.Unmirrored; len(forget) > 0 {
		spec := rec.Spec
		spec.Topics = slices.DeleteFunc(slices.Clone(spec.Topics), func(t string) bool { return slices.Contains(forget, t) })
		m.Logger().Info("forgetting topics that never mirrored", "topics", forget)
		if err := c.Apply(ctx, spec); err != nil {
			return fmt.Errorf("removing never-mirrored topics %q from mirror %q: %w", forget, name, err)
		}
		if plan.Empty() {
			return nil
		}
	}
	return m.Execute(ctx, plan)
}

// gatherTimeout bounds how long a lifecycle operation waits for the group
// to gather a mirror's partitions on its home's agent: a rebalance takes
// the partitions from their agents once their writes returned, and the
// next gives them to the home's.
const gatherTimeout = 30 * time.Second

// gather, in group mode, pins mirror name to this agent, its home's, for a
// lifecycle operation: the group gives every partition of it to this agent
// (Items), and gather waits until it has them all. A mirror pinned already
// (a partition of it paused, failed; a throttle) is gathered already.
func (c *Coordinator) gather(ctx context.Context, name string) error {
	if c.cfg.Owner == nil {
		return nil
	}
	if _, ok := c.store.Get(mirrorKey(name)); !ok {
		return nil // the operation says so
	}
	if err := c.ownerError(name); err != nil {
		return err
	}
	if _, ok := c.store.Get(pinPrefix + name); !ok {
		if err := c.store.Put(c.ownerCtx(ctx, name), pinPrefix+name, []byte(c.cfg.AgentID)); err != nil {
			return fmt.Errorf("gathering the partitions of mirror %q on this agent for the operation: %w", name, err)
		}
	}
	c.cfg.Owner.Refresh()
	deadline := time.Now().Add(gatherTimeout)
	for {
		elsewhere := c.scattered(name)
		if len(elsewhere) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mirror %q: %w: %d of its partitions are not on this agent, its home, after %v (%s): retry shortly",
				name, ErrGathering, len(elsewhere), gatherTimeout, strings.Join(elsewhere[:min(len(elsewhere), 3)], ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scattered are the partition items of mirror name that this agent's
// runner of it does not have writable yet.
func (c *Coordinator) scattered(name string) []string {
	m := c.running(name)
	if m == nil {
		return []string{mirrorKey(name)}
	}
	var out []string
	for _, k := range c.store.Keys("partition/" + name + "/") {
		if _, tp, ok := mirror.ParsePartitionKey(k); ok && !m.Given(tp) {
			out = append(out, k)
		}
	}
	return out
}

// ungather lets mirror name's partitions spread over the group again,
// unless what they are in keeps them gathered (Items).
func (c *Coordinator) ungather(ctx context.Context, name string) {
	if c.cfg.Owner == nil {
		return
	}
	if _, ok := c.store.Get(pinPrefix + name); !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.store.Put(ctx, pinPrefix+name, nil); err != nil {
		c.log.Warn("the mirror stays gathered on this agent", "mirror", name, "error", err)
	}
}

func opVerb(op partition.Op) string {
	switch op {
	case partition.OpStopFailover, partition.OpStopPromote:
		return "stop"
	}
	return string(op)
}
