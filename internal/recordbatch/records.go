package recordbatch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
)

// Record is one decoded record, with absolute offset and timestamp.
type Record struct {
	Offset    int64
	Timestamp int64  // milliseconds; what a consumer sees (MaxTimestamp for LogAppendTime)
	Key       []byte // nil is a null key; an empty non-nil slice is an empty key
	Value     []byte // nil is a null value (a tombstone); empty is distinct
	Headers   []RecordHeader
}

// RecordHeader is one record header. Kafka allows a null value but not a
// null key.
type RecordHeader struct {
	Key   string
	Value []byte // nil is a null value
}

// minRecordSize is the smallest encoded record: a length and six one-byte
// fields (attributes, timestamp delta, offset delta, key, value, header
// count). It bounds how many records some bytes can hold.
const minRecordSize = 7

// Records decodes every record of the single batch b, decompressing it (gzip,
// snappy raw or xerial-framed, lz4 frame, zstd). The CRC is checked first.
// Offsets and timestamps are absolute; a LogAppendTime batch gives every
// record MaxTimestamp, as consumers see it. Keys, values and header values may
// alias b when it is not compressed.
//
// Records are strict where consumers are lax, because a batch that decodes
// here is one the agent may split and re-encode: every record must decode
// exactly to its length, offset deltas must rise strictly within [0,
// LastOffsetDelta], and NumRecords must match what is there.
func Records(b []byte) ([]Record, error) {
	h, recs, err := decode(b)
	if err != nil {
		return nil, err
	}
	if h.LogAppendTime() {
		for i := range recs {
			recs[i].Timestamp = h.MaxTimestamp
		}
	}
	return recs, nil
}

// decode checks b's CRC and returns its header and records, with raw
// timestamps (FirstTimestamp + delta) whatever the timestamp type, which
// re-encoding needs to stay faithful.
func decode(b []byte) (Header, []Record, error) {
	h, err := parseChecked(b)
	if err != nil {
		return h, nil, fmt.Errorf("decoding records: %w", err)
	}
	switch {
	case h.NumRecords < 0:
		return h, nil, fmt.Errorf("decoding records of batch at offset %d: record count %d: %w",
			h.BaseOffset, h.NumRecords, ErrCorrupt)
	case h.NumRecords == 0:
		// The cleaner keeps an emptied batch's header (KAFKA-5443) with
		// the codec bits and no record bytes; Java yields nothing for it
		// without decompressing.
		return h, nil, nil
	case !h.Codec().valid():
		return h, nil, fmt.Errorf("decoding records of batch at offset %d: %v: %w",
			h.BaseOffset, h.Codec(), ErrCodec)
	}
	data, err := decompress(h.Codec(), b[HeaderSize:])
	if err != nil {
		return h, nil, fmt.Errorf("decoding records of batch at offset %d: %w", h.BaseOffset, err)
	}
	recs, err := decodeRecords(data, &h)
	if err != nil {
		return h, nil, fmt.Errorf("decoding records of batch at offset %d (%v): %w", h.BaseOffset, h.Codec(), err)
	}
	return h, recs, nil
}

