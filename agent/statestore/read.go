package statestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoStateTopic is returned by Read when the cluster has no state topic.
var ErrNoStateTopic = errors.New("no state topic")

// Read returns the latest value of every key of the state topic of another
// agent, read once, without creating the topic or writing to it: a failback
// reads the last mirrored offsets that the agent of the opposite direction
// kept on its destination, which is the failback's source. opts connect to
// that cluster; topic "" means DefaultTopic.
func Read(ctx context.Context, opts []kgo.Opt, topic string) (map[string][]byte, error) {
	if topic == "" {
		topic = DefaultTopic
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to read state topic %q: %w", topic, err)
	}
	defer cl.Close()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("looking up state topic %q: %w", topic, err)
	}
	if td, ok := tds[topic]; !ok || td.Err != nil {
		return nil, fmt.Errorf("%w %q on that cluster", ErrNoStateTopic, topic)
	}
	return readAll(ctx, cl, opts, topic)
}
