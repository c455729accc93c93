package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/workload"
)

// faultEnv is what a fault case acts on while the mirror runs and the
// producer writes.
type faultEnv struct {
	t     *testing.T
	p     *pair
	a     *agent
	topic string
}

// progress waits until the destination has gone past the source's current
// end on every partition: records the source took after this point were
// copied after it, through whatever the fault changed.
func (e faultEnv) progress() {
	e.t.Helper()
	src := ends(e.t, e.p.srcAdm, e.topic)
	want := map[int32]int64{}
	for part, end := range src {
		want[part] = end + 1
	}
	e.p.waitProgress(e.t, e.a, e.topic, want, 30*time.Second)
}

// waitHits waits until h answered at least n requests: the fault fired.
func (e faultEnv) waitHits(h *kfake.FaultHandle, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Wait(ctx, n); err != nil {
		e.t.Fatalf("the fault answered %d requests, want %d: %v\nDescribe:\n%s", h.Hits(), n, err, e.a.describe())
	}
}

// moveLeaders moves every partition of topic on c to the next broker and
// checks that the leader changed.
func (e faultEnv) moveLeaders(c *devcluster.Cluster, brokers int32, partitions int32) {
	e.t.Helper()
	for part := range partitions {
		old := c.Kfake().LeaderFor(e.topic, part)
		to := (old + 1) % brokers
		if err := c.Kfake().MoveTopicPartition(e.topic, part, to); err != nil {
			e.t.Fatal(err)
		}
		if got := c.Kfake().LeaderFor(e.topic, part); got != to || got == old {
			e.t.Fatalf("%s p%d: leader %d after moving it from %d to %d", c.Name(), part, got, old, to)
		}
	}
}

// churnNode removes the broker leading partition 0 of topic on c, checks
// that it leads nothing any more, lets mirroring go on, adds it back (on a
// new port: kfake does not close the connections of a removed broker, which
// a restarted real broker would) and lets mirroring go on again.
func (e faultEnv) churnNode(c *devcluster.Cluster, partitions int32) {
	e.t.Helper()
	kc := c.Kfake()
	node := kc.LeaderFor(e.topic, 0)
	if err := kc.RemoveNode(node); err != nil {
		e.t.Fatal(err)
	}
	for part := range partitions {
		if l := kc.LeaderFor(e.topic, part); l == node || l < 0 {
			e.t.Fatalf("%s p%d: leader %d after removing broker %d", c.Name(), part, l, node)
		}
	}
	e.progress()
	if _, _, err := kc.AddNode(node, 0); err != nil {
		e.t.Fatal(err)
	}
	e.progress()
}

// TestFaults mirrors while a producer writes to the source and injects one
// kind of fault per case. Each case checks that its fault fired, then that
// mirroring went on past it; at the end every partition is MIRRORING with
// lag 0 and both sides are identical. Embedded engine only (the faults are
// kfake's hooks); TestBrokerFaults (brokers_test.go) moves leaders and kills
// brokers of real Kafka clusters.
func TestFaults(t *testing.T) {
	const (
		topic      = "faults"
		partitions = 3
		brokers    = 3
	)
	onTopic := func(keys ...kmsg.Key) kfake.Fault {
		return kfake.Fault{Keys: keys, Topic: topic}
	}
	cases := []struct {
		name   string
		inject func(e faultEnv)
	}{
		{"destination produce REQUEST_TIMED_OUT after the write", func(e faultEnv) {
			f := onTopic(kmsg.Produce)
			f.Err, f.Count = kerr.RequestTimedOut, 5
			e.waitHits(e.p.dst.Kfake().Fault(f), 5)
		}},
		{"destination produce NOT_ENOUGH_REPLICAS_AFTER_APPEND", func(e faultEnv) {
			f := onTopic(kmsg.Produce)
			f.Err, f.Count = kerr.NotEnoughReplicasAfterAppend, 3
			e.waitHits(e.p.dst.Kfake().Fault(f), 3)
		}},
		{"destination produce NOT_LEADER_FOR_PARTITION", func(e faultEnv) {
			f := onTopic(kmsg.Produce)
			f.Err, f.Count = kerr.NotLeaderForPartition, 5
			e.waitHits(e.p.dst.Kfake().Fault(f), 5)
		}},
		{"source fetch NOT_LEADER_FOR_PARTITION", func(e faultEnv) {
			f := onTopic(kmsg.Fetch)
			f.Err, f.Count = kerr.NotLeaderForPartition, 5
			e.waitHits(e.p.src.Kfake().Fault(f), 5)
		}},
		{"source leader moves", func(e faultEnv) {
			for range 3 {
				e.moveLeaders(e.p.src, brokers, partitions)
				e.progress()
			}
		}},
		{"destination leader moves", func(e faultEnv) {
			for range 3 {
				e.moveLeaders(e.p.dst, brokers, partitions)
				e.progress()
			}
		}},
		{"leader elections on both clusters", func(e faultEnv) {
			// Random new leaders, and new leader epochs even where the
			// leader stays.
			for range 3 {
				e.p.src.Kfake().ShufflePartitionLeaders()
				e.p.dst.Kfake().ShufflePartitionLeaders()
				e.progress()
			}
		}},
		{"destination broker removed and added back", func(e faultEnv) {
			e.churnNode(e.p.dst, partitions)
		}},
		{"source broker removed and added back", func(e faultEnv) {
			e.churnNode(e.p.src, partitions)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{srcBrokers: brokers, dstBrokers: brokers, topic: topic, partitions: partitions})
			prod := workload.NewProducer(p.srcOpts(), workload.Spec{
				Topic: topic, Partitions: partitions, Seed: 2,
				Codecs:       workload.AllCodecs,
				NullKeyEvery: 7, NullValueEvery: 13, Headers: true, ExplicitTimestamps: true,
			}, 4000)
			stop := runProducer(t, prod)
			a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
			e := faultEnv{t: t, p: p, a: a, topic: topic}
			e.progress() // mirroring runs

			tc.inject(e)
			e.progress() // and goes on after the fault

			st := stop()
			p.waitMirrored(t, a, topic, time.Minute)
			p.assertIdentical(t, topic, identityOpts{wantRecords: st.Records})
			var retries int
			for _, s := range a.partitions(topic) {
				retries += s.Retries
			}
			t.Logf("%d records mirrored; partition retries %d", st.Records, retries)
		})
	}
}
