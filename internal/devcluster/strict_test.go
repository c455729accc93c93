package devcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// The table tests of the strict layer run on both engines: "embedded", kfake
// with the strict layer under test, and "kafka", Apache Kafka brokers of
// DefaultKafkaVersion (or KMIRROR_KAFKA_VERSION), the reference the strict
// layer must agree with. Each subtest starts one cluster that the test's
// cases share, each case on fresh topics. Run one engine with
// -run 'TestStrict.*/embedded'.

// onEngines runs f as one subtest per engine, on a cluster started with opts.
func onEngines(t *testing.T, opts []Option, f func(t *testing.T, c *Cluster)) {
	t.Helper()
	for _, e := range []EngineKind{Embedded, Kafka} {
		t.Run(string(e), func(t *testing.T) {
			c := startT(t, append([]Option{Engine(e)}, opts...)...)
			if e == Kafka {
				// Runs before the cluster closes (cleanups run last
				// first): a failure shows what the brokers logged.
				t.Cleanup(func() {
					if !t.Failed() {
						return
					}
					for _, n := range c.kafka.nodes {
						b, _ := os.ReadFile(filepath.Join(n.dir, "server.log"))
						t.Logf("broker %d's server.log ends:\n%s", n.id, tail(string(b), 60))
					}
				})
			}
			f(t, c)
		})
	}
}

// TestStrictProduceChecks sends one raw batch per case, each bad in one way,
// and checks Kafka's error code, and that a refused batch leaves the log as it
// was while an accepted one is appended.
func TestStrictProduceChecks(t *testing.T) {
	onEngines(t, nil, testStrictProduceChecks)
}

