package topics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrSourceTopicNotFound is wrapped by errors about a mirror topic that does
// not exist on the source cluster.
var ErrSourceTopicNotFound = errors.New("source topic not found")

// ErrDestinationHasMorePartitions is wrapped by Ensure's error when the
// destination topic has more partitions than the source. Kafka cannot remove
// partitions, and the extra ones have no source to mirror, so the topic cannot
// be made a mirror of this source without being recreated.
var ErrDestinationHasMorePartitions = errors.New("destination topic has more partitions than the source")

// Info describes a mirror topic on both clusters after Ensure.
type Info struct {
	Topic string `json:"topic"`

	// The topic ids on each side. They differ: a destination topic id cannot
	// be chosen through the protocol. The caller stores the source id and
	// stops mirroring when it changes (the source topic was recreated). A
	// zero id means the broker did not report one (Kafka < 2.8).
	SourceTopicID      kadm.TopicID `json:"source_topic_id"`
	DestinationTopicID kadm.TopicID `json:"destination_topic_id"`

	SourcePartitions      int32 `json:"source_partitions"`
	DestinationPartitions int32 `json:"destination_partitions"`

	// SourceCleanupPolicy is the source topic's effective cleanup.policy
	// ("" if the source did not report it).
	SourceCleanupPolicy string `json:"source_cleanup_policy"`

	// Created is true when this call created the destination topic.
	Created bool `json:"created"`
	// PartitionsAdded is how many partitions this call added to an existing
	// destination topic.
	PartitionsAdded int32 `json:"partitions_added"`
	// ConfigsSet holds the invariant configs this call changed on an
	// existing destination topic, with their new values.
	ConfigsSet map[string]string `json:"configs_set,omitempty"`
	// Warnings are conditions that do not stop mirroring but weaken it
	// (for example min.insync.replicas below 2 on a replicated topic).
	Warnings []string `json:"warnings,omitempty"`
}

// SourceCompacted reports whether the source topic is compacted. The
// destination topic then has cleanup.policy=compact,delete, so every record
// the agent writes there, padding included, needs a key.
func (i Info) SourceCompacted() bool { return isCompacted(i.SourceCleanupPolicy) }

// Manager creates and maintains destination topics. It is safe for
// concurrent use: it keeps no state besides its clients and options.
type Manager struct {
	dst, src *kadm.Client
	exclude  []string
	log      hclog.Logger

	mu     sync.Mutex
	warned map[string]string // topic: the min.insync.replicas warning logged last
}

// Option configures a Manager.
type Option func(*Manager)

// WithExclude sets mirror.topic.properties.exclude: source config keys that
// are not copied to a new destination topic. Nil (the default) means
// mirrorspec.DefaultTopicConfigExclude.
func WithExclude(keys []string) Option {
	return func(m *Manager) { m.exclude = slices.Clone(keys) }
}

// WithLogger sets the logger; the default discards everything.
func WithLogger(l hclog.Logger) Option {
	return func(m *Manager) {
		if l != nil {
			m.log = l
		}
	}
}

