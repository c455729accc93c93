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
// was answered, or a batch arrives at an idle sink), a goroutine takes what
// is pending and sends it.
//
// Guarantees:
//   - A request carries at most one batch per partition, and a partition
//     never has two requests in flight: a batch waits in the queue while its
//     partition is busy, and batches of one partition leave in arrival order.
//     (Callers serialize per partition anyway; the sink does not rely on it.)
//   - Every batch gets its own answer: the partition's error code as a
//     ProduceError (leadership errors invalidate the leader cache), or a
//     transport error for every batch of the request.
//   - A caller whose context ends gets its context's error at once. A batch
//     still queued is dropped; a batch already sent stays in its request,
//     which is cancelled only when every caller in it has given up, and its
//     partition stays busy until the request returns.
//   - Transactional produces are never coalesced (a request carries the
//     batches of one transactional id only): ProduceTxn sends them alone.
const (
	// defaultMaxInflight is the number of produce requests a sink keeps in
	// flight to its broker. franz-go sends every produce request to a
	// broker over one connection and Kafka handles one request of a
	// connection at a time, so more requests in flight only hide the
	// network round trip, not the broker's acks=all wait, and they split
	// the pending batches over smaller requests: with 5 ms of broker latency
	// (BenchmarkSlowDestination) 4 in flight moved 23 MB/s, 1 moved 78.
	defaultMaxInflight = 1
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
	queue    []*pending         // arrival order
	busy     map[topicPart]bool // partitions with a batch in flight
	inflight int                // requests in flight
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
	tp    topicPart
	batch []byte
	done  chan produced // buffered: the sender never blocks
	req   *request      // set once sent, guarded by sink.mu
	gone  bool          // the caller gave up, guarded by sink.mu
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
		s = &sink{w: w, node: node, busy: map[topicPart]bool{}, returning: map[topicPart]bool{}}
		w.sinks[node] = s
	}
	return s
}

// produce queues one batch for the broker and waits for its answer or the
// end of ctx.
func (s *sink) produce(ctx context.Context, topic string, partition int32, batch []byte) (int64, error) {
	p := &pending{tp: topicPart{topic, partition}, batch: batch, done: make(chan produced, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, p)
	delete(s.returning, p.tp)
	s.maybeSendLocked()
	s.mu.Unlock()

	select {
	case r := <-p.done:
		return r.offset, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-p.done: // answered meanwhile: the batch is in
		return r.offset, r.err
	default:
	}
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
	return -1, &ProduceError{Topic: topic, Partition: partition, Err: ctx.Err()}
}

// maybeSendLocked sends what is pending while fewer than maxInflight
// requests are in flight.
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
			return
		}
		s.inflight++
		go s.send(r)
	}
}

// takeLocked moves the queued batches of partitions that are not busy, in
// arrival order and up to maxRequestBytes, into a new request.
func (s *sink) takeLocked() *request {
	var (
		r     *request
		bytes int
		kept  = s.queue[:0]
	)
	for _, p := range s.queue {
		if s.busy[p.tp] || (r != nil && bytes+len(p.batch) > maxRequestBytes) {
			kept = append(kept, p)
			continue
		}
		if r == nil {
			r = &request{}
		}
		s.busy[p.tp] = true
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

// send issues one request and answers each of its batches.
func (s *sink) send(r *request) {
	defer r.cancel()
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
	var kresp kmsg.Response
	err := s.w.allowed()
	if err == nil {
		kresp, err = s.w.cl.Broker(int(s.node)).Request(r.ctx, req)
	}

	results := make([]produced, len(r.batches))
	if err != nil {
		for t := range topics {
			s.w.meta.Invalidate(t)
		}
		for i, p := range r.batches {
			results[i] = produced{-1, &ProduceError{Topic: p.tp.topic, Partition: p.tp.partition, Err: err}}
		}
	} else {
		answers := map[topicPart]*kmsg.ProduceResponseTopicPartition{}
		resp := kresp.(*kmsg.ProduceResponse)
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
		delete(s.busy, p.tp)
		p.done <- results[i]
		if results[i].err == nil && !p.gone {
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
