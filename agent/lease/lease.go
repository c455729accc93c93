// Package lease makes one agent at a time the writer of a destination: two
// agents started against the same destination and state topic never both
// write. Group membership alone cannot give that (a paused zombie still
// produces; design review B13), so ownership is a lease with self-fencing:
//
//   - The lease is a sequence of records in the state topic's one partition
//     (keys "lease/..."): claims, renewals and releases, each naming the
//     agent, a random instance id of its process and the lease epoch. Every
//     agent folds them in log order, so all agree on who holds which epoch:
//     the first claim of epoch N+1 after epoch N wins; a renewal or release
//     counts only from the holder of the current epoch.
//   - The holder renews every duration/3 and may write (Term.Check) only
//     while its last renewal that it read back as still its own was sent
//     less than duration − margin ago, measured with the monotonic clock,
//     which keeps running while a process is frozen (SIGSTOP). A frozen
//     holder resumed after a takeover therefore finds its lease expired
//     before its next write, whatever its goroutines do first.
//   - A standby that sees no renewal of the current epoch for the lease
//     duration (on its own monotonic clock; wall clocks are never compared)
//     claims the next epoch, reads the partition back to learn whether its
//     claim was first, and then waits the old lease duration plus the
//     request timeout before it writes: a renewal of the old holder may have
//     landed just before the claim, and a write the old holder issued just
//     before its lease ran out may still be on its way. After a release (a
//     holder that stopped cleanly and whose writes all returned), or when
//     nobody ever held the lease, it writes at once.
//
// What a late write of the old holder can still do is bounded by the data
// path: the new owner fences the agent's transactional ids
// (InitProducerId) before a partition's first write, and plain data carries
// deterministic producer sequences, so a late produce is deduplicated or
// rejected, never appended at another offset.
//
// What the lease cannot stop: a process frozen in the microseconds between
// a Check and its request reaching the network sends that one request when
// it resumes, however late. For data and coordinator fillers the broker
// fences it as above. For the writes no broker fences (a state-topic
// record, an ACL change, a marker written with WriteTxnMarkers) it is the
// residual risk; the state records never decide what data is written (the
// destination log is the resume point), at worst a partition's persisted
// state is stale until its next change.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/statestore"
)

// DefaultDuration is the lease duration unless configured.
const DefaultDuration = 15 * time.Second

// DefaultRequestTimeout bounds how long a write the old holder issued may
// still be on its way to a broker (Kafka's request.timeout.ms default).
const DefaultRequestTimeout = 30 * time.Second

// ErrNotActive is returned by Term.Check once this agent may not write.
var ErrNotActive = errors.New("this agent does not hold the destination's writer lease")

// Config configures a Lease.
type Config struct {
	// Destination connects to the destination cluster.
	Destination []kgo.Opt
	// Topic is the state topic (default statestore.DefaultTopic).
	Topic string
	// AgentID names this agent in the lease records, describe and logs
	// (default HOSTNAME-PID).
	AgentID string
	// Duration is the lease duration (default DefaultDuration).
	Duration time.Duration
	// RequestTimeout is how long a new owner waits, on top of the old
	// lease duration, for writes of the old holder still on their way
	// (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	Logger         hclog.Logger
}

var agentIDRule = regexp.MustCompile(`^[a-zA-Z0-9._:-]{1,200}$`)

// DefaultAgentID returns HOSTNAME-PID.
func DefaultAgentID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "agent"
	}
	h = strings.Map(func(r rune) rune {
		if r < 128 && agentIDRule.MatchString(string(r)) {
			return r
		}
		return '_'
	}, h)
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// CheckAgentID says what is wrong with an agent id.
func CheckAgentID(id string) error {
	if !agentIDRule.MatchString(id) {
		return fmt.Errorf("agent_id %q: use 1 to 200 letters, digits, '.', '_', ':' or '-'", id)
	}
	return nil
}

// Role is what an agent is to the lease.
type Role string

const (
	// RoleStandby: another agent holds the lease, or nobody does and this
	// one has not claimed it yet; the agent does not write.
	RoleStandby Role = "standby"
	// RoleTakingOver: this agent holds the lease and waits out the old
	// holder's lease and request timeout before its first write.
	RoleTakingOver Role = "taking_over"
	// RoleActive: this agent holds the lease and writes.
	RoleActive Role = "active"
)

