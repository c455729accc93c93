package coordinator

// The admin operations behind the agent's API: create, update, add topics
// and delete a mirror. Each checks everything it can before it writes, so a
// refused request changes nothing, and names the field at fault.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/kmirror/kmirror/agent/mirror"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// The errors of the admin operations; callers match them with errors.Is.
var (
	ErrMirrorNotFound  = errors.New("mirror not found")
	ErrMirrorExists    = errors.New("mirror already exists")
	ErrMirrorHasTopics = errors.New("mirror has topics")
	// ErrNotRunHere: in group mode, another agent runs the mirror (or
	// this one does not yet); the message says which.
	ErrNotRunHere = errors.New("this agent does not run the mirror")
	// ErrGathering: in group mode, a lifecycle operation waits for the
	// mirror's partitions to gather on its home's agent; retry.
	ErrGathering = errors.New("the mirror's partitions are gathering on its home agent")
	// ErrFailbackRefused is wrapped by the errors of a failback that
	// cannot go on as asked; the message says why and what to do.
	ErrFailbackRefused = mirror.ErrFailbackRefused
)

// InvalidSpecError is a refused spec; its message names the field.
type InvalidSpecError struct{ Err error }

func (e *InvalidSpecError) Error() string { return e.Err.Error() }
func (e *InvalidSpecError) Unwrap() error { return e.Err }

func invalid(format string, a ...any) error {
	return &InvalidSpecError{Err: fmt.Errorf(format, a...)}
}

// adminMu serializes the admin operations, so that what one checks is still
// true when it writes. (Package-wide: a process runs one coordinator.)
var adminMu sync.Mutex

// Running says whether Run has started, which is after the state topic was
// loaded (New loads it): the agent is ready for the admin API.
func (c *Coordinator) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runCtx != nil
}

// record returns mirror name's persisted record.
func (c *Coordinator) record(name string) (mirror.Record, bool, error) {
	var rec mirror.Record
	v, ok := c.store.Get(mirrorKey(name))
	if !ok {
		return rec, false, nil
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, true, fmt.Errorf("reading mirror %q from the state topic: %w", name, err)
	}
	return rec, true, nil
}

// existing is record for a mirror that must exist: ErrMirrorNotFound when
// it does not.
func (c *Coordinator) existing(name string) (mirror.Record, error) {
	rec, ok, err := c.record(name)
	if err == nil && !ok {
		err = fmt.Errorf("mirror %q: %w", name, ErrMirrorNotFound)
	}
	return rec, err
}

// check validates spec and that none of its topics belongs to another
// mirror: the one check of every spec the coordinator applies, whether it
// comes from the API, the configuration file or topic_regex.
func (c *Coordinator) check(spec mirrorspec.Spec) error {
	if err := spec.Validate(); err != nil {
		return &InvalidSpecError{Err: err}
	}
	return spec.CheckConflicts(c.Mirrors())
}

// Create makes a new mirror; ErrMirrorExists when the name is taken.
func (c *Coordinator) Create(ctx context.Context, spec mirrorspec.Spec) error {
	adminMu.Lock()
	defer adminMu.Unlock()
	if _, ok, _ := c.record(spec.Name); ok {
		return fmt.Errorf("name: mirror %q: %w; update it instead", spec.Name, ErrMirrorExists)
	}
	return c.Apply(ctx, spec)
}

// Update changes mirror name's spec by the partial spec p (mirrorspec.Spec.Merge:
// a field p leaves out keeps its value). Topics can be added but not
// removed (removing a topic from a mirror is a stop, not an update). A new
// source or config exclude list takes effect at once: the mirror
// reconnects, and its partitions resume from the destination's log ends.
func (c *Coordinator) Update(ctx context.Context, name string, p mirrorspec.Spec) error {
	adminMu.Lock()
	defer adminMu.Unlock()
	if p.Name != "" && p.Name != name {
		return invalid("name: %q differs from the mirror updated, %q; a mirror cannot be renamed", p.Name, name)
	}
	old, err := c.existing(name)
	if err != nil {
		return err
	}
	spec := old.Spec.Merge(p)
	var removed []string
	for _, t := range old.Spec.Topics {
		if !slices.Contains(spec.Topics, t) {
			removed = append(removed, t)
		}
	}
	if len(removed) > 0 {
		return invalid("topics: %q would be removed from mirror %q; an update can only add topics", removed, spec.Name)
	}
	if err := c.Apply(ctx, spec); err != nil {
		return err
	}
	// The source and the config exclude list are read when the mirror
	// connects: reconnect for them to take effect.
	if !reflect.DeepEqual(old.Spec.Source, spec.Source) ||
		!slices.Equal(old.Spec.TopicConfigExclude, spec.TopicConfigExclude) {
		c.restart(spec.Name)
	}
	// A source quota names the source's SASL user: it follows a new one.
	c.followSourceUser(ctx, spec.Name)
	return nil
}

