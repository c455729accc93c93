package devcluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Fault imitations for what kfake never does on its own (DESIGN §7;
// design-review §1.2, §1.4, §2 B1/B3/B4/B8, §3 "Faults to emulate"):
//
//   - DuplicateMarkers: the coordinator appends a transaction's markers twice.
//   - ConcurrentTransactions: the coordinator answers CONCURRENT_TRANSACTIONS
//     while a transaction's markers are in flight, and DescribeTransactions
//     reports PrepareCommit/PrepareAbort and then CompleteCommit/CompleteAbort.
//   - ExpireProducerState: a partition forgets an idempotent producer, so that
//     its next batch is accepted with any sequence.
//   - TimeoutAbort: the coordinator aborts an open transaction by timeout, at
//     the current end of each of its partitions, and fences the producer.
//   - LateRequest: a produce request is applied long after it was sent, after
//     its sender is gone.
//
// How they are built. kfake's Control hooks see a request before kfake
// handles it and can answer it, but cannot see or amend kfake's own answer,
// and kfake keeps its transaction and producer state unexported. So where a
// fault must act on what kfake did (the markers an EndTxn wrote, the state
// DescribeTransactions reports), the control puts the client's request to
// sleep (SleepControl, which lets the cluster serve other connections) and
// hands a copy to kfake through a connection of its own, at the client's
// request version; it then acts on kfake's answer and returns that answer to
// the client. Copies carry a mark (a registry of in-flight copies, or an
// extra transactional id in DescribeTransactions) so that the controls let
// them through to kfake. Markers are appended with a WriteTxnMarkers request,
// which kfake applies as a partition leader does a coordinator's.
//
// Chaining: every control here passes what it does not act on, and keeps
// itself installed (KeepControl); kfake runs controls of one key in the order
// they were added, so the strict layer (added at Start) sees every Produce
// first, and a request answered by one control is not seen by later ones.
// A handle's Remove uninstalls its controls the next time they run and its
// kfake faults at once.
//
// The helpers make their own requests through opClient, which authenticates
// as InternalUser, a super user, when the cluster was started with SASLUser
// or ACLs (auth.go). On a cluster given SASL or ACLs only through
// KfakeOptions they fail.

// internalClientID names the connections the fault helpers open.
const internalClientID = "kmirror-devcluster-faults"

// faultOpTimeout bounds the requests a helper makes for one intercepted
// request or one call.
const faultOpTimeout = 30 * time.Second

// internalTxnIDPrefix starts the extra transactional id that marks the
// DescribeTransactions requests the helpers send; no client names a
// transaction so.
const internalTxnIDPrefix = "\x00kmirror-devcluster-internal-"

var internalSeq atomic.Uint64

// errClusterClosing answers a request parked by a fault when the cluster
// closes under it.
var errClusterClosing = errors.New("devcluster: cluster closing")

// opClient returns a client for the helpers' own requests.
func (c *Cluster) opClient(opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(c.bootstrap...),
		kgo.ClientID(internalClientID),
	}
	if c.auth != nil {
		base = append(base, c.auth.opt())
	}
	base = append(base, c.tlsOpt()...)
	return kgo.NewClient(append(base, opts...)...)
}

// pinVersion makes a client send key at exactly version (kgo sends the
// smaller of its maximum and the broker's): a copy of a client's request
// must mean what the original meant (EndTxn v5 bumps the epoch, v4 does
// not).
func pinVersion(key kmsg.Key, version int16) kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(key), version)
	return kgo.MaxVersions(v)
}

// whileAsleep runs fn while the request of the running control sleeps, so
// that fn may send requests to the cluster. It reports whether fn finished;
// it did not when the cluster closed meanwhile (or when called outside a
// control), and the caller must then not read what fn sets.
func (c *Cluster) whileAsleep(fn func()) bool {
	done := make(chan struct{})
	c.kc.SleepControl(func() {
		defer close(done)
		fn()
	})
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// inflight is a set of request fingerprints a helper is sending itself, which
// its controls must let through.
type inflight struct {
	mu   sync.Mutex
	keys map[string]int
}

func (f *inflight) add(k string) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = make(map[string]int)
	}
	f.keys[k]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.keys[k]--; f.keys[k] <= 0 {
			delete(f.keys, k)
		}
	}
}

func (f *inflight) has(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[k] > 0
}

// counter counts events and lets callers wait for a count.
type counter struct {
	mu sync.Mutex
	n  int
	ch chan struct{} // closed and replaced on every add
}

func (c *counter) add(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += d
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) wait(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if c.n >= n {
			c.mu.Unlock()
			return nil
		}
		if c.ch == nil {
			c.ch = make(chan struct{})
		}
		ch := c.ch
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// budget is kfake's Count convention: 0 means one, -1 means until removed.
type budget struct {
	mu   sync.Mutex
	left int
}

func newBudget(count int) *budget {
	switch {
	case count == 0:
		count = 1
	case count < 0:
		count = -1
	}
	return &budget{left: count}
}

func (b *budget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.left < 0:
		return true
	case b.left == 0:
		return false
	}
	b.left--
	return true
}

func (b *budget) refund() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left >= 0 {
		b.left++
	}
}

// firstErr keeps the first error of a helper's background work.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// describeTxns sends DescribeTransactions for ids to node, marked as the
// helpers' own, and returns the states of ids.
func describeTxns(ctx context.Context, cl *kgo.Client, node int32, ids []string) (*kmsg.DescribeTransactionsResponse, error) {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = append(slices.Clone(ids), fmt.Sprintf("%s%d", internalTxnIDPrefix, internalSeq.Add(1)))
	kresp, err := cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describing transactions %v: %w", ids, err)
	}
	resp := kresp.(*kmsg.DescribeTransactionsResponse)
	resp.TransactionStates = slices.DeleteFunc(resp.TransactionStates, func(st kmsg.DescribeTransactionsResponseTransactionState) bool {
		return strings.HasPrefix(st.TransactionalID, internalTxnIDPrefix)
	})
	return resp, nil
}

