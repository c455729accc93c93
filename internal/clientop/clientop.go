// Package clientop describes what the independent Kafka clients of the tests
// do: the Java client (package javaclient) and librdkafka (package rdkafka)
// each run as a child process with one subcommand and its flags, and print
// one JSON object on stdout. This package holds the operations (each one
// subcommand), the result they print, the record contents they write and the
// child-process plumbing the two packages share.
//
// The clients share no code with franz-go, so that a test can write
// transactions with aborts, and read a consumer group's offsets back, with a
// client other than the one kmirror uses.
package clientop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Conn says how a client reaches the cluster.
type Conn struct {
	// Bootstrap is a comma-separated list of host:port.
	Bootstrap string
	// SASLUser and SASLPassword, when SASLUser is set, make the client
	// authenticate with SASL PLAIN over plaintext (SASL_PLAINTEXT).
	SASLUser, SASLPassword string
}

func (c Conn) args() []string {
	var a []string
	if c.Bootstrap != "" { // else the client fails: the flag is required
		a = append(a, "--bootstrap", c.Bootstrap)
	}
	if c.SASLUser != "" {
		a = append(a, "--sasl-user", c.SASLUser, "--sasl-password", c.SASLPassword)
	}
	return a
}

// Op is one operation: a subcommand of the client with its flags.
type Op interface {
	// Args returns the subcommand and its flags.
	Args() []string
	conn() Conn
}

// ProduceTxn writes Transactions transactions of RecordsPerTxn records each
// with one transactional producer; every AbortEvery-th transaction (the
// AbortEvery-th, the 2·AbortEvery-th, ...; never when AbortEvery is 0) is
// flushed and then aborted, so that its records are in the log. Record j of
// transaction i has key TxnKey(i, j), value TxnValue(i, j) and a header
// TxnHeader with value i.
type ProduceTxn struct {
	Conn
	Topic           string
	TransactionalID string
	Transactions    int
	RecordsPerTxn   int
	AbortEvery      int
	// Partition is the partition written; nil: chosen from the key by
	// murmur2 (the Java client's default, set on librdkafka too).
	Partition *int32
	// Compression is none (""), gzip, snappy, lz4 or zstd.
	Compression string
	// ValueSize, when above the length of a value, pads it to ValueSize
	// bytes (Padded), so that a benchmark writes records of a realistic
	// size.
	ValueSize int
}

// Args implements Op.
func (o ProduceTxn) Args() []string {
	a := append([]string{"produce-txn"}, o.Conn.args()...)
	a = append(a, "--topic", o.Topic, "--transactional-id", o.TransactionalID,
		"--transactions", strconv.Itoa(o.Transactions),
		"--records-per-txn", strconv.Itoa(o.RecordsPerTxn),
		"--abort-every", strconv.Itoa(o.AbortEvery))
	return append(a, produceFlags(o.Partition, o.Compression, o.ValueSize)...)
}

func (o ProduceTxn) conn() Conn { return o.Conn }

// Produce writes Records records outside transactions, record i with key
// Key(i), value Value(i) and a header RecordHeader with value i, acks=all.
type Produce struct {
	Conn
	Topic   string
	Records int
	// Idempotent turns the idempotent producer on (off otherwise, on
	// both clients).
	Idempotent  bool
	Partition   *int32
	Compression string
	// ValueSize pads values as in ProduceTxn.
	ValueSize int
}

// Args implements Op.
func (o Produce) Args() []string {
	a := append([]string{"produce"}, o.Conn.args()...)
	a = append(a, "--topic", o.Topic, "--records", strconv.Itoa(o.Records))
	if o.Idempotent {
		a = append(a, "--idempotent")
	}
	return append(a, produceFlags(o.Partition, o.Compression, o.ValueSize)...)
}

func (o Produce) conn() Conn { return o.Conn }

func produceFlags(p *int32, c string, valueSize int) []string {
	var a []string
	if p != nil {
		a = append(a, "--partition", strconv.Itoa(int(*p)))
	}
	if c != "" {
		a = append(a, "--compression", c)
	}
	if valueSize > 0 {
		a = append(a, "--value-size", strconv.Itoa(valueSize))
	}
	return a
}

