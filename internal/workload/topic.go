package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// retryEvery is how often CreateTopic asks again while a cluster settles.
const retryEvery = 250 * time.Millisecond

// CreateTopic creates topic with partitions partitions (the cluster's default
// replication factor) and configs, or finds it already there, and returns
// once every broker's metadata shows each of its partitions with a leader.
// It returns the topic's partition count, which for an existing topic may
// differ from partitions.
//
// Kafka answers CreateTopics once the controller has the topic; a broker
// that has not replayed it yet answers UNKNOWN_TOPIC_OR_PARTITION, and a
// producer that asks that broker a few times fails its records (kgo's
// UnknownTopicRetries). A cluster that has just started may also answer
// INVALID_REPLICATION_FACTOR until every broker has registered, or a
// retriable error. Both are waited out until ctx ends.
func CreateTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32, configs map[string]*string) (int32, error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, v
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	for {
		last := createOnce(ctx, cl, req)
		if last == nil || errors.Is(last, kerr.TopicAlreadyExists) {
			break
		}
		if !kerr.IsRetriable(last) && !errors.Is(last, kerr.InvalidReplicationFactor) {
			return 0, fmt.Errorf("creating topic %q: %w", topic, last)
		}
		if err := sleep(ctx, retryEvery); err != nil {
			return 0, fmt.Errorf("creating topic %q: %w (last answer: %v)", topic, err, last)
		}
	}
	var last error
	for {
		n, err := leadersEverywhere(ctx, cl, topic)
		if err == nil {
			return n, nil
		}
		last = err
		if err := sleep(ctx, retryEvery); err != nil {
			return 0, fmt.Errorf("waiting for every broker to know topic %q: %w (last: %v)", topic, err, last)
		}
	}
}

func createOnce(ctx context.Context, cl *kgo.Client, req *kmsg.CreateTopicsRequest) error {
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("CreateTopics answered %d topics for 1", len(resp.Topics))
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

// leadersEverywhere asks every broker for topic's metadata and returns its
// partition count once each broker shows every partition with a leader.
func leadersEverywhere(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	md, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if len(md.Brokers) == 0 {
		return 0, errors.New("metadata lists no broker")
	}
	var count int32 = -1
	for _, b := range md.Brokers {
		kresp, err := cl.Broker(int(b.NodeID)).Request(ctx, req)
		if err != nil {
			return 0, fmt.Errorf("broker %d: %w", b.NodeID, err)
		}
		resp := kresp.(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			return 0, fmt.Errorf("broker %d answered %d topics for 1", b.NodeID, len(resp.Topics))
		}
		t := resp.Topics[0]
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return 0, fmt.Errorf("broker %d: %w", b.NodeID, err)
		}
		if len(t.Partitions) == 0 {
			return 0, fmt.Errorf("broker %d lists no partition", b.NodeID)
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil || p.Leader < 0 {
				return 0, fmt.Errorf("broker %d: partition %d has no leader (%v)", b.NodeID, p.Partition, err)
			}
		}
		if count >= 0 && int32(len(t.Partitions)) != count {
			return 0, fmt.Errorf("brokers disagree on the partition count (%d, %d)", count, len(t.Partitions))
		}
		count = int32(len(t.Partitions))
	}
	return count, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