// NewManager returns a Manager that creates topics through dst after reading
// them through src.
func NewManager(dst, src *kadm.Client, opts ...Option) *Manager {
	m := &Manager{dst: dst, src: src, log: hclog.NewNullLogger(), warned: map[string]string{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// sourceTopic is what Ensure needs to know about the source topic.
type sourceTopic struct {
	id         kadm.TopicID
	partitions int32
	// nonDefault are the configs set on the topic itself
	// (DYNAMIC_TOPIC_CONFIG): only those are copied, so that the
	// destination's own broker defaults apply to everything else.
	nonDefault map[string]string
	// maxMessageBytes and cleanupPolicy are the effective values, whatever
	// their source (a broker default of message.max.bytes or
	// log.cleanup.policy counts as much as a topic override).
	maxMessageBytes int32
	cleanupPolicy   string
}

// Ensure makes the destination topic a fit mirror of the source topic.
//
// When the destination topic does not exist, Ensure creates it with the
// source's partition count, the broker's default replication factor and
// DestinationConfigs. When it exists, Ensure grows it to the source's
// partition count (it never shrinks: more partitions on the destination is an
// error wrapping ErrDestinationHasMorePartitions) and sets, with
// IncrementalAlterConfigs so that no other config is touched, every invariant
// config that the topic does not itself set to a value satisfying
// DestinationConfigs; a value inherited from a broker default does not count,
// as the default can change. Other configs of an existing topic are left to
// config sync.
func (m *Manager) Ensure(ctx context.Context, topic string) (Info, error) {
	info := Info{Topic: topic}

	st, err := m.readSource(ctx, topic)
	if err != nil {
		return info, err
	}
	info.SourceTopicID = st.id
	info.SourcePartitions = st.partitions
	info.SourceCleanupPolicy = st.cleanupPolicy

	source := maps.Clone(st.nonDefault)
	if isCompacted(st.cleanupPolicy) && !isCompacted(source[keyCleanupPolicy]) {
		// Compacted by a broker default rather than a topic override:
		// the destination must still get compact,delete.
		source[keyCleanupPolicy] = st.cleanupPolicy
	}
	want := DestinationConfigs(source, m.exclude, st.maxMessageBytes)

	dt, exists, err := describeTopic(ctx, m.dst, topic)
	if err != nil {
		return info, fmt.Errorf("reading destination topic %q: %w", topic, err)
	}
	if !exists {
		created, err := m.create(ctx, topic, st.partitions, want)
		switch {
		case err == nil:
			info.Created = true
			info.DestinationTopicID = created.ID
			info.DestinationPartitions = st.partitions
			m.checkMinISR(&info, int(created.ReplicationFactor), configValue(created.Configs, keyMinInsyncReplicas))
			return info, nil
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Someone created it between our read and our create
			// (another agent, or an operator): treat it as existing.
			if dt, exists, err = describeTopic(ctx, m.dst, topic); err != nil {
				return info, fmt.Errorf("reading destination topic %q after a concurrent creation: %w", topic, err)
			}
			if !exists {
				return info, fmt.Errorf("destination topic %q: creation answered TOPIC_ALREADY_EXISTS but metadata does not show it yet; retry", topic)
			}
		default:
			return info, err
		}
	}

	info.DestinationTopicID = dt.ID
	info.DestinationPartitions = int32(len(dt.Partitions))
	if err := m.grow(ctx, &info); err != nil {
		return info, err
	}
	if err := m.setInvariant(ctx, &info, want, st.cleanupPolicy, dt.Partitions.NumReplicas()); err != nil {
		return info, err
	}
	return info, nil
}

// SourcePartitions returns the source topic's current partition count and
// topic id, bypassing client-side metadata caches. It is the cheap periodic
// check for partition growth (call Ensure when the count went up) and for
// topic recreation (the id changed). A missing topic gives an error wrapping
// ErrSourceTopicNotFound.
func (m *Manager) SourcePartitions(ctx context.Context, topic string) (int32, kadm.TopicID, error) {
	td, exists, err := describeTopic(ctx, m.src, topic)
	if err != nil {
		return 0, kadm.TopicID{}, fmt.Errorf("reading source topic %q: %w", topic, err)
	}
	if !exists {
		return 0, kadm.TopicID{}, fmt.Errorf("source topic %q: %w; create it on the source cluster or remove it from the mirror", topic, ErrSourceTopicNotFound)
	}
	return int32(len(td.Partitions)), td.ID, nil
}

// EnsureMaxMessageBytes raises the destination topic's max.message.bytes to
// at least batchBytes, for a source batch larger than the source's current
// limit (old batches can exceed it after the limit was lowered). It never
// lowers the value, and Ensure keeps a raised value (max.message.bytes is a
// lower bound). It reports whether it changed the topic.
func (m *Manager) EnsureMaxMessageBytes(ctx context.Context, topic string, batchBytes int32) (bool, error) {
	rc, err := describeConfigs(ctx, m.dst, topic)
	if err != nil {
		return false, fmt.Errorf("reading the configs of destination topic %q: %w", topic, err)
	}
	want := strconv.FormatInt(int64(max(batchBytes, DefaultMaxMessageBytes)), 10)
	for _, c := range rc.Configs {
		if c.Key == keyMaxMessageBytes && c.Source == kmsg.ConfigSourceDynamicTopicConfig && Satisfies(keyMaxMessageBytes, want, c.MaybeValue()) {
			return false, nil
		}
	}
	alter := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: keyMaxMessageBytes, Value: kadm.StringPtr(want)}}
	resp, err := m.dst.AlterTopicConfigs(ctx, alter, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		r, err = resp.On(topic, nil)
		if err == nil && r.Err != nil {
			err = fmt.Errorf("%w%s", r.Err, detail(r.ErrMessage))
		}
	}
	if err != nil {
		return false, fmt.Errorf("raising max.message.bytes of destination topic %q to %s for a %d-byte source batch: %w", topic, want, batchBytes, err)
	}
	m.log.Info("raised max.message.bytes of destination topic", "topic", topic, "to", want)
	return true, nil
}

// Source reads what a partition mirror needs of the source topic without
// touching the destination: its id, partition count and cleanup policy (the
// Info of a topic whose destination is another agent's to keep, group
// mode).
func (m *Manager) Source(ctx context.Context, topic string) (Info, error) {
	st, err := m.readSource(ctx, topic)
	if err != nil {
		return Info{}, err
	}
	return Info{Topic: topic, SourceTopicID: st.id, SourcePartitions: st.partitions, SourceCleanupPolicy: st.cleanupPolicy}, nil
}

// readSource reads the source topic's id, partition count and configs.
func (m *Manager) readSource(ctx context.Context, topic string) (sourceTopic, error) {
	n, id, err := m.SourcePartitions(ctx, topic)
	if err != nil {
		return sourceTopic{}, err
	}
	st := sourceTopic{id: id, partitions: n, nonDefault: map[string]string{}}

	rc, err := describeConfigs(ctx, m.src, topic)
	if err != nil {
		return st, fmt.Errorf("reading the configs of source topic %q: %w", topic, err)
	}
	for _, c := range rc.Configs {
		switch c.Key {
		case keyMaxMessageBytes:
			st.maxMessageBytes, _ = parseInt32(c.MaybeValue())
		case keyCleanupPolicy:
			st.cleanupPolicy = c.MaybeValue()
		}
		if c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			continue
		}
		if c.Value == nil {
			// Sensitive topic configs are not returned by the
			// broker; they cannot be copied.
			m.log.Warn("source topic config is sensitive and not copied", "topic", topic, "config", c.Key)
			continue
		}
		st.nonDefault[c.Key] = *c.Value
	}
	return st, nil
}

