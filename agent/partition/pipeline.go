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
)

// The plain writer's batches are pipelined: as many of them are in flight
// at once as the writer's window for the partition's broker
// (writer.Pending.Window: more to a far broker), sent in order, so that a
// partition writes more than one source batch per round trip to the
// destination. Each keeps its deterministic sequence and the
// destination offset it must land at, and every answer is checked, in
// order, against that offset (landed): no shift can pass.
//
// Everything else drains the pipeline first: a write through another
// producer (a filler, an aborted source transaction), a look at the
// destination's end, and the end of copy. Offsets are assigned in arrival
// order and those writes go through other requests and connections, so the
// plain writer's batches must all be acknowledged before them. A batch that
// fails ends copy once every batch in flight is answered; Run then resyncs
// from the destination end and the fetch starts again there, so what
// followed the failed batch is sent again, in order, with the sequences
// the log dictates.

// flight is a plain batch, or filler markers (FillMarkers), on its way.
type flight struct {
	x     *writer.Pending
	want  int64 // the destination offset its first record must get
	n     int32
	seq   int32 // its base sequence (the plain writer's next, for markers)
	bytes int
	id    uint64
	// mirrored: a source batch, counted in Status once answered (padding
	// is not).
	mirrored bool
	// markers: n filler markers, whose answer says nothing of where they
	// landed: the next batch's offset does.
	markers bool
}

// heldChunk is a fetched chunk whose batches are still in flight: its bytes
// stay counted against the fetch budget until the last is answered.
type heldChunk struct {
	c    fetcher.Chunk
	last uint64 // id of its last flight
}

// send queues a rewritten plain batch of n records for destination offset
// m.next and advances m.next and m.seq past it; mirrored says it holds
// source records. With the window full it waits for the oldest answer
// first.
func (m *Mirror) send(ctx context.Context, b []byte, n int32, mirrored bool) error {
	if err := m.room(ctx); err != nil {
		return err
	}
	x, err := m.cfg.Writer.ProduceAsync(ctx, m.cfg.TP.Topic, m.cfg.TP.Partition, b)
	if err != nil {
		return err // no leader known: nothing sent, retried from the destination end
	}
	m.flightID++
	m.flights = append(m.flights, flight{x: x, want: m.next, n: n, seq: m.seq, bytes: len(b), id: m.flightID, mirrored: mirrored})
	m.next += int64(n)
	m.seq = addSeq(m.seq, n)
	return nil
}

// sendMarkers queues n filler markers (FillMarkers) for destination offset
// m.next and advances m.next past them. The writer sends them once the
// batches before them are answered without error, and the batches after
// them follow on the same connection: no round trip of their own.
func (m *Mirror) sendMarkers(ctx context.Context, n int32) error {
	if err := m.room(ctx); err != nil {
		return err
	}
	x, err := m.cfg.Writer.MarkersAsync(ctx, writer.Producer{ID: markerPID}, m.cfg.TP.Topic, m.cfg.TP.Partition, int(n))
	if err != nil {
		return err
	}
	m.flightID++
	m.flights = append(m.flights, flight{x: x, want: m.next, n: n, seq: m.seq, id: m.flightID, markers: true})
	m.next += int64(n)
	return nil
}

// room waits for the oldest answers while the window is full: the window
// of the last item sent (writer.Pending.Window; see writer.reach for why it
// may exceed the 5 batches a broker recognizes when resent). A leader
// nearer than the last shrinks it.
func (m *Mirror) room(ctx context.Context) error {
	for n := len(m.flights); n > 0 && n >= m.flights[n-1].x.Window(); n = len(m.flights) {
		if err := m.reap(ctx); err != nil {
			return err
		}
	}
	return nil
}

// reap waits for the oldest batch in flight and checks where it landed.
func (m *Mirror) reap(ctx context.Context) error {
	f := m.flights[0]
	off, err := f.x.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		// Stopping: the item may be on its way still. It stays for
		// discard, which waits for its answer (within its grace), so
		// that nothing this partition sent, filler markers above all,
		// lands after the next partition mirror of this agent read the
		// destination end.
		return err
	}
	m.flights[0] = flight{}
	m.flights = m.flights[1:]
	if err != nil {
		// The end is where the acknowledged writes reach: what was sent
		// after is not known to have landed.
		m.next, m.seq = f.want, f.seq
		if f.markers {
			return classifyMarkers(err, f.n, f.want)
		}
		return m.classifyProduce(err, writer.Producer{ID: m.cfg.ProducerID, Epoch: m.cfg.Epoch}, f.seq, f.want)
	}
	if f.markers {
		if !m.marked {
			m.marked, m.markedFrom = true, f.want
		}
	} else {
		if err := m.checkLanded(ctx, off, f.want); err != nil {
			return err
		}
		m.marked = false
	}
	m.reaped = f.id
	m.releaseChunks()
	if f.mirrored {
		m.acked(f.want+int64(f.n), f.bytes, f.n)
	}
	return nil
}

