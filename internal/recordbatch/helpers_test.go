package recordbatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

// diffRecords describes the first difference between want and got, telling
// nil from empty; "" means equal.
func diffRecords(want, got []Record) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := &want[i], &got[i]
		switch {
		case w.Offset != g.Offset:
			return fmt.Sprintf("record %d: offset %d, want %d", i, g.Offset, w.Offset)
		case w.Timestamp != g.Timestamp:
			return fmt.Sprintf("record %d: timestamp %d, want %d", i, g.Timestamp, w.Timestamp)
		case !sameBytes(w.Key, g.Key):
			return fmt.Sprintf("record %d: key %s, want %s", i, show(g.Key), show(w.Key))
		case !sameBytes(w.Value, g.Value):
			return fmt.Sprintf("record %d: value %s, want %s", i, show(g.Value), show(w.Value))
		case len(w.Headers) != len(g.Headers):
			return fmt.Sprintf("record %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for j := range w.Headers {
			if w.Headers[j].Key != g.Headers[j].Key || !sameBytes(w.Headers[j].Value, g.Headers[j].Value) {
				return fmt.Sprintf("record %d header %d: %q=%s, want %q=%s", i, j,
					g.Headers[j].Key, show(g.Headers[j].Value), w.Headers[j].Key, show(w.Headers[j].Value))
			}
		}
	}
	return ""
}

// sameBytes is bytes.Equal that also tells null from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func show(b []byte) string {
	if b == nil {
		return "null"
	}
	if len(b) > 32 {
		return fmt.Sprintf("%q...(%d bytes)", b[:32], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// shifted returns recs with every offset moved by d.
func shifted(recs []Record, d int64) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		r.Offset += d
		out[i] = r
	}
	return out
}

// patched returns a copy of b changed by f, with the CRC recomputed, for
// building batches Build refuses to make.
func patched(b []byte, f func(b []byte)) []byte {
	c := bytes.Clone(b)
	f(c)
	fixCRC(c)
	return c
}

// fixCRC recomputes the CRC of whatever header-shaped bytes b holds.
func fixCRC(b []byte) {
	if len(b) >= HeaderSize {
		binary.BigEndian.PutUint32(b[offCRC:], crc32c(b[offAttributes:]))
	}
}

func mustBuild(t testing.TB, codec Codec, attrs int16, base, firstTS, pid int64, epoch int16, seq int32, recs []Record) []byte {
	t.Helper()
	b, err := Build(codec, attrs, base, firstTS, pid, epoch, seq, recs)
	if err != nil {
		t.Fatalf("Build(%v): %v", codec, err)
	}
	return b
}

func mustHeader(t testing.TB, b []byte) Header {
	t.Helper()
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatalf("ParseHeader: %v", err)
	}
	return h
}

// sampleRecords is a mix of the cases a codec must carry: null and empty
// keys and values, headers with null and empty values, negative and extreme
// timestamps, and offset gaps when gap is set.
func sampleRecords(base int64, gap bool) []Record {
	recs := []Record{
		{Timestamp: 1_700_000_000_000, Key: []byte("k0"), Value: []byte("v0")},
		{Timestamp: 1_700_000_000_005, Key: nil, Value: []byte("null key")},
		{Timestamp: 1_699_999_999_000, Key: []byte{}, Value: nil},
		{Timestamp: -1, Key: []byte("tombstone"), Value: nil},
		{Timestamp: -5_000_000_000_000, Key: []byte{}, Value: []byte{}},
		{Timestamp: 1 << 62, Key: []byte("h"), Value: []byte("headers"), Headers: []RecordHeader{
			{Key: "a", Value: []byte("1")}, {Key: "", Value: nil}, {Key: "empty", Value: []byte{}},
		}},
		{Timestamp: 1_700_000_000_001, Key: bytes.Repeat([]byte("K"), 300), Value: bytes.Repeat([]byte("value "), 200)},
	}
	off := base
	for i := range recs {
		recs[i].Offset = off
		off++
		if gap && i%3 == 1 {
			off += int64(i + 1)
		}
	}
	return recs
}
