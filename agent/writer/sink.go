package writer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writegate"
)

// Plain (non-transactional) produces and filler markers are coalesced per
// destination broker, as franz-go's producer does with its sinks: concurrent
// calls for different partitions led by the same broker go out in one
// request, one item per partition. Each broker has a sink with a queue of
// pending items; whenever fewer than its reach's inflight requests are in flight (a
// request was answered, or an item arrives at an idle sink), what is
// pending is put in new requests and written to the broker's ordered
// connection (conn.go), in order.
//
// Guarantees:
//   - A request is a ProduceRequest or a WriteTxnMarkersRequest and
//     carries at most one item per partition (Kafka refuses more batches).
//     A partition's items leave in arrival order, at most its reach's window of
//     them in requests not yet answered, and reach the broker in that order.
//   - A partition's markers leave only once every earlier item of the
//     partition has been answered without error (a marker has no sequence
//     number, so one written behind a batch the broker refuses would take
//     that batch's offset), and only on a connection with nothing in flight:
//     a broker applies a connection's requests one after another, so a
//     marker behind other partitions' requests would be applied after them,
//     and the markers deadline (Writer.SetMarkersDeadline) would count
//     their time as its own. While a marker is queued, no new request goes
//     out on a connection with one in flight: what the partitions queue
//     meanwhile leaves together once the answers came, markers in one
//     request, batches in another. Sending batches at once instead made
//     many requests of one or two batches, which the markers then waited
//     for, and a destination broker pays per request: on Kafka 4.4.0
//     (BenchmarkMirrorMaker's transactional source, three runs each) 81–84
//     requests per MB with 2.0–2.1 batches per produce request before,
//     63–65 with 3.7–4.0 after, and 13.4 MB/s against 11.3 on average,
//     with 16% less destination broker CPU per GB. Holding the batches only
//     while some partition's next item was a marker gave about half of
//     that. (On kfake, which serves every request from one goroutine at
//     almost no cost per request, the idle connection costs more than the
//     requests saved: 84 MB/s against 115.)
//   - A markers request is followed at once, before its answer, by one
//     produce request of the batches then at the head of their
//     partitions: those right behind its markers, and those of partitions
//     with no marker before them. The broker applies the two in turn; a
//     batch behind markers it refused lands at their offsets, which the
//     caller finds in the answer (partition.discard fails the partition).
//     Holding those batches until the markers' answer, as the rule above
//     did when more markers were queued behind them, made each round of a
//     partition two round trips where the source alternates runs of
//     records and markers: on Kafka 4.4.0 (BenchmarkMirrorMaker, one run
//     each, alternated) the compacted source 22.2 MB/s against 19.4 and
//     the transactional 40.3 against 36.8, copies 2.3 s against 2.9 s and
//     3.1 s against 3.4 s, with 60.8 and 42.9 requests per MB against
//     67.9 and 42.0.
//   - On the idle connection, the markers go first when every queued
//     marker may leave, the batches behind them; else the kind more
//     partitions may send next (markersFirstLocked). Taking the kind of
//     the first queued item instead (Kafka 4.4.0, the same source, two
//     runs each way alternated): 45.3 and 45.8 requests per MB against
//     42.7 and 42.9, 4.6 batches per produce request against 5.1, 18.5
//     and 19.2 MB/s against 20.5 and 20.1.
//   - Once an item of a partition fails, the partition's items still queued
//     are answered with ErrNotSent, unsent, until it has nothing queued or
//     in flight: its caller goes back to the destination end.
//   - Every item gets its own answer: the partition's error code as a
//     ProduceError (leadership errors invalidate the leader cache), or a
//     transport error for every item of the request.
//   - A caller whose context ends gets its context's error at once. An item
//     still queued is dropped, and the items its partition queued behind it
//     are answered ErrNotSent, unsent (a marker sent in its place would take
//     its offsets); one already sent stays in its request and counts
//     against its partition's window until the request is answered, and
//     Wait with another context returns that answer.
//   - Transactional produces are never coalesced (a request carries the
//     batches of one transactional id only): ProduceTxn writes them alone,
//     to the same ordered connection.
const (
	// returnGrace is how long a sink whose request was just answered waits
	// for the callers of that request to come back with their next batch
	// before sending what else is pending. Without it the first caller back
	// goes alone and the others wait a round trip for the next request:
	// requests alternate between one batch and the rest.
	returnGrace = 500 * time.Microsecond
	// maxRequestBytes caps the batch bytes of one coalesced request (kgo
	// refuses to write requests over BrokerMaxWriteBytes, 100 MiB by
	// default); a larger batch goes alone.
	maxRequestBytes = 16 << 20
)