// AddTopics adds topics to mirror name. Topics it already mirrors are
// refused, so that a repeated call says so instead of passing silently.
func (c *Coordinator) AddTopics(ctx context.Context, name string, topics []string) error {
	return c.AddTopicsWith(ctx, name, AddRequest{Topics: topics})
}

// AddRequest is what AddTopicsWith adds to a mirror.
type AddRequest struct {
	Topics []string
	// TopicRegex are added to the spec's TopicRegex: matching source
	// topics are added at the next metadata refresh, and at every one
	// after.
	TopicRegex []string
	// Failback mirrors Topics back into the destination they were
	// mirrored from (failback.go); Recreate lets it recreate topics that
	// took records after the last mirrored offset.
	Failback, Recreate bool
}

// AddTopicsWith adds topics, topic regexes or a failback to mirror name.
// Topics and regexes it already has are refused, so that a repeated call
// says so instead of passing silently. A failback is prepared (checked,
// and with Recreate the divergent records moved aside) before the topics
// are added; when it is refused nothing changes.
func (c *Coordinator) AddTopicsWith(ctx context.Context, name string, req AddRequest) error {
	adminMu.Lock()
	defer adminMu.Unlock()
	rec, err := c.existing(name)
	if err != nil {
		return err
	}
	switch {
	case len(req.Topics) == 0 && len(req.TopicRegex) == 0:
		return invalid("topics: give at least one topic (or topic_regex) to add")
	case req.Recreate && !req.Failback:
		return invalid("recreate: applies to a failback (failback: true); to recreate the destination of a FAILED topic, recover it with recreate")
	case req.Failback && len(req.TopicRegex) > 0:
		return invalid("topic_regex: a failback names its topics; give them in topics")
	case req.Failback && len(req.Topics) == 0:
		return invalid("topics: give the topics to fail back")
	}
	for _, t := range req.Topics {
		if slices.Contains(rec.Spec.Topics, t) {
			return invalid("topics: %q is already mirrored by mirror %q", t, name)
		}
	}
	for _, re := range req.TopicRegex {
		if slices.Contains(rec.Spec.TopicRegex, re) {
			return invalid("topic_regex: %q is already in mirror %q", re, name)
		}
	}
	spec := rec.Spec
	spec.Topics = append(slices.Clone(spec.Topics), req.Topics...)
	spec.TopicRegex = append(slices.Clone(spec.TopicRegex), req.TopicRegex...)
	if err := c.check(spec); err != nil {
		return err
	}
	if req.Failback {
		plans := make([]mirror.FailbackPlan, 0, len(req.Topics))
		for _, t := range req.Topics {
			plan, err := mirror.PlanFailback(ctx, c.runners, spec, t, req.Recreate)
			if err != nil {
				return err
			}
			plans = append(plans, plan)
		}
		for _, plan := range plans {
			if err := mirror.ApplyFailback(ctx, c.runners, spec.Name, plan); err != nil {
				return err
			}
		}
	}
	return c.Apply(ctx, spec)
}

