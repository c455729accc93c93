// Package membership divides the work of one destination (its mirror
// partitions, as Items) among the agents writing it, through Kafka's own
// group protocol: the agents are members of one classic group on the
// destination (protocol type "kmirror", the way Kafka Connect's workers
// form theirs), each with its agent id as its static instance id; the
// leader assigns every item to exactly one member, sticky and cooperative
// (assign), and a member that joins or leaves moves only the items that
// must move.
//
// # Why an item never has two writers
//
// A member may write an item (Member.Check) only while all of these hold:
//
//  1. The item is in its current assignment.
//  2. Its session is live as the member itself measures it: the last
//     request the coordinator answered for it as a current member of a
//     stable generation (JoinGroup, SyncGroup, or a Heartbeat answered
//     without error) was sent less than the session timeout minus
//     Config.WriteGrace ago, on the member's monotonic clock, which runs
//     on while the process is frozen. A Heartbeat answered
//     REBALANCE_IN_PROGRESS does not count: the coordinator may remove a
//     member that does not rejoin a rebalance timeout after the
//     rebalance began, which is before that heartbeat.
//  3. The item's wait is over (below).
//
// WriteGrace is how long a write already sent may take to reach the
// broker: a member stops writing that long before its session can run out,
// so every write it sent has landed, or never will, once the coordinator
// may have removed it.
//
// An item moves in one of two ways:
//
//   - Handed on (a join, a rebalance): the leader takes it from its owner
//     and gives it to nobody in that generation. The owner stops writing
//     it, waits until its writes returned, and rejoins saying it released
//     it; only the next generation gives it to another member, which
//     writes at once: every write of the old owner was answered before.
//   - Orphaned (the owner died, was frozen, lost its network, left, or a new
//     process took its instance id): the coordinator removes a member only
//     when the session timeout passed since the last request of it that it
//     received (a request it received was sent before, so by rule 2 the
//     member stopped writing WriteGrace before), when it fails to rejoin
//     within the rebalance timeout (at least the session timeout, counted
//     from before its last answer that counts: the same holds), or when it
//     leaves (Close: after every write of it returned). So the new owner of
//     an orphan whose last owner is gone from the group writes at once.
//     Not so when a static member's new process took the last owner's
//     place: the coordinator removes the old process at once when the new
//     one joins with its id, while the old one may still be inside its
//     session. Then the next owner waits the session timeout (the old
//     process stops writing WriteGrace before its end, and its last writes
//     land by then). The leader knows each item's last owning process from
//     the group's history, which every assignment carries and every member
//     tells back at its next join; where the history is lost (no member of
//     the previous generation is here), every orphan is waited out. An
//     item nobody ever owned (the history is complete, from the group's
//     first generation on, and does not have it: a new mirror) is written
//     at once. And a member waits out its whole assignment when it was not
//     made from this process's own join: the coordinator may answer a
//     static member's new process with its old process's assignment,
//     without a rebalance.
//
// A member that got an item as an orphan and loses or leaves it before that
// wait ended would hand it on as released, or as an orphan of a member that
// is gone, cutting the wait short: it reports the release only once the
// wait is over, names the item as still waiting when it rejoins (its next
// owner then waits as long), and instead of leaving lets its session run
// out.
//
// What the wait cannot stop (nor could the writer lease of earlier
// releases): a process frozen between its Check and its request reaching
// the network sends that request when it resumes. For data the
// broker deduplicates or refuses it (deterministic sequences, see the
// design review's B13); a bumped producer epoch does not fence an
// idempotent producer in time (review §1.4), so the data path does not
// rely on one.
package membership

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ProtocolType is the group protocol type of the agents' group.
const ProtocolType = "kmirror"

const protocolName = "sticky-v1"

// Defaults.
const (
	DefaultGroup          = "kmirror-agents"
	DefaultSessionTimeout = 10 * time.Second
	DefaultBalanceDelay   = 30 * time.Second
)

// ErrNotOwner is returned by Check for an item this member may not write.
var ErrNotOwner = errors.New("this agent may not write the item")

// ErrInstanceFenced: another process joined with this agent id.
var ErrInstanceFenced = errors.New("another agent process joined the group with this agent_id")

