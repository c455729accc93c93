package writer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
)

// Plain (non-transactional) produces are coalesced per destination broker,
// as franz-go's producer does with its sinks: concurrent Produce calls for
// different partitions led by the same broker go out in one ProduceRequest,
// one batch per partition. Each broker has a sink with a queue of pending
// batches; whenever fewer than maxInflight requests are in flight (a request
// was answered, or a batch arrives at an idle sink), what is pending is put
// in new requests and sent.
//
// Guarantees:
//   - A request carries at most one batch per partition (Kafka refuses
//     more), and batches of one partition leave in arrival order, at most
//     maxPerPartition of them in requests not yet answered. Requests to a broker
//     go on the wire in the order they were made (issue), so a partition's
//     batches reach the broker in sequence order.
//   - Every batch gets its own answer: the partition's error code as a
//     ProduceError (leadership errors invalidate the leader cache), or a
//     transport error for every batch of the request.
//   - A caller whose context ends gets its context's error at once. A batch
//     still queued is dropped; a batch already sent stays in its request,
//     which is cancelled only when every caller in it has given up, and it
//     counts against its partition's window until the request returns.
//   - Transactional produces are never coalesced (a request carries the
//     batches of one transactional id only): ProduceTxn sends them alone,
//     through the same ordered issue.
const (
	// defaultMaxInflight is the number of produce requests a sink keeps in
	// flight to its broker. franz-go sends every produce request to a
	// broker over one connection and Kafka reads the next request of a
	// connection only once it answered the last, so requests in flight
	// hide the network round trip (a wide-area link), not the broker's
	// acks=all wait.
	defaultMaxInflight = 16
	// defaultMaxPerPartition is how many batches of one partition may be
	// in requests not yet answered. Kafka keeps the metadata of a
	// producer's last 5 batches per partition to recognize a resent one,
	// which is why a producer that retries batches keeps 5 in flight; the
	// mirror never resends a batch on its own: after an error it reads the
	// destination end and writes from there, and a batch the broker no
	// longer recognizes is refused out of sequence, never appended twice
	// (only the next sequence is appended, and it is the same batch at the
	// same offset). So the window is what a wide-area link needs: 16 source
	// batches of a partition per 50 ms round trip.
	defaultMaxPerPartition = 16
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
	node int32

	mu       sync.Mutex
	queue    []*pending        // arrival order
	busy     map[topicPart]int // batches of each partition in requests not yet answered
	inflight int               // requests made and not yet answered
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

type pending struct {
	tp       topicPart
	batch    []byte
	done     chan produced // buffered: the sender never blocks
	answered chan struct{} // closed once done holds the answer
	req      *request      // set once sent, guarded by sink.mu
	gone     bool          // the caller gave up, guarded by sink.mu
}

type produced struct {
	offset int64
	err    error
}

// request is one coalesced ProduceRequest in flight.
type request struct {
	ctx     context.Context
	cancel  context.CancelFunc
	batches []*pending
	waiting int // callers still waiting, guarded by sink.mu
}

// sink returns the broker's sink, making it on first use.
func (w *Writer) sink(node int32) *sink {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sinks[node]
	if s == nil {
		s = &sink{w: w, node: node, busy: map[topicPart]int{}, returning: map[topicPart]bool{}}
		w.sinks[node] = s
	}
	return s
}

// Pending is a batch given to ProduceAsync: queued, in flight or answered.
type Pending struct {
	s     *sink
	p     *pending
	topic string
	part  int32
	res   *produced // the answer once Wait or Ready took it
}

// Done is closed once the batch is answered; Wait then returns at once.
func (x *Pending) Done() <-chan struct{} { return x.p.answered }

// Ready says whether the batch is answered, without waiting.
func (x *Pending) Ready() bool {
	select {
	case <-x.p.answered:
		return true
	default:
		return x.res != nil
	}
}

// Wait returns the offset the leader gave the batch's first record, or its
// error; when ctx ends first it returns ctx's error (see the sink's
// guarantees for what becomes of the batch).
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
	case r := <-x.p.done: // answered meanwhile: the batch is in
		x.res = &r
		return r.offset, r.err
	default:
	}
	s, p := x.s, x.p
	s.mu.Lock()
	p.gone = true
	if p.req == nil {
		for i, q := range s.queue {
			if q == p {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
	} else if p.req.waiting--; p.req.waiting == 0 {
		p.req.cancel()
	}
	s.mu.Unlock()
	x.res = &produced{-1, &ProduceError{Topic: x.topic, Partition: x.part, Err: ctx.Err()}}
	return x.res.offset, x.res.err
}

// enqueue queues one batch for the broker.
func (s *sink) enqueue(topic string, partition int32, batch []byte) *Pending {
	p := &pending{tp: topicPart{topic, partition}, batch: batch, done: make(chan produced, 1), answered: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, p)
	delete(s.returning, p.tp)
	s.maybeSendLocked()
	s.mu.Unlock()
	return &Pending{s: s, p: p, topic: topic, part: partition}
}

// maybeSendLocked makes requests of what is pending while fewer than
// maxInflight are in flight, and has them issued in order.
func (s *sink) maybeSendLocked() {
	if len(s.returning) > 0 {
		return // the grace timer or the last caller back sends
	}
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
	for s.inflight < s.w.maxInflight {
		r := s.takeLocked()
		if r == nil {
			break
		}
		s.inflight++
		s.outbox = append(s.outbox, r)
	}
	if len(s.outbox) > 0 && !s.issuing {
		s.issuing = true
		go s.issueLoop()
	}
}

// takeLocked moves queued batches into a new request: in arrival order, one
// per partition, none of a partition whose window is full or which has an
// earlier batch left queued, up to maxRequestBytes.
func (s *sink) takeLocked() *request {
	var (
		r     *request
		bytes int
		kept  = s.queue[:0]
		held  map[topicPart]bool // partitions in r, or with a batch kept queued
	)
	for _, p := range s.queue {
		if held[p.tp] || s.busy[p.tp] >= s.w.maxPerPartition || (r != nil && bytes+len(p.batch) > maxRequestBytes) {
			if held == nil {
				held = map[topicPart]bool{}
			}
			held[p.tp] = true
			kept = append(kept, p)
			continue
		}
		if r == nil {
			r = &request{}
		}
		if held == nil {
			held = map[topicPart]bool{}
		}
		held[p.tp] = true
		s.busy[p.tp]++
		bytes += len(p.batch)
		p.req = r
		r.batches = append(r.batches, p)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if r != nil {
		r.waiting = len(r.batches)
		r.ctx, r.cancel = context.WithCancel(context.Background())
	}
	return r
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
// each of its batches when the response comes.
func (s *sink) send(r *request) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(s.w.timeout / time.Millisecond)
	topics := map[string]int{} // index in req.Topics
	for _, p := range r.batches {
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
	// The gate is asked here, when the request leaves, not when its
	// batches were queued.
	var answer <-chan issued
	if err := s.w.allowed(); err != nil {
		ch := make(chan issued, 1)
		ch <- issued{err: err}
		answer = ch
	} else {
		answer = s.w.issue(r.ctx, s.node, req)
	}
	go s.finish(r, topics, answer)
}

// finish answers each batch of r once its response (or error) came.
func (s *sink) finish(r *request, topics map[string]int, answer <-chan issued) {
	defer r.cancel()
	a := <-answer
	results := make([]produced, len(r.batches))
	if a.err != nil {
		for t := range topics {
			s.w.meta.Invalidate(t)
		}
		for i, p := range r.batches {
			results[i] = produced{-1, &ProduceError{Topic: p.tp.topic, Partition: p.tp.partition, Err: a.err}}
		}
	} else {
		answers := map[topicPart]*kmsg.ProduceResponseTopicPartition{}
		resp := a.resp.(*kmsg.ProduceResponse)
		for i := range resp.Topics {
			t := &resp.Topics[i]
			for j := range t.Partitions {
				answers[topicPart{t.Topic, t.Partitions[j].Partition}] = &t.Partitions[j]
			}
		}
		for i, p := range r.batches {
			results[i] = s.w.answer(p.tp, answers[p.tp])
		}
	}

	s.mu.Lock()
	s.inflight--
	for i, p := range r.batches {
		if s.busy[p.tp]--; s.busy[p.tp] <= 0 {
			delete(s.busy, p.tp)
		}
		p.done <- results[i]
		close(p.answered)
		if results[i].err == nil && !p.gone && s.busy[p.tp] == 0 && !s.queuedLocked(p.tp) {
			s.returning[p.tp] = true
		}
	}
	if len(s.returning) > 0 && s.grace == nil {
		s.grace = time.AfterFunc(returnGrace, s.graceOver)
	}
	s.maybeSendLocked()
	s.mu.Unlock()
}

// queuedLocked says whether a batch of tp waits in the queue: its caller
// already came back.
func (s *sink) queuedLocked(tp topicPart) bool {
	for _, p := range s.queue {
		if p.tp == tp {
			return true
		}
	}
	return false
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
