package partition

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// TestPadBatch: a padding batch holds n records at offset deltas 0..n-1
// (keyed for compacted topics) compressed to under a byte an offset, and the
// strict dev cluster, which validates every record as Kafka does, appends it
// as one batch of n offsets.
func TestPadBatch(t *testing.T) {
	ctx := context.Background()
	c := devclustertest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	const n = 65536
	for _, tc := range []struct {
		topic  string
		keyed  bool
		policy string
	}{
		{"padded", false, "delete"},
		{"padded-compacted", true, "compact,delete"},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			b, err := padBatch(n, tc.keyed, -1, -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			h, err := recordbatch.ParseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.Codec() != padCodec || h.NumRecords != n || h.LastOffsetDelta != n-1 {
				t.Errorf("header: codec %v, %d records, last offset delta %d; want %v, %d, %d", h.Codec(), h.NumRecords, h.LastOffsetDelta, padCodec, n, n-1)
			}
			perOffset := float64(len(b)) / n
			t.Logf("%d bytes for %d offsets: %.3f bytes an offset", len(b), n, perOffset)
			if perOffset >= 1 {
				t.Errorf("%.3f bytes an offset, want under 1", perOffset)
			}
			recs, err := recordbatch.Records(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != n {
				t.Fatalf("%d records, want %d", len(recs), n)
			}
			for i, r := range recs {
				if r.Offset != int64(i) || (string(r.Key) == "kmirror-pad") != tc.keyed || r.Value != nil {
					t.Fatalf("record %d: offset %d key %q value %q", i, r.Offset, r.Key, r.Value)
				}
			}

			if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &tc.policy, "compression.type": new("producer")}, tc.topic); err != nil {
				t.Fatal(err)
			}
			md, err := adm.Metadata(ctx, tc.topic)
			if err != nil {
				t.Fatal(err)
			}
			mt := md.Topics[tc.topic]
			req := kmsg.NewPtrProduceRequest()
			req.Acks, req.TimeoutMillis = -1, 10000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic, rt.TopicID = tc.topic, mt.ID
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = b
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(mt.Partitions[0].Leader)))
			if err != nil {
				t.Fatal(err)
			}
			if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 0 {
				t.Fatalf("produce: %v (%s), base offset %d", kerr.ErrorForCode(p.ErrorCode), deref(p.ErrorMessage), p.BaseOffset)
			}
			ends, err := adm.ListEndOffsets(ctx, tc.topic)
			if err != nil {
				t.Fatal(err)
			}
			if o, _ := ends.Lookup(tc.topic, 0); o.Offset != n {
				t.Errorf("destination end offset %d, want %d", o.Offset, n)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
