// Package mirror runs the mirrors of an agent, one Runner each: a runner
// connects to its mirror's source, creates and grows the destination topics,
// runs one partition mirror per source partition, and carries out what is
// asked of its topics (pause, resume, stop, recover, failback), keeping them
// read-only, their metadata in sync and their fetches throttled. The
// coordinator (agent/coordinator) keeps the registry of mirrors, their
// persisted specs and the admin surface, and starts and stops runners;
// nothing else starts or stops a partition mirror.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/kafkaconn"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/topics"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
)

// Runner runs one mirror: see the package documentation.
type Runner struct {
	cfg *Config
	log hclog.Logger
	rec Record

	mu        sync.Mutex
	spec      mirrorspec.Spec
	err       string
	warnings  []string
	topicErrs map[string]string
	parts     map[fetcher.TP]*runningPartition
	fetch     *fetcher.Fetcher
	refresh   chan struct{}
	wg        sync.WaitGroup
	done      chan struct{}
	cancel    context.CancelFunc // ends run; set by Start

	// txnTimeout is the timeout of the partitions' destination
	// transactions, chosen by the last preflight from the destination's
	// transaction.max.timeout.ms (zero before the first), and
	// txnTimeoutFrom says where it came from (describe).
	txnTimeout     time.Duration
	txnTimeoutFrom string

	ctx    context.Context // run's; set before anything else runs
	ops    sync.WaitGroup  // lifecycle goroutines; run waits for them
	source *sourceReader   // the connected source, nil when none

	// life is the state of lifecycle operations (lifecycle.go).
	life *lifecycle

	// fences are the read-only ACLs of its topics and the source fences
	// of its promotes (readonly.go, fence.go).
	fences *fences

	// throttle is enforced by every fetcher of the mirror (throttle.go).
	throttle *throttle
	// recreates are the topics a recover with recreate is deleting and
	// creating again (recreate.go).
	recreates recreates
	// sync is the metadata sync (metasync.go).
	sync *metaSync
	// sourceClusterID is the source's cluster id, from its metadata when
	// the mirror last connected; empty until it has.
	sourceClusterID string

	// topicErrCodes are the codes of the topicErrs that have one.
	topicErrCodes map[string]reason.Code
}

// New returns the runner of the mirror rec; Start runs it.
func New(cfg *Config, rec Record) *Runner {
	log := cfg.Logger.Named("mirror").With("mirror", rec.Spec.Name)
	return &Runner{
		cfg: cfg, log: log, rec: rec, spec: rec.Spec,
		topicErrs: map[string]string{}, topicErrCodes: map[string]reason.Code{}, parts: map[fetcher.TP]*runningPartition{},
		refresh: make(chan struct{}, 1), done: make(chan struct{}),
		life:     newLifecycle(),
		fences:   newFences(cfg.ReadOnly, log),
		sync:     newMetaSync(log),
		ctx:      context.Background(),
		throttle: newThrottle(),
	}
}

// Start runs the mirror until ctx ends or Stop is called.
func (m *Runner) Start(ctx context.Context) {
	ctx, m.cancel = context.WithCancel(ctx)
	m.ctx = ctx
	go m.run(ctx)
}

// Stop ends the run and waits until its partitions have stopped.
func (m *Runner) Stop() {
	if m.cancel != nil {
		m.cancel()
	}
	m.Wait()
}

// Wait waits until the run has ended.
func (m *Runner) Wait() { <-m.done }

// Logger is the runner's logger: it names the mirror.
func (m *Runner) Logger() hclog.Logger { return m.log }

// SourceClusterID is the source's cluster id as the runner last read it.
func (m *Runner) SourceClusterID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sourceClusterID
}

// KeepSourceClusterID makes describe show id, the source cluster id a
// previous runner of the mirror read, until this one connects.
func (m *Runner) KeepSourceClusterID(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sourceClusterID == "" {
		m.sourceClusterID = id
	}
}

// SetSpec makes the runner follow spec, changed by an update.
func (m *Runner) SetSpec(s mirrorspec.Spec) {
	m.mu.Lock()
	m.spec = s
	m.mu.Unlock()
	select {
	case m.refresh <- struct{}{}:
	default:
	}
	m.sync.kickAll()
}