// Config configures a Member.
type Config struct {
	// Destination connects to the destination cluster.
	Destination []kgo.Opt
	// Group is the group id (default DefaultGroup).
	Group string
	// AgentID is the member's static instance id: a restarted agent with
	// the same id takes its place without a rebalance. Required.
	AgentID string
	// SessionTimeout (default DefaultSessionTimeout): the coordinator
	// removes a member it heard nothing from for this long, and a member
	// stops writing WriteGrace before.
	SessionTimeout time.Duration
	// RebalanceTimeout (default SessionTimeout): how long the coordinator
	// waits for every member to rejoin. Members rejoin at once, keeping
	// what they own (they stop what they lose between generations), so
	// the session suffices; a longer one lets a member that died while it
	// rejoined hold the whole group up that long.
	RebalanceTimeout time.Duration
	// WriteGrace is how long a write already sent may take to reach the
	// broker; at most half the session (the default), so that a member
	// misses several heartbeats before it stops writing.
	WriteGrace time.Duration
	// BalanceDelay (default DefaultBalanceDelay) is how long the loads this
	// member measures must stay out of balance before it asks the group to
	// rebalance (balance.go); negative: never.
	BalanceDelay time.Duration
	// Items returns the work as this agent sees it; the leader's view is
	// the one assigned. Call Member.Refresh when it changes.
	Items func() []Item
	// API is where this agent's API answers (a URL), told to the other
	// members so that they can forward calls for the items it owns.
	API    string
	Logger hclog.Logger
}

// Grant is one item this member holds.
type Grant struct {
	// Since is when this member got the item.
	Since time.Time
	// WritableAt is when it may write it (Since, or later for an orphan).
	WritableAt time.Time
}

// View is the member's current share.
type View struct {
	Generation int32
	MemberID   string
	Leader     bool
	Items      map[string]Grant
	// Members are the generation's agents and their loads.
	Members []MemberLoad
	// Owners are the agent ids of the owners of the generation's items;
	// an item taken from its owner this generation, to be handed on in
	// the next, has none.
	Owners map[string]string
	// History is the process that last owned each item, in this
	// generation or an earlier one (read only): an item not in it was
	// never given to an agent, as far as the group knows.
	History map[string]Process
}

// Member is one agent's membership of the group.
type Member struct {
	cfg Config
	log hclog.Logger
	cl  *kgo.Client

	// handedOn counts the items Released: lost, and stopped here.
	handedOn atomic.Int64

	mu       sync.Mutex
	memberID string
	gen      int32
	leader   bool
	items    map[string]Grant
	members  []MemberLoad
	owners   map[string]string
	// history and complete are generation membersGen's (assignment).
	history  map[string]Process
	complete bool
	// knownWeights are the weights generation membersGen used.
	knownWeights map[string]int64
	// membersGen is the generation of members.
	membersGen int32
	weights    map[string]int64
	// moving: generation membersGen moves items (assignment.Rejoin), so
	// another rebalance follows anyway.
	moving bool
	// againAsked: this member, leader, rejoined at once for its last
	// assignment's Again (read and set by run's goroutine only).
	againAsked bool
	// unbalancedSince is when the loads this member measures last began
	// to call for a rebalance (balance.go); zero while they do not.
	unbalancedSince time.Time
	// released are items lost and stopped since the last join, to report,
	// each at the time it may be reported: not before the end of its own
	// wait, during which an earlier owner may still write it.
	released map[string]time.Time
	// lostWait is the wait of each item lost, kept until it is released.
	lostWait map[string]time.Time
	// stopping are items lost in a rebalance and not Released yet, each
	// with the time it was lost: this process may still have writes of
	// them in flight, so its joins claim them (memberMeta.Stopping) and
	// the leader gives them to nobody until they are released.
	stopping map[string]time.Time
	// assigned are the keys of the work this member last assigned, as
	// the leader.
	assigned map[string]bool
	process  string        // tells this process from another of its agent id
	alive    time.Time     // send time of the last request answered as a member
	lost     error         // why the member may not write at all, nil while it may
	changed  chan struct{} // closed and replaced when the view changes
	rejoin   chan struct{} // a rejoin was asked (Refresh, Released)

	cancel context.CancelFunc
	done   chan struct{}
	// silent makes the loop stop without leaving the group, as a killed
	// process does; held stops its heartbeats, as a frozen process's
	// (tests).
	silent bool
	held   atomic.Bool
}

