package partition

import (
	"context"
	"slices"
	"time"

	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// align pads the destination from next up to target with records nobody
// will see and then cuts them off with DeleteRecords, so that the
// destination log starts where the source's does.
func (m *Mirror) align(ctx context.Context, target int64) error {
	tp := m.cfg.TP
	var lost int64
	if m.next > 0 {
		// Retention on the source removed records the mirror had not
		// copied yet: report it, never silently.
		lost = target - m.next
		m.log.Warn("source retention removed records before they were mirrored", "from", m.next, "to", target, "lost", lost)
	}
	m.setState(Preparing, reason.New(reason.Aligning, "aligning the destination log start to the source's (%d)", target))
	// The checkpoint is saved before the padding, with the sequence the
	// writer will have after it (sequences wrap at 2^31, so the padding's
	// length counts modulo 2^31): a kill after the last padding batch
	// landed, before DeleteRecords, leaves a destination end equal to
	// target, which resync recognises by the checkpoint and cuts. A
	// retry of this same alignment keeps the loss counted the first time.
	total := lost
	if prev, ok := m.cfg.Checkpoints.Alignment(tp); ok && prev.Offset == target {
		total = prev.Lost
	} else if ok {
		total += prev.Lost
	}
	if err := m.cfg.Checkpoints.SaveAlignment(ctx, tp, Alignment{Offset: target, NextSeq: addSeq(m.seq, int32((target-m.next)%(1<<31))), Lost: total}); err != nil {
		return err
	}
	// Padding batches differ only in their sequence, which writePlain
	// rewrites in place (with the CRC): one batch is built and sent again
	// while its size fits, renewed every minute so that its timestamps stay
	// recent. Building one for every 20000 offsets took 70% of the agent's
	// CPU while padding and capped it near 20M offsets/s (make bench), and
	// compressing costs more than building.
	var (
		pad   []byte
		padN  int32
		built time.Time
	)
	for m.next < target {
		n := int32(min(int64(m.cfg.PadBatch), target-m.next))
		if n != padN || time.Since(built) > time.Minute {
			b, err := padBatch(n, m.cfg.KeyedPad, m.cfg.ProducerID, m.cfg.Epoch, m.seq)
			if err != nil {
				return fail(reason.BatchRewriteFailed, "building a padding batch: %v", err)
			}
			pad, padN, built = b, n, time.Now()
		}
		// A copy: the batch is rewritten for the next send while this
		// one may still be in flight.
		if err := m.writePlain(ctx, slices.Clone(pad), n, false); err != nil {
			return err
		}
		m.src = m.next
		m.mu.Lock()
		m.st.PadRemaining = target - m.next
		m.mu.Unlock()
	}
	if err := m.drain(ctx); err != nil {
		return err
	}
	if err := m.cfg.Writer.DeleteRecords(ctx, tp.Topic, tp.Partition, target); err != nil {
		return err
	}
	m.mu.Lock()
	m.st.PadRemaining = 0
	m.st.LostRecords = total
	m.mu.Unlock()
	if lost > 0 {
		m.setState(Preparing, reason.New(reason.RetentionLoss, "source retention removed offsets %d to %d before they were mirrored", target-lost, target-1))
	}
	return nil
}

// padCodec compresses padding batches. Their records differ only in the
// offset delta, which zstd squeezes to about 0.54 bytes an offset (0.71
// keyed) in batches of 65536 records, where an uncompressed batch takes 8.6
// (19.6 keyed), lz4 4.0 and gzip 1.4: the destination holds every pad
// record until the final DeleteRecords, and sends and stores that much
// less. Any destination the preflight accepts (Kafka 3.6+) takes zstd, and
// mirror topics have compression.type=producer, so the broker keeps the
// batch as sent; it decompresses it to validate every record, as it
// validates every record of an uncompressed batch.
const padCodec = recordbatch.CodecZstd

func padBatch(n int32, keyed bool, pid int64, epoch int16, seq int32) ([]byte, error) {
	recs := make([]recordbatch.Record, n)
	var key []byte
	if keyed {
		key = []byte("kmirror-pad")
	}
	now := time.Now().UnixMilli()
	for i := range recs {
		recs[i] = recordbatch.Record{Offset: int64(i), Key: key, Timestamp: now}
	}
	return recordbatch.Build(padCodec, 0, 0, now, pid, epoch, seq, recs)
}
