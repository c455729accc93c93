package clientoptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kmirror/kmirror/internal/clientop"
)

// Runner runs one operation with the client under test.
type Runner func(ctx context.Context, op clientop.Op) (clientop.Result, error)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// Name returns a topic, group or transactional ID unique to t and what.
func Name(t *testing.T, what string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return unsafeName.ReplaceAllString(t.Name(), "_") + "-" + what + "-" + hex.EncodeToString(b)
}

func admin(t *testing.T, b *Broker) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// CreateTopic creates topic with partitions partitions on both of b's
// clusters, the plain and the SASL one.
func CreateTopic(t *testing.T, b *Broker, topic string, partitions int32) {
	t.Helper()
	_, plainAdm := admin(t, b)
	saslCl, err := kgo.NewClient(kgo.SeedBrokers(b.SASLBootstrap), kgo.SASL(plain.Auth{User: SASLUser, Pass: SASLPassword}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(saslCl.Close)
	for _, adm := range []*kadm.Client{plainAdm, kadm.NewClient(saslCl)} {
		resp, err := adm.CreateTopic(ctxFor(t), partitions, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("creating topic %s: %v", topic, err)
		}
	}
}

// ReadPartition reads partition p of topic with franz-go at the isolation
// level (kgo.ReadCommitted() or kgo.ReadUncommitted()) from offset 0 until
// it has want records, failing t after 20 s.
func ReadPartition(t *testing.T, b *Broker, topic string, p int32, iso kgo.IsolationLevel, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Bootstrap), kgo.FetchIsolationLevel(iso),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(0)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go read %d of %d records of %s[%d]", len(out), want, topic, p)
		}
		if err := fs.Err(); err != nil {
			t.Fatalf("franz-go reading %s[%d]: %v", topic, p, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return "<none>"
}

// txnRecord is one record ProduceTxn wrote into a partition of its own.
type txnRecord struct {
	offset    int64
	txn, rec  int
	committed bool
}

// txnLayout returns the records ProduceTxn writes into one partition, in
// offset order: each transaction's records, then its control record.
func txnLayout(n, m, abortEvery int) []txnRecord {
	var out []txnRecord
	off := int64(0)
	for i := range n {
		for j := range m {
			out = append(out, txnRecord{off, i, j, !clientop.Aborted(i, abortEvery)})
			off++
		}
		off++ // the commit or abort marker
	}
	return out
}

func checkRecords(t *testing.T, what string, got []*kgo.Record, want []txnRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		if g.Offset != w.offset || string(g.Key) != clientop.TxnKey(w.txn, w.rec) ||
			string(g.Value) != clientop.TxnValue(w.txn, w.rec) || header(g, clientop.TxnHeader) != strconv.Itoa(w.txn) {
			t.Fatalf("%s: record %d is offset %d key %q value %q header %q, want offset %d key %q value %q header %q",
				what, k, g.Offset, g.Key, g.Value, header(g, clientop.TxnHeader),
				w.offset, clientop.TxnKey(w.txn, w.rec), clientop.TxnValue(w.txn, w.rec), strconv.Itoa(w.txn))
		}
	}
}

func committedOnly(rs []txnRecord) []txnRecord {
	var out []txnRecord
	for _, r := range rs {
		if r.committed {
			out = append(out, r)
		}
	}
	return out
}

func fetchOffsets(t *testing.T, b *Broker, group, topic string) map[int32]int64 {
	t.Helper()
	_, adm := admin(t, b)
	resp, err := adm.FetchOffsets(ctxFor(t), group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("fetching the offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		out[p] = o.At
	}
	return out
}

func checkPartition(t *testing.T, res clientop.Result, p int32, offset int64, key, value string, records int) {
	t.Helper()
	got, ok := res.Partition(p)
	if !ok {
		t.Fatalf("nothing read from partition %d: %+v", p, res)
	}
	if got.FirstOffset != offset || got.FirstKey == nil || *got.FirstKey != key ||
		got.FirstValue == nil || *got.FirstValue != value || got.Records != records {
		t.Fatalf("partition %d: first offset %d key %s value %s, %d records; want %d %q %q, %d records",
			p, got.FirstOffset, str(got.FirstKey), str(got.FirstValue), got.Records, offset, key, value, records)
	}
}

func str(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}

func eqOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// Transactions checks produce-txn, commit and consume-group on b: the
// transactions read back with franz-go show exactly the committed records at
// read_committed and all of them at read_uncommitted; a group consumer
// starts at the group's committed offsets, honours its isolation level,
// commits nothing unless asked, and fails naming the partition when the
// group has no offset. compression is the producer's (""
// for none).
func Transactions(t *testing.T, run Runner, b *Broker, compression string) {
	ctx := ctxFor(t)
	topic := Name(t, "txn")
	CreateTopic(t, b, topic, 2)

	// Partition 0: 5 transactions of 4, the 2nd and 4th aborted;
	// partition 1: 2 transactions of 3, none aborted.
	p0, p1 := int32(0), int32(1)
	res, err := run(ctx, clientop.ProduceTxn{Conn: clientop.Conn{Bootstrap: b.Bootstrap}, Topic: topic,
		TransactionalID: Name(t, "tid0"), Transactions: 5, RecordsPerTxn: 4, AbortEvery: 2,
		Partition: &p0, Compression: compression})
	if err != nil {
		t.Fatal(err)
	}
	if want := (clientop.Result{CommittedRecords: 12, AbortedRecords: 8, CommittedTxns: 3, AbortedTxns: 2}); !resultEq(res, want) {
		t.Fatalf("produce-txn printed %+v, want %+v", res, want)
	}
	res, err = run(ctx, clientop.ProduceTxn{Conn: clientop.Conn{Bootstrap: b.Bootstrap}, Topic: topic,
		TransactionalID: Name(t, "tid1"), Transactions: 2, RecordsPerTxn: 3, Partition: &p1, Compression: compression})
	if err != nil {
		t.Fatal(err)
	}
	if want := (clientop.Result{CommittedRecords: 6, CommittedTxns: 2}); !resultEq(res, want) {
		t.Fatalf("produce-txn printed %+v, want %+v", res, want)
	}

	layout0 := txnLayout(5, 4, 2)
	checkRecords(t, "franz-go read_uncommitted", ReadPartition(t, b, topic, 0, kgo.ReadUncommitted(), 20), layout0)
	checkRecords(t, "franz-go read_committed", ReadPartition(t, b, topic, 0, kgo.ReadCommitted(), 12), committedOnly(layout0))
	checkRecords(t, "franz-go read_committed, partition 1", ReadPartition(t, b, topic, 1, kgo.ReadCommitted(), 6), txnLayout(2, 3, 0))
	_, adm := admin(t, b)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(topic, 0); o.Offset != 25 {
		t.Fatalf("partition 0 ends at %d, want 25 (20 records, 5 markers)", o.Offset)
	}

	// Seed the group: partition 0 at the first record of the aborted
	// transaction 1, partition 1 at the second transaction.
	group := Name(t, "group")
	seed := map[int32]int64{0: 5, 1: 4}
	res, err = run(ctx, clientop.Commit{Conn: clientop.Conn{Bootstrap: b.Bootstrap}, Group: group, Topic: topic, Offsets: seed})
	if err != nil {
		t.Fatal(err)
	}
	if !eqOffsets(res.Offsets, seed) {
		t.Fatalf("commit printed %v, want %v", res.Offsets, seed)
	}
	if got := fetchOffsets(t, b, group, topic); !eqOffsets(got, seed) {
		t.Fatalf("group %s has offsets %v after commit, want %v", group, got, seed)
	}

	consume := func(iso string, max int, timeout time.Duration, commit bool) clientop.Result {
		t.Helper()
		res, err := run(ctx, clientop.ConsumeGroup{Conn: clientop.Conn{Bootstrap: b.Bootstrap}, Topic: topic, Group: group,
			MaxRecords: max, Isolation: iso, Timeout: timeout, Commit: commit})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// read_uncommitted from offset 5: transactions 1 to 4 of partition 0
	// (16 records), transaction 1 of partition 1 (3).
	res = consume(clientop.ReadUncommitted, 19, 30*time.Second, false)
	if res.Records != 19 {
		t.Fatalf("read_uncommitted group read %d records, want 19: %+v", res.Records, res)
	}
	checkPartition(t, res, 0, 5, clientop.TxnKey(1, 0), clientop.TxnValue(1, 0), 16)
	checkPartition(t, res, 1, 4, clientop.TxnKey(1, 0), clientop.TxnValue(1, 0), 3)
	// read_committed: the aborted transactions 1 and 3 are skipped, so
	// partition 0 starts at 10. Ask for one more than there is: exactly
	// 11 come back once the timeout passes.
	res = consume(clientop.ReadCommitted, 12, 6*time.Second, false)
	if res.Records != 11 {
		t.Fatalf("read_committed group read %d records, want 11: %+v", res.Records, res)
	}
	checkPartition(t, res, 0, 10, clientop.TxnKey(2, 0), clientop.TxnValue(2, 0), 8)
	checkPartition(t, res, 1, 4, clientop.TxnKey(1, 0), clientop.TxnValue(1, 0), 3)
	if got := fetchOffsets(t, b, group, topic); !eqOffsets(got, seed) {
		t.Fatalf("group %s has offsets %v after reading without --commit, want %v unchanged", group, got, seed)
	}
	// With --commit: the offsets after the last records read.
	res = consume(clientop.ReadCommitted, 11, 30*time.Second, true)
	want := map[int32]int64{0: 24, 1: 7}
	if !eqOffsets(res.Offsets, want) {
		t.Fatalf("consume-group --commit printed offsets %v, want %v", res.Offsets, want)
	}
	if got := fetchOffsets(t, b, group, topic); !eqOffsets(got, want) {
		t.Fatalf("group %s has offsets %v after reading with --commit, want %v", group, got, want)
	}

	// A group without committed offsets fails, naming the partition.
	_, err = run(ctx, clientop.ConsumeGroup{Conn: clientop.Conn{Bootstrap: b.Bootstrap}, Topic: topic,
		Group: Name(t, "nogroup"), MaxRecords: 1, Timeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "no committed offset") || !strings.Contains(err.Error(), topic+"-") {
		t.Fatalf("consume-group of a group without offsets: %v, want an error naming %s-<partition>", err, topic)
	}
	t.Logf("group without offsets: %v", lastLine(err.Error()))
}

func resultEq(a, b clientop.Result) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// Produce checks plain produce, idempotent or not, into a topic of three
// partitions: franz-go reads every record back with its key, value (padded
// in the idempotent run) and header.
func Produce(t *testing.T, run Runner, b *Broker) {
	ctx := ctxFor(t)
	for _, idem := range []bool{false, true} {
		topic := Name(t, fmt.Sprintf("plain-idem-%v", idem))
		CreateTopic(t, b, topic, 3)
		// The idempotent run pads its values too.
		valueSize := 0
		if idem {
			valueSize = 300
		}
		res, err := run(ctx, clientop.Produce{Conn: clientop.Conn{Bootstrap: b.Bootstrap}, Topic: topic, Records: 30,
			Idempotent: idem, Compression: "gzip", ValueSize: valueSize})
		if err != nil {
			t.Fatal(err)
		}
		if res.Produced != 30 {
			t.Fatalf("produce printed %+v, want 30 produced", res)
		}
		seen := map[string]bool{}
		for p := range int32(3) {
			_, adm := admin(t, b)
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			end, _ := ends.Lookup(topic, p)
			for _, r := range ReadPartition(t, b, topic, p, kgo.ReadUncommitted(), int(end.Offset)) {
				i, err := strconv.Atoi(header(r, clientop.RecordHeader))
				if err != nil || string(r.Key) != clientop.Key(i) || string(r.Value) != clientop.Padded(clientop.Value(i), valueSize) || seen[string(r.Key)] {
					t.Fatalf("record %s[%d]@%d: key %q value %q header %q", topic, p, r.Offset, r.Key, r.Value, header(r, clientop.RecordHeader))
				}
				seen[string(r.Key)] = true
			}
		}
		if len(seen) != 30 {
			t.Fatalf("read %d distinct records back, want 30", len(seen))
		}
	}
}

// SASL checks the operations over b's SASL_PLAINTEXT listener, and that a
// wrong password fails without the password in the error.
func SASL(t *testing.T, run Runner, b *Broker) {
	ctx := ctxFor(t)
	conn := clientop.Conn{Bootstrap: b.SASLBootstrap, SASLUser: SASLUser, SASLPassword: SASLPassword}
	topic := Name(t, "sasl")
	CreateTopic(t, b, topic, 1)
	p0 := int32(0)
	if _, err := run(ctx, clientop.ProduceTxn{Conn: conn, Topic: topic, TransactionalID: Name(t, "tid"),
		Transactions: 3, RecordsPerTxn: 2, AbortEvery: 3, Partition: &p0}); err != nil {
		t.Fatal(err)
	}
	group := Name(t, "group")
	if _, err := run(ctx, clientop.Commit{Conn: conn, Group: group, Topic: topic, Offsets: map[int32]int64{0: 3}}); err != nil {
		t.Fatal(err)
	}
	res, err := run(ctx, clientop.ConsumeGroup{Conn: conn, Topic: topic, Group: group, MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, res, 0, 3, clientop.TxnKey(1, 0), clientop.TxnValue(1, 0), 2)

	bad := conn
	bad.SASLPassword = "wrong-password-xyzzy"
	_, err = run(ctx, clientop.ConsumeGroup{Conn: bad, Topic: topic, Group: group, MaxRecords: 1, Timeout: 10 * time.Second})
	if err == nil {
		t.Fatal("consume-group with a wrong SASL password succeeded")
	}
	if strings.Contains(err.Error(), bad.SASLPassword) {
		t.Fatalf("the error shows the password: %v", err)
	}
	t.Logf("wrong password: %v", firstLines(err.Error(), 3))
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}
