package devcluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The helpers here build record batches byte by byte, independently of the
// parser under test, so that a bad batch is bad in exactly one way.

type testRecord struct {
	key, value  []byte
	nullKey     bool
	tsDelta     int64
	offsetDelta *int32 // nil: the record's index
}

type testBatch struct {
	baseOffset      int64
	attrs           int16
	lastOffsetDelta *int32 // nil: len(records)-1
	numRecords      *int32 // nil: len(records)
	firstTimestamp  int64  // 0: now
	maxTimestamp    *int64 // nil: first + largest delta
	producerID      int64
	producerEpoch   int16
	baseSequence    int32
	records         []testRecord
	badCRC          bool
	magic           int8 // 0: 2
}

func i32(v int32) *int32 { return &v }
func i64(v int64) *int64 { return &v }

func keyed(n int) []testRecord {
	rs := make([]testRecord, n)
	for i := range rs {
		rs[i] = testRecord{key: []byte{'k', byte('0' + i)}, value: []byte("value")}
	}
	return rs
}

func (tb testBatch) encode(t *testing.T) []byte {
	t.Helper()
	var recs []byte
	var maxDelta int64
	for i, r := range tb.records {
		var body []byte
		body = append(body, 0) // attributes
		body = binary.AppendVarint(body, r.tsDelta)
		od := int32(i)
		if r.offsetDelta != nil {
			od = *r.offsetDelta
		}
		body = binary.AppendVarint(body, int64(od))
		if r.nullKey || r.key == nil {
			body = binary.AppendVarint(body, -1)
		} else {
			body = binary.AppendVarint(body, int64(len(r.key)))
			body = append(body, r.key...)
		}
		body = binary.AppendVarint(body, int64(len(r.value)))
		body = append(body, r.value...)
		body = binary.AppendVarint(body, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
		maxDelta = max(maxDelta, r.tsDelta)
	}
	switch tb.attrs & attrCodecMask {
	case codecNone:
	case codecZstd:
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		recs = enc.EncodeAll(recs, nil)
		enc.Close()
	default:
		t.Fatalf("test helper: codec %d not supported", tb.attrs&attrCodecMask)
	}

	first := tb.firstTimestamp
	if first == 0 {
		first = time.Now().UnixMilli()
	}
	maxTS := first + maxDelta
	if tb.maxTimestamp != nil {
		maxTS = *tb.maxTimestamp
	}
	lod := int32(len(tb.records) - 1)
	if tb.lastOffsetDelta != nil {
		lod = *tb.lastOffsetDelta
	}
	n := int32(len(tb.records))
	if tb.numRecords != nil {
		n = *tb.numRecords
	}
	magic := tb.magic
	if magic == 0 {
		magic = 2
	}

	be := binary.BigEndian
	b := make([]byte, batchHeaderLen, batchHeaderLen+len(recs))
	be.PutUint64(b[0:], uint64(tb.baseOffset))
	be.PutUint32(b[8:], uint32(batchHeaderLen-12+len(recs)))
	be.PutUint32(b[12:], 0xffffffff) // partition leader epoch -1, as clients send
	b[16] = byte(magic)
	be.PutUint16(b[21:], uint16(tb.attrs))
	be.PutUint32(b[23:], uint32(lod))
	be.PutUint64(b[27:], uint64(first))
	be.PutUint64(b[35:], uint64(maxTS))
	be.PutUint64(b[43:], uint64(tb.producerID))
	be.PutUint16(b[51:], uint16(tb.producerEpoch))
	be.PutUint32(b[53:], uint32(tb.baseSequence))
	be.PutUint32(b[57:], uint32(n))
	b = append(b, recs...)
	crc := crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))
	if tb.badCRC {
		crc++
	}
	be.PutUint32(b[17:], crc)
	return b
}

// plain is a valid non-idempotent batch of n keyed records.
func plain(n int) testBatch {
	return testBatch{producerID: -1, producerEpoch: -1, baseSequence: -1, records: keyed(n)}
}

func newClient(t *testing.T, c *Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// partBatch is one partition's records in a raw produce request.
type partBatch struct {
	topic     string
	partition int32
	records   []byte
}

// produceRaw sends one raw produce request to the broker leading the first
// partition and returns each partition's error code, keyed "topic/partition".
func produceRaw(t *testing.T, c *Cluster, cl *kgo.Client, txnID *string, parts ...partBatch) map[string]int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	req.TransactionID = txnID
	ids := make(map[[16]byte]string)
	for _, p := range parts {
		info := c.Kfake().TopicInfo(p.topic)
		if info == nil {
			t.Fatalf("topic %q does not exist", p.topic)
		}
		ids[info.TopicID] = p.topic
		i := -1
		for j := range req.Topics {
			if req.Topics[j].Topic == p.topic {
				i = j
			}
		}
		if i < 0 {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = p.topic
			rt.TopicID = info.TopicID // kgo may pick v13, which names topics by id
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p.partition
		rp.Records = p.records
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	leader := c.Kfake().LeaderFor(parts[0].topic, parts[0].partition)
	resp, err := req.RequestWith(testCtx(t), cl.Broker(int(leader)))
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	codes := make(map[string]int16)
	for _, rt := range resp.Topics {
		name := rt.Topic
		if name == "" {
			name = ids[rt.TopicID]
		}
		for _, rp := range rt.Partitions {
			codes[tpKey(name, rp.Partition)] = rp.ErrorCode
		}
	}
	return codes
}

func tpKey(topic string, p int32) string {
	return fmt.Sprintf("%s/%d", topic, p)
}

// highWatermark reads a partition's end offset from the cluster.
func highWatermark(t *testing.T, c *Cluster, topic string, p int32) int64 {
	t.Helper()
	pi := c.Kfake().PartitionInfo(topic, p)
	if pi == nil {
		t.Fatalf("partition %s/%d does not exist", topic, p)
	}
	return pi.HighWatermark
}

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
