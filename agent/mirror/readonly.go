package mirror

// Read-only mirror topics (DESIGN §4): the agent checks once at start
// whether the destination has an authorizer and the agent is a super user
// there (ReadOnly.Check); every mirror topic then gets a DENY WRITE
// ACL for User:* at its first sync, kept while it mirrors or is paused, and
// released when every partition of the topic is STOPPED. Where that cannot
// be done, describe says read_only_enforced=false with the reason; foreign
// writes are detected either way (the partition fails).
//
// ACLSourceFence applies the same ACL to the source topics of a promote.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/readonly"
)

// recheckReadOnlyEvery is how often a Check that could not conclude is
// tried again (at the mirrors' topic syncs).
const recheckReadOnlyEvery = 30 * time.Second

// roState is one mirror topic's read-only enforcement as describe shows it.
type roState struct {
	enforced bool
	reason   string
}

// ReadOnly makes mirror topics read-only on the destination: it holds the
// destination's readonly.Enforcer and the result of its Check, which every
// runner of the agent consults.
type ReadOnly struct {
	enf *readonly.Enforcer
	log hclog.Logger

	mu        sync.Mutex
	status    *readonly.Status // nil until a check concluded
	err       string           // why the last check did not conclude
	checkedAt time.Time
}

// NewReadOnly returns the read-only enforcement of the destination enf
// works on; nothing is checked until Check.
func NewReadOnly(enf *readonly.Enforcer, log hclog.Logger) *ReadOnly {
	return &ReadOnly{enf: enf, log: log}
}

// Check runs readonly.Check against the destination and remembers its
// result; an inconclusive check is remembered as an error and retried later
// by Status.
func (ro *ReadOnly) Check(ctx context.Context) {
	st, err := ro.enf.Check(ctx)
	ro.mu.Lock()
	defer ro.mu.Unlock()
	ro.checkedAt = time.Now()
	if err != nil {
		ro.err = err.Error()
		ro.log.Warn("read-only mirror topics: the check of the destination did not conclude; retrying later", "error", err)
		return
	}
	ro.status, ro.err = &st, ""
	switch {
	case st.Leftover != "":
		ro.log.Warn("read-only mirror topics: the check left something behind on the destination; delete it by hand", "leftover", st.Leftover)
	}
	switch {
	case st.Enforceable():
		ro.log.Info("read-only mirror topics: enforced (the destination has an authorizer and the agent is a super user)")
	case st.Authorizer:
		ro.log.Warn("read-only mirror topics: NOT enforced", "reason", st.Reason)
	default:
		ro.log.Info("read-only mirror topics: not enforced", "reason", st.Reason)
	}
}

// Last is the last concluded Check, nil before one.
func (ro *ReadOnly) Last() *readonly.Status {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return ro.status
}

// Status returns the destination's Check result, checking again when the
// last check did not conclude and recheckReadOnlyEvery has passed; ok is
// false when no check has concluded yet, and reason then says why.
func (ro *ReadOnly) Status(ctx context.Context) (st readonly.Status, ok bool, reason string) {
	ro.mu.Lock()
	s, at := ro.status, ro.checkedAt
	ro.mu.Unlock()
	if s == nil && time.Since(at) >= recheckReadOnlyEvery {
		ro.Check(ctx)
	}
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if ro.status == nil {
		return readonly.Status{}, false, "the check whether the agent can make mirror topics read-only did not conclude (" + ro.err + "); retrying"
	}
	return *ro.status, true, ""
}

// Enforce makes topic read-only (readonly.Enforcer.Enforce).
func (ro *ReadOnly) Enforce(ctx context.Context, topic string) (bool, error) {
	return ro.enf.Enforce(ctx, topic)
}

// Release makes topic writable again (readonly.Enforcer.Release).
func (ro *ReadOnly) Release(ctx context.Context, topic string) error {
	return ro.enf.Release(ctx, topic)
}

// enforceReadOnly makes topic read-only unless it already is, and records
// the outcome for describe. It is called at each topic sync of a topic that
// is not STOPPED, and does nothing once the ACL was created.
func (m *Runner) enforceReadOnly(ctx context.Context, topic string) {
	m.mu.Lock()
	cur := m.ro[topic]
	m.mu.Unlock()
	if cur.enforced {
		return
	}
	st, ok, reason := m.cfg.ReadOnly.Status(ctx)
	next := roState{reason: reason}
	switch {
	case !ok:
	case !st.Enforceable():
		// No authorizer, or the agent is not a super user: a DENY
		// would lock the agent out of its own topic.
		next.reason = st.Reason
	default:
		enforced, err := m.cfg.ReadOnly.Enforce(ctx, topic)
		switch {
		case err != nil:
			next.reason = fmt.Sprintf("creating the DENY WRITE ACL failed (retrying): %v", err)
		case !enforced:
			next.reason = "the destination answered SECURITY_DISABLED (no authorizer): the topic stays writable"
		default:
			next.enforced = true
		}
	}
	m.mu.Lock()
	switch {
	case next == cur:
	case next.enforced:
		m.log.Info("mirror topic is read-only", "topic", topic)
	case ok && !st.Authorizer:
		m.log.Info("mirror topic is not read-only", "topic", topic, "reason", next.reason)
	default:
		m.log.Warn("mirror topic is not read-only", "topic", topic, "reason", next.reason)
	}
	m.ro[topic] = next
	delete(m.roReleased, topic)
	m.mu.Unlock()
}

