// Package kcat reads a partition through kcat, that is through librdkafka, a
// Kafka client that shares no code with franz-go. Tests use it to check that
// what the agent wrote reads the same from an independent client (DESIGN.md
// §7): same offsets, keys, values, headers and timestamps, with null and
// empty kept apart.
//
// kcat's JSON envelope (-J) is the only output that carries headers, null
// keys and values, and binary data unambiguously: the -f format string has
// no header token that survives binary values ('%h' prints name=value,...).
// kcat writes the JSON with yajl, which escapes '"', '\\' and control bytes
// but copies every other byte as is, invalid UTF-8 included. encoding/json
// would replace such bytes with U+FFFD, so this package decodes the envelope
// with its own byte-exact parser.
package kcat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kmirror/kmirror/internal/verify"
)

// Binary is the kcat executable looked up in PATH.
const Binary = "kcat"

// Isolation levels accepted by Read, as librdkafka spells them.
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// Available reports whether kcat can be run, naming the package to install
// when it cannot.
func Available() error {
	if _, err := exec.LookPath(Binary); err != nil {
		return fmt.Errorf("kcat is not installed (Debian/Ubuntu: apt-get install kcat): %w", err)
	}
	return nil
}

// Config says how to reach a cluster.
type Config struct {
	// Bootstrap is a comma-separated list of host:port.
	Bootstrap string
	// Properties are extra librdkafka properties passed as -X name=value,
	// for instance security.protocol, ssl.ca.location, sasl.mechanisms,
	// sasl.username and sasl.password. They may hold secrets: they are
	// passed on kcat's command line and never put in errors.
	Properties map[string]string
}

// Read returns the records a librdkafka consumer at the given isolation
// level ("read_committed" or "read_uncommitted") sees in one partition, in
// offset order, from offset from (negative: from the log start) up to but
// excluding offset to (negative: up to the end of the log as kcat reaches it,
// the high watermark or, under read_committed, the last stable offset).
func Read(ctx context.Context, bootstrap, topic string, partition int32, isolation string, from, to int64) ([]verify.Record, error) {
	return Config{Bootstrap: bootstrap}.Read(ctx, topic, partition, isolation, from, to)
}

// Read is the package-level Read with c's connection settings.
func (c Config) Read(ctx context.Context, topic string, partition int32, isolation string, from, to int64) ([]verify.Record, error) {
	if isolation != ReadCommitted && isolation != ReadUncommitted {
		return nil, fmt.Errorf("kcat: isolation level %q, want %q or %q", isolation, ReadCommitted, ReadUncommitted)
	}
	if c.Bootstrap == "" || topic == "" {
		return nil, errors.New("kcat: bootstrap servers and topic are required")
	}
	if to >= 0 && to <= max(from, 0) {
		return nil, nil
	}
	if err := Available(); err != nil {
		return nil, err
	}

	start := "beginning"
	if from >= 0 {
		start = strconv.FormatInt(from, 10)
	}
	args := []string{
		"-C", "-J", "-q",
		"-b", c.Bootstrap,
		"-t", topic,
		"-p", strconv.FormatInt(int64(partition), 10),
		"-o", start,
		"-e", // stop at the end of the partition instead of waiting for more
		"-m", "10",
		"-X", "isolation.level=" + isolation,
		// An offset outside the log must fail, not silently restart
		// from the log end (librdkafka's default).
		"-X", "auto.offset.reset=error",
		// Let librdkafka check every batch CRC: part of reading
		// independently.
		"-X", "check.crcs=true",
		// kcat notices the partition end only on a fetch that returns
		// nothing, which the broker holds for fetch.wait.max.ms
		// (500 by default): keep that wait short.
		"-X", "fetch.wait.max.ms=50",
	}
	if to >= 0 {
		// Offsets in [from, to) hold at most to-from visible records;
		// the few read past `to` when some are invisible are dropped
		// below.
		args = append(args, "-c", strconv.FormatInt(to-max(from, 0), 10))
	}
	// After the defaults, so that the caller's properties win.
	for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
		args = append(args, "-X", k+"="+c.Properties[k])
	}

	cmd := exec.CommandContext(ctx, Binary, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("kcat: %w", err)
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kcat: starting %s: %w", Binary, err)
	}
	where := fmt.Sprintf("%s[%d] at %s", topic, partition, isolation)

	var out []verify.Record
	parseErr := func() error {
		dec := newDecoder(stdout)
		for {
			msg, err := dec.message()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if msg.partition != partition {
				return fmt.Errorf("record for partition %d, asked for %d", msg.partition, partition)
			}
			if to >= 0 && msg.rec.Offset >= to {
				continue
			}
			out = append(out, msg.rec)
		}
	}()
	if parseErr != nil {
		// Unblock kcat if it is still writing, then reap it.
		_, _ = io.Copy(io.Discard, stdout)
	}
	waitErr := cmd.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("kcat reading %s: %w", where, ctx.Err())
	}
	if waitErr != nil {
		return nil, fmt.Errorf("kcat reading %s: %w: %s", where, waitErr, strings.TrimSpace(stderr.String()))
	}
	if parseErr != nil {
		return nil, fmt.Errorf("kcat reading %s: decoding output: %w", where, parseErr)
	}
	return out, nil
}

