package mirror

// Recover with recreate: a FAILED topic whose destination cannot be
// re-aligned (a recreated source topic, a destination that lost records or
// took foreign ones) is deleted on the destination and created again, with
// the same partition count and the configs set on it, and mirrored from the
// source's log start. Only when asked: the destination's records are gone
// afterwards.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// recreates keeps recover with recreate and the topic sync apart: while a
// topic is deleted and created again, the sync must not create it first
// from the source (it would take the source's configs, and the recreate's
// own create, with the configs set on the destination topic, would find it
// there). A recreate waits for a sync of its topic already under way, and
// syncs skip the topic until the recreate ends.
type recreates struct {
	mu      sync.Mutex
	topics  map[string]bool          // being recreated
	syncing map[string]chan struct{} // synced now; closed when the sync ends
}

// begin waits until no sync of topic is under way, then marks the topic as
// being recreated until end is called.
func (r *recreates) begin(ctx context.Context, topic string) (end func(), err error) {
	r.mu.Lock()
	if r.topics == nil {
		r.topics = map[string]bool{}
	}
	r.topics[topic] = true
	synced := r.syncing[topic]
	r.mu.Unlock()
	end = func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.topics, topic)
	}
	if synced != nil {
		select {
		case <-synced:
		case <-ctx.Done():
			end()
			return nil, fmt.Errorf("waiting for the topic sync of %q to end: %w", topic, ctx.Err())
		}
	}
	return end, nil
}

// sync marks topic as being synced until done is called; ok is false, and
// the topic must not be synced, while it is being recreated.
func (r *recreates) sync(topic string) (done func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics[topic] {
		return nil, false
	}
	if r.syncing == nil {
		r.syncing = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	r.syncing[topic] = ch
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.syncing, topic)
		close(ch)
	}, true
}

// recreateTopic recreates topic on the destination and restarts the
// partitions of targets that belong to it.
func (m *Runner) recreateTopic(ctx context.Context, topic string, targets []target) error {
	end, err := m.recreates.begin(ctx, topic)
	if err != nil {
		return fmt.Errorf("recover with recreate of topic %q: %w", topic, err)
	}
	defer end()
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
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Something outside this agent created it in between: it
			// still gets the configs that were set on the old one.
			if err := setOverrides(ctx, m.cfg.Admin, topic, configs); err != nil {
				return fmt.Errorf("recover with recreate of topic %q: it was created by another client after its deletion, and setting the configs of the deleted topic on it failed (set them by hand: %s): %w", topic, formatConfigs(configs), err)
			}
			m.log.Warn("recover with recreate: the destination topic was created by another client after its deletion; the configs of the deleted topic were set on it", "topic", topic, "configs", formatConfigs(configs))
		case err != nil:
			// The mirror creates it at its next look, from the source.
			m.log.Error("recover with recreate: creating the topic again with its configs failed; the mirror creates it from the source's; set these configs on it again by hand", "topic", topic, "configs", formatConfigs(configs), "error", err)
		default:
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

// setOverrides sets configs on topic, leaving its other configs as they are.
func setOverrides(ctx context.Context, adm *kadm.Client, topic string, configs map[string]*string) error {
	if len(configs) == 0 {
		return nil
	}
	var alters []kadm.AlterConfig
	for k, v := range configs {
		alters = append(alters, kadm.AlterConfig{Name: k, Value: v})
	}
	rs, err := adm.AlterTopicConfigs(ctx, alters, topic)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// formatConfigs lists configs as key=value, sorted.
func formatConfigs(configs map[string]*string) string {
	kv := make([]string, 0, len(configs))
	for k, v := range configs {
		if v != nil {
			kv = append(kv, k+"="+*v)
		}
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}
