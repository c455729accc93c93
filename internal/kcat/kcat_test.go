package kcat

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

func needKcat(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
}

// testCluster starts a one-broker kfake cluster with topic t (2 partitions).
func testCluster(t *testing.T) (bootstrap string, cl *kgo.Client, c *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	cl = newClient(t, c)
	return c.ListenAddrs()[0], cl, c
}

func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) []verify.Record {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	out := make([]verify.Record, len(recs))
	for i, r := range recs {
		out[i] = verify.FromKgo(r) // kgo has set the offset
	}
	return out
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func sameRecords(t *testing.T, what string, got, want []verify.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if d := got[i].Diff(want[i]); len(d) > 0 {
			t.Errorf("%s: record %d differs in %v:\n got  %v\n want %v", what, i, d, got[i], want[i])
		}
	}
}

// TestReadBinarySafe checks, against a real librdkafka, every way a record
// could be mangled: null versus empty keys, values and header values,
// every byte value (NUL, newline, quote, backslash, invalid UTF-8),
// duplicate and odd header names, large values, explicit timestamps and all
// compression codecs.
func TestReadBinarySafe(t *testing.T) {
	needKcat(t)
	bootstrap, cl, c := testCluster(t)
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	big := bytes.Repeat([]byte("line\n\x00\"\\\xff"), 20000) // 200 KB
	recs := []*kgo.Record{
		{Key: nil, Value: []byte("null key")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte("null value"), Value: nil},
		{Key: []byte("empty value"), Value: []byte{}},
		{Key: nil, Value: nil},
		{Key: allBytes(), Value: allBytes()},
		{Key: []byte("\xc3\x28 invalid utf-8 \xe2\x82"), Value: []byte("é ünïcode ✓ \u2028")},
		{Key: []byte("headers"), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: "dup", Value: []byte("1")},
			{Key: "null", Value: nil},
			{Key: "dup", Value: []byte("2")},
			{Key: "empty", Value: []byte{}},
			{Key: "", Value: []byte("empty name")},
			{Key: "quote\"back\\slash\nnewline é", Value: allBytes()},
		}},
		{Key: []byte("big"), Value: big},
		{Key: []byte("ts"), Value: []byte("old"), Timestamp: ts},
	}
	for i, r := range recs {
		if r.Timestamp.IsZero() {
			r.Timestamp = ts.Add(time.Duration(i) * time.Millisecond)
		}
	}
	want := produce(t, cl, recs...)

	// The same records again through every codec, each codec its own
	// client so that each batch carries it.
	for _, codec := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		ccl := newClient(t, c, kgo.ProducerBatchCompression(codec))
		again := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			cp := *r
			again[i] = &cp
		}
		want = append(want, produce(t, ccl, again...)...)
	}

	for _, iso := range []string{ReadUncommitted, ReadCommitted} {
		got, err := Read(context.Background(), bootstrap, "t", 0, iso, 0, -1)
		if err != nil {
			t.Fatalf("%s: %v", iso, err)
		}
		sameRecords(t, iso, got, want)
	}
}

