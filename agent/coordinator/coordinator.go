// Package coordinator owns the agent's mirrors: it persists their intent and
// per-partition state in the state topic, creates and grows destination
// topics, and runs one partition mirror per source partition. Nothing else
// starts or stops a partition mirror.
package coordinator

import (
	"context"
	"encoding/base64"
	"encoding/json"
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
	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
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
	// Gate, when set, is asked right before every write to the
	// destination (produce, transaction requests, DeleteRecords, ACL
	// changes, state records); an error refuses that write. The agent's
	// writer lease (agent/lease, Term.Check) is the gate, so that an agent
	// that lost the lease stops writing at once, whatever it was doing.
	Gate   func() error
	Logger hclog.Logger
}

// Coordinator runs the mirrors of one agent.
type Coordinator struct {
	cfg    Config
	log    hclog.Logger
	store  *statestore.Store
	dst    *kgo.Client
	dstAdm *kadm.Client
	writer *writer.Writer
	budget *fetcher.Budget

	// Read-only mirror topics (readonly.go): the destination's enforcer
	// and the result of its Check, nil until one concluded.
	ro          *readonly.Enforcer
	roMu        sync.Mutex
	roStatus    *readonly.Status
	roErr       string
	roCheckedAt time.Time

	mu      sync.Mutex
	runCtx  context.Context
	mirrors map[string]*mirror
}

// mirrorRecord is a mirror as the state topic keeps it.
type mirrorRecord struct {
	Spec mirrorspec.Spec `json:"spec"`
	// ProducerID and Epoch are the idempotent writer of every partition of
	// the mirror: fixed for its life so that sequences stay deterministic.
	ProducerID int64     `json:"producer_id"`
	Epoch      int16     `json:"producer_epoch"`
	Created    time.Time `json:"created"`
}

// partitionRecord is a partition's persisted state.
type partitionRecord struct {
	State  partition.State `json:"state"`
	Reason string          `json:"reason,omitempty"`
	// ReasonCode is Reason's code (package reason); empty in records
	// written before codes were kept.
	ReasonCode mirrorapi.ReasonCode `json:"reason_code,omitempty"`
	// LastMirroredOffset is the last offset mirrored: the destination end
	// minus one when the partition paused or stopped (KIP-1279's LMO),
	// the figure last reported otherwise (0 in records written before it
	// was kept).
	LastMirroredOffset int64 `json:"last_mirrored_offset"`
	// StopMode is how a STOPPING partition stops, to finish the stop
	// after a restart, and how a STOPPED one stopped (describe shows it).
	StopMode StopMode `json:"stop_mode,omitempty"`
}

// legacyRealignFailed is how a record written before reason codes were kept
// says SourceTopicRecreatedRealignFailed.
const legacyRealignFailed = "a recover cannot re-align it"

// UnmarshalJSON reads a record. One written before reason codes were kept
// gets the code that a decision branches on from the message it kept: the
// one place a message is read for its meaning, and only for old records.
func (pr *partitionRecord) UnmarshalJSON(b []byte) error {
	type plain partitionRecord
	if err := json.Unmarshal(b, (*plain)(pr)); err != nil {
		return err
	}
	if pr.ReasonCode == "" && pr.State == partition.Failed && strings.Contains(pr.Reason, legacyRealignFailed) {
		pr.ReasonCode = reason.SourceTopicRecreatedRealignFailed
	}
	return nil
}

// topicRecord is what the agent remembers of a mirror topic.
type topicRecord struct {
	SourceTopicID topicID `json:"source_topic_id"`
	// DestinationTopicID is the mirror topic's id on the destination (zero
	// in records written before it was kept, or when the broker reports
	// none): a new id means the topic was deleted and recreated there.
	DestinationTopicID topicID `json:"destination_topic_id"`
}

// topicID is a topic id as the state topic keeps it, in kadm's JSON form
// (base64), which kadm.TopicID writes but cannot read back.
type topicID kadm.TopicID

func (t topicID) String() string               { return kadm.TopicID(t).String() }
func (t topicID) MarshalJSON() ([]byte, error) { return kadm.TopicID(t).MarshalJSON() }

