// Package recordbatch reads, rewrites and builds Kafka v2 (magic 2) record
// batches as they travel raw in Fetch and Produce requests.
//
// kmirror keeps every record at the same offset on the destination, so it
// forwards source batches byte for byte wherever it can: Rewrite only patches
// the fixed header fields the destination broker insists on and recomputes the
// CRC, without decompressing. The decoding and encoding half (Records, Build,
// SplitDense, ReencodeLogAppendTime) serves the few cases that cannot be
// forwarded as they are, plus verification and tests.
//
// Layout of a v2 batch (all integers big endian):
//
//	 0 baseOffset int64          27 firstTimestamp int64
//	 8 length int32 (bytes after) 35 maxTimestamp int64
//	12 partitionLeaderEpoch int32 43 producerId int64
//	16 magic int8 (= 2)           51 producerEpoch int16
//	17 crc uint32 (CRC32C of 21..) 53 baseSequence int32
//	21 attributes int16           57 numRecords int32
//	23 lastOffsetDelta int32      61 records (maybe compressed)
package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"math"
	"strconv"
)

// Fixed offsets of the v2 header fields, and its size.
const (
	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	// HeaderSize is the size of the fixed part of a v2 batch; the records
	// start right after it.
	HeaderSize = 61

	// lengthOverhead is what the length field does not count: the base
	// offset and the length field itself.
	lengthOverhead = 12
)

// Attribute bits of a v2 batch.
const (
	// AttrCodecMask selects the compression codec bits.
	AttrCodecMask int16 = 0x07
	// AttrLogAppendTime marks a batch whose timestamp type is
	// LogAppendTime: consumers see MaxTimestamp on every record.
	AttrLogAppendTime int16 = 0x08
	// AttrTransactional marks records written inside a transaction.
	AttrTransactional int16 = 0x10
	// AttrControl marks a control batch (a transaction marker).
	AttrControl int16 = 0x20
	// AttrDeleteHorizon (KIP-534) is set by the log cleaner; FirstTimestamp
	// then holds the delete horizon. Record timestamps stay base + delta.
	AttrDeleteHorizon int16 = 0x40
)

// Sentinel errors; every error this package returns wraps one of them so that
// callers can classify with errors.Is while the message says what was being
// done.
var (
	// ErrShort means the bytes end before the header or the records they
	// announce.
	ErrShort = errors.New("record batch truncated")
	// ErrOldMagic means a magic 0 or 1 message set: it must be up-converted
	// (Produce accepts only magic 2) or reported.
	ErrOldMagic = errors.New("old message format (magic 0 or 1)")
	// ErrUnknownMagic means a magic byte no Kafka version has written.
	ErrUnknownMagic = errors.New("unknown record batch magic")
	// ErrLength means the length field disagrees with the bytes at hand.
	ErrLength = errors.New("record batch length mismatch")
	// ErrCRC means the stored CRC32C does not match the batch contents.
	ErrCRC = errors.New("record batch CRC mismatch")
	// ErrCorrupt means the header or the records do not decode.
	ErrCorrupt = errors.New("corrupt record batch")
	// ErrCodec means an unknown compression codec or a failing
	// (de)compressor.
	ErrCodec = errors.New("record batch compression")
	// ErrTooLarge means the records would decompress beyond
	// MaxUncompressedBytes.
	ErrTooLarge = errors.New("record batch decompresses too large")
	// ErrNotDense means the batch's records do not cover every offset from
	// its base to its last offset, which a broker refuses on Produce.
	ErrNotDense = errors.New("record batch offsets not dense")
	// ErrLogAppendTime means a LogAppendTime batch was about to be
	// forwarded: the destination would show the producer's create times
	// instead of the source's append time. ReencodeLogAppendTime first.
	ErrLogAppendTime = errors.New("record batch has LogAppendTime timestamps")
	// ErrInvalid means a caller-supplied argument cannot be encoded.
	ErrInvalid = errors.New("invalid record batch argument")
)

// MaxUncompressedBytes bounds what one batch may decompress to. Decoding is
// only for verification, splitting and re-encoding, and a hostile or corrupt
// batch must not make the agent allocate without limit.
const MaxUncompressedBytes = 256 << 20