// Join starts the membership: it joins the group and keeps the member in
// it until Close. The first view comes through Changed.
func Join(cfg Config) (*Member, error) {
	if cfg.AgentID == "" {
		return nil, errors.New("membership: agent_id is required (the group's static instance id)")
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = cfg.SessionTimeout
	}
	if cfg.WriteGrace <= 0 {
		cfg.WriteGrace = cfg.SessionTimeout / 2
	}
	if cfg.WriteGrace > cfg.SessionTimeout/2 {
		return nil, fmt.Errorf("membership: the write grace (%v) must be at most half the session timeout (%v)", cfg.WriteGrace, cfg.SessionTimeout)
	}
	if cfg.BalanceDelay == 0 {
		cfg.BalanceDelay = DefaultBalanceDelay
	}
	if cfg.Items == nil {
		cfg.Items = func() []Item { return nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RebalanceTimeout < cfg.SessionTimeout {
		// A member that never rejoins is removed after the rebalance
		// timeout; it must have stopped writing by then (package doc).
		return nil, fmt.Errorf("membership: the rebalance timeout (%v) must be at least the session timeout (%v)", cfg.RebalanceTimeout, cfg.SessionTimeout)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	cl, err := kgo.NewClient(cfg.Destination...)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination for group %q: %w", cfg.Group, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := newMember(cfg, hex.EncodeToString(nonce[:]))
	m.cl, m.cancel, m.done = cl, cancel, make(chan struct{})
	m.lost = errors.New("not joined yet")
	go m.run(ctx)
	return m, nil
}

// newMember is a member of process, not joined, with no client yet.
func newMember(cfg Config, process string) *Member {
	return &Member{
		cfg: cfg, log: cfg.Logger, process: process,
		items: map[string]Grant{}, weights: map[string]int64{}, released: map[string]time.Time{}, lostWait: map[string]time.Time{}, stopping: map[string]time.Time{},
		changed: make(chan struct{}), rejoin: make(chan struct{}, 1),
	}
}

// Close leaves the group and stops. Its items go to the other members as
// orphans, which they wait out as for a member that died: hand items on
// without a wait by losing them in a rebalance and calling Released.
func (m *Member) Close() {
	m.cancel()
	<-m.done
	m.cl.Close()
}

// Abandon stops the member without leaving the group, as a crashed process
// would: the coordinator removes it once its session runs out, and its
// items go to the others as orphans of a member that is gone. For a
// process that cannot vouch that its writes returned, and for tests.
func (m *Member) Abandon() {
	m.mu.Lock()
	m.silent = true
	m.mu.Unlock()
	m.Close()
}

// WriteGrace is how long before its session can run out the member stops
// writing (Config.WriteGrace): a write it sent must land within it, or
// never.
func (m *Member) WriteGrace() time.Duration { return m.cfg.WriteGrace }

// View returns the member's current share.
func (m *Member) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return View{Generation: m.gen, MemberID: m.memberID, Leader: m.leader, Items: maps.Clone(m.items), Members: slices.Clone(m.members), Owners: m.owners, History: m.history}
}

// Changed is closed at the next change of View.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Check returns nil while this member may write item: call it right before
// every write.
func (m *Member) Check(item string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.liveLocked(); err != nil {
		return err
	}
	g, ok := m.items[item]
	if !ok {
		return fmt.Errorf("%w %q: it is not in this agent's assignment (generation %d)", ErrNotOwner, item, m.gen)
	}
	if wait := time.Until(g.WritableAt); wait > 0 {
		return fmt.Errorf("%w %q yet: its previous owner did not release it, so this agent waits %v more for its session and last writes to run out", ErrNotOwner, item, wait.Round(time.Millisecond))
	}
	return nil
}

func (m *Member) liveLocked() error {
	if m.lost != nil {
		return fmt.Errorf("%w: %v", ErrNotOwner, m.lost)
	}
	if !time.Now().Before(m.fencedAtLocked()) {
		age := time.Since(m.alive)
		return fmt.Errorf("%w: the group coordinator last answered a request of this agent sent %v ago; it stops writing %v into its %v session, for its last writes to land before the group may give its work to others",
			ErrNotOwner, age.Round(time.Millisecond), m.cfg.SessionTimeout-m.cfg.WriteGrace, m.cfg.SessionTimeout)
	}
	return nil
}

// SetWeight records an owned item's measured weight, reported at the next
// join; when the weights measured make the group's balance out of date, the
// member asks for that join (balance.go).
func (m *Member) SetWeight(item string, w int64) {
	m.mu.Lock()
	m.weights[item] = w
	m.mu.Unlock()
}

// Released tells the member that it stopped writing items it lost and
// that every write of them returned; it rejoins so that they are handed on.
//
// An item lost before its own wait was over (this process got it as an
// orphan, whose earlier owner may still write it) is reported only once
// that wait is over: the next owner writes a released item at once.
func (m *Member) Released(items ...string) {
	m.mu.Lock()
	var due time.Time
	for _, k := range items {
		if _, own := m.items[k]; own {
			continue
		}
		m.handedOn.Add(1)
		at := m.lostWait[k]
		delete(m.lostWait, k)
		delete(m.stopping, k)
		m.released[k] = at
		due = later(due, at)
	}
	m.mu.Unlock()
	if wait := time.Until(due); wait > 0 {
		time.AfterFunc(wait, m.askRejoin)
	}
	m.askRejoin()
}

// HandedOn is how many items this member stopped and handed on (Released)
// since it joined: each one a handoff, during which the item did not run.
func (m *Member) HandedOn() int64 { return m.handedOn.Load() }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Refresh asks for a new assignment: the work (Config.Items) changed. Only
// the leader's view of the work is assigned, and only its rejoin
// rebalances the group (a follower's, with unchanged metadata, gets the
// current assignment back, or starts a rebalance for nothing), so a
// follower does nothing: the leader notices the change at its next
// heartbeat.
func (m *Member) Refresh() {
	m.mu.Lock()
	leader := m.leader
	m.mu.Unlock()
	if leader {
		m.askRejoin()
	}
}

func itemKeys(items []Item) map[string]bool {
	out := make(map[string]bool, len(items))
	for _, it := range items {
		out[it.Key] = true
	}
	return out
}

// rejoinIfStuck asks for a join when an item lost has not been released
// within a session: the join hands it on (joinAndSync).
func (m *Member) rejoinIfStuck() {
	m.mu.Lock()
	stuck := false
	for _, at := range m.stopping {
		stuck = stuck || time.Since(at) > m.cfg.SessionTimeout
	}
	m.mu.Unlock()
	if stuck {
		m.askRejoin()
	}
}

func (m *Member) askRejoin() {
	select {
	case m.rejoin <- struct{}{}:
	default:
	}
}

func (m *Member) run(ctx context.Context) {
	defer close(m.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := m.joinAndSync(ctx)
		if err == nil {
			backoff = 100 * time.Millisecond
			err = m.heartbeat(ctx)
		}
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errRejoin) {
			continue
		}
		if errors.Is(err, ErrInstanceFenced) {
			m.loseAll(err)
		}
		m.log.Warn("group membership", "group", m.cfg.Group, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	m.mu.Lock()
	silent := m.silent
	m.mu.Unlock()
	if !silent {
		m.leave()
	}
}

// fencedAt is when this member stops writing unless the coordinator
// answers it again: WriteGrace before its session runs out.
func (m *Member) fencedAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fencedAtLocked()
}

func (m *Member) fencedAtLocked() time.Time {
	return m.alive.Add(m.cfg.SessionTimeout - m.cfg.WriteGrace)
}

var errRejoin = errors.New("rejoin")

// joinMetaLocked is what the member says of itself in a join at now; it
// forgets the lost items whose reports are over.
func (m *Member) joinMetaLocked(now time.Time) memberMeta {
	meta := memberMeta{Version: metaVersion, Agent: m.cfg.AgentID, Process: m.process, API: m.cfg.API, Previous: m.members, PreviousGen: m.membersGen, PreviousHistory: m.history, PreviousComplete: m.complete, PreviousWeights: m.knownWeights}
	for k, at := range m.released {
		if at.After(now) {
			meta.Waiting = append(meta.Waiting, k)
		} else {
			meta.Released = append(meta.Released, k)
		}
	}
	for k, at := range m.lostWait {
		if at.After(now) {
			meta.Waiting = append(meta.Waiting, k)
		} else {
			delete(m.lostWait, k)
		}
	}
	for k, at := range m.stopping {
		// Check refuses every write of a lost item, so only writes
		// sent before it was lost can still land; a stop that has not
		// returned within a session (a promote can hold one for
		// minutes) no longer holds the item back.
		if since := now.Sub(at); since > m.cfg.SessionTimeout {
			m.log.Warn("a lost item is still not stopped: handing it on", "group", m.cfg.Group, "item", k, "lost", since.Round(time.Millisecond))
			delete(m.stopping, k)
			continue
		}
		meta.Stopping = append(meta.Stopping, k)
	}
	slices.Sort(meta.Released)
	slices.Sort(meta.Waiting)
	slices.Sort(meta.Stopping)
	for k := range m.items {
		meta.Owned = append(meta.Owned, Item{Key: k, Weight: m.weights[k]})
	}
	slices.SortFunc(meta.Owned, func(a, b Item) int { return cmp.Compare(a.Key, b.Key) })
	return meta
}

// joinAndSync runs one JoinGroup and SyncGroup.
func (m *Member) joinAndSync(ctx context.Context) error {
	m.mu.Lock()
	meta := m.joinMetaLocked(time.Now())
	reported := meta.Released
	memberID := m.memberID
	m.mu.Unlock()
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.InstanceID = m.cfg.Group, memberID, &m.cfg.AgentID
		req.SessionTimeoutMillis = int32(m.cfg.SessionTimeout / time.Millisecond)
		req.RebalanceTimeoutMillis = int32(m.cfg.RebalanceTimeout / time.Millisecond)
		req.ProtocolType = ProtocolType
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = protocolName, b
		req.Protocols = append(req.Protocols, p)
		sent := time.Now()
		resp, err := req.RequestWith(ctx, m.cl)
		if err != nil {
			return fmt.Errorf("joining group %q: %w", m.cfg.Group, err)
		}
		switch err := kerr.ErrorForCode(resp.ErrorCode); {
		case err == nil:
		case errors.Is(err, kerr.MemberIDRequired):
			memberID = resp.MemberID
			continue
		case errors.Is(err, kerr.FencedInstanceID):
			return fmt.Errorf("%w (agent_id %q): %v", ErrInstanceFenced, m.cfg.AgentID, err)
		case errors.Is(err, kerr.UnknownMemberID):
			m.loseAll(fmt.Errorf("the group coordinator no longer knows this member: %v", err))
			m.mu.Lock()
			m.memberID = ""
			m.mu.Unlock()
			return errRejoin
		default:
			return fmt.Errorf("joining group %q: %w", m.cfg.Group, err)
		}
		m.mu.Lock()
		m.memberID, m.gen = resp.MemberID, resp.Generation
		m.leader = resp.LeaderID == resp.MemberID
		m.aliveLocked(sent)
		for _, k := range reported {
			delete(m.released, k)
		}
		m.mu.Unlock()

		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Group, sync.Generation, sync.MemberID, sync.InstanceID = m.cfg.Group, resp.Generation, resp.MemberID, &m.cfg.AgentID
		sync.ProtocolType, sync.Protocol = kmsg.StringPtr(ProtocolType), kmsg.StringPtr(protocolName)
		again := false // the leader's assignment asks for another round
		if resp.LeaderID == resp.MemberID {
			var members []joined
			for _, jm := range resp.Members {
				var mm memberMeta
				if err := json.Unmarshal(jm.ProtocolMetadata, &mm); err != nil {
					m.log.Warn("a member's join metadata is unreadable; it gets nothing this round", "member", jm.MemberID, "error", err)
				}
				members = append(members, joined{id: jm.MemberID, meta: mm})
			}
			work := m.cfg.Items()
			m.mu.Lock()
			m.assigned = itemKeys(work)
			m.mu.Unlock()
			for id, a := range assign(work, members, resp.Generation) {
				again = again || a.Again
				ab, err := json.Marshal(a)
				if err != nil {
					return err
				}
				ga := kmsg.NewSyncGroupRequestGroupAssignment()
				ga.MemberID, ga.MemberAssignment = id, ab
				sync.GroupAssignment = append(sync.GroupAssignment, ga)
			}
		}
		sent = time.Now()
		sresp, err := sync.RequestWith(ctx, m.cl)
		if err != nil {
			return fmt.Errorf("syncing group %q: %w", m.cfg.Group, err)
		}
		switch err := kerr.ErrorForCode(sresp.ErrorCode); {
		case err == nil:
		case errors.Is(err, kerr.RebalanceInProgress):
			return errRejoin
		case errors.Is(err, kerr.FencedInstanceID):
			return fmt.Errorf("%w (agent_id %q): %v", ErrInstanceFenced, m.cfg.AgentID, err)
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration):
			m.loseAll(fmt.Errorf("the group moved on without this member: %v", err))
			return errRejoin
		default:
			return fmt.Errorf("syncing group %q: %w", m.cfg.Group, err)
		}
		var a assignment
		if len(sresp.MemberAssignment) > 0 {
			if err := json.Unmarshal(sresp.MemberAssignment, &a); err != nil {
				return fmt.Errorf("reading this agent's assignment in group %q: %w", m.cfg.Group, err)
			}
		}
		m.apply(a, sent, resp.Generation)
		// Once: if the round it asks for is out of balance again, the
		// next change of the work or of the members (or a member's
		// measurements) rebalances, not a loop of rounds.
		if again && !m.againAsked {
			m.askRejoin()
		}
		m.againAsked = again
		return nil
	}
}

