package mirror

// Read-only mirror topics (DESIGN §4): the agent checks once at start
// whether the destination has an authorizer and the agent is a super user
// there (ReadOnly.Check); every mirror topic then gets a DENY WRITE
// ACL for User:* at its first sync, kept while it mirrors or is paused, and
// released when every partition of the topic is STOPPED. Where that cannot
// be done, describe says read_only_enforced=false with the reason; foreign
// writes are detected either way (the partition fails).
//
// ACLSourceFence applies the same ACL to the source topics of a promote
// (fence.go).

import (
	"context"
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

// fences is what a runner keeps of the DENY WRITE ACLs for User:* on its
// topics: on the destination, the read-only ACL of each mirror topic as
// describe shows it and whether this run released it; on the source, the
// fence of each promoted topic (fence.go). It calls nothing of the runner,
// which may call it with its own lock held.
type fences struct {
	ro  *ReadOnly
	log hclog.Logger

	mu       sync.Mutex
	readOnly map[string]roState
	released map[string]bool // read-only ACLs this run removed
	fenced   map[string]fenceState
}

func newFences(ro *ReadOnly, log hclog.Logger) *fences {
	return &fences{ro: ro, log: log, readOnly: map[string]roState{}, released: map[string]bool{}, fenced: map[string]fenceState{}}
}

// readOnlyOf is topic's read-only enforcement as describe shows it.
func (f *fences) readOnlyOf(topic string) roState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readOnly[topic]
}

// enforce makes topic read-only unless it already is, and records the
// outcome for describe. It is called at each topic sync of a topic that is
// not STOPPED, and does nothing once the ACL was created.
func (f *fences) enforce(ctx context.Context, topic string) {
	cur := f.readOnlyOf(topic)
	if cur.enforced {
		return
	}
	st, ok, why := f.ro.Status(ctx)
	next := readOnlyState(st, ok, why, func() (bool, error) { return f.ro.Enforce(ctx, topic) })
	switch {
	case next == cur:
	case next.enforced:
		f.log.Info("mirror topic is read-only", "topic", topic)
	case ok && !st.Authorizer:
		f.log.Info("mirror topic is not read-only", "topic", topic, "reason", next.reason)
	default:
		f.log.Warn("mirror topic is not read-only", "topic", topic, "reason", next.reason)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly[topic] = next
	delete(f.released, topic)
}

// readOnlyState is a topic's read-only enforcement after the destination's
// check st (ok false: not concluded, and why says so); enforce creates the
// topic's ACL, and is called only when the check allows it.
func readOnlyState(st readonly.Status, ok bool, why string, enforce func() (bool, error)) roState {
	switch {
	case !ok:
		return roState{reason: why}
	case !st.Enforceable():
		// No authorizer, or the agent is not a super user: a DENY
		// would lock the agent out of its own topic.
		return roState{reason: st.Reason}
	}
	enforced, err := enforce()
	switch {
	case err != nil:
		return roState{reason: fmt.Sprintf("creating the DENY WRITE ACL failed (retrying): %v", err)}
	case !enforced:
		return roState{reason: "the destination answered SECURITY_DISABLED (no authorizer): the topic stays writable"}
	}
	return roState{enforced: true}
}

// release removes topic's DENY WRITE ACL, once per run of the mirror
// unless it fails; it is called when every partition of the topic is
// STOPPED.
func (f *fences) release(ctx context.Context, topic string) {
	f.mu.Lock()
	done := f.released[topic]
	f.mu.Unlock()
	if done {
		return
	}
	if st := f.ro.Last(); st == nil || st.Authorizer {
		// (With no authorizer there is no ACL to remove. Otherwise try,
		// even when this agent is no super user: an earlier one may
		// have created it.)
		if err := f.ro.Release(ctx, topic); err != nil {
			f.log.Error("stopped topic: removing its DENY WRITE ACL failed; retrying at the next topic sync", "topic", topic, "error", err)
			f.mu.Lock()
			f.readOnly[topic] = roState{reason: fmt.Sprintf("the topic is STOPPED but removing its DENY WRITE ACL failed (retrying): %v", err)}
			f.mu.Unlock()
			return
		}
		f.log.Info("stopped topic is writable: DENY WRITE ACL removed", "topic", topic)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released[topic] = true
	f.readOnly[topic] = roState{}
}

// enforceReadOnly makes topic read-only (fences.enforce) unless a partition
// of it is stopping or stopped, under the lock that ends stops: the end of a
// topic's last stop removes the ACL (releaseIfStopped), and a topic sync
// that read the topic as mirroring before must not create it again after
// (seen on Kafka 4.4.0: a promoted topic read-only again 1.6 s after its
// last partition showed STOPPED).
func (m *Runner) enforceReadOnly(ctx context.Context, topic string) {
	m.life.ends.Lock()
	defer m.life.ends.Unlock()
	m.mu.Lock()
	var stopping bool
	for tp, rp := range m.parts {
		if tp.Topic == topic {
			if s := rp.pm.Status().State; s == partition.Stopping || s == partition.Stopped {
				stopping = true
			}
		}
	}
	m.mu.Unlock()
	if !stopping {
		m.fences.enforce(ctx, topic)
	}
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
		if st, _ := m.stateOf(tp); tp != stopping && st != partition.Stopped {
			return
		}
	}
	m.fences.release(ctx, topic)
}