type sink struct {
	w    *Writer
	lane lane
	far  atomic.Bool // its broker was measured far (Writer.measure)

	mu       sync.Mutex
	queue    []*pending        // arrival order
	busy     map[topicPart]int // items of each partition in requests not yet answered
	queued   map[topicPart]int // items of each partition in the queue
	markers  int               // marker items in the queue
	failed   map[topicPart]bool
	inflight int // requests made and not yet answered
	// outbox holds the requests made and not yet issued, in order;
	// issuing says a goroutine issues them.
	outbox  []*request
	issuing bool
	// returning holds the partitions of the last answered request whose
	// callers have not come back yet, for up to returnGrace (grace).
	returning map[topicPart]bool
	grace     *time.Timer
}

type topicPart struct {
	topic     string
	partition int32
}

// pending is a queued item: a batch, or markers > 0 ABORT markers of
// producer.
type pending struct {
	tp       topicPart
	batch    []byte
	markers  int
	producer Producer
	gate     *writegate.Gate // the caller's checks, asked when it leaves
	done     chan produced   // buffered: the sender never blocks
	answered chan struct{}   // closed once done holds the answer
	sent     bool            // guarded by sink.mu
	gone     bool            // the caller gave up, guarded by sink.mu
}

// answer gives p its result; called once.
func (p *pending) answer(r produced) {
	p.done <- r
	close(p.answered)
}

type produced struct {
	offset int64
	err    error
}

// request is one coalesced request in flight.
type request struct {
	markers bool // a WriteTxnMarkersRequest, else a ProduceRequest
	items   []*pending
	// refused holds, by index in items, the refusal of an item whose
	// checks failed when the request left: it was not sent.
	refused map[int]error
}

// ErrNotSent answers an item that was not sent because an earlier item of
// its partition failed.
var ErrNotSent = errors.New("not sent: an earlier write to the partition failed")

// sink returns the sink of a partition led by node, making it on first use.
func (w *Writer) sink(ctx context.Context, node int32, tp topicPart) *sink {
	w.lockMeasured(ctx, node)
	defer w.mu.Unlock()
	l := w.laneOfLocked(node, tp)
	s := w.sinks[l]
	if s == nil {
		s = &sink{w: w, lane: l, busy: map[topicPart]int{}, queued: map[topicPart]int{},
			failed: map[topicPart]bool{}, returning: map[topicPart]bool{}}
		s.far.Store(w.farLocked(node))
		w.sinks[l] = s
	}
	return s
}

// reach is how the sink writes to its broker.
func (s *sink) reach() reach {
	if s.far.Load() {
		return s.w.far
	}
	return s.w.near
}

// Pending is an item given to ProduceAsync or MarkersAsync: queued, in
// flight or answered.
type Pending struct {
	s     *sink
	p     *pending
	topic string
	part  int32
	res   *produced // the answer once Wait took it
}

// Window is how many items of its partition the writer keeps in requests
// not yet answered, on the sink it went to: NearWindow or FarWindow. A
// caller pipelining a partition's batches keeps as many in flight.
func (x *Pending) Window() int { return x.s.reach().window }

// Done is closed once the item is answered; Wait then returns at once.
func (x *Pending) Done() <-chan struct{} { return x.p.answered }

// Ready says whether the item is answered, without waiting.
func (x *Pending) Ready() bool {
	select {
	case <-x.p.answered:
		return true
	default:
		return x.res != nil
	}
}

// Wait returns the offset the leader gave a batch's first record (-1 for
// markers: WriteTxnMarkers does not say), or the error; when ctx ends
// first it returns ctx's error (see the sink's guarantees for what becomes
// of the item).
func (x *Pending) Wait(ctx context.Context) (int64, error) {
	if x.res != nil {
		return x.res.offset, x.res.err
	}
	select {
	case r := <-x.p.done:
		x.res = &r
		return r.offset, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-x.p.done: // answered meanwhile
		x.res = &r
		return r.offset, r.err
	default:
	}
	s, p := x.s, x.p
	s.mu.Lock()
	p.gone = true
	if !p.sent {
		for i, q := range s.queue {
			if q == p {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				s.unqueueLocked(p)
				if s.queued[p.tp] > 0 {
					// What the partition queued behind it must not
					// go without it: markers, which have no
					// sequence, would take its offsets. They are
					// answered ErrNotSent, as after a failure.
					s.failed[p.tp] = true
					s.maybeSendLocked()
				}
				s.settleLocked(p.tp)
				break
			}
		}
	}
	sent := p.sent
	s.mu.Unlock()
	res := produced{-1, &ProduceError{Topic: x.topic, Partition: x.part, Markers: p.markers > 0, Err: ctx.Err()}}
	if !sent {
		x.res = &res // dropped: never answered
	}
	// One already sent is answered in time: a later Wait with a context
	// that lasts gets that answer (a stopping partition waits for what it
	// has on its way before another reads the destination).
	return res.offset, res.err
}

