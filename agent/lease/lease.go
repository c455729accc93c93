// Package lease reads the writer lease that agents of earlier releases kept in the
// state topic, so that a state topic moves from those agents to a group
// without two writers: a group agent started while an agent of the lease
// still holds it waits until the lease is released (its holder stopped
// cleanly) or has run out (its holder died), and only then joins the group
// (kmirror agent, waitLeaseAgents). The lease itself is gone: agents form a
// group on the destination (package membership), or one agent runs alone
// (coordination = "single").
//
// The records, as those agents wrote them in the state topic's one
// partition (keys "lease/..."): claims, renewals and releases, each naming
// the agent, a random instance id of its process, the lease epoch and the
// holder's lease duration. Folded in log order, the first claim of epoch
// N+1 after epoch N wins; a renewal or release counts only from the holder
// of the current epoch. A holder stopped writing once its last renewal was
// older than its lease duration, on its own monotonic clock; a write it
// sent just before may take up to DefaultRequestTimeout more to land.
package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/statestore"
)

// DefaultRequestTimeout bounds how long a write the holder issued may still
// be on its way to a broker after its lease ran out (Kafka's
// request.timeout.ms default, and the lease agents' default).
const DefaultRequestTimeout = 30 * time.Second

// Config configures a Reader.
type Config struct {
	// Destination connects to the destination cluster.
	Destination []kgo.Opt
	// Topic is the state topic (default statestore.DefaultTopic).
	Topic  string
	Logger hclog.Logger
}

// Status is the lease as read.
type Status struct {
	// Holder is the agent holding the current epoch, "" when none does
	// (never claimed, or released).
	Holder string
	Epoch  int64
	// Duration is the holder's lease duration.
	Duration time.Duration
	// SinceRenewal is how long ago the reader read the holder's last
	// claim, renewal or release.
	SinceRenewal time.Duration
}

// record is one lease record in the state topic.
type record struct {
	Kind       string `json:"kind"` // claim, renew, release
	Agent      string `json:"agent"`
	Instance   string `json:"instance"`
	Epoch      int64  `json:"epoch"`
	DurationMs int64  `json:"duration_ms"`
}

const keyPrefix = "lease/"

// key: claims keep a key per epoch and claimant, so that compaction never
// removes the first claim of an epoch in favour of a later, losing one;
// renewals share a key (only the latest matters).
func (r record) key() string {
	switch r.Kind {
	case KindClaim:
		return fmt.Sprintf("%sclaim/%d/%s/%s", keyPrefix, r.Epoch, r.Agent, r.Instance)
	case KindRelease:
		return fmt.Sprintf("%srelease/%d", keyPrefix, r.Epoch)
	}
	return keyPrefix + "renew"
}

// view is the fold of the lease records read so far.
type view struct {
	epoch    int64
	holder   string // agent id, "" when released or never claimed
	instance string
	duration time.Duration
	released bool
	// seen is when this process read the current epoch's last claim,
	// renewal or release (monotonic).
	seen time.Time
	// next is the offset after the last record read.
	next int64
}

func (v *view) apply(r record, now time.Time) {
	d := time.Duration(r.DurationMs) * time.Millisecond
	switch r.Kind {
	case KindClaim:
		if r.Epoch != v.epoch+1 {
			return // a claim that lost its race, or a stale one
		}
		v.epoch, v.holder, v.instance, v.duration, v.released, v.seen = r.Epoch, r.Agent, r.Instance, d, false, now
	case KindRenew:
		if r.Epoch == v.epoch && r.Instance == v.instance && !v.released {
			v.seen, v.duration = now, d
		}
	case KindRelease:
		if r.Epoch == v.epoch && r.Instance == v.instance {
			v.holder, v.instance, v.released, v.seen = "", "", true, now
		}
	}
}

// Reader follows the lease records of a state topic.
type Reader struct {
	cfg Config
	log hclog.Logger
	cl  *kgo.Client // consumer of the state topic's partition 0

	mu      sync.Mutex
	v       view
	changed chan struct{} // closed and replaced at every fetch

	cancel context.CancelFunc
	done   chan struct{}
}

// Open starts following the lease records of the state topic (creating
// the topic when missing) and returns once it has read them to the end.
func Open(ctx context.Context, cfg Config) (*Reader, error) {
	if cfg.Topic == "" {
		cfg.Topic = statestore.DefaultTopic
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := statestore.EnsureTopic(ctx, cfg.Destination, cfg.Topic); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(cfg.Destination[:len(cfg.Destination):len(cfg.Destination)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {0: kgo.NewOffset().AtStart()}}),
		// A short fetch wait keeps the view of the renewals fresh even
		// where a broker does not answer a waiting fetch as soon as a
		// record arrives.
		kgo.FetchMaxWait(500*time.Millisecond),
	)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination for the writer lease: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Reader{cfg: cfg, log: cfg.Logger, cl: cl, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	end, err := r.end(ctx)
	if err != nil {
		cancel()
		cl.Close()
		return nil, err
	}
	go r.follow(rctx)
	if err := r.waitRead(ctx, end); err != nil {
		r.Close()
		return nil, fmt.Errorf("reading the writer lease from state topic %q: %w", cfg.Topic, err)
	}
	return r, nil
}

// Close stops following the lease records.
func (r *Reader) Close() {
	r.cancel()
	<-r.done
	r.cl.Close()
}

// end returns the state topic's end offset.
func (r *Reader) end(ctx context.Context) (int64, error) {
	ends, err := kadm.NewClient(r.cl).ListEndOffsets(ctx, r.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("reading the end of state topic %q: %w", r.cfg.Topic, err)
	}
	o, ok := ends.Lookup(r.cfg.Topic, 0)
	if !ok {
		return 0, fmt.Errorf("reading the end of state topic %q: partition 0 missing", r.cfg.Topic)
	}
	return o.Offset, nil
}

// follow reads the state topic and folds its lease records until ctx ends.
func (r *Reader) follow(ctx context.Context) {
	defer close(r.done)
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(_ string, _ int32, err error) {
			r.log.Warn("reading the writer lease from the state topic", "error", err)
		})
		now := time.Now()
		r.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			r.v.next = rec.Offset + 1
			if !strings.HasPrefix(string(rec.Key), keyPrefix) || rec.Value == nil {
				return
			}
			var lr record
			if err := json.Unmarshal(rec.Value, &lr); err != nil {
				r.log.Warn("skipping an unreadable lease record", "key", string(rec.Key), "error", err)
				return
			}
			before := r.v
			r.v.apply(lr, now)
			if r.v.epoch != before.epoch || r.v.released != before.released {
				r.log.Info("writer lease", "epoch", r.v.epoch, "holder", r.v.holder, "released", r.v.released)
			}
		})
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// waitRead waits until every record below offset has been read.
func (r *Reader) waitRead(ctx context.Context, offset int64) error {
	for {
		r.mu.Lock()
		next, ch := r.v.next, r.changed
		r.mu.Unlock()
		if next >= offset {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Status returns the lease as read so far.
func (r *Reader) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Holder: r.v.holder, Epoch: r.v.epoch, Duration: r.v.duration}
	if !r.v.seen.IsZero() {
		st.SinceRenewal = time.Since(r.v.seen)
	}
	return st
}

// Changed is closed at the next fetch of the state topic (lease records or
// not).
func (r *Reader) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}
