package fetcher

import (
	"context"
	"fmt"
	"iter"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// ReadAt fetches once from the leader of tp, starting at offset, reading
// uncommitted data (every batch, control batches included) up to maxBytes.
// It is for reading a log's tail, not for streaming.
func ReadAt(ctx context.Context, cl *kgo.Client, meta *leaders.Cache, tp TP, offset int64, maxBytes int32) (Chunk, error) {
	l, err := meta.Leader(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return Chunk{}, fmt.Errorf("reading %s at %d: %w", tp, offset, err)
	}
	md, err := meta.Topic(ctx, tp.Topic)
	if err != nil {
		return Chunk{}, fmt.Errorf("reading %s at %d: %w", tp, offset, err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = maxBytes
	req.IsolationLevel = 0
	req.SessionEpoch = -1 // no session: a one-off read
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = tp.Topic
	rt.TopicID = md.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = tp.Partition
	rp.FetchOffset = offset
	rp.CurrentLeaderEpoch = l.Epoch
	rp.LastFetchedEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(l.Leader)).Request(ctx, req)
	if err != nil {
		meta.Invalidate(tp.Topic)
		return Chunk{}, fmt.Errorf("reading %s at %d: %w", tp, offset, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return Chunk{}, fmt.Errorf("reading %s at %d: %w", tp, offset, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return Chunk{}, fmt.Errorf("reading %s at %d: malformed fetch response", tp, offset)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		if leaders.IsLeadershipError(err) {
			meta.Invalidate(tp.Topic)
		}
		return Chunk{}, fmt.Errorf("reading %s at %d: %w", tp, offset, err)
	}
	whole, _ := wholeBatches(p.RecordBatches)
	return Chunk{TP: tp, FetchOffset: offset, Records: whole, HighWatermark: p.HighWatermark,
		LastStable: p.LastStableOffset, LogStart: p.LogStartOffset}, nil
}

// ReadRange yields the batches of tp that hold offsets in [from, to), in
// order, reading them with ReadAt maxBytes at a time (uncommitted, control
// batches included). It stops at to, or where the log holds nothing more
// (its high watermark); a read that makes no progress below to, or an
// unreadable batch, ends it with an error.
func ReadRange(ctx context.Context, cl *kgo.Client, meta *leaders.Cache, tp TP, from, to int64, maxBytes int32) iter.Seq2[recordbatch.Batch, error] {
	return func(yield func(recordbatch.Batch, error) bool) {
		for at := from; at < to; {
			c, err := ReadAt(ctx, cl, meta, tp, at, maxBytes)
			if err != nil {
				yield(recordbatch.Batch{}, err)
				return
			}
			next := at
			for b, err := range recordbatch.All(c.Records) {
				if err != nil {
					yield(recordbatch.Batch{}, fmt.Errorf("reading %s at %d: %w", tp, at, err))
					return
				}
				next = b.LastOffset() + 1
				if b.LastOffset() < at || b.BaseOffset >= to {
					continue
				}
				if !yield(b, nil) {
					return
				}
			}
			if next <= at {
				if c.HighWatermark > at {
					yield(recordbatch.Batch{}, fmt.Errorf("reading %s: no progress at %d below the high watermark %d", tp, at, c.HighWatermark))
				}
				return
			}
			at = next
		}
	}
}
