// Package writer appends rewritten record batches to destination partitions
// and reads back what the destination holds (log bounds, the agent's last
// sequence), which is where every resume starts.
package writer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writegate"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// ClientOpts returns base plus the options a destination client needs: the
// transactional protocol pinned to TV1 (Produce ≤ v11, AddPartitionsToTxn ≤
// v3, EndTxn ≤ v4) so that a negotiated newer version never switches the
// broker to implicit-add semantics under the agent, acks=all, and a hook
// that closes the connections of the client's writer with it.
func ClientOpts(base []kgo.Opt) []kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(0, produceMaxVersion) // Produce
	v.SetMaxKeyVersion(24, 3)                // AddPartitionsToTxn
	v.SetMaxKeyVersion(26, 4)                // EndTxn
	v.SetMaxKeyVersion(28, 3)                // TxnOffsetCommit (pre-TV2)
	return append(base[:len(base):len(base)],
		kgo.MaxVersions(v),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithHooks(&closeHook{}),
	)
}

// closeHook closes a writer's connections when its client closes.
type closeHook struct {
	mu sync.Mutex
	ws []*Writer
}

func (h *closeHook) OnClientClosed(*kgo.Client) {
	h.mu.Lock()
	ws := h.ws
	h.mu.Unlock()
	for _, w := range ws {
		w.Close()
	}
}

// Writer writes to one destination cluster.
type Writer struct {
	cl      *kgo.Client
	meta    *leaders.Cache
	timeout time.Duration
	// near and far are how the writer writes to a broker that answers
	// within farRTT and to one that does not (reach).
	near, far reach
	farRTT    time.Duration

	dialMu sync.Mutex // held while an ordered connection opens
	mu     sync.Mutex
	sinks  map[lane]*sink
	conns  map[lane]*orderedConn
	// laneOfTP is each partition's lane, laneUse how many partitions each
	// lane carries (laneOf).
	laneOfTP map[topicPart]laneAt
	laneUse  map[lane]int
	// rtts holds the round trip measured to each broker (measure); a
	// broker not in it is written to as a near one.
	rtts   map[int32]time.Duration
	closed bool

	// markersDeadline: SetMarkersDeadline.
	markersDeadline time.Duration
}

// SetMarkersDeadline makes the writer give up on filler markers (a
// WriteTxnMarkers request) that the broker has not answered within d: it
// resets the connection carrying them (an RST: the kernel drops what the
// broker has not received yet, which then never arrives) and answers them,
// and what followed them on that connection, with an error; their
// partitions go back to the destination end. Markers have no sequence
// number and no producer epoch, so nothing on the broker refuses them late:
// in a group of agents, with d within the member's write grace, the
// markers an agent sent can no longer arrive after its session ran out and
// another agent writes the partition. Call it before the first write.
func (w *Writer) SetMarkersDeadline(d time.Duration) { w.markersDeadline = d }

// New returns a writer using cl, which must have been made with ClientOpts.
func New(cl *kgo.Client, meta *leaders.Cache) *Writer {
	w := &Writer{cl: cl, meta: meta, timeout: 30 * time.Second, near: nearReach, far: farReach, farRTT: farRTT,
		sinks: map[lane]*sink{}, conns: map[lane]*orderedConn{},
		laneOfTP: map[topicPart]laneAt{}, laneUse: map[lane]int{}, rtts: map[int32]time.Duration{}}
	for _, v := range cl.OptValues(kgo.WithHooks) {
		hs, _ := v.([]kgo.Hook)
		for _, h := range hs {
			if c, ok := h.(*closeHook); ok {
				c.mu.Lock()
				c.ws = append(c.ws, w)
				c.mu.Unlock()
			}
		}
	}
	return w
}

// issue writes req to lane l's ordered connection (conn.go) and returns
// its call once the request is on the wire, or a call already done with the
// error that kept it off. Requests issued one after another reach the
// broker in that order.
func (w *Writer) issue(l lane, req kmsg.Request) *call {
	count(req)
	c, err := w.ordered(l)
	if err == nil {
		var k *call
		if k, err = c.send(req); err == nil {
			return k
		}
	}
	return failedCall(req, err)
}

// Client returns the destination client.
func (w *Writer) Client() *kgo.Client { return w.cl }

// Meta returns the destination's leader cache.
func (w *Writer) Meta() *leaders.Cache { return w.meta }