// enqueue queues one item for the broker.
func (s *sink) enqueue(p *pending) *Pending {
	p.done, p.answered = make(chan produced, 1), make(chan struct{})
	s.mu.Lock()
	s.queue = append(s.queue, p)
	s.queued[p.tp]++
	if p.markers > 0 {
		s.markers++
	}
	delete(s.returning, p.tp)
	s.maybeSendLocked()
	s.mu.Unlock()
	return &Pending{s: s, p: p, topic: p.tp.topic, part: p.tp.partition}
}

// unqueueLocked counts p out of the queue.
func (s *sink) unqueueLocked(p *pending) {
	if s.queued[p.tp]--; s.queued[p.tp] <= 0 {
		delete(s.queued, p.tp)
	}
	if p.markers > 0 {
		s.markers--
	}
}

// settleLocked forgets that tp failed once it has nothing queued or in
// flight: its caller has seen every answer.
func (s *sink) settleLocked(tp topicPart) {
	if s.failed[tp] && s.busy[tp] == 0 && s.queued[tp] == 0 {
		delete(s.failed, tp)
	}
}

// maybeSendLocked makes requests of what is pending while fewer than
// its reach's inflight are in flight, and has them issued in order.
func (s *sink) maybeSendLocked() {
	if len(s.returning) > 0 {
		return // the grace timer or the last caller back sends
	}
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
	for s.inflight < s.reach().inflight {
		r := s.takeLocked(false)
		if r == nil {
			break
		}
		s.inflight++
		s.outbox = append(s.outbox, r)
		if r.markers && s.inflight < s.reach().inflight {
			// The batches at their partitions' heads follow the markers
			// at once, before their answer (see the guarantees above).
			if f := s.takeLocked(true); f != nil {
				s.inflight++
				s.outbox = append(s.outbox, f)
			}
		}
	}
	if len(s.outbox) > 0 && !s.issuing {
		s.issuing = true
		go s.issueLoop()
	}
}

