package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/workload"
)

// TestPartitionGrowth grows a source topic from 3 to 6 partitions while a
// producer writes to it and the agent mirrors it: the destination topic must
// grow to 6 partitions and all 6 must be mirrored identically.
func TestPartitionGrowth(t *testing.T) {
	forEngines(t, testPartitionGrowth)
}

func testPartitionGrowth(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{srcBrokers: 3, topic: "growing", partitions: 3})
	topic := p.topic
	spec := workload.Spec{Topic: topic, Partitions: 3, Seed: 8, Codecs: workload.AllCodecs, Headers: true, NullKeyEvery: 10}
	before := workload.NewProducer(p.srcOpts(), spec, 3000)
	stopBefore := runProducer(t, before)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic)), refreshInterval: 500 * time.Millisecond})
	fe := faultEnv{t: t, p: p, a: a, topic: topic}
	fe.progress()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := p.srcAdm.CreatePartitions(ctx, 3, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("growing %s to 6 partitions: %v", topic, err)
	}
	// Kafka's brokers learn of the new partitions from the metadata log,
	// each in its time: a producer whose metadata came from a late one
	// would see 3.
	waitPartitionsOnEveryBroker(t, p.srcCl, topic, 6)
	// The 3-partition producer goes on while a 6-partition one writes to
	// every partition.
	spec.Partitions, spec.Seed, spec.Records = 6, 9, 12_000
	after, err := workload.Produce(ctx, p.srcOpts(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// Mirroring goes on: the new partitions are copied, and the old ones
	// go past what the 3-partition producer has written so far.
	want := ends(t, p.srcAdm, topic)
	for part := range int32(3) {
		want[part]++
	}
	p.waitProgress(t, a, topic, want, 30*time.Second)
	st := stopBefore()

	p.waitMirrored(t, a, topic, time.Minute)
	if got := len(ends(t, p.dstAdm, topic)); got != 6 {
		t.Fatalf("destination has %d partitions, want 6", got)
	}
	reps := p.assertIdentical(t, topic, identityOpts{wantRecords: st.Records + after.Records})
	for part := range int32(6) {
		if reps[part].Compared < 2000 {
			t.Errorf("p%d: %d records compared, want at least the 2000 the 6-partition producer wrote", part, reps[part].Compared)
		}
	}
	if n := len(a.partitions(topic)); n != 6 {
		t.Errorf("Describe shows %d partitions, want 6", n)
	}
}

// waitPartitionsOnEveryBroker polls each broker of the cluster cl reaches
// until its metadata gives topic n partitions.
func waitPartitionsOnEveryBroker(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	brokers, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range brokers {
		for {
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
			got := -1
			if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 {
				got = len(resp.Topics[0].Partitions)
			}
			if got == n {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("broker %d: %s has %d partitions, want %d (%v)", b.NodeID, topic, got, n, err)
			case <-time.After(pollEvery):
			}
		}
	}
}
