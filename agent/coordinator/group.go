package coordinator

// Group mode: the agents of one destination divide its mirrors among
// themselves (agent/membership). Each coordinator follows the state topic,
// offers every mirror in it as an item of the group, and runs only the
// mirrors the group gives it, from the moment they are writable; every
// write made for one carries the membership's check in its context
// (agent/writegate), down to the request that leaves the writer. A mirror
// taken from this agent is stopped, and reported released once every write
// of it returned, so that its next owner may write at once.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/agent/mirror"
	"github.com/kmirror/kmirror/agent/writegate"
)

// Owner is the agent's membership of its destination's group, as the
// coordinator uses it (*membership.Member).
type Owner interface {
	// View is this agent's current share.
	View() membership.View
	// Changed is closed at the next change of View.
	Changed() <-chan struct{}
	// Check returns nil while this agent may write item.
	Check(item string) error
	// Released reports items lost whose writes all returned.
	Released(items ...string)
	// Refresh asks for a new assignment: the mirrors changed.
	Refresh()
	// SetWeight tells the group an owned mirror's measured load, its
	// byte rate, which the next assignment balances.
	SetWeight(item string, w int64)
}

// weighEvery is how often the byte rate of each mirror run here is
// measured for the group (Owner.SetWeight).
const weighEvery = 10 * time.Second

// Items are the mirrors of the state topic as items of the agents' group,
// keyed as their records are ("mirror/NAME"). The group's leader asks at
// every heartbeat: the keys are enough, no record is decoded.
func (c *Coordinator) Items() []membership.Item {
	var out []membership.Item
	for _, k := range c.store.Keys("mirror/") {
		out = append(out, membership.Item{Key: k})
	}
	return out
}

// ownerCtx is ctx with the check of mirror name's ownership (group mode).
func (c *Coordinator) ownerCtx(ctx context.Context, name string) context.Context {
	if c.cfg.Owner == nil {
		return ctx
	}
	item := mirrorKey(name)
	return writegate.With(ctx, func() error { return c.cfg.Owner.Check(item) })
}

// writable says whether this agent may run mirror name now: always without
// a group; in one, while the group gives it to this agent and its wait is
// over.
func (c *Coordinator) writable(name string) bool {
	if c.cfg.Owner == nil {
		return true
	}
	g, ok := c.cfg.Owner.View().Items[mirrorKey(name)]
	return ok && !time.Now().Before(g.WritableAt)
}

// follow keeps the mirrors this agent runs in line with its share of the
// group and with the state topic, until ctx ends.
func (c *Coordinator) follow(ctx context.Context) {
	go func() {
		if err := c.store.Follow(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("following the state topic stopped", "error", err)
		}
	}()
	var known []string // the mirrors offered to the group
	weigh := time.NewTicker(weighEvery)
	defer weigh.Stop()
	var weighed map[string]int64 // bytes mirrored, by mirror, at the last tick
	for {
		ownerChanged, storeChanged := c.cfg.Owner.Changed(), c.store.Changed()
		recs, _ := c.records()
		names := slices.Sorted(maps.Keys(recs))
		if !slices.Equal(names, known) {
			known = names
			c.cfg.Owner.Refresh()
		}
		wake := c.reconcile(ctx, recs)
		var timer <-chan time.Time
		if !wake.IsZero() {
			timer = time.After(time.Until(wake))
		}
		select {
		case <-ctx.Done():
			return
		case <-ownerChanged:
		case <-storeChanged:
		case <-c.stopped:
		case <-timer:
		case <-weigh.C:
			weighed = c.weigh(weighed)
		}
	}
}

// weigh tells the group the byte rate of each mirror run here since the
// last tick (last: the bytes mirrored then), and returns the bytes now.
func (c *Coordinator) weigh(last map[string]int64) map[string]int64 {
	now := map[string]int64{}
	for _, m := range c.Describe() {
		var b int64
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				b += p.Bytes
			}
		}
		now[m.Name] = b
		if prev, ok := last[m.Name]; ok && b >= prev {
			// At least 1: a mirror that idles still counts.
			c.cfg.Owner.SetWeight(mirrorKey(m.Name), max(1, (b-prev)*int64(time.Second)/int64(weighEvery)))
		}
	}
	return now
}

// records returns every mirror record of the state topic, by name, and the
// keys of those that do not decode.
func (c *Coordinator) records() (recs map[string]mirror.Record, unreadable map[string]error) {
	recs = map[string]mirror.Record{}
	for k, v := range c.store.All() {
		name, ok := strings.CutPrefix(k, "mirror/")
		if !ok {
			continue
		}
		var rec mirror.Record
		if err := json.Unmarshal(v, &rec); err != nil {
			if unreadable == nil {
				unreadable = map[string]error{}
			}
			unreadable[k] = err
			continue
		}
		recs[name] = rec
	}
	return recs, unreadable
}

