package recordbatch

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests check the codec against batches franz-go writes and reads,
// through an in-process kfake broker: what kgo produces must decode to what
// was produced, and a Rewritten batch produced raw must read back through a
// kgo consumer unchanged.

var kgoCodecs = map[Codec]kgo.CompressionCodec{
	CodecNone:   kgo.NoCompression(),
	CodecGzip:   kgo.GzipCompression(),
	CodecSnappy: kgo.SnappyCompression(),
	CodecLZ4:    kgo.Lz4Compression(),
	CodecZstd:   kgo.ZstdCompression(),
}

func TestKfakeCrossCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process broker")
	}
	var topics []string
	for _, c := range allCodecs {
		topics = append(topics, "src-"+c.String(), "dst-"+c.String())
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	admin, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			src, dst := "src-"+codec.String(), "dst-"+codec.String()
			want := kgoRecords(codec)
			produceWithKgo(ctx, t, addrs, kgo.ProducerBatchCompression(kgoCodecs[codec]), src, want)

			batches := fetchRaw(ctx, t, admin, src, 0)
			if len(batches) < 3 {
				t.Fatalf("kgo wrote %d batches, want several", len(batches))
			}
			var got []Record
			sawCodec := false
			for _, b := range batches {
				h := mustHeader(t, b)
				sawCodec = sawCodec || h.Codec() == codec
				if !CRCValid(b) {
					t.Fatalf("fetched batch at %d: CRC invalid", h.BaseOffset)
				}
				recs, err := Records(b)
				if err != nil {
					t.Fatalf("Records of kgo batch: %v", err)
				}
				got = append(got, recs...)
			}
			if !sawCodec {
				t.Fatalf("no fetched batch is %v-compressed", codec)
			}
			if d := diffRecords(want, got); d != "" {
				t.Fatalf("kgo-produced records: %s", d)
			}

			// Forward every batch raw, as the agent does: Rewrite and
			// produce it with an idempotent producer id.
			pid, epoch := initProducerID(ctx, t, admin)
			dstID := topicID(ctx, t, admin, dst)
			seq := int32(0)
			for _, b := range batches {
				b = bytes.Clone(b)
				before, _ := Records(b)
				if err := Rewrite(b, pid, epoch, seq, false); err != nil {
					t.Fatalf("Rewrite: %v", err)
				}
				after, err := Records(b)
				if err != nil || !CRCValid(b) {
					t.Fatalf("after Rewrite: crc valid %v, %v", CRCValid(b), err)
				}
				if d := diffRecords(shifted(before, -before[0].Offset), after); d != "" {
					t.Fatalf("Rewrite changed the records: %s", d)
				}
				produceRaw(ctx, t, admin, dst, dstID, b)
				seq += mustHeader(t, b).NumRecords
			}
			if d := diffRecords(want, consumeWithKgo(ctx, t, addrs, dst, len(want))); d != "" {
				t.Fatalf("forwarded records read back by kgo: %s", d)
			}
		})
	}

	t.Run("transaction markers", func(t *testing.T) {
		const topic = "src-none"
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, commit := range []bool{true, false, true} {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("in a transaction")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
		}
		var markers []bool
		for _, b := range fetchRaw(ctx, t, admin, topic, 0) {
			h := mustHeader(t, b)
			if !h.IsControl() {
				continue
			}
			commit, err := ControlRecord(b)
			if err != nil {
				t.Fatalf("ControlRecord of kfake marker: %v", err)
			}
			markers = append(markers, commit)
		}
		if fmt.Sprint(markers) != "[true false true]" {
			t.Fatalf("markers %v, want [true false true]", markers)
		}
	})
}

// kgoRecords returns records covering null and empty keys and values,
// headers and several timestamps, compressible so that kgo compresses them.
func kgoRecords(codec Codec) []Record {
	var recs []Record
	for i := range 60 {
		r := Record{
			Offset:    int64(i),
			Timestamp: 1_700_000_000_000 + int64(i%7)*1000 - int64(i%3)*5000,
			Key:       fmt.Appendf(nil, "key-%d", i%10),
			Value:     bytes.Repeat(fmt.Appendf(nil, "%s value %d ", codec, i), 40),
		}
		switch i % 6 {
		case 1:
			r.Key = nil
		case 2:
			r.Key, r.Value = []byte{}, []byte{}
		case 3:
			r.Value = nil
		case 4:
			r.Headers = []RecordHeader{{Key: "h1", Value: []byte("v1")}, {Key: "h2", Value: nil}, {Key: "", Value: []byte{}}}
		case 5:
			r.Timestamp = -86_400_000 // before 1970
		}
		recs = append(recs, r)
	}
	return recs
}

func produceWithKgo(ctx context.Context, t *testing.T, addrs []string, compression kgo.Opt, topic string, recs []Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), compression, kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(4<<10)) // several batches
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var krs []*kgo.Record
	for _, r := range recs {
		kr := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(r.Timestamp)}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		krs = append(krs, kr)
	}
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("kgo produce: %v", err)
	}
}

func consumeWithKgo(ctx context.Context, t *testing.T, addrs []string, topic string, n int) []Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("kgo consume: %v", err)
		}
		fs.EachRecord(func(kr *kgo.Record) {
			r := Record{Offset: kr.Offset, Timestamp: kr.Timestamp.UnixMilli(), Key: kr.Key, Value: kr.Value}
			for _, h := range kr.Headers {
				r.Headers = append(r.Headers, RecordHeader{Key: h.Key, Value: h.Value})
			}
			got = append(got, r)
		})
	}
	return got
}

func topicID(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) [16]byte {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 {
		t.Fatalf("metadata for %s: %v", topic, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("metadata for %s: %v", topic, err)
	}
	return resp.Topics[0].TopicID
}

// fetchRaw returns the raw batches of partition 0 of topic, walked with Next.
func fetchRaw(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, isolation int8) [][]byte {
	t.Helper()
	id := topicID(ctx, t, cl, topic)
	var out [][]byte
	for offset := int64(0); ; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxBytes = 1 << 20
		req.IsolationLevel = isolation
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset = offset
		rp.PartitionMaxBytes = 5000 // small: responses end in partial batches
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("fetch %s: %v", topic, err)
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			t.Fatalf("fetch %s: %v", topic, err)
		}
		rest := p.RecordBatches
		for {
			batch, r, err := Next(rest)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if batch == nil {
				break
			}
			out = append(out, batch)
			offset = mustHeader(t, batch).LastOffset() + 1
			rest = r
		}
		if offset >= p.HighWatermark {
			return out
		}
	}
}

func initProducerID(ctx context.Context, t *testing.T, cl *kgo.Client) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = -1
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

func produceRaw(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, id [16]byte, batch []byte) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("produce to %s: %v (%v)", topic, err, p.ErrorMessage)
	}
}
