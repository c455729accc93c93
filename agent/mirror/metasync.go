package mirror

// Metadata sync (DESIGN §5): while a mirror is connected to its source, each
// kind (topic configs, consumer-group offsets, ACLs) runs in a loop of its
// own every mirror.metadata.refresh.interval.ms, so that one failing or slow
// kind never holds up the others; partition growth runs with the topic sync
// (syncTopics) and is recorded alongside. A stop syncs the group offsets of
// the partition once more before it is STOPPED.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/metasync"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/writegate"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// syncTimeout bounds one sync of one kind.
const syncTimeout = time.Minute

// finalSyncTimeout bounds the group offset sync of a stop, which must
// complete with the source gone too.
const finalSyncTimeout = 5 * time.Second

// metaSync is a mirror's metadata sync as the runner keeps it: the status
// of each kind (describe, metrics), the channel closed to make the sync
// loops run at once, and the final group syncs of stopping partitions. It
// calls nothing of the runner, which may call it with its own lock held.
type metaSync struct {
	log     hclog.Logger
	tracker *metasync.Tracker
	final   finalSyncs

	mu   sync.Mutex
	kick chan struct{}
}

func newMetaSync(log hclog.Logger) *metaSync {
	return &metaSync{log: log, tracker: metasync.NewTracker(), kick: make(chan struct{})}
}

// kickAll makes every sync loop run at once (a spec changed).
func (s *metaSync) kickAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.kick)
	s.kick = make(chan struct{})
}

// kicked is closed at the next kickAll.
func (s *metaSync) kicked() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kick
}

// record records a sync's outcome for describe and metrics, logging a
// failure when it starts or changes and a recovery once.
func (s *metaSync) record(kind metasync.Kind, res metasync.Result, err error) {
	if !s.tracker.Record(kind, res, err, time.Now()) {
		return
	}
	if err != nil {
		s.log.Error("metadata sync failed; the other kinds go on", "kind", kind, "error", err)
	} else {
		s.log.Info("metadata sync works again", "kind", kind)
	}
}

// runSync runs the sync loop of each kind that has one (syncRuns) against
// src until ctx ends.
func (m *Runner) runSync(ctx context.Context, src *kgo.Client) {
	srcAdm := kadm.NewClient(src)
	configs := metasync.NewConfigs(srcAdm, m.cfg.Admin, m.log.Named("configs"))
	groups := metasync.NewGroups(srcAdm, m.cfg.Admin, m.log.Named("groups"))
	acls := metasync.NewACLs(src, m.cfg.Destination, aclStore{m.cfg.Store, m.cfg.Logger, m.rec.Spec.Name}, m.log.Named("acls"))
	var wg sync.WaitGroup
	for kind, run := range m.syncRuns(configs, groups, acls) {
		if run != nil {
			wg.Go(func() { m.syncLoop(ctx, kind, run) })
		}
	}
	wg.Wait()
}

// syncRun is one sync of a kind, with the mirror's spec of the moment.
type syncRun func(context.Context, mirrorspec.Spec) (metasync.Result, error)

// syncRuns are the runs of the sync loops, keyed by every kind of
// mirrorapi.SyncKinds (TestSyncRunsEveryKind holds it to that): a kind
// without a loop of its own has a nil run and says where it is recorded.
func (m *Runner) syncRuns(configs *metasync.Configs, groups *metasync.Groups, acls *metasync.ACLs) map[metasync.Kind]syncRun {
	return map[metasync.Kind]syncRun{
		// Partition growth is done and recorded by syncTopics, with
		// the topic sync.
		metasync.KindPartitions: nil,
		metasync.KindConfigs: func(ctx context.Context, spec mirrorspec.Spec) (metasync.Result, error) {
			return configs.Sync(ctx, liveTopics(spec.Topics, m.partitionStates()), spec.TopicConfigExclude)
		},
		metasync.KindGroups: func(ctx context.Context, spec mirrorspec.Spec) (metasync.Result, error) {
			f, err := mirrorspec.NewGroupFilter(spec.GroupsInclude, spec.GroupsExclude)
			if err != nil {
				return metasync.Result{}, err
			}
			return groups.Sync(ctx, f, groupPartitions(spec.Topics, m.partitionStates()))
		},
		metasync.KindACLs: func(ctx context.Context, spec mirrorspec.Spec) (metasync.Result, error) {
			rules, err := mirrorspec.ParseACLRules("acl_include", spec.ACLInclude)
			if err != nil {
				return metasync.Result{}, err
			}
			return acls.Sync(ctx, rules)
		},
	}
}