// tailBuffer keeps the last few KiB of kcat's stderr for error messages.
type tailBuffer struct{ b []byte }

const tailMax = 4096

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// message is one decoded JSON envelope.
type message struct {
	partition int32
	rec       verify.Record
}

// decoder reads kcat's stream of JSON envelopes, one object per message.
type decoder struct {
	r *bufio.Reader
}

func newDecoder(r io.Reader) *decoder { return &decoder{r: bufio.NewReaderSize(r, 64<<10)} }

// jvalue is a parsed JSON value. Strings keep their exact bytes.
type jvalue struct {
	kind byte // 's' string, 'n' number, 'z' null, 't' true, 'f' false, 'a' array, 'o' object
	str  []byte
	num  string
	arr  []jvalue
	obj  map[string]jvalue
}

func (d *decoder) message() (message, error) {
	if err := d.skipSpace(); err != nil {
		return message{}, err // io.EOF: no more messages
	}
	v, err := d.value()
	if err != nil {
		return message{}, err
	}
	if v.kind != 'o' {
		return message{}, fmt.Errorf("envelope is not a JSON object")
	}
	return envelope(v.obj)
}

// envelope maps kcat's JSON envelope onto a record. Fields: offset,
// partition, ts (absent when the broker gave no timestamp), key and payload
// (strings or null), headers (a flat array name, value, name, value, ...,
// values possibly null), key_error/payload_error (deserializer failures,
// which plain reads never produce).
func envelope(o map[string]jvalue) (message, error) {
	var m message
	for _, f := range []string{"key_error", "payload_error"} {
		if e, ok := o[f]; ok {
			return m, fmt.Errorf("kcat reported %s: %s", f, e.str)
		}
	}
	off, err := intField(o, "offset")
	if err != nil {
		return m, err
	}
	part, err := intField(o, "partition")
	if err != nil {
		return m, err
	}
	m.partition = int32(part)
	m.rec.Offset = off
	m.rec.Timestamp = -1
	if _, ok := o["ts"]; ok {
		if m.rec.Timestamp, err = intField(o, "ts"); err != nil {
			return m, err
		}
	}
	if m.rec.Key, err = bytesField(o, "key"); err != nil {
		return m, err
	}
	if m.rec.Value, err = bytesField(o, "payload"); err != nil {
		return m, err
	}
	if h, ok := o["headers"]; ok {
		if h.kind != 'a' || len(h.arr)%2 != 0 {
			return m, fmt.Errorf("offset %d: headers are not a name/value array", off)
		}
		for i := 0; i < len(h.arr); i += 2 {
			name, val := h.arr[i], h.arr[i+1]
			if name.kind != 's' || (val.kind != 's' && val.kind != 'z') {
				return m, fmt.Errorf("offset %d: header %d is not a string name with a string or null value", off, i/2)
			}
			hv := verify.Header{Key: string(name.str)}
			if val.kind == 's' {
				hv.Value = val.str
			}
			m.rec.Headers = append(m.rec.Headers, hv)
		}
	}
	return m, nil
}

func intField(o map[string]jvalue, name string) (int64, error) {
	v, ok := o[name]
	if !ok || v.kind != 'n' {
		return 0, fmt.Errorf("field %q missing or not a number", name)
	}
	n, err := strconv.ParseInt(v.num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %q: %w", name, err)
	}
	return n, nil
}

// bytesField returns nil for JSON null and a non-nil slice for any string,
// the empty one included.
func bytesField(o map[string]jvalue, name string) ([]byte, error) {
	v, ok := o[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("field %q missing", name)
	case v.kind == 'z':
		return nil, nil
	case v.kind == 's':
		return v.str, nil
	default:
		return nil, fmt.Errorf("field %q is neither a string nor null", name)
	}
}

func (d *decoder) skipSpace() error {
	for {
		c, err := d.r.ReadByte()
		if err != nil {
			return err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		default:
			return d.r.UnreadByte()
		}
	}
}