func describeTxn(ctx context.Context, cl *kgo.Client, node int32, id string) (kmsg.DescribeTransactionsResponseTransactionState, error) {
	resp, err := describeTxns(ctx, cl, node, []string{id})
	if err != nil {
		return kmsg.DescribeTransactionsResponseTransactionState{}, err
	}
	for _, st := range resp.TransactionStates {
		if st.TransactionalID == id {
			return st, nil
		}
	}
	return kmsg.DescribeTransactionsResponseTransactionState{}, fmt.Errorf("describing transaction %q: not in the answer", id)
}

func internalDescribe(ids []string) bool {
	return slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, internalTxnIDPrefix) })
}

// endTxnOutcome is what an EndTxn handed to kfake did.
type endTxnOutcome struct {
	// before is the transaction as its coordinator described it just
	// before the EndTxn.
	before kmsg.DescribeTransactionsResponseTransactionState
	resp   *kmsg.EndTxnResponse // nil when err is set
	// err is set when the EndTxn could not be handed to kfake; the client
	// then sees its connection close.
	err error
}

// ended reports whether the EndTxn completed an open transaction of its
// producer, and so wrote a marker to each partition in before.Topics.
func (o endTxnOutcome) ended(req *kmsg.EndTxnRequest) bool {
	return o.resp != nil && o.resp.ErrorCode == 0 && o.before.ErrorCode == 0 && o.before.State == "Ongoing" &&
		o.before.ProducerID == req.ProducerID && o.before.ProducerEpoch == req.ProducerEpoch
}

// epochAfter is the producer id and epoch the transactional id has once
// the EndTxn completed: v5+ bumps the epoch and answers the new one.
func (o endTxnOutcome) epochAfter(req *kmsg.EndTxnRequest) (int64, int16) {
	if req.Version >= 5 {
		return o.resp.ProducerID, o.resp.ProducerEpoch
	}
	return req.ProducerID, req.ProducerEpoch
}

func endTxnKey(req *kmsg.EndTxnRequest) string {
	return fmt.Sprintf("%q/%d/%d/%t", req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
}

// interceptEndTxn installs a control that takes each EndTxn for which match
// returns true (match may reserve a budget), hands it to kfake through the
// helper's own connection after describing the transaction, calls after with
// what happened, and only then answers the client with kfake's answer. after
// runs outside the cluster's loop and may make requests with cl (nil when
// out.err is set); it runs once for every EndTxn match took, before the
// client learns the outcome.
func (c *Cluster) interceptEndTxn(removed func() bool, match func(*kmsg.EndTxnRequest) bool,
	after func(ctx context.Context, cl *kgo.Client, req *kmsg.EndTxnRequest, out endTxnOutcome)) {
	var mine inflight
	c.kc.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if !c.keepControl(removed) {
			return nil, nil, false
		}
		req, ok := kreq.(*kmsg.EndTxnRequest)
		if !ok || mine.has(endTxnKey(req)) || !match(req) {
			return nil, nil, false
		}
		node := c.kc.CurrentNode()
		var (
			resp kmsg.Response
			err  error
		)
		if !c.whileAsleep(func() {
			ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
			defer cancel()
			resp, err = c.relayEndTxn(ctx, node, req, &mine, after)
		}) {
			return nil, errClusterClosing, true
		}
		if err != nil {
			// The client sees its connection close, as after a lost
			// response, and retries.
			return nil, err, true
		}
		return resp, nil, true
	})
}

func (c *Cluster) relayEndTxn(ctx context.Context, node int32, req *kmsg.EndTxnRequest, mine *inflight,
	after func(context.Context, *kgo.Client, *kmsg.EndTxnRequest, endTxnOutcome)) (kmsg.Response, error) {
	var out endTxnOutcome
	cl, err := c.opClient(pinVersion(kmsg.EndTxn, req.Version))
	if err != nil {
		out.err = err
		after(ctx, nil, req, out)
		return nil, err
	}
	defer cl.Close()
	// A failed description only means no fault acts on this EndTxn.
	out.before, _ = describeTxn(ctx, cl, node, req.TransactionalID)

	fwd := *req
	done := mine.add(endTxnKey(req))
	kresp, err := cl.Broker(int(node)).Request(ctx, &fwd)
	done()
	if err != nil {
		out.err = fmt.Errorf("devcluster: relaying EndTxn of %q: %w", req.TransactionalID, err)
		after(ctx, nil, req, out)
		return nil, out.err
	}
	out.resp = kresp.(*kmsg.EndTxnResponse)
	after(ctx, cl, req, out)
	out.resp.SetVersion(req.Version)
	return out.resp, nil
}

// ---------------------------------------------------------------------------
// DuplicateMarkers

// DuplicateMarkers selects the transactions whose markers the coordinator
// appends twice; see Cluster.DuplicateMarkers.
type DuplicateMarkers struct {
	// TransactionalID selects the transactions of one transactional id; ""
	// selects every transactional id.
	TransactionalID string
	// Topic and Partitions restrict the duplicates to some of the
	// transaction's partitions; "" and nil mean all of them.
	Topic      string
	Partitions []int32
	// Count is how many transactions get duplicated markers: 0 means one,
	// -1 every one until Remove.
	Count int
	// Delay appends the duplicates this long after the EndTxn is answered,
	// so that other writes may land between the marker and its duplicate.
	// With 0 they are appended before the client gets the answer.
	Delay time.Duration
	// Hold keeps the duplicates until Release; Delay is then ignored.
	Hold bool
}

// DuplicateMarkersHandle controls an armed DuplicateMarkers.
type DuplicateMarkersHandle struct {
	c       *Cluster
	opts    DuplicateMarkers
	budget  *budget
	removed atomic.Bool
	written counter
	err     firstErr

	mu   sync.Mutex
	held []markerWrite
	log  []DuplicatedMarker
}

