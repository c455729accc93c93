package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// txn is one destination transactional id of the partition.
type txn struct {
	id   string
	p    writer.Producer
	open bool  // the partition is in the id's ongoing transaction
	seq  int32 // next sequence of its data batches in this partition
	// since is when this agent added the partition to the transaction
	// (zero for one it adopted).
	since time.Time
}

// settleTxns makes sure no marker of the agent's transactional ids is still
// on its way before the destination end is read (review B4): the filler id
// is fenced with InitProducerId, which also aborts a filler transaction a
// dead agent left open (its marker lands now, at the gap that agent was
// filling); the data id's transaction is adopted when ongoing, or settled
// and fenced.
func (m *Mirror) settleTxns(ctx context.Context) error {
	w := m.cfg.Writer
	if m.cfg.Fillers == FillCoordinator {
		p, err := w.InitTxn(ctx, m.fill.id, m.cfg.TxnTimeout)
		if err != nil {
			return err
		}
		// A new producer id after epoch exhaustion or the id's expiry:
		// recorded before it writes, so that its markers stay the
		// agent's when the id changes again.
		if err := m.own(ctx, p.ID); err != nil {
			return err
		}
		m.fill.p = p
		if _, err := w.WaitSettled(ctx, m.fill.id); err != nil {
			return err
		}
	}
	st, err := w.DescribeTxn(ctx, m.data.id)
	if err != nil {
		return err
	}
	if !st.Settled() && !st.Open() {
		if st, err = w.WaitSettled(ctx, m.data.id); err != nil {
			return err
		}
	}
	if st.State != "" {
		// The producer id the coordinator holds for the agent's own
		// transactional id: recorded already unless an agent from
		// before OwnedProducers wrote with it.
		if err := m.own(ctx, st.Producer.ID); err != nil {
			return err
		}
	}
	if st.Open() {
		// Adopt it: nothing is bound to a connection, and its batches
		// carry deterministic sequences, so a late request of a dead
		// agent is deduplicated (review §1.3).
		m.data.p, m.data.open, m.data.since = st.Producer, true, time.Time{}
		return nil
	}
	p, err := w.InitTxn(ctx, m.data.id, m.cfg.TxnTimeout)
	if err != nil {
		return err
	}
	if err := m.own(ctx, p.ID); err != nil {
		return err
	}
	m.data.p, m.data.open, m.data.seq = p, false, 0
	return nil
}

// closeDataTxn aborts the destination transaction of aborted source records
// when the partition stops with it open: an open transaction would hold the
// destination's last stable offset, and so every read_committed consumer of
// the partition, until its timeout.
func (m *Mirror) closeDataTxn(ctx context.Context) {
	if err := m.closeData(ctx); err != nil {
		m.log.Warn("could not abort the destination transaction of a failed partition", "transactional_id", m.data.id, "error", err)
	}
}

// closeData aborts the transaction of aborted source records when it is
// open, and waits until no marker of it is on its way. The marker of such
// an abort lands after everything mirrored and stands for no source offset
// (the source's may be a record), so the destination end before it is kept
// as closedAt: Finish reports the last mirrored offset from there. A marker
// already on its way is the partition's own, at an invisible source offset.
func (m *Mirror) closeData(ctx context.Context) error {
	tp := m.cfg.TP
	err := m.abortOngoing(ctx, m.data.id, func() error {
		b, err := m.cfg.Writer.Bounds(ctx, tp.Topic, tp.Partition)
		if err != nil {
			return fmt.Errorf("reading the destination end: %w", err)
		}
		m.closedAt = b.HighWatermark
		if m.cfg.OnClose != nil {
			m.cfg.OnClose(m.closedAt)
		}
		return nil
	})
	if err == nil {
		m.data.open = false
	}
	return err
}