// Isolation levels of ConsumeGroup.
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// ConsumeGroup joins group Group subscribed to Topic, starts every partition
// at the group's committed offset (auto.offset.reset=none: a partition
// without one fails the operation, naming it) and reads until it has
// MaxRecords records or Timeout has passed, whichever comes first. It
// commits nothing unless Commit, which commits, for each partition read,
// the offset after its last record read.
type ConsumeGroup struct {
	Conn
	Topic      string
	Group      string
	MaxRecords int
	// Isolation is ReadCommitted ("" too) or ReadUncommitted.
	Isolation string
	// Timeout bounds the read from the group's assignment on (joining is
	// bounded on its own: 60 s, then an error); 0: 15 s.
	Timeout time.Duration
	Commit  bool
}

// Args implements Op.
func (o ConsumeGroup) Args() []string {
	a := append([]string{"consume-group"}, o.Conn.args()...)
	a = append(a, "--topic", o.Topic, "--group", o.Group, "--max-records", strconv.Itoa(o.MaxRecords))
	if o.Isolation != "" {
		a = append(a, "--isolation", o.Isolation)
	}
	if o.Timeout > 0 {
		a = append(a, "--timeout-ms", strconv.FormatInt(o.Timeout.Milliseconds(), 10))
	}
	if o.Commit {
		a = append(a, "--commit")
	}
	return a
}

func (o ConsumeGroup) conn() Conn { return o.Conn }

// Commit commits Offsets (partition to offset) of Topic for group Group from
// outside the group, as a tool seeding a source group would; the group must
// have no active members.
type Commit struct {
	Conn
	Group   string
	Topic   string
	Offsets map[int32]int64
}

// Args implements Op.
func (o Commit) Args() []string {
	a := append([]string{"commit"}, o.Conn.args()...)
	var offs []string
	for _, p := range slices.Sorted(maps.Keys(o.Offsets)) {
		offs = append(offs, fmt.Sprintf("%d=%d", p, o.Offsets[p]))
	}
	return append(a, "--group", o.Group, "--topic", o.Topic, "--offsets", strings.Join(offs, ","))
}

func (o Commit) conn() Conn { return o.Conn }

// Result is the JSON object a client prints; each operation fills its own
// fields.
type Result struct {
	// ProduceTxn: records (and transactions) committed and aborted.
	CommittedRecords int `json:"committed_records,omitempty"`
	AbortedRecords   int `json:"aborted_records,omitempty"`
	CommittedTxns    int `json:"committed_txns,omitempty"`
	AbortedTxns      int `json:"aborted_txns,omitempty"`
	// Produce: records written.
	Produced int `json:"produced,omitempty"`
	// ConsumeGroup: records read in all, and per partition read, in
	// partition order.
	Records    int         `json:"records,omitempty"`
	Partitions []Partition `json:"partitions,omitempty"`
	// Commit, and ConsumeGroup with Commit: the offsets committed.
	Offsets map[int32]int64 `json:"offsets,omitempty"`
}

// Partition is what ConsumeGroup read from one partition.
type Partition struct {
	Partition   int32 `json:"partition"`
	FirstOffset int64 `json:"first_offset"`
	// FirstKey and FirstValue are the first record's key and value
	// (decoded as UTF-8); nil for null.
	FirstKey   *string `json:"first_key"`
	FirstValue *string `json:"first_value"`
	Records    int     `json:"records"`
}

// Partition returns what was read from partition p, and whether any was.
func (r Result) Partition(p int32) (Partition, bool) {
	for _, x := range r.Partitions {
		if x.Partition == p {
			return x, true
		}
	}
	return Partition{}, false
}

// Record contents, the same from both clients.
const (
	// TxnHeader is the header ProduceTxn puts on each record: the
	// transaction's index, in decimal.
	TxnHeader = "kmirror-txn"
	// RecordHeader is the header Produce puts on each record: the
	// record's index, in decimal.
	RecordHeader = "kmirror-record"
)