// DuplicatedMarker is one duplicate marker appended.
type DuplicatedMarker struct {
	Topic         string
	Partition     int32
	ProducerID    int64
	ProducerEpoch int16
	Commit        bool
}

// markerWrite is the duplicates of one transaction.
type markerWrite struct {
	pid    int64
	epoch  int16
	commit bool
	parts  map[string][]int32
}

// DuplicateMarkers makes the coordinator append the markers of the selected
// transactions twice: once when the transaction ends, as kfake does, and
// once more, each duplicate taking one more offset of its partition.
//
// Kafka (design-review §1.2, B1): the coordinator re-sends the markers of a
// whole WriteTxnMarkers request when its connection to a leader drops
// (TransactionMarkerRequestCompletionHandler.onComplete, wasDisconnected),
// retries after REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND when
// the leader had appended, and re-sends the markers of every PREPARE_*
// transaction after a coordinator reload
// (TransactionStateManager.loadTransactionsForTxnTopicPartition). The leader
// appends a marker whenever its epoch is at least the producer's
// (ProducerAppendInfo.checkProducerEpoch; 4.2 re-allows exactly this retry,
// KAFKA-19999), so each duplicate is one more invisible offset, landing
// right after the marker or, with a delay, after later writes. A very late
// duplicate is possible even after DescribeTransactions says Complete*.
//
// Faithfulness: the duplicate is a control batch with the same producer id,
// epoch, commit/abort type and coordinator epoch (kfake's coordinator always
// writes 0) as the marker kfake wrote, on the partitions kfake's coordinator
// had in the transaction (read with DescribeTransactions just before the
// EndTxn is handed to kfake). Only markers of an EndTxn that ended an open
// transaction are duplicated; kfake's own timeout aborts and the aborts
// InitProducerId does are not.
func (c *Cluster) DuplicateMarkers(d DuplicateMarkers) *DuplicateMarkersHandle {
	h := &DuplicateMarkersHandle{c: c, opts: d, budget: newBudget(d.Count)}
	h.opts.Partitions = slices.Clone(d.Partitions)
	c.interceptEndTxn(h.removed.Load, func(req *kmsg.EndTxnRequest) bool {
		if d.TransactionalID != "" && req.TransactionalID != d.TransactionalID {
			return false
		}
		return h.budget.take()
	}, h.afterEndTxn)
	return h
}

func (h *DuplicateMarkersHandle) afterEndTxn(ctx context.Context, cl *kgo.Client, req *kmsg.EndTxnRequest, out endTxnOutcome) {
	h.err.set(out.err)
	if !out.ended(req) {
		h.budget.refund()
		return
	}
	w := markerWrite{pid: req.ProducerID, epoch: req.ProducerEpoch, commit: req.Commit, parts: make(map[string][]int32)}
	for _, t := range out.before.Topics {
		if h.opts.Topic != "" && t.Topic != h.opts.Topic {
			continue
		}
		for _, p := range t.Partitions {
			if h.opts.Partitions == nil || slices.Contains(h.opts.Partitions, p) {
				w.parts[t.Topic] = append(w.parts[t.Topic], p)
			}
		}
	}
	if len(w.parts) == 0 {
		h.budget.refund()
		return
	}
	switch {
	case h.opts.Hold:
		h.mu.Lock()
		h.held = append(h.held, w)
		h.mu.Unlock()
	case h.opts.Delay > 0:
		time.AfterFunc(h.opts.Delay, func() {
			if h.removed.Load() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
			defer cancel()
			h.err.set(h.write(ctx, nil, w))
		})
	default:
		h.err.set(h.write(ctx, cl, w))
	}
}

// write appends the duplicates of one transaction; cl may be nil.
func (h *DuplicateMarkersHandle) write(ctx context.Context, cl *kgo.Client, w markerWrite) error {
	if cl == nil {
		var err error
		if cl, err = h.c.opClient(); err != nil {
			return err
		}
		defer cl.Close()
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = w.pid, w.epoch, w.commit
	m.CoordinatorEpoch = 0 // what kfake's coordinator writes in its markers
	for t, ps := range w.parts {
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = t, ps
		m.Topics = append(m.Topics, mt)
	}
	req.Markers = append(req.Markers, m)
	resp, err := req.RequestWith(ctx, cl) // kgo sends each partition to its leader
	if err != nil {
		return fmt.Errorf("devcluster: writing duplicate markers: %w", err)
	}
	var errs []error
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					errs = append(errs, fmt.Errorf("devcluster: duplicate marker for %s/%d: %w", rt.Topic, rp.Partition, e))
					continue
				}
				h.mu.Lock()
				h.log = append(h.log, DuplicatedMarker{Topic: rt.Topic, Partition: rp.Partition,
					ProducerID: w.pid, ProducerEpoch: w.epoch, Commit: w.commit})
				h.mu.Unlock()
				h.written.add(1)
			}
		}
	}
	return errors.Join(errs...)
}

// Release appends the duplicates held so far (Hold) and returns once they
// are in the logs.
func (h *DuplicateMarkersHandle) Release(ctx context.Context) error {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	var errs []error
	for _, w := range held {
		errs = append(errs, h.write(ctx, nil, w))
	}
	return errors.Join(errs...)
}

// Written is the number of duplicate markers appended so far, one per
// partition.
func (h *DuplicateMarkersHandle) Written() int { return h.written.get() }

// Duplicates lists the duplicate markers appended so far, in order.
func (h *DuplicateMarkersHandle) Duplicates() []DuplicatedMarker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

// Wait blocks until n duplicate markers are appended or ctx is done.
func (h *DuplicateMarkersHandle) Wait(ctx context.Context, n int) error {
	return h.written.wait(ctx, n)
}

// Err returns the first error met writing a duplicate in the background
// (Delay), or while answering an EndTxn.
func (h *DuplicateMarkersHandle) Err() error { return h.err.get() }

