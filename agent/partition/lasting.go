package partition

import (
	"context"
	"errors"
	"fmt"

	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// lastingErrors is how many sequence or producer errors in a row at one
// destination offset fail the partition. Each retry re-reads the destination
// end and recovers the sequences from the log, so a passing cause (a dead
// agent's late request, a batch the leader appended above the high
// watermark, source compaction that moved batch boundaries) heals within a
// few; with Run's backoff the last of these retries comes about 25 seconds
// after the first error, after the destination's replica.lag.time.max.ms
// (30s by default) could drop a follower holding back the high watermark.
const lastingErrors = 10

// seqError is a produce refused for the writer's producer state:
// OUT_OF_ORDER_SEQUENCE_NUMBER, DUPLICATE_SEQUENCE_NUMBER,
// UNKNOWN_PRODUCER_ID or INVALID_PRODUCER_EPOCH. Run retries it, but only
// lastingErrors times at the same offset.
type seqError struct {
	err    error
	code   string // the Kafka error name
	offset int64  // the destination offset the batch was for
	p      writer.Producer
	seq    int32 // the batch's base sequence as sent
}

func (e *seqError) Error() string {
	return fmt.Sprintf("the destination refused the batch for offset %d (producer id %d, epoch %d, sequence %d): %v",
		e.offset, e.p.ID, e.p.Epoch, e.seq, e.err)
}

func (e *seqError) Unwrap() error { return e.err }

// lastingRetry counts the sequence or producer errors in a row at one
// destination offset. Owned by Run's goroutine.
type lastingRetry struct {
	offset int64
	n      int    // errors at offset so far; 0: none
	reason string // the MIRRORING reason while retrying them
}

// note counts e and says whether it is the lastingErrors-th in a row at
// its offset. Errors at another offset start the count again; so does
// progress past the offset (clear). Errors of another kind in between do
// not (a sequence error alternating with a network error is as lasting), nor
// do other kinds among these four at the same offset.
func (l *lastingRetry) note(e *seqError) (exhausted bool) {
	if l.n == 0 || l.offset != e.offset {
		l.offset, l.n = e.offset, 0
	}
	l.n++
	l.reason = fmt.Sprintf("retrying the batch for destination offset %d, which the destination refused with %s (%d of %d tries; producer id %d, epoch %d, sequence %d): each try re-reads the destination end and the sequence",
		e.offset, e.code, l.n, lastingErrors, e.p.ID, e.p.Epoch, e.seq)
	return l.n >= lastingErrors
}

// clear ends the count: the offset was written.
func (l *lastingRetry) clear() { *l = lastingRetry{} }

// status is the reason while retrying.
func (l *lastingRetry) status() reason.Error {
	return reason.Error{Code: reason.SequenceRetrying, Message: l.reason}
}

// healed is called when a write lands past the offset of sequence errors
// being retried: the count starts again and the reason no longer says so.
func (m *Mirror) healed() {
	retrying := m.lasting.status()
	m.log.Info("the destination took the batch it refused before", "offset", m.lasting.offset, "errors", m.lasting.n)
	m.lasting.clear()
	m.mu.Lock()
	changed := m.reasonLocked() == retrying && !m.stopping
	if changed {
		m.setReasonLocked(m.lossReason)
	}
	st := m.st
	m.mu.Unlock()
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(st)
	}
}

// noteRetrying puts r in the status while Run retries, keeping the state
// (MIRRORING, or PREPARING while aligning).
func (m *Mirror) noteRetrying(r reason.Error) {
	m.mu.Lock()
	changed := !m.stopping && m.reasonLocked() != r && (m.st.State == Mirroring || m.st.State == Preparing)
	if changed {
		m.setReasonLocked(r)
	}
	st := m.st
	m.mu.Unlock()
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(st)
	}
}

// lastingFailure is the failure after lastingErrors sequence or producer
// errors in a row at e's offset.
func (m *Mirror) lastingFailure(ctx context.Context, e *seqError) error {
	return fail(reason.SequenceLasting, "the destination refused the batch for offset %d with %s %d times in a row, each time after re-reading the destination end and the sequence: the agent sent producer id %d, epoch %d, sequence %d, and %s; find what else writes to the destination topic or changed its log (another process using the agent's producer id, records deleted by hand, producer.id.expiration.ms shorter than the age of the records mirrored), then recover the partition; if the destination topic was written by another producer, it must be recreated (kmirror recover --recreate)",
		e.offset, e.code, lastingErrors, e.p.ID, e.p.Epoch, e.seq, m.ownTail(ctx, e.p.ID))
}

// ownTail says what the destination's tail holds of producer id pid: its
// last data batch in the last tailWindow offsets, which the broker's
// sequence check compares the next batch with.
func (m *Mirror) ownTail(ctx context.Context, pid int64) string {
	tp := m.cfg.TP
	if m.cfg.Writer == nil {
		return describeTail(-1, recordbatch.Header{}, false, errors.New("no destination writer"))
	}
	b, err := m.cfg.Writer.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return describeTail(-1, recordbatch.Header{}, false, err)
	}
	var (
		last  recordbatch.Header
		found bool
	)
	from := max(b.LogStart, b.HighWatermark-tailWindow)
	err = m.cfg.Writer.ScanTail(ctx, tp.Topic, tp.Partition, from, b.HighWatermark, func(h recordbatch.Header) bool {
		if h.ProducerID == pid && !h.IsControl() {
			last, found = h, true
		}
		return found
	})
	return describeTail(b.HighWatermark, last, found, err)
}

// describeTail words what ownTail found, for a failure reason.
func describeTail(end int64, last recordbatch.Header, found bool, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("the destination tail could not be read (%v)", err)
	case !found:
		return fmt.Sprintf("the destination (log end %d) has no batch of that producer id in its last %d offsets", end, tailWindow)
	}
	return fmt.Sprintf("the destination's last batch of that producer id (log end %d) holds offsets %d to %d with epoch %d and sequences %d to %d (%d records left), so the sequence after it is %d",
		end, last.BaseOffset, last.LastOffset(), last.ProducerEpoch, last.BaseSequence, addSeq(last.BaseSequence, last.LastOffsetDelta), last.NumRecords, nextSeq(last))
}