// next returns the next non-space byte; EOF inside a value is an error.
func (d *decoder) next() (byte, error) {
	if err := d.skipSpace(); err != nil {
		return 0, unexpectedEOF(err)
	}
	return d.r.ReadByte()
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (d *decoder) value() (jvalue, error) {
	c, err := d.next()
	if err != nil {
		return jvalue{}, err
	}
	switch {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		s, err := d.str()
		return jvalue{kind: 's', str: s}, err
	case c == 'n':
		return jvalue{kind: 'z'}, d.literal("ull")
	case c == 't':
		return jvalue{kind: 't'}, d.literal("rue")
	case c == 'f':
		return jvalue{kind: 'f'}, d.literal("alse")
	case c == '-' || (c >= '0' && c <= '9'):
		num := []byte{c}
		for {
			c, err := d.r.ReadByte()
			if err != nil {
				return jvalue{}, unexpectedEOF(err)
			}
			if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
				return jvalue{kind: 'n', num: string(num)}, d.r.UnreadByte()
			}
			num = append(num, c)
		}
	default:
		return jvalue{}, fmt.Errorf("unexpected byte %q", c)
	}
}

func (d *decoder) literal(rest string) error {
	for i := range len(rest) {
		c, err := d.r.ReadByte()
		if err != nil {
			return unexpectedEOF(err)
		}
		if c != rest[i] {
			return fmt.Errorf("bad literal, unexpected byte %q", c)
		}
	}
	return nil
}

func (d *decoder) object() (jvalue, error) {
	v := jvalue{kind: 'o', obj: make(map[string]jvalue)}
	for first := true; ; first = false {
		c, err := d.next()
		if err != nil {
			return v, err
		}
		if c == '}' && first {
			return v, nil
		}
		if !first {
			if c == '}' {
				return v, nil
			}
			if c != ',' {
				return v, fmt.Errorf("expected ',' or '}' in object, got %q", c)
			}
			if c, err = d.next(); err != nil {
				return v, err
			}
		}
		if c != '"' {
			return v, fmt.Errorf("expected a member name, got %q", c)
		}
		name, err := d.str()
		if err != nil {
			return v, err
		}
		if c, err = d.next(); err != nil {
			return v, err
		}
		if c != ':' {
			return v, fmt.Errorf("expected ':' after member %q, got %q", name, c)
		}
		val, err := d.value()
		if err != nil {
			return v, err
		}
		v.obj[string(name)] = val
	}
}

func (d *decoder) array() (jvalue, error) {
	v := jvalue{kind: 'a'}
	for first := true; ; first = false {
		c, err := d.next()
		if err != nil {
			return v, err
		}
		if c == ']' {
			return v, nil
		}
		if !first {
			if c != ',' {
				return v, fmt.Errorf("expected ',' or ']' in array, got %q", c)
			}
		} else if err := d.r.UnreadByte(); err != nil {
			return v, err
		}
		el, err := d.value()
		if err != nil {
			return v, err
		}
		v.arr = append(v.arr, el)
	}
}

// str reads a string body after its opening quote. Every byte other than an
// escape is kept as is: kcat passes binary data through unescaped.
func (d *decoder) str() ([]byte, error) {
	out := []byte{} // non-nil: an empty string is not null
	for {
		c, err := d.r.ReadByte()
		if err != nil {
			return nil, unexpectedEOF(err)
		}
		switch c {
		case '"':
			return out, nil
		case '\\':
			if out, err = d.unescape(out); err != nil {
				return nil, err
			}
		default:
			out = append(out, c)
		}
	}
}

// unescape decodes the escape after a backslash, appending it to out.
func (d *decoder) unescape(out []byte) ([]byte, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	switch c {
	case '"', '\\', '/':
		return append(out, c), nil
	case 'b':
		return append(out, '\b'), nil
	case 'f':
		return append(out, '\f'), nil
	case 'n':
		return append(out, '\n'), nil
	case 'r':
		return append(out, '\r'), nil
	case 't':
		return append(out, '\t'), nil
	case 'u':
		var hex [4]byte
		if _, err := io.ReadFull(d.r, hex[:]); err != nil {
			return nil, unexpectedEOF(err)
		}
		r, err := strconv.ParseUint(string(hex[:]), 16, 16)
		if err != nil {
			return nil, fmt.Errorf("bad \\u escape %q", hex[:])
		}
		// yajl writes \u00XX only for control bytes, which stand for
		// the byte itself. Anything else would be a code point, which
		// JSON encodes in UTF-8 (surrogate pairs, which yajl never
		// writes, are not joined).
		if r < 0x80 {
			return append(out, byte(r)), nil
		}
		return utf8.AppendRune(out, rune(r)), nil
	default:
		return nil, fmt.Errorf("bad escape \\%c", c)
	}
}
