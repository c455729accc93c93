// Package partition runs one mirror partition: it rebuilds its position from
// the destination (the destination log end is the resume point), aligns the
// destination's log start with the source's, and copies every source offset
// to the same destination offset with the same visibility:
//
//   - committed and non-transactional batches are forwarded one by one, still
//     compressed, through the partition's idempotent writer with
//     deterministic sequences (committed transactional data becomes plain
//     data: consumers at both isolation levels see it, as on the source);
//   - batches of aborted source transactions go through a destination
//     transaction the agent owns, aborted at an invisible offset (the next
//     one, or with FillMarkers a later one of the same fetch);
//   - offsets no consumer sees (transaction markers, compaction holes) get an
//     invisible destination offset: that abort marker, or a filler marker.
package partition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// Alignment is the writer's sequence at a destination offset where the log
// was cut by DeleteRecords: with nothing left below, the log cannot tell the
// next sequence, so it is kept in the state topic.
type Alignment struct {
	Offset  int64 `json:"offset"`
	NextSeq int32 `json:"next_seq"`
	// Lost counts source records that retention removed before they were
	// mirrored (0 for the alignment of a new mirror topic).
	Lost int64 `json:"lost,omitempty"`
}

// Checkpoints persists what the log cannot tell (see Alignment).
type Checkpoints interface {
	Alignment(tp fetcher.TP) (Alignment, bool)
	SaveAlignment(ctx context.Context, tp fetcher.TP, a Alignment) error
}

// Source is what a partition needs of the source cluster.
type Source interface {
	Bounds(ctx context.Context, topic string, partition int32) (leaders.Bounds, error)
	// ReadAt reads raw batches (uncommitted, markers included) from offset.
	ReadAt(ctx context.Context, tp fetcher.TP, offset int64, maxBytes int32) (fetcher.Chunk, error)
}

// FillerMethod is how invisible destination offsets are written.
type FillerMethod string

const (
	// FillCoordinator writes each filler as an empty transaction aborted
	// through the destination's transaction coordinator (AddPartitionsToTxn
	// v3 + EndTxn v4). Restart-safe: InitProducerId fences a dead agent's
	// fillers.
	FillCoordinator FillerMethod = "coordinator"
	// FillMarkers writes fillers with WriteTxnMarkers sent by the agent for
	// a producer id no broker allocates: many per request, no coordinator
	// round trips, but a dead agent's late request cannot be fenced. It
	// needs ALTER (CLUSTER_ACTION before 3.8) on the destination cluster.
	FillMarkers FillerMethod = "markers"
)

// Config is what one partition mirror runs with.
type Config struct {
	Mirror     string
	TP         fetcher.TP
	ProducerID int64
	Epoch      int16
	// KeyedPad: the destination is compacted, so pad records need a key
	// and keyless source records cannot be written.
	KeyedPad    bool
	Fetcher     *fetcher.Fetcher
	Source      Source
	Writer      *writer.Writer
	Checkpoints Checkpoints
	// Producers keeps the producer ids the partition's writers have had
	// (OwnedProducers); nil keeps them in memory only.
	Producers OwnedProducers
	// TxnIDPrefix names the partition's destination transactional ids
	// (PREFIX.abort for aborted source data, PREFIX.fill for fillers);
	// default kmirror.MIRROR.TOPIC.PARTITION.
	TxnIDPrefix string
	// TxnTimeout is the timeout of the partition's destination
	// transactional ids (the transaction that holds aborted source
	// records, and fillers); it must not exceed the destination's
	// transaction.max.timeout.ms, and the coordinator sets it to exactly
	// that, as the preflight read it (topics.Check). Zero means 15
	// minutes, Kafka's default for the setting.
	TxnTimeout time.Duration
	Fillers    FillerMethod
	// OnChange is called after every state or reason change (for
	// persistence); it must not block for long.
	OnChange func(Status)
	// OnClose is called, before the abort is asked, with the destination
	// end before the marker of a transaction of aborted records that the
	// partition closes as it stops or fails (closedAt), for persistence:
	// an agent that restarts before the stop is recorded must not count
	// that marker as mirrored. ClosedAt gives the figure back (0: none).
	OnClose  func(closedAt int64)
	ClosedAt int64
	Logger   hclog.Logger
	// PadBatch is the number of records per padding batch (default 65536:
	// zstd compresses larger batches better, to about 0.54 bytes an offset
	// at 65536 against 0.82 at 20000).
	PadBatch int
	// Recovering says the partition runs after a recover: a failure that
	// asks for a recover again says instead that the destination cannot
	// be re-aligned.
	Recovering bool
	// Base is where a failback took the destination over: the offsets
	// below it were in the destination log before this mirror wrote it
	// (the old primary's records, which the source has at the same
	// offsets), so batches of other producers there are not foreign
	// writes. 0 for an ordinary mirror topic, which the agent created.
	Base int64
	// HangingAfter is how long a source transaction may hold the source's
	// last stable offset, with the mirror caught up to it, before describe
	// says so (default 30s).
	HangingAfter time.Duration
	// AbortSpan bounds how long, with FillMarkers, the destination
	// transaction of aborted source records stays open over markers it
	// could end at (keepOpen; default 1s).
	AbortSpan time.Duration
}