func testStrictProduceChecks(t *testing.T, c *Cluster) {
	cl := newClient(t, c)

	now := time.Now().UnixMilli()
	hour := int64(time.Hour / time.Millisecond)
	withKeyless := func(tb testBatch) testBatch {
		tb.records[1].nullKey = true
		return tb
	}

	cases := []struct {
		name    string
		configs map[string]string
		batch   testBatch
		raw     func([]byte) []byte // rewrites the encoded batch
		want    *kerr.Error         // nil: accepted
	}{
		{name: "valid batch", batch: plain(3)},
		{name: "base offset not zero", batch: func() testBatch { b := plain(3); b.baseOffset = 5; return b }(), want: kerr.InvalidRecord},
		{name: "two batches", batch: plain(1), raw: func(b []byte) []byte { return concat(b, b) }, want: kerr.InvalidRecord},
		{name: "magic 1", batch: func() testBatch { b := plain(1); b.magic = 1; return b }(), want: kerr.InvalidRecord},
		{name: "unknown magic 3", batch: func() testBatch { b := plain(1); b.magic = 3; return b }(), want: kerr.CorruptMessage},
		{name: "no batch at all", batch: plain(1), raw: func([]byte) []byte { return []byte{} }, want: kerr.InvalidRecord},
		{name: "trailing partial batch is ignored", batch: plain(2), raw: func(b []byte) []byte { return concat(b, []byte{0, 0, 0}) }},
		{name: "last offset delta above count", batch: func() testBatch { b := plain(3); b.lastOffsetDelta = i32(5); return b }(), want: kerr.InvalidRecord},
		{name: "header count above encoded records", batch: func() testBatch {
			b := plain(3)
			b.numRecords, b.lastOffsetDelta = i32(4), i32(3)
			return b
		}(), want: kerr.InvalidRecord},
		{name: "header count below encoded records", batch: func() testBatch {
			b := plain(3)
			b.numRecords, b.lastOffsetDelta = i32(2), i32(1)
			return b
		}(), want: kerr.InvalidRecord},
		{name: "zstd header count above encoded records", batch: func() testBatch {
			b := plain(3)
			b.attrs = codecZstd
			b.numRecords, b.lastOffsetDelta = i32(4), i32(3)
			return b
		}(), want: kerr.InvalidRecord},
		{name: "valid zstd batch", batch: func() testBatch { b := plain(3); b.attrs = codecZstd; return b }()},
		// Kafka never looks at the inner offsets of an uncompressed batch
		// and keeps it as is.
		{name: "inner offset deltas with a hole are kept", batch: func() testBatch {
			b := plain(3)
			b.records[1].offsetDelta, b.records[2].offsetDelta = i32(2), i32(3)
			return b
		}()},
		// A broker bug (see checkBatch): Kafka tries to rebuild the batch
		// from records read without their keys.
		{name: "zstd inner offset deltas with a hole", batch: func() testBatch {
			b := plain(3)
			b.attrs = codecZstd
			b.records[2].offsetDelta = i32(7)
			return b
		}(), want: kerr.UnknownServerError},
		{name: "zstd hole and keyless record on compact topic: record error wins",
			configs: map[string]string{"cleanup.policy": "compact"},
			batch: func() testBatch {
				b := withKeyless(plain(3))
				b.attrs = codecZstd
				b.records[2].offsetDelta = i32(7)
				return b
			}(), want: kerr.InvalidRecord},
		{name: "control batch", batch: func() testBatch { b := plain(1); b.attrs = attrControl; return b }(), want: kerr.InvalidRecord},
		{name: "bad crc", batch: func() testBatch { b := plain(2); b.badCRC = true; return b }(), want: kerr.CorruptMessage},
		{name: "producer id with negative sequence", batch: func() testBatch {
			b := plain(2)
			b.producerID, b.producerEpoch, b.baseSequence = 9000, 0, -1
			return b
		}(), want: kerr.InvalidRecord},
		{name: "keyless record on compact topic", configs: map[string]string{"cleanup.policy": "compact"},
			batch: withKeyless(plain(3)), want: kerr.InvalidRecord},
		{name: "keyless record on compact,delete topic", configs: map[string]string{"cleanup.policy": "compact,delete"},
			batch: withKeyless(plain(3)), want: kerr.InvalidRecord},
		{name: "keyless record on delete topic", batch: withKeyless(plain(3))},
		{name: "keyed records on compact topic", configs: map[string]string{"cleanup.policy": "compact"}, batch: plain(3)},
		{name: "timestamp two hours ahead, 4.x default", batch: func() testBatch { b := plain(2); b.firstTimestamp = now + 2*hour; return b }(),
			want: kerr.InvalidTimestamp},
		{name: "timestamp half an hour ahead", batch: func() testBatch { b := plain(2); b.firstTimestamp = now + hour/2; return b }()},
		{name: "timestamp two hours ahead, unlimited after.max.ms",
			configs: map[string]string{"message.timestamp.after.max.ms": "9223372036854775807"},
			batch:   func() testBatch { b := plain(2); b.firstTimestamp = now + 2*hour; return b }()},
		{name: "timestamp an hour behind, before.max.ms one minute",
			configs: map[string]string{"message.timestamp.before.max.ms": "60000"},
			batch:   func() testBatch { b := plain(2); b.firstTimestamp = now - hour; return b }(), want: kerr.InvalidTimestamp},
		{name: "year-old timestamp, default before.max.ms", batch: func() testBatch { b := plain(2); b.firstTimestamp = now - 365*24*hour; return b }()},
		{name: "timestamp ahead on LogAppendTime topic is not checked",
			configs: map[string]string{"message.timestamp.type": "LogAppendTime"},
			batch:   func() testBatch { b := plain(2); b.firstTimestamp = now + 2*hour; return b }()},
		{name: "LogAppendTime bit on LogAppendTime topic",
			configs: map[string]string{"message.timestamp.type": "LogAppendTime"},
			batch:   func() testBatch { b := plain(2); b.attrs = attrLogAppendTime; return b }(), want: kerr.InvalidTimestamp},
		{name: "LogAppendTime bit without timestamp", batch: func() testBatch {
			b := plain(2)
			b.attrs = attrLogAppendTime
			b.maxTimestamp = i64(-1)
			return b
		}(), want: kerr.InvalidTimestamp},
		{name: "LogAppendTime bit on CreateTime topic", batch: func() testBatch { b := plain(2); b.attrs = attrLogAppendTime; return b }()},
		{name: "keyless record and bad timestamp: timestamp wins",
			configs: map[string]string{"cleanup.policy": "compact", "message.timestamp.after.max.ms": "3600000"}, // also on 3.x
			batch: func() testBatch {
				b := plain(3)
				b.records[0].nullKey = true
				b.records[2].tsDelta = 2 * hour
				return b
			}(), want: kerr.InvalidTimestamp},
		{name: "batch above max.message.bytes", configs: map[string]string{"max.message.bytes": "100"},
			batch: plain(5), want: kerr.MessageTooLarge},
		// segment.bytes is at least 1 MiB on Kafka 4.x.
		{name: "batch above segment.bytes", configs: map[string]string{"segment.bytes": "1048576", "max.message.bytes": "2097152"},
			batch: testBatch{producerID: -1, producerEpoch: -1, baseSequence: -1,
				records: []testRecord{{key: []byte("k"), value: make([]byte, 1100000)}}},
			want: kerr.RecordListTooLarge},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("produce-%d", i)
			createTopic(t, c, topic, 1, tc.configs)
			b := tc.batch.encode(t)
			if tc.raw != nil {
				b = tc.raw(b)
			}
			got := produceRaw(t, c, cl, nil, partBatch{topic, 0, b})[tpKey(topic, 0)]
			var want int16
			if tc.want != nil {
				want = tc.want.Code
			}
			if got != want {
				t.Fatalf("error code %d (%v), want %d (%v)", got, kerr.ErrorForCode(got), want, tc.want)
			}
			hw := highWatermark(t, c, topic, 0)
			switch {
			case tc.want != nil && hw != 0:
				t.Fatalf("refused batch moved the high watermark to %d", hw)
			case tc.want == nil && hw != int64(len(tc.batch.records)):
				t.Fatalf("accepted batch of %d records left the high watermark at %d", len(tc.batch.records), hw)
			}
		})
	}
}

