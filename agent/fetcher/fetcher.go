// Package fetcher reads raw record batches from a source cluster: fetch
// loops per source broker for the partitions it leads (one per client the
// fetcher is given, each on its own connection, the partitions spread over
// them), with incremental fetch sessions (KIP-227), following leader changes
// without losing position and holding no more fetched bytes than a shared
// Budget allows.
//
// A loop keeps one fetch in flight, so one loop moves at most a response per
// round trip, and a response crosses a wide-area link no faster than its
// connection's window allows (a TCP window per round trip). More than one
// connection per broker keeps the link busy while one response is on the
// wire and the next request is on its way, as Kafka's replica fetchers do
// with num.replica.fetchers. The loops of a broker do not share a
// connection: Kafka answers a connection's requests one at a time, so a
// loop's long poll would hold up the other's fetch behind it.
//
// Batches are delivered as Kafka returned them (still compressed); the
// fetcher only reads batch headers to know where the next fetch starts.
package fetcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// TP names a partition.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Aborted is one aborted transaction overlapping a read_committed fetch.
type Aborted struct {
	ProducerID  int64
	FirstOffset int64
}

// Chunk is what one fetch returned for one partition.
type Chunk struct {
	TP
	// Gen is the generation of the Assign or Seek this chunk answers;
	// chunks of an older generation must be dropped.
	Gen uint64
	// FetchOffset is the offset the fetch asked for. Records may start
	// below it (Kafka returns whole batches).
	FetchOffset int64
	// Records holds whole raw batches (a truncated trailing batch is
	// already cut off).
	Records       []byte
	HighWatermark int64
	LastStable    int64
	LogStart      int64
	Aborted       []Aborted
	// Err is a partition-level error the owner must act on, such as
	// kerr.OffsetOutOfRange. Leadership errors are handled here and never
	// delivered.
	Err error
}

// Size is the number of budget bytes the chunk holds.
func (c *Chunk) Size() int64 { return int64(len(c.Records)) }

// Options tune a Fetcher.
type Options struct {
	// MaxBytes caps one fetch response (default 32 MiB).
	MaxBytes int32
	// PartitionMaxBytes caps one partition in one response (default 1 MiB);
	// it grows for a partition whose next batch is larger.
	PartitionMaxBytes int32
	// PartitionQueue is how many undelivered chunks a partition may have
	// before it is left out of fetches (default 8).
	PartitionQueue int
	// MaxWait is the long-poll time of a fetch (default 250ms).
	MaxWait time.Duration
	// RequestTimeout is how long a fetch may wait beyond MaxWait to be
	// written before it is abandoned and the session restarted (default
	// 10s); a written fetch is bounded by the client's
	// RequestTimeoutOverhead.
	RequestTimeout time.Duration
	// Budget bounds fetched-but-unwritten bytes (default 256 MiB, private).
	Budget *Budget
	// Throttle, when set, caps the bytes fetched for the partitions it
	// covers (a mirror's replication throttle); nil throttles nothing.
	Throttle *Throttle
	// Counters, when set, counts this fetcher's requests, errors, bytes
	// and failing broker loops (a mirror's figures).
	Counters *Counters
	// Connections are more clients of the same source cluster: each
	// gives every broker one more fetch loop on a connection of its own,
	// and the partitions a broker leads are spread over its loops.
	Connections []*kgo.Client
	Logger      hclog.Logger
}

// growMaxBytes is how far a partition's share of a fetch grows while its
// fetches come back full (PartitionMaxBytes is where it starts): a broker
// loop has one fetch in flight, so a share is what a partition moves per
// round trip, 16 MiB per 50 ms at most. The Budget still bounds what is
// held.
const growMaxBytes = 16 << 20