// decodeRecords decodes the uncompressed records data of the batch h.
func decodeRecords(data []byte, h *Header) ([]Record, error) {
	n := int(h.NumRecords)
	if n > len(data)/minRecordSize {
		return nil, fmt.Errorf("%d records claimed in %d bytes: %w", n, len(data), ErrCorrupt)
	}
	recs := make([]Record, n)
	// Headers of all records share one growing backing array; each
	// record's slice is capped so appending to it cannot clobber the next.
	var hdrs []RecordHeader
	prev := int64(-1)
	for i := range recs {
		length, m := binary.Varint(data)
		if m <= 0 || length < 0 || length > int64(len(data)-m) {
			return nil, fmt.Errorf("record %d: length: %w", i, ErrCorrupt)
		}
		d := decoder{b: data[m : m+int(length)]}
		data = data[m+int(length):]

		d.byte() // record attributes: unused by every Kafka version
		tsDelta := d.varlong()
		offDelta := d.varint32()
		key := d.bytes()
		value := d.bytes()
		nh := d.varint32()
		if d.err == nil && (nh < 0 || int(nh) > len(d.b)/2) {
			return nil, fmt.Errorf("record %d: %d headers in %d bytes: %w", i, nh, len(d.b), ErrCorrupt)
		}
		start := len(hdrs)
		for range nh {
			k := d.bytes()
			if d.err == nil && k == nil {
				return nil, fmt.Errorf("record %d: null header key: %w", i, ErrCorrupt)
			}
			hdrs = append(hdrs, RecordHeader{Key: string(k), Value: d.bytes()})
		}
		switch {
		case d.err != nil:
			return nil, fmt.Errorf("record %d: %w", i, d.err)
		case len(d.b) != 0:
			return nil, fmt.Errorf("record %d: %d bytes left over inside the record: %w", i, len(d.b), ErrCorrupt)
		case int64(offDelta) <= prev || offDelta > h.LastOffsetDelta:
			return nil, fmt.Errorf("record %d: offset delta %d after %d, last offset delta %d: %w",
				i, offDelta, prev, h.LastOffsetDelta, ErrCorrupt)
		}
		prev = int64(offDelta)

		r := &recs[i]
		r.Offset = h.BaseOffset + int64(offDelta)
		r.Timestamp = h.FirstTimestamp + tsDelta // wraps like Java's long arithmetic
		r.Key = key
		r.Value = value
		if len(hdrs) > start {
			r.Headers = hdrs[start:len(hdrs):len(hdrs)]
		}
	}
	if len(data) != 0 {
		return nil, fmt.Errorf("%d bytes after the last of %d records: %w", len(data), n, ErrCorrupt)
	}
	return recs, nil
}

// decoder reads record fields, remembering the first error so that a
// record's fields can be read in a row and checked once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %w", what, ErrCorrupt)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("attributes")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varlong() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varlong")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint32() int32 {
	v := d.varlong()
	if v != int64(int32(v)) {
		d.fail("varint beyond 32 bits")
		return 0
	}
	return int32(v)
}

