package mirror

// Recover with recreate: a FAILED topic whose destination cannot be
// re-aligned (a recreated source topic, a destination that lost records or
// took foreign ones) is deleted on the destination and created again, with
// the same partition count and the configs set on it, and mirrored from the
// source's log start. Only when asked: the destination's records are gone
// afterwards.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// recreates are the topics a recover with recreate is deleting and
// creating again: topic syncs leave them alone meanwhile.
type recreates struct {
	mu     sync.Mutex
	topics map[string]bool
}

// begin marks topic as being recreated until end is called.
func (r *recreates) begin(topic string) (end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics == nil {
		r.topics = map[string]bool{}
	}
	r.topics[topic] = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.topics, topic)
	}
}

// underway says whether topic is being recreated.
func (r *recreates) underway(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[topic]
}

// recreateTopic recreates topic on the destination and restarts the
// partitions of targets that belong to it.
func (m *Runner) recreateTopic(ctx context.Context, topic string, targets []target) error {
	defer m.recreates.begin(topic)()
	// Partitions of the topic that still mirror write to the topic about
	// to be deleted: halted first, started again by restartPartition.
	for _, tg := range targets {
		if tg.tp.Topic != topic || tg.from == partition.Failed {
			continue
		}
		rp, stop := m.take(tg.tp)
		if !halt(rp, stop, false, 2*time.Second, 10*time.Second) {
			return fmt.Errorf("recover with recreate of topic %q: partition %d did not halt within 12s; nothing was deleted, try again", topic, tg.tp.Partition)
		}
	}
	tds, err := m.cfg.Admin.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("recover with recreate of topic %q: reading the destination topic: %w", topic, err)
	}
	if td, ok := tds[topic]; ok && td.Err == nil {
		configs, err := topicOverrides(ctx, m.cfg.Admin, topic)
		if err != nil {
			return fmt.Errorf("recover with recreate of topic %q: reading its configs: %w", topic, err)
		}
		if err := deleteDestinationTopic(ctx, m.cfg, topic); err != nil {
			return fmt.Errorf("recover with recreate of topic %q: %w", topic, err)
		}
		resp, err := m.cfg.Admin.CreateTopic(ctx, int32(len(td.Partitions)), -1, configs, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			// The mirror creates it at its next look, from the source.
			m.log.Error("recover with recreate: creating the topic again with its configs failed; the mirror creates it from the source's", "topic", topic, "error", err)
		} else {
			m.log.Warn("recover with recreate: destination topic recreated", "topic", topic, "partitions", len(td.Partitions), "topic_id", resp.ID.String())
		}
	}
	// What the agent knew of the old destination topic no longer holds:
	// its ids, where its logs were cut, where a failback took it over.
	prefix := "alignment/" + m.rec.Spec.Name + "/" + topic + "/"
	for k := range m.cfg.Store.All() {
		if strings.HasPrefix(k, prefix) {
			if err := m.cfg.Store.Put(ctx, k, nil); err != nil {
				return fmt.Errorf("recover with recreate of topic %q: %w", topic, err)
			}
		}
	}
	if err := m.cfg.Store.Put(ctx, topicKey(m.rec.Spec.Name, topic), nil); err != nil {
		return fmt.Errorf("recover with recreate of topic %q: %w", topic, err)
	}
	if fb, ok := failbackOf(m.cfg.Store, m.rec.Spec.Name, topic); ok {
		fb.recreated()
		if err := WriteRecord(ctx, m.cfg.Store, failbackKey(m.rec.Spec.Name, topic), fb); err != nil {
			return fmt.Errorf("recover with recreate of topic %q: %w", topic, err)
		}
	}
	for _, tg := range targets {
		if tg.tp.Topic != topic {
			continue
		}
		pr := stateRecord(partition.Initializing, reason.New(reason.Recovering, "recovering: the destination topic was recreated; mirroring from the source's log start"))
		pr.LastMirroredOffset = -1
		m.restartPartition(tg.tp, pr, false)
	}
	return nil
}

// topicOverrides returns the configs set on topic itself.
func topicOverrides(ctx context.Context, adm *kadm.Client, topic string) (map[string]*string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, err
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return nil, err
	}
	if rc.Err != nil {
		return nil, rc.Err
	}
	out := map[string]*string{}
	for _, cfg := range rc.Configs {
		if cfg.Source == kmsg.ConfigSourceDynamicTopicConfig && cfg.Value != nil {
			v := *cfg.Value
			out[cfg.Key] = &v
		}
	}
	return out, nil
}
