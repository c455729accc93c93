// Package coordinator owns the agent's mirrors: it keeps their registry,
// persists their specs and throttles in the state topic, and serves the admin
// operations on them. Each mirror runs in a runner of package mirror, which
// the coordinator alone starts and stops.
package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/kafkaconn"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/agent/mirror"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// Config is what a coordinator runs with.
type Config struct {
	// Destination connects to the destination cluster (seed brokers, TLS,
	// SASL).
	Destination []kgo.Opt
	// SourceOpts turns a mirror's Source into client options; the default
	// is kafkaconn.Options (bootstrap servers, TLS, SASL, secrets resolved
	// with SecretBox).
	SourceOpts func(mirrorspec.Source) []kgo.Opt
	// SecretBox seals the literal secrets of mirror sources before the
	// state topic keeps them, and opens them to connect. Without it, a
	// literal secret is refused (references are accepted).
	SecretBox  *secrets.Box
	StateTopic string
	// BufferBytes bounds fetched-but-unwritten bytes across all mirrors
	// (default 256 MiB).
	BufferBytes int64
	// RefreshInterval is how often source topics are checked for new
	// partitions (mirror.metadata.refresh.interval.ms, default 30s).
	RefreshInterval time.Duration
	// Fillers is how invisible destination offsets are written (default
	// partition.FillCoordinator).
	Fillers partition.FillerMethod
	// AbortSpan is how long a destination transaction of aborted source
	// records may stay open over the markers of a fetch (partition.Config;
	// default 1s). Tests set it.
	AbortSpan time.Duration
	// HangingTxnAfter is how long a source transaction may stall a caught-up
	// partition before describe reports it (default 30s).
	HangingTxnAfter time.Duration
	// StopTimeout bounds a failover stop of a partition (default 30s): the
	// partition mirror is halted at a batch boundary, or cancelled, and
	// its destination side finished within it, with the source reachable
	// or not.
	StopTimeout time.Duration
	// PromoteTimeout bounds how long a promote waits for lag 0 (default
	// 10 minutes); then the partition goes back to MIRRORING with a
	// reason that says what it waited for.
	PromoteTimeout time.Duration
	// SourceFence fences writes on the source topics when a promote
	// starts; nil fences nothing, and promotes say so (see SourceFence;
	// ACLSourceFence fences with a DENY WRITE ACL).
	SourceFence SourceFence
	// Owner, when set, divides the mirrors among the agents of the
	// destination (group mode, group.go): the coordinator follows the
	// state topic, runs only the mirrors the group gives it, and every
	// write for one asks Owner whether this agent still owns it.
	Owner Owner
	// MarkersDeadline, when set, is how long the destination may take to
	// answer filler markers before the writer resets their connection
	// (writer.SetMarkersDeadline): in group mode, within the member's
	// write grace.
	MarkersDeadline time.Duration
	// AgentID is this agent's id in the group (group mode).
	AgentID string
	Logger  hclog.Logger
}

// Coordinator keeps the mirrors of one agent and runs each in a
// mirror.Runner.
type Coordinator struct {
	cfg    Config
	log    hclog.Logger
	store  *statestore.Store
	dst    *kgo.Client
	writer *writer.Writer
	// ro makes mirror topics read-only; runners share it (mirror.ReadOnly).
	ro *mirror.ReadOnly
	// runners is what every runner shares.
	runners *mirror.Config

	mu      sync.Mutex
	runCtx  context.Context
	mirrors map[string]*mirror.Runner
	// stopping are mirrors the group took from this agent, closed once
	// their runner stopped (group mode).
	stopping map[string]chan struct{}
	// stopped tells follow that a mirror in stopping has stopped.
	stopped chan struct{}
	// granted are the items of the group's last view reconciled.
	granted map[string]membership.Grant
	// placed are the partition records Items read last, decoded.
	placedMu sync.Mutex
	placed   map[string]placement
}