// Status is a partition's figures as callers see them.
type Status = mirrorapi.Partition

// markerPID is the producer id of FillMarkers fillers: brokers allocate
// producer ids from 0 upwards in blocks, so one near 2^62 is never theirs.
const markerPID = int64(1) << 62

// Mirror is one running mirror partition.
type Mirror struct {
	cfg Config
	log hclog.Logger

	// Owned by Run's goroutine.
	next int64 // the destination log end: the offset the next write gets
	src  int64 // the next source offset to mirror; below next only while absorbing extra markers
	seq  int32 // next sequence of the plain writer's producer id
	data txn   // the destination transaction for aborted source records
	fill txn   // the filler transactional id (FillCoordinator)
	// chunk is the records being mirrored, nil between chunks; markers,
	// where its markers end, once keepOpen has read them.
	chunk   []byte
	markers *markerEnds
	// aborted tracks the source's aborted transactions (see visibility.go).
	aborted abortTracker
	// lossReason says why LostRecords is not zero, kept as the reason of
	// the MIRRORING state: a loss is reported, never silent.
	lossReason reason.Error
	// seenEnd is the highest destination end this mirror has seen (read
	// or reached by its own acknowledged writes), in memory only: an end
	// below it at resync means the destination lost records.
	seenEnd int64
	// owned are the producer ids the agent has written this destination
	// partition with (OwnedProducers), the persisted ones merged at each
	// resync.
	owned map[int64]bool
	// lasting counts sequence or producer errors in a row at one offset
	// (lasting.go).
	lasting lastingRetry
	// The plain writer's batches in flight, oldest first, and the fetched
	// chunks they came from (pipeline.go).
	flights  []flight
	flightID uint64 // id of the last flight sent
	reaped   uint64 // id of the last flight answered
	held     []heldChunk
	// marked: filler markers were answered since the last batch that
	// landed where it should, the first of them for markedFrom. A batch
	// that lands late looks there for what took its offsets (checkLanded).
	marked     bool
	markedFrom int64

	// halt asks Run to return at the next batch boundary (Halt).
	halt      chan struct{}
	haltOnce  sync.Once
	haltClean atomic.Bool
	// stopping, while set, keeps the reported state STOPPING with
	// stopReason whatever Run reaches (a promote waiting for lag 0).
	stopping   bool
	stopReason reason.Error

	mu       sync.Mutex
	st       Status
	caughtUp time.Time
	// A source transaction holding the source's last stable offset at
	// stalledAt since stalledSince (-1: none); hangingReason says the
	// status reason is about it.
	stalledAt     int64
	stalledSince  time.Time
	hangingReason bool
	// closedAt is the destination end before the marker of a transaction
	// of aborted records the agent closed when the partition stopped or
	// failed (closeData); -1: none.
	closedAt int64
}