// create creates the destination topic.
func (m *Manager) create(ctx context.Context, topic string, partitions int32, configs map[string]string) (kadm.CreateTopicResponse, error) {
	ptrs := make(map[string]*string, len(configs))
	for k, v := range configs {
		ptrs[k] = kadm.StringPtr(v)
	}
	// Replication factor -1 takes the destination's
	// default.replication.factor: the destination's operators decide
	// durability, not the source's topology.
	resp, err := m.dst.CreateTopic(ctx, partitions, -1, ptrs, topic)
	if err != nil {
		if errors.Is(err, kerr.TopicAlreadyExists) {
			return resp, err
		}
		hint := ""
		if errors.Is(err, kerr.InvalidConfig) {
			hint = "; if a config copied from the source is unknown to the destination, add it to mirror.topic.properties.exclude"
		}
		return resp, fmt.Errorf("creating destination topic %q with %d partitions: %w%s%s", topic, partitions, err, detail(resp.ErrMessage), hint)
	}
	m.log.Info("created destination topic", "topic", topic, "partitions", partitions, "topic_id", resp.ID.String())
	return resp, nil
}

// grow adds partitions to the destination topic up to the source's count.
func (m *Manager) grow(ctx context.Context, info *Info) error {
	src, dst := info.SourcePartitions, info.DestinationPartitions
	switch {
	case dst == src:
		return nil
	case dst > src:
		return fmt.Errorf("destination topic %q has %d partitions but the source has %d: %w; "+
			"Kafka cannot remove partitions, and partitions %d..%d would have no source. "+
			"Delete the destination topic so that it is recreated (its data is lost)",
			info.Topic, dst, src, ErrDestinationHasMorePartitions, src, dst-1)
	}
	resp, err := m.dst.UpdatePartitions(ctx, int(src), info.Topic)
	if err == nil {
		var r kadm.CreatePartitionsResponse
		r, err = resp.On(info.Topic, nil)
		if err == nil && r.Err != nil {
			err = fmt.Errorf("%w%s", r.Err, detail(r.ErrMessage))
		}
	}
	if err != nil {
		return fmt.Errorf("growing destination topic %q from %d to %d partitions: %w", info.Topic, dst, src, err)
	}
	m.log.Info("added partitions to destination topic", "topic", info.Topic, "from", dst, "to", src)
	info.PartitionsAdded = src - dst
	info.DestinationPartitions = src
	return nil
}