func (m *Runner) setErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.err = ""
		return
	}
	if m.err != err.Error() {
		m.log.Error("mirror not running", "error", err)
	}
	m.err = err.Error()
}

// run connects to the source and keeps the mirror's topics and partitions
// running until ctx ends, retrying the connection with backoff.
func (m *Runner) run(ctx context.Context) {
	defer close(m.done)
	defer m.ops.Wait()
	defer m.wg.Wait()
	backoff := time.Second
	for ctx.Err() == nil {
		err := m.runConnected(ctx)
		if ctx.Err() != nil {
			return
		}
		m.setErr(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (m *Runner) runConnected(ctx context.Context) error {
	m.mu.Lock()
	spec := m.spec // Apply changes m.spec under m.mu
	m.mu.Unlock()
	opts, err := m.cfg.SourceOpts(spec)
	if err != nil {
		return fmt.Errorf("connecting to source %s: %w", strings.Join(spec.Source.BootstrapServers, ","), err)
	}
	src, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("connecting to source %s: %w", strings.Join(spec.Source.BootstrapServers, ","), err)
	}
	defer src.Close()
	if err := src.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to source %s: %w", strings.Join(spec.Source.BootstrapServers, ","), err)
	}
	srcAdm := kadm.NewClient(src)
	if md, err := srcAdm.BrokerMetadata(ctx); err == nil {
		m.mu.Lock()
		m.sourceClusterID = md.Cluster
		m.mu.Unlock()
	}
	seeds, _ := m.cfg.Destination.OptValue(kgo.SeedBrokers).([]string)
	report, err := topics.Check(ctx, m.cfg.Admin, srcAdm, topics.CheckOptions{Topics: spec.Topics, DestinationBootstrap: seeds})
	if err != nil {
		return fmt.Errorf("preflight check of the destination: %w", err)
	}
	findings := report.Findings
	if err := findings.Refusal(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.txnTimeout != report.TxnTimeout || m.txnTimeoutFrom != report.TxnTimeoutFrom {
		m.log.Info("destination transaction timeout", "timeout", report.TxnTimeout, "from", report.TxnTimeoutFrom)
	}
	m.txnTimeout, m.txnTimeoutFrom = report.TxnTimeout, report.TxnTimeoutFrom
	m.warnings = nil
	for _, f := range findings {
		m.warnings = append(m.warnings, f.String())
	}
	m.mu.Unlock()
	for _, f := range findings {
		m.log.Warn("preflight", "finding", f.String())
	}
	m.setErr(nil)

	srcMeta := leaders.New(src)
	f := fetcher.New(src, srcMeta, fetcher.Options{Budget: m.cfg.Budget, Throttle: m.throttle.limiter, Counters: m.throttle.counters, Logger: m.log.Named("fetcher")})
	m.mu.Lock()
	m.fetch = f
	m.source = &sourceReader{src, srcMeta}
	m.mu.Unlock()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = f.Run(fctx) }()
	mgr := topics.NewManager(m.cfg.Admin, srcAdm, topics.WithExclude(spec.TopicConfigExclude), topics.WithLogger(m.log.Named("topics")))

	// Partition mirrors live as long as this connection: they end with fctx.
	defer func() {
		cancel()
		m.wg.Wait()
		m.mu.Lock()
		// Partitions that ran under this connection start again from
		// their persisted state at the next; those that do not run
		// (paused, stopped, failed, or being stopped) stay.
		for tp, rp := range m.parts {
			if rp.stop != nil {
				delete(m.parts, tp)
			}
		}
		m.fetch = nil
		m.source = nil
		m.mu.Unlock()
	}()
	m.wg.Go(func() { m.runSync(fctx, src) })
	for {
		m.discoverTopics(fctx, srcAdm)
		m.syncTopics(fctx, mgr, sourceReader{src, srcMeta}, f)
		m.refreshSourceEnds(fctx, srcAdm)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.interval()):
		case <-m.refresh:
		}
	}
}