// Status is the lease as this agent sees it.
type Status struct {
	AgentID string
	Role    Role
	// Holder is the agent holding the current epoch, "" when none does
	// (never claimed, or released).
	Holder string
	Epoch  int64
	// Duration is the holder's lease duration.
	Duration time.Duration
	// SinceRenewal is how long ago this agent saw the holder's last
	// claim or renewal.
	SinceRenewal time.Duration
}

// record is one lease record in the state topic.
type record struct {
	Kind       string `json:"kind"` // claim, renew, release
	Agent      string `json:"agent"`
	Instance   string `json:"instance"`
	Epoch      int64  `json:"epoch"`
	DurationMs int64  `json:"duration_ms"`
}

const keyPrefix = "lease/"

// key: claims keep a key per epoch and claimant, so that compaction never
// removes the first claim of an epoch in favour of a later, losing one;
// renewals share a key (only the latest matters).
func (r record) key() string {
	switch r.Kind {
	case "claim":
		return fmt.Sprintf("%sclaim/%d/%s/%s", keyPrefix, r.Epoch, r.Agent, r.Instance)
	case "release":
		return fmt.Sprintf("%srelease/%d", keyPrefix, r.Epoch)
	}
	return keyPrefix + "renew"
}

// view is the fold of the lease records read so far.
type view struct {
	epoch    int64
	holder   string // agent id, "" when released or never claimed
	instance string
	duration time.Duration
	released bool
	// seen is when this process read the current epoch's last claim,
	// renewal or release (monotonic).
	seen time.Time
	// next is the offset after the last record read.
	next int64
}

func (v *view) apply(r record, now time.Time) {
	d := time.Duration(r.DurationMs) * time.Millisecond
	switch r.Kind {
	case "claim":
		if r.Epoch != v.epoch+1 {
			return // a claim that lost its race, or a stale one
		}
		v.epoch, v.holder, v.instance, v.duration, v.released, v.seen = r.Epoch, r.Agent, r.Instance, d, false, now
	case "renew":
		if r.Epoch == v.epoch && r.Instance == v.instance && !v.released {
			v.seen, v.duration = now, d
		}
	case "release":
		if r.Epoch == v.epoch && r.Instance == v.instance {
			v.holder, v.instance, v.released, v.seen = "", "", true, now
		}
	}
}

// Lease is one agent's side of the lease: it follows the lease records and
// claims, renews and releases the lease for its agent.
type Lease struct {
	cfg      Config
	log      hclog.Logger
	instance string
	cl       *kgo.Client // producer (acks=all) and consumer of the state topic
	base     time.Time   // monotonic origin of the atomic times below

	mu      sync.Mutex
	v       view
	changed chan struct{} // closed and replaced at every record read
	term    *Term         // the current term, nil when not holding

	cancel context.CancelFunc
	done   chan struct{}

	// freeze stops renewals and holds the lease records read until it is
	// cleared: tests imitate a frozen process with it.
	freeze atomic.Bool
}