// setInvariant sets every managed config of an existing destination topic
// that is not set on the topic itself to a value satisfying want.
func (m *Manager) setInvariant(ctx context.Context, info *Info, want map[string]string, sourceCleanupPolicy string, replicas int) error {
	rc, err := describeConfigs(ctx, m.dst, info.Topic)
	if err != nil {
		return fmt.Errorf("reading the configs of destination topic %q: %w", info.Topic, err)
	}
	// have holds only the topic's own overrides: an invariant value that
	// the topic merely inherits from a broker default is set on the topic
	// anyway, so that a later change of the destination's defaults (say
	// compression.type=zstd cluster-wide) cannot reach mirror topics.
	have := make(map[string]string, len(rc.Configs))
	effective := make(map[string]string, len(rc.Configs))
	for _, c := range rc.Configs {
		effective[c.Key] = c.MaybeValue()
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			have[c.Key] = c.MaybeValue()
		}
	}

	var alter []kadm.AlterConfig
	set := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !Managed(k, sourceCleanupPolicy) {
			continue
		}
		if v, ok := have[k]; ok && Satisfies(k, want[k], v) {
			continue
		}
		alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(want[k])})
		set[k] = want[k]
	}
	if len(alter) > 0 {
		resp, err := m.dst.AlterTopicConfigs(ctx, alter, info.Topic)
		if err == nil {
			var r kadm.AlterConfigsResponse
			r, err = resp.On(info.Topic, nil)
			if err == nil && r.Err != nil {
				err = fmt.Errorf("%w%s", r.Err, detail(r.ErrMessage))
			}
		}
		if err != nil {
			return fmt.Errorf("setting invariant configs %v on destination topic %q (the mirror needs them; grant ALTER_CONFIGS on the topic or set them by hand): %w",
				slices.Sorted(maps.Keys(set)), info.Topic, err)
		}
		for _, k := range slices.Sorted(maps.Keys(set)) {
			m.log.Info("set invariant config on destination topic", "topic", info.Topic, "config", k, "from", have[k], "to", set[k])
		}
		info.ConfigsSet = set
	}

	m.checkMinISR(info, replicas, effective[keyMinInsyncReplicas])
	return nil
}

// checkMinISR adds a warning when a replicated destination topic accepts
// acks=all writes held by a single replica: a leader failover can then lose
// records the agent counted as written, which shifts every later offset.
// An empty minISR means the broker did not report it.
// Every Ensure reports it; the log says it once, until it changes (each
// topic sync calls Ensure).
func (m *Manager) checkMinISR(info *Info, replicas int, minISR string) {
	n, err := strconv.Atoi(minISR)
	w := ""
	if err == nil && replicas > 1 && n < 2 {
		w = fmt.Sprintf("destination topic %q has %d replicas but min.insync.replicas=%d: acks=all writes can be acknowledged by the leader alone, "+
			"and a leader failover can then lose records and shift offsets; set min.insync.replicas=2 on the topic or as the destination's default",
			info.Topic, replicas, n)
		info.Warnings = append(info.Warnings, w)
	}
	m.mu.Lock()
	last := m.warned[info.Topic]
	m.warned[info.Topic] = w
	m.mu.Unlock()
	if w != "" && w != last {
		m.log.Warn(w)
	}
}

// describeTopic reads one topic's metadata. It bypasses kadm's metadata cache
// (kadm.WithAuthorizedOps makes kadm send the request instead of answering
// from a cache up to MetadataMinAge old): partition growth and topic
// recreation must be seen as they are, and a stale count after our own
// CreatePartitions would make the next call ask for the same growth again,
// which the broker refuses.
func describeTopic(ctx context.Context, cl *kadm.Client, topic string) (kadm.TopicDetail, bool, error) {
	md, err := cl.Metadata(kadm.WithAuthorizedOps(ctx), topic)
	if err != nil {
		return kadm.TopicDetail{}, false, err
	}
	td, ok := md.Topics[topic]
	switch {
	case !ok, errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return td, false, nil
	case td.Err != nil:
		return td, false, td.Err
	}
	return td, true, nil
}

// describeConfigs reads one topic's configs.
func describeConfigs(ctx context.Context, cl *kadm.Client, topic string) (kadm.ResourceConfig, error) {
	rcs, err := cl.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return kadm.ResourceConfig{}, err
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return rc, err
	}
	if rc.Err != nil {
		return rc, fmt.Errorf("%w%s", rc.Err, detail(rc.ErrMessage))
	}
	return rc, nil
}

// configValue returns a config's value from a CreateTopics response, "" when
// absent (brokers before 2.4 and kfake return no or only the requested
// configs).
func configValue(cs map[string]kadm.Config, key string) string {
	c, ok := cs[key]
	if !ok {
		return ""
	}
	return c.MaybeValue()
}

// detail formats a broker's error message for appending to an error.
func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}