// Remove stops duplicating; held duplicates are dropped and delayed ones not
// yet written are not written.
func (h *DuplicateMarkersHandle) Remove() {
	h.removed.Store(true)
	h.mu.Lock()
	h.held = nil
	h.mu.Unlock()
}

// ---------------------------------------------------------------------------
// ConcurrentTransactions

// ConcurrentTransactions selects the transactions after whose end the
// coordinator is busy; see Cluster.ConcurrentTransactions.
type ConcurrentTransactions struct {
	// TransactionalID selects one transactional id; "" selects every one.
	TransactionalID string
	// Count is how many EndTxn open a window: 0 means one, -1 every one
	// until Remove.
	Count int
	// Window is how long the markers stay in flight after the EndTxn is
	// answered. 0 keeps them in flight until Complete.
	Window time.Duration
}

// ConcurrentTransactionsHandle controls an armed ConcurrentTransactions.
type ConcurrentTransactionsHandle struct {
	c       *Cluster
	opts    ConcurrentTransactions
	budget  *budget
	removed atomic.Bool
	faults  *kfake.FaultHandle
	opened  counter
	closed  counter

	mu      sync.Mutex
	windows map[string]*txnWindow // open, by transactional id
	done    map[string]txnDone    // completed, until kfake moves on
}

// txnWindow is a transaction whose markers are "in flight".
type txnWindow struct {
	pid    int64
	epoch  int16 // after the EndTxn
	commit bool
	topics []kmsg.DescribeTransactionsResponseTransactionStateTopic
	start  int64
	timer  *time.Timer
}

// txnDone is a transaction whose markers all landed.
type txnDone struct {
	pid    int64
	epoch  int16
	commit bool
}

// ConcurrentTransactions makes the coordinator of the selected
// transactional ids busy for a window after each EndTxn that ends a
// transaction, the time Kafka takes to write the markers and the final
// state:
//
//   - AddPartitionsToTxn, AddOffsetsToTxn, InitProducerId and a repeated
//     EndTxn of the same kind are answered CONCURRENT_TRANSACTIONS, an EndTxn
//     of the other kind INVALID_TXN_STATE, and a transactional Produce v12+
//     (which adds its partitions implicitly) CONCURRENT_TRANSACTIONS;
//   - DescribeTransactions reports PrepareCommit or PrepareAbort with the
//     transaction's partitions and start time;
//   - once the window closes, DescribeTransactions reports CompleteCommit or
//     CompleteAbort (kfake says Empty) until the transactional id starts a
//     new transaction or gets a new epoch (InitProducerId, a timeout).
//
// Kafka (design-review §1.2): EndTxn returns once PREPARE_COMMIT/ABORT is in
// the transaction log; the markers are sent after, and COMPLETE_* is written
// only when every partition acknowledged them
// (TransactionMarkerChannelManager.maybeWriteTxnCompletion). Meanwhile
// AddPartitionsToTxn answers CONCURRENT_TRANSACTIONS for PREPARE_* or a
// pending transition (TransactionCoordinator.handleAddPartitionsToTransaction),
// InitProducerId too (prepareInitProducerIdTransit), and EndTxn answers
// CONCURRENT_TRANSACTIONS for a retry of the same outcome and
// INVALID_TXN_STATE for the other. kfake completes synchronously and never
// says so.
//
// Faithfulness: the EndTxn itself behaves as kfake's (markers appended at
// once, before the window), so only the coordinator's answers are imitated,
// not markers landing late. Partition-level effects of PREPARE (the LSO
// stays where it was until the markers land) are not imitated: the markers
// are already there. ListTransactions still reports kfake's states (Ongoing
// or Empty). A Produce v≤11 during the window is handled by kfake (Kafka's
// verification would answer NOT_ENOUGH_REPLICAS for the first batch of a
// new transaction, which cannot start without AddPartitionsToTxn anyway).
func (c *Cluster) ConcurrentTransactions(ct ConcurrentTransactions) *ConcurrentTransactionsHandle {
	h := &ConcurrentTransactionsHandle{
		c: c, opts: ct, budget: newBudget(ct.Count),
		windows: make(map[string]*txnWindow), done: make(map[string]txnDone),
	}
	// The answers during a window are kfake faults whose When looks the
	// transactional id up among the open windows; they are checked after
	// every control, so they also answer copies other helpers relay.
	h.faults = c.kc.Fault(
		kfake.Fault{
			Keys:  []kmsg.Key{kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.InitProducerID, kmsg.EndTxn, kmsg.Produce},
			Err:   kerr.ConcurrentTransactions,
			Count: -1,
			When:  func(r kmsg.Request) bool { return h.busy(r, false) },
		},
		kfake.Fault{
			Keys:  []kmsg.Key{kmsg.EndTxn},
			Err:   kerr.InvalidTxnState,
			Count: -1,
			When:  func(r kmsg.Request) bool { return h.busy(r, true) },
		},
	)
	c.interceptEndTxn(h.removed.Load, func(req *kmsg.EndTxnRequest) bool {
		if ct.TransactionalID != "" && req.TransactionalID != ct.TransactionalID {
			return false
		}
		return h.budget.take()
	}, h.afterEndTxn)
	c.kc.ControlKey(int16(kmsg.DescribeTransactions), h.onDescribe)
	return h
}

// busy reports whether r concerns a transactional id with an open window;
// otherKind selects EndTxn requests of the kind the window's did not have.
func (h *ConcurrentTransactionsHandle) busy(r kmsg.Request, otherKind bool) bool {
	var ids []string
	switch r := r.(type) {
	case *kmsg.AddPartitionsToTxnRequest:
		if r.Version <= 3 {
			ids = []string{r.TransactionalID}
		}
		for _, t := range r.Transactions {
			ids = append(ids, t.TransactionalID)
		}
	case *kmsg.AddOffsetsToTxnRequest:
		ids = []string{r.TransactionalID}
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			ids = []string{*r.TransactionalID}
		}
	case *kmsg.ProduceRequest:
		if r.TransactionID != nil && r.Version >= 12 {
			ids = []string{*r.TransactionID}
		}
	case *kmsg.EndTxnRequest:
		h.mu.Lock()
		defer h.mu.Unlock()
		w, ok := h.windows[r.TransactionalID]
		return ok && (w.commit != r.Commit) == otherKind
	}
	if otherKind {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if _, ok := h.windows[id]; ok {
			return true
		}
	}
	return false
}