// TestStrictErrorMessage checks the ErrorMessage raw clients get with a
// refusal: Kafka sends one only for per-record errors (keys, timestamps),
// whose exception is a RecordValidationException (ReplicaManager's
// hasCustomErrorMessage), and none for a refused batch.
func TestStrictErrorMessage(t *testing.T) {
	onEngines(t, nil, testStrictErrorMessage)
}

func testStrictErrorMessage(t *testing.T, c *Cluster) {
	cl := newClient(t, c)
	badRange := plain(3)
	badRange.lastOffsetDelta = i32(5)
	keyless := plain(3)
	keyless.records[0].nullKey, keyless.records[2].nullKey = true, true
	future := plain(2)
	future.firstTimestamp = time.Now().Add(2 * time.Hour).UnixMilli()
	for i, tc := range []struct {
		name    string
		configs map[string]string
		batch   testBatch
		want    *kerr.Error
		message func(topic string) string // nil: no message
	}{
		{name: "batch refused, no message", batch: badRange, want: kerr.InvalidRecord},
		{name: "keyless records on compact topic", configs: map[string]string{"cleanup.policy": "compact"}, batch: keyless, want: kerr.InvalidRecord,
			message: func(topic string) string {
				return "One or more records have been rejected due to 2 record errors in total, and only showing the first three errors at most: [" +
					"RecordError(batchIndex=0, message='Compacted topic cannot accept message without key in topic partition " + topic + "-0'), " +
					"RecordError(batchIndex=2, message='Compacted topic cannot accept message without key in topic partition " + topic + "-0')]"
			}},
		{name: "timestamp out of range", configs: map[string]string{"message.timestamp.after.max.ms": "3600000"}, batch: future, want: kerr.InvalidTimestamp,
			message: func(string) string { return "One or more records have been rejected due to invalid timestamp" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("msg-%d", i)
			createTopic(t, c, topic, 1, tc.configs)
			req := kmsg.NewPtrProduceRequest()
			req.Acks = -1
			req.TimeoutMillis = 5000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			rt.TopicID = topicID(t, c, topic)
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = tc.batch.encode(t)
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(testCtx(t), cl.Broker(int(leaderFor(t, c, topic, 0))))
			if err != nil {
				t.Fatal(err)
			}
			if req.Version < 8 {
				t.Fatalf("produce went out as v%d, which has no ErrorMessage", req.Version)
			}
			p := resp.Topics[0].Partitions[0]
			if p.ErrorCode != tc.want.Code {
				t.Fatalf("error code %d (%v), want %v", p.ErrorCode, kerr.ErrorForCode(p.ErrorCode), tc.want)
			}
			switch {
			case tc.message == nil && p.ErrorMessage != nil:
				t.Fatalf("error message %q, want none", *p.ErrorMessage)
			case tc.message != nil && (p.ErrorMessage == nil || *p.ErrorMessage != tc.message(topic)):
				t.Fatalf("error message %v, want %q", deref(p.ErrorMessage), tc.message(topic))
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return fmt.Sprintf("%q", *s)
}

// TestStrictPerPartition sends one request whose partitions are good and bad
// across two topics: only the bad ones are refused, the good ones appended.
func TestStrictPerPartition(t *testing.T) {
	onEngines(t, nil, testStrictPerPartition)
}

func testStrictPerPartition(t *testing.T, c *Cluster) {
	cl := newClient(t, c)
	for _, topic := range []string{"a", "b"} {
		createTopic(t, c, topic, 3, nil)
	}
	baseOffset := plain(2)
	baseOffset.baseOffset = 7
	badCRC := plain(2)
	badCRC.badCRC = true

	codes := produceRaw(t, c, cl, nil,
		partBatch{"a", 0, baseOffset.encode(t)},
		partBatch{"a", 1, plain(1).encode(t)},
		partBatch{"a", 2, badCRC.encode(t)},
		partBatch{"b", 0, plain(2).encode(t)},
		partBatch{"b", 1, concat(plain(1).encode(t), plain(1).encode(t))},
	)
	want := map[string]struct {
		code int16
		hw   int64
	}{
		"a/0": {kerr.InvalidRecord.Code, 0},
		"a/1": {0, 1},
		"a/2": {kerr.CorruptMessage.Code, 0},
		"b/0": {0, 2},
		"b/1": {kerr.InvalidRecord.Code, 0},
	}
	for tp, w := range want {
		if codes[tp] != w.code {
			t.Errorf("%s: error code %d, want %d (all: %v)", tp, codes[tp], w.code, codes)
		}
		var topic string
		var p int32
		fmt.Sscanf(strings.Replace(tp, "/", " ", 1), "%s %d", &topic, &p)
		if hw := highWatermark(t, c, topic, p); hw != w.hw {
			t.Errorf("%s: high watermark %d, want %d", tp, hw, w.hw)
		}
	}
	if len(codes) != len(want) {
		t.Errorf("response has %d partitions, want %d: %v", len(codes), len(want), codes)
	}

	// A second round on the same partitions proves no fault was left
	// behind to refuse a later good request.
	codes = produceRaw(t, c, cl, nil,
		partBatch{"a", 0, plain(1).encode(t)},
		partBatch{"a", 2, plain(1).encode(t)},
	)
	for _, tp := range []string{"a/0", "a/2"} {
		if codes[tp] != 0 {
			t.Errorf("%s: good batch after a refused one got code %d", tp, codes[tp])
		}
	}
}

// TestStrictTransactionalRequest covers the checks Kafka applies to a whole
// produce request.
func TestStrictTransactionalRequest(t *testing.T) {
	onEngines(t, nil, testStrictTransactionalRequest)
}

func testStrictTransactionalRequest(t *testing.T, c *Cluster) {
	cl := newClient(t, c)
	txn := func(pid int64, epoch int16) []byte {
		b := plain(1)
		b.attrs = attrTransactional
		b.producerID, b.producerEpoch, b.baseSequence = pid, epoch, 0
		return b.encode(t)
	}
	id := "txn"
	for i, tc := range []struct {
		name  string
		txnID *string
		p0    []byte
		p1    []byte
		want  *kerr.Error
	}{
		{"two producer ids", &id, txn(1000, 0), txn(1001, 0), kerr.InvalidProducerIDMapping},
		{"one producer id, two epochs", &id, txn(1000, 0), txn(1000, 1), kerr.InvalidProducerIDMapping},
		{"transactional records without a transactional id", nil, txn(1000, 0), plain(1).encode(t), kerr.TransactionalIDAuthorizationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("tx-%d", i)
			createTopic(t, c, topic, 2, nil)
			codes := produceRaw(t, c, cl, tc.txnID, partBatch{topic, 0, tc.p0}, partBatch{topic, 1, tc.p1})
			for p := int32(0); p < 2; p++ {
				if tp := tpKey(topic, p); codes[tp] != tc.want.Code {
					t.Errorf("%s: error code %d, want %d (%v)", tp, codes[tp], tc.want.Code, tc.want)
				}
			}
			for p := int32(0); p < 2; p++ {
				if hw := highWatermark(t, c, topic, p); hw != 0 {
					t.Errorf("partition %d: high watermark %d after a refused request", p, hw)
				}
			}
		})
	}
}

// TestStrictZstdNeedsProduceV7 pins the client to Produce v6.
func TestStrictZstdNeedsProduceV7(t *testing.T) {
	onEngines(t, nil, testStrictZstdNeedsProduceV7)
}

func testStrictZstdNeedsProduceV7(t *testing.T, c *Cluster) {
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.Produce), 6)
	cl := newClient(t, c, kgo.MaxVersions(versions))
	createTopic(t, c, "zstd", 1, nil)
	b := plain(2)
	b.attrs = codecZstd
	if got := produceRaw(t, c, cl, nil, partBatch{"zstd", 0, b.encode(t)})["zstd/0"]; got != kerr.UnsupportedCompressionType.Code {
		t.Fatalf("error code %d, want UNSUPPORTED_COMPRESSION_TYPE", got)
	}
}

// TestStrictNotLeader checks Kafka's order on a broker that does not lead
// the partition: the request's shape is checked first, the batch contents
// only on the leader, so a bad CRC sent to a follower is NOT_LEADER.
func TestStrictNotLeader(t *testing.T) {
	onEngines(t, []Option{Brokers(2)}, testStrictNotLeader)
}

func testStrictNotLeader(t *testing.T, c *Cluster) {
	cl := newClient(t, c)
	createTopic(t, c, "nl", 1, nil)
	td := topicDetail(t, c, "nl")
	leader := td.Partitions[0].Leader
	follower := int32(-1)
	for _, r := range td.Partitions[0].Replicas {
		if r != leader {
			follower = r
		}
	}
	if follower < 0 {
		t.Fatalf("partition nl/0 has no follower: replicas %v, leader %d", td.Partitions[0].Replicas, leader)
	}
	send := func(records []byte) int16 {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "nl"
		rt.TopicID = td.ID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(testCtx(t), cl.Broker(int(follower)))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	badCRC := plain(1)
	badCRC.badCRC = true
	if got := send(badCRC.encode(t)); got != kerr.NotLeaderForPartition.Code {
		t.Errorf("bad CRC to follower: error code %d, want NOT_LEADER_OR_FOLLOWER", got)
	}
	if got := send(concat(plain(1).encode(t), plain(1).encode(t))); got != kerr.InvalidRecord.Code {
		t.Errorf("two batches to follower: error code %d, want INVALID_RECORD", got)
	}
}

// TestStrictDeleteRecords checks POLICY_VIOLATION on compact-only topics,
// per partition within one request.
func TestStrictDeleteRecords(t *testing.T) {
	onEngines(t, nil, testStrictDeleteRecords)
}

func testStrictDeleteRecords(t *testing.T, c *Cluster) {
	cl := newClient(t, c)
	policies := map[string]string{"compact": "compact", "both": "compact,delete", "delete": "delete"}
	for topic, policy := range policies {
		createTopic(t, c, topic, 1, map[string]string{"cleanup.policy": policy})
		if code := produceRaw(t, c, cl, nil, partBatch{topic, 0, plain(3).encode(t)})[tpKey(topic, 0)]; code != 0 {
			t.Fatalf("%s: seeding produce failed with code %d", topic, code)
		}
	}
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 5000
	for topic := range policies {
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = 2
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{"compact": kerr.PolicyViolation.Code, "both": 0, "delete": 0}
	for _, rt := range resp.Topics {
		got := rt.Partitions[0].ErrorCode
		if got != want[rt.Topic] {
			t.Errorf("%s: error code %d, want %d", rt.Topic, got, want[rt.Topic])
		}
		wantStart := int64(2)
		if want[rt.Topic] != 0 {
			wantStart = 0
		}
		if ls := logStartOffset(t, c, rt.Topic, 0); ls != wantStart {
			t.Errorf("%s: log start offset %d, want %d", rt.Topic, ls, wantStart)
		}
	}
}

// TestStrictFollowsConfigChanges alters topic configs through the protocol
// and checks that the very next produce is judged by the new values.
// Embedded only: "the very next" is the strict layer's promise (it reads
// kfake's configs on every request); a Kafka broker applies an altered
// config once the metadata log reaches it, a moment later.
func TestStrictFollowsConfigChanges(t *testing.T) {
	c := startT(t)
	cl := newClient(t, c)
	adm := kadm.NewClient(cl)
	ctx := testCtx(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "cfg"); err != nil {
		t.Fatal(err)
	}
	keyless := withNullKey(plain(2))
	future := plain(1)
	future.firstTimestamp = time.Now().Add(2 * time.Hour).UnixMilli()

	produce := func(tb testBatch) int16 {
		return produceRaw(t, c, cl, nil, partBatch{"cfg", 0, tb.encode(t)})["cfg/0"]
	}
	alter := func(cfgs ...kadm.AlterConfig) {
		t.Helper()
		rs, err := adm.AlterTopicConfigs(ctx, cfgs, "cfg")
		if err == nil {
			_, err = rs.On("cfg", nil)
		}
		if err != nil {
			t.Fatalf("altering configs: %v", err)
		}
	}
	steps := []struct {
		name  string
		alter []kadm.AlterConfig
		batch testBatch
		want  int16
	}{
		{"keyless on default topic", nil, keyless, 0},
		{"keyless after set compact", []kadm.AlterConfig{{Name: "cleanup.policy", Value: kmsg.StringPtr("compact")}}, keyless, kerr.InvalidRecord.Code},
		{"keyless after append delete", []kadm.AlterConfig{{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kmsg.StringPtr("delete")}}, keyless, kerr.InvalidRecord.Code},
		{"keyless after delete override", []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "cleanup.policy"}}, keyless, 0},
		{"future timestamp on default", nil, future, kerr.InvalidTimestamp.Code},
		{"future timestamp after unlimited after.max.ms", []kadm.AlterConfig{{Name: "message.timestamp.after.max.ms", Value: kmsg.StringPtr("9223372036854775807")}}, future, 0},
	}
	for _, s := range steps {
		if s.alter != nil {
			alter(s.alter...)
		}
		if got := produce(s.batch); got != s.want {
			t.Errorf("%s: error code %d, want %d", s.name, got, s.want)
		}
	}
}

func withNullKey(tb testBatch) testBatch {
	for i := range tb.records {
		tb.records[i].nullKey = true
	}
	return tb
}

// TestStrictLogAppendTimeBitIsNormalized checks that a client batch with the
// LogAppendTime bit on a CreateTime topic is stored the way Kafka stores it
// (CreateTime, CRC recomputed), so consumers can read it back; kfake alone
// stores a batch whose CRC no longer matches. As on Kafka, the records then
// read back with their own create times (first timestamp + delta), not the
// batch's max timestamp they were validated with.
func TestStrictLogAppendTimeBitIsNormalized(t *testing.T) {
	onEngines(t, nil, testStrictLogAppendTimeBitIsNormalized)
}

func testStrictLogAppendTimeBitIsNormalized(t *testing.T, c *Cluster) {
	createTopic(t, c, "lat", 1, nil)
	cl := newClient(t, c, kgo.ConsumeTopics("lat"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	b := plain(2)
	b.attrs = attrLogAppendTime
	ts := time.Now().Add(-time.Minute).UnixMilli()
	b.firstTimestamp = ts - 10
	b.maxTimestamp = i64(ts)
	if code := produceRaw(t, c, cl, nil, partBatch{"lat", 0, b.encode(t)})["lat/0"]; code != 0 {
		t.Fatalf("produce: error code %d", code)
	}
	recs := pollN(t, cl, 2)
	for _, r := range recs {
		if r.Attrs.TimestampType() != 0 {
			t.Errorf("record at %d stored as timestamp type %d, want CreateTime", r.Offset, r.Attrs.TimestampType())
		}
		if want := b.firstTimestamp; r.Timestamp.UnixMilli() != want {
			t.Errorf("record at %d has timestamp %d, want its create time %d", r.Offset, r.Timestamp.UnixMilli(), want)
		}
	}
}

// pollN polls until n records arrived or the test's deadline passes. A fetch
// error (for example a CRC mismatch) fails the test.
func pollN(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("got %d of %d records before the deadline", len(recs), n)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch error on %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// TestLenient checks that Lenient leaves kfake's own answers (embedded
// only: Kafka has no lenient mode).
func TestLenient(t *testing.T) {
	c := startT(t, Lenient())
	cl := newClient(t, c)
	createTopic(t, c, "compacted", 1, map[string]string{"cleanup.policy": "compact"})
	if code := produceRaw(t, c, cl, nil, partBatch{"compacted", 0, withNullKey(plain(2)).encode(t)})["compacted/0"]; code != 0 {
		t.Errorf("keyless record on compacted topic: code %d, want kfake's acceptance", code)
	}
	b := plain(1)
	b.baseOffset = 3
	if code := produceRaw(t, c, cl, nil, partBatch{"compacted", 0, b.encode(t)})["compacted/0"]; code != kerr.CorruptMessage.Code {
		t.Errorf("base offset 3: code %d, want kfake's CORRUPT_MESSAGE", code)
	}
}

// TestStrictClientsStillWork runs franz-go's producer (every codec,
// idempotent and transactional) and consumer against a strict cluster.
// Embedded only: it checks that the strict layer lets real clients through.
func TestStrictClientsStillWork(t *testing.T) {
	c := startT(t)
	ctx := testCtx(t)
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	const perCodec = 50
	for name, codec := range codecs {
		topic := "codec-" + name
		createTopic(t, c, topic, 2, map[string]string{"cleanup.policy": "compact,delete"})
		cl := newClient(t, c, kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(topic))
		var rs []*kgo.Record
		for i := range perCodec {
			rs = append(rs, &kgo.Record{
				Key:     fmt.Appendf(nil, "k%d", i%7),
				Value:   []byte(strings.Repeat("compressible ", 20)),
				Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}},
			})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("%s: idempotent produce: %v", name, err)
		}
	}

	// Transactions: one committed, one aborted.
	createTopic(t, c, "txn", 2, nil)
	txcl := newClient(t, c, kgo.TransactionalID("strict-test"), kgo.DefaultProduceTopic("txn"))
	for _, commit := range []bool{true, false} {
		if err := txcl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if err := txcl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "commit=%v %d", commit, i)}).FirstErr(); err != nil {
				t.Fatalf("transactional produce: %v", err)
			}
		}
		if err := txcl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("ending transaction: %v", err)
		}
	}

	// A compacted topic still refuses keyless records from a real client,
	// with an error the client does not retry.
	cl := newClient(t, c, kgo.DefaultProduceTopic("codec-none"))
	err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("keyless record on compacted topic: %v, want INVALID_RECORD", err)
	}

	var topics []string
	for name := range codecs {
		topics = append(topics, "codec-"+name)
	}
	consumer := newClient(t, c,
		kgo.ConsumeTopics(append(topics, "txn")...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	want := len(codecs)*perCodec + 10
	recs := pollN(t, consumer, want)
	counts := make(map[string]int)
	for _, r := range recs {
		counts[r.Topic]++
		if r.Topic == "txn" && !strings.HasPrefix(string(r.Value), "commit=true") {
			t.Errorf("read_committed consumer saw an aborted record: %q", r.Value)
		}
	}
	for _, topic := range topics {
		if counts[topic] != perCodec {
			t.Errorf("%s: consumed %d records, want %d", topic, counts[topic], perCodec)
		}
	}
	if counts["txn"] != 10 {
		t.Errorf("txn: consumed %d committed records, want 10", counts["txn"])
	}
}
