package devcluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// This file holds the minimal record-batch reading the strict layer needs.
// It is deliberately separate from internal/recordbatch (the agent's codec)
// and from kgo's decompressor: the harness must not share code with the
// writers it is checking, or a bug on both sides would cancel out.

// Offsets of the v2 record batch header fields (DefaultRecordBatch.java).
const (
	offBaseOffset      = 0
	offLength          = 8
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
	batchHeaderLen     = 61

	// logOverhead is the base offset and length fields that precede what
	// the length field counts.
	logOverhead = 12
	// minRecordOverhead is Kafka's LegacyRecord.RECORD_OVERHEAD_V0, the
	// smallest length field its batch iterator accepts.
	minRecordOverhead = 14
)

// Batch attribute bits.
const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// Compression codec ids in the attributes.
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLZ4    = 3
	codecZstd   = 4
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// batchHeader is the fixed part of a v2 record batch.
type batchHeader struct {
	baseOffset      int64
	length          int32
	magic           int8
	crc             uint32
	attributes      int16
	lastOffsetDelta int32
	baseTimestamp   int64
	maxTimestamp    int64
	producerID      int64
	producerEpoch   int16
	baseSequence    int32
	numRecords      int32
}

// readHeader reads the header of a magic-2 batch; b must hold at least
// batchHeaderLen bytes.
func readHeader(b []byte) batchHeader {
	be := binary.BigEndian
	return batchHeader{
		baseOffset:      int64(be.Uint64(b[offBaseOffset:])),
		length:          int32(be.Uint32(b[offLength:])),
		magic:           int8(b[offMagic]),
		crc:             be.Uint32(b[offCRC:]),
		attributes:      int16(be.Uint16(b[offAttributes:])),
		lastOffsetDelta: int32(be.Uint32(b[offLastOffsetDelta:])),
		baseTimestamp:   int64(be.Uint64(b[offBaseTimestamp:])),
		maxTimestamp:    int64(be.Uint64(b[offMaxTimestamp:])),
		producerID:      int64(be.Uint64(b[offProducerID:])),
		producerEpoch:   int16(be.Uint16(b[offProducerEpoch:])),
		baseSequence:    int32(be.Uint32(b[offBaseSequence:])),
		numRecords:      int32(be.Uint32(b[offRecordCount:])),
	}
}

func (h batchHeader) codec() int          { return int(h.attributes & attrCodecMask) }
func (h batchHeader) transactional() bool { return h.attributes&attrTransactional != 0 }
func (h batchHeader) control() bool       { return h.attributes&attrControl != 0 }
func (h batchHeader) logAppendTime() bool { return h.attributes&attrLogAppendTime != 0 }

// splitResult is what Kafka's batch iterator (ByteBufferLogInputStream)
// makes of one partition's records field.
type splitResult struct {
	first    []byte // the first whole batch, nil if there is none
	batches  int    // whole batches found
	magic    int8   // magic of the first batch
	corrupt  string // set when the iterator itself throws CorruptRecordException
	consumed int    // bytes covered by whole batches; trailing partial bytes are ignored, as Kafka does
}

// splitBatches walks the records field the way ByteBufferLogInputStream does:
// it stops silently at a truncated tail and throws on a length field below
// the minimum overhead or on a magic byte it does not know.
func splitBatches(b []byte) splitResult {
	var r splitResult
	rest := b
	for {
		if len(rest) < logOverhead {
			return r
		}
		size := int32(binary.BigEndian.Uint32(rest[offLength:]))
		if size < minRecordOverhead {
			r.corrupt = fmt.Sprintf("Record size %d is less than the minimum record overhead (%d)", size, minRecordOverhead)
			return r
		}
		if len(rest) < offMagic+1 {
			return r
		}
		magic := int8(rest[offMagic])
		if magic < 0 || magic > 2 {
			r.corrupt = fmt.Sprintf("Invalid magic found in record: %d", magic)
			return r
		}
		total := int(size) + logOverhead
		if len(rest) < total {
			return r
		}
		if r.batches == 0 {
			r.first = rest[:total]
			r.magic = magic
		}
		r.batches++
		r.consumed += total
		rest = rest[total:]
	}
}

// batchCRC computes the CRC-32C a v2 batch should carry: everything from the
// attributes to the end.
func batchCRC(batch []byte) uint32 {
	return crc32.Checksum(batch[offAttributes:], crc32c)
}

// record is the part of a decoded record the strict checks look at.
type record struct {
	timestampDelta int64
	offsetDelta    int32
	keyNull        bool
}

// errRecord is a record-level decoding failure; Kafka answers these with
// INVALID_RECORD (DefaultRecord.readFrom throws InvalidRecordException).
var errRecord = errors.New("invalid record")

