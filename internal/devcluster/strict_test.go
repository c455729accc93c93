package devcluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestStrictProduceChecks sends one raw batch per case, each bad in one way,
// and checks Kafka's error code, and that a refused batch leaves the log as it
// was while an accepted one is appended.
func TestStrictProduceChecks(t *testing.T) {
	c := StartT(t)
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
		{name: "inner offset deltas with a hole", batch: func() testBatch {
			b := plain(3)
			b.records[1].offsetDelta, b.records[2].offsetDelta = i32(2), i32(3)
			return b
		}(), want: kerr.InvalidRecord},
		{name: "zstd inner offset deltas with a hole", batch: func() testBatch {
			b := plain(3)
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
			configs: map[string]string{"cleanup.policy": "compact"},
			batch: func() testBatch {
				b := plain(3)
				b.records[0].nullKey = true
				b.records[2].tsDelta = 2 * hour
				return b
			}(), want: kerr.InvalidTimestamp},
		{name: "batch above max.message.bytes", configs: map[string]string{"max.message.bytes": "100"},
			batch: plain(5), want: kerr.MessageTooLarge},
		{name: "batch above segment.bytes", configs: map[string]string{"segment.bytes": "100"},
			batch: plain(5), want: kerr.RecordListTooLarge},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("produce-%d", i)
			if err := c.Kfake().CreateTopic(topic, 1, tc.configs); err != nil {
				t.Fatal(err)
			}
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

// TestStrictErrorMessage checks that raw clients get Kafka's message for a
// refusal, not only its code.
func TestStrictErrorMessage(t *testing.T) {
	c := StartT(t)
	cl := newClient(t, c)
	if err := c.Kfake().CreateTopic("msg", 1, nil); err != nil {
		t.Fatal(err)
	}
	b := plain(3)
	b.lastOffsetDelta = i32(5)
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "msg"
	rt.TopicID = c.Kfake().TopicInfo("msg").TopicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = b.encode(t)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != kerr.InvalidRecord.Code || p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, "Inconsistent batch offset range") {
		t.Fatalf("got code %d message %v, want INVALID_RECORD with Kafka's message", p.ErrorCode, p.ErrorMessage)
	}
}

// TestStrictPerPartition sends one request whose partitions are good and bad
// across two topics: only the bad ones are refused, the good ones appended.
func TestStrictPerPartition(t *testing.T) {
	c := StartT(t)
	cl := newClient(t, c)
	for _, topic := range []string{"a", "b"} {
		if err := c.Kfake().CreateTopic(topic, 3, nil); err != nil {
			t.Fatal(err)
		}
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
	c := StartT(t)
	cl := newClient(t, c)
	if err := c.Kfake().CreateTopic("tx", 2, nil); err != nil {
		t.Fatal(err)
	}
	txn := func(pid int64, epoch int16) []byte {
		b := plain(1)
		b.attrs = attrTransactional
		b.producerID, b.producerEpoch, b.baseSequence = pid, epoch, 0
		return b.encode(t)
	}
	id := "txn"
	for _, tc := range []struct {
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
			codes := produceRaw(t, c, cl, tc.txnID, partBatch{"tx", 0, tc.p0}, partBatch{"tx", 1, tc.p1})
			for _, tp := range []string{"tx/0", "tx/1"} {
				if codes[tp] != tc.want.Code {
					t.Errorf("%s: error code %d, want %d (%v)", tp, codes[tp], tc.want.Code, tc.want)
				}
			}
			for p := int32(0); p < 2; p++ {
				if hw := highWatermark(t, c, "tx", p); hw != 0 {
					t.Errorf("partition %d: high watermark %d after a refused request", p, hw)
				}
			}
		})
	}
}

// TestStrictZstdNeedsProduceV7 pins the client to Produce v6.
func TestStrictZstdNeedsProduceV7(t *testing.T) {
	c := StartT(t)
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.Produce), 6)
	cl := newClient(t, c, kgo.MaxVersions(versions))
	if err := c.Kfake().CreateTopic("zstd", 1, nil); err != nil {
		t.Fatal(err)
	}
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
	c := StartT(t, Brokers(2))
	cl := newClient(t, c)
	if err := c.Kfake().CreateTopic("nl", 1, nil); err != nil {
		t.Fatal(err)
	}
	leader := c.Kfake().LeaderFor("nl", 0)
	follower := 1 - leader
	send := func(records []byte) int16 {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "nl"
		rt.TopicID = c.Kfake().TopicInfo("nl").TopicID
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
	c := StartT(t)
	cl := newClient(t, c)
	policies := map[string]string{"compact": "compact", "both": "compact,delete", "delete": "delete"}
	for topic, policy := range policies {
		if err := c.Kfake().CreateTopic(topic, 1, map[string]string{"cleanup.policy": policy}); err != nil {
			t.Fatal(err)
		}
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
		if ls := c.Kfake().PartitionInfo(rt.Topic, 0).LogStartOffset; ls != wantStart {
			t.Errorf("%s: log start offset %d, want %d", rt.Topic, ls, wantStart)
		}
	}
}

// TestStrictFollowsConfigChanges alters topic configs through the protocol
// and checks that the very next produce is judged by the new values.
func TestStrictFollowsConfigChanges(t *testing.T) {
	c := StartT(t)
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
	c := StartT(t)
	cl := newClient(t, c, kgo.ConsumeTopics("lat"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err := c.Kfake().CreateTopic("lat", 1, nil); err != nil {
		t.Fatal(err)
	}
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

// TestLenient checks that Lenient leaves kfake's own answers.
func TestLenient(t *testing.T) {
	c := StartT(t, Lenient())
	cl := newClient(t, c)
	if err := c.Kfake().CreateTopic("compacted", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
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
func TestStrictClientsStillWork(t *testing.T) {
	c := StartT(t)
	ctx := testCtx(t)
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	const perCodec = 50
	for name, codec := range codecs {
		topic := "codec-" + name
		if err := c.Kfake().CreateTopic(topic, 2, map[string]string{"cleanup.policy": "compact,delete"}); err != nil {
			t.Fatal(err)
		}
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
	if err := c.Kfake().CreateTopic("txn", 2, nil); err != nil {
		t.Fatal(err)
	}
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