// New returns a partition mirror; Run starts it.
func New(cfg Config) *Mirror {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.PadBatch <= 0 {
		cfg.PadBatch = 65536
	}
	if cfg.TxnIDPrefix == "" {
		cfg.TxnIDPrefix = fmt.Sprintf("kmirror.%s.%s.%d", cfg.Mirror, cfg.TP.Topic, cfg.TP.Partition)
	}
	if cfg.TxnTimeout <= 0 {
		cfg.TxnTimeout = 15 * time.Minute
	}
	if cfg.Fillers == "" {
		cfg.Fillers = FillCoordinator
	}
	if cfg.HangingAfter <= 0 {
		cfg.HangingAfter = 30 * time.Second
	}
	if cfg.AbortSpan <= 0 {
		cfg.AbortSpan = time.Second
	}
	m := &Mirror{cfg: cfg, log: cfg.Logger.With("topic", cfg.TP.Topic, "partition", cfg.TP.Partition)}
	m.data.id = cfg.TxnIDPrefix + ".abort"
	m.fill.id = cfg.TxnIDPrefix + ".fill"
	m.st = Status{Mirror: cfg.Mirror, Topic: cfg.TP.Topic, Partition: cfg.TP.Partition, State: Initializing, LastMirrored: -1}
	m.caughtUp = time.Now()
	m.stalledAt, m.closedAt = -1, -1
	if cfg.ClosedAt > 0 {
		m.closedAt = cfg.ClosedAt
	}
	m.halt = make(chan struct{})
	return m
}

// Halt asks Run to return at the next batch boundary: between two fetched
// chunks, or during a retry's backoff. With clean set (a pause), Run
// mirrors on until no destination transaction of aborted source records is
// open, so that none holds the destination's last stable offset, or times
// out, while the partition is paused. Nothing is written after Run returns;
// a caller that cannot wait cancels Run's context instead, which is as safe
// as a crash (the next run rebuilds its position from the destination).
// Halt may be called more than once; the first call decides clean.
func (m *Mirror) Halt(clean bool) {
	m.haltOnce.Do(func() {
		m.haltClean.Store(clean)
		close(m.halt)
	})
}

// SourceBounds reads the source partition's log start, last stable offset
// and high watermark.
func (m *Mirror) SourceBounds(ctx context.Context) (leaders.Bounds, error) {
	if m.cfg.Source == nil {
		return leaders.Bounds{}, errors.New("the source is not connected")
	}
	return m.cfg.Source.Bounds(ctx, m.cfg.TP.Topic, m.cfg.TP.Partition)
}

// DestinationBounds reads the destination partition's bounds.
func (m *Mirror) DestinationBounds(ctx context.Context) (leaders.Bounds, error) {
	if m.cfg.Writer == nil {
		return leaders.Bounds{}, errors.New("no destination writer")
	}
	return m.cfg.Writer.Bounds(ctx, m.cfg.TP.Topic, m.cfg.TP.Partition)
}

// errHalted ends Run after Halt.
var errHalted = errors.New("halted")

// SetStopping reports the partition as STOPPING with r while it may still
// run (a promote waiting for lag 0), whatever state Run reaches, until
// ClearStopping. OnChange hears of the state change, not of later changes
// of the reason alone (a promote's progress, updated often).
func (m *Mirror) SetStopping(r reason.Error) {
	m.mu.Lock()
	m.stopping, m.stopReason = true, r
	changed := m.st.State != Stopping
	m.st.State = Stopping
	m.setReasonLocked(r)
	st := m.st
	m.mu.Unlock()
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(st)
	}
}

// ClearStopping ends SetStopping: the partition is MIRRORING again, with
// r.
func (m *Mirror) ClearStopping(r reason.Error) {
	m.mu.Lock()
	m.stopping = false
	changed := m.st.State == Stopping
	if changed {
		m.st.State = Mirroring
		m.setReasonLocked(r)
	}
	st := m.st
	m.mu.Unlock()
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(st)
	}
}

// RestoreOffsets sets the last mirrored offset read from the state topic on
// a mirror that will not run (PAUSED, STOPPED).
func (m *Mirror) RestoreOffsets(lastMirrored int64) {
	m.mu.Lock()
	m.st.LastMirrored = lastMirrored
	m.st.DestinationOffset = lastMirrored + 1
	m.mu.Unlock()
}