// syncTopics creates or grows each destination topic and starts a partition
// mirror for every source partition not yet running.
func (m *Runner) syncTopics(ctx context.Context, mgr *topics.Manager, source sourceReader, f *fetcher.Fetcher) {
	m.mu.Lock()
	names := append([]string(nil), m.spec.Topics...)
	m.mu.Unlock()
	for _, topic := range names {
		if m.recreates.underway(topic) {
			continue // recreateTopic restarts its partitions
		}
		err := m.syncTopic(ctx, mgr, source, f, topic)
		m.mu.Lock()
		if err != nil {
			if m.topicErrs[topic] != err.Error() {
				m.log.Error("topic not mirrored", "topic", topic, "error", err)
			}
			m.topicErrs[topic] = err.Error()
			m.topicErrCodes[topic] = topicErrCode(err)
		} else {
			delete(m.topicErrs, topic)
			delete(m.topicErrCodes, topic)
		}
		m.mu.Unlock()
	}
	m.recordPartitionSync(names)
}

// topicErrCode is the code of a topic's error, "" when it has none.
func topicErrCode(err error) reason.Code {
	switch {
	case errors.Is(err, topics.ErrSourceTopicNotFound):
		return reason.SourceTopicMissing
	case errors.Is(err, topics.ErrDestinationHasMorePartitions):
		return reason.DestinationHasMorePartitions
	}
	return reason.CodeOf(err)
}