func (h *ConcurrentTransactionsHandle) afterEndTxn(_ context.Context, _ *kgo.Client, req *kmsg.EndTxnRequest, out endTxnOutcome) {
	if !out.ended(req) {
		h.budget.refund()
		return
	}
	pid, epoch := out.epochAfter(req)
	w := &txnWindow{pid: pid, epoch: epoch, commit: req.Commit,
		topics: slices.Clone(out.before.Topics), start: out.before.StartTimestamp}
	h.mu.Lock()
	if old := h.windows[req.TransactionalID]; old != nil && old.timer != nil {
		old.timer.Stop()
	}
	h.windows[req.TransactionalID] = w
	delete(h.done, req.TransactionalID)
	if h.opts.Window > 0 {
		id := req.TransactionalID
		w.timer = time.AfterFunc(h.opts.Window, func() { h.complete(id, w) })
	}
	h.mu.Unlock()
	h.opened.add(1)
}

// complete closes the window w of id, if it is still the open one.
func (h *ConcurrentTransactionsHandle) complete(id string, w *txnWindow) {
	h.mu.Lock()
	if h.windows[id] != w {
		h.mu.Unlock()
		return
	}
	delete(h.windows, id)
	if w.timer != nil {
		w.timer.Stop()
	}
	h.done[id] = txnDone{pid: w.pid, epoch: w.epoch, commit: w.commit}
	h.mu.Unlock()
	h.closed.add(1)
}

// Complete closes every open window now, as if all markers just landed.
func (h *ConcurrentTransactionsHandle) Complete() {
	h.mu.Lock()
	open := make(map[string]*txnWindow, len(h.windows))
	for id, w := range h.windows {
		open[id] = w
	}
	h.mu.Unlock()
	for id, w := range open {
		h.complete(id, w)
	}
}

// Opened is the number of windows opened so far.
func (h *ConcurrentTransactionsHandle) Opened() int { return h.opened.get() }

// WaitOpened blocks until n windows were opened or ctx is done.
func (h *ConcurrentTransactionsHandle) WaitOpened(ctx context.Context, n int) error {
	return h.opened.wait(ctx, n)
}

// WaitCompleted blocks until n windows closed or ctx is done.
func (h *ConcurrentTransactionsHandle) WaitCompleted(ctx context.Context, n int) error {
	return h.closed.wait(ctx, n)
}

// Answered is the number of requests answered CONCURRENT_TRANSACTIONS or
// INVALID_TXN_STATE because of an open window.
func (h *ConcurrentTransactionsHandle) Answered() int { return h.faults.Hits() }

// WaitAnswered blocks until Answered reaches n or ctx is done.
func (h *ConcurrentTransactionsHandle) WaitAnswered(ctx context.Context, n int) error {
	return h.faults.Wait(ctx, n)
}

// Remove closes the windows without reporting Complete* and stops the
// imitation.
func (h *ConcurrentTransactionsHandle) Remove() {
	h.removed.Store(true)
	h.faults.Remove()
	h.mu.Lock()
	for _, w := range h.windows {
		if w.timer != nil {
			w.timer.Stop()
		}
	}
	clear(h.windows)
	clear(h.done)
	h.mu.Unlock()
}

// tracks reports whether any of ids has an open window or a completion to
// report.
func (h *ConcurrentTransactionsHandle) tracks(ids []string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		_, open := h.windows[id]
		_, done := h.done[id]
		if open || done {
			return true
		}
	}
	return false
}

// keepControl keeps the running control function installed for the next
// request, unless its fault was removed: then it drops it and returns false,
// and the caller passes the request on.
func (c *Cluster) keepControl(removed func() bool) bool {
	c.kc.KeepControl()
	if removed() {
		c.kc.DropControl()
		return false
	}
	return true
}

func (h *ConcurrentTransactionsHandle) onDescribe(kreq kmsg.Request) (kmsg.Response, error, bool) {
	c := h.c
	if !c.keepControl(h.removed.Load) {
		return nil, nil, false
	}
	req, ok := kreq.(*kmsg.DescribeTransactionsRequest)
	if !ok || internalDescribe(req.TransactionalIDs) || !h.tracks(req.TransactionalIDs) {
		return nil, nil, false
	}
	node := c.kc.CurrentNode()
	var (
		resp *kmsg.DescribeTransactionsResponse
		err  error
	)
	if !c.whileAsleep(func() {
		ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
		defer cancel()
		cl, cerr := c.opClient()
		if cerr != nil {
			err = cerr
			return
		}
		defer cl.Close()
		resp, err = describeTxns(ctx, cl, node, req.TransactionalIDs)
	}) {
		return nil, errClusterClosing, true
	}
	if err != nil {
		return nil, err, true
	}
	h.patch(resp)
	resp.SetVersion(req.Version)
	return resp, nil, true
}

// patch rewrites kfake's states to Kafka's for the transactions this
// handle imitates.
func (h *ConcurrentTransactionsHandle) patch(resp *kmsg.DescribeTransactionsResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range resp.TransactionStates {
		st := &resp.TransactionStates[i]
		if st.ErrorCode != 0 {
			continue
		}
		if w, ok := h.windows[st.TransactionalID]; ok && st.ProducerID == w.pid {
			st.State = "PrepareAbort"
			if w.commit {
				st.State = "PrepareCommit"
			}
			st.Topics = slices.Clone(w.topics)
			st.StartTimestamp = w.start
			continue
		}
		d, ok := h.done[st.TransactionalID]
		if !ok {
			continue
		}
		if st.State != "Empty" || st.ProducerID != d.pid || st.ProducerEpoch != d.epoch {
			delete(h.done, st.TransactionalID) // a new transaction or a new epoch
			continue
		}
		st.State = "CompleteAbort"
		if d.commit {
			st.State = "CompleteCommit"
		}
	}
}

