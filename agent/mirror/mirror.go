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

// Runner runs one mirror: see the package documentation. Its own lock
// guards the mirror's spec, its topics' errors and its partition table; each
// part keeps its state under a lock of its own and calls nothing of the
// runner, so the runner may call a part with its lock held, never the
// reverse.
type Runner struct {
	cfg *Config
	log hclog.Logger
	rec Record

	ctx     context.Context    // run's; set before anything else runs
	cancel  context.CancelFunc // ends run; set by Start
	done    chan struct{}      // closed when run has returned
	refresh chan struct{}      // makes the topic sync look again at once
	wg      sync.WaitGroup     // partition mirrors and sync loops of a connection
	ops     sync.WaitGroup     // lifecycle goroutines; run waits for them
	recMu   sync.Mutex         // orders the read-modify-writes of partition records

	mu            sync.Mutex
	spec          mirrorspec.Spec
	topicErrs     map[string]string      // why a topic is not mirrored
	topicErrCodes map[string]reason.Code // the codes of topicErrs that have one
	parts         map[fetcher.TP]*runningPartition
	held          map[fetcher.TP]bool // partitions the home holds back (holdBack)

	conn      *connection // the source connection (source.go)
	life      *lifecycle  // lifecycle operations and promotes (lifecycle.go, promote.go)
	fences    *fences     // read-only ACLs and source fences (readonly.go, fence.go)
	throttle  *throttle   // enforced by every fetcher of the mirror (throttle.go)
	sync      *metaSync   // metadata sync (metasync.go)
	recreates recreates   // recover with recreate (recreate.go)
	shared    *shared     // what of the mirror it runs; nil: all (share.go)
}

// New returns the runner of the mirror rec; Start runs it.
func New(cfg *Config, rec Record) *Runner {
	log := cfg.Logger.Named("mirror").With("mirror", rec.Spec.Name)
	return &Runner{
		cfg: cfg, log: log, rec: rec,
		ctx: context.Background(), done: make(chan struct{}), refresh: make(chan struct{}, 1),
		spec: rec.Spec, topicErrs: map[string]string{}, topicErrCodes: map[string]reason.Code{}, parts: map[fetcher.TP]*runningPartition{},
		conn:     &connection{log: log},
		life:     newLifecycle(),
		fences:   newFences(cfg.ReadOnly, log),
		throttle: newThrottle(),
		sync:     newMetaSync(log),
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
func (m *Runner) SourceClusterID() string { return m.conn.clusterIDNow() }

// KeepSourceClusterID makes describe show id, the source cluster id a
// previous runner of the mirror read, until this one connects.
func (m *Runner) KeepSourceClusterID(id string) { m.conn.setClusterID(id, true) }

// Producer is the producer id and epoch the runner writes with (its
// record's, fixed for its run).
func (m *Runner) Producer() (id int64, epoch int16) { return m.rec.ProducerID, m.rec.Epoch }

// Spec is the spec the runner follows.
func (m *Runner) Spec() mirrorspec.Spec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.spec
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
		m.conn.setErr(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// fetchConnections is how many connections a mirror fetches on from each
// source broker. Over a 50 ms link with 4 MiB windows, one fetch in flight
// per broker mirrored 118 MB/s of a 163 MB/s loopback; two keep the link
// busy while a response is on the wire.
const fetchConnections = 2

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
		m.conn.setClusterID(md.Cluster, false)
	}
	seeds, _ := m.cfg.Destination.OptValue(kgo.SeedBrokers).([]string)
	report, err := topics.Check(ctx, m.cfg.Admin, srcAdm, topics.CheckOptions{Topics: spec.Topics, DestinationBootstrap: seeds})
	if err != nil {
		return fmt.Errorf("preflight check of the destination: %w", err)
	}
	if err := report.Findings.Refusal(); err != nil {
		return err
	}
	m.conn.preflight(report)
	for _, f := range report.Findings {
		m.log.Warn("preflight", "finding", f.String())
	}
	m.conn.setErr(nil)

	// More fetch connections per source broker (see package fetcher): a
	// client of its own gives each one.
	var more []*kgo.Client
	for range fetchConnections - 1 {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("connecting to source %s: %w", strings.Join(spec.Source.BootstrapServers, ","), err)
		}
		defer cl.Close()
		more = append(more, cl)
	}
	srcMeta := leaders.New(src)
	f := fetcher.New(src, srcMeta, fetcher.Options{Budget: m.cfg.Budget, Throttle: m.throttle.limiter, Counters: m.throttle.counters, Connections: more, Logger: m.log.Named("fetcher")})
	m.conn.up(&sourceReader{src, srcMeta}, f)
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
		m.mu.Unlock()
		m.conn.down()
	}()
	home := m.Home()
	if home {
		m.wg.Go(func() { m.runSync(fctx, src) })
	}
	for {
		if home {
			m.discoverTopics(fctx, srcAdm)
		}
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

// Status is the mirror as describe shows it.
func (m *Runner) Status() mirrorapi.Mirror {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := mirrorapi.Mirror{Name: m.spec.Name, Source: kafkaconn.Redact(m.spec.Source), TopicRegex: slices.Clone(m.spec.TopicRegex), StateCounts: map[partition.State]int{}, Sync: m.sync.tracker.Status()}
	if !m.Home() {
		st.Share = mirrorapi.SharePartitions
	}
	m.conn.statusInto(&st)
	m.settingsLocked(&st)
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
	for tp := range m.held {
		ts, ok := byTopic[tp.Topic]
		if _, runs := m.parts[tp]; runs || !ok {
			continue
		}
		if m.shared.view.Load().listed(tp) {
			delete(m.held, tp) // placed: its agent describes it
			continue
		}
		ts.Partitions = append(ts.Partitions, heldStatus(m.spec.Name, tp))
		st.StateCounts[partition.Initializing]++
	}
	for _, t := range m.spec.Topics {
		ts := byTopic[t]
		sort.Slice(ts.Partitions, func(i, j int) bool { return ts.Partitions[i].Partition < ts.Partitions[j].Partition })
		st.Topics = append(st.Topics, *ts)
	}
	return st
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
	eff := m.spec.WithDefaults()
	st.TopicConfigExclude, st.GroupsInclude, st.GroupsExclude, st.ACLInclude = eff.TopicConfigExclude, eff.GroupsInclude, eff.GroupsExclude, eff.ACLInclude
	st.MetadataRefreshIntervalMs = m.intervalLocked().Milliseconds()
}
