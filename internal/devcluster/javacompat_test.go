package devcluster

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCreateTopicsConfigSources: the configs of a CreateTopics answer carry
// a source, as Apache Kafka's do and its Java admin client requires, and the
// answer is still kfake's (topic id, partitions, errors).
func TestCreateTopicsConfigSources(t *testing.T) {
	// Over TLS too: the dev clusters serve it beneath compatConn.
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"strict", nil}, {"lenient", []Option{Lenient()}}, {"TLS", []Option{TLS()}}} {
		c := startT(t, tc.opts...)
		if err := c.Kfake().CreateTopic("exists", 1, nil); err != nil {
			t.Fatal(err)
		}
		cl := newClient(t, c, c.tlsOpt()...)
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 5000
		for _, name := range []string{"sourced", "exists"} {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 2, 1
			cfg := kmsg.NewCreateTopicsRequestTopicConfig()
			cfg.Name, cfg.Value = "cleanup.policy", kmsg.StringPtr("compact")
			rt.Configs = append(rt.Configs, cfg)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version < 5 {
			t.Fatalf("CreateTopics answered at v%d; the test needs v5 or later", resp.Version)
		}
		var created, refused int
		for _, rt := range resp.Topics {
			if rt.ErrorCode != 0 {
				if rt.Topic != "exists" || rt.ErrorCode != kerr.TopicAlreadyExists.Code {
					t.Fatalf("%s refused with code %d", rt.Topic, rt.ErrorCode)
				}
				refused++
				continue
			}
			created++
			if rt.NumPartitions != 2 || rt.TopicID == [16]byte{} || len(rt.Configs) == 0 {
				t.Fatalf("created topic answered %+v", rt)
			}
			for _, cfg := range rt.Configs {
				want := kmsg.ConfigSourceDefaultConfig
				if cfg.Name == "cleanup.policy" {
					want = kmsg.ConfigSourceDynamicTopicConfig
				}
				if cfg.Source != int8(want) {
					t.Errorf("%s: config %s has source %d, want %d", tc.name, cfg.Name, cfg.Source, want)
				}
			}
		}
		if created != 1 || refused != 1 {
			t.Fatalf("%s: %d topics created, %d refused; want one of each", tc.name, created, refused)
		}
	}
}

// TestDescribeTopicPartitionsELR: eligible leader replicas come as empty
// lists, not null, as from Apache Kafka.
func TestDescribeTopicPartitionsELR(t *testing.T) {
	c := startT(t, Lenient())
	if err := c.Kfake().CreateTopic("elr", 3, nil); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	req.ResponsePartitionLimit = 2000
	rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
	rt.Topic = "elr"
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), newClient(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 3 {
		t.Fatalf("answer %+v, want topic elr with 3 partitions", resp.Topics)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.EligibleLeaderReplicas == nil || p.LastKnownELR == nil {
			t.Fatalf("partition %d: eligible leader replicas %v, last known %v; want empty lists, not null", p.Partition, p.EligibleLeaderReplicas, p.LastKnownELR)
		}
	}
}

// TestCompatConnScan feeds the request stream a byte at a time and in one
// piece: the requests to patch are kept whole, by correlation id, and the
// others are not kept at all.
func TestCompatConnScan(t *testing.T) {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test"))
	frame := func(r kmsg.Request, corr int32) []byte { return f.AppendRequest(nil, r, corr) }
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 7
	ct.Topics = append(ct.Topics, kmsg.NewCreateTopicsRequestTopic())
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	stream := append(append(frame(md, 1), frame(ct, 2)...), frame(md, 3)...)
	for _, step := range []int{1, 7, len(stream)} {
		c := &compatConn{pending: map[int32][]byte{}}
		for rest := stream; len(rest) > 0; {
			n := min(step, len(rest))
			c.scan(rest[:n])
			rest = rest[n:]
		}
		if len(c.pending) != 1 || len(c.pending[2]) != len(frame(ct, 2))-4 {
			t.Fatalf("fed %d bytes at a time: pending %v, want the CreateTopics request (correlation 2) whole", step, c.pending)
		}
	}
}