// Open starts following the lease records of the state topic (creating
// the topic when missing) and returns once it has read them to the end.
func Open(ctx context.Context, cfg Config) (*Lease, error) {
	if cfg.Topic == "" {
		cfg.Topic = statestore.DefaultTopic
	}
	if cfg.AgentID == "" {
		cfg.AgentID = DefaultAgentID()
	}
	if err := CheckAgentID(cfg.AgentID); err != nil {
		return nil, err
	}
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	if err := statestore.EnsureTopic(ctx, cfg.Destination, cfg.Topic); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(cfg.Destination[:len(cfg.Destination):len(cfg.Destination)],
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Not idempotent: an idempotent producer never gives up a
		// record already sent, so a write to a destination that went
		// away would block a release (and the agent's exit) for ever.
		// A duplicated lease record changes nothing: the fold ignores
		// a second claim of an epoch and repeated renewals.
		kgo.DisableIdempotentWrite(),
		kgo.RecordDeliveryTimeout(cfg.Duration),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {0: kgo.NewOffset().AtStart()}}),
		// A short fetch wait keeps a standby's view of the renewals
		// fresh even where a broker does not answer a waiting fetch as
		// soon as a record arrives.
		kgo.FetchMaxWait(min(cfg.Duration/10, 500*time.Millisecond)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination for the writer lease: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	l := &Lease{
		cfg: cfg, log: cfg.Logger, instance: hex.EncodeToString(nonce[:]), cl: cl, base: time.Now(),
		changed: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	end, err := l.end(ctx)
	if err != nil {
		cancel()
		cl.Close()
		return nil, err
	}
	go l.follow(rctx)
	if err := l.waitRead(ctx, end); err != nil {
		l.Close()
		return nil, fmt.Errorf("reading the writer lease from state topic %q: %w", cfg.Topic, err)
	}
	return l, nil
}

// Close stops following the lease; it does not release it (Term.Release
// does).
func (l *Lease) Close() {
	l.cancel()
	<-l.done
	l.mu.Lock()
	if t := l.term; t != nil {
		t.lose("the agent is closing")
	}
	l.mu.Unlock()
	l.cl.Close()
}

// AgentID returns this agent's id.
func (l *Lease) AgentID() string { return l.cfg.AgentID }

// end returns the state topic's end offset.
func (l *Lease) end(ctx context.Context) (int64, error) {
	ends, err := kadm.NewClient(l.cl).ListEndOffsets(ctx, l.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("reading the end of state topic %q: %w", l.cfg.Topic, err)
	}
	o, ok := ends.Lookup(l.cfg.Topic, 0)
	if !ok {
		return 0, fmt.Errorf("reading the end of state topic %q: partition 0 missing", l.cfg.Topic)
	}
	return o.Offset, nil
}

// follow reads the state topic and folds its lease records until ctx ends.
func (l *Lease) follow(ctx context.Context) {
	defer close(l.done)
	for {
		fs := l.cl.PollFetches(ctx)
		for l.freeze.Load() && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(_ string, _ int32, err error) {
			l.log.Warn("reading the writer lease from the state topic", "error", err)
		})
		now := time.Now()
		l.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			l.v.next = r.Offset + 1
			if !strings.HasPrefix(string(r.Key), keyPrefix) || r.Value == nil {
				return
			}
			var rec record
			if err := json.Unmarshal(r.Value, &rec); err != nil {
				l.log.Warn("skipping an unreadable lease record", "key", string(r.Key), "error", err)
				return
			}
			before := l.v
			l.v.apply(rec, now)
			if l.v.epoch != before.epoch || l.v.released != before.released {
				l.log.Info("writer lease", "epoch", l.v.epoch, "holder", l.v.holder, "released", l.v.released)
			}
			if t := l.term; t != nil && (l.v.epoch > t.epoch || (l.v.epoch == t.epoch && l.v.instance != l.instance)) {
				t.lose(fmt.Sprintf("agent %q took the lease over (epoch %d)", l.v.holder, l.v.epoch))
			}
		})
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	}
}