func (m *Runner) syncLoop(ctx context.Context, kind metasync.Kind, run syncRun) {
	for {
		// The kick before the spec: a spec changed after this look
		// closes the kick this run waits on.
		kick := m.sync.kicked()
		m.mu.Lock()
		spec := m.spec
		m.mu.Unlock()
		var res metasync.Result
		// The mirror's owner is checked before every sync run, as
		// before every other write: an agent that lost the mirror, or
		// was frozen past its session, syncs nothing more.
		err := writegate.Check(ctx)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, syncTimeout)
			res, err = run(rctx, spec)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		m.sync.record(kind, res, err)
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-time.After(m.interval()):
		}
	}
}

// partitionStates are the states of the mirror's partitions now.
func (m *Runner) partitionStates() map[fetcher.TP]partition.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[fetcher.TP]partition.State, len(m.parts))
	for tp, rp := range m.parts {
		out[tp] = rp.pm.Status().State
	}
	return out
}

// liveTopics are the topics that still mirror: some partition known and
// not STOPPING or STOPPED. A stopped topic is an ordinary destination topic:
// its configs no longer follow the source.
func liveTopics(topics []string, states map[fetcher.TP]partition.State) []string {
	live := map[string]bool{}
	for tp, s := range states {
		if s != partition.Stopping && s != partition.Stopped {
			live[tp.Topic] = true
		}
	}
	var out []string
	for _, t := range topics {
		if live[t] {
			out = append(out, t)
		}
	}
	return out
}

// groupPartitions are the partitions of topics whose group offsets are
// synced: those MIRRORING or PAUSED, where the destination holds the
// source's records at the same offsets. Other states are either not there
// yet or, STOPPED, the destination's own (a stop syncs them one last time).
func groupPartitions(topics []string, states map[fetcher.TP]partition.State) map[string][]int32 {
	out := map[string][]int32{}
	for tp, s := range states {
		if (s == partition.Mirroring || s == partition.Paused) && slices.Contains(topics, tp.Topic) {
			out[tp.Topic] = append(out[tp.Topic], tp.Partition)
		}
	}
	return out
}

// recordPartitionSync records the outcome of a topic sync of topics as the
// partitions kind: growth happens there (topics.Manager.Ensure).
func (m *Runner) recordPartitionSync(topics []string) {
	m.mu.Lock()
	res, err := partitionSync(topics, m.topicErrs, slices.Collect(maps.Keys(m.parts)))
	m.mu.Unlock()
	m.sync.record(metasync.KindPartitions, res, err)
}

// partitionSync is the outcome of a topic sync of topics, given each
// topic's error and the partitions running: the partitions of the topics
// without an error, or what went wrong with the others.
func partitionSync(topics []string, topicErrs map[string]string, parts []fetcher.TP) (metasync.Result, error) {
	var errs []error
	items := 0
	for _, t := range topics {
		if e := topicErrs[t]; e != "" {
			errs = append(errs, fmt.Errorf("topic %q: %s", t, e))
			continue
		}
		for _, tp := range parts {
			if tp.Topic == t {
				items++
			}
		}
	}
	return metasync.Result{Items: items}, errors.Join(errs...)
}