// classifyMarkers turns the error of n filler markers for destination
// offset at into what Run does with it: retry (a retriable or client
// error), or fail the partition (the destination refused them for good:
// retrying would only say so in a debug line while the lag grows).
func classifyMarkers(err error, n int32, at int64) error {
	var ke *kerr.Error
	switch {
	case !errors.As(err, &ke) || ke.Retriable:
		return fmt.Errorf("writing %d filler markers at destination offset %d: %w", n, at, err)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		f := fail(reason.DestinationRefused, "the destination refused the filler markers at offset %d: %v: the agent needs ALTER (Kafka 4) or CLUSTER_ACTION on the destination cluster to write them (kafka-acls.sh --add --allow-principal ... --operation Alter --cluster), or fillers = \"coordinator\"; then recover",
			at, err)
		f.refused = err
		return f
	}
	f := fail(reason.DestinationRefused, "the destination refused the filler markers at offset %d: %v", at, err)
	f.refused = err
	return f
}

// reapReady checks every batch already answered, without waiting.
func (m *Mirror) reapReady(ctx context.Context) error {
	for len(m.flights) > 0 && m.flights[0].x.Ready() {
		if err := m.reap(ctx); err != nil {
			return err
		}
	}
	return nil
}

// drain waits for every batch in flight and checks each, in order. After
// an error it discards the rest.
func (m *Mirror) drain(ctx context.Context) error {
	for len(m.flights) > 0 {
		if err := m.reap(ctx); err != nil {
			return m.discard(ctx, err)
		}
	}
	return nil
}

// discard waits for the answers of every batch still in flight after cause
// ended the pipeline, and returns cause. They follow a write that failed,
// so the broker refused them out of sequence, or they landed where the
// resync will find them, or the writer did not send them. One case is not
// harmless: filler markers have no sequence number, so when the broker
// refuses markers (say the agent lost the ALTER right meanwhile) and
// appends the batch right behind them, that batch lands early and shifts
// every offset after it; discard then fails the partition. Waiting means
// nothing the partition sent is still on its way when Run reads the
// destination again. The end goes back to where the acknowledged writes
// reach. A ctx that ended gets a grace of its own for the answers.
func (m *Mirror) discard(ctx context.Context, cause error) error {
	if len(m.flights) > 0 && m.flights[0].want < m.next {
		// Not after a failed batch, which reap already went back to.
		m.next, m.seq = m.flights[0].want, m.flights[0].seq
	}
	if ctx.Err() != nil {
		// Stopping (a clean stop, or a mirror the agents' group takes
		// from this agent: its checks in ctx fail at once, but nobody
		// writes it before this agent releases it, after these
		// answers).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
		defer cancel()
	}
	// Name the destination's refusal, not the advice of the failure
	// that carries it.
	refusal := cause
	if f := (*failure)(nil); errors.As(cause, &f) && f.refused != nil {
		refusal = f.refused
	}
	shifted := false
	for _, f := range m.flights {
		off, err := f.x.Wait(ctx)
		if err == nil && !f.markers && off != f.want && !shifted {
			shifted = true // the first batch off says where the shift starts
			// Not a realign: the batch is in the log at the wrong
			// offsets, which a resume would build on.
			cause = fail(reason.MarkersRefused, "the destination refused the filler markers before the batch for offset %d (%v) and put that batch at offset %d: every offset from %d on is shifted; recreate the destination topic",
				f.want, refusal, off, off)
		}
	}
	clear(m.flights)
	m.flights = m.flights[:0]
	m.marked = false
	m.releaseChunks()
	return cause
}

// drainGrace is how long drain waits for answers once its context ended.
const drainGrace = 5 * time.Second

// acked records that the destination acknowledged a batch of n records
// (bytes long) ending at end.
func (m *Mirror) acked(end int64, bytes int, n int32) {
	if m.lasting.n > 0 && end > m.lasting.offset {
		m.healed()
	}
	m.mu.Lock()
	m.st.Bytes += int64(bytes)
	m.st.Records += int64(n)
	m.mu.Unlock()
}

// hold keeps chunk c counted against the fetch budget while batches of it
// are in flight, and releases it at once otherwise.
func (m *Mirror) hold(c fetcher.Chunk) {
	if len(m.flights) == 0 {
		m.cfg.Fetcher.Done(c)
		return
	}
	m.held = append(m.held, heldChunk{c: c, last: m.flights[len(m.flights)-1].id})
}

// releaseChunks gives back the chunks whose batches are all answered.
func (m *Mirror) releaseChunks() {
	for len(m.held) > 0 && (m.held[0].last <= m.reaped || len(m.flights) == 0) {
		m.cfg.Fetcher.Done(m.held[0].c)
		m.held[0] = heldChunk{}
		m.held = m.held[1:]
	}
}

// ackedEnd is the destination end the acknowledged writes reach.
func (m *Mirror) ackedEnd() int64 {
	if len(m.flights) > 0 {
		return m.flights[0].want
	}
	return m.next
}

// headDone is the channel on which the oldest batch in flight is answered,
// nil (never ready) when none is.
func (m *Mirror) headDone() <-chan struct{} {
	if len(m.flights) == 0 {
		return nil
	}
	return m.flights[0].x.Done()
}