// TxnKey is the key of record j of transaction i of ProduceTxn.
func TxnKey(i, j int) string { return fmt.Sprintf("txn-%d-key-%d", i, j) }

// TxnValue is the value of record j of transaction i of ProduceTxn.
func TxnValue(i, j int) string { return fmt.Sprintf("txn-%d-value-%d", i, j) }

// Aborted reports whether ProduceTxn aborts transaction i (from 0).
func Aborted(i, abortEvery int) bool { return abortEvery > 0 && (i+1)%abortEvery == 0 }

// Key is the key of record i of Produce.
func Key(i int) string { return fmt.Sprintf("key-%d", i) }

// Value is the value of record i of Produce.
func Value(i int) string { return fmt.Sprintf("value-%d", i) }

// padAlphabet has 16 symbols: padding carries 4 bits of entropy a byte and
// compresses about 2:1, as workload's values do, so that a codec has real
// work and a padded batch is not mostly air.
const padAlphabet = "0123456789abcdef"

// Padded is v followed by size-len(v) bytes of padAlphabet, drawn from a
// 64-bit linear congruential generator (Knuth's MMIX constants) seeded with
// v's FNV-1a hash, one symbol from the top 4 bits of each step; v itself
// when it is not shorter than size. Both clients pad the same way.
func Padded(v string, size int) string {
	if len(v) >= size {
		return v
	}
	x := uint64(0xcbf29ce484222325)
	for i := range len(v) {
		x ^= uint64(v[i])
		x *= 0x100000001b3
	}
	b := make([]byte, len(v), size)
	copy(b, v)
	for len(b) < size {
		x = x*6364136223846793005 + 1442695040888963407
		b = append(b, padAlphabet[x>>60])
	}
	return string(b)
}

// Exec runs cmd, a client started with op.Args() at the end of its command
// line, and decodes the JSON object it prints. name names the client in
// errors, which carry the tail of its stderr (with the SASL password, if
// any, masked).
func Exec(ctx context.Context, name string, op Op, cmd *exec.Cmd) (Result, error) {
	args := op.Args()
	var stdout bytes.Buffer
	stderr := &tail{}
	cmd.Stdout = &stdout
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	secret := op.conn().SASLPassword
	mask := func(s string) string {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "***")
		}
		return s
	}
	if err != nil {
		return Result{}, fmt.Errorf("%s %s: %w; stderr:\n%s", name, args[0], err, mask(strings.TrimSpace(stderr.String())))
	}
	var res Result
	out := bytes.TrimSpace(stdout.Bytes())
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil || dec.More() {
		if err == nil {
			err = errors.New("more than one JSON value")
		}
		return Result{}, fmt.Errorf("%s %s: decoding its output %q: %v; stderr:\n%s", name, args[0], mask(string(out)), err, mask(strings.TrimSpace(stderr.String())))
	}
	return res, nil
}

// tail keeps the last few KiB written to it.
type tail struct{ b []byte }

const tailMax = 8 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

// Tool returns the path of tools/<name> in the kmirror repository: found
// from the working directory up (tests run in their package's directory),
// else from where this source file was compiled.
func Tool(name string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, "tools", name)
			if isRepoRoot(dir) {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("tools/%s not found: run from inside the kmirror repository", name)
}

func isRepoRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && bytes.HasPrefix(b, []byte("module github.com/kmirror/kmirror\n"))
}

// RunTool runs tools/<name> with args and returns the last line it prints on
// stdout (the install scripts print the path of what they installed).
func RunTool(ctx context.Context, name string, args ...string) (string, error) {
	p, err := Tool(name)
	if err != nil {
		return "", err
	}
	var stdout bytes.Buffer
	stderr := &tail{}
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("tools/%s %s: %w; stderr:\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "", fmt.Errorf("tools/%s %s printed nothing", name, strings.Join(args, " "))
	}
	return last, nil
}