// MirrorStatus is one mirror as describe shows it.
type MirrorStatus = mirrorapi.Mirror

// TopicStatus is one mirror topic.
type TopicStatus = mirrorapi.Topic

func mirrorKey(name string) string { return "mirror/" + name }

// New connects to the destination and loads the state topic.
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = 256 << 20
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	if cfg.PromoteTimeout <= 0 {
		cfg.PromoteTimeout = 10 * time.Minute
	}
	if cfg.SourceFence == nil {
		cfg.SourceFence = NoSourceFence{}
	}
	dst, err := kgo.NewClient(writer.ClientOpts(cfg.Destination)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination: %w", err)
	}
	if err := dst.Ping(ctx); err != nil {
		dst.Close()
		return nil, fmt.Errorf("connecting to the destination: %w", err)
	}
	store, err := statestore.Open(ctx, cfg.Destination, cfg.StateTopic)
	if err != nil {
		dst.Close()
		return nil, err
	}
	dstAdm := kadm.NewClient(dst)
	w := writer.New(dst, leaders.New(dst))
	w.SetMarkersDeadline(cfg.MarkersDeadline)
	c := &Coordinator{
		cfg:      cfg,
		log:      cfg.Logger,
		store:    store,
		dst:      dst,
		writer:   w,
		mirrors:  map[string]*mirror.Runner{},
		stopping: map[string]chan struct{}{},
		stopped:  make(chan struct{}, 1),
		// The agent's own writing client: Check produces through a
		// DENY with it to learn whether the agent is a super user.
		ro: mirror.NewReadOnly(readonly.New(dstAdm, readonly.WithClient(dst)), cfg.Logger),
	}
	c.runners = &mirror.Config{
		Store: store, Destination: dst, DestinationOpts: cfg.Destination, Admin: dstAdm,
		Writer: w, Budget: fetcher.NewBudget(cfg.BufferBytes), ReadOnly: c.ro,
		SourceOpts: c.sourceOpts, Registry: registry{c},
		RefreshInterval: cfg.RefreshInterval, Fillers: cfg.Fillers, HangingTxnAfter: cfg.HangingTxnAfter, AbortSpan: cfg.AbortSpan,
		StopTimeout: cfg.StopTimeout, PromoteTimeout: cfg.PromoteTimeout, SourceFence: cfg.SourceFence,
		Logger: cfg.Logger,
	}
	// Once per destination, at start; a check that does not conclude is
	// retried at the mirrors' topic syncs.
	c.ro.Check(ctx)
	return c, nil
}

// Close releases the coordinator's connections; call it after Run returns.
func (c *Coordinator) Close() {
	c.store.Close()
	c.dst.Close()
}

// Mirrors returns the specs of every persisted mirror, by name.
func (c *Coordinator) Mirrors() []mirrorspec.Spec {
	recs, _ := c.records()
	out := make([]mirrorspec.Spec, 0, len(recs))
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		out = append(out, recs[name].Spec)
	}
	return out
}

// Apply creates a mirror, or updates its spec (topics may be added; the
// source cannot change). It persists the spec before it takes effect.
func (c *Coordinator) Apply(ctx context.Context, spec mirrorspec.Spec) error {
	if err := c.check(spec); err != nil {
		return err
	}
	// Literal secrets reach the state topic, and the running mirror,
	// sealed; they are opened only to connect.
	sealed, err := kafkaconn.Seal("source", spec.Source, c.cfg.SecretBox)
	if err != nil {
		return &InvalidSpecError{Err: err}
	}
	spec.Source = sealed
	var rec mirror.Record
	if v, ok := c.store.Get(mirrorKey(spec.Name)); ok {
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("reading mirror %q from the state topic: %w", spec.Name, err)
		}
		if !slices.Equal(rec.Spec.Source.BootstrapServers, spec.Source.BootstrapServers) {
			c.log.Info("mirror source bootstrap changed", "mirror", spec.Name)
		}
		rec.Spec = spec
	} else {
		pid, epoch, err := c.writer.InitProducerID(ctx)
		if err != nil {
			return fmt.Errorf("creating mirror %q: %w", spec.Name, err)
		}
		rec = mirror.Record{Spec: spec, ProducerID: pid, Epoch: epoch, Created: time.Now().UTC()}
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := c.store.Put(ctx, mirrorKey(spec.Name), v); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.mirrors[spec.Name]; ok {
		m.SetSpec(spec)
	} else if c.runCtx != nil {
		c.startLocked(rec)
	}
	if c.cfg.Owner != nil {
		c.cfg.Owner.Refresh() // a new mirror is offered to the group
	}
	return nil
}

