package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// copy forwards fetched batches until an error.
func (m *Mirror) copy(ctx context.Context) error {
	f := m.cfg.Fetcher
	ch, gen := f.Assign(m.cfg.TP, m.src)
	// A fetch session leaves a partition out of its responses while nothing
	// changes there, so a source transaction hanging with nothing written
	// behind it brings no chunk: the clock reports it.
	tick := time.NewTicker(max(m.cfg.HangingAfter/4, 10*time.Millisecond))
	defer tick.Stop()
	halt := m.halt
	for {
		var c fetcher.Chunk
		select {
		case <-ctx.Done():
			return m.discard(ctx, ctx.Err())
		case <-halt:
			if m.haltClean.Load() && m.data.open {
				// Halt where no transaction of aborted records is open.
				halt = nil
				continue
			}
			if err := m.drain(ctx); err != nil {
				return err
			}
			return errHalted
		case <-tick.C:
			m.reportHanging()
			continue
		case <-m.headDone():
			if err := m.reapReady(ctx); err != nil {
				return m.discard(ctx, err)
			}
			m.progress()
			continue
		case c = <-ch:
		}
		if c.Gen != gen {
			f.Done(c)
			continue
		}
		err := m.handle(ctx, c)
		m.hold(c)
		if err != nil {
			return m.discard(ctx, err)
		}
		if halt == nil && !m.data.open {
			if err := m.drain(ctx); err != nil {
				return err
			}
			return errHalted
		}
	}
}

// progress puts the acknowledged destination end in the status.
func (m *Mirror) progress() {
	end := m.ackedEnd()
	m.mu.Lock()
	m.st.DestinationOffset = end
	m.st.LastMirrored = min(m.src, end) - 1
	m.st.Lag = max(0, m.st.SourceOffset-end)
	if m.st.Lag == 0 {
		m.caughtUp = time.Now()
	}
	m.mu.Unlock()
}

func (m *Mirror) handle(ctx context.Context, c fetcher.Chunk) error {
	m.mu.Lock()
	if c.HighWatermark >= 0 {
		m.st.SourceOffset, m.st.SourceLastStable, m.st.SourceLogStart = c.HighWatermark, c.LastStable, c.LogStart
		m.st.SourceOffsetAt = time.Now()
	}
	m.mu.Unlock()
	if c.Err != nil {
		if errors.Is(c.Err, kerr.OffsetOutOfRange) {
			// Source retention overtook us, or the source was truncated:
			// resync decides which.
			return errResync
		}
		return fmt.Errorf("fetching from the source: %w", c.Err)
	}
	m.aborted.add(c.Aborted)
	// Its markers are read only if a transaction of aborted records is
	// open at one of its invisible offsets (keepOpen).
	m.chunk, m.markers = c.Records, nil
	defer func() { m.chunk = nil }()
	for rest := c.Records; len(rest) > 0; {
		b, r, err := recordbatch.Next(rest)
		if err != nil {
			return fail(reason.SourceBatchInvalid, "reading a source batch of %s: %v", m.cfg.TP, err)
		}
		if b == nil {
			break
		}
		rest = r
		if err := m.forward(ctx, b); err != nil {
			return err
		}
	}
	if err := m.reapReady(ctx); err != nil {
		return err
	}
	m.progress()
	m.watchHanging(c)
	return nil
}

// markerEnds says where the transaction markers of a chunk end (the offset
// after the marker), for keepOpen; -1 for none (also for no chunk).
type markerEnds struct {
	last int64 // the chunk's last marker
	// absorbing is the last marker that more invisible offsets follow at
	// once: a duplicate of a marker written there is absorbed (B1).
	absorbing int64
}

func chunkMarkers(records []byte) markerEnds {
	e := markerEnds{-1, -1}
	end, afterMarker := int64(-1), false
	for h, err := range recordbatch.All(records) {
		if err != nil {
			break
		}
		if afterMarker && (h.IsControl() || h.BaseOffset > end) {
			e.absorbing = end
		}
		end, afterMarker = h.LastOffset()+1, h.IsControl()
		if afterMarker {
			e.last = end
		}
	}
	return e
}

// watchHanging notes a source transaction that stays open: the mirror
// copies only below the source's last stable offset, so such a transaction
// stalls it, and the user must hear why (reportHanging).
func (m *Mirror) watchHanging(c fetcher.Chunk) {
	stalled := c.LastStable >= 0 && c.LastStable < c.HighWatermark && m.src >= c.LastStable
	m.mu.Lock()
	switch {
	case !stalled:
		m.stalledAt, m.stalledSince = -1, time.Time{}
		if m.st.State == Mirroring && m.st.Reason != "" && m.hangingReason {
			m.setReasonLocked(m.lossReason)
			m.hangingReason = false
		}
	case m.stalledAt != c.LastStable:
		m.stalledAt, m.stalledSince = c.LastStable, time.Now()
	}
	m.mu.Unlock()
	m.reportHanging()
}

