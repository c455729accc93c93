package workload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

func TestCreateTopic(t *testing.T) {
	// Refusals (names, configs, partition counts) are Kafka's to make: the
	// embedded engine takes them all, agent/e2e's createTopic runs this on
	// real brokers.
	c := devclustertest.Start(t, devcluster.Brokers(3))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := CreateTopic(context.Background(), cl, "existing", 2, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, topic string
		partitions  int32
		configs     map[string]*string
		want        int32
	}{
		{name: "new", topic: "fresh", partitions: 3, want: 3},
		{name: "new again finds it", topic: "fresh", partitions: 5, want: 3},
		{name: "existing with fewer partitions", topic: "existing", partitions: 6, want: 2},
		{name: "compacted", topic: "compacted", partitions: 1, configs: map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := CreateTopic(ctx, cl, tc.topic, tc.partitions, tc.configs)
			if err != nil || got != tc.want {
				t.Fatalf("CreateTopic = %d, %v; want %d partitions", got, err, tc.want)
			}
		})
	}
}

// A cluster that never answers ends in an error naming the topic once ctx
// ends, not a hang.
func TestCreateTopicGivesUp(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := CreateTopic(ctx, cl, "t", 1, nil); err == nil || !strings.Contains(err.Error(), `topic "t"`) {
		t.Fatalf("CreateTopic on a dead cluster: %v, want an error naming the topic", err)
	}
}
