package metasync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/topics"
)

// ConfigSource is what config sync reads of the source cluster (a
// *kadm.Client).
type ConfigSource interface {
	DescribeTopicConfigs(ctx context.Context, topics ...string) (kadm.ResourceConfigs, error)
}

// ConfigDestination is what config sync reads and changes on the
// destination cluster (a *kadm.Client).
type ConfigDestination interface {
	ConfigSource
	AlterTopicConfigs(ctx context.Context, configs []kadm.AlterConfig, topics ...string) (kadm.AlterConfigsResponses, error)
}

// Configs syncs topic configs from a source to a destination.
type Configs struct {
	src ConfigSource
	dst ConfigDestination
	log hclog.Logger

	mu sync.Mutex
	// synced holds, per topic, the synced keys and values the last sync
	// wanted: a destination that differs from them while the source did
	// not change was changed on the destination (drift).
	synced map[string]map[string]string
}

// NewConfigs returns a config sync from src to dst; log may be nil.
func NewConfigs(src ConfigSource, dst ConfigDestination, log hclog.Logger) *Configs {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Configs{src: src, dst: dst, log: log, synced: map[string]map[string]string{}}
}

// Sync makes the synced configs of each destination topic equal to the
// source's. A synced key is one DestinationConfigs copies
// (topics.Copied with exclude, nil meaning the KIP's default list) and
// the invariant does not set (topics.Managed): only configs set on the
// topic itself count on either side. A synced key set on the source is set
// on the destination; one not set on the source is deleted there (the
// destination default applies). Keys excluded stay as the destination has
// them. Items is the number of topics in sync; Drift lists the
// destination-side changes reverted: a synced key whose destination value
// changed while the source's did not. A topic missing on either side is
// left to topic sync.
func (c *Configs) Sync(ctx context.Context, names []string, exclude []string) (Result, error) {
	var res Result
	var errs []error
	for _, t := range names {
		drift, err := c.syncTopic(ctx, t, exclude)
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		case err != nil:
			errs = append(errs, fmt.Errorf("topic %q: %w", t, err))
		default:
			res.Items++
			res.Drift = append(res.Drift, drift...)
		}
	}
	return res, errors.Join(errs...)
}

// topicConfigs are a topic's configs set on the topic itself, and its
// effective cleanup.policy.
type topicConfigs struct {
	own           map[string]string
	cleanupPolicy string
}

func describe(ctx context.Context, cl ConfigSource, side, topic string) (topicConfigs, error) {
	rcs, err := cl.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return topicConfigs{}, fmt.Errorf("reading its configs on the %s: %w", side, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return topicConfigs{}, fmt.Errorf("reading its configs on the %s: %w", side, err)
	}
	tc := topicConfigs{own: map[string]string{}}
	for _, cfg := range rc.Configs {
		if cfg.Key == "cleanup.policy" {
			tc.cleanupPolicy = cfg.MaybeValue()
		}
		// Sensitive values are not returned; they cannot be synced.
		if cfg.Source == kmsg.ConfigSourceDynamicTopicConfig && cfg.Value != nil {
			tc.own[cfg.Key] = *cfg.Value
		}
	}
	return tc, nil
}

func (c *Configs) syncTopic(ctx context.Context, topic string, exclude []string) ([]string, error) {
	src, err := describe(ctx, c.src, "source", topic)
	if err != nil {
		return nil, err
	}
	dst, err := describe(ctx, c.dst, "destination", topic)
	if err != nil {
		return nil, err
	}
	synced := func(k string) bool { return topics.Copied(k, exclude) && !topics.Managed(k, src.cleanupPolicy) }
	want := map[string]string{}
	for k, v := range src.own {
		if synced(k) {
			want[k] = v
		}
	}
	c.mu.Lock()
	last, known := c.synced[topic]
	c.mu.Unlock()

	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range dst.own {
		if synced(k) {
			keys[k] = true
		}
	}
	var alter []kadm.AlterConfig
	var drift []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		w, wok := want[k]
		h, hok := dst.own[k]
		switch {
		case wok && hok && topics.Satisfies(k, w, h):
			continue
		case !wok && !hok:
			continue
		case wok:
			alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(w)})
		default:
			alter = append(alter, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
		}
		lw, lok := last[k]
		if known && lok == wok && lw == w {
			// The source did not change k since the last sync, which
			// left the destination equal to it: it changed there.
			drift = append(drift, fmt.Sprintf("topic %s: %s was %s on the destination, set back to %s", topic, k, show(h, hok), show(w, wok)))
		}
	}
	if len(alter) > 0 {
		resp, err := c.dst.AlterTopicConfigs(ctx, alter, topic)
		if err == nil {
			var r kadm.AlterConfigsResponse
			if r, err = resp.On(topic, nil); err == nil && r.Err != nil {
				err = fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("changing %d config(s) on the destination (grant the agent ALTER_CONFIGS on the topic, or add the keys to topic_config_exclude): %w", len(alter), err)
		}
		for _, a := range alter {
			c.log.Info("synced topic config", "topic", topic, "config", a.Name, "value", show(derefOr(a.Value), a.Op == kadm.SetConfig))
		}
		for _, d := range drift {
			c.log.Warn("reverted a destination-side config change (drift)", "change", d)
		}
	}
	c.mu.Lock()
	c.synced[topic] = want
	c.mu.Unlock()
	return drift, nil
}

func show(v string, ok bool) string {
	if !ok {
		return "(not set: the destination default)"
	}
	return fmt.Sprintf("%q", v)
}

func derefOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