// TestReadTransactions checks visibility: aborted records only under
// read_uncommitted, markers never, offsets left as they are.
func TestReadTransactions(t *testing.T) {
	needKcat(t)
	bootstrap, cl, c := testCluster(t)
	ctx := context.Background()
	txn := func(commit bool, vals ...string) []verify.Record {
		t.Helper()
		tcl := newClient(t, c, kgo.TransactionalID(fmt.Sprintf("kcat-test-%v-%s", commit, vals[0])))
		if err := tcl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for _, v := range vals {
			recs = append(recs, &kgo.Record{Value: []byte(v)})
		}
		out := produce(t, tcl, recs...)
		if err := tcl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		return out
	}
	plain1 := produce(t, cl, &kgo.Record{Value: []byte("a")}) // 0
	committed := txn(true, "b", "c")                          // 1, 2, marker 3
	aborted := txn(false, "d")                                // 4, marker 5
	plain2 := produce(t, cl, &kgo.Record{Value: []byte("e")}) // 6
	if plain2[0].Offset != 6 {
		t.Fatalf("setup: last record at %d, want 6", plain2[0].Offset)
	}

	cat := func(parts ...[]verify.Record) []verify.Record {
		var out []verify.Record
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tt := range []struct {
		iso      string
		from, to int64
		want     []verify.Record
	}{
		{ReadUncommitted, 0, -1, cat(plain1, committed, aborted, plain2)},
		{ReadCommitted, 0, -1, cat(plain1, committed, plain2)},
		{ReadCommitted, -1, -1, cat(plain1, committed, plain2)}, // from the log start
		{ReadUncommitted, 2, 5, cat(committed[1:], aborted)},
		// [2, 6) holds one visible record under read_committed, while
		// kcat is told to stop after up to four: the range end wins.
		{ReadCommitted, 2, 6, committed[1:]},
		{ReadCommitted, 3, 4, nil}, // only a marker
		{ReadCommitted, 7, -1, nil},
		{ReadCommitted, 5, 5, nil},
	} {
		t.Run(fmt.Sprintf("%s [%d,%d)", tt.iso, tt.from, tt.to), func(t *testing.T) {
			got, err := Read(ctx, bootstrap, "t", 0, tt.iso, tt.from, tt.to)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, "read", got, tt.want)
		})
	}
}

func TestReadOtherPartitionAndProperties(t *testing.T) {
	needKcat(t)
	bootstrap, cl, _ := testCluster(t)
	want := produce(t, cl, &kgo.Record{Partition: 1, Key: []byte("p1"), Value: []byte("x")})
	cfg := Config{Bootstrap: bootstrap, Properties: map[string]string{"client.id": "kcat-test", "fetch.wait.max.ms": "10"}}
	got, err := cfg.Read(context.Background(), "t", 1, ReadCommitted, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "partition 1", got, want)

	cfg.Properties["no.such.property"] = "1"
	if _, err := cfg.Read(context.Background(), "t", 1, ReadCommitted, 0, -1); err == nil || !strings.Contains(err.Error(), "no.such.property") {
		t.Errorf("unknown librdkafka property: err = %v, want kcat's complaint about it", err)
	}
}

func TestReadErrors(t *testing.T) {
	needKcat(t)
	bootstrap, cl, _ := testCluster(t)
	produce(t, cl, &kgo.Record{Value: []byte("a")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range []struct {
		name      string
		topic     string
		partition int32
		iso       string
		from, to  int64
		wantInErr string
	}{
		{"bad isolation", "t", 0, "read_some", 0, -1, "isolation level"},
		{"unknown topic", "nope", 0, ReadCommitted, 0, -1, "Unknown topic"},
		{"unknown partition", "t", 9, ReadCommitted, 0, -1, "partition 9 does not exist"},
		{"offset out of range", "t", 0, ReadCommitted, 5, -1, "out of range"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(ctx, bootstrap, tt.topic, tt.partition, tt.iso, tt.from, tt.to)
			if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantInErr)
			}
		})
	}
}

