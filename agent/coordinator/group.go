package coordinator

// Group mode: the agents of one destination divide its mirrors' partitions
// among themselves (agent/membership). Each coordinator follows the state
// topic and offers the group two kinds of item:
//
//   - a mirror's home ("mirror/NAME"): the mirror's own work (its topics,
//     metadata sync, read-only ACLs, lifecycle operations) and its
//     partitions not yet items of their own;
//   - each partition with a record ("partition/NAME/TOPIC/P", the record's
//     key), whose home is its mirror's. In a group of several agents, the
//     home's agent holds a new partition back and writes its record,
//     marked unplaced; the group places the item on the least loaded
//     agent, which runs it from its first write, so that a new mirror's
//     first copy is not interrupted by handoffs. In a group of one, or if
//     an agent of an older version is a member, a new partition runs with
//     its home until its record exists; then the group gives its item to
//     the home's agent, and spreads it from there like any other.
//
// A mirror is pinned (every partition of it with its home) while one of its
// partitions is in a state only lifecycle operations change (paused,
// stopping, stopped, failed), while it is throttled, and while a lifecycle
// operation gathers it (pin/NAME): those run on the home's runner as they
// do on a lone agent.
//
// Each agent runs one runner per mirror it has any item of (mirror.Share),
// from the moment the item is writable; every write made for an item
// carries the membership's check in its context (agent/writegate), down to
// the request that leaves the writer. A partition taken from this agent is
// stopped, and reported released once every write of it returned, so that
// its next owner may write at once; so is a home, with its runner.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/agent/mirror"
	"github.com/kmirror/kmirror/agent/writegate"
	"github.com/kmirror/kmirror/internal/mirrorapi"
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

// Items are the homes of the mirrors of the state topic and their
// partitions with a record, as items of the agents' group (see above). The
// group's leader asks at every heartbeat.
func (c *Coordinator) Items() []membership.Item {
	names := map[string]bool{}
	for _, k := range c.store.Keys("mirror/") {
		names[strings.TrimPrefix(k, "mirror/")] = true
	}
	pinned := map[string]bool{}
	for _, prefix := range []string{pinPrefix, "throttle/"} {
		for _, k := range c.store.Keys(prefix) {
			pinned[strings.TrimPrefix(k, prefix)] = true
		}
	}
	var parts []membership.Item
	c.placedMu.Lock()
	prev := c.placed
	c.placed = make(map[string]placement, len(prev))
	for _, k := range c.store.Keys("partition/") {
		name, _, ok := mirror.ParsePartitionKey(k)
		if !ok || !names[name] {
			continue
		}
		v, _ := c.store.Get(k)
		p, ok := prev[k]
		if !ok || p.raw != string(v) {
			p = placement{raw: string(v)}
			p.spreads, p.unplaced = mirror.Placement(v)
		}
		c.placed[k] = p
		if !p.spreads {
			pinned[name] = true
		}
		parts = append(parts, membership.Item{Key: k, Home: mirrorKey(name), Unplaced: p.unplaced})
	}
	c.placedMu.Unlock()
	out := make([]membership.Item, 0, len(names)+len(parts))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		out = append(out, membership.Item{Key: mirrorKey(name), Pinned: pinned[name]})
	}
	return append(out, parts...)
}

// placement is what a partition record says of where its partition may
// run (mirror.Placement), kept with the record it was decoded from: the
// group's leader reads every record at every heartbeat, and they seldom
// change.
type placement struct {
	raw               string
	spreads, unplaced bool
}

// pinPrefix keys the records of mirrors a lifecycle operation gathers on
// their home's agent (gather).
const pinPrefix = "pin/"

// itemsSignature is what of the items the group's leader assigns by: it
// changes when a mirror or a partition record comes or goes, or a mirror
// is pinned or unpinned.
func itemsSignature(items []membership.Item) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString(it.Key)
		if it.Pinned {
			b.WriteString("!")
		}
		b.WriteByte(0)
	}
	return b.String()
}

// ownerCtx is ctx with the check of mirror name's home's ownership (group
// mode).
func (c *Coordinator) ownerCtx(ctx context.Context, name string) context.Context {
	if c.cfg.Owner == nil {
		return ctx
	}
	item := mirrorKey(name)
	return writegate.With(ctx, func() error { return c.cfg.Owner.Check(item) })
}