// Delete removes mirror name: it stops its partitions and removes its
// records from the state topic. Destination topics and their data stay, as
// ordinary topics, writable (their read-only ACLs are removed). A mirror
// with topics is refused with ErrMirrorHasTopics unless force is set.
func (c *Coordinator) Delete(ctx context.Context, name string, force bool) error {
	// In group mode its partitions stop here, with their last records,
	// before those records go.
	if err := c.gather(ctx, name); err != nil {
		return err
	}
	adminMu.Lock()
	defer adminMu.Unlock()
	rec, err := c.existing(name)
	if err != nil {
		return err
	}
	if n := len(rec.Spec.Topics); n > 0 && !force {
		return fmt.Errorf("mirror %q has %d topic(s) %q: %w; stop them first, or delete with force (the destination topics and their data stay)", name, n, rec.Spec.Topics, ErrMirrorHasTopics)
	}
	c.stop(name)
	// Its topics stay as ordinary, writable topics: their read-only ACLs
	// go first, so that a failure leaves the mirror to retry with.
	if st := c.ro.Last(); st == nil || st.Authorizer {
		for _, t := range rec.Spec.Topics {
			if err := c.ro.Release(ctx, t); err != nil {
				c.start(name)
				return fmt.Errorf("deleting mirror %q: making topic %q writable again: %w", name, t, err)
			}
		}
	}
	// The mirror's own records first and the mirror record last: if this is
	// interrupted, the mirror is still there and a retry finishes the job.
	// A mirror's records are keyed KIND/MIRROR/..., such as
	// partition/MIRROR/TOPIC/N (mirror and topic names cannot hold '/').
	// The producer id records (producers/TOPIC/N) belong to destination
	// partitions, not to a mirror, and stay: a mirror created again over
	// the same topics must recognise the batches this one wrote.
	var keys []string
	for k := range c.store.All() {
		if parts := strings.SplitN(k, "/", 3); len(parts) == 3 && parts[1] == name && parts[0] != statestore.ProducersKind {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	// Its throttle (throttle/MIRROR) goes too, and the source quota with
	// it; a source that cannot be reached does not keep a mirror from
	// being deleted (it may be gone for good), so that is only logged.
	var t mirrorapi.Throttle
	if mirror.ReadRecord(c.store, throttleKey(name), &t) {
		if t.SourceQuota {
			if err := c.setSourceQuota(ctx, rec.Spec, storedQuotaEntity(name, t), 0); err != nil {
				c.log.Warn("deleting mirror: the source quota stays; remove it by hand", "mirror", name, "error", err)
			}
		}
		keys = append(keys, throttleKey(name))
	}
	if _, ok := c.store.Get(pinPrefix + name); ok {
		keys = append(keys, pinPrefix+name)
	}
	keys = append(keys, mirrorKey(name))
	for _, k := range keys {
		if err := c.store.Put(ctx, k, nil); err != nil {
			c.start(name)
			return fmt.Errorf("deleting mirror %q: %w", name, err)
		}
	}
	c.log.Info("mirror deleted", "mirror", name, "records_removed", len(keys), "topics_kept", rec.Spec.Topics)
	return nil
}

// running returns mirror name's runner, nil when it does not run here;
// in group mode, when this agent is not its home.
func (c *Coordinator) running(name string) *mirror.Runner {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.mirrors[name]; m != nil && m.Home() {
		return m
	}
	return nil
}

// stop ends mirror name's run and waits until its partitions have stopped.
func (c *Coordinator) stop(name string) {
	c.mu.Lock()
	m, ok := c.mirrors[name]
	delete(c.mirrors, name)
	c.mu.Unlock()
	if !ok {
		return
	}
	m.Stop()
}

// start runs mirror name from its persisted record, if Run has started and
// it does not run yet.
func (c *Coordinator) start(name string) {
	rec, ok, err := c.record(name)
	if !ok || err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, running := c.mirrors[name]; running || c.runCtx == nil || c.runCtx.Err() != nil {
		return
	}
	c.startLocked(rec)
}

// restart stops mirror name and runs it again from its persisted record.
// The source cluster id it last read stays in describe until it reconnects.
func (c *Coordinator) restart(name string) {
	var id string
	if m := c.running(name); m != nil {
		id = m.SourceClusterID()
	}
	c.stop(name)
	c.start(name)
	if m := c.running(name); m != nil {
		m.KeepSourceClusterID(id)
	}
}

// registry is the coordinator as its runners see it (mirror.Registry).
type registry struct{ c *Coordinator }

// AddMatchedTopics adds the topics of matched that no mirror has to mirror
// name's spec. It gives way to admin operations under way (the runner asks
// again at its next refresh): one of them may be waiting for this mirror to
// stop.
func (r registry) AddMatchedTopics(ctx context.Context, name string, matched []string) ([]string, error) {
	if !adminMu.TryLock() {
		return nil, nil
	}
	defer adminMu.Unlock()
	c := r.c
	rec, ok, err := c.record(name)
	if err != nil || !ok {
		return nil, nil
	}
	taken := map[string]bool{}
	for _, other := range c.Mirrors() {
		for _, t := range other.Topics {
			taken[t] = true
		}
	}
	var added []string
	for _, t := range matched {
		if !taken[t] && mirrorspec.CheckTopicName(t) == nil {
			added = append(added, t)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	spec := rec.Spec
	spec.Topics = append(slices.Clone(spec.Topics), added...)
	return added, c.Apply(ctx, spec)
}