// apply makes a the member's share.
func (m *Member) apply(a assignment, sent time.Time, gen int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.aliveLocked(sent)
	m.lost = nil
	now := time.Now()
	orphan := map[string]bool{}
	for _, k := range a.Orphans {
		orphan[k] = true
	}
	// An assignment the leader made from this process's own join. A
	// static member's new process may instead be handed its previous
	// process's (the coordinator answers its join without a rebalance),
	// whose items that process, maybe still inside its session, never
	// released.
	forMe := slices.ContainsFunc(a.Members, func(l MemberLoad) bool { return l.Agent == m.cfg.AgentID && l.Process == m.process })
	next := make(map[string]Grant, len(a.Items))
	for _, k := range a.Items {
		if g, ok := m.items[k]; ok {
			next[k] = g
			continue
		}
		g := Grant{Since: now, WritableAt: now}
		if !forMe || orphan[k] {
			// Its last owner may still be inside its session (a
			// process replaced by a new one of its agent id, or not
			// known): it stops writing WriteGrace before its end, and
			// its writes land by then.
			g.WritableAt = now.Add(m.cfg.SessionTimeout)
		}
		next[k] = g
	}
	lostAny := false
	for k, g := range m.items {
		if _, kept := next[k]; kept {
			continue
		}
		m.stopping[k], lostAny = now, true
		if g.WritableAt.After(now) {
			m.lostWait[k] = g.WritableAt
		}
	}
	for k := range next {
		delete(m.stopping, k)
	}
	if lostAny {
		// An item never released is handed on by the first join after
		// its session: that join is asked for here.
		time.AfterFunc(m.cfg.SessionTimeout+10*time.Millisecond, m.rejoinIfStuck)
	}
	for k := range m.weights {
		if _, ok := next[k]; !ok {
			delete(m.weights, k)
		}
	}
	m.items, m.members, m.membersGen, m.owners = next, a.Members, gen, a.Owners
	m.history, m.complete, m.knownWeights = a.History, a.Complete, a.Weights
	m.moving, m.unbalancedSince = a.Rejoin, time.Time{}
	m.log.Info("group assignment", "group", m.cfg.Group, "generation", gen, "items", len(next), "orphans", len(a.Orphans), "members", len(a.Members), "rejoin", a.Rejoin)
	m.log.Debug("group assignment items", "generation", gen, "items", a.Items, "orphans", a.Orphans, "history_complete", a.Complete, "for_me", forMe)
	// With a.Rejoin, the member that lost items rejoins once its caller
	// says they are Released; the others rejoin when the coordinator
	// asks (REBALANCE_IN_PROGRESS).
	m.notifyLocked()
}

