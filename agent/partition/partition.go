// Package partition runs one mirror partition: it rebuilds its position from
// the destination (the destination log end is the resume point), aligns the
// destination's log start with the source's, and copies source batches one
// by one to the same offsets, still compressed, through the partition's
// idempotent writer with deterministic sequences.
package partition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/mirrorapi"
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
}

// Config is what one partition mirror runs with.
type Config struct {
	Mirror     string
	TP         fetcher.TP
	ProducerID int64
	Epoch      int16
	// KeyedPad: the destination is compacted, so pad records need a key.
	KeyedPad    bool
	Fetcher     *fetcher.Fetcher
	Source      Source
	Writer      *writer.Writer
	Checkpoints Checkpoints
	// OnChange is called after every state or reason change (for
	// persistence); it must not block for long.
	OnChange func(Status)
	Logger   hclog.Logger
	// PadBatch is the number of records per padding batch (default 20000).
	PadBatch int
}

// Status is a partition's figures as callers see them.
type Status = mirrorapi.Partition

// Mirror is one running mirror partition.
type Mirror struct {
	cfg Config
	log hclog.Logger

	// Owned by Run's goroutine.
	next int64 // next destination (= source) offset to write
	seq  int32 // next sequence of the writer's producer id

	mu       sync.Mutex
	st       Status
	caughtUp time.Time
}

// New returns a partition mirror; Run starts it.
func New(cfg Config) *Mirror {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.PadBatch <= 0 {
		cfg.PadBatch = 20000
	}
	m := &Mirror{cfg: cfg, log: cfg.Logger.With("topic", cfg.TP.Topic, "partition", cfg.TP.Partition)}
	m.st = Status{Mirror: cfg.Mirror, Topic: cfg.TP.Topic, Partition: cfg.TP.Partition, State: Initializing, LastMirrored: -1}
	m.caughtUp = time.Now()
	return m
}

// Status returns the partition's current figures.
func (m *Mirror) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.st
	if st.Lag > 0 {
		st.LagMillis = time.Since(m.caughtUp).Milliseconds()
	}
	return st
}

func (m *Mirror) setState(s State, reason string) {
	m.mu.Lock()
	changed := m.st.State != s || m.st.Reason != reason
	m.st.State, m.st.Reason = s, reason
	st := m.st
	m.mu.Unlock()
	if changed {
		if s == Failed {
			m.log.Error("partition failed", "reason", reason)
		} else {
			m.log.Info("partition state", "state", s, "reason", reason)
		}
		if m.cfg.OnChange != nil {
			m.cfg.OnChange(st)
		}
	}
}

// failure is an error that breaks the offset invariant if mirroring went on:
// the partition stops in FAILED with this reason.
type failure struct{ reason string }

func (f *failure) Error() string { return f.reason }

func fail(format string, args ...any) error { return &failure{fmt.Sprintf(format, args...)} }

// Run mirrors the partition until ctx ends or the partition fails. Transient
// errors are retried with backoff, each retry starting again from the
// destination log end.
func (m *Mirror) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := m.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		var f *failure
		if errors.As(err, &f) {
			m.setState(Failed, f.reason)
			return
		}
		m.mu.Lock()
		m.st.Retries++
		m.mu.Unlock()
		m.log.Debug("retrying from the destination log end", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
		if err == errResync {
			backoff = 100 * time.Millisecond
		}
	}
}

// errResync asks Run to rebuild the position from the destination at once.
var errResync = errors.New("resync")

func (m *Mirror) runOnce(ctx context.Context) error {
	if err := m.resync(ctx); err != nil {
		return err
	}
	m.setState(Mirroring, "")
	return m.copy(ctx)
}

// resync rebuilds next and seq from the destination and aligns the
// destination log start when the source's is above the destination end.
func (m *Mirror) resync(ctx context.Context) error {
	tp := m.cfg.TP
	dst, err := m.cfg.Writer.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return fmt.Errorf("reading destination bounds: %w", err)
	}
	src, err := m.cfg.Source.Bounds(ctx, tp.Topic, tp.Partition)
	if err != nil {
		return fmt.Errorf("reading source bounds: %w", err)
	}
	m.mu.Lock()
	m.st.SourceOffset, m.st.SourceLastStable, m.st.SourceLogStart = src.HighWatermark, src.LastStable, src.LogStart
	m.mu.Unlock()
	if dst.HighWatermark > src.HighWatermark {
		return fail("destination log end %d is beyond the source high watermark %d: the source log was truncated or recreated, or something else wrote to the destination; recover the partition to re-align it",
			dst.HighWatermark, src.HighWatermark)
	}
	if err := m.recoverSequence(ctx, dst); err != nil {
		return err
	}
	m.next = dst.HighWatermark
	if a, ok := m.cfg.Checkpoints.Alignment(tp); ok && a.Offset == m.next && dst.LogStart < a.Offset {
		// A kill between the alignment checkpoint and DeleteRecords.
		if err := m.cfg.Writer.DeleteRecords(ctx, tp.Topic, tp.Partition, a.Offset); err != nil {
			return err
		}
	}
	if src.LogStart > m.next {
		if err := m.align(ctx, dst, src.LogStart); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.st.DestinationOffset = m.next
	m.st.Lag = max(0, m.st.SourceOffset-m.next)
	m.st.LastMirrored = m.next - 1
	m.mu.Unlock()
	return nil
}

