package devcluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
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
// Topic ids and the leader come from the cluster's metadata (helperAdmin), so
// cl may be a client that is not allowed to describe the topics.
func produceRaw(t *testing.T, c *Cluster, cl *kgo.Client, txnID *string, parts ...partBatch) map[string]int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	req.TransactionID = txnID
	ids := make(map[[16]byte]string)
	for _, p := range parts {
		id := topicID(t, c, p.topic)
		ids[id] = p.topic
		i := -1
		for j := range req.Topics {
			if req.Topics[j].Topic == p.topic {
				i = j
			}
		}
		if i < 0 {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = p.topic
			rt.TopicID = id // kgo may pick v13, which names topics by id
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p.partition
		rp.Records = p.records
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	leader := leaderFor(t, c, parts[0].topic, parts[0].partition)
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

// The helpers below reach the cluster only through the protocol, so that a
// test runs unchanged on either engine. They use helperAdmin, a client with
// the cluster's own credentials (the internal super user under SASL or
// ACLs), so they work whatever the test's clients may do.

var (
	helperMu      sync.Mutex
	helperClients = map[*Cluster]*kadm.Client{}
)

// helperAdmin returns the admin client of c's helpers, made on first use
// and closed when t ends.
func helperAdmin(t *testing.T, c *Cluster) *kadm.Client {
	t.Helper()
	helperMu.Lock()
	defer helperMu.Unlock()
	if adm, ok := helperClients[c]; ok {
		return adm
	}
	var opts []kgo.Opt
	if c.kafka != nil {
		opts = c.adminOpts()
	} else {
		opts = append([]kgo.Opt{kgo.SeedBrokers(c.bootstrap...)}, c.tlsOpt()...)
		if c.auth != nil {
			opts = append(opts, c.auth.opt())
		}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	helperClients[c] = adm
	t.Cleanup(func() {
		helperMu.Lock()
		delete(helperClients, c)
		helperMu.Unlock()
		cl.Close()
	})
	return adm
}

// createTopic creates topic with the cluster's default replication and the
// given configs through CreateTopics, and waits until every partition has a
// leader that answers ListOffsets for it (Kafka elects leaders after
// CreateTopics has answered).
func createTopic(t *testing.T, c *Cluster, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	adm := helperAdmin(t, c)
	var cfgs map[string]*string
	for k, v := range configs {
		if cfgs == nil {
			cfgs = make(map[string]*string)
		}
		cfgs[k] = kmsg.StringPtr(v)
	}
	resp, err := adm.CreateTopic(testCtx(t), partitions, -1, cfgs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s with %v: %v", topic, configs, err)
	}
	waitFor(t, "leaders of "+topic, func() error {
		md, err := adm.Metadata(testCtx(t), topic)
		if err != nil {
			return err
		}
		td := md.Topics[topic]
		if td.Err != nil {
			return td.Err
		}
		if int32(len(td.Partitions)) != partitions {
			return fmt.Errorf("metadata has %d of %d partitions", len(td.Partitions), partitions)
		}
		for _, pd := range td.Partitions {
			if pd.Err != nil || pd.Leader < 0 {
				return fmt.Errorf("partition %d: leader %d, %v", pd.Partition, pd.Leader, pd.Err)
			}
		}
		ends, err := adm.ListEndOffsets(testCtx(t), topic)
		if err != nil {
			return err
		}
		return ends.Error()
	})
}

// waitFor polls cond until it returns nil, failing the test with its last
// error after 30 seconds.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// topicDetail is the metadata of an existing topic.
func topicDetail(t *testing.T, c *Cluster, topic string) kadm.TopicDetail {
	t.Helper()
	md, err := helperAdmin(t, c).Metadata(testCtx(t), topic)
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		t.Fatalf("topic %q does not exist: %v", topic, td.Err)
	}
	return td
}

// topicID returns the id of an existing topic.
func topicID(t *testing.T, c *Cluster, topic string) [16]byte {
	t.Helper()
	return topicDetail(t, c, topic).ID
}

// leaderFor returns the broker id leading a partition.
func leaderFor(t *testing.T, c *Cluster, topic string, p int32) int32 {
	t.Helper()
	pd, ok := topicDetail(t, c, topic).Partitions[p]
	if !ok || pd.Leader < 0 {
		t.Fatalf("partition %s/%d has no leader (%+v)", topic, p, pd)
	}
	return pd.Leader
}

// highWatermark reads a partition's end offset (ListOffsets latest,
// read_uncommitted).
func highWatermark(t *testing.T, c *Cluster, topic string, p int32) int64 {
	t.Helper()
	return listedOffset(t, c, topic, p, true)
}

// logStartOffset reads a partition's log start offset (ListOffsets earliest).
func logStartOffset(t *testing.T, c *Cluster, topic string, p int32) int64 {
	t.Helper()
	return listedOffset(t, c, topic, p, false)
}

func listedOffset(t *testing.T, c *Cluster, topic string, p int32, end bool) int64 {
	t.Helper()
	adm := helperAdmin(t, c)
	list := adm.ListStartOffsets
	if end {
		list = adm.ListEndOffsets
	}
	offs, err := list(testCtx(t), topic)
	if err != nil {
		t.Fatalf("listing offsets of %s: %v", topic, err)
	}
	o, ok := offs.Lookup(topic, p)
	if !ok {
		t.Fatalf("partition %s/%d does not exist", topic, p)
	}
	if o.Err != nil {
		t.Fatalf("listing offsets of %s/%d: %v", topic, p, o.Err)
	}
	return o.Offset
}

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