func (o *Options) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 32 << 20
	}
	if o.PartitionMaxBytes <= 0 {
		o.PartitionMaxBytes = 1 << 20
	}
	// A loop's reservation runs from a partition share to MaxBytes.
	o.PartitionMaxBytes = min(o.PartitionMaxBytes, o.MaxBytes)
	if o.PartitionQueue <= 0 {
		o.PartitionQueue = 8
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 250 * time.Millisecond
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.Budget == nil {
		o.Budget = NewBudget(256 << 20)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Counters == nil {
		o.Counters = &Counters{}
	}
}

// Stats counts the fetch requests of every Fetcher's broker loops in this
// process since it started, for the agent's metrics.
type Stats struct {
	Requests int64 // fetch requests sent
	Errors   int64 // of those, failed ones (transport or request-level error)
	// ThrottleMillis sums the throttle times the source brokers reported
	// (their quotas on the fetcher's client id or principal).
	ThrottleMillis int64
}

var stats struct{ requests, errors, throttleMillis atomic.Int64 }

// ReadStats returns the process-wide fetch counters.
func ReadStats() Stats {
	return Stats{Requests: stats.requests.Load(), Errors: stats.errors.Load(), ThrottleMillis: stats.throttleMillis.Load()}
}

// heldBackWait caps the long poll of a fetch that leaves out partitions held
// back by flow control, so that they are fetched again soon after their
// writers catch up instead of after a whole MaxWait.
const heldBackWait = 10 * time.Millisecond

type part struct {
	tp       TP
	offset   int64
	gen      uint64
	out      chan Chunk
	leader   int32 // -1: unknown, resolve first
	epoch    int32
	maxBytes int32
	queued   int   // chunks sent to out and not yet Done
	held     int64 // budget bytes of those chunks
	// throttledMax is the partition max bytes while throttled: the
	// throttle's chunk, doubled while the next batch does not fit.
	throttledMax   int32
	throttledChunk int32 // the chunk throttledMax started from
	// stream is the loop of its leader that fetches it (an index into
	// Fetcher.clients), chosen when the leader is.
	stream int
	// lost counts the times in a row its leader was lost (a leadership
	// error, or its broker failing) without a fetch of it succeeding in
	// between; from the second, the leader is looked up again only at
	// resolveAt (see loseLeaderLocked).
	lost      int
	resolveAt time.Time
}

// Pauses before looking up a lost leader again, from the second loss in a
// row: a broker that metadata names as leader but that refuses the
// partition (metadata not yet propagated, or an old connection to a broker
// that moved) or cannot be reached would otherwise cost a fetch and a
// metadata request per round trip, thousands a second.
const (
	lostBackoff    = 50 * time.Millisecond
	maxLostBackoff = time.Second
)

// loseLeaderLocked forgets p's leader, so that it is looked up again: at
// once after a first loss (leaders move), after a growing pause when the
// loss repeats.
func (f *Fetcher) loseLeaderLocked(p *part) {
	p.leader = -1
	f.meta.Invalidate(p.tp.Topic)
	p.lost = min(p.lost+1, 8)
	if p.lost > 1 {
		p.resolveAt = time.Now().Add(min(lostBackoff<<(p.lost-2), maxLostBackoff))
	}
}

// loopKey names a fetch loop: a broker and one of its streams.
type loopKey struct {
	broker int32
	stream int
}

// Fetcher fetches for a set of partitions of one source cluster.
type Fetcher struct {
	clients []*kgo.Client // one per stream: the first is New's
	meta    *leaders.Cache
	opts    Options

	mu    sync.Mutex
	parts map[TP]*part
	// gen is the last generation given to an Assign or Seek. It counts
	// for the whole fetcher, not per partition: a partition removed and
	// assigned again (a partition mirror stopped and started again in
	// the same agent) must not take a generation that a fetch still on
	// its way for the old assignment carries, whose chunk would
	// otherwise be delivered as the answer to the new offset.
	gen   uint64
	loops map[loopKey]context.CancelFunc
	wake  chan struct{} // closed and replaced when there may be new work
	// failing: brokers whose last fetch failed, counted in
	// Counters.Failing until a fetch there succeeds or nothing is
	// fetched there any more. (A failed fetch ends the broker's loop, so
	// this outlives loops.)
	failing map[int32]bool
}

// setFailing records whether broker's last fetch failed. A loop that Run
// has ended (ctx is done) records nothing, so that Run's cleanup stays last.
func (f *Fetcher) setFailing(ctx context.Context, broker int32, v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	f.setFailingLocked(broker, v)
}

func (f *Fetcher) setFailingLocked(broker int32, v bool) {
	if f.failing[broker] == v {
		return
	}
	if v {
		f.failing[broker] = true
		f.opts.Counters.Failing.Add(1)
	} else {
		delete(f.failing, broker)
		f.opts.Counters.Failing.Add(-1)
	}
}

// New returns a fetcher that uses cl (a client of the source cluster) and
// meta (leaders of that cluster).
func New(cl *kgo.Client, meta *leaders.Cache, opts Options) *Fetcher {
	opts.defaults()
	clients := append([]*kgo.Client{cl}, opts.Connections...)
	return &Fetcher{clients: clients, meta: meta, opts: opts, parts: map[TP]*part{}, loops: map[loopKey]context.CancelFunc{}, wake: make(chan struct{}), failing: map[int32]bool{}}
}

// followMoves brings the broker addresses of the client of stream up to
// those the leaders cache has seen, when the cache's count of address
// changes (meta.Moves) differs from followed, the count the calling loop
// last brought it to; it returns the count it brought it to. The first
// client's addresses follow by themselves: the cache's metadata requests go
// through it, and a client learns addresses from every metadata response it
// reads. The others fetch only, so when a broker came back at another
// address they would go on using the old one until their own metadata aged
// out, minutes later: a stall of the partitions on their loops (kfake, whose
// removed brokers keep their connections, answered them
// NOT_LEADER_FOR_PARTITION). It runs before every fetch: an atomic load
// unless an address changed.
func (f *Fetcher) followMoves(ctx context.Context, stream int, followed uint64) uint64 {
	moves := f.meta.Moves()
	if stream == 0 || moves == followed {
		return moves
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // brokers only
	if _, err := req.RequestWith(ctx, f.clients[stream]); err != nil {
		f.opts.Logger.Debug("refreshing broker addresses", "stream", stream, "error", err)
		return followed
	}
	return moves
}

// setLeaderLocked records p's leader and gives p the stream of that leader
// with the fewest partitions, so that a broker's partitions spread evenly
// over its connections (a hash put half of six on one).
func (f *Fetcher) setLeaderLocked(p *part, leader, epoch int32) {
	p.leader, p.epoch = leader, epoch
	use := make([]int, len(f.clients))
	for _, o := range f.parts {
		if o != p && o.leader == leader {
			use[o.stream]++
		}
	}
	p.stream = 0
	for s := range use {
		if use[s] < use[p.stream] {
			p.stream = s
		}
	}
}

func (f *Fetcher) wakeLocked() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// Assign starts fetching tp at offset, delivering chunks to the returned
// channel. Assigning a partition that is assigned already re-seeks it.
func (f *Fetcher) Assign(tp TP, offset int64) (<-chan Chunk, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.parts[tp]
	if !ok {
		p = &part{tp: tp, out: make(chan Chunk, f.opts.PartitionQueue+1), leader: -1, maxBytes: f.opts.PartitionMaxBytes}
		f.parts[tp] = p
	}
	f.gen++
	p.gen = f.gen
	p.offset = offset
	f.wakeLocked()
	return p.out, p.gen
}

// Seek moves tp's fetch position; chunks already delivered for the old
// position carry an older generation.
func (f *Fetcher) Seek(tp TP, offset int64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.parts[tp]
	if !ok {
		return 0
	}
	f.gen++
	p.gen = f.gen
	p.offset = offset
	f.wakeLocked()
	return p.gen
}

// Done tells the fetcher that a delivered chunk was consumed, releasing its
// budget bytes.
func (f *Fetcher) Done(c Chunk) {
	f.mu.Lock()
	p, ok := f.parts[c.TP]
	if ok {
		p.queued--
		p.held -= c.Size()
	}
	f.wakeLocked()
	f.mu.Unlock()
	if ok {
		// A removed partition's bytes were released by Remove.
		f.opts.Budget.Release(c.Size())
	}
}

// Remove stops fetching tp. Chunks still queued are dropped and their
// budget released.
func (f *Fetcher) Remove(tp TP) {
	f.mu.Lock()
	p, ok := f.parts[tp]
	delete(f.parts, tp)
	f.mu.Unlock()
	if !ok {
		return
	}
	f.opts.Budget.Release(p.held)
}

// Buffered returns the bytes fetched and not yet consumed, all partitions.
func (f *Fetcher) Buffered() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, p := range f.parts {
		n += p.held
	}
	return n
}

// Run fetches until ctx ends.
func (f *Fetcher) Run(ctx context.Context) error {
	defer func() {
		f.mu.Lock()
		for id, cancel := range f.loops {
			cancel()
			delete(f.loops, id)
		}
		for id := range f.failing {
			f.setFailingLocked(id, false)
		}
		f.mu.Unlock()
	}()
	for {
		f.resolveLeaders(ctx)
		f.mu.Lock()
		wake := f.wake
		need := map[int32]bool{}
		loops := map[loopKey]bool{}
		unresolved := false
		next := time.Second // until the next lookup of leaders
		for _, p := range f.parts {
			if p.leader >= 0 {
				need[p.leader] = true
				loops[loopKey{p.leader, p.stream}] = true
			} else {
				unresolved = true
				if d := time.Until(p.resolveAt); d > 0 {
					next = min(next, d)
				}
			}
		}
		for id := range f.failing {
			if !need[id] && !unresolved {
				// Nothing is fetched there now: its partitions
				// moved to brokers that answer. (While leaders are
				// unknown, such as with the source down, a broker
				// that failed stays counted.)
				f.setFailingLocked(id, false)
			}
		}
		for key := range loops {
			if _, ok := f.loops[key]; !ok {
				lctx, cancel := context.WithCancel(ctx)
				f.loops[key] = cancel
				go f.brokerLoop(lctx, key)
			}
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(next):
		}
	}
}

// resolveLeaders looks up the leader of every partition that has none.
func (f *Fetcher) resolveLeaders(ctx context.Context) {
	f.mu.Lock()
	var todo []TP
	now := time.Now()
	for tp, p := range f.parts {
		if p.leader < 0 && !now.Before(p.resolveAt) {
			todo = append(todo, tp)
		}
	}
	f.mu.Unlock()
	for _, tp := range todo {
		l, err := f.meta.Leader(ctx, tp.Topic, tp.Partition)
		if err != nil {
			f.opts.Logger.Debug("no leader yet", "partition", tp.String(), "error", err)
			continue
		}
		f.mu.Lock()
		if p, ok := f.parts[tp]; ok && p.leader < 0 {
			f.setLeaderLocked(p, l.Leader, l.Epoch)
			f.wakeLocked()
		}
		f.mu.Unlock()
	}
}

// session is one broker's incremental fetch session (KIP-227).
type session struct {
	id    int32
	epoch int32
	sent  map[TP]sentPart // what the broker's session holds
	// want is the loop's next reservation of the Budget (see
	// growReservation); a new session keeps it.
	want int64
}

// idleReservation is the least a loop reserves: what a loop whose fetches
// come back nearly empty settles at. A fetch reserves its MaxBytes until
// answered, including a long poll of partitions that have nothing new, so
// idle loops holding a partition share (1 MiB) each would keep the Budget
// from the loops that have data: an agent of 40 mirrors of a 3-broker
// source runs 240 loops, 240 MiB of the default 256. Kafka returns a whole
// first batch whatever MaxBytes says, so a small reservation never stalls a
// loop, and a loop whose data comes back doubles its reservation at each
// full fetch. (kfake left out the aborted transactions of a partition whose
// data the request's MaxBytes cut, which small requests make common; the
// dev clusters mend that, see devcluster/fetchcut.go.)
const idleReservation = 64 << 10

// growReservation sets the loop's next reservation from what its last fetch
// returned: doubled, up to MaxBytes, when that came back at least 3/4 full;
// halved, down to idleReservation (or PartitionMaxBytes when smaller), when
// under a quarter.
func (s *session) growReservation(o *Options, reserved, returned int64) {
	switch {
	case returned >= reserved*3/4:
		s.want = min(s.want*2, int64(o.MaxBytes))
	case returned < reserved/4:
		s.want = max(s.want/2, min(idleReservation, int64(o.PartitionMaxBytes)))
	}
}

type sentPart struct {
	offset   int64
	maxBytes int32
	epoch    int32
}

// invalidate marks tp's offset in the broker's session as unknown, so the
// next request sends it again, or forgets it, but never leaves the broker
// fetching it from a position the fetcher no longer wants. (Deleting it from
// sent instead would leave the broker serving it from its old offset.)
func (s *session) invalidate(tp TP) {
	s.sent[tp] = sentPart{offset: -1}
}

// newSession returns a loop's session before its first fetch, reserving a
// partition share.
func newSession(o *Options) session {
	s := session{want: int64(o.PartitionMaxBytes)}
	s.reset()
	return s
}

func (s *session) reset() {
	s.id, s.epoch = 0, 0
	s.sent = map[TP]sentPart{}
}

func (f *Fetcher) brokerLoop(ctx context.Context, key loopKey) {
	broker := key.broker
	log := f.opts.Logger.With("source_broker", broker, "stream", key.stream)
	sess := newSession(&f.opts)
	backoff := 50 * time.Millisecond
	counters := f.opts.Counters
	// mayBeFailing: the broker may be counted as failing, by this loop or
	// by an earlier one, so a success must clear it. Kept here so that a
	// steady run of successes does not take f.mu for it at every fetch.
	mayBeFailing := true
	// followed is the meta.Moves count this loop's client was brought up
	// to; a new loop (after a failure, a leader move) checks once more.
	var followed uint64
	for ctx.Err() == nil {
		followed = f.followMoves(ctx, key.stream, followed)
		req, gens, wait := f.buildRequest(ctx, key, &sess)
		if req == nil {
			select {
			case <-ctx.Done():
				return
			case <-wait:
			case <-time.After(time.Second):
			}
			continue
		}
		// A fetch is answered within MaxWait. The deadline covers the
		// time before the client writes the request (a connection
		// being opened, earlier requests); once written, the client
		// itself gives up reading the response after MaxWait plus its
		// RequestTimeoutOverhead.
		rctx, rcancel := context.WithTimeout(ctx, f.opts.MaxWait+f.opts.RequestTimeout)
		kresp, err := f.clients[key.stream].Broker(int(broker)).Request(rctx, req)
		rcancel()
		stats.requests.Add(1)
		counters.Requests.Add(1)
		// The request's reservation: its chunks take their own bytes.
		reserved := int64(req.MaxBytes)
		if err != nil {
			f.opts.Budget.Release(reserved)
			if ctx.Err() != nil {
				return
			}
			stats.errors.Add(1)
			counters.Errors.Add(1)
			f.setFailing(ctx, broker, true)
			mayBeFailing = true
			log.Debug("fetch failed", "error", err)
			sess.reset()
			f.invalidateBroker(broker)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		resp := kresp.(*kmsg.FetchResponse)
		stats.throttleMillis.Add(int64(resp.ThrottleMillis))
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			f.opts.Budget.Release(reserved)
			stats.errors.Add(1)
			counters.Errors.Add(1)
			f.setFailing(ctx, broker, true)
			mayBeFailing = true
			log.Debug("fetch session error", "error", err)
			sess.reset()
			if !errors.Is(err, kerr.FetchSessionIDNotFound) && !errors.Is(err, kerr.InvalidFetchSessionEpoch) {
				sleep(ctx, backoff)
				backoff = min(backoff*2, 2*time.Second)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		if mayBeFailing {
			f.setFailing(ctx, broker, false)
			mayBeFailing = false
		}
		if req.SessionEpoch == 0 {
			// 0 when the broker keeps no session for us: every
			// fetch is then a full one.
			sess.id = resp.SessionID
		}
		returned, cut := f.handleResponse(ctx, key, &sess, resp, gens)
		f.opts.Budget.Release(reserved)
		if cut {
			returned = reserved // as full: the fetch left data behind
		}
		sess.growReservation(&f.opts, reserved, returned)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// invalidateBroker forgets the leader of every partition led by broker, so
// they are resolved again (the broker may be gone).
func (f *Fetcher) invalidateBroker(broker int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.parts {
		if p.leader == broker {
			f.loseLeaderLocked(p)
		}
	}
	for s := range f.clients {
		f.stopLoopLocked(loopKey{broker, s})
	}
	f.wakeLocked()
}

func (f *Fetcher) stopLoopLocked(key loopKey) {
	if cancel, ok := f.loops[key]; ok {
		cancel()
		delete(f.loops, key)
	}
}

// buildRequest returns the next fetch of loop key, or nil and a channel to
// wait on when no partition it fetches may be fetched now. A request holds
// its MaxBytes of the Budget: the caller releases them once it is answered.
func (f *Fetcher) buildRequest(ctx context.Context, key loopKey, sess *session) (*kmsg.FetchRequest, map[TP]uint64, <-chan struct{}) {
	freed := f.opts.Budget.Freed()
	thr := f.opts.Throttle
	thrScope, thrOK, thrWait, thrChanged := thr.readyScope()
	f.mu.Lock()
	defer f.mu.Unlock()
	wake := f.wake
	// Partitions this broker should fetch now.
	ready := map[TP]*part{}
	throttled := map[TP]bool{}
	var led, heldByThrottle int
	for tp, p := range f.parts {
		if p.leader != key.broker || p.stream != key.stream {
			continue
		}
		led++
		if p.queued >= f.opts.PartitionQueue || p.held >= int64(p.maxBytes)*2 {
			continue
		}
		if thrScope.applies(tp) {
			if !thrOK {
				// Left out, like a paused partition, until the
				// throttle's bucket refills.
				heldByThrottle++
				continue
			}
			throttled[tp] = true
		}
		ready[tp] = p
	}
	if led == 0 {
		// Nothing is led here any more: end this loop; Run starts a
		// new one when a partition moves back.
		f.stopLoopLocked(key)
		return nil, nil, wake
	}
	var reserved int64
	if len(ready) > 0 {
		// A loop that wants more than a partition share takes what is
		// free down to a share; an idle one takes its little or nothing.
		// sess.want stays within MaxBytes (defaults, growReservation).
		reserved = f.opts.Budget.Reserve(sess.want, min(sess.want, int64(f.opts.PartitionMaxBytes)))
	}
	if reserved == 0 {
		var budget <-chan struct{}
		if len(ready) > 0 {
			budget = freed // wait for budget, or for other news
		}
		var refill <-chan time.Time
		var changed <-chan struct{}
		if heldByThrottle > 0 {
			refill, changed = time.After(thrWait), thrChanged
		}
		if budget == nil && refill == nil {
			return nil, nil, wake
		}
		merged := make(chan struct{})
		go func() {
			select {
			case <-budget:
			case <-refill:
			case <-changed:
			case <-wake:
			case <-ctx.Done():
			}
			close(merged)
		}()
		return nil, nil, merged
	}

	if sess.id == 0 {
		// No session (yet): this is a full fetch of every ready partition.
		sess.sent = map[TP]sentPart{}
	}
	topicIDs := map[string][16]byte{}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(f.opts.MaxWait / time.Millisecond)
	if len(ready)+heldByThrottle < led {
		// Partitions held back until their chunks are written are not in
		// this fetch; if the ones that are have nothing new, a long poll
		// would keep the held-back ones from being fetched until it ends.
		req.MaxWaitMillis = min(req.MaxWaitMillis, int32(heldBackWait/time.Millisecond))
	}
	if heldByThrottle > 0 {
		// Likewise for partitions the throttle holds back: they may be
		// fetched again once the bucket has refilled.
		req.MaxWaitMillis = min(req.MaxWaitMillis, int32(max(thrWait, heldBackWait)/time.Millisecond))
	}
	var chunk int32
	if len(throttled) > 0 {
		chunk = thr.Chunk()
	}
	req.MinBytes = 1
	req.MaxBytes = int32(reserved) // released by the loop once answered
	req.IsolationLevel = 1         // read_committed: copy only below the LSO
	req.SessionID = sess.id
	req.SessionEpoch = sess.epoch
	gens := make(map[TP]uint64, len(ready))
	// Index into req.Topics, not a pointer: append moves the slice when it
	// grows, and a partition added through a pointer to the old array would
	// be left out of the request while sess.sent says the broker has it.
	byTopic := map[string]int{}
	for tp, p := range ready {
		gens[tp] = p.gen
		maxBytes := p.maxBytes
		if throttled[tp] {
			// Small fetches, so that the bytes the throttle charges
			// after the fact stay close to its ceiling.
			if p.throttledChunk != chunk {
				p.throttledMax, p.throttledChunk = chunk, chunk
			}
			maxBytes = min(p.throttledMax, p.maxBytes)
		}
		want := sentPart{offset: p.offset, maxBytes: maxBytes, epoch: p.epoch}
		if s, ok := sess.sent[tp]; ok && s == want && sess.id != 0 {
			continue // the session already fetches it from there
		}
		ti, ok := byTopic[tp.Topic]
		if !ok {
			t := kmsg.NewFetchRequestTopic()
			t.Topic = tp.Topic
			if md, err := f.meta.Topic(ctx, tp.Topic); err == nil {
				t.TopicID = md.ID
				topicIDs[tp.Topic] = md.ID
			}
			req.Topics = append(req.Topics, t)
			ti = len(req.Topics) - 1
			byTopic[tp.Topic] = ti
		}
		rt := &req.Topics[ti]
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = tp.Partition
		rp.FetchOffset = p.offset
		rp.CurrentLeaderEpoch = p.epoch
		rp.LastFetchedEpoch = -1
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = maxBytes
		rt.Partitions = append(rt.Partitions, rp)
		sess.sent[tp] = want
	}
	// Partitions the session holds that must not be fetched now.
	forgotten := map[string][]int32{}
	for tp := range sess.sent {
		if _, ok := ready[tp]; !ok {
			forgotten[tp.Topic] = append(forgotten[tp.Topic], tp.Partition)
			delete(sess.sent, tp)
		}
	}
	if sess.id != 0 {
		for topic, ps := range forgotten {
			ft := kmsg.NewFetchRequestForgottenTopic()
			ft.Topic = topic
			ft.TopicID = topicIDs[topic]
			if ft.TopicID == ([16]byte{}) {
				if md, err := f.meta.Topic(ctx, topic); err == nil {
					ft.TopicID = md.ID
				}
			}
			ft.Partitions = ps
			req.ForgottenTopics = append(req.ForgottenTopics, ft)
		}
		req.SessionEpoch = sess.epoch
		sess.epoch++
	} else {
		// A full fetch that asks for a new session.
		req.SessionEpoch = 0
		sess.epoch = 1
	}
	return req, gens, nil
}

// handleResponse delivers what resp returned and says how many bytes of
// records that was.
//
// cut says that the response left data of a partition behind though its
// share had room: the request's MaxBytes ran out before it (Kafka sends the
// partitions after that point without records, kfake leaves them out). The
// loop then grows its reservation as after a full fetch, or a partition the
// broker puts after busier ones would wait for as long as those have data:
// kfake puts the partitions a request names, those that moved, first.
func (f *Fetcher) handleResponse(ctx context.Context, key loopKey, sess *session, resp *kmsg.FetchResponse, gens map[TP]uint64) (returned int64, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var staleSession bool
	defer func() {
		if staleSession {
			sess.reset()
		}
	}()
	thrScope := f.opts.Throttle.scope()
	idTopics := map[[16]byte]string{}
	for _, rt := range resp.Topics {
		topic := rt.Topic
		if topic == "" {
			if len(idTopics) == 0 {
				for tp := range gens {
					if md, err := f.meta.Topic(ctx, tp.Topic); err == nil {
						idTopics[md.ID] = tp.Topic
					}
				}
			}
			topic = idTopics[rt.TopicID]
		}
		for _, rp := range rt.Partitions {
			tp := TP{topic, rp.Partition}
			p, ok := f.parts[tp]
			gen, asked := gens[tp]
			if !ok || p.leader != key.broker || p.stream != key.stream || !asked {
				// Not wanted from this loop now: the next request
				// forgets it (it stays in sess.sent until then).
				continue
			}
			if gen != p.gen {
				// Seeked while the fetch was out: the session
				// must be told the new offset.
				sess.invalidate(tp)
				continue
			}
			err := kerr.ErrorForCode(rp.ErrorCode)
			switch {
			case err == nil:
				p.lost = 0
			case leaders.IsLeadershipError(err) || errors.Is(err, kerr.KafkaStorageError):
				f.loseLeaderLocked(p)
				sess.invalidate(tp)
				f.wakeLocked()
				continue
			default:
				sess.invalidate(tp)
				f.deliverLocked(p, Chunk{TP: tp, Gen: p.gen, FetchOffset: p.offset, HighWatermark: rp.HighWatermark,
					LastStable: rp.LastStableOffset, LogStart: rp.LogStartOffset, Err: err})
				continue
			}
			whole, next := wholeBatches(rp.RecordBatches)
			if stale(whole, p.offset) {
				// A broker answers from the offset its session holds; data
				// that ends before the offset we want means the session
				// and the fetcher disagree about it, which a correct
				// fetcher and broker never do (it was once a symptom of
				// partitions left out of requests that sess.sent counted
				// as sent). Drop the data, aborted list included, rather
				// than hand the owner records behind its position, and
				// start a new session so that both agree again.
				f.opts.Logger.Warn("fetch returned data below the fetch offset; resetting the fetch session", "partition", tp.String(), "offset", p.offset)
				staleSession = true
				continue
			}
			throttled := thrScope.applies(tp)
			if len(whole) == 0 && len(rp.RecordBatches) > 0 {
				// The next batch is larger than the partition's share:
				// ask for more next time.
				if throttled && p.throttledMax > 0 && p.throttledMax < p.maxBytes {
					p.throttledMax = min(p.throttledMax*2, p.maxBytes)
				} else {
					p.maxBytes = min(p.maxBytes*2, 256<<20)
				}
			}
			if len(whole) >= int(p.maxBytes)*3/4 && p.maxBytes < growMaxBytes && rp.HighWatermark > next {
				// A full share with more behind it: one fetch in flight
				// per broker moves a share per round trip, so over a
				// wide-area link the share must grow to fill it.
				p.maxBytes = min(p.maxBytes*2, growMaxBytes)
			}
			if len(rp.RecordBatches) == 0 && rp.LastStableOffset > p.offset {
				cut = true
			}
			if next > p.offset {
				p.offset = next
			} else if len(whole) == 0 {
				// Only high watermark news: deliver it so lag stays fresh,
				// without holding budget.
				f.deliverLocked(p, Chunk{TP: tp, Gen: p.gen, FetchOffset: p.offset, HighWatermark: rp.HighWatermark,
					LastStable: rp.LastStableOffset, LogStart: rp.LogStartOffset})
				continue
			}
			c := Chunk{TP: tp, Gen: p.gen, FetchOffset: gensOffset(sess, tp, p), Records: whole, HighWatermark: rp.HighWatermark,
				LastStable: rp.LastStableOffset, LogStart: rp.LogStartOffset}
			for _, a := range rp.AbortedTransactions {
				c.Aborted = append(c.Aborted, Aborted{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
			}
			f.opts.Budget.Take(c.Size())
			returned += c.Size()
			f.opts.Counters.Bytes.Add(c.Size())
			if throttled {
				f.opts.Throttle.take(c.Size())
			}
			f.deliverLocked(p, c)
		}
	}
	return returned, cut
}

// gensOffset is the offset the session was fetching tp from when it
// answered (before this response moved p.offset).
func gensOffset(sess *session, tp TP, p *part) int64 {
	if s, ok := sess.sent[tp]; ok {
		return s.offset
	}
	return p.offset
}

func (f *Fetcher) deliverLocked(p *part, c Chunk) {
	if len(c.Records) == 0 && c.Err == nil {
		// Watermark-only news is dropped rather than queued when the
		// partition is busy: fresher news follows with the data.
		if p.queued >= f.opts.PartitionQueue {
			return
		}
	}
	p.queued++
	p.held += c.Size()
	p.out <- c // never blocks: queued < capacity
}

// stale says whether fetched batches end before offset, the position asked
// for (a batch may start below it, but must reach it).
func stale(whole []byte, offset int64) bool {
	first, _, err := recordbatch.Next(whole)
	if err != nil || first == nil {
		return false
	}
	h, err := recordbatch.ParseHeader(first)
	return err == nil && h.LastOffset() < offset
}

// wholeBatches cuts a trailing partial batch and returns the whole batches
// and the offset after the last of them (0 when there is none).
func wholeBatches(raw []byte) ([]byte, int64) {
	var next int64
	rest := raw
	for len(rest) > 0 {
		batch, r, err := recordbatch.Next(rest)
		if err != nil || batch == nil {
			break
		}
		h, err := recordbatch.ParseHeader(batch)
		if err != nil {
			break
		}
		next = h.LastOffset() + 1
		rest = r
	}
	return raw[:len(raw)-len(rest)], next
}