// maxUncompressed is the bound in force: MaxUncompressedBytes, lowered by
// fuzz tests to keep each input's work small. The zstd decoder reads it once,
// when first used.
var maxUncompressed = MaxUncompressedBytes

// castagnoli is the CRC32C table v2 batches are checksummed with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec is a batch compression codec, the low three attribute bits.
type Codec int8

// The codecs Kafka defines.
const (
	CodecNone Codec = iota
	CodecGzip
	CodecSnappy
	CodecLZ4
	CodecZstd
)

// String returns the name Kafka configs use for the codec.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return "codec(" + strconv.Itoa(int(c)) + ")"
}

// valid reports whether Kafka defines c.
func (c Codec) valid() bool { return c >= CodecNone && c <= CodecZstd }

// Header holds the fixed fields of a v2 batch.
type Header struct {
	BaseOffset           int64
	Length               int32 // bytes after the length field
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32 // CRC32C of bytes 21 to the end
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Codec returns the compression codec of the records.
func (h Header) Codec() Codec { return Codec(h.Attributes & AttrCodecMask) }

// IsTransactional reports whether the records belong to a transaction.
func (h Header) IsTransactional() bool { return h.Attributes&AttrTransactional != 0 }

// IsControl reports whether this is a control batch (a transaction marker).
func (h Header) IsControl() bool { return h.Attributes&AttrControl != 0 }

// LogAppendTime reports whether consumers see MaxTimestamp (the broker's
// append time) on every record instead of the records' own timestamps.
func (h Header) LogAppendTime() bool { return h.Attributes&AttrLogAppendTime != 0 }

// HasDeleteHorizon reports whether the cleaner stored a delete horizon in
// FirstTimestamp (KIP-534).
func (h Header) HasDeleteHorizon() bool { return h.Attributes&AttrDeleteHorizon != 0 }

// LastOffset returns the offset the batch ends at. Compaction may have removed
// the record that had it; the offset is still consumed.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// dense reports whether the records cover every offset of the batch, judged
// from the header alone: brokers only store batches whose offset deltas rise
// strictly within [0, LastOffsetDelta], so count == LastOffsetDelta+1 leaves
// no room for a hole.
func (h Header) dense() bool {
	return h.NumRecords > 0 && int64(h.NumRecords) == int64(h.LastOffsetDelta)+1
}

// ParseHeader reads the fixed fields of the single batch b, which must be
// exactly one batch (as Next returns it). It checks framing (and that the
// last offset fits an int64) but not the checksum, which CRCValid does. A
// magic 0 or 1 message is reported as an *OldMagicError (errors.Is
// ErrOldMagic) even when shorter than a v2 header, so callers can tell it
// apart from truncation.
func ParseHeader(b []byte) (Header, error) {
	if len(b) > offMagic {
		switch m := int8(b[offMagic]); m {
		case 2:
		case 0, 1:
			return Header{}, fmt.Errorf("parsing batch header: %w",
				&OldMagicError{Offset: int64(binary.BigEndian.Uint64(b)), Magic: m})
		default:
			return Header{}, fmt.Errorf("parsing batch header at offset %d: magic %d: %w",
				int64(binary.BigEndian.Uint64(b)), m, ErrUnknownMagic)
		}
	}
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("parsing batch header: %d bytes, need %d: %w", len(b), HeaderSize, ErrShort)
	}
	h := Header{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		Length:               int32(binary.BigEndian.Uint32(b[offLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		FirstTimestamp:       int64(binary.BigEndian.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		NumRecords:           int32(binary.BigEndian.Uint32(b[offNumRecords:])),
	}
	if int64(h.Length)+lengthOverhead != int64(len(b)) {
		return Header{}, fmt.Errorf("parsing batch header at offset %d: length field says %d bytes, have %d: %w",
			h.BaseOffset, int64(h.Length)+lengthOverhead, len(b), ErrLength)
	}
	if h.LastOffsetDelta > 0 && h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta) {
		return Header{}, fmt.Errorf("parsing batch header at offset %d: last offset delta %d overflows: %w",
			h.BaseOffset, h.LastOffsetDelta, ErrCorrupt)
	}
	return h, nil
}

// OldMagicError reports a magic 0 or 1 message met while walking a fetch
// response; it matches ErrOldMagic under errors.Is and carries the offset so
// that the caller can up-convert or report it.
type OldMagicError struct {
	Offset int64 // the message's offset (a wrapper's last inner offset)
	Magic  int8
}

// Error describes the old-format message.
func (e *OldMagicError) Error() string {
	return "record batch at offset " + strconv.FormatInt(e.Offset, 10) +
		": magic " + strconv.Itoa(int(e.Magic)) + ": " + ErrOldMagic.Error()
}

// Is makes errors.Is(err, ErrOldMagic) hold.
func (e *OldMagicError) Is(target error) bool { return target == ErrOldMagic }

// Next splits the first complete batch off raw, a fetch response's
// RecordBatches bytes, and returns it (capacity clipped, so appending to it
// cannot clobber rest) with the bytes after it.
//
// Brokers fill a fetch up to the byte limit and may cut the last batch short;
// that is not an error: Next then returns a nil batch, a nil error and the
// partial bytes as rest, meaning "no more complete batches".
//
// A magic 0 or 1 message returns an *OldMagicError (errors.Is ErrOldMagic)
// with batch set to the whole message when it is complete (nil otherwise) and
// rest to what follows it, so that a caller may up-convert and go on. Next
// checks framing only; CRCValid and Rewrite check the checksum.
func Next(raw []byte) (batch, rest []byte, err error) {
	if len(raw) <= offMagic {
		return nil, raw, nil
	}
	offset := int64(binary.BigEndian.Uint64(raw[offBaseOffset:]))
	length := int64(int32(binary.BigEndian.Uint32(raw[offLength:])))
	total := length + lengthOverhead
	complete := total <= int64(len(raw))
	switch magic := int8(raw[offMagic]); magic {
	case 2:
		if total < HeaderSize {
			return nil, raw, fmt.Errorf("reading batch at offset %d: length field %d below the v2 minimum %d: %w",
				offset, length, HeaderSize-lengthOverhead, ErrLength)
		}
		if !complete {
			return nil, raw, nil
		}
		return raw[:total:total], raw[total:], nil
	case 0, 1:
		// A v0/v1 message's offset and size fields sit where a v2 batch's
		// do; a compressed wrapper carries its last inner offset.
		oe := &OldMagicError{Offset: offset, Magic: magic}
		if length < 0 || !complete {
			return nil, raw, oe
		}
		return raw[:total:total], raw[total:], oe
	default:
		return nil, raw, fmt.Errorf("reading batch at offset %d: magic %d: %w", offset, magic, ErrUnknownMagic)
	}
}

// CRCValid reports whether b is one well-framed v2 batch whose stored CRC32C
// matches its contents.
func CRCValid(b []byte) bool {
	h, err := ParseHeader(b)
	return err == nil && crc32c(b[offAttributes:]) == h.CRC
}

// checkCRC returns an error when b's stored CRC does not match; b must have
// passed ParseHeader.
func checkCRC(b []byte, h *Header) error {
	if got := crc32c(b[offAttributes:]); got != h.CRC {
		return fmt.Errorf("checking batch at offset %d: stored crc %08x, computed %08x: %w",
			h.BaseOffset, h.CRC, got, ErrCRC)
	}
	return nil
}

// parseChecked parses b's header and verifies its CRC, which every path that
// decodes records does first so that a corrupt source batch is never
// re-encoded with a fresh, valid CRC.
func parseChecked(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	return h, checkCRC(b, &h)
}

// crc32c is the checksum of a v2 batch, over bytes 21 to the end.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Batch is one whole batch of a record set and its header (All).
type Batch struct {
	Raw []byte
	Header
}

// All yields the whole batches of raw, a fetch response's RecordBatches
// bytes, in order, each with its parsed header, and stops at a batch cut
// short by the fetch's byte limit, as Next does. A batch that cannot be read
// (Next's or ParseHeader's error, an old magic included) is yielded as its
// error, and ends the sequence.
func All(raw []byte) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		for rest := raw; len(rest) > 0; {
			b, r, err := Next(rest)
			if err != nil {
				yield(Batch{}, err)
				return
			}
			if b == nil {
				return
			}
			rest = r
			h, err := ParseHeader(b)
			if err != nil {
				yield(Batch{}, err)
				return
			}
			if !yield(Batch{Raw: b, Header: h}, nil) {
				return
			}
		}
	}
}