// finalGroupSync syncs the group offsets of tp once more when it stops, its
// destination end final, so that consumers moving over find the offsets
// committed on the source up to the stop. It is bounded (the source may be
// gone); if it cannot run, the offsets of the last periodic sync stay.
// Partitions stopping together share a sync: one runs at a time, and the
// partitions that arrive meanwhile go in the next, so that stopping a
// topic of many partitions reads the groups twice rather than once per
// partition.
func (m *Runner) finalGroupSync(ctx context.Context, tp fetcher.TP) {
	done, start := m.sync.final.add(tp)
	if start {
		// (A stop calls this from a lifecycle goroutine, so ops is
		// not zero here: run waits for this one too.)
		m.ops.Go(func() { m.sync.final.runAll(m.syncGroupsNow) })
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// finalSyncs batches the final group syncs of stopping partitions: one
// runs at a time, and the partitions that arrive meanwhile go in the next.
type finalSyncs struct {
	mu      sync.Mutex
	running bool
	pending map[string][]int32
	waiters []chan struct{}
}

// add queues tp for the next final sync. done is closed once a sync that
// included tp has run; start says that none runs, and the caller must
// start runAll.
func (f *finalSyncs) add(tp fetcher.TP) (done <-chan struct{}, start bool) {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		f.pending = map[string][]int32{}
	}
	f.pending[tp.Topic] = append(f.pending[tp.Topic], tp.Partition)
	f.waiters = append(f.waiters, ch)
	start = !f.running
	f.running = true
	return ch, start
}

// runAll runs sync on the pending partitions, batch after batch, until
// none is pending.
func (f *finalSyncs) runAll(sync func(parts map[string][]int32)) {
	for {
		f.mu.Lock()
		parts, waiters := f.pending, f.waiters
		f.pending, f.waiters = nil, nil
		if len(waiters) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		sync(parts)
		for _, w := range waiters {
			close(w)
		}
	}
}

// syncGroupsNow syncs the group offsets of parts, within the bound of a
// stop's final sync.
func (m *Runner) syncGroupsNow(parts map[string][]int32) {
	src := m.conn.sourceNow()
	m.mu.Lock()
	spec := m.spec
	m.mu.Unlock()
	if src == nil {
		m.log.Warn("stop: the source is not connected; consumer group offsets stay as last synced", "partitions", parts)
		return
	}
	f, err := mirrorspec.NewGroupFilter(spec.GroupsInclude, spec.GroupsExclude)
	if err != nil {
		return // Validate refused it already
	}
	ctx, cancel := context.WithTimeout(m.ctx, min(finalSyncTimeout, m.cfg.StopTimeout/4))
	defer cancel()
	res, err := metasync.NewGroups(kadm.NewClient(src.cl), m.cfg.Admin, m.log.Named("groups")).Sync(ctx, f, parts)
	if err != nil {
		m.sync.tracker.Record(metasync.KindGroups, metasync.Result{}, fmt.Errorf("at the stop of %v: %w", parts, err), time.Now())
		m.log.Warn("stop: the final consumer group offset sync failed; offsets stay as last synced", "partitions", parts, "error", err)
		return
	}
	m.log.Info("stop: consumer group offsets synced", "partitions", parts, "groups", res.Items)
}

// aclStore keeps the ACLs a mirror's sync created on the destination in the
// state topic, one record each (acl/MIRROR/KEY), so that a restarted agent
// deletes them when they go from the source, and nothing else.
type aclStore struct {
	store  Store
	log    hclog.Logger
	mirror string
}

func (s aclStore) prefix() string { return "acl/" + s.mirror + "/" }

func (s aclStore) Owned() []metasync.ACL {
	var out []metasync.ACL
	for k, v := range s.store.All() {
		if !strings.HasPrefix(k, s.prefix()) {
			continue
		}
		var a metasync.ACL
		if err := json.Unmarshal(v, &a); err != nil {
			s.log.Error("skipping an unreadable ACL record", "key", k, "error", err)
			continue
		}
		out = append(out, a)
	}
	return out
}

func (s aclStore) Own(ctx context.Context, a metasync.ACL) error {
	return WriteRecord(ctx, s.store, s.prefix()+a.Key(), a)
}

func (s aclStore) Disown(ctx context.Context, a metasync.ACL) error {
	return s.store.Put(ctx, s.prefix()+a.Key(), nil)
}
