// Package writer appends rewritten record batches to destination partitions
// and reads back what the destination holds (log bounds, the agent's last
// sequence), which is where every resume starts.
package writer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// ClientOpts returns base plus the options a destination client needs: the
// transactional protocol pinned to TV1 (Produce ≤ v11, AddPartitionsToTxn ≤
// v3, EndTxn ≤ v4) so that a negotiated newer version never switches the
// broker to implicit-add semantics under the agent, and acks=all.
func ClientOpts(base []kgo.Opt) []kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(0, 11) // Produce
	v.SetMaxKeyVersion(24, 3) // AddPartitionsToTxn
	v.SetMaxKeyVersion(26, 4) // EndTxn
	v.SetMaxKeyVersion(28, 3) // TxnOffsetCommit (pre-TV2)
	return append(base[:len(base):len(base)],
		kgo.MaxVersions(v),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithHooks(&wireOrder{written: map[int32]chan struct{}{}, locks: map[int32]*sync.Mutex{}}),
	)
}

// Writer writes to one destination cluster.
type Writer struct {
	cl              *kgo.Client
	meta            *leaders.Cache
	timeout         time.Duration
	maxInflight     int // produce requests in flight per broker sink
	maxPerPartition int // batches of one partition in requests not yet answered
	// order issues produce requests in order (nil when the client was
	// not made with ClientOpts: each then waits for the last's answer).
	order *wireOrder

	mu    sync.Mutex
	sinks map[int32]*sink // by destination broker

	// gate, when set, is asked right before every request that writes
	// (SetGate).
	gate func() error
}

// SetGate makes the writer ask gate right before it sends any request that
// writes to the destination (produce, transaction requests, markers,
// DeleteRecords, producer ids), and fail that write with gate's error
// instead of sending it. The agent's writer lease (agent/lease) is the
// gate: an agent that may no longer write stops at its next request, even
// one already queued. Call it before the first write.
func (w *Writer) SetGate(gate func() error) { w.gate = gate }

// allowed returns the gate's verdict on a write about to be sent.
func (w *Writer) allowed() error {
	if w.gate == nil {
		return nil
	}
	return w.gate()
}

// New returns a writer using cl, which must have been made with ClientOpts.
func New(cl *kgo.Client, meta *leaders.Cache) *Writer {
	w := &Writer{cl: cl, meta: meta, timeout: 30 * time.Second, maxInflight: defaultMaxInflight,
		maxPerPartition: defaultMaxPerPartition, sinks: map[int32]*sink{}}
	for _, v := range cl.OptValues(kgo.WithHooks) {
		hs, _ := v.([]kgo.Hook)
		for _, h := range hs {
			if o, ok := h.(*wireOrder); ok {
				w.order = o
			}
		}
	}
	return w
}

// issued is a produce request's answer.
type issued struct {
	resp kmsg.Response
	err  error
}

// wireOrder puts a client's produce requests to a broker on the wire in
// the order they are issued. kgo writes a broker's requests in the order
// they are pushed, but Broker.Request pushes in its caller's goroutine and
// blocks until the answer, so requests issued from several goroutines may
// overtake each other. wireOrder lets one request at a time per broker be
// between its push and its write, which kgo reports through this hook
// (HookBrokerWrite): a partition's pipelined batches then reach the broker
// in sequence order.
type wireOrder struct {
	mu      sync.Mutex
	written map[int32]chan struct{} // by node: the request being written
	locks   map[int32]*sync.Mutex   // by node: held from push to write
}

func (o *wireOrder) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key != int16(kmsg.Produce) {
		return
	}
	o.mu.Lock()
	ch := o.written[meta.NodeID]
	delete(o.written, meta.NodeID)
	o.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// issue sends req to node and returns once it is on the wire (or
// answered); the answer comes on the channel.
func (w *Writer) issue(ctx context.Context, node int32, req *kmsg.ProduceRequest) <-chan issued {
	out := make(chan issued, 1)
	returned := make(chan struct{})
	send := func() {
		go func() {
			resp, err := w.cl.Broker(int(node)).Request(ctx, req)
			out <- issued{resp, err}
			close(returned)
		}()
	}
	o := w.order
	if o == nil {
		send()
		<-returned
		return out
	}
	o.mu.Lock()
	lock := o.locks[node]
	if lock == nil {
		lock = &sync.Mutex{}
		o.locks[node] = lock
	}
	o.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	written := make(chan struct{})
	o.mu.Lock()
	o.written[node] = written
	o.mu.Unlock()
	send()
	select {
	case <-written:
	case <-returned:
		o.mu.Lock()
		if o.written[node] == written {
			delete(o.written, node)
		}
		o.mu.Unlock()
	}
	return out
}

// Client returns the destination client.
func (w *Writer) Client() *kgo.Client { return w.cl }

// Meta returns the destination's leader cache.
func (w *Writer) Meta() *leaders.Cache { return w.meta }