func (m *Runner) syncTopic(ctx context.Context, mgr *topics.Manager, source sourceReader, f *fetcher.Fetcher, topic string) error {
	name := m.rec.Spec.Name
	if m.restoreStoppedTopic(topic) {
		// A stopped topic is an ordinary destination topic now: neither
		// its configs nor its partitions follow the source any more,
		// and it is writable (its ACL is removed, again after a
		// restart in case the stop could not).
		m.fences.release(ctx, topic)
		return nil
	}
	// Ensure may create the topic, add partitions and set configs:
	// writes, so the writer lease is checked first.
	if err := m.cfg.gate(); err != nil {
		return err
	}
	info, err := mgr.Ensure(ctx, topic)
	if err != nil {
		return err
	}
	// Read-only before any partition mirror starts writing it.
	m.fences.enforce(ctx, topic)
	var tr topicRecord
	srcID, dstID := topicID(info.SourceTopicID), topicID(info.DestinationTopicID)
	recovering := m.life.takeRecoveringTopic(topic)
	if ReadRecord(m.cfg.Store, topicKey(name, topic), &tr) {
		if tr.SourceTopicID != srcID && srcID != (topicID{}) && recovering {
			r := reason.New(reason.SourceTopicRecreatedRealignFailed, "source topic %q was recreated (topic id %s, mirrored %s): a recover cannot re-align it, as the destination holds the old topic's records at the offsets the new one reuses; the destination topic must be recreated to mirror the new source topic: recover with recreate (kmirror recover --recreate) does it, and the destination's records are lost",
				topic, info.SourceTopicID, tr.SourceTopicID)
			m.failTopic(ctx, topic, info.SourcePartitions, r)
			return &r
		}
		if tr.DestinationTopicID != dstID && tr.DestinationTopicID != (topicID{}) && dstID != (topicID{}) && recovering {
			// The records mirrored into the old destination topic are
			// gone: mirror into the new one from its end.
			m.log.Warn("recover: mirroring into the recreated destination topic", "topic", topic, "topic_id", dstID)
			tr.DestinationTopicID = dstID
			if err := WriteRecord(ctx, m.cfg.Store, topicKey(name, topic), tr); err != nil {
				return err
			}
		}
		if tr.SourceTopicID != srcID && srcID != (topicID{}) {
			r := reason.New(reason.SourceTopicRecreated, "source topic %q was recreated (topic id %s, mirrored %s): its offsets no longer match the destination's; recover the topic to mirror it again",
				topic, info.SourceTopicID, tr.SourceTopicID)
			for _, pr := range persistedPartitions(m.cfg.Store, m.rec.Spec.Name, topic) {
				if pr.State == partition.Failed && pr.ReasonCode == reason.SourceTopicRecreatedRealignFailed {
					r = pr.why() // a recover said so already
					break
				}
			}
			m.failTopic(ctx, topic, info.SourcePartitions, r)
			return &r
		}
		switch {
		case dstID == (topicID{}) || tr.DestinationTopicID == dstID:
		case tr.DestinationTopicID != (topicID{}):
			r := reason.New(reason.DestinationTopicRecreated, "destination topic %q was recreated (topic id %s, mirrored into %s): the records mirrored there are lost; recover the topic to mirror it again",
				topic, dstID, tr.DestinationTopicID)
			m.failTopic(ctx, topic, info.SourcePartitions, r)
			return &r
		default:
			// A record from before destination ids were kept.
			tr.DestinationTopicID = dstID
			if err := WriteRecord(ctx, m.cfg.Store, topicKey(name, topic), tr); err != nil {
				return err
			}
		}
	} else if err := WriteRecord(ctx, m.cfg.Store, topicKey(name, topic), topicRecord{SourceTopicID: srcID, DestinationTopicID: dstID}); err != nil {
		return err
	}
	if info.PartitionsAdded > 0 {
		m.log.Info("destination partitions added", "topic", topic, "added", info.PartitionsAdded)
		m.cfg.Writer.Meta().Invalidate(topic)
		source.meta.Invalidate(topic)
	}
	keyed := info.SourceCompacted()
	for p := int32(0); p < info.SourcePartitions; p++ {
		tp := fetcher.TP{Topic: topic, Partition: p}
		m.mu.Lock()
		rp, running := m.parts[tp]
		if running && rp.placeholder {
			running = false
		}
		m.mu.Unlock()
		if running {
			continue
		}
		recovering := m.life.takeRecovering(tp)
		cfg := partition.Config{
			Mirror: name, TP: tp, ProducerID: m.rec.ProducerID, Epoch: m.rec.Epoch, KeyedPad: keyed,
			Fetcher: f, Source: source, Writer: m.cfg.Writer, Checkpoints: checkpoints{m.cfg.Store, name}, Producers: ownedProducers{m.cfg.Store, m.cfg.Logger}, Fillers: m.cfg.Fillers,
			HangingAfter: m.cfg.HangingTxnAfter, Recovering: recovering, Base: m.failbackBase(tp), TxnTimeout: m.txnTimeoutNow(),
			OnChange: func(st partition.Status) { m.persistPartition(ctx, tp, st) },
			Logger:   m.log.Named("partition"),
		}
		var pr partitionRecord
		persisted := ReadRecord(m.cfg.Store, partitionKey(name, tp), &pr)
		if persisted && m.restorePartition(tp, cfg, pr) {
			// Failed, paused and stopped partitions stay so across
			// restarts until an operation moves them; a failover stop
			// that was under way is finished.
			continue
		}
		pm := partition.New(cfg)
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		m.mu.Lock()
		m.parts[tp] = &runningPartition{pm: pm, stop: stop, done: done}
		m.mu.Unlock()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer close(done)
			defer f.Remove(tp)
			defer stop()
			pm.Run(pctx)
		}()
		if persisted && pr.State == partition.Stopping && pr.StopMode == StopPromote {
			// A promote that was under way fences the source again
			// (idempotent) and waits for lag 0 again.
			if !m.fences.fenceOf(topic).done {
				if err := m.fenceSource(ctx, []string{topic}); err != nil {
					m.log.Error("promote resumed after a restart: fencing the source failed; the promote waits for producers to stop", "topic", topic, "error", err)
					m.fences.tried([]string{topic}, err.Error())
				}
			}
			m.startPromote(tp, pm)
		}
	}
	return nil
}

// failTopic stops every partition of topic and marks it FAILED with r,
// persisted, so that a restart does not resume it either.
func (m *Runner) failTopic(ctx context.Context, topic string, partitions int32, r reason.Error) {
	for p := int32(0); p < partitions; p++ {
		tp := fetcher.TP{Topic: topic, Partition: p}
		m.mu.Lock()
		rp, ok := m.parts[tp]
		if !ok {
			rp = &runningPartition{pm: m.idlePartition(tp), done: closedDone()}
			m.parts[tp] = rp
		}
		if s := rp.pm.Status().State; s == partition.Stopped || s == partition.Stopping {
			// Stopped is final, and a stop under way finishes.
			m.mu.Unlock()
			continue
		}
		stop := rp.stop
		rp.stop, rp.placeholder = nil, false
		m.mu.Unlock()
		if stop != nil {
			stop()
		}
		if st := rp.pm.Status(); st.State == partition.Failed && st.Reason == r.Message && st.ReasonCode == r.Code {
			continue
		}
		rp.pm.Restore(partition.Failed, r)
		m.persistPartition(ctx, tp, rp.pm.Status())
	}
}