// Finish ends the destination side of a partition whose Run has returned
// (or never ran), for STOPPED: it aborts the agent's destination
// transactions still open (at a stop, an open transaction of aborted
// source records belongs to a source transaction that aborted, so aborting
// keeps its fate; an open filler transaction hides nothing, and its marker
// takes the invisible offset it was opened for), waits until their markers
// are written, and reads the destination end. The last mirrored offset is
// the end minus one, or the offset before the marker of a transaction of
// aborted records it had to close (closeData). It needs the destination
// only, so it completes with the source unreachable. It sets nothing; the
// caller records the state.
func (m *Mirror) Finish(ctx context.Context) (lastMirrored int64, err error) {
	if m.cfg.Writer == nil {
		return -1, errors.New("no destination writer")
	}
	if m.cfg.Fillers == FillCoordinator {
		if err := m.abortOngoing(ctx, m.fill.id, nil); err != nil {
			return -1, err
		}
	}
	if err := m.closeData(ctx); err != nil {
		return -1, err
	}
	tp := m.cfg.TP
	b, err := m.cfg.Writer.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return -1, fmt.Errorf("reading the destination end: %w", err)
	}
	last := b.HighWatermark - 1
	if m.closedAt >= 0 {
		last = m.closedAt - 1
	}
	m.mu.Lock()
	m.st.DestinationOffset = b.HighWatermark
	m.st.LastMirrored = last
	m.st.Lag = max(0, m.st.SourceOffset-b.HighWatermark)
	m.mu.Unlock()
	return last, nil
}

// abortOngoing aborts transactional id txnID's transaction when it is
// ongoing, and waits until no marker of it is on its way. before, when not
// nil, runs just before the abort is asked (and may refuse it).
func (m *Mirror) abortOngoing(ctx context.Context, txnID string, before func() error) error {
	w := m.cfg.Writer
	st, err := w.DescribeTxn(ctx, txnID)
	if err != nil {
		return fmt.Errorf("describing destination transaction %q: %w", txnID, err)
	}
	if st.Settled() {
		return nil
	}
	if st.Open() {
		if before != nil {
			if err := before(); err != nil {
				return err
			}
		}
		if err := w.EndTxn(ctx, txnID, st.Producer, false); err != nil {
			return fmt.Errorf("aborting destination transaction %q: %w", txnID, err)
		}
	}
	if _, err := w.WaitSettled(ctx, txnID); err != nil {
		return fmt.Errorf("waiting for the abort of destination transaction %q: %w", txnID, err)
	}
	return nil
}

// Status returns the partition's current figures. Lag is computed here,
// from the source and destination figures of one snapshot, whatever the
// state: a paused, failed or stopped partition whose source moved on has
// lag, and one whose source end is not known says so (LagUnknown).
func (m *Mirror) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.st
	st.Lag, st.LagMillis = mirrorapi.LagUnknown, 0
	if !st.SourceOffsetAt.IsZero() {
		st.Lag = max(0, st.SourceOffset-st.DestinationOffset)
	}
	if st.Lag > 0 {
		st.LagMillis = time.Since(m.caughtUp).Milliseconds()
	}
	return st
}

// SetSourceBounds records source figures read at asOf outside the fetch
// path (ListOffsets, for a partition not being fetched: paused, failed,
// stopped, throttled, or not started). Figures older than those the
// partition has are ignored.
func (m *Mirror) SetSourceBounds(b leaders.Bounds, asOf time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.st.SourceOffsetAt.Before(asOf) {
		return
	}
	m.st.SourceOffset, m.st.SourceLastStable, m.st.SourceLogStart = b.HighWatermark, b.LastStable, b.LogStart
	m.st.SourceOffsetAt = asOf
}

// Restore sets a state read from the state topic on a mirror that will not
// run (a partition that failed before a restart stays failed).
func (m *Mirror) Restore(s State, r reason.Error) {
	m.mu.Lock()
	m.st.State = s
	m.setReasonLocked(r)
	m.mu.Unlock()
}

// setReasonLocked puts r in the status, code and message together.
func (m *Mirror) setReasonLocked(r reason.Error) {
	m.st.Reason, m.st.ReasonCode = r.Message, r.Code
}

