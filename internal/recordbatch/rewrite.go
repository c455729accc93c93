package recordbatch

import (
	"encoding/binary"
	"fmt"
)

// Rewrite turns the source batch b into one the destination's idempotent (or
// transactional) producer may send, in place and without decompressing or
// allocating: base offset 0 and partition leader epoch -1 (what brokers expect
// from clients), the given producer id, epoch and base sequence, the
// transactional bit set or cleared, and the delete-horizon bit cleared so that
// the destination cleaner decides for itself. The codec, control and
// timestamp-type bits and the records are left alone. The CRC32C is
// recomputed.
//
// b must be one complete batch (as Next returns it). Rewrite refuses, leaving
// b untouched:
//   - a batch whose stored CRC is wrong (ErrCRC): recomputing it would pass
//     source corruption off as valid data;
//   - a batch that is not dense (ErrNotDense): brokers reject it; SplitDense
//     first;
//   - a LogAppendTime batch (ErrLogAppendTime): the destination would show
//     create times; ReencodeLogAppendTime first;
//   - a negative base sequence with a producer id (ErrInvalid): brokers
//     reject it, so sequences must be taken mod 2^31.
//
// Large batches' records are read once: the old CRC is checked and the new
// one computed from the same pass over them.
func Rewrite(b []byte, producerID int64, epoch int16, baseSequence int32, transactional bool) error {
	h, err := ParseHeader(b)
	if err != nil {
		return fmt.Errorf("rewriting batch: %w", err)
	}
	switch {
	case h.LogAppendTime():
		return fmt.Errorf("rewriting batch at offset %d: %w", h.BaseOffset, ErrLogAppendTime)
	case !h.dense():
		return fmt.Errorf("rewriting batch at offset %d: %d records for last offset delta %d: %w",
			h.BaseOffset, h.NumRecords, h.LastOffsetDelta, ErrNotDense)
	case producerID >= 0 && baseSequence < 0:
		return fmt.Errorf("rewriting batch at offset %d: base sequence %d for producer id %d: %w",
			h.BaseOffset, baseSequence, producerID, ErrInvalid)
	}

	records := b[HeaderSize:]
	combine := len(records) >= combineMin
	var recordsCRC, shift, got uint32
	if combine {
		recordsCRC = crc32c(records)
		shift = x2nModP(uint64(len(records)), 3) // x^(8·len): appends len zero bytes
		got = multModP(shift, crc32c(b[offAttributes:HeaderSize])) ^ recordsCRC
	} else {
		got = crc32c(b[offAttributes:])
	}
	if got != h.CRC {
		return fmt.Errorf("rewriting batch at offset %d: stored crc %08x, computed %08x: %w",
			h.BaseOffset, h.CRC, got, ErrCRC)
	}

	attrs := h.Attributes &^ (AttrTransactional | AttrDeleteHorizon)
	if transactional {
		attrs |= AttrTransactional
	}
	binary.BigEndian.PutUint64(b[offBaseOffset:], 0)
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 0xFFFFFFFF) // -1
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(attrs))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(baseSequence))
	var crc uint32
	if combine {
		crc = multModP(shift, crc32c(b[offAttributes:HeaderSize])) ^ recordsCRC
	} else {
		crc = crc32c(b[offAttributes:])
	}
	binary.BigEndian.PutUint32(b[offCRC:], crc)
	return nil
}

// CRC combination, after zlib's crc32_combine: with CRCs in the standard
// (pre- and post-inverted, reflected) form, crc(A‖B) = crc(A)·x^(8·|B|) mod P
// XOR crc(B). It lets Rewrite checksum the unchanged records of a large
// batch once for both the old and the new header.

// combineMin is the records size from which one pass plus CRC combination
// beats two passes (about 350ns of combination against 25 GB/s of CRC32C).
const combineMin = 8 << 10

// castagnoliReflected is the CRC32C polynomial, bit-reflected, x^32 implied.
const castagnoliReflected = 0x82F63B78

// x2nTable[k] = x^(2^k) mod P, reflected.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = multModP(p, p)
		t[k] = p
	}
	return t
}()

// multModP returns a·b mod P for reflected polynomials. Branch-free in the
// bits of a and b, whose branches would mispredict half the time.
func multModP(a, b uint32) uint32 {
	var p uint32
	for ; a != 0; a <<= 1 {
		p ^= b & -(a >> 31)
		b = b>>1 ^ castagnoliReflected&-(b&1)
	}
	return p
}

// x2nModP returns x^(n·2^k) mod P, reflected.
func x2nModP(n uint64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
		k++
	}
	return p
}