// forEachRecord decodes exactly n records from the uncompressed records
// section and calls fn for each. It fails if fewer than n records are
// encoded or if bytes remain after the n-th, which is how Kafka's
// RecordIterator detects a wrong record count.
func forEachRecord(data []byte, n int32, fn func(i int, r record)) error {
	rest := data
	for i := 0; i < int(n); i++ {
		if len(rest) == 0 {
			return fmt.Errorf("%w: incorrect declared batch size, premature EOF reached after %d of %d records", errRecord, i, n)
		}
		r, used, err := readRecord(rest)
		if err != nil {
			return fmt.Errorf("%w: record %d: %v", errRecord, i, err)
		}
		fn(i, r)
		rest = rest[used:]
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: incorrect declared batch size, records still remaining in file after %d records", errRecord, n)
	}
	return nil
}

// readRecord decodes one record (DefaultRecord.readFrom) and returns how
// many bytes it took.
func readRecord(b []byte) (record, int, error) {
	var r record
	length, n := binary.Varint(b)
	if n <= 0 || length < 0 || length > int64(len(b)-n) {
		return r, 0, errors.New("bad record length")
	}
	body := b[n : n+int(length)]
	total := n + int(length)
	p := 0
	next := func(what string) (int64, error) {
		v, m := binary.Varint(body[p:])
		if m <= 0 {
			return 0, fmt.Errorf("bad %s varint", what)
		}
		p += m
		return v, nil
	}
	skip := func(what string, l int64, nullable bool) error {
		if l < 0 {
			if nullable && l == -1 {
				return nil
			}
			return fmt.Errorf("invalid %s length %d", what, l)
		}
		if l > int64(len(body)-p) {
			return fmt.Errorf("%s runs past the record", what)
		}
		p += int(l)
		return nil
	}
	if len(body) < 1 {
		return r, 0, errors.New("empty record")
	}
	p++ // attributes, unused in v2
	var err error
	if r.timestampDelta, err = next("timestamp delta"); err != nil {
		return r, 0, err
	}
	od, err := next("offset delta")
	if err != nil {
		return r, 0, err
	}
	r.offsetDelta = int32(od)
	kl, err := next("key length")
	if err != nil {
		return r, 0, err
	}
	r.keyNull = kl == -1
	if err := skip("key", kl, true); err != nil {
		return r, 0, err
	}
	vl, err := next("value length")
	if err != nil {
		return r, 0, err
	}
	if err := skip("value", vl, true); err != nil {
		return r, 0, err
	}
	nh, err := next("header count")
	if err != nil {
		return r, 0, err
	}
	if nh < 0 {
		return r, 0, fmt.Errorf("invalid number of record headers %d", nh)
	}
	for h := int64(0); h < nh; h++ {
		hk, err := next("header key length")
		if err != nil {
			return r, 0, err
		}
		if err := skip("header key", hk, false); err != nil {
			return r, 0, err
		}
		hv, err := next("header value length")
		if err != nil {
			return r, 0, err
		}
		if err := skip("header value", hv, true); err != nil {
			return r, 0, err
		}
	}
	if p != len(body) {
		return r, 0, fmt.Errorf("invalid record size: expected to read %d bytes in record payload, but instead read %d", len(body), p)
	}
	return r, total, nil
}

// zstdDecoder is shared: DecodeAll is safe for concurrent use and a decoder
// is expensive to build.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
})

// xerialMagic starts snappy data framed by snappy-java's SnappyOutputStream,
// which the Java client writes; other clients write a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decompress returns the uncompressed records section of a batch.
func decompress(codec int, data []byte) ([]byte, error) {
	switch codec {
	case codecNone:
		return data, nil
	case codecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		out, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return out, nil
	case codecSnappy:
		return decodeSnappy(data)
	case codecLZ4:
		out, err := io.ReadAll(lz4.NewReader(bytes.NewReader(data)))
		if err != nil {
			return nil, fmt.Errorf("lz4: %w", err)
		}
		return out, nil
	case codecZstd:
		dec, err := zstdDecoder()
		if err != nil {
			return nil, fmt.Errorf("zstd decoder: %w", err)
		}
		out, err := dec.DecodeAll(data, nil)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
}

// decodeSnappy handles both the xerial framing (magic, version, compatible
// version, then length-prefixed blocks) and a bare snappy block.
func decodeSnappy(data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, xerialMagic) {
		out, err := s2.Decode(nil, data)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		return out, nil
	}
	const xerialHeaderLen = 16 // magic(8) + version(4) + compatible version(4)
	if len(data) < xerialHeaderLen {
		return nil, errors.New("snappy: truncated xerial header")
	}
	var out []byte
	rest := data[xerialHeaderLen:]
	for len(rest) > 0 {
		if len(rest) < 4 {
			return nil, errors.New("snappy: truncated xerial block length")
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, errors.New("snappy: xerial block runs past the data")
		}
		block, err := s2.Decode(nil, rest[:n])
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		out = append(out, block...)
		rest = rest[n:]
	}
	return out, nil
}