// reasonLocked is the status's reason.
func (m *Mirror) reasonLocked() reason.Error {
	return reason.Error{Code: m.st.ReasonCode, Message: m.st.Reason}
}

func (m *Mirror) setState(s State, r reason.Error) {
	m.mu.Lock()
	if m.stopping && s != Failed {
		s, r = Stopping, m.stopReason
	}
	changed := m.st.State != s || m.reasonLocked() != r
	m.st.State = s
	m.setReasonLocked(r)
	st := m.st
	m.mu.Unlock()
	if changed {
		if s == Failed {
			m.log.Error("partition failed", "reason", r.Message, "reason_code", r.Code)
		} else {
			m.log.Info("partition state", "state", s, "reason", r.Message, "reason_code", r.Code)
		}
		if m.cfg.OnChange != nil {
			m.cfg.OnChange(st)
		}
	}
}

// failure is an error that breaks the offset invariant if mirroring went on:
// the partition stops in FAILED with this reason and code.
type failure struct {
	code   reason.Code
	reason string
	// realign: a recover may clear the failure, and reason ends with
	// recoverHint, which cannotAlign replaces after a recover.
	realign bool
	// refused is the destination's own answer, when it refused a write.
	refused error
}

func (f *failure) Error() string { return f.reason }

// Unwrap lets reason.CodeOf and errors.As find the code.
func (f *failure) Unwrap() error { return &reason.Error{Code: f.code, Message: f.reason} }

// status is the reason a partition fails with: after a recover
// (recovering), a failure a recover may clear says instead that it could
// not.
func (f *failure) status(recovering bool) reason.Error {
	if recovering && f.realign {
		return reason.Error{Code: reason.RealignFailed, Message: strings.TrimSuffix(f.reason, recoverHint) + cannotAlign}
	}
	return reason.Error{Code: f.code, Message: f.reason}
}

// fail is a failure with code.
func fail(code reason.Code, format string, args ...any) *failure {
	return &failure{code: code, reason: fmt.Sprintf(format, args...)}
}

// failRealign is a failure with code that a recover may clear: its reason
// ends with "; " and recoverHint.
func failRealign(code reason.Code, format string, args ...any) error {
	return &failure{code: code, reason: fmt.Sprintf(format, args...) + "; " + recoverHint, realign: true}
}

// Run mirrors the partition until ctx ends or the partition fails. Transient
// errors are retried with backoff, each retry starting again from the
// destination log end.
func (m *Mirror) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		select {
		case <-m.halt:
			return
		default:
		}
		started := time.Now()
		err := m.runOnce(ctx)
		if time.Since(started) > 10*time.Second {
			// It ran for a while: this is a new trouble, not the same one
			// coming back, so retry quickly again.
			backoff = 100 * time.Millisecond
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errHalted) {
			return
		}
		var se *seqError
		if errors.As(err, &se) {
			if m.lasting.note(se) {
				err = m.lastingFailure(ctx, se)
			} else {
				m.noteRetrying(m.lasting.status())
			}
		}
		var f *failure
		if errors.As(err, &f) {
			m.setState(Failed, f.status(m.cfg.Recovering))
			m.closeDataTxn(ctx)
			return
		}
		m.mu.Lock()
		m.st.Retries++
		m.mu.Unlock()
		m.log.Debug("retrying from the destination log end", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-m.halt:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
		if err == errResync {
			backoff = 100 * time.Millisecond
		}
	}
}

// recoverHint ends the reasons of failures a recover may clear
// (failRealign); after a recover that did not, cannotAlign replaces it.
const (
	recoverHint = "recover the partition to re-align it"
	cannotAlign = "a recover could not re-align the destination with the source: the destination topic must be recreated before this partition can mirror again: recover with recreate (kmirror recover --recreate) does it, and the destination's records are lost"
)

// errResync asks Run to rebuild the position from the destination at once.
var errResync = errors.New("resync")

func (m *Mirror) runOnce(ctx context.Context) error {
	if err := m.resync(ctx); err != nil {
		return err
	}
	if m.lasting.n > 0 && m.next > m.lasting.offset {
		m.lasting.clear() // the destination end moved past it
	}
	r := m.lossReason
	if m.lasting.n > 0 {
		r = m.lasting.status()
	}
	m.setState(Mirroring, r)
	return m.copy(ctx)
}

