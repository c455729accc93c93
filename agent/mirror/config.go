package mirror

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// Config is what the runners of one agent share: the destination cluster,
// the state topic and the agent's settings. The coordinator makes one, with
// every default resolved; runners only read it.
type Config struct {
	// Store is the state topic.
	Store Store
	// Destination is the agent's client of the destination cluster and
	// Admin an admin client over it; DestinationOpts are the options it
	// was made with, for the clients a failback makes of its own.
	Destination     *kgo.Client
	DestinationOpts []kgo.Opt
	Admin           *kadm.Client
	// Writer writes the batches of every partition mirror.
	Writer *writer.Writer
	// Budget bounds fetched-but-unwritten bytes across all mirrors.
	Budget *fetcher.Budget
	// ReadOnly makes mirror topics read-only on the destination.
	ReadOnly *ReadOnly
	// SourceOpts are the options of every source client of a mirror.
	SourceOpts func(mirrorspec.Spec) ([]kgo.Opt, error)
	// Registry is the agent's registry of mirrors.
	Registry Registry

	// The agent's settings, as coordinator.Config documents them, with
	// their defaults resolved. RefreshInterval is that of mirrors whose
	// spec sets none.
	RefreshInterval time.Duration
	HangingTxnAfter time.Duration
	AbortSpan       time.Duration
	StopTimeout     time.Duration
	PromoteTimeout  time.Duration
	Fillers         partition.FillerMethod
	SourceFence     SourceFence
	Logger          hclog.Logger
}

// Store is the state topic as runners use it (statestore.Store): a map
// written through to the topic, where a nil value deletes a key.
type Store interface {
	Get(key string) ([]byte, bool)
	All() map[string][]byte
	Put(ctx context.Context, key string, value []byte) error
	// Topic is the state topic's name.
	Topic() string
}

// Registry is what a runner asks of the agent's registry of mirrors.
type Registry interface {
	// AddMatchedTopics adds to mirror's spec, persisted, the source
	// topics matched by its topic_regex that no mirror has yet, and
	// returns those it added. It adds nothing while an admin operation is
	// under way (one may be waiting for the runner): the runner asks again
	// at its next refresh.
	AddMatchedTopics(ctx context.Context, mirror string, matched []string) (added []string, err error)
}