// reportHanging gives the reason of a stall that lasted HangingAfter.
func (m *Mirror) reportHanging() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stalledAt < 0 || m.st.State != Mirroring || time.Since(m.stalledSince) <= m.cfg.HangingAfter {
		return
	}
	m.setReasonLocked(reason.New(reason.HangingTransaction, "waiting for a source transaction open at offset %d since %s: mirroring copies only decided records (below the source's last stable offset); if the producer died, abort the transaction on the source (kafka-transactions.sh abort)",
		m.stalledAt, m.stalledSince.UTC().Format(time.RFC3339)))
	m.hangingReason = true
}

// forward mirrors one source batch: the offsets before it that the source
// does not have, then its records at their own offsets, through the writer
// that gives them the source's visibility.
func (m *Mirror) forward(ctx context.Context, b []byte) error {
	h, err := recordbatch.ParseHeader(b)
	if err != nil {
		return fail(reason.SourceBatchInvalid, "reading a source batch of %s: %v", m.cfg.TP, err)
	}
	if h.LastOffset() < m.src {
		return nil // already on the destination
	}
	if h.BaseOffset > m.src {
		// Offsets the source log no longer has (compaction, or markers
		// and aborted data a cleaner removed): invisible there.
		if err := m.invisible(ctx, h.BaseOffset-m.src); err != nil {
			return err
		}
	}
	m.aborted.reach(h.LastOffset())
	if h.IsControl() {
		commit, err := recordbatch.ControlRecord(b)
		if err != nil {
			return fail(reason.SourceBatchInvalid, "reading the transaction marker at source offset %d: %v", h.BaseOffset, err)
		}
		m.aborted.marker(h.ProducerID, h.BaseOffset, commit)
		return m.invisible(ctx, h.LastOffset()+1-m.src)
	}
	aborted := m.aborted.aborted(h)
	parts := []recordbatch.Part{{FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(), Batch: b}}
	if h.NumRecords != h.LastOffsetDelta+1 {
		// A compacted batch with holes: brokers take dense batches only.
		if parts, err = recordbatch.SplitDense(b); err != nil {
			return fail(reason.SourceBatchInvalid, "splitting the compacted source batch at offset %d: %v", h.BaseOffset, err)
		}
	}
	for _, p := range parts {
		if p.LastOffset < m.src {
			continue
		}
		if p.FirstOffset > m.src {
			if err := m.invisible(ctx, p.FirstOffset-m.src); err != nil {
				return err
			}
		}
		if err := m.writeVisible(ctx, p.Batch, aborted); err != nil {
			return err
		}
	}
	if end := h.LastOffset() + 1; end > m.src {
		// Trailing offsets a cleaner emptied.
		return m.invisible(ctx, end-m.src)
	}
	return nil
}

// writeVisible writes a dense batch whose records consumers see at src.
func (m *Mirror) writeVisible(ctx context.Context, b []byte, aborted bool) error {
	h, err := recordbatch.ParseHeader(b)
	if err != nil {
		return fail(reason.SourceBatchInvalid, "reading a source batch: %v", err)
	}
	if m.next > m.src {
		return failRealign(reason.DuplicateMarker, "duplicate transaction marker at destination offset %d where the source has a visible record", m.src)
	}
	if h.BaseOffset < m.src || h.LogAppendTime() {
		// Re-encode: the batch straddles the offset the destination
		// resumes from, or its timestamps are the source's append times.
		nb, err := reencode(b, h, m.src)
		if err != nil {
			return fail(reason.BatchRewriteFailed, "re-encoding the source batch at offset %d: %v", h.BaseOffset, err)
		}
		b = nb
	}
	// Rewritten in place: a retry refetches, so the fetched bytes are never
	// read again and no copy is needed.
	n := int32(h.LastOffset() + 1 - m.src)
	if aborted {
		err = m.writeAborted(ctx, b, n)
	} else {
		err = m.writePlain(ctx, b, n, true)
	}
	if err != nil {
		return err
	}
	m.src = m.next
	return nil
}

// writePlain sends a batch through the plain idempotent writer, pipelined
// (pipeline.go): it is checked, and counted when mirrored (a source batch,
// not padding), when its answer comes.
func (m *Mirror) writePlain(ctx context.Context, b []byte, n int32, mirrored bool) error {
	if err := recordbatch.Rewrite(b, m.cfg.ProducerID, m.cfg.Epoch, m.seq, false); err != nil {
		return fail(reason.BatchRewriteFailed, "rewriting the source batch for offset %d: %v", m.next, err)
	}
	return m.send(ctx, b, n, mirrored)
}