// resync rebuilds the position from the brokers, never from memory (review
// B4): it fences and settles the agent's transactional ids, adopts an open
// transaction of aborted records, recovers sequences from the destination
// log, and only then reads the destination end; it aligns the destination
// log start when the source's is above that end.
func (m *Mirror) resync(ctx context.Context) error {
	tp := m.cfg.TP
	// The plain writer's id is recorded before it writes: a mirror
	// deleted and created again has a new one, and the old one's batches
	// stay in the log.
	m.loadOwned()
	if err := m.own(ctx, m.cfg.ProducerID); err != nil {
		return err
	}
	if err := m.settleTxns(ctx); err != nil {
		return err
	}
	dst, err := m.cfg.Writer.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return fmt.Errorf("reading destination bounds: %w", err)
	}
	// Acknowledged writes (acks=all) are below the high watermark, which
	// never goes back unless records are lost: resuming from a lower end
	// would re-mirror silently over a log consumers already read.
	if seen := max(m.seenEnd, m.next); dst.HighWatermark < seen {
		return failRealign(reason.DestinationLostRecords, "the destination log end went back from %d to %d: records were lost on the destination (unclean leader election or a recreated topic)",
			seen, dst.HighWatermark)
	}
	m.seenEnd = dst.HighWatermark
	src, err := m.cfg.Source.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return fmt.Errorf("reading source bounds: %w", err)
	}
	m.mu.Lock()
	m.st.SourceOffset, m.st.SourceLastStable, m.st.SourceLogStart = src.HighWatermark, src.LastStable, src.LogStart
	m.st.SourceOffsetAt = time.Now()
	m.mu.Unlock()
	if dst.HighWatermark > src.HighWatermark {
		return failRealign(reason.DestinationAhead, "destination log end %d is beyond the source high watermark %d: the source log was truncated or recreated, or something else wrote to the destination",
			dst.HighWatermark, src.HighWatermark)
	}
	if err := m.recoverSequences(ctx, dst); err != nil {
		return err
	}
	if err := m.checkTail(ctx, dst, src); err != nil {
		return err
	}
	m.next, m.src = dst.HighWatermark, dst.HighWatermark
	m.aborted.reset()
	if a, ok := m.cfg.Checkpoints.Alignment(tp); ok && a.Offset == m.next && dst.LogStart < a.Offset {
		// A kill between the alignment checkpoint and DeleteRecords.
		if err := m.cfg.Writer.DeleteRecords(ctx, tp.Topic, tp.Partition, a.Offset); err != nil {
			return err
		}
	}
	if src.LogStart > m.next {
		if m.data.open {
			// Padding goes through the plain writer; the open
			// transaction's abort must come first to keep the offsets
			// it takes invisible.
			if err := m.invisible(ctx, 0); err != nil {
				return err
			}
		}
		if err := m.align(ctx, src.LogStart); err != nil {
			return err
		}
	}
	// Records lost to source retention stay reported, across restarts
	// too: the alignment checkpoint counts them.
	if a, ok := m.cfg.Checkpoints.Alignment(tp); ok && a.Lost > 0 {
		m.lossReason = reason.New(reason.RetentionLoss, "source retention removed %d records before they were mirrored (the last at offset %d)", a.Lost, a.Offset-1)
		m.mu.Lock()
		m.st.LostRecords = a.Lost
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.st.DestinationOffset = m.next
	m.st.Lag = max(0, m.st.SourceOffset-m.next)
	m.st.LastMirrored = m.next - 1
	m.mu.Unlock()
	return nil
}