// ---------------------------------------------------------------------------
// ExpireProducerState

// ProducerExpiry controls an armed ExpireProducerState.
type ProducerExpiry struct {
	c         *Cluster
	topic     string
	partition int32
	pid       int64 // <0: every producer
	removed   atomic.Bool
	rewritten counter

	mu      sync.Mutex
	aliases map[int64]int64 // producer id -> the id kfake knows it by now
	isAlias map[int64]bool  // ids handed out as aliases, never re-keyed
	pending map[int64]bool  // producers whose state expired and was not re-seeded yet
	all     bool            // with pid<0: every producer not yet seen since the last Expire
	seen    map[int64]bool
}

// ExpireProducerState makes the leader of topic/partition forget the
// idempotent producer state of producerID there (every producer when
// producerID is negative), now: the producer's next batch on the partition
// is accepted whatever its sequence (and deduplicated with nothing), and
// becomes the new state that later batches are checked against, as Kafka
// does. Call Expire on the handle to expire it again.
//
// Kafka (design-review §1.4, B3): ProducerStateManager.isProducerExpired
// removes a producer without an open transaction once now − lastTimestamp ≥
// producer.id.expiration.ms (default one day, checked every ten minutes),
// where lastTimestamp is the batch maxTimestamp, the record create time on
// CreateTime topics; so a mirror copying a backlog older than a day loses
// its state at the next check however recently it wrote. With no state,
// ProducerAppendInfo accepts any sequence ("If there is no current producer
// epoch ... accept writes with any sequence number"): a killed process's
// late request is then appended instead of deduplicated or refused.
//
// Faithfulness: kfake keeps producer state unexported and has no way to drop
// it. The imitation re-keys the producer: from its first batch after the
// expiry on, the producer's batches on that partition are handed to kfake
// under a fresh producer id (Alias reports it), which kfake has no state
// for, so it accepts any first sequence and then checks sequences, epochs
// and duplicates against that batch exactly as it would have for the
// original id. What differs from Kafka: those batches are stored with the
// alias as their producer id (a log reader that looks for the original id
// finds only the batches before the expiry), and each Expire starts a new
// alias. Only non-transactional idempotent batches are touched (Kafka never
// expires a producer with an open transaction; a transactional producer's
// state expiring between transactions is not imitated). The expiry happens
// at the call, not on a timer: the test chooses when the check runs.
func (c *Cluster) ExpireProducerState(topic string, partition int32, producerID int64) *ProducerExpiry {
	h := &ProducerExpiry{c: c, topic: topic, partition: partition, pid: producerID,
		aliases: make(map[int64]int64), isAlias: make(map[int64]bool), pending: make(map[int64]bool), seen: make(map[int64]bool)}
	h.Expire()
	c.kc.ControlKey(int16(kmsg.Produce), h.onProduce)
	return h
}

// Expire expires the state again, as the next expiration check would: the
// producer's (or each producer's) next batch re-seeds it.
func (h *ProducerExpiry) Expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pid >= 0 {
		h.pending[h.pid] = true
		return
	}
	h.all = true
	clear(h.seen)
	for pid := range h.aliases {
		h.pending[pid] = true
	}
}

// Alias returns the producer id under which kfake now keeps producerID's
// batches on the partition, once it wrote after an expiry.
func (h *ProducerExpiry) Alias(producerID int64) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.aliases[producerID]
	return a, ok
}

// Rewritten is the number of batches handed to kfake under an alias.
func (h *ProducerExpiry) Rewritten() int { return h.rewritten.get() }

// Remove stops the imitation: later batches reach kfake under their own
// producer id again, where kfake still has the state from before the expiry
// (which Kafka would not have), so use it only to clean up.
func (h *ProducerExpiry) Remove() { h.removed.Store(true) }

// aliasFor returns the id to hand pid's batch to kfake under, or pid.
func (h *ProducerExpiry) aliasFor(pid int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pid >= 0 && pid != h.pid || h.isAlias[pid] {
		return pid // another producer, or a batch re-keyed already (a held request released)
	}
	if h.all && !h.seen[pid] {
		h.seen[pid] = true
		h.pending[pid] = true
	}
	if h.pending[pid] {
		delete(h.pending, pid)
		a := newAlias(pid)
		h.aliases[pid] = a
		h.isAlias[a] = true
	}
	if a, ok := h.aliases[pid]; ok {
		return a
	}
	return pid
}

// newAlias picks a producer id kfake has not handed out: kfake draws ids
// uniformly from [0, 2^63), and the top bit pattern here keeps aliases in
// a range no client is likely to use.
func newAlias(not int64) int64 {
	for {
		a := int64(0x5a<<55) | rand.Int64N(1<<55)
		if a != not {
			return a
		}
	}
}

func (h *ProducerExpiry) onProduce(kreq kmsg.Request) (kmsg.Response, error, bool) {
	c := h.c
	if !c.keepControl(h.removed.Load) {
		return nil, nil, false
	}
	req, ok := kreq.(*kmsg.ProduceRequest)
	if !ok {
		return nil, nil, false
	}
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		name := rt.Topic
		if req.Version >= 13 {
			info := c.kc.TopicIDInfo(rt.TopicID)
			if info == nil {
				continue
			}
			name = info.Topic
		}
		if name != h.topic {
			continue
		}
		for pi := range rt.Partitions {
			if rp := &rt.Partitions[pi]; rp.Partition == h.partition {
				h.rewrite(rp)
			}
		}
	}
	return nil, nil, false
}