// InitProducerID allocates an idempotent producer id (no transactional id).
func (w *Writer) InitProducerID(ctx context.Context) (int64, int16, error) {
	if err := w.allowed(); err != nil {
		return 0, 0, fmt.Errorf("allocating a producer id on the destination: %w", err)
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = -1
	req.ProducerID = -1
	req.ProducerEpoch = -1
	resp, err := req.RequestWith(ctx, w.cl)
	if err != nil {
		return 0, 0, fmt.Errorf("allocating a producer id on the destination: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, 0, fmt.Errorf("allocating a producer id on the destination: %w", err)
	}
	return resp.ProducerID, resp.ProducerEpoch, nil
}

// ProduceError is a partition-level error from a produce.
type ProduceError struct {
	Topic     string
	Partition int32
	Err       error
	Message   string // the broker's error message, if any
}

func (e *ProduceError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("producing to %s/%d: %v: %s", e.Topic, e.Partition, e.Err, e.Message)
	}
	return fmt.Sprintf("producing to %s/%d: %v", e.Topic, e.Partition, e.Err)
}

func (e *ProduceError) Unwrap() error { return e.Err }

// Produce appends one batch to a partition with acks=all and returns the
// offset the leader gave its first record (ProduceAsync, then Wait).
func (w *Writer) Produce(ctx context.Context, topic string, partition int32, batch []byte) (int64, error) {
	x, err := w.ProduceAsync(ctx, topic, partition, batch)
	if err != nil {
		return -1, err
	}
	return x.Wait(ctx)
}

// ProduceAsync queues one batch for a partition with acks=all and returns
// at once; Wait gives the offset the leader gave its first record. A
// duplicate of a batch already appended (same producer id, epoch and
// sequences) gets the original offset, as Kafka answers. Batches for
// different partitions led by the same broker share produce requests, and
// up to 16 batches of one partition are in flight at once, sent in call
// order (sink.go); a caller pipelining one partition's batches must call in
// sequence order, from one goroutine.
func (w *Writer) ProduceAsync(ctx context.Context, topic string, partition int32, batch []byte) (*Pending, error) {
	l, err := w.meta.Leader(ctx, topic, partition)
	if err != nil {
		return nil, &ProduceError{Topic: topic, Partition: partition, Err: err}
	}
	return w.sink(l.Leader).enqueue(topic, partition, batch), nil
}

// produceAlone sends one batch in a request of its own: a transactional
// batch, whose request names the transactional id.
func (w *Writer) produceAlone(ctx context.Context, txnID *string, topic string, partition int32, batch []byte) (int64, error) {
	l, err := w.meta.Leader(ctx, topic, partition)
	if err != nil {
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: err}
	}
	if err := w.allowed(); err != nil {
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: err}
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TransactionID = txnID
	req.TimeoutMillis = int32(w.timeout / time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	a := <-w.issue(ctx, l.Leader, req)
	if a.err != nil {
		w.meta.Invalidate(topic)
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: a.err}
	}
	resp := a.resp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: fmt.Errorf("malformed produce response")}
	}
	r := w.answer(topicPart{topic, partition}, &resp.Topics[0].Partitions[0])
	return r.offset, r.err
}

// Bounds returns a destination partition's log start and high watermark.
func (w *Writer) Bounds(ctx context.Context, topic string, partition int32) (leaders.Bounds, error) {
	return w.meta.Bounds(ctx, topic, partition)
}

// ScanTail calls fn with the header of every batch in [logStart, end) of a
// destination partition, from the last one backwards, until fn returns true.
// It reads in windows that grow from the end, so finding the agent's last
// batch costs one small read in the usual case.
func (w *Writer) ScanTail(ctx context.Context, topic string, partition int32, logStart, end int64, fn func(recordbatch.Header) (stop bool)) error {
	tp := fetcher.TP{Topic: topic, Partition: partition}
	upper := end // every batch starting at or above upper was visited
	window := int64(64)
	for upper > logStart {
		from := max(logStart, upper-window)
		var hs []recordbatch.Header
		for at := from; at < upper; {
			c, err := fetcher.ReadAt(ctx, w.cl, w.meta, tp, at, 8<<20)
			if err != nil {
				return fmt.Errorf("reading the destination tail: %w", err)
			}
			next := at
			for b, err := range recordbatch.All(c.Records) {
				if err != nil {
					return fmt.Errorf("reading the destination tail of %s: %w", tp, err)
				}
				if b.BaseOffset >= upper {
					next = upper
					break
				}
				hs = append(hs, b.Header)
				next = b.LastOffset() + 1
			}
			if next <= at {
				break
			}
			at = next
		}
		for i := len(hs) - 1; i >= 0; i-- {
			if fn(hs[i]) {
				return nil
			}
		}
		if len(hs) > 0 && hs[0].BaseOffset < from {
			upper = hs[0].BaseOffset
		} else {
			upper = from
		}
		window *= 16
	}
	return nil
}

// DeleteRecords moves a destination partition's log start to offset.
func (w *Writer) DeleteRecords(ctx context.Context, topic string, partition int32, offset int64) error {
	l, err := w.meta.Leader(ctx, topic, partition)
	if err != nil {
		return fmt.Errorf("deleting records of %s/%d below %d: %w", topic, partition, offset, err)
	}
	if err := w.allowed(); err != nil {
		return fmt.Errorf("deleting records of %s/%d below %d: %w", topic, partition, offset, err)
	}
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = int32(w.timeout / time.Millisecond)
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition = partition
	rp.Offset = offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := w.cl.Broker(int(l.Leader)).Request(ctx, req)
	if err != nil {
		w.meta.Invalidate(topic)
		return fmt.Errorf("deleting records of %s/%d below %d: %w", topic, partition, offset, err)
	}
	resp := kresp.(*kmsg.DeleteRecordsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("deleting records of %s/%d below %d: malformed response", topic, partition, offset)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		if leaders.IsLeadershipError(err) {
			w.meta.Invalidate(topic)
		}
		return fmt.Errorf("deleting records of %s/%d below %d: %w", topic, partition, offset, err)
	}
	return nil
}