func (t *topicID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("topic id %q: %w", s, err)
	}
	if len(raw) != len(t) {
		return fmt.Errorf("topic id %q: %d bytes, want %d", s, len(raw), len(t))
	}
	copy(t[:], raw)
	return nil
}

func mirrorKey(name string) string { return "mirror/" + name }
func topicKey(m, t string) string  { return "topic/" + m + "/" + t }
func partitionKey(m string, tp fetcher.TP) string {
	return fmt.Sprintf("partition/%s/%s/%d", m, tp.Topic, tp.Partition)
}
func alignmentKey(m string, tp fetcher.TP) string {
	return fmt.Sprintf("alignment/%s/%s/%d", m, tp.Topic, tp.Partition)
}

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
	store.SetGate(cfg.Gate)
	dstAdm := kadm.NewClient(dst)
	w := writer.New(dst, leaders.New(dst))
	w.SetGate(cfg.Gate)
	c := &Coordinator{
		cfg:     cfg,
		log:     cfg.Logger,
		store:   store,
		dst:     dst,
		dstAdm:  dstAdm,
		writer:  w,
		budget:  fetcher.NewBudget(cfg.BufferBytes),
		mirrors: map[string]*mirror{},
		// The agent's own writing client: Check produces through a
		// DENY with it to learn whether the agent is a super user.
		ro: readonly.New(dstAdm, readonly.WithClient(dst), readonly.WithGate(cfg.Gate)),
	}
	// Once per destination, at start; a check that does not conclude is
	// retried at the mirrors' topic syncs.
	c.checkReadOnly(ctx)
	return c, nil
}

// Close releases the coordinator's connections; call it after Run returns.
func (c *Coordinator) Close() {
	c.store.Close()
	c.dst.Close()
}

// Mirrors returns the specs of every persisted mirror, by name.
func (c *Coordinator) Mirrors() []mirrorspec.Spec {
	var out []mirrorspec.Spec
	for k, v := range c.store.All() {
		if !strings.HasPrefix(k, "mirror/") {
			continue
		}
		var r mirrorRecord
		if json.Unmarshal(v, &r) == nil {
			out = append(out, r.Spec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
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
	var rec mirrorRecord
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
		rec = mirrorRecord{Spec: spec, ProducerID: pid, Epoch: epoch, Created: time.Now().UTC()}
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
		m.setSpec(spec)
	} else if c.runCtx != nil {
		c.startLocked(rec)
	}
	return nil
}

// gate asks Config.Gate whether this agent may write now.
func (c *Coordinator) gate() error {
	if c.cfg.Gate == nil {
		return nil
	}
	return c.cfg.Gate()
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

// Run runs every persisted mirror, and those applied later, until ctx ends.
func (c *Coordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runCtx = ctx
	for k, v := range c.store.All() {
		if !strings.HasPrefix(k, "mirror/") {
			continue
		}
		var rec mirrorRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			c.log.Error("skipping unreadable mirror record", "key", k, "error", err)
			continue
		}
		c.startLocked(rec)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	ms := make([]*mirror, 0, len(c.mirrors))
	for _, m := range c.mirrors {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	for _, m := range ms {
		m.wait()
	}
	return nil
}

func (c *Coordinator) startLocked(rec mirrorRecord) {
	m := newMirror(c, rec)
	var t mirrorapi.Throttle
	if c.getJSON(throttleKey(rec.Spec.Name), &t) {
		m.setThrottle(&t) // before its first fetch
	}
	c.mirrors[rec.Spec.Name] = m
	ctx, cancel := context.WithCancel(c.runCtx)
	m.cancel = cancel // Delete (admin.go) stops one mirror
	m.ctx = ctx
	go m.run(ctx)
}

// Describe returns the status of every mirror, sorted by name.
func (c *Coordinator) Describe() []MirrorStatus {
	c.mu.Lock()
	ms := make([]*mirror, 0, len(c.mirrors))
	for _, m := range c.mirrors {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	out := make([]MirrorStatus, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// putJSON persists v under key.
func (c *Coordinator) putJSON(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.store.Put(ctx, key, b)
}

func (c *Coordinator) getJSON(key string, v any) bool {
	b, ok := c.store.Get(key)
	return ok && json.Unmarshal(b, v) == nil
}