func (m *Member) aliveLocked(sent time.Time) {
	if sent.After(m.alive) {
		m.alive = sent
	}
}

func (m *Member) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// loseAll ends the member's right to write anything until its next
// assignment.
func (m *Member) loseAll(why error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lost = why
	now := time.Now()
	for k, g := range m.items {
		if g.WritableAt.After(now) {
			m.lostWait[k] = g.WritableAt
		}
	}
	if len(m.items) > 0 {
		m.log.Warn("group membership lost: this agent stops writing", "group", m.cfg.Group, "items", len(m.items), "reason", why)
	}
	m.items = map[string]Grant{}
	m.notifyLocked()
}

// heartbeat keeps the member in the group until it must rejoin.
func (m *Member) heartbeat(ctx context.Context) error {
	every := m.cfg.SessionTimeout / 10
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.rejoin:
			return errRejoin
		case <-tick.C:
		}
		if m.held.Load() {
			continue
		}
		// The leader assigns the work as it sees it: when that changes,
		// it rejoins, which rebalances the group (Kafka rebalances on a
		// rejoin of the leader; a follower that rejoins with unchanged
		// metadata gets the current generation back).
		m.mu.Lock()
		leader, assigned := m.leader, m.assigned
		m.mu.Unlock()
		if leader && !maps.Equal(itemKeys(m.cfg.Items()), assigned) {
			return errRejoin
		}
		if m.balanceDue(time.Now()) {
			return errRejoin
		}
		m.mu.Lock()
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.Generation, req.MemberID, req.InstanceID = m.cfg.Group, m.gen, m.memberID, &m.cfg.AgentID
		m.mu.Unlock()
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
		resp, err := req.RequestWith(rctx, m.cl)
		cancel()
		if err != nil {
			m.log.Debug("heartbeat failed", "group", m.cfg.Group, "error", err)
			continue // the session clock runs; Check stops writes in time
		}
		switch err := kerr.ErrorForCode(resp.ErrorCode); {
		case errors.Is(err, kerr.RebalanceInProgress):
			// Not an answer that keeps it writing (package doc, rule 2):
			// its JoinGroup's answer will.
			return errRejoin // keeping what it owns (cooperative)
		case err == nil:
			m.mu.Lock()
			m.aliveLocked(sent)
			m.mu.Unlock()
		case errors.Is(err, kerr.FencedInstanceID):
			return fmt.Errorf("%w (agent_id %q): %v", ErrInstanceFenced, m.cfg.AgentID, err)
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration):
			m.loseAll(fmt.Errorf("the group moved on without this member: %v", err))
			if errors.Is(err, kerr.UnknownMemberID) {
				m.mu.Lock()
				m.memberID = ""
				m.mu.Unlock()
			}
			return errRejoin
		default:
			m.log.Debug("heartbeat refused", "group", m.cfg.Group, "error", err)
		}
	}
}

// leave leaves the group; the member's items become orphans. A member
// holding an item still in its wait does not leave but lets its session
// run out: the next owner, told its last owner left, would not wait for
// the earlier owner this member was waiting for, while the coordinator
// removes a silent member only a session after its last heartbeat, past
// that wait's start plus the session.
func (m *Member) leave() {
	m.mu.Lock()
	memberID := m.memberID
	now := time.Now()
	waiting := len(m.lostWait) > 0
	for _, g := range m.items {
		waiting = waiting || g.WritableAt.After(now)
	}
	for _, at := range m.released {
		waiting = waiting || at.After(now)
	}
	m.mu.Unlock()
	m.loseAll(errors.New("left the group"))
	if memberID == "" || waiting {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = m.cfg.Group
	mem := kmsg.NewLeaveGroupRequestMember()
	mem.MemberID, mem.InstanceID = memberID, &m.cfg.AgentID
	req.Members = append(req.Members, mem)
	if _, err := req.RequestWith(ctx, m.cl); err != nil {
		m.log.Warn("leaving the group", "group", m.cfg.Group, "error", err)
	}
}
