package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchMaxBytes bounds one fetch response, and so the memory a reader holds:
// a reader keeps at most one response's records (plus one look-ahead fetch).
// Brokers still return a first batch larger than this whole (KIP-74).
const fetchMaxBytes = 1 << 20

// maxAttempts bounds retries of one fetch: leader moves and similar
// retriable errors, and fetches that made no progress.
const maxAttempts = 20

// retryBackoff is the pause between retries. It is a retry pace for a broker
// that is moving a leader, not a synchronisation point.
const retryBackoff = 100 * time.Millisecond

// partitionReader walks the consumer-visible records of one partition of one
// side, at one isolation level, in offset order, over [next, end).
//
// It issues raw Fetch requests to the partition leader instead of running a
// kgo consumer, because it must know exactly where the log it has read ends:
// kgo's processing (kgo.ProcessFetchPartition) returns, with the visible
// records, the next offset to fetch after control batches, aborted
// transactional batches and compaction holes. A consumer only shows the
// records, so a range that ends in invisible offsets could never be told
// apart from data still to come.
type partitionReader struct {
	cl        *kgo.Client
	side      Side
	topic     string
	topicID   [16]byte
	partition int32
	leader    int32
	isolation Isolation

	next int64 // next offset to fetch
	end  int64 // exclusive bound: records at or above it are dropped

	buf    []*kgo.Record
	decomp kgo.Decompressor
}

func newPartitionReader(cl *kgo.Client, side Side, topic string, topicID [16]byte, partition, leader int32, iso Isolation, from, end int64) *partitionReader {
	return &partitionReader{
		cl:        cl,
		side:      side,
		topic:     topic,
		topicID:   topicID,
		partition: partition,
		leader:    leader,
		isolation: iso,
		next:      from,
		end:       end,
		decomp:    kgo.DefaultDecompressor(),
	}
}

// peek returns the n-th upcoming visible record (0 is the next one), or nil
// when fewer than n+1 visible records remain before end.
func (r *partitionReader) peek(ctx context.Context, n int) (*kgo.Record, error) {
	for len(r.buf) <= n && r.next < r.end {
		if err := r.fetch(ctx); err != nil {
			return nil, err
		}
	}
	if len(r.buf) <= n {
		return nil, nil
	}
	return r.buf[n], nil
}

// pop drops the next record; callers peek it first.
func (r *partitionReader) pop() {
	r.buf[0] = nil // let the record be collected
	r.buf = r.buf[1:]
}

// fetch reads one response's worth of records from r.next and appends the
// visible ones below end to buf.
func (r *partitionReader) fetch(ctx context.Context) error {
	var lastErr error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(retryBackoff):
			}
		}
		progressed, err := r.fetchOnce(ctx)
		if err == nil && progressed {
			return nil
		}
		if err == nil {
			lastErr = fmt.Errorf("fetch at offset %d returned nothing", r.next)
			continue
		}
		var retry *retriableError
		if !errors.As(err, &retry) {
			return err
		}
		lastErr = retry.err
		if err := r.refreshLeader(ctx); err != nil {
			lastErr = errors.Join(lastErr, err)
		}
	}
	return fmt.Errorf("%s %s[%d] %s: no progress at offset %d after %d attempts: %w",
		r.side, r.topic, r.partition, r.isolation, r.next, maxAttempts, lastErr)
}

// retriableError marks fetch failures that a leader refresh and a retry may
// cure.
type retriableError struct{ err error }

func (e *retriableError) Error() string { return e.err.Error() }

// fetchOnce issues one Fetch request. It reports whether the reader moved
// forward.
func (r *partitionReader) fetchOnce(ctx context.Context) (bool, error) {
	req := kmsg.NewPtrFetchRequest()
	// No long poll: every offset below end already exists, so waiting for
	// more data would only add latency.
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = fetchMaxBytes
	req.IsolationLevel = r.isolation.level()
	t := kmsg.NewFetchRequestTopic()
	t.Topic = r.topic
	t.TopicID = r.topicID
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition = r.partition
	p.FetchOffset = r.next
	p.PartitionMaxBytes = fetchMaxBytes
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)

	resp, err := req.RequestWith(ctx, r.cl.Broker(int(r.leader)))
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		// Connection-level failures (a broker going away) are worth a
		// retry against a freshly looked-up leader.
		return false, &retriableError{fmt.Errorf("fetch from broker %d: %w", r.leader, err)}
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return false, r.classify(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return false, fmt.Errorf("%s %s[%d]: fetch response has %d topics, expected one topic with one partition",
			r.side, r.topic, r.partition, len(resp.Topics))
	}
	rp := &resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		if errors.Is(err, kerr.OffsetOutOfRange) {
			return false, fmt.Errorf("%s %s[%d]: offset %d is no longer readable (log start %d, high watermark %d): the log changed during verify: %w",
				r.side, r.topic, r.partition, r.next, rp.LogStartOffset, rp.HighWatermark, err)
		}
		return false, r.classify(err)
	}

	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         r.next,
		IsolationLevel: r.isolation.kgo(),
		Topic:          r.topic,
		Partition:      r.partition,
	}, rp, r.decomp, nil)
	if fp.Err != nil {
		return false, fmt.Errorf("%s %s[%d]: decoding fetch at offset %d: %w", r.side, r.topic, r.partition, r.next, fp.Err)
	}
	for _, rec := range fp.Records {
		if rec.Offset >= r.end {
			break
		}
		r.buf = append(r.buf, rec)
	}
	if next > r.next {
		r.next = next
		return true, nil
	}
	// Nothing moved. If the log now ends below where we expected it to,
	// waiting will not help: the log was truncated under us.
	logEnd := rp.HighWatermark
	if r.isolation == ReadCommitted && rp.LastStableOffset >= 0 {
		logEnd = rp.LastStableOffset
	}
	if logEnd <= r.next {
		return false, fmt.Errorf("%s %s[%d] %s: log ends at %d, below the end %d measured before reading: the log was truncated during verify",
			r.side, r.topic, r.partition, r.isolation, logEnd, r.end)
	}
	return false, nil
}

func (r *partitionReader) classify(err error) error {
	err = fmt.Errorf("%s %s[%d] fetch at offset %d: %w", r.side, r.topic, r.partition, r.next, err)
	if kerr.IsRetriable(err) {
		return &retriableError{err}
	}
	return err
}

// refreshLeader looks the partition leader up again after a retriable error,
// which is how leader moves show up.
func (r *partitionReader) refreshLeader(ctx context.Context) error {
	md, err := kadm.NewClient(r.cl).Metadata(ctx, r.topic)
	if err != nil {
		return fmt.Errorf("refreshing %s metadata for %s: %w", r.side, r.topic, err)
	}
	td, ok := md.Topics[r.topic]
	if !ok || td.Err != nil {
		return fmt.Errorf("refreshing %s metadata for %s: topic missing: %v", r.side, r.topic, td.Err)
	}
	pd, ok := td.Partitions[r.partition]
	if !ok {
		return fmt.Errorf("refreshing %s metadata for %s: partition %d missing", r.side, r.topic, r.partition)
	}
	r.leader = pd.Leader
	r.topicID = td.ID
	return nil
}