// recoverSequence finds the writer's next sequence from the destination log:
// the last batch the writer's producer id appended, or, when the log holds
// none (all cut by DeleteRecords), the alignment checkpoint.
func (m *Mirror) recoverSequence(ctx context.Context, dst leaders.Bounds) error {
	tp := m.cfg.TP
	h, found, err := m.cfg.Writer.LastBatch(ctx, tp.Topic, tp.Partition, m.cfg.ProducerID, dst.LogStart, dst.HighWatermark)
	if err != nil {
		return err
	}
	if found {
		if h.ProducerEpoch != m.cfg.Epoch {
			return fail("the destination's last batch of producer id %d has epoch %d, not the agent's %d: another writer uses this producer id",
				m.cfg.ProducerID, h.ProducerEpoch, m.cfg.Epoch)
		}
		if end := h.LastOffset() + 1; end != dst.HighWatermark {
			return fail("the destination has records at offsets %d to %d that the agent did not write (a foreign write to a mirror topic)",
				end, dst.HighWatermark-1)
		}
		m.seq = addSeq(h.BaseSequence, h.NumRecords)
		return nil
	}
	if a, ok := m.cfg.Checkpoints.Alignment(tp); ok && a.Offset == dst.HighWatermark {
		m.seq = a.NextSeq
		return nil
	}
	if dst.HighWatermark > dst.LogStart {
		return fail("the destination holds records at offsets %d to %d that the agent did not write (a foreign write to a mirror topic)",
			dst.LogStart, dst.HighWatermark-1)
	}
	if dst.HighWatermark != 0 {
		return fail("the destination log is empty at offset %d with no alignment record for it in the state topic; recover the partition to re-align it",
			dst.HighWatermark)
	}
	m.seq = 0
	return nil
}

// addSeq adds n records to a sequence, wrapping at 2^31 as Kafka does.
func addSeq(seq int32, n int32) int32 {
	return int32((int64(seq) + int64(n)) & 0x7fffffff)
}

// align pads the destination from next up to target with records nobody
// will see and then cuts them off with DeleteRecords, so that the
// destination log starts where the source's does.
func (m *Mirror) align(ctx context.Context, dst leaders.Bounds, target int64) error {
	tp := m.cfg.TP
	var lost int64
	if m.next > 0 {
		// Retention on the source removed records the mirror had not
		// copied yet: report it, never silently.
		lost = target - m.next
		m.log.Warn("source retention removed records before they were mirrored", "from", m.next, "to", target, "lost", lost)
	}
	m.setState(Preparing, fmt.Sprintf("aligning the destination log start to the source's (%d)", target))
	for m.next < target {
		n := int32(min(int64(m.cfg.PadBatch), target-m.next))
		b, err := padBatch(n, m.cfg.KeyedPad, m.cfg.ProducerID, m.cfg.Epoch, m.seq)
		if err != nil {
			return fail("building a padding batch: %v", err)
		}
		if err := m.write(ctx, b, m.next, n); err != nil {
			return err
		}
		m.mu.Lock()
		m.st.PadRemaining = target - m.next
		m.mu.Unlock()
	}
	total := lost
	if prev, ok := m.cfg.Checkpoints.Alignment(tp); ok {
		total += prev.Lost
	}
	if err := m.cfg.Checkpoints.SaveAlignment(ctx, tp, Alignment{Offset: target, NextSeq: m.seq, Lost: total}); err != nil {
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
		m.setState(Preparing, fmt.Sprintf("source retention removed offsets %d to %d before they were mirrored", target-lost, target-1))
	}
	return nil
}

func padBatch(n int32, keyed bool, pid int64, epoch int16, seq int32) ([]byte, error) {
	recs := make([]recordbatch.Record, n)
	var key []byte
	if keyed {
		key = []byte("kmirror-pad")
	}
	for i := range recs {
		recs[i] = recordbatch.Record{Offset: int64(i), Key: key}
	}
	now := time.Now().UnixMilli()
	for i := range recs {
		recs[i].Timestamp = now
	}
	return recordbatch.Build(recordbatch.CodecNone, 0, 0, now, pid, epoch, seq, recs)
}