// releaseReadOnly removes topic's DENY WRITE ACL, once per run of the
// mirror unless it fails; it is called when every partition of the topic
// is STOPPED.
func (m *Runner) releaseReadOnly(ctx context.Context, topic string) {
	m.mu.Lock()
	done := m.roReleased[topic]
	m.mu.Unlock()
	if done {
		return
	}
	st := m.cfg.ReadOnly.Last()
	if st == nil || st.Authorizer {
		// (With no authorizer there is no ACL to remove. Otherwise try,
		// even when this agent is no super user: an earlier one may
		// have created it.)
		if err := m.cfg.ReadOnly.Release(ctx, topic); err != nil {
			m.log.Error("stopped topic: removing its DENY WRITE ACL failed; retrying at the next topic sync", "topic", topic, "error", err)
			m.mu.Lock()
			m.ro[topic] = roState{reason: fmt.Sprintf("the topic is STOPPED but removing its DENY WRITE ACL failed (retrying): %v", err)}
			m.mu.Unlock()
			return
		}
		m.log.Info("stopped topic is writable: DENY WRITE ACL removed", "topic", topic)
	}
	m.mu.Lock()
	m.roReleased[topic] = true
	m.ro[topic] = roState{}
	m.mu.Unlock()
}

// releaseIfStopped releases topic's ACL when every partition of it but
// stopping (which is about to be) is STOPPED, and says whether every one
// is. finishStop calls it before it shows the last partition STOPPED, under
// lifecycle.ends: a topic whose partitions all read STOPPED is writable.
func (m *Runner) releaseIfStopped(topic string, stopping fetcher.TP) {
	ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
	defer cancel()
	tps, err := m.partitionsOf(ctx, topic)
	if err != nil {
		return
	}
	for _, tp := range tps {
		if tp != stopping && m.stateOf(tp) != partition.Stopped {
			return
		}
	}
	m.releaseReadOnly(ctx, topic)
}

// FenceResult is what SourceFence.Fence did.
type FenceResult struct {
	// Fenced is whether writes to every source topic are refused now.
	Fenced bool
	// Reason says why not, when Fenced is false; describe shows it.
	Reason string
}

// ACLSourceFence fences a promote's source topics with the read-only ACL
// of mirror topics: DENY WRITE for User:* on each source topic, created
// through the mirror's source admin client (FenceRequest.Admin). It stays
// after the promote, so that producers left on the old primary are refused
// rather than writing records the destination never gets.
//
// When the source has no authorizer (SECURITY_DISABLED) nothing can be
// fenced: Fence reports Fenced=false with a reason saying that RPO 0 then
// depends on producers having stopped, and the promote goes on. When the
// agent may not create ACLs on the source, Fence fails and the promote is
// refused: give the agent's source principal ALTER on the source cluster,
// or stop with mode failover.
type ACLSourceFence struct{}

// Fence implements SourceFence.
func (ACLSourceFence) Fence(ctx context.Context, req FenceRequest) (FenceResult, error) {
	if req.Admin == nil {
		return FenceResult{}, errors.New("no source admin client")
	}
	var opts []readonly.Option
	if req.Client != nil {
		// Enforce then waits until every source broker has the
		// fence: until then a broker may still accept writes.
		opts = append(opts, readonly.WithClient(req.Client))
	}
	e := readonly.New(req.Admin, opts...)
	var unfenced []string
	for _, t := range req.Topics {
		enforced, err := e.Enforce(ctx, t)
		if err != nil {
			var pe *readonly.PermissionError
			if errors.As(err, &pe) {
				return FenceResult{}, fmt.Errorf("the agent may not create ACLs on the source (%v): give its source principal ALTER on the source cluster, or stop with mode failover (RPO 0 then depends on producers having stopped)", pe.Err)
			}
			return FenceResult{}, err
		}
		if !enforced {
			unfenced = append(unfenced, t)
		}
	}
	if len(unfenced) > 0 {
		return FenceResult{Reason: fmt.Sprintf("source writes to %q were NOT fenced: the source has no authorizer (ACL requests answer SECURITY_DISABLED); RPO 0 depends on producers having stopped writing to the source", unfenced)}, nil
	}
	return FenceResult{Fenced: true}, nil
}