// rewrite hands one partition's batch to kfake under its producer's alias.
func (h *ProducerExpiry) rewrite(rp *kmsg.ProduceRequestTopicPartition) {
	sp := splitBatches(rp.Records)
	if sp.batches != 1 || sp.magic != 2 || len(sp.first) < batchHeaderLen {
		return // refused by the strict layer or by kfake as it is
	}
	hdr := readHeader(sp.first)
	if hdr.producerID < 0 || hdr.transactional() || hdr.control() || batchCRC(sp.first) != hdr.crc {
		return
	}
	alias := h.aliasFor(hdr.producerID)
	if alias == hdr.producerID {
		return
	}
	b := slices.Clone(sp.first)
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(alias))
	binary.BigEndian.PutUint32(b[offCRC:], batchCRC(b))
	rp.Records = b
	h.rewritten.add(1)
}

// ---------------------------------------------------------------------------
// TimeoutAbort

// TimeoutAbortResult is what TimeoutAbort aborted.
type TimeoutAbortResult struct {
	ProducerID int64
	// ProducerEpoch is the epoch of the aborted transaction, fenced now.
	ProducerEpoch int16
	// Partitions are the transaction's partitions, each of which got an
	// ABORT marker at its end.
	Partitions map[string][]int32
}

// TimeoutAbort aborts the open transaction of transactionalID now, the way
// the coordinator aborts a transaction that outlived its timeout: an ABORT
// marker is appended at the current end of each partition in the
// transaction, after whatever was written there since, and the producer's
// epoch is bumped, so that its next AddPartitionsToTxn, Produce or EndTxn
// with the old epoch is refused (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH,
// as kfake answers a fenced epoch). It fails if the transactional id has no
// open transaction.
//
// Kafka (design-review §1.8, §2 B4 case 2, B8): transactions time out
// transaction.timeout.ms after their first AddPartitionsToTxn
// (TransactionStateManager.timedOutTransactions, counted from
// txnStartTimestamp, not from the last activity);
// TransactionCoordinator.abortTimedOutTransactions bumps the epoch
// (prepareFenceProducerEpoch) and writes the ABORT markers, minutes after
// the producer's last write, at whatever offset each partition has reached.
// An agent that died between AddPartitionsToTxn and EndTxn gets its offsets
// shifted that way.
//
// Faithfulness: done with kfake's own coordinator, through the InitProducerId
// recovery path (KIP-360: the transactional id, the producer id and its
// current epoch), which aborts the open transaction and bumps the epoch.
// Differences: the markers carry the transaction's epoch where Kafka's
// timeout abort writes them with the bumped one (consumers cannot tell;
// kfake fences the old epoch at the coordinator either way); afterwards
// kfake describes the transactional id as Empty where Kafka says
// CompleteAbort (ConcurrentTransactions does not cover this abort); and the
// abort happens at the call, not on a timer (kfake's own timer still
// applies: a transaction can also time out by itself if the producer asked
// for a short transaction.timeout.ms).
func (c *Cluster) TimeoutAbort(ctx context.Context, transactionalID string) (TimeoutAbortResult, error) {
	if transactionalID == "" {
		return TimeoutAbortResult{}, errors.New("devcluster: TimeoutAbort needs a transactional id")
	}
	cl, err := c.opClient()
	if err != nil {
		return TimeoutAbortResult{}, err
	}
	defer cl.Close()
	node := c.kc.CoordinatorFor(transactionalID)
	st, err := describeTxn(ctx, cl, node, transactionalID)
	if err != nil {
		return TimeoutAbortResult{}, fmt.Errorf("devcluster: TimeoutAbort: %w", err)
	}
	if e := kerr.ErrorForCode(st.ErrorCode); e != nil {
		return TimeoutAbortResult{}, fmt.Errorf("devcluster: TimeoutAbort: describing %q: %w", transactionalID, e)
	}
	if st.State != "Ongoing" {
		return TimeoutAbortResult{}, fmt.Errorf("devcluster: TimeoutAbort: transactional id %q has no open transaction (state %s)", transactionalID, st.State)
	}
	res := TimeoutAbortResult{ProducerID: st.ProducerID, ProducerEpoch: st.ProducerEpoch, Partitions: make(map[string][]int32)}
	for _, t := range st.Topics {
		res.Partitions[t.Topic] = slices.Clone(t.Partitions)
	}

	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr(transactionalID)
	req.TransactionTimeoutMillis = st.TimeoutMillis
	req.ProducerID, req.ProducerEpoch = st.ProducerID, st.ProducerEpoch
	kresp, err := cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return res, fmt.Errorf("devcluster: TimeoutAbort of %q: %w", transactionalID, err)
	}
	if resp := kresp.(*kmsg.InitProducerIDResponse); resp.ErrorCode != 0 {
		return res, fmt.Errorf("devcluster: TimeoutAbort of %q: %w", transactionalID, kerr.ErrorForCode(resp.ErrorCode))
	}
	return res, nil
}

// ---------------------------------------------------------------------------
// LateRequest

// LateRequest selects the produce requests to hold; see Cluster.LateRequest.
// Every field narrows the selection.
type LateRequest struct {
	// Topic selects requests with a batch for this topic; "" any topic.
	Topic string
	// Partitions selects requests with a batch for one of these partitions
	// (of Topic, or of any topic); nil any partition.
	Partitions []int32
	// ProducerIDs selects requests with a batch of one of these producer
	// ids (-1 is a producer without idempotence), as the batch reaches this
	// hook, after controls added earlier (ExpireProducerState re-keys
	// producers); nil any producer.
	ProducerIDs []int64
	// TransactionalID selects requests of this transactional id; "" any.
	TransactionalID string
	// Count is how many requests to hold: 0 means one, -1 every one until
	// Remove.
	Count int
	// Disconnect closes the client's connection when its request is held,
	// as a network cut or the death of its process would; the client then
	// sees an error at once (and a live kgo client retries). Without it the
	// client gets no answer on that connection, as when a broker is slow,
	// until it gives up.
	Disconnect bool
}

// LateRequestHandle controls an armed LateRequest.
type LateRequestHandle struct {
	c       *Cluster
	opts    LateRequest
	budget  *budget
	removed atomic.Bool
	heldN   counter
	mine    inflight

	mu   sync.Mutex
	held []heldProduce
}