// waitRead waits until every record below offset has been read.
func (l *Lease) waitRead(ctx context.Context, offset int64) error {
	for {
		l.mu.Lock()
		next, ch := l.v.next, l.changed
		l.mu.Unlock()
		if next >= offset {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// ownRecord is this agent's lease record of kind for epoch.
func (l *Lease) ownRecord(kind string, epoch int64) record {
	return record{Kind: kind, Agent: l.cfg.AgentID, Instance: l.instance, Epoch: epoch, DurationMs: l.cfg.Duration.Milliseconds()}
}

// write appends a lease record and waits until it has been read back, so
// that the view includes it in log order.
func (l *Lease) write(ctx context.Context, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	type produced struct {
		rec *kgo.Record
		err error
	}
	done := make(chan produced, 1)
	l.cl.Produce(ctx, &kgo.Record{Topic: l.cfg.Topic, Partition: 0, Key: []byte(r.key()), Value: b}, func(rec *kgo.Record, err error) {
		done <- produced{rec, err}
	})
	var p produced
	select {
	case p = <-done:
	case <-ctx.Done():
		p.err = ctx.Err()
	}
	if p.err != nil {
		return fmt.Errorf("writing the writer lease (%s of epoch %d) to state topic %q: %w", r.Kind, r.Epoch, l.cfg.Topic, p.err)
	}
	rec := p.rec
	if err := l.waitRead(ctx, rec.Offset+1); err != nil {
		return fmt.Errorf("reading back the writer lease (%s of epoch %d): %w", r.Kind, r.Epoch, err)
	}
	return nil
}

// Status returns the lease as this agent sees it now.
func (l *Lease) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Status{AgentID: l.cfg.AgentID, Role: RoleStandby, Holder: l.v.holder, Epoch: l.v.epoch, Duration: l.v.duration}
	if !l.v.seen.IsZero() {
		st.SinceRenewal = time.Since(l.v.seen)
	}
	if t := l.term; t != nil && t.ctx.Err() == nil {
		st.Role = RoleTakingOver
		if t.active.Load() {
			st.Role = RoleActive
		}
	}
	return st
}

// since returns the monotonic time since l.base.
func (l *Lease) since() time.Duration { return time.Since(l.base) }

// Acquire waits until this agent holds the lease and may write: it claims
// the lease once the holder's has run out (or at once when nobody holds it),
// and returns after the takeover wait. The term ends when its context does
// or the lease is lost; Acquire may be called again after that.
func (l *Lease) Acquire(ctx context.Context) (*Term, error) {
	for {
		t, err := l.tryAcquire(ctx)
		if t != nil || err != nil {
			return t, err
		}
	}
}

// tryAcquire claims the lease once; nil, nil means another agent got it
// first, or this term was lost during the wait.
func (l *Lease) tryAcquire(ctx context.Context) (*Term, error) {
	prev, err := l.waitClaimable(ctx)
	if err != nil {
		return nil, err
	}
	sent := l.since()
	claim := l.ownRecord("claim", prev.epoch+1)
	// The term outlives ctx: an agent that stops releases the lease
	// after its last write returned, with the term still live.
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	t := &Term{l: l, epoch: claim.Epoch, ctx: tctx, cancel: cancel, renewing: make(chan struct{})}
	t.validFrom.Store(int64(sent))
	// The term is registered before the claim is written, so that the
	// follower ends it if another claim of this epoch comes first.
	l.mu.Lock()
	l.term = t
	l.mu.Unlock()
	if err := l.write(ctx, claim); err != nil {
		t.lose(err.Error())
		l.clearTerm(t)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l.log.Warn("claiming the writer lease failed; retrying", "epoch", claim.Epoch, "error", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.cfg.Duration / 3):
		}
		return nil, nil
	}
	l.mu.Lock()
	won := l.v.epoch == claim.Epoch && l.v.instance == l.instance
	l.mu.Unlock()
	if !won || t.ctx.Err() != nil {
		t.lose("another agent claimed the epoch first")
		l.clearTerm(t)
		l.log.Info("another agent claimed the writer lease first", "epoch", claim.Epoch)
		return nil, nil
	}
	acked := l.since()
	go func() {
		defer close(t.renewing)
		t.renew()
	}()
	go t.watch()
	// The takeover wait: a renewal of the old holder may have landed just
	// before this claim (its lease then runs until at most its duration
	// after our claim was acknowledged), and its last writes may still be
	// on their way. Nothing to wait for after a release, or when nobody
	// held the lease.
	var wait time.Duration
	if prev.holder != "" {
		wait = max(prev.duration, l.cfg.Duration) + l.cfg.RequestTimeout
	}
	l.log.Info("claimed the writer lease", "epoch", claim.Epoch, "previous_holder", prev.holder, "released", prev.released, "wait", wait)
	if wait > 0 {
		select {
		case <-ctx.Done():
			// Nothing written yet: hand the lease on at once.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Duration)
			if err := t.Release(rctx); err != nil {
				l.log.Warn("releasing the writer lease failed; the next agent waits for it to run out", "error", err)
			}
			cancel()
			return nil, ctx.Err()
		case <-t.ctx.Done():
			l.clearTerm(t)
			return nil, nil
		case <-time.After(wait - (l.since() - acked)):
		}
	}
	if err := t.Check(); err != nil {
		l.clearTerm(t)
		l.log.Warn("lost the writer lease during the takeover wait", "epoch", claim.Epoch, "error", err)
		return nil, nil
	}
	t.active.Store(true)
	l.log.Info("active: this agent writes to the destination", "epoch", claim.Epoch)
	return t, nil
}

func (l *Lease) clearTerm(t *Term) {
	l.mu.Lock()
	if l.term == t {
		l.term = nil
	}
	l.mu.Unlock()
}

// waitClaimable waits until the lease can be claimed: never held, released,
// or not renewed for the holder's duration as seen by this process. It
// returns the view the claim follows.
func (l *Lease) waitClaimable(ctx context.Context) (view, error) {
	for {
		l.mu.Lock()
		v, ch := l.v, l.changed
		l.mu.Unlock()
		var left time.Duration
		if v.holder != "" {
			left = max(v.duration, l.cfg.Duration) - time.Since(v.seen)
		}
		if left <= 0 {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-ch:
		case <-time.After(left):
		}
	}
}

// Term is one epoch of this agent holding the lease.
type Term struct {
	l      *Lease
	epoch  int64
	ctx    context.Context
	cancel context.CancelCauseFunc
	// validFrom is when the last renewal read back as this term's was
	// sent, as Lease.since.
	validFrom atomic.Int64
	active    atomic.Bool
	released  atomic.Bool
	// renewing ends when the renew loop has returned.
	renewing chan struct{}
}

// Epoch returns the term's lease epoch.
func (t *Term) Epoch() int64 { return t.epoch }

// Context returns a context that ends when the term does: the lease was
// lost, released, or its renewals ran out.
func (t *Term) Context() context.Context { return t.ctx }

// Check returns nil while this agent may write: the term is live and its
// last renewal was sent less than the lease duration minus a margin ago. It
// is cheap; call it right before every write to the destination.
func (t *Term) Check() error {
	if err := t.ctx.Err(); err != nil {
		return fmt.Errorf("%w (epoch %d): %v", ErrNotActive, t.epoch, context.Cause(t.ctx))
	}
	age := time.Duration(t.l.since() - time.Duration(t.validFrom.Load()))
	if limit := t.l.cfg.Duration - margin(t.l.cfg.Duration); age >= limit {
		reason := fmt.Sprintf("its last renewal was sent %v ago, and the lease lasts %v (less a margin of %v)", age.Round(time.Millisecond), t.l.cfg.Duration, margin(t.l.cfg.Duration))
		t.lose(reason)
		return fmt.Errorf("%w (epoch %d): %s", ErrNotActive, t.epoch, reason)
	}
	return nil
}

// margin is how long before its lease runs out a holder stops writing: the
// time between a Check and its write reaching the network, and the drift
// between the agents' clocks.
func margin(d time.Duration) time.Duration { return d / 5 }

func (t *Term) lose(reason string) {
	if t.ctx.Err() != nil {
		return
	}
	// Logged before the term's context ends, so that the log says it
	// before anything that follows from the end (the API's standby
	// answers).
	if !t.released.Load() {
		t.l.log.Warn("writer lease lost: this agent stops writing", "epoch", t.epoch, "reason", reason)
	}
	t.cancel(errors.New(reason))
}

// renew renews the lease every duration/3 while the term lives.
func (t *Term) renew() {
	every := t.l.cfg.Duration / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		if t.l.freeze.Load() {
			continue
		}
		sent := t.l.since()
		ctx, cancel := context.WithTimeout(t.ctx, every)
		err := t.l.write(ctx, t.l.ownRecord("renew", t.epoch))
		cancel()
		if err != nil {
			if t.ctx.Err() == nil {
				t.l.log.Warn("renewing the writer lease failed", "epoch", t.epoch, "error", err)
			}
			continue
		}
		t.l.mu.Lock()
		ours := t.l.v.epoch == t.epoch && t.l.v.instance == t.l.instance
		t.l.mu.Unlock()
		if !ours {
			t.lose("another agent holds the lease")
			return
		}
		if int64(sent) > t.validFrom.Load() {
			t.validFrom.Store(int64(sent))
		}
	}
}

// watch ends the term as soon as its renewals run out, so that Context
// ends too without waiting for the next write's Check.
func (t *Term) watch() {
	tick := time.NewTicker(max(t.l.cfg.Duration/20, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
			_ = t.Check()
		}
	}
}

// Release ends the term and tells the other agents that this one stopped
// cleanly: call it only after every write of the term has returned, so
// that the next owner can start writing at once.
func (t *Term) Release(ctx context.Context) error {
	if err := t.Check(); err != nil {
		return nil // nothing to release: the lease ran out or was taken
	}
	t.released.Store(true)
	t.lose("released")
	defer t.l.clearTerm(t)
	// A renewal cancelled by the term's end may still be buffered in the
	// client, and kgo fails the records queued behind a cancelled one in
	// the same partition: wait for the renew loop and for that record to
	// be done before writing the release.
	select {
	case <-t.renewing:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := t.l.cl.Flush(ctx); err != nil {
		return fmt.Errorf("writing the writer lease (release of epoch %d): waiting for the last renewal: %w", t.epoch, err)
	}
	return t.l.write(ctx, t.l.ownRecord("release", t.epoch))
}