// bytes reads a varint length and that many bytes; length -1 is null (nil),
// 0 an empty non-nil slice.
func (d *decoder) bytes() []byte {
	n := d.varint32()
	switch {
	case d.err != nil:
		return nil
	case n == -1:
		return nil
	case n < -1 || int(n) > len(d.b):
		d.fail("byte string length")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// ControlRecord decodes the transaction marker in the control batch b and
// reports whether it commits (type 1) or aborts (type 0) the producer's
// transaction. Other control types (KRaft metadata) are errors.
func ControlRecord(b []byte) (commit bool, err error) {
	h, recs, err := decode(b)
	if err != nil {
		return false, fmt.Errorf("reading control record: %w", err)
	}
	if !h.IsControl() {
		return false, fmt.Errorf("reading control record of batch at offset %d: not a control batch: %w", h.BaseOffset, ErrInvalid)
	}
	if len(recs) == 0 {
		return false, fmt.Errorf("reading control record of batch at offset %d: no record: %w", h.BaseOffset, ErrCorrupt)
	}
	// Like Java's ControlRecordType.parse, only the first record counts:
	// key = int16 version (>= 0), int16 type.
	key := recs[0].Key
	if len(key) < 4 || int16(binary.BigEndian.Uint16(key)) < 0 {
		return false, fmt.Errorf("reading control record of batch at offset %d: key %x: %w", h.BaseOffset, key, ErrCorrupt)
	}
	switch t := int16(binary.BigEndian.Uint16(key[2:])); t {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, fmt.Errorf("reading control record of batch at offset %d: control type %d is not a transaction marker: %w",
			h.BaseOffset, t, ErrInvalid)
	}
}

// spec holds the header fields encode writes; the rest it derives.
type spec struct {
	attrs           int16 // including the codec bits
	baseOffset      int64
	lastOffsetDelta int32 // at least the last record's delta
	leaderEpoch     int32
	firstTimestamp  int64
	maxTimestamp    int64
	producerID      int64
	producerEpoch   int16
	baseSequence    int32
}

// Build encodes records as one v2 batch, compressed with codec, for tests,
// padding and anything else the agent writes itself.
//
// Record offsets are absolute and must rise strictly from baseOffset, within
// 2^31 of it; the batch's LastOffsetDelta is the last record's. Timestamps
// are encoded as deltas from firstTimestamp, and MaxTimestamp is the largest
// record timestamp. attrsExtra adds attribute bits (AttrTransactional,
// AttrControl, AttrLogAppendTime, AttrDeleteHorizon); the codec bits come
// from codec only. The partition leader epoch is -1, as clients send it.
func Build(codec Codec, attrsExtra int16, baseOffset, firstTimestamp int64, producerID int64, epoch int16, baseSeq int32, records []Record) ([]byte, error) {
	const allowed = AttrLogAppendTime | AttrTransactional | AttrControl | AttrDeleteHorizon
	switch {
	case !codec.valid():
		return nil, fmt.Errorf("building batch: %v: %w", codec, ErrInvalid)
	case attrsExtra&^allowed != 0:
		return nil, fmt.Errorf("building batch: attributes %#x outside %#x: %w", attrsExtra, allowed, ErrInvalid)
	case len(records) == 0:
		return nil, fmt.Errorf("building batch: no records: %w", ErrInvalid)
	}
	s := spec{
		attrs:          attrsExtra | int16(codec),
		baseOffset:     baseOffset,
		leaderEpoch:    -1,
		firstTimestamp: firstTimestamp,
		maxTimestamp:   math.MinInt64,
		producerID:     producerID,
		producerEpoch:  epoch,
		baseSequence:   baseSeq,
	}
	for i := range records {
		s.maxTimestamp = max(s.maxTimestamp, records[i].Timestamp)
	}
	last := records[len(records)-1].Offset - baseOffset
	if last < 0 || last > math.MaxInt32 {
		return nil, fmt.Errorf("building batch: last record offset %d is %d from base offset %d: %w",
			records[len(records)-1].Offset, last, baseOffset, ErrInvalid)
	}
	s.lastOffsetDelta = int32(last)
	b, err := encode(&s, records)
	if err != nil {
		return nil, fmt.Errorf("building batch: %w", err)
	}
	return b, nil
}

// BuildControl encodes a transaction marker batch as a broker writes it:
// transactional and control attributes, one record with key (version 0,
// type 1 commit / 0 abort) and value (version 0, coordinatorEpoch). Brokers
// refuse control batches on Produce; this is for tests and fabricated logs.
func BuildControl(commit bool, baseOffset, timestamp, producerID int64, epoch int16, coordinatorEpoch int32) ([]byte, error) {
	key := []byte{0, 0, 0, 0}
	if commit {
		key[3] = 1
	}
	value := binary.BigEndian.AppendUint32([]byte{0, 0}, uint32(coordinatorEpoch))
	b, err := Build(CodecNone, AttrTransactional|AttrControl, baseOffset, timestamp, producerID, epoch, -1,
		[]Record{{Offset: baseOffset, Timestamp: timestamp, Key: key, Value: value}})
	if err != nil {
		return nil, fmt.Errorf("building control batch: %w", err)
	}
	return b, nil
}

// scratch pools the uncompressed records of batches being compressed.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledScratch keeps rare huge batches from pinning memory in the pool.
const maxPooledScratch = 4 << 20

// encode writes s and records as one batch. It checks the record offsets;
// timestamps wrap like Java's long arithmetic so that any value round trips.
func encode(s *spec, records []Record) ([]byte, error) {
	size := 0
	prev := int64(-1)
	for i := range records {
		r := &records[i]
		d := r.Offset - s.baseOffset
		if d <= prev || d > int64(s.lastOffsetDelta) || r.Offset < s.baseOffset {
			return nil, fmt.Errorf("record %d: offset %d after delta %d from base %d, last delta %d: %w",
				i, r.Offset, prev, s.baseOffset, s.lastOffsetDelta, ErrInvalid)
		}
		prev = d
		body := bodyLen(r, r.Timestamp-s.firstTimestamp, d)
		size += varlongLen(int64(body)) + body
	}
	if size > math.MaxInt32-HeaderSize {
		return nil, fmt.Errorf("%d bytes of records: %w", size, ErrInvalid)
	}

	codec := Codec(s.attrs & AttrCodecMask)
	var out []byte
	switch {
	case len(records) == 0:
		// An emptied batch keeps its codec bits and has no record bytes,
		// as the cleaner writes it.
		out = make([]byte, HeaderSize)
	case codec == CodecNone:
		out = appendRecords(make([]byte, HeaderSize, HeaderSize+size), s, records)
	default:
		bp := scratch.Get().(*[]byte)
		raw := appendRecords((*bp)[:0], s, records)
		var err error
		out, err = appendCompressed(make([]byte, HeaderSize, HeaderSize+size/4+256), codec, raw)
		if cap(raw) <= maxPooledScratch {
			*bp = raw[:0]
			scratch.Put(bp)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(out)-lengthOverhead > math.MaxInt32 {
		return nil, fmt.Errorf("batch of %d bytes: %w", len(out), ErrInvalid)
	}

	binary.BigEndian.PutUint64(out[offBaseOffset:], uint64(s.baseOffset))
	binary.BigEndian.PutUint32(out[offLength:], uint32(len(out)-lengthOverhead))
	binary.BigEndian.PutUint32(out[offLeaderEpoch:], uint32(s.leaderEpoch))
	out[offMagic] = 2
	binary.BigEndian.PutUint16(out[offAttributes:], uint16(s.attrs))
	binary.BigEndian.PutUint32(out[offLastOffsetDelta:], uint32(s.lastOffsetDelta))
	binary.BigEndian.PutUint64(out[offFirstTimestamp:], uint64(s.firstTimestamp))
	binary.BigEndian.PutUint64(out[offMaxTimestamp:], uint64(s.maxTimestamp))
	binary.BigEndian.PutUint64(out[offProducerID:], uint64(s.producerID))
	binary.BigEndian.PutUint16(out[offProducerEpoch:], uint16(s.producerEpoch))
	binary.BigEndian.PutUint32(out[offBaseSequence:], uint32(s.baseSequence))
	binary.BigEndian.PutUint32(out[offNumRecords:], uint32(len(records)))
	binary.BigEndian.PutUint32(out[offCRC:], crc32c(out[offAttributes:]))
	return out, nil
}

// appendRecords appends the wire form of records; encode has checked them.
func appendRecords(dst []byte, s *spec, records []Record) []byte {
	for i := range records {
		r := &records[i]
		tsDelta := r.Timestamp - s.firstTimestamp
		offDelta := r.Offset - s.baseOffset
		dst = binary.AppendVarint(dst, int64(bodyLen(r, tsDelta, offDelta)))
		dst = append(dst, 0) // record attributes
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, offDelta)
		dst = appendBytes(dst, r.Key)
		dst = appendBytes(dst, r.Value)
		dst = binary.AppendVarint(dst, int64(len(r.Headers)))
		for j := range r.Headers {
			h := &r.Headers[j]
			dst = binary.AppendVarint(dst, int64(len(h.Key)))
			dst = append(dst, h.Key...)
			dst = appendBytes(dst, h.Value)
		}
	}
	return dst
}

// bodyLen is the encoded size of r after its length prefix.
func bodyLen(r *Record, tsDelta, offDelta int64) int {
	n := 1 + varlongLen(tsDelta) + varlongLen(offDelta) +
		bytesLen(r.Key) + bytesLen(r.Value) + varlongLen(int64(len(r.Headers)))
	for j := range r.Headers {
		h := &r.Headers[j]
		n += varlongLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return n
}

// appendBytes appends a varint length (-1 for nil) and b.
func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

func bytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varlongLen(int64(len(b))) + len(b)
}

// varlongLen is the size of v as a zigzag varint.
func varlongLen(v int64) int {
	u := uint64(v)<<1 ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}
