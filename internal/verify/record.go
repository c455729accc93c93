package verify

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record is one consumer-visible record, reduced to what a consumer can rely
// on: the offset, key, value, headers and timestamp. It is the one record type
// shared by verify, the kcat reader and the tests, so that records read by
// franz-go and by librdkafka compare with the same code.
//
// Null and empty are different values in Kafka and must stay different here:
// a nil Key or Value is a null one, a non-nil empty slice an empty one. The
// same holds for header values.
type Record struct {
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header // in wire order; nil and empty both mean "no headers"
	Timestamp int64    // milliseconds since the Unix epoch
}

// Header is one record header. A nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// FromKgo converts a franz-go record. Key, value and header values keep their
// nil-ness, which franz-go preserves from the wire.
func FromKgo(r *kgo.Record) Record {
	out := Record{
		Offset:    r.Offset,
		Key:       r.Key,
		Value:     r.Value,
		Timestamp: r.Timestamp.UnixMilli(),
	}
	if len(r.Headers) > 0 {
		out.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			out.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return out
}

// Diff returns the fields in which r and o differ, in the fixed order offset,
// key, value, headers, timestamp. It is empty when the records are equal.
func (r Record) Diff(o Record) []Kind {
	var d []Kind
	if r.Offset != o.Offset {
		d = append(d, KindOffset)
	}
	d = append(d, contentDiff(r, o)...)
	return d
}

// Equal reports whether r and o are the same record, offset included.
func (r Record) Equal(o Record) bool { return len(r.Diff(o)) == 0 }

// String is a short, printable description of the record for reports and
// test failures.
func (r Record) String() string {
	return fmt.Sprintf("offset %d key %s value %s headers %s timestamp %d",
		r.Offset, describeBytes(r.Key), describeBytes(r.Value), describeHeaders(r.Headers), r.Timestamp)
}

// contentDiff compares everything but the offset: the offset-by-offset walk
// already pairs records by offset, and the shift hint compares records at
// different offsets.
func contentDiff(a, b Record) []Kind {
	var d []Kind
	if !bytesEqualNull(a.Key, b.Key) {
		d = append(d, KindKey)
	}
	if !bytesEqualNull(a.Value, b.Value) {
		d = append(d, KindValue)
	}
	if !headersEqual(a.Headers, b.Headers) {
		d = append(d, KindHeaders)
	}
	if a.Timestamp != b.Timestamp {
		d = append(d, KindTimestamp)
	}
	return d
}

// bytesEqualNull is bytes.Equal that tells null from empty.
func bytesEqualNull(a, b []byte) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return bytes.Equal(a, b)
}

func headersEqual(a, b []Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytesEqualNull(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// describeFields renders only the given fields of r, so that a mismatch line
// shows what differs and not the whole record.
func describeFields(r Record, kinds []Kind) string {
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		switch k {
		case KindOffset:
			parts = append(parts, "offset "+strconv.FormatInt(r.Offset, 10))
		case KindKey:
			parts = append(parts, "key "+describeBytes(r.Key))
		case KindValue:
			parts = append(parts, "value "+describeBytes(r.Value))
		case KindHeaders:
			parts = append(parts, "headers "+describeHeaders(r.Headers))
		case KindTimestamp:
			parts = append(parts, "timestamp "+strconv.FormatInt(r.Timestamp, 10))
		}
	}
	return strings.Join(parts, ", ")
}

// maxShown bounds how much of a key or value a description prints: enough to
// recognise a record, short enough for a terminal line.
const maxShown = 24

func describeBytes(b []byte) string {
	switch {
	case b == nil:
		return "null"
	case len(b) <= maxShown:
		return strconv.Quote(string(b))
	default:
		return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(string(b[:maxShown])), len(b))
	}
}

func describeHeaders(hs []Header) string {
	if len(hs) == 0 {
		return "[]"
	}
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = strconv.Quote(h.Key) + "=" + describeBytes(h.Value)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
