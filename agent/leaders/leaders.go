// Package leaders caches which broker leads each partition of a cluster, so
// that the fetcher and the writer can address raw requests to the leader and
// refresh only when a broker says it no longer leads.
package leaders

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Partition is the leader of one partition at one leader epoch.
type Partition struct {
	Leader int32
	Epoch  int32
}

// Topic is what metadata says of one topic.
type Topic struct {
	ID         [16]byte
	Partitions []Partition // indexed by partition number
}

// Cache holds the last metadata seen for the topics asked about.
type Cache struct {
	cl *kgo.Client
	// minAge keeps a burst of NOT_LEADER errors from turning into a burst of
	// metadata requests.
	minAge time.Duration

	mu      sync.Mutex
	topics  map[string]Topic
	fetched map[string]time.Time
	brokers map[int32]string // host:port by node id, from the last metadata
	moves   atomic.Uint64    // times a broker's address changed in brokers
}

// New returns a cache that asks cl for metadata.
func New(cl *kgo.Client) *Cache {
	return &Cache{cl: cl, minAge: 250 * time.Millisecond, topics: map[string]Topic{}, fetched: map[string]time.Time{}, brokers: map[int32]string{}}
}

// ErrUnknownTopic is returned for topics the cluster does not have.
var ErrUnknownTopic = kerr.UnknownTopicOrPartition

// Topic returns the cached metadata of topic, fetching it when absent.
func (c *Cache) Topic(ctx context.Context, topic string) (Topic, error) {
	c.mu.Lock()
	t, ok := c.topics[topic]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	return c.Refresh(ctx, topic)
}

// Leader returns the leader of a partition.
func (c *Cache) Leader(ctx context.Context, topic string, partition int32) (Partition, error) {
	t, err := c.Topic(ctx, topic)
	if err != nil {
		return Partition{}, err
	}
	if int(partition) >= len(t.Partitions) {
		// The topic may have grown since the cache was filled.
		if t, err = c.Refresh(ctx, topic); err != nil {
			return Partition{}, err
		}
		if int(partition) >= len(t.Partitions) {
			return Partition{}, fmt.Errorf("topic %q has %d partitions, not partition %d: %w", topic, len(t.Partitions), partition, kerr.UnknownTopicOrPartition)
		}
	}
	p := t.Partitions[partition]
	if p.Leader < 0 {
		return p, fmt.Errorf("partition %s/%d has no leader: %w", topic, partition, kerr.LeaderNotAvailable)
	}
	return p, nil
}

// Refresh fetches metadata for topic now (or returns what was fetched less
// than the minimum age ago).
func (c *Cache) Refresh(ctx context.Context, topic string) (Topic, error) {
	c.mu.Lock()
	if t, ok := c.topics[topic]; ok && time.Since(c.fetched[topic]) < c.minAge {
		c.mu.Unlock()
		return t, nil
	}
	c.mu.Unlock()

	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return Topic{}, fmt.Errorf("fetching metadata for topic %q: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return Topic{}, fmt.Errorf("fetching metadata for topic %q: %d topics in the response", topic, len(resp.Topics))
	}
	mt := resp.Topics[0]
	if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
		return Topic{}, fmt.Errorf("fetching metadata for topic %q: %w", topic, err)
	}
	t := Topic{ID: mt.TopicID, Partitions: make([]Partition, len(mt.Partitions))}
	for i := range t.Partitions {
		t.Partitions[i] = Partition{Leader: -1, Epoch: -1}
	}
	for _, p := range mt.Partitions {
		if int(p.Partition) >= len(t.Partitions) || p.Partition < 0 {
			continue
		}
		t.Partitions[p.Partition] = Partition{Leader: p.Leader, Epoch: p.LeaderEpoch}
		if kerr.ErrorForCode(p.ErrorCode) == kerr.LeaderNotAvailable {
			t.Partitions[p.Partition].Leader = -1
		}
	}
	c.mu.Lock()
	c.topics[topic] = t
	c.fetched[topic] = time.Now()
	for _, b := range resp.Brokers {
		addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		if old, ok := c.brokers[b.NodeID]; ok && old != addr {
			c.moves.Add(1)
		}
		c.brokers[b.NodeID] = addr
	}
	c.mu.Unlock()
	return t, nil
}

// Broker returns the address (host:port) a broker advertised in the last
// metadata that named it.
func (c *Cache) Broker(node int32) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.brokers[node]
	return a, ok
}

// Moves counts the times a broker came back at another address than the
// one the cache had for it (a restarted broker, a rescheduled pod). Clients
// that do not ask for metadata themselves compare it with what they last
// followed, see fetcher's followMoves.
// It takes no lock: the fetcher reads it before every fetch.
func (c *Cache) Moves() uint64 { return c.moves.Load() }

// Invalidate drops what is cached for topic, so the next lookup refreshes.
func (c *Cache) Invalidate(topic string) {
	c.mu.Lock()
	delete(c.topics, topic)
	c.mu.Unlock()
}

// IsLeadershipError says whether err means the request went to a broker that
// does not (or no longer) lead the partition, so metadata must be refreshed.
func IsLeadershipError(err error) bool {
	for _, e := range []error{
		kerr.NotLeaderForPartition, kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch,
		kerr.LeaderNotAvailable, kerr.UnknownTopicOrPartition, kerr.ReplicaNotAvailable,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Bounds is where a partition's log starts and ends.
type Bounds struct {
	LogStart      int64
	HighWatermark int64
	// LastStable is the first offset of the oldest open transaction, or the
	// high watermark when none is open.
	LastStable int64
}

// Bounds asks the partition's leader for its log start, high watermark and
// last stable offset.
func (c *Cache) Bounds(ctx context.Context, topic string, partition int32) (Bounds, error) {
	var b Bounds
	l, err := c.Leader(ctx, topic, partition)
	if err != nil {
		return b, err
	}
	// The three offsets are asked for at once: each is a request of its
	// own (ListOffsets takes one timestamp and isolation a partition), and
	// a filler's check of the end waits for them.
	queries := []struct {
		ts        int64
		isolation int8
		into      *int64
	}{{-2, 0, &b.LogStart}, {-1, 0, &b.HighWatermark}, {-1, 1, &b.LastStable}}
	errs := make([]error, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		wg.Go(func() { errs[i] = c.listOffset(ctx, l.Leader, topic, partition, q.ts, q.isolation, q.into) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// listOffset asks broker for one offset of a partition (ListOffsets with
// timestamp ts: -2 the log start, -1 the end) into into.
func (c *Cache) listOffset(ctx context.Context, broker int32, topic string, partition int32, ts int64, isolation int8, into *int64) error {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.CurrentLeaderEpoch = -1
	rp.Timestamp = ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := c.cl.Broker(int(broker)).Request(ctx, req)
	if err != nil {
		c.Invalidate(topic)
		return fmt.Errorf("listing offsets of %s/%d: %w", topic, partition, err)
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("listing offsets of %s/%d: malformed response", topic, partition)
	}
	rp0 := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(rp0.ErrorCode); err != nil {
		if IsLeadershipError(err) {
			c.Invalidate(topic)
		}
		return fmt.Errorf("listing offsets of %s/%d: %w", topic, partition, err)
	}
	*into = rp0.Offset
	return nil
}