// writeAborted appends a batch of an aborted source transaction through the
// destination transaction, opening it first.
func (m *Mirror) writeAborted(ctx context.Context, b []byte, n int32) error {
	tp := m.cfg.TP
	// Another producer: every plain batch before it must have landed.
	if err := m.drain(ctx); err != nil {
		return err
	}
	if !m.data.open {
		if err := m.cfg.Writer.AddPartition(ctx, m.data.id, m.data.p, tp.Topic, tp.Partition); err != nil {
			return classifyOpen(err, m.data.id, "opening the transaction for aborted source records")
		}
		m.data.open, m.data.since = true, time.Now()
	}
	if err := recordbatch.Rewrite(b, m.data.p.ID, m.data.p.Epoch, m.data.seq, true); err != nil {
		return fail(reason.BatchRewriteFailed, "rewriting the aborted source batch for offset %d: %v", m.next, err)
	}
	off, err := m.cfg.Writer.ProduceTxn(ctx, m.data.id, tp.Topic, tp.Partition, b)
	if err != nil {
		if e := classifyTxn(err, "writing aborted source records"); errors.As(e, new(*failure)) {
			return e
		}
		return m.classifyProduce(err, m.data.p, m.data.seq, m.next)
	}
	if err := m.checkLanded(ctx, off, m.next); err != nil {
		return err
	}
	m.next += int64(n)
	m.data.seq = addSeq(m.data.seq, n)
	m.acked(m.next, len(b), n)
	return nil
}

// checkLanded checks that a batch meant for destination offset want got
// offset off. A batch that landed late finds what took its offsets from
// want, or from the filler markers before it whose place no batch has
// confirmed yet (markedFrom, firstRecord): markers only, a duplicate
// marker; anything else, a foreign write.
func (m *Mirror) checkLanded(ctx context.Context, off, want int64) error {
	switch {
	case off < want:
		return failRealign(reason.DestinationLostRecords, "the destination put the batch for offset %d at offset %d: the destination log was truncated (an unclean leader election or a lost write)",
			want, off)
	case off > want:
		from := want
		if m.marked {
			from = min(from, m.markedFrom)
		}
		// A read that fails counts as a record: a foreign write.
		if at, err := m.firstRecord(ctx, from, off); err == nil && at < 0 {
			return failRealign(reason.DuplicateMarker, "duplicate transaction marker at destination offset %d where the source has a visible record", want)
		}
		return failRealign(reason.ForeignWrite, "the destination put the batch for offset %d at offset %d: something else wrote to this mirror topic (a foreign write)",
			want, off)
	}
	return nil
}

// firstRecord returns the offset of the first batch of records (not a
// transaction marker) the destination holds in [from, to), or -1 when it
// holds markers only there: the coordinator re-sent one after the agent
// looked (review B1), or a dead agent's filler marker landed late.
func (m *Mirror) firstRecord(ctx context.Context, from, to int64) (int64, error) {
	for at := from; at < to; {
		c, err := fetcher.ReadAt(ctx, m.cfg.Writer.Client(), m.cfg.Writer.Meta(), m.cfg.TP, at, 1<<20)
		if err != nil {
			return -1, err
		}
		next := at
		for h, err := range recordbatch.All(c.Records) {
			if err != nil {
				return -1, err
			}
			if h.LastOffset() >= at && h.BaseOffset < to && !h.IsControl() {
				return h.BaseOffset, nil
			}
			next = h.LastOffset() + 1
		}
		if next <= at {
			return -1, fmt.Errorf("no batch at destination offset %d below %d", at, to)
		}
		at = next
	}
	return -1, nil
}

// classifyProduce turns a produce error of a batch for destination offset
// at, sent as producer p with sequence seq, into a retry (the resume point
// is re-read from the destination) or a failure. A sequence or producer
// error is retried a few times only (seqError, Run).
func (m *Mirror) classifyProduce(err error, p writer.Producer, seq int32, at int64) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return err // network and client errors: retry
	}
	switch {
	case errors.Is(err, kerr.OutOfOrderSequenceNumber), errors.Is(err, kerr.DuplicateSequenceNumber),
		errors.Is(err, kerr.UnknownProducerID), errors.Is(err, kerr.InvalidProducerEpoch):
		return &seqError{err: err, code: ke.Message, offset: at, p: p, seq: seq}
	case ke.Retriable:
		return err
	case errors.Is(err, kerr.InvalidRecord) && m.cfg.KeyedPad:
		return fail(reason.KeylessRecordRefused, "the destination refused the batch for offset %d: %v; a compacted destination topic refuses records without a key, which the source still holds (written before it was compacted); mirror the topic with cleanup.policy=delete until that range is copied",
			at, err)
	}
	return fail(reason.DestinationRefused, "the destination refused the batch for offset %d: %v", at, err)
}

// reencode rebuilds a batch from its records at offsets ≥ from, with the
// same codec, giving LogAppendTime batches their append time as create time.
func reencode(b []byte, h recordbatch.Header, from int64) ([]byte, error) {
	if h.LogAppendTime() {
		nb, err := recordbatch.ReencodeLogAppendTime(b)
		if err != nil {
			return nil, err
		}
		if h.BaseOffset >= from {
			return nb, nil
		}
		b = nb
		if h, err = recordbatch.ParseHeader(b); err != nil {
			return nil, err
		}
	}
	recs, err := recordbatch.Records(b)
	if err != nil {
		return nil, err
	}
	kept := recs[:0]
	for _, r := range recs {
		if r.Offset >= from {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("no record at or after offset %d", from)
	}
	return recordbatch.Build(h.Codec(), h.Attributes&recordbatch.AttrTransactional, kept[0].Offset, kept[0].Timestamp, h.ProducerID, h.ProducerEpoch, h.BaseSequence, kept)
}