type heldProduce struct {
	req  *kmsg.ProduceRequest
	node int32
}

// LateRequest holds the selected produce requests unapplied until Release,
// which applies them then, on the broker they were sent to, with whatever
// the log and the producer state are at that moment.
//
// Kafka: a broker handles a request it has fully read even if the client
// disconnected meanwhile (SocketServer only warns that it cannot send the
// response), and requests queue behind slow ones (request queue, purgatory).
// So a killed process's last produce can be appended after a new process
// read the log end and wrote there (design-review §1.4 and §2 B4, B13); with
// deterministic producer id, epoch, sequence and batch boundaries it is then
// deduplicated or refused, unless the producer state expired
// (ExpireProducerState, B3).
//
// Faithfulness: the request is taken before kfake sees it, after the
// controls added before this one (the strict layer among them), and handed
// to kfake at Release through a connection of its own, at the same request
// version and acks, with the same bytes, to the same broker, where kfake
// and the strict layer check it as new. The client never gets the answer.
// A broker that lost leadership meanwhile answers NOT_LEADER_FOR_PARTITION
// at Release, as Kafka would.
func (c *Cluster) LateRequest(lr LateRequest) *LateRequestHandle {
	h := &LateRequestHandle{c: c, opts: lr, budget: newBudget(lr.Count)}
	h.opts.Partitions = slices.Clone(lr.Partitions)
	h.opts.ProducerIDs = slices.Clone(lr.ProducerIDs)
	c.kc.ControlKey(int16(kmsg.Produce), h.onProduce)
	return h
}

func produceKey(req *kmsg.ProduceRequest) string {
	hs := fnv.New128a()
	if req.TransactionID != nil {
		hs.Write([]byte(*req.TransactionID))
	}
	for _, rt := range req.Topics {
		hs.Write([]byte(rt.Topic))
		hs.Write(rt.TopicID[:])
		for _, rp := range rt.Partitions {
			hs.Write(binary.BigEndian.AppendUint32(nil, uint32(rp.Partition)))
			hs.Write(rp.Records)
		}
	}
	return string(hs.Sum(nil))
}

func (h *LateRequestHandle) onProduce(kreq kmsg.Request) (kmsg.Response, error, bool) {
	c := h.c
	if !c.keepControl(h.removed.Load) {
		return nil, nil, false
	}
	req, ok := kreq.(*kmsg.ProduceRequest)
	if !ok || h.mine.has(produceKey(req)) || !h.matches(req) || !h.budget.take() {
		return nil, nil, false
	}
	h.mu.Lock()
	h.held = append(h.held, heldProduce{req: req, node: c.kc.CurrentNode()})
	h.mu.Unlock()
	h.heldN.add(1)
	if h.opts.Disconnect {
		return nil, errors.New("devcluster: LateRequest holds this produce request; closing the connection"), true
	}
	return nil, nil, true // no answer: the connection waits (acks=0 requests have none anyway)
}

func (h *LateRequestHandle) matches(req *kmsg.ProduceRequest) bool {
	o := h.opts
	if o.TransactionalID != "" && (req.TransactionID == nil || *req.TransactionID != o.TransactionalID) {
		return false
	}
	for _, rt := range req.Topics {
		name := rt.Topic
		if req.Version >= 13 {
			if info := h.c.kc.TopicIDInfo(rt.TopicID); info != nil {
				name = info.Topic
			}
		}
		if o.Topic != "" && name != o.Topic {
			continue
		}
		for _, rp := range rt.Partitions {
			if o.Partitions != nil && !slices.Contains(o.Partitions, rp.Partition) {
				continue
			}
			if o.ProducerIDs == nil {
				return true
			}
			if len(rp.Records) >= batchHeaderLen && slices.Contains(o.ProducerIDs, readHeader(rp.Records).producerID) {
				return true
			}
		}
	}
	return false
}

// Held is the number of requests held so far (released ones included).
func (h *LateRequestHandle) Held() int { return h.heldN.get() }

// Wait blocks until n requests were held or ctx is done.
func (h *LateRequestHandle) Wait(ctx context.Context, n int) error { return h.heldN.wait(ctx, n) }

// Release applies the requests held so far, in the order they arrived, and
// returns kfake's answers (an empty answer for an acks=0 request). It stops
// at the first request it cannot deliver.
func (h *LateRequestHandle) Release(ctx context.Context) ([]*kmsg.ProduceResponse, error) {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	var resps []*kmsg.ProduceResponse
	for i, hp := range held {
		resp, err := h.apply(ctx, hp)
		if err != nil {
			h.mu.Lock()
			h.held = append(held[i:], h.held...) // keep what was not applied
			h.mu.Unlock()
			return resps, err
		}
		resps = append(resps, resp)
	}
	return resps, nil
}

func (h *LateRequestHandle) apply(ctx context.Context, hp heldProduce) (*kmsg.ProduceResponse, error) {
	opts := []kgo.Opt{pinVersion(kmsg.Produce, hp.req.Version)}
	// kgo sends a raw produce request with the client's acks.
	switch hp.req.Acks {
	case 0:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	case 1:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	}
	cl, err := h.c.opClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	done := h.mine.add(produceKey(hp.req))
	defer done()
	kresp, err := cl.Broker(int(hp.node)).Request(ctx, hp.req)
	if err != nil {
		return nil, fmt.Errorf("devcluster: releasing a held produce request to broker %d: %w", hp.node, err)
	}
	return kresp.(*kmsg.ProduceResponse), nil
}

// Drop forgets the requests held so far without applying them, as if they
// never reached the broker.
func (h *LateRequestHandle) Drop() {
	h.mu.Lock()
	h.held = nil
	h.mu.Unlock()
}

// Remove stops holding new requests; the ones held stay until Release or
// Drop.
func (h *LateRequestHandle) Remove() { h.removed.Store(true) }
