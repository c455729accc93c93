package clientop

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestArgs(t *testing.T) {
	p := int32(2)
	conn := Conn{Bootstrap: "b:9092", SASLUser: "u", SASLPassword: "pw"}
	for _, c := range []struct {
		op   Op
		want string
	}{
		{ProduceTxn{Conn: conn, Topic: "t", TransactionalID: "id", Transactions: 3, RecordsPerTxn: 4, AbortEvery: 2, Partition: &p, Compression: "zstd"},
			"produce-txn --bootstrap b:9092 --sasl-user u --sasl-password pw --topic t --transactional-id id --transactions 3 --records-per-txn 4 --abort-every 2 --partition 2 --compression zstd"},
		{Produce{Conn: Conn{Bootstrap: "b"}, Topic: "t", Records: 5, Idempotent: true},
			"produce --bootstrap b --topic t --records 5 --idempotent"},
		{Produce{Conn: Conn{Bootstrap: "b"}, Topic: "t", Records: 5, ValueSize: 1024},
			"produce --bootstrap b --topic t --records 5 --value-size 1024"},
		{ConsumeGroup{Conn: Conn{Bootstrap: "b"}, Topic: "t", Group: "g", MaxRecords: 7, Isolation: ReadUncommitted, Timeout: 2 * time.Second, Commit: true},
			"consume-group --bootstrap b --topic t --group g --max-records 7 --isolation read_uncommitted --timeout-ms 2000 --commit"},
		{Commit{Conn: Conn{Bootstrap: "b"}, Group: "g", Topic: "t", Offsets: map[int32]int64{2: 9, 0: 5}},
			"commit --bootstrap b --group g --topic t --offsets 0=5,2=9"},
	} {
		if got := strings.Join(c.op.Args(), " "); got != c.want {
			t.Errorf("Args() = %q, want %q", got, c.want)
		}
	}
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	op := Commit{Conn: Conn{Bootstrap: "b", SASLUser: "u", SASLPassword: "s3cret"}, Group: "g", Topic: "t"}
	res, err := Exec(ctx, "fake", op, exec.Command("sh", "-c", `echo '{"offsets":{"0":5,"3":7}}'`))
	if err != nil || res.Offsets[0] != 5 || res.Offsets[3] != 7 || len(res.Offsets) != 2 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	_, err = Exec(ctx, "fake", op, exec.Command("sh", "-c", `echo 'login failed for s3cret' >&2; exit 3`))
	if err == nil || !strings.Contains(err.Error(), "login failed for ***") || strings.Contains(err.Error(), "s3cret") ||
		!strings.Contains(err.Error(), "fake commit") {
		t.Fatalf("Exec of a failing client: %v", err)
	}
	_, err = Exec(ctx, "fake", op, exec.Command("sh", "-c", `echo '{"bogus":1}'`))
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("Exec of a client printing an unknown field: %v", err)
	}
}

func TestContents(t *testing.T) {
	var aborted []int
	for i := range 6 {
		if Aborted(i, 3) {
			aborted = append(aborted, i)
		}
	}
	if !slices.Equal(aborted, []int{2, 5}) || Aborted(0, 0) {
		t.Fatalf("Aborted(_, 3) picks %v, want [2 5]", aborted)
	}
	if TxnKey(1, 2) != "txn-1-key-2" || TxnValue(1, 2) != "txn-1-value-2" || Key(3) != "key-3" || Value(3) != "value-3" {
		t.Fatal("record contents changed: change KmirrorClient.java and kmirror_client.py with them")
	}
}

// TestPadded pins the padding both clients implement: a change here is a
// change to KmirrorClient.java and kmirror_client.py.
func TestPadded(t *testing.T) {
	if got, want := Padded("value-3", 32), "value-32229ad96ef7138c2388672316"; got != want {
		t.Fatalf("Padded(value-3, 32) = %q, want %q", got, want)
	}
	if got := Padded("value-3", 5); got != "value-3" {
		t.Fatalf("Padded of a value longer than the size = %q, want it unchanged", got)
	}
	v := Padded("txn-0-value-0", 1024)
	if len(v) != 1024 || v[:13] != "txn-0-value-0" || strings.Trim(v[13:], padAlphabet) != "" {
		t.Fatalf("Padded(txn-0-value-0, 1024) = %q", v)
	}
}

func TestTool(t *testing.T) {
	p, err := Tool("install-kafka.sh")
	if err != nil || !strings.HasSuffix(p, "/tools/install-kafka.sh") {
		t.Fatalf("Tool = %q, %v", p, err)
	}
}