// recoverSequences finds each writer's next sequence from the destination
// log: the plain writer's from its last batch (or, when the log holds none,
// from the alignment checkpoint), the open transaction's from its last batch.
// A batch of a producer id the agent does not own is a foreign write (at
// or above Config.Base: a failback resumes over the old primary's records);
// the agent owns the ids its writers hold now and those it recorded for the
// partition before (OwnedProducers).
func (m *Mirror) recoverSequences(ctx context.Context, dst leaders.Bounds) error {
	tp := m.cfg.TP
	var (
		plain, txn      recordbatch.Header
		gotPlain, gotTx bool
		foreign         *recordbatch.Header
	)
	needTxn := m.data.open
	fillPID := int64(-1) // FillMarkers: markerPID, which ownBatch knows
	if m.cfg.Fillers == FillCoordinator {
		fillPID = m.fill.p.ID
	}
	err := m.cfg.Writer.ScanTail(ctx, tp.Topic, tp.Partition, max(dst.LogStart, m.cfg.Base), dst.HighWatermark, func(h recordbatch.Header) bool {
		switch {
		case h.ProducerID == m.cfg.ProducerID && !h.IsControl():
			if !gotPlain {
				plain, gotPlain = h, true
			}
		case h.ProducerID == m.data.p.ID:
			if needTxn && !gotTx {
				switch {
				case h.ProducerEpoch < m.data.p.Epoch:
					// Written before the epoch began: the epoch's
					// sequence starts at 0 here.
					needTxn = false
				case !h.IsControl() && h.ProducerEpoch == m.data.p.Epoch:
					txn, gotTx = h, true
				}
				// A marker of the same epoch ended an earlier
				// transaction: the broker continues the epoch's
				// sequence across transactions, so look further back.
			}
		case !ownBatch(h, m.cfg.ProducerID, m.data.p.ID, fillPID, m.owned):
			if foreign == nil || h.BaseOffset < foreign.BaseOffset {
				hh := h
				foreign = &hh
			}
		}
		return gotPlain && (!needTxn || gotTx)
	})
	if err != nil {
		return err
	}
	if foreign != nil {
		return fail(reason.ForeignWrite, "the destination has a batch at offsets %d to %d from producer id %d, which the agent does not own (a foreign write to a mirror topic)",
			foreign.BaseOffset, foreign.LastOffset(), foreign.ProducerID)
	}
	switch {
	case gotPlain:
		if plain.ProducerEpoch != m.cfg.Epoch {
			return fail(reason.ProducerIDInUse, "the destination's last batch of producer id %d has epoch %d, not the agent's %d: another writer uses this producer id",
				m.cfg.ProducerID, plain.ProducerEpoch, m.cfg.Epoch)
		}
		m.seq = nextSeq(plain)
	default:
		// The checkpoint holds for a log cut at a.Offset; one for an
		// alignment whose padding has not landed yet (align saves it
		// first) is beyond the end, and the writer starts from 0.
		if a, ok := m.cfg.Checkpoints.Alignment(tp); ok && a.Offset >= dst.LogStart && a.Offset <= dst.HighWatermark {
			m.seq = a.NextSeq
		} else if dst.HighWatermark > m.cfg.Base && dst.LogStart == dst.HighWatermark {
			return failRealign(reason.DestinationLostRecords, "the destination log is empty at offset %d with no alignment record for it in the state topic",
				dst.HighWatermark)
		} else {
			m.seq = 0
		}
	}
	m.data.seq = 0
	if gotTx {
		m.data.seq = nextSeq(txn)
	}
	return nil
}

// addSeq adds n records to a sequence, wrapping at 2^31 as Kafka does
// (DefaultRecordBatch.incrementSequence: past 2^31-1 comes 0). seq and n
// are never negative here, and for those both give (seq + n) mod 2^31.
func addSeq(seq int32, n int32) int32 {
	return int32((int64(seq) + int64(n)) & 0x7fffffff)
}

// nextSeq is the sequence the producer of batch h writes next: one past the
// batch's last sequence, which Kafka takes as BaseSequence + LastOffsetDelta
// (DefaultRecordBatch.lastSequence), not from NumRecords. The destination's
// log cleaner removes records from a batch but keeps its last offset delta,
// and keeps a producer's last batch as an empty header (NumRecords 0) so
// that its sequence state survives: counting the records left would send
// a sequence behind the broker's, refused with OUT_OF_ORDER_SEQUENCE_NUMBER
// after every resync.
func nextSeq(h recordbatch.Header) int32 {
	return addSeq(addSeq(h.BaseSequence, h.LastOffsetDelta), 1)
}