// write appends one rewritten batch that must land at offset at.
func (m *Mirror) write(ctx context.Context, b []byte, at int64, n int32) error {
	off, err := m.cfg.Writer.Produce(ctx, m.cfg.TP.Topic, m.cfg.TP.Partition, b)
	if err != nil {
		return classifyProduce(err)
	}
	if off != at {
		return fail("the destination put the batch for offset %d at offset %d: something else writes to this mirror topic, or a write was lost",
			at, off)
	}
	m.next = at + int64(n)
	m.seq = addSeq(m.seq, n)
	return nil
}

// classifyProduce turns a produce error into a retry (the resume point is
// re-read from the destination) or a failure.
func classifyProduce(err error) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return err // network and client errors: retry
	}
	switch {
	case ke.Retriable, errors.Is(err, kerr.OutOfOrderSequenceNumber), errors.Is(err, kerr.DuplicateSequenceNumber),
		errors.Is(err, kerr.UnknownProducerID), errors.Is(err, kerr.InvalidProducerEpoch):
		return err
	}
	return fail("the destination refused a batch: %v", err)
}

// copy forwards fetched batches until an error.
func (m *Mirror) copy(ctx context.Context) error {
	f := m.cfg.Fetcher
	ch, gen := f.Assign(m.cfg.TP, m.next)
	for {
		var c fetcher.Chunk
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c = <-ch:
		}
		if c.Gen != gen {
			f.Done(c)
			continue
		}
		err := m.handle(ctx, c)
		f.Done(c)
		if err != nil {
			return err
		}
	}
}

func (m *Mirror) handle(ctx context.Context, c fetcher.Chunk) error {
	m.mu.Lock()
	if c.HighWatermark >= 0 {
		m.st.SourceOffset, m.st.SourceLastStable, m.st.SourceLogStart = c.HighWatermark, c.LastStable, c.LogStart
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
	for rest := c.Records; len(rest) > 0; {
		b, r, err := recordbatch.Next(rest)
		if err != nil {
			return fail("reading a source batch of %s: %v", m.cfg.TP, err)
		}
		if b == nil {
			break
		}
		rest = r
		if err := m.forward(ctx, b); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.st.DestinationOffset = m.next
	m.st.LastMirrored = m.next - 1
	m.st.Lag = max(0, m.st.SourceOffset-m.next)
	if m.st.Lag == 0 {
		m.caughtUp = time.Now()
	}
	m.mu.Unlock()
	return nil
}

// forward writes one source batch at its own offsets.
func (m *Mirror) forward(ctx context.Context, b []byte) error {
	h, err := recordbatch.ParseHeader(b)
	if err != nil {
		return fail("reading a source batch of %s: %v", m.cfg.TP, err)
	}
	if h.LastOffset() < m.next {
		return nil // already on the destination
	}
	switch {
	case h.IsControl():
		return fail("transaction marker at source offset %d: transactional source topics are not supported yet", h.BaseOffset)
	case h.IsTransactional():
		return fail("transactional batch at source offset %d: transactional source topics are not supported yet", h.BaseOffset)
	case h.BaseOffset > m.next:
		return fail("the source has no records at offsets %d to %d (a compacted or transactional topic): not supported yet", m.next, h.BaseOffset-1)
	case h.NumRecords != h.LastOffsetDelta+1:
		return fail("source batch at offset %d has holes (compacted): not supported yet", h.BaseOffset)
	}
	if h.BaseOffset < m.next || h.LogAppendTime() {
		// Re-encode: the batch straddles the log start the destination was
		// aligned to, or its timestamps are the source's append times.
		nb, err := reencode(b, h, m.next)
		if err != nil {
			return fail("re-encoding the source batch at offset %d: %v", h.BaseOffset, err)
		}
		b = nb
	}
	// Rewritten in place: a retry refetches, so the fetched bytes are never
	// read again and no copy is needed.
	n := int32(h.LastOffset() + 1 - m.next)
	if err := recordbatch.Rewrite(b, m.cfg.ProducerID, m.cfg.Epoch, m.seq, false); err != nil {
		return fail("rewriting the source batch at offset %d: %v", h.BaseOffset, err)
	}
	at := m.next
	if err := m.write(ctx, b, at, n); err != nil {
		return err
	}
	m.mu.Lock()
	m.st.Bytes += int64(len(b))
	m.st.Records += int64(n)
	m.mu.Unlock()
	return nil
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
	return recordbatch.Build(h.Codec(), 0, kept[0].Offset, kept[0].Timestamp, h.ProducerID, h.ProducerEpoch, h.BaseSequence, kept)
}

// Restore sets a state read from the state topic on a mirror that will not
// run (a partition that failed before a restart stays failed).
func (m *Mirror) Restore(s State, reason string) {
	m.mu.Lock()
	m.st.State, m.st.Reason = s, reason
	m.mu.Unlock()
}
