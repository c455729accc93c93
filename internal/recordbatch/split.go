package recordbatch

import (
	"fmt"
	"math"
)

// Part is one dense run of a batch's records, encoded as a batch of its own.
type Part struct {
	FirstOffset int64 // offset of the part's first record, also its base offset
	LastOffset  int64 // offset of its last record
	Batch       []byte
}

// IsDense reports whether the batch b has a record at every offset from its
// base to its last offset, so that it can be forwarded as it is. It reads the
// header only (no decompression): brokers store only batches whose offset
// deltas rise strictly within [0, LastOffsetDelta], so NumRecords ==
// LastOffsetDelta+1 means no hole. Records enforces that rise, so a batch
// that passes here and decodes is dense.
func IsDense(b []byte) (bool, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return false, fmt.Errorf("checking batch density: %w", err)
	}
	return h.dense(), nil
}

// SplitDense cuts the batch b, whose offsets may have holes left by
// compaction, into dense parts that a broker accepts on Produce and that land
// at the same offsets.
//
// A dense batch comes back as exactly one part whose Batch is b itself, with
// no decoding. Otherwise every maximal run of consecutive offsets is
// re-encoded as its own batch with b's codec, attributes (timestamp type,
// transactional, control, delete horizon), partition leader epoch, first
// timestamp and producer id and epoch; each part's base offset is its first
// record's offset and its base sequence that record's sequence in b (or -1),
// which the caller replaces through Rewrite. Record timestamps are kept as
// stored; a LogAppendTime part keeps b's MaxTimestamp.
//
// The holes are what the parts leave of [BaseOffset, LastOffset()]; a batch
// emptied by compaction yields no part at all.
func SplitDense(b []byte) ([]Part, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, fmt.Errorf("splitting batch: %w", err)
	}
	if h.dense() {
		return []Part{{FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(), Batch: b}}, nil
	}
	h, recs, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("splitting batch: %w", err)
	}
	var parts []Part
	for len(recs) > 0 {
		n := 1
		for n < len(recs) && recs[n].Offset == recs[n-1].Offset+1 {
			n++
		}
		run := recs[:n]
		recs = recs[n:]

		first, last := run[0].Offset, run[n-1].Offset
		s := spec{
			attrs:           h.Attributes,
			baseOffset:      first,
			lastOffsetDelta: int32(last - first), // < LastOffsetDelta, checked by decode
			leaderEpoch:     h.PartitionLeaderEpoch,
			firstTimestamp:  h.FirstTimestamp,
			maxTimestamp:    h.MaxTimestamp,
			producerID:      h.ProducerID,
			producerEpoch:   h.ProducerEpoch,
			baseSequence:    -1,
		}
		if !h.LogAppendTime() {
			s.maxTimestamp = math.MinInt64
			for i := range run {
				s.maxTimestamp = max(s.maxTimestamp, run[i].Timestamp)
			}
		}
		if h.BaseSequence >= 0 {
			// A record's sequence is the base sequence plus its
			// offset delta, wrapping at 2^31 like Kafka's.
			s.baseSequence = int32((int64(h.BaseSequence) + (first - h.BaseOffset)) % (1 << 31))
		}
		part, err := encode(&s, run)
		if err != nil {
			return nil, fmt.Errorf("splitting batch at offset %d: encoding offsets %d-%d: %w", h.BaseOffset, first, last, err)
		}
		parts = append(parts, Part{FirstOffset: first, LastOffset: last, Batch: part})
	}
	return parts, nil
}

// ReencodeLogAppendTime turns the LogAppendTime batch b into a CreateTime
// batch whose records all carry b's MaxTimestamp (the source broker's append
// time), so that a CreateTime destination shows consumers the same
// timestamps. The codec, offsets, other attributes, leader epoch and producer
// fields stay; the result is a new batch, b is untouched. Rewrite it
// afterwards like any forwarded batch.
func ReencodeLogAppendTime(b []byte) ([]byte, error) {
	h, recs, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("re-encoding LogAppendTime batch: %w", err)
	}
	if !h.LogAppendTime() {
		return nil, fmt.Errorf("re-encoding LogAppendTime batch at offset %d: timestamp type is CreateTime: %w",
			h.BaseOffset, ErrInvalid)
	}
	for i := range recs {
		recs[i].Timestamp = h.MaxTimestamp
	}
	s := spec{
		attrs:           h.Attributes &^ AttrLogAppendTime,
		baseOffset:      h.BaseOffset,
		lastOffsetDelta: h.LastOffsetDelta,
		leaderEpoch:     h.PartitionLeaderEpoch,
		firstTimestamp:  h.MaxTimestamp, // every delta 0
		maxTimestamp:    h.MaxTimestamp,
		producerID:      h.ProducerID,
		producerEpoch:   h.ProducerEpoch,
		baseSequence:    h.BaseSequence,
	}
	if h.HasDeleteHorizon() {
		s.firstTimestamp = h.FirstTimestamp // it holds the horizon, keep it
	}
	out, err := encode(&s, recs)
	if err != nil {
		return nil, fmt.Errorf("re-encoding LogAppendTime batch at offset %d: %w", h.BaseOffset, err)
	}
	return out, nil
}
