package fetcher

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
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