// TestDecoder feeds the parser the envelopes kcat writes (copied from real
// kcat 1.7.1 output) and malformed ones.
func TestDecoder(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      string
		want    []verify.Record
		wantErr string
	}{
		{
			name: "null and empty",
			in: `{"topic":"t","partition":0,"offset":0,"tstype":"create","ts":1700000000123,"broker":0,"key":null,"payload":""}` + "\n" +
				`{"topic":"t","partition":0,"offset":1,"tstype":"create","ts":5,"broker":0,"key":"","payload":null}` + "\n",
			want: []verify.Record{
				{Offset: 0, Key: nil, Value: []byte{}, Timestamp: 1700000000123},
				{Offset: 1, Key: []byte{}, Value: nil, Timestamp: 5},
			},
		},
		{
			name: "escapes and raw bytes",
			in:   "{\"partition\":0,\"offset\":7,\"ts\":1,\"key\":\"\\u0000\\u001F\\b\\t\\n\\f\\r\\\"\\\\\\/\",\"payload\":\"\x7f\xff\xc3\x28\\u00e9\"}",
			want: []verify.Record{{Offset: 7, Key: []byte("\x00\x1f\b\t\n\f\r\"\\/"), Value: []byte("\x7f\xff\xc3\x28é"), Timestamp: 1}},
		},
		{
			name: "headers",
			in:   `{"partition":1,"offset":2,"ts":3,"headers":["a","1","a",null,"","",  "b" , "x"],"key":"k","payload":"v"}`,
			want: []verify.Record{{Offset: 2, Key: []byte("k"), Value: []byte("v"), Timestamp: 3, Headers: []verify.Header{
				{Key: "a", Value: []byte("1")}, {Key: "a"}, {Key: "", Value: []byte{}}, {Key: "b", Value: []byte("x")},
			}}},
		},
		{
			name: "no timestamp",
			in:   `{"partition":0,"offset":0,"key":null,"payload":null}`,
			want: []verify.Record{{Offset: 0, Timestamp: -1}},
		},
		{name: "empty stream", in: "\n"},
		{name: "truncated", in: `{"partition":0,"offset":0,"key":"ab`, wantErr: "unexpected EOF"},
		{name: "odd headers", in: `{"partition":0,"offset":0,"headers":["a"],"key":null,"payload":null}`, wantErr: "headers"},
		{name: "missing offset", in: `{"partition":0,"key":null,"payload":null}`, wantErr: "offset"},
		{name: "key_error", in: `{"partition":0,"offset":0,"key":null,"key_error":"bad avro","payload":null}`, wantErr: "bad avro"},
		{name: "bad escape", in: `{"partition":0,"offset":0,"key":"\q","payload":null}`, wantErr: "bad escape"},
		{name: "not an object", in: `[1]`, wantErr: "not a JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dec := newDecoder(strings.NewReader(tt.in))
			var got []verify.Record
			var err error
			for {
				var m message
				m, err = dec.message()
				if err != nil {
					break
				}
				got = append(got, m.rec)
			}
			if err == io.EOF {
				err = nil
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, "decode", got, tt.want)
		})
	}
}

// TestReadWorkload reads a transactional, multi-codec workload with kcat at
// both isolation levels and finds every record where the workload says it
// is: aborted records only under read_uncommitted, markers nowhere.
func TestReadWorkload(t *testing.T) {
	needKcat(t)
	bootstrap, _, _ := testCluster(t)
	spec := workload.Spec{
		Topic: "t", Partitions: 2, Records: 4000, ChunkRecords: 250, Seed: 9,
		Codecs:       workload.AllCodecs,
		NullKeyEvery: 3, EmptyKeyEvery: 4, NullValueEvery: 5, EmptyValueEvery: 6,
		Headers: true, ExplicitTimestamps: true,
		TransactionalID: "kcat", AbortEvery: 3,
	}.WithDefaults()
	if _, err := workload.Produce(context.Background(), []kgo.Opt{kgo.SeedBrokers(bootstrap)}, spec); err != nil {
		t.Fatal(err)
	}
	chunk := spec.ChunkRecords
	for _, iso := range []string{ReadUncommitted, ReadCommitted} {
		for p := range int32(2) {
			var want []verify.Record
			for i := int(p); i < spec.Records; i += 2 {
				if iso == ReadCommitted && spec.Aborted(i) {
					continue
				}
				r := verify.FromKgo(spec.Record(i))
				// One marker per partition after each chunk.
				r.Offset = int64(i/2 + i/chunk)
				want = append(want, r)
			}
			got, err := Read(context.Background(), bootstrap, "t", p, iso, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, fmt.Sprintf("%s partition %d", iso, p), got, want)
		}
	}
}
