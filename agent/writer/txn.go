package writer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/writegate"
)

// Producer is a destination producer id and epoch.
type Producer struct {
	ID    int64
	Epoch int16
}

// TxnState is what DescribeTransactions says of a transactional id.
type TxnState struct {
	// State is Kafka's: Empty, Ongoing, PrepareCommit, PrepareAbort,
	// CompleteCommit, CompleteAbort, Dead, PrepareEpochFence; "" when the
	// coordinator does not know the id.
	State    string
	Producer Producer
}

// Open says whether the transaction holds partitions that will get a marker.
func (s TxnState) Open() bool { return s.State == "Ongoing" }

// Settled says whether no marker of the id is still on its way.
func (s TxnState) Settled() bool {
	switch s.State {
	case "", "Empty", "CompleteCommit", "CompleteAbort", "Dead":
		return true
	}
	return false
}

// retryConcurrent retries fn while the coordinator answers
// CONCURRENT_TRANSACTIONS (markers of the previous transaction still in
// flight) or is loading, up to the context's end.
func retryConcurrent(ctx context.Context, fn func() error) error {
	backoff := 5 * time.Millisecond
	for {
		err := fn()
		if !errors.Is(err, kerr.ConcurrentTransactions) && !errors.Is(err, kerr.CoordinatorLoadInProgress) &&
			!errors.Is(err, kerr.NotCoordinator) && !errors.Is(err, kerr.CoordinatorNotAvailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// InitTxn runs InitProducerId for a transactional id: it bumps the epoch,
// fences every request of an older epoch, and aborts the id's open
// transaction (whose markers land now).
func (w *Writer) InitTxn(ctx context.Context, txnID string, timeout time.Duration) (Producer, error) {
	var p Producer
	err := retryConcurrent(ctx, func() error {
		if err := writegate.Check(ctx); err != nil {
			return err
		}
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(txnID)
		req.TransactionTimeoutMillis = int32(timeout / time.Millisecond)
		req.ProducerID = -1
		req.ProducerEpoch = -1
		resp, err := req.RequestWith(ctx, w.cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		p = Producer{ID: resp.ProducerID, Epoch: resp.ProducerEpoch}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("initializing transactional id %q on the destination: %w", txnID, err)
	}
	return p, nil
}

// AddPartition adds one partition to the id's transaction (TV1:
// AddPartitionsToTxn ≤ v3, pinned by ClientOpts), which makes EndTxn write a
// marker there even when no data was written.
func (w *Writer) AddPartition(ctx context.Context, txnID string, p Producer, topic string, partition int32) error {
	err := retryConcurrent(ctx, func() error {
		if err := writegate.Check(ctx); err != nil {
			return err
		}
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID = txnID
		req.ProducerID = p.ID
		req.ProducerEpoch = p.Epoch
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic = topic
		rt.Partitions = []int32{partition}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, w.cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adding %s/%d to transaction %q: %w", topic, partition, txnID, err)
	}
	return nil
}

// EndTxn commits or aborts the id's transaction (EndTxn ≤ v4). It returns
// once the coordinator has decided; the markers land after that
// (WaitSettled).
func (w *Writer) EndTxn(ctx context.Context, txnID string, p Producer, commit bool) error {
	err := retryConcurrent(ctx, func() error {
		if err := writegate.Check(ctx); err != nil {
			return err
		}
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = txnID
		req.ProducerID = p.ID
		req.ProducerEpoch = p.Epoch
		req.Commit = commit
		resp, err := req.RequestWith(ctx, w.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	if err != nil {
		return fmt.Errorf("ending transaction %q: %w", txnID, err)
	}
	stats.transactions.Add(1)
	return nil
}

// DescribeTxn returns the coordinator's view of a transactional id.
func (w *Writer) DescribeTxn(ctx context.Context, txnID string) (TxnState, error) {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txnID}
	resp, err := req.RequestWith(ctx, w.cl)
	if err != nil {
		return TxnState{}, fmt.Errorf("describing transaction %q: %w", txnID, err)
	}
	for _, s := range resp.TransactionStates {
		if s.TransactionalID != txnID {
			continue
		}
		if err := kerr.ErrorForCode(s.ErrorCode); err != nil {
			if errors.Is(err, kerr.TransactionalIDNotFound) {
				return TxnState{}, nil
			}
			return TxnState{}, fmt.Errorf("describing transaction %q: %w", txnID, err)
		}
		return TxnState{State: s.State, Producer: Producer{ID: s.ProducerID, Epoch: s.ProducerEpoch}}, nil
	}
	return TxnState{}, nil
}

// WaitSettled polls until every marker of the id has been written
// (Complete*, Empty or unknown): EndTxn returns after the coordinator's
// decision only, and the destination log end is meaningful only after.
func (w *Writer) WaitSettled(ctx context.Context, txnID string) (TxnState, error) {
	backoff := 2 * time.Millisecond
	for {
		s, err := w.DescribeTxn(ctx, txnID)
		if err != nil || s.Settled() {
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("waiting for the markers of transaction %q (state %s): %w", txnID, s.State, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// ProduceTxn appends one transactional batch (already rewritten with the
// transaction's producer id, epoch and sequence) for txnID.
func (w *Writer) ProduceTxn(ctx context.Context, txnID, topic string, partition int32, batch []byte) (int64, error) {
	return w.produceAlone(ctx, &txnID, topic, partition, batch)
}

// WriteMarkers appends n ABORT markers for producer p to a partition and
// waits for the answer (MarkersAsync, then Wait).
func (w *Writer) WriteMarkers(ctx context.Context, p Producer, topic string, partition int32, n int) error {
	x, err := w.MarkersAsync(ctx, p, topic, partition, n)
	if err != nil {
		return err
	}
	_, err = x.Wait(ctx)
	return err
}

// MarkersAuthorized says whether the client's principal may send
// WriteTxnMarkers to the destination (FillMarkers): Kafka authorizes it on
// the cluster resource, with ALTER from 3.8 and CLUSTER_ACTION before, and
// DescribeCluster lists the cluster operations the principal is allowed.
func MarkersAuthorized(ctx context.Context, cl *kgo.Client) (bool, error) {
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeClusterAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, fmt.Errorf("asking the destination which cluster operations the agent may perform: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return false, fmt.Errorf("asking the destination which cluster operations the agent may perform: %w", err)
	}
	ops := resp.ClusterAuthorizedOperations
	if ops == math.MinInt32 {
		return false, errors.New("the destination did not say which cluster operations the agent may perform")
	}
	has := func(op kmsg.ACLOperation) bool { return ops&(1<<int32(op)) != 0 }
	return has(kmsg.ACLOperationAlter) || has(kmsg.ACLOperationClusterAction), nil
}