// Status is the mirror as describe shows it.
func (m *Runner) Status() mirrorapi.Mirror {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := mirrorapi.Mirror{Name: m.spec.Name, Source: kafkaconn.Redact(m.spec.Source), TopicRegex: slices.Clone(m.spec.TopicRegex), Error: m.err, Warnings: slices.Clone(m.warnings), StateCounts: map[partition.State]int{}, Sync: m.sync.tracker.Status()}
	m.settingsLocked(&st)
	if m.fetch != nil {
		st.BufferedBytes = m.fetch.Buffered()
	}
	m.throttle.statusInto(&st, m.spec.Topics)
	byTopic := map[string]*mirrorapi.Topic{}
	for _, t := range m.spec.Topics {
		ro := m.fences.readOnlyOf(t)
		byTopic[t] = &mirrorapi.Topic{Name: t, Error: m.topicErrs[t], ErrorCode: m.topicErrCodes[t], ReadOnlyEnforced: ro.enforced, ReadOnlyReason: ro.reason, Failback: m.failbackStatus(t)}
		if f := m.fences.fenceOf(t); f.reason != "" {
			st.Warnings = append(st.Warnings, fmt.Sprintf("topic %s: promote: %s", t, f.reason))
		}
	}
	if c := m.cfg.ReadOnly.Last(); c != nil && c.Authorizer && !c.SuperUser {
		st.Warnings = append(st.Warnings, "mirror topics are not read-only: "+c.Reason)
	}

	for tp, rp := range m.parts {
		ts, ok := byTopic[tp.Topic]
		if !ok {
			continue
		}
		ps := rp.pm.Status()
		ps.StopMode = string(m.life.modeOf(tp, ps.State))
		ts.Partitions = append(ts.Partitions, ps)
		st.StateCounts[ps.State]++
		st.MaxLag = max(st.MaxLag, ps.Lag)
	}
	for _, t := range m.spec.Topics {
		ts := byTopic[t]
		sort.Slice(ts.Partitions, func(i, j int) bool { return ts.Partitions[i].Partition < ts.Partitions[j].Partition })
		st.Topics = append(st.Topics, *ts)
	}
	return st
}

// txnTimeoutNow is the timeout of the destination transactions of the
// partitions started now: the last preflight's choice (zero before the
// first: partition.New's default).
func (m *Runner) txnTimeoutNow() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.txnTimeout
}

// sourceReader is what a partition mirror reads of its source cluster.
type sourceReader struct {
	cl   *kgo.Client
	meta *leaders.Cache
}

func (s sourceReader) Bounds(ctx context.Context, topic string, partition int32) (leaders.Bounds, error) {
	return s.meta.Bounds(ctx, topic, partition)
}

func (s sourceReader) ReadAt(ctx context.Context, tp fetcher.TP, offset int64, maxBytes int32) (fetcher.Chunk, error) {
	return fetcher.ReadAt(ctx, s.cl, s.meta, tp, offset, maxBytes)
}

// interval is the mirror's metadata refresh interval: its spec's, else the
// agent's.
func (m *Runner) interval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.intervalLocked()
}

// intervalLocked is interval with m.mu held.
func (m *Runner) intervalLocked() time.Duration {
	if ms := m.spec.MetadataRefreshIntervalMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return m.cfg.RefreshInterval
}

// settingsLocked puts the mirror's settings into st with the defaults they
// stand for resolved, so that describe says what the agent does and a client
// (the Terraform provider) can compare them with what it declared.
func (m *Runner) settingsLocked(st *mirrorapi.Mirror) {
	st.SourceClusterID = m.sourceClusterID
	eff := m.spec.WithDefaults()
	st.TopicConfigExclude, st.GroupsInclude, st.GroupsExclude, st.ACLInclude = eff.TopicConfigExclude, eff.GroupsInclude, eff.GroupsExclude, eff.ACLInclude
	st.MetadataRefreshIntervalMs = m.intervalLocked().Milliseconds()
	st.TxnTimeoutMs, st.TxnTimeoutFrom = m.txnTimeout.Milliseconds(), m.txnTimeoutFrom
}