// writable says whether this agent may run mirror name's home now: always
// without a group; in one, while the group gives it to this agent and its
// wait is over.
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
	var known string // the items offered to the group
	weigh := time.NewTicker(weighEvery)
	defer weigh.Stop()
	var weighed map[string]int64 // bytes mirrored, by item, at the last tick
	for {
		ownerChanged, storeChanged := c.cfg.Owner.Changed(), c.store.Changed()
		recs, _ := c.records()
		if sig := itemsSignature(c.Items()); sig != known {
			known = sig
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

// weigh tells the group the byte rate of each item run here since the last
// tick (last: the bytes mirrored then), and returns the bytes now: a
// partition given as an item weighs its own, a home those of the
// partitions it runs that are no items yet.
func (c *Coordinator) weigh(last map[string]int64) map[string]int64 {
	view := c.cfg.Owner.View()
	now := map[string]int64{}
	for _, m := range c.Describe() {
		home := mirrorKey(m.Name)
		if m.Share == "" {
			now[home] = 0
		}
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				item := mirror.PartitionKey(m.Name, fetcher.TP{Topic: t.Name, Partition: p.Partition})
				if _, given := view.Items[item]; !given {
					if m.Share != "" {
						continue // not this agent's to weigh
					}
					item = home
				}
				now[item] += p.Bytes
			}
		}
	}
	for item, b := range now {
		if prev, ok := last[item]; ok && b >= prev {
			// At least 1: an item that idles still counts.
			c.cfg.Owner.SetWeight(item, max(1, (b-prev)*int64(time.Second)/int64(weighEvery)))
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

// share is what of one mirror the group gives this agent, writable now.
type share struct {
	home  bool
	parts map[fetcher.TP]string // partition: its item
}

// shares are the items of view writable at now, by mirror, and when the
// first item not writable yet will be (zero: none waits).
func shares(view membership.View, now time.Time) (map[string]*share, time.Time) {
	out := map[string]*share{}
	var wake time.Time
	of := func(name string) *share {
		if out[name] == nil {
			out[name] = &share{parts: map[fetcher.TP]string{}}
		}
		return out[name]
	}
	for item, g := range view.Items {
		if now.Before(g.WritableAt) {
			if wake.IsZero() || g.WritableAt.Before(wake) {
				wake = g.WritableAt
			}
			continue
		}
		if name, ok := strings.CutPrefix(item, "mirror/"); ok {
			of(name).home = true
		} else if name, tp, ok := mirror.ParsePartitionKey(item); ok {
			of(name).parts[tp] = item
		}
	}
	return out, wake
}

// itemMirror is the mirror an item is of.
func itemMirror(item string) string {
	if name, ok := strings.CutPrefix(item, "mirror/"); ok {
		return name
	}
	name, _, _ := mirror.ParsePartitionKey(item)
	return name
}

// reconcile stops the runners this agent may no longer run, starts those
// it now may, gives each its partitions, and passes spec changes another
// agent wrote on to the runners. It returns when it should look again for
// an item whose wait is not over (zero: nothing to wait for).
func (c *Coordinator) reconcile(ctx context.Context, recs map[string]mirror.Record) (wake time.Time) {
	view := c.cfg.Owner.View()
	want, wake := shares(view, time.Now())

	c.mu.Lock()
	held := map[string]membership.Grant{} // what this agent was given before, and is given now
	maps.Copy(held, c.granted)
	maps.Copy(held, view.Items)
	for name, m := range c.mirrors {
		sh := want[name]
		rec, ok := recs[name]
		restart := false
		if ok && sh != nil && sh.home == m.Home() {
			id, epoch := m.Producer()
			if id == rec.ProducerID && epoch == rec.Epoch {
				if !reflect.DeepEqual(m.Spec(), rec.Spec) {
					m.SetSpec(rec.Spec)
				}
				m.SetParts(c.partGates(sh), c.listed(view, name), len(view.Members) > 1)
				continue
			}
			// Agents that started together each created the mirror
			// with a producer of their own; the state topic keeps the
			// last record, which every agent runs from now on, this
			// one too.
			c.log.Warn("the mirror's record names another producer (another agent created it at the same time): restarting it with that one",
				"mirror", name, "producer_id", id, "record_producer_id", rec.ProducerID)
			restart = true
		}
		// Taken from this agent, deleted by another, restarted, or its
		// home moved to or from this agent: stop it, and hand on what
		// it had once every write of it returned.
		var items []string
		for item := range held {
			if itemMirror(item) == name {
				items = append(items, item)
			}
		}
		delete(c.mirrors, name)
		done := make(chan struct{})
		c.stopping[name] = done
		go func() {
			m.Stop()
			c.mu.Lock()
			delete(c.stopping, name)
			now := c.cfg.Owner.View().Items
			var lost []string
			for _, item := range items {
				// A mirror restarted here is handed on only where the
				// group took it meanwhile (else the next pass does).
				if _, owned := now[item]; !owned {
					lost = append(lost, item)
				}
			}
			c.mu.Unlock()
			close(done)
			select {
			case c.stopped <- struct{}{}: // reconcile again: it may be ours again
			default:
			}
			if len(lost) > 0 {
				c.cfg.Owner.Released(lost...)
				c.log.Info("mirror handed on", "mirror", name, "items", len(lost), "restart", restart)
			}
		}()
	}
	// Items lost whose mirror does not run here (still waiting, or never
	// in the state topic here) have nothing to stop: released now. Those
	// of a runner that goes on are its to release (Runner.SetParts).
	// Those lost while their mirror stops stay granted until it stopped:
	// the pass after it releases them (its stop releases only what it
	// held when it began).
	var idle []string
	granted := maps.Clone(view.Items)
	for item, g := range c.granted {
		name := itemMirror(item)
		_, running := c.mirrors[name]
		_, stopping := c.stopping[name]
		_, owned := view.Items[item]
		switch {
		case owned || running: // still ours, or its runner releases it
		case stopping:
			granted[item] = g
		default:
			idle = append(idle, item)
		}
	}
	c.granted = granted
	if len(idle) > 0 {
		c.cfg.Owner.Released(idle...)
	}
	var start []mirror.Record
	for name := range want {
		rec, ok := recs[name]
		if _, running := c.mirrors[name]; !ok || running {
			continue
		}
		if _, stopping := c.stopping[name]; stopping {
			continue // its stop wakes follow, which reconciles again
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
	view = c.cfg.Owner.View()
	want, _ = shares(view, time.Now())
	for _, rec := range start {
		name := rec.Spec.Name
		rec, ok := fresh[name]
		sh := want[name]
		if !ok || sh == nil || c.runCtx.Err() != nil {
			continue
		}
		if _, running := c.mirrors[name]; running {
			continue
		}
		c.startShareLocked(rec, sh, view)
		c.log.Info("mirror taken on", "mirror", name, "home", sh.home, "partitions", len(sh.parts), "generation", view.Generation)
	}
	return wake
}

// startShareLocked starts a runner of rec for the share sh of it given to
// this agent (group mode).
func (c *Coordinator) startShareLocked(rec mirror.Record, sh *share, view membership.View) {
	name := rec.Spec.Name
	m := mirror.New(c.runners, rec)
	m.Share(sh.home, func(tp fetcher.TP) {
		c.cfg.Owner.Released(mirror.PartitionKey(name, tp))
		c.log.Info("partition handed on", "mirror", name, "partition", tp.String())
	})
	m.SetParts(c.partGates(sh), c.listed(view, name), len(view.Members) > 1)
	var t mirrorapi.Throttle
	if mirror.ReadRecord(c.store, throttleKey(name), &t) {
		m.SetThrottle(&t) // before its first fetch
	}
	c.mirrors[name] = m
	ctx := c.runCtx
	if sh.home {
		ctx = c.ownerCtx(ctx, name)
	}
	m.Start(ctx)
}

// partGates are the partitions of sh, each with the check of its item.
func (c *Coordinator) partGates(sh *share) map[fetcher.TP]func() error {
	out := make(map[fetcher.TP]func() error, len(sh.parts))
	for tp, item := range sh.parts {
		out[tp] = func() error { return c.cfg.Owner.Check(item) }
	}
	return out
}

// listed says, of mirror name's partitions, which the group has given to
// an agent, now or before (view's generation and its history): its home
// runs the others.
func (c *Coordinator) listed(view membership.View, name string) func(fetcher.TP) bool {
	return func(tp fetcher.TP) bool {
		item := mirror.PartitionKey(name, tp)
		_, owned := view.Owners[item]
		_, known := view.History[item]
		return owned || known
	}
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
	// Shared: partitions of it run, or move, on other agents than this
	// one (its home's); describe gathers them from those agents.
	Shared bool
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
		for _, k := range c.store.Keys("partition/" + name + "/") {
			if view.Owners[k] != c.cfg.AgentID {
				loc.Shared = true
				break
			}
		}
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