// sourceOpts are the options of every source client of a mirror: its
// connection, and the client id its source quota names.
func (c *Coordinator) sourceOpts(spec mirrorspec.Spec) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.cfg.SourceOpts != nil {
		opts = c.cfg.SourceOpts(spec.Source)
	} else {
		var err error
		if opts, err = kafkaconn.Options("source", spec.Source, c.cfg.SecretBox); err != nil {
			return nil, err
		}
	}
	// A stable client id per mirror is what a throttle's source quota
	// (consumer_byte_rate) applies to.
	return append(opts[:len(opts):len(opts)], kgo.ClientID(mirrorapi.SourceQuotaClientID(spec.Name))), nil
}

// Run runs every persisted mirror, and those applied later, until ctx ends;
// in group mode (Config.Owner), those the group gives this agent.
func (c *Coordinator) Run(ctx context.Context) error {
	recs, unreadable := c.records()
	for k, err := range unreadable {
		c.log.Error("skipping unreadable mirror record", "key", k, "error", err)
	}
	c.mu.Lock()
	c.runCtx = ctx
	if c.cfg.Owner == nil { // in group mode, follow starts them
		for _, rec := range recs {
			c.startLocked(rec)
		}
	}
	c.mu.Unlock()
	if c.cfg.Owner != nil {
		c.follow(ctx)
	}
	<-ctx.Done()
	c.mu.Lock()
	ms := make([]*mirror.Runner, 0, len(c.mirrors))
	for _, m := range c.mirrors {
		ms = append(ms, m)
	}
	stopping := slices.Collect(maps.Values(c.stopping))
	c.mu.Unlock()
	for _, m := range ms {
		m.Wait()
	}
	for _, done := range stopping {
		<-done
	}
	return nil
}

func (c *Coordinator) startLocked(rec mirror.Record) {
	if c.cfg.Owner != nil {
		// What of it the group gives this agent, if anything.
		view := c.cfg.Owner.View()
		want, _ := shares(view, time.Now())
		if sh := want[rec.Spec.Name]; sh != nil {
			c.startShareLocked(rec, sh, view)
		}
		return
	}
	m := mirror.New(c.runners, rec)
	var t mirrorapi.Throttle
	if mirror.ReadRecord(c.store, throttleKey(rec.Spec.Name), &t) {
		m.SetThrottle(&t) // before its first fetch
	}
	c.mirrors[rec.Spec.Name] = m
	m.Start(c.ownerCtx(c.runCtx, rec.Spec.Name)) // Delete (admin.go) stops one mirror
}

// Describe returns the status of every mirror, sorted by name.
func (c *Coordinator) Describe() []MirrorStatus {
	c.mu.Lock()
	ms := make([]*mirror.Runner, 0, len(c.mirrors))
	for _, m := range c.mirrors {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	out := make([]MirrorStatus, 0, len(ms))
	for _, m := range ms {
		st := m.Status()
		if c.cfg.Owner != nil {
			st.Agent = c.cfg.AgentID
			for i := range st.Topics {
				for j := range st.Topics[i].Partitions {
					st.Topics[i].Partitions[j].Agent = c.cfg.AgentID
				}
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