// reconcile stops the mirrors this agent may no longer run, starts those
// it now may, and passes spec changes another agent wrote on to the
// runners. It returns when it should look again for a mirror whose wait is
// not over (zero: nothing to wait for).
func (c *Coordinator) reconcile(ctx context.Context, recs map[string]mirror.Record) (wake time.Time) {
	view := c.cfg.Owner.View()
	now := time.Now()

	c.mu.Lock()
	for name, m := range c.mirrors {
		restart := false
		if _, owned := view.Items[mirrorKey(name)]; owned {
			if rec, ok := recs[name]; ok {
				id, epoch := m.Producer()
				if id == rec.ProducerID && epoch == rec.Epoch {
					if !reflect.DeepEqual(m.Spec(), rec.Spec) {
						m.SetSpec(rec.Spec)
					}
					continue
				}
				// Agents that started together each created the
				// mirror with a producer of their own; the state
				// topic keeps the last record, which every agent
				// runs from now on, this one too.
				c.log.Warn("the mirror's record names another producer (another agent created it at the same time): restarting it with that one",
					"mirror", name, "producer_id", id, "record_producer_id", rec.ProducerID)
				restart = true
			}
		}
		// Taken from this agent, deleted by another, or restarted:
		// stop it, and hand it on once every write of it returned.
		delete(c.mirrors, name)
		done := make(chan struct{})
		c.stopping[name] = done
		go func() {
			m.Stop()
			c.mu.Lock()
			delete(c.stopping, name)
			// A mirror restarted here is handed on only when the group
			// took it meanwhile (else the next pass hands it on).
			_, owned := c.cfg.Owner.View().Items[mirrorKey(name)]
			c.mu.Unlock()
			close(done)
			select {
			case c.stopped <- struct{}{}: // reconcile again: it may be ours again
			default:
			}
			if !restart || !owned {
				c.cfg.Owner.Released(mirrorKey(name))
				c.log.Info("mirror handed on", "mirror", name)
			}
		}()
	}
	// Items lost before their mirror started here (still waiting, or
	// never in the state topic here) have nothing to stop: released now.
	var idle []string
	for item := range c.granted {
		name, _ := strings.CutPrefix(item, "mirror/")
		_, running := c.mirrors[name]
		_, stopping := c.stopping[name]
		if _, owned := view.Items[item]; !owned && !running && !stopping {
			idle = append(idle, item)
		}
	}
	c.granted = maps.Clone(view.Items)
	if len(idle) > 0 {
		c.cfg.Owner.Released(idle...)
	}
	var start []mirror.Record
	for item, g := range view.Items {
		name, _ := strings.CutPrefix(item, "mirror/")
		rec, ok := recs[name]
		if _, running := c.mirrors[name]; !ok || running {
			continue
		}
		if _, stopping := c.stopping[name]; stopping {
			continue // its stop wakes follow, which reconciles again
		}
		if now.Before(g.WritableAt) {
			if wake.IsZero() || g.WritableAt.Before(wake) {
				wake = g.WritableAt
			}
			continue
		}
		start = append(start, rec)
	}
	c.mu.Unlock()
	if len(start) == 0 {
		return wake
	}
	// Admin operations stop and start mirrors themselves (a delete stops
	// its mirror before it removes its record, which must not start it
	// again in between): starts wait for them. Stops above do not: a
	// promote may hold them for minutes, and a mirror taken from this
	// agent must stop at once.
	if !adminMu.TryLock() {
		return time.Now().Add(250 * time.Millisecond)
	}
	defer adminMu.Unlock()
	// What the previous owner wrote last is in the store before the
	// mirror starts from it.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := c.store.Sync(sctx)
	cancel()
	if err != nil {
		c.log.Warn("not starting mirrors given to this agent yet", "error", err)
		return time.Now().Add(time.Second)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh, _ := c.records()
	for _, rec := range start {
		if rec, ok := fresh[rec.Spec.Name]; ok && c.runCtx.Err() == nil {
			c.startLocked(rec)
			c.log.Info("mirror taken on", "mirror", rec.Spec.Name, "generation", view.Generation)
		}
	}
	return wake
}

// ownerError says which agent runs mirror name when it is not this one.
func (c *Coordinator) ownerError(name string) error {
	if c.cfg.Owner == nil || c.writable(name) {
		return nil
	}
	g, ok := c.cfg.Owner.View().Items[mirrorKey(name)]
	if ok {
		return fmt.Errorf("mirror %q: %w; this agent takes it on in %v, when its previous owner's writes have run out: retry then",
			name, ErrNotRunHere, time.Until(g.WritableAt).Round(time.Millisecond))
	}
	return fmt.Errorf("mirror %q: %w: another agent of the group runs it; send the call to that agent (kmirror status lists them)", name, ErrNotRunHere)
}

// Location is where a mirror runs, as this agent knows it (Locate).
type Location struct {
	// Here: this agent runs it (always so without a group).
	Here bool
	// Agent and API name the agent of the group that owns it, when
	// another does; API is empty when that agent told none.
	Agent, API string
	// Moving: the group has it moving between agents (taken from its
	// owner, or its new owner waits out the previous one's writes).
	Moving bool
	// Generation is the group's generation this says it of.
	Generation int32
}

// Locate says where mirror name runs; ok is false when the state topic
// has no such mirror.
func (c *Coordinator) Locate(name string) (loc Location, ok bool) {
	if _, ok := c.store.Get(mirrorKey(name)); !ok {
		return Location{}, false
	}
	if c.cfg.Owner == nil {
		return Location{Here: true}, true
	}
	view := c.cfg.Owner.View()
	loc.Generation = view.Generation
	if c.running(name) != nil {
		loc.Here = true
		return loc, true
	}
	agent, owned := view.Owners[mirrorKey(name)]
	if _, mine := view.Items[mirrorKey(name)]; !owned || mine {
		loc.Moving = true // nobody's this generation, or this agent's but waiting
		return loc, true
	}
	loc.Agent = agent
	for _, m := range view.Members {
		if m.Agent == agent {
			loc.API = m.API
		}
	}
	return loc, true
}

// Peer is another agent of the group and where its API answers.
type Peer struct{ Agent, API string }

// Peers are the other agents of the group (none without a group).
func (c *Coordinator) Peers() []Peer {
	if c.cfg.Owner == nil {
		return nil
	}
	var peers []Peer
	for _, m := range c.cfg.Owner.View().Members {
		if m.Agent != c.cfg.AgentID {
			peers = append(peers, Peer{Agent: m.Agent, API: m.API})
		}
	}
	return peers
}