// takeLocked moves queued items into a new request: in arrival order, one
// per partition (or a partition's marker items in a row), all batches or
// all markers (see markersFirstLocked), none of a partition whose window is
// full, whose marker waits for earlier answers or for the connection, or
// which has an earlier item left queued, up to maxRequestBytes. Nothing
// goes while a request is in flight and a marker is queued, except with
// follow, right behind a markers request: then the batches at the head of
// their partitions, and nothing else, go at once. Items of a partition
// that failed are answered ErrNotSent.
func (s *sink) takeLocked(follow bool) *request {
	if s.inflight > 0 && s.markers > 0 && !follow {
		return nil // the connection drains for the markers
	}
	var r *request
	if s.markers > 0 && !follow {
		r = &request{markers: s.markersFirstLocked()}
	}
	var (
		bytes  int
		window = s.reach().window
		kept   = s.queue[:0]
		// parts: true for a partition in r, false once an item of it is
		// kept queued (what follows it stays too).
		parts = map[topicPart]bool{}
	)
	for _, p := range s.queue {
		if s.failed[p.tp] {
			p.answer(produced{-1, &ProduceError{Topic: p.tp.topic, Partition: p.tp.partition, Markers: p.markers > 0, Err: ErrNotSent}})
			s.unqueueLocked(p)
			s.settleLocked(p.tp)
			continue
		}
		marker := p.markers > 0
		ready := s.busy[p.tp] < window
		inR, seen := parts[p.tp]
		switch {
		case inR:
			// Markers right behind the partition's markers in r go with
			// them, in the request's next entries (markersRequest): a
			// source's commit markers in a row cost one round, not one
			// each.
			ready = marker && r.markers
		case follow:
			ready = ready && !marker
		case marker:
			ready = s.busy[p.tp] == 0 && s.inflight == 0
		}
		if (seen && !inR) || !ready || (r != nil && (r.markers != marker || bytes+len(p.batch) > maxRequestBytes)) {
			parts[p.tp] = false
			kept = append(kept, p)
			continue
		}
		if r == nil {
			r = &request{markers: marker}
		}
		parts[p.tp] = true
		s.busy[p.tp]++
		s.unqueueLocked(p)
		bytes += len(p.batch)
		p.sent = true
		r.items = append(r.items, p)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if r != nil && len(r.items) == 0 {
		return nil
	}
	return r
}

// markersFirstLocked says which kind of item the request made on an idle
// connection with markers queued takes. Markers, when every queued marker
// item may leave now: the batches then follow in a second request at once,
// so both kinds leave this round. Otherwise the kind more partitions may
// send next (markers on a tie), as the partitions left at the other kind
// wait a round: taking the kind of the first item in arrival order instead
// left partitions out of step, a request for each kind every round.
func (s *sink) markersFirstLocked() bool {
	var markers, batches, stuck int
	window := s.reach().window
	head := map[topicPart]bool{} // partition → its head run is markers
	for _, p := range s.queue {
		marker := p.markers > 0
		inRun, seen := head[p.tp]
		switch {
		case s.failed[p.tp]:
		case !seen:
			head[p.tp] = marker
			switch {
			case marker && s.busy[p.tp] == 0:
				markers++
			case marker:
				stuck++
				head[p.tp] = false
			case s.busy[p.tp] < window:
				batches++
			}
		case marker && inRun:
			// Markers in a row behind the head's leave with it.
		case marker:
			stuck++
			head[p.tp] = false
		default:
			head[p.tp] = false
		}
	}
	return markers > 0 && (stuck == 0 || markers >= batches)
}

// issueLoop issues the outbox's requests one after another.
func (s *sink) issueLoop() {
	for {
		s.mu.Lock()
		if len(s.outbox) == 0 {
			s.issuing = false
			s.mu.Unlock()
			return
		}
		r := s.outbox[0]
		s.outbox[0] = nil
		s.outbox = s.outbox[1:]
		s.mu.Unlock()
		s.send(r)
	}
}

// send issues one request (returning once it is on the wire) and answers
// each of its items when the response comes.
func (s *sink) send(r *request) {
	// The gates are asked here, when the request leaves, not when its
	// items were queued: each item's own (its mirror's owner) for that item
	// alone, so that a mirror this agent no longer owns stops without
	// failing the others' batches. Items of one mirror share its gate: each
	// is asked once. Without gates (an agent alone), nothing is asked or
	// allocated.
	var asked map[*writegate.Gate]error
	send := r.items
	for i, p := range r.items {
		var err error
		if p.gate != nil {
			var ok bool
			if err, ok = asked[p.gate]; !ok {
				err = p.gate.Check()
				if asked == nil {
					asked = map[*writegate.Gate]error{}
				}
				asked[p.gate] = err
			}
		}
		switch {
		case err != nil && r.refused == nil:
			r.refused = map[int]error{i: err}
			send = slices.Clone(r.items[:i])
		case err != nil:
			r.refused[i] = err
		case r.refused != nil:
			send = append(send, p)
		}
	}
	var answer *call // nil when every item was refused: no broker asked
	switch {
	case len(send) == 0:
	case r.markers:
		answer = s.w.issue(s.lane, markersRequest(send))
	default:
		answer = s.w.issue(s.lane, s.w.produceRequest(nil, send))
	}
	go s.finish(r, answer)
}

// produceRequest is an acks=all ProduceRequest of the items' batches, of
// the transactional id txnID when not nil.
func (w *Writer) produceRequest(txnID *string, items []*pending) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TransactionID = txnID
	req.TimeoutMillis = int32(w.timeout / time.Millisecond)
	topics := map[string]int{} // index in req.Topics
	for _, p := range items {
		i, ok := topics[p.tp.topic]
		if !ok {
			i = len(req.Topics)
			topics[p.tp.topic] = i
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = p.tp.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p.tp.partition
		rp.Records = p.batch
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return req
}

// markersRequest writes each item's markers: the request's k-th marker
// entry names every partition with more than k markers among its items,
// which take the entries in their order (the broker appends the entries
// in order).
func markersRequest(items []*pending) *kmsg.WriteTxnMarkersRequest {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	first := make([]int, len(items)) // the entry of each item's first marker
	entries := map[topicPart]int{}
	for i, p := range items {
		first[i] = entries[p.tp]
		entries[p.tp] += p.markers
	}
	for k := 0; ; k++ {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		for i, p := range items {
			if k < first[i] || k >= first[i]+p.markers {
				continue
			}
			if len(m.Topics) == 0 {
				// One producer per entry: items of different producers
				// would need entries of their own; the mirror uses one.
				m.ProducerID, m.ProducerEpoch = p.producer.ID, p.producer.Epoch
			}
			t := len(m.Topics) - 1
			if t < 0 || m.Topics[t].Topic != p.tp.topic {
				mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
				mt.Topic = p.tp.topic
				m.Topics = append(m.Topics, mt)
				t++
			}
			m.Topics[t].Partitions = append(m.Topics[t].Partitions, p.tp.partition)
		}
		if len(m.Topics) == 0 {
			return req
		}
		req.Markers = append(req.Markers, m)
	}
}

// finish answers each item of r once its response (or error) came; a is
// nil when every item was refused before the request left.
func (s *sink) finish(r *request, a *call) {
	if a != nil {
		<-a.done
	}
	results := make([]produced, len(r.items))
	switch {
	case a == nil:
		// Every item is in r.refused, answered below; no broker said
		// anything of the partitions' leaders.
	case a.err != nil:
		for _, p := range r.items {
			s.w.meta.Invalidate(p.tp.topic)
		}
		for i, p := range r.items {
			results[i] = produced{-1, &ProduceError{Topic: p.tp.topic, Partition: p.tp.partition, Markers: r.markers, Err: a.err}}
		}
	case r.markers:
		errs := map[topicPart]error{}
		for _, m := range a.resp.(*kmsg.WriteTxnMarkersResponse).Markers {
			for _, t := range m.Topics {
				for _, rp := range t.Partitions {
					tp := topicPart{t.Topic, rp.Partition}
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil && errs[tp] == nil {
						errs[tp] = err
					} else if _, ok := errs[tp]; !ok {
						errs[tp] = nil
					}
				}
			}
		}
		for i, p := range r.items {
			err, ok := errs[p.tp]
			if !ok {
				err = errors.New("malformed response: no answer for the partition")
			}
			results[i] = produced{-1, nil}
			if err != nil {
				if leaders.IsLeadershipError(err) {
					s.w.meta.Invalidate(p.tp.topic)
				}
				results[i].err = &ProduceError{Topic: p.tp.topic, Partition: p.tp.partition, Markers: true, Err: err}
			}
		}
	default:
		answers := map[topicPart]*kmsg.ProduceResponseTopicPartition{}
		resp := a.resp.(*kmsg.ProduceResponse)
		for i := range resp.Topics {
			t := &resp.Topics[i]
			for j := range t.Partitions {
				answers[topicPart{t.Topic, t.Partitions[j].Partition}] = &t.Partitions[j]
			}
		}
		for i, p := range r.items {
			results[i] = s.w.answer(p.tp, answers[p.tp])
		}
	}

	for i, err := range r.refused {
		p := r.items[i]
		results[i] = produced{-1, &ProduceError{Topic: p.tp.topic, Partition: p.tp.partition, Markers: r.markers, Err: err}}
	}

	s.mu.Lock()
	s.inflight--
	for i, p := range r.items {
		if s.busy[p.tp]--; s.busy[p.tp] <= 0 {
			delete(s.busy, p.tp)
		}
		if results[i].err != nil {
			s.failed[p.tp] = true
		}
		p.answer(results[i])
		s.settleLocked(p.tp)
		if results[i].err == nil && !p.gone && s.busy[p.tp] == 0 && s.queued[p.tp] == 0 {
			s.returning[p.tp] = true
		}
	}
	if len(s.returning) > 0 && s.grace == nil {
		s.grace = time.AfterFunc(returnGrace, s.graceOver)
	}
	s.maybeSendLocked()
	s.mu.Unlock()
}

// graceOver sends what is pending once the callers of the last answered
// request had returnGrace to come back.
func (s *sink) graceOver() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.returning)
	s.grace = nil
	s.maybeSendLocked()
}

// answer turns a partition's produce response into a result.
func (w *Writer) answer(tp topicPart, a *kmsg.ProduceResponseTopicPartition) produced {
	if a == nil {
		return produced{-1, &ProduceError{Topic: tp.topic, Partition: tp.partition, Err: fmt.Errorf("malformed produce response: no answer for the partition")}}
	}
	if err := kerr.ErrorForCode(a.ErrorCode); err != nil {
		if leaders.IsLeadershipError(err) {
			w.meta.Invalidate(tp.topic)
		}
		msg := ""
		if a.ErrorMessage != nil {
			msg = *a.ErrorMessage
		}
		return produced{-1, &ProduceError{Topic: tp.topic, Partition: tp.partition, Err: err, Message: msg}}
	}
	return produced{a.BaseOffset, nil}
}