// InitProducerID allocates an idempotent producer id (no transactional id).
func (w *Writer) InitProducerID(ctx context.Context) (int64, int16, error) {
	if err := writegate.Check(ctx); err != nil {
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
	Markers   bool // the write was of markers (MarkersAsync), not a batch
	Err       error
	Message   string // the broker's error message, if any
}

func (e *ProduceError) Error() string {
	doing := "producing to"
	if e.Markers {
		doing = "writing markers to"
	}
	if e.Message != "" {
		return fmt.Sprintf("%s %s/%d: %v: %s", doing, e.Topic, e.Partition, e.Err, e.Message)
	}
	return fmt.Sprintf("%s %s/%d: %v", doing, e.Topic, e.Partition, e.Err)
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
// up to Window batches of one partition are in flight at once, sent in call
// order (sink.go); a caller pipelining one partition's batches must call in
// sequence order, from one goroutine. The checks of ctx (agent/writegate)
// are asked when the batch's request leaves.
func (w *Writer) ProduceAsync(ctx context.Context, topic string, partition int32, batch []byte) (*Pending, error) {
	l, err := w.meta.Leader(ctx, topic, partition)
	if err != nil {
		return nil, &ProduceError{Topic: topic, Partition: partition, Err: err}
	}
	tp := topicPart{topic, partition}
	return w.sink(ctx, l.Leader, tp).enqueue(&pending{tp: tp, batch: batch, gate: writegate.From(ctx)}), nil
}

// MarkersAsync queues n ABORT markers of producer p for a partition
// (WriteTxnMarkers, the admin abort path of KIP-664: no transaction
// coordinator, one offset each) behind the items queued for it before, and
// returns at once. They go out once every earlier item of the partition is
// answered without error; the batches queued after them follow them to the
// broker without waiting (sink.go). Wait returns -1: the offsets the
// markers took show in where the next batch lands. It needs ALTER or
// CLUSTER_ACTION on the destination cluster.
func (w *Writer) MarkersAsync(ctx context.Context, p Producer, topic string, partition int32, n int) (*Pending, error) {
	l, err := w.meta.Leader(ctx, topic, partition)
	if err != nil {
		return nil, &ProduceError{Topic: topic, Partition: partition, Markers: true, Err: err}
	}
	tp := topicPart{topic, partition}
	return w.sink(ctx, l.Leader, tp).enqueue(&pending{tp: tp, markers: n, producer: p, gate: writegate.From(ctx)}), nil
}

// produceAlone sends one batch in a request of its own: a transactional
// batch, whose request names the transactional id.
func (w *Writer) produceAlone(ctx context.Context, txnID *string, topic string, partition int32, batch []byte) (int64, error) {
	l, err := w.meta.Leader(ctx, topic, partition)
	if err != nil {
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: err}
	}
	if err := writegate.Check(ctx); err != nil {
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: err}
	}
	req := w.produceRequest(txnID, []*pending{{tp: topicPart{topic, partition}, batch: batch}})
	a := w.issue(w.laneOf(ctx, l.Leader, topic, partition), req)
	select {
	case <-a.done:
	case <-ctx.Done():
		return -1, &ProduceError{Topic: topic, Partition: partition, Err: ctx.Err()}
	}
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
	if err := writegate.Check(ctx); err != nil {
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

// Stats counts the requests every Writer of this process sent to
// destination brokers since it started, for the agent's metrics: each
// request costs a broker a fixed share of its work, whatever it carries,
// so batches (or markers) per request show how well writes coalesce.
type Stats struct {
	Produce, ProduceBatches int64 // plain produce requests and their batches
	Markers, MarkersWritten int64 // WriteTxnMarkers requests and their markers
	ProduceTxn              int64 // transactional produce requests (one batch each)
	// Transactions the agent ended through the coordinator (EndTxn
	// answered): each costs the coordinator two log appends and a marker
	// per partition.
	Transactions int64
}

var stats struct {
	produce, produceBatches, markers, markersWritten, produceTxn, transactions atomic.Int64
}

// ReadStats returns the process-wide write request counters.
func ReadStats() Stats {
	return Stats{
		Produce: stats.produce.Load(), ProduceBatches: stats.produceBatches.Load(),
		Markers: stats.markers.Load(), MarkersWritten: stats.markersWritten.Load(),
		ProduceTxn: stats.produceTxn.Load(), Transactions: stats.transactions.Load(),
	}
}

// Reach is what the writers of this process measured of one destination
// broker (Writer.measure), for the agent's metrics.
type Reach struct {
	Addr  string        // the broker's address
	RTT   time.Duration // the shortest of its first connection's ApiVersions round trips
	Lanes int           // connections the writer opens to it at most: 2 when it is far
}

// reaches holds each measured broker's Reach by address.
var reaches sync.Map

// ReadReaches returns the destination brokers measured so far, by address.
func ReadReaches() []Reach {
	var rs []Reach
	reaches.Range(func(_, v any) bool {
		rs = append(rs, v.(Reach))
		return true
	})
	slices.SortFunc(rs, func(a, b Reach) int { return strings.Compare(a.Addr, b.Addr) })
	return rs
}

// count adds req, about to be sent, to the process-wide counters.
func count(req kmsg.Request) {
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		if r.TransactionID != nil {
			stats.produceTxn.Add(1)
			return
		}
		stats.produce.Add(1)
		var n int64
		for _, t := range r.Topics {
			n += int64(len(t.Partitions))
		}
		stats.produceBatches.Add(n)
	case *kmsg.WriteTxnMarkersRequest:
		stats.markers.Add(1)
		var n int64
		for _, m := range r.Markers {
			for _, t := range m.Topics {
				n += int64(len(t.Partitions))
			}
		}
		stats.markersWritten.Add(n)
	}
}