// invisible gives the source offsets [src, src+n) invisible destination
// offsets. Offsets the destination already holds beyond src (extra markers
// absorbed earlier) count first; then an open transaction of aborted records
// is aborted, its marker taking the next offset, unless it is kept open
// (keepOpen); fillers take the rest.
// With n == 0 it only closes an open transaction, whose marker then takes
// an offset the caller pads over.
func (m *Mirror) invisible(ctx context.Context, n int64) error {
	end := m.src + n
	abort := m.data.open && !m.keepOpen(end)
	// The coordinator writes its markers through connections of its own:
	// every plain batch before them must have landed. FillMarkers fillers
	// go behind the plain batches instead (sendMarkers).
	if abort || m.cfg.Fillers == FillCoordinator {
		if err := m.drain(ctx); err != nil {
			return err
		}
	}
	for {
		m.src = max(m.src, min(m.next, end))
		if m.src >= end && (n > 0 || !m.data.open) {
			return nil
		}
		// Invisible source offsets left after the one the next marker takes.
		spare := end - m.src - 1
		if abort && m.data.open {
			if err := m.cfg.Writer.EndTxn(ctx, m.data.id, m.data.p, false); err != nil {
				return classifyTxn(err, "aborting the transaction of aborted source records")
			}
			m.data.open = false
			if err := m.afterMarker(ctx, m.data.id, spare); err != nil {
				return err
			}
		} else if err := m.filler(ctx, end-m.src); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// keepOpen says whether the open transaction of aborted source records
// stays open over the invisible offsets up to end, which then get filler
// markers (FillMarkers only). It ends at a later marker of the chunk: the
// last one that more invisible offsets follow at once, where a duplicate of
// the coordinator's marker is absorbed (B1), else the chunk's last; or once
// open AbortSpan (a quarter of its timeout at most), as the destination's
// last stable offset stays at its first batch meanwhile. One destination
// transaction then covers the chunk's aborted source transactions
// (consumers skip a producer's batches up to its abort marker, whatever
// lies between), and the coordinator's work is paid once, not once per
// source transaction.
func (m *Mirror) keepOpen(end int64) bool {
	if end <= m.src || m.cfg.Fillers != FillMarkers ||
		time.Since(m.data.since) >= min(m.cfg.AbortSpan, m.cfg.TxnTimeout/4) {
		return false
	}
	if m.markers == nil {
		e := chunkMarkers(m.chunk)
		m.markers = &e
	}
	if m.markers.absorbing >= end {
		return end < m.markers.absorbing
	}
	return end < m.markers.last
}

// filler writes filler markers for up to n invisible offsets.
func (m *Mirror) filler(ctx context.Context, n int64) error {
	tp := m.cfg.TP
	w := m.cfg.Writer
	if m.cfg.Fillers == FillMarkers {
		// Nothing re-sends these markers, as the coordinator does its
		// own (B1). Another write that came in between (a foreign one,
		// or a late marker of a dead agent) shows in the offset of the
		// next batch, checked as every batch's is, so no batch lands
		// shifted unnoticed; without a next batch, in the end the next
		// resync reads.
		return m.sendMarkers(ctx, int32(min(n, 1000)))
	}
	if err := w.AddPartition(ctx, m.fill.id, m.fill.p, tp.Topic, tp.Partition); err != nil {
		return classifyOpen(err, m.fill.id, "opening a filler transaction")
	}
	if err := w.EndTxn(ctx, m.fill.id, m.fill.p, false); err != nil {
		return classifyTxn(err, "aborting a filler transaction")
	}
	return m.afterMarker(ctx, m.fill.id, n-1)
}

// afterMarker waits until the coordinator has written every marker of txnID
// (EndTxn returns after its decision only) and checks that exactly one
// offset was taken; spare is how many more invisible offsets the source has
// right after it.
func (m *Mirror) afterMarker(ctx context.Context, txnID string, spare int64) error {
	st, err := m.cfg.Writer.WaitSettled(ctx, txnID)
	if err != nil {
		return err
	}
	if st.State == "CompleteCommit" {
		return fail(reason.TransactionalIDInUse, "transaction %q was committed, not aborted: another process uses the agent's transactional ids", txnID)
	}
	return m.checkEnd(ctx, m.next+1, spare)
}

// checkEnd compares the destination end with want after markers written
// from m.next: the coordinator re-sends markers after a lost response or its
// own failover, and a duplicate is one more invisible offset (review B1).
// Extra offsets that are markers are absorbed where the source has
// invisible offsets right after (spare of them); anything else fails the
// partition. Every offset from m.next is read, not only those after want: a
// record another producer wrote just before the markers takes m.next and
// pushes them up, and it must not pass for a duplicate.
func (m *Mirror) checkEnd(ctx context.Context, want, spare int64) error {
	tp := m.cfg.TP
	b, err := m.cfg.Writer.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return err
	}
	switch {
	case b.HighWatermark == want:
		m.next = want
		return nil
	case b.HighWatermark < want:
		return fmt.Errorf("destination end %d is below %d after a marker: retrying from the destination end", b.HighWatermark, want)
	}
	extra := b.HighWatermark - want
	// Look at what took the offsets from the first marker on.
	if at, err := m.firstRecord(ctx, m.next, b.HighWatermark); err != nil {
		return fmt.Errorf("reading the destination after a marker: %w", err)
	} else if at >= 0 {
		return fail(reason.ForeignWrite, "the destination has a record at offset %d that the agent did not write (a foreign write to a mirror topic)", at)
	}
	if extra > spare {
		// The source offsets right after these are not known yet to be
		// invisible: the next source batch decides. A visible record
		// there fails the partition (writeVisible); more markers absorb
		// the extra offsets; a resync in between checks them against
		// the source (checkTail).
		m.log.Warn("duplicate transaction marker beyond the invisible offsets known so far", "offset", want, "count", extra)
	} else {
		m.log.Info("absorbed duplicate transaction markers as fillers", "offset", want, "count", extra)
	}
	m.next = b.HighWatermark
	return nil
}

// tailWindow is how many destination offsets below the end checkTail
// compares with the source.
const tailWindow = 1024

// checkTail compares the destination's last markers with the source before
// anything is written after a restart or a retry: every destination offset
// that holds a marker must be invisible on the source too. An extra marker
// (a duplicate the coordinator appended after the agent looked, or one
// written just before a crash) at an offset where the source has a record
// would otherwise shift every offset after it.
func (m *Mirror) checkTail(ctx context.Context, dst, src leaders.Bounds) error {
	tp := m.cfg.TP
	var markers []int64
	from := max(dst.LogStart, src.LogStart, dst.HighWatermark-tailWindow)
	err := m.cfg.Writer.ScanTail(ctx, tp.Topic, tp.Partition, from, dst.HighWatermark, func(h recordbatch.Header) bool {
		if h.IsControl() && h.BaseOffset >= from {
			markers = append(markers, h.BaseOffset)
		}
		return h.BaseOffset <= from
	})
	if err != nil || len(markers) == 0 {
		return err
	}
	// markers is in descending order; read the source once from the lowest.
	lowest := markers[len(markers)-1]
	visible := map[int64]bool{}
	for at := lowest; at <= markers[0]; {
		c, err := m.cfg.Source.ReadAt(ctx, tp, at, 8<<20)
		if err != nil {
			return fmt.Errorf("comparing the destination tail with the source: %w", err)
		}
		next := at
		for h, err := range recordbatch.All(c.Records) {
			if err != nil {
				return fmt.Errorf("comparing the destination tail with the source: %w", err)
			}
			if !h.IsControl() && h.NumRecords > 0 {
				for o := max(h.BaseOffset, lowest); o <= h.LastOffset() && o <= markers[0]; o++ {
					visible[o] = true
				}
				if h.NumRecords != h.LastOffsetDelta+1 {
					// Holes inside a compacted batch are invisible: look
					// at the records themselves.
					recs, err := recordbatch.Records(h.Raw)
					if err != nil {
						return err
					}
					for o := h.BaseOffset; o <= h.LastOffset(); o++ {
						delete(visible, o)
					}
					for _, r := range recs {
						visible[r.Offset] = true
					}
				}
			}
			next = h.LastOffset() + 1
		}
		if next <= at {
			break
		}
		at = next
	}
	for _, o := range markers {
		if visible[o] {
			return failRealign(reason.DuplicateMarker, "duplicate transaction marker at destination offset %d where the source has a visible record", o)
		}
	}
	return nil
}

// classifyOpen is classifyTxn for AddPartitionsToTxn opening a new
// transaction of txnID. INVALID_PRODUCER_ID_MAPPING there means that the
// destination no longer maps txnID to the producer id the agent holds: it
// forgot the id, idle for transactional.id.expiration.ms while the source
// partition had nothing for it to write (or gave it a new producer id).
// Nothing was written, so it is retried: the resync initializes the id
// again (settleTxns), records its new producer id and goes on.
func classifyOpen(err error, txnID, doing string) error {
	if errors.Is(err, kerr.InvalidProducerIDMapping) {
		return fmt.Errorf("%s: the destination no longer maps transactional id %q to the agent's producer id (it forgets an idle one after transactional.id.expiration.ms); initializing it again: %w",
			doing, txnID, err)
	}
	return classifyTxn(err, doing)
}

// classifyTxn turns a transactional error into a retry or a failure.
func classifyTxn(err error, doing string) error {
	switch {
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch),
		errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.InvalidTxnState):
		return fail(reason.TransactionFenced, "%s: %v: the destination transaction was aborted (transaction timeout) or another agent took over this partition", doing, err)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fail(reason.TransactionalIDUnauthorized, "%s: %v: the agent needs WRITE and DESCRIBE on transactional ids %q on the destination", doing, err, "kmirror.*")
	}
	return fmt.Errorf("%s: %w", doing, err)
}
