package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/topics"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// This file is a harness that runs partition mirrors on source logs of any
// shape. The source is a kfake cluster whose Fetch requests are answered from
// a log built batch by batch in the test (srcLog): markers, aborted runs,
// holes and compacted batches that no client can produce. The destination is
// a strict dev cluster, read back raw afterwards.

// tsBase is the create time of source offset 0; offset o has tsBase+o.
const tsBase = int64(1_700_000_000_000)

// srcLog is one source partition.
type srcLog struct {
	start, end int64 // log start offset and high watermark
	lso        int64 // last stable offset
	batches    [][]byte
	headers    []recordbatch.Header
	aborted    []abortedRange

	mu sync.Mutex
	// served: only batches ending below it are fetched (a process that
	// is killed once it has mirrored them); the bounds stay the log's.
	served int64
}

func (l *srcLog) setServed(end int64) {
	l.mu.Lock()
	l.served = end
	l.mu.Unlock()
}

// servedEnd is where the mirror's fetches stop for now.
func (l *srcLog) servedEnd() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served
}

// read returns the batches from offset on as a fetch does (up to maxBatches,
// and only those ending below served; with readCommitted only below the last
// stable offset, with the aborted transactions overlapping them).
func (l *srcLog) read(offset int64, readCommitted bool, maxBatches int, maxBytes int32, served int64) ([]byte, []fetcher.Aborted) {
	limit := l.end
	if readCommitted {
		limit = l.lso
	}
	var (
		out   []byte
		n     int
		upper = limit
	)
	for i, h := range l.headers {
		if h.LastOffset() < offset {
			continue
		}
		if h.BaseOffset >= limit || h.LastOffset() >= served || n == maxBatches && maxBatches > 0 || n > 0 && len(out)+len(l.batches[i]) > int(maxBytes) {
			upper = min(upper, h.BaseOffset)
			break
		}
		out = append(out, l.batches[i]...)
		n++
	}
	var aborted []fetcher.Aborted
	if readCommitted {
		for _, a := range l.aborted {
			if a.marker >= offset && a.first < upper {
				aborted = append(aborted, fetcher.Aborted{ProducerID: a.pid, FirstOffset: a.first})
			}
		}
	}
	return out, aborted
}

func (l *srcLog) bounds() leaders.Bounds {
	return leaders.Bounds{LogStart: l.start, HighWatermark: l.end, LastStable: l.lso}
}

// cuts are the offsets where a mirror of l can stop between two writes: the
// end of every batch, and the log start.
func (l *srcLog) cuts() []int64 {
	var out []int64
	if l.start > 0 {
		out = append(out, l.start)
	}
	for _, h := range l.headers {
		if c := h.LastOffset() + 1; c > l.start && c < l.end && (len(out) == 0 || out[len(out)-1] != c) {
			out = append(out, c)
		}
	}
	return out
}

// logBuilder appends batches to a srcLog at increasing offsets.
type logBuilder struct {
	t    testing.TB
	log  *srcLog
	next int64
	seq  map[int64]int32
	open map[int64]int64 // producer id -> first offset of its open transaction
}

// newLog starts a log whose first batch is at first and whose log start is
// start (above first: the source's DeleteRecords cut a batch).
func newLog(t testing.TB, first, start int64) *logBuilder {
	return &logBuilder{t: t, log: &srcLog{start: start}, next: first, seq: map[int64]int32{}, open: map[int64]int64{}}
}

// record is the record at source offset o; keys, values and headers vary,
// null and empty included, so that a mirror's copy can be compared exactly.
func record(o int64) recordbatch.Record {
	r := recordbatch.Record{
		Offset:    o,
		Timestamp: tsBase + o,
		Key:       []byte("key-" + strconv.FormatInt(o, 10)),
		Value:     bytes.Repeat([]byte{byte('a' + o%26)}, int(1+o%40)),
		Headers:   []recordbatch.RecordHeader{{Key: "offset", Value: []byte(strconv.FormatInt(o, 10))}},
	}
	switch {
	case o%7 == 3:
		r.Value = nil // a tombstone
	case o%11 == 5:
		r.Key = []byte{}
	case o%13 == 6:
		r.Key = nil
		r.Headers = append(r.Headers, recordbatch.RecordHeader{Key: "null"})
	}
	return r
}

// batch appends a batch of producer pid over n offsets holding the records
// at the offset deltas in keep (every one when keep is nil; none: an empty
// header, as the cleaner keeps a producer's last batch).
func (b *logBuilder) batch(pid int64, attrs int16, codec recordbatch.Codec, n int, keep []int) []byte {
	b.t.Helper()
	base := b.next
	if keep == nil {
		for i := range n {
			keep = append(keep, i)
		}
	}
	epoch, seq := int16(0), b.seq[pid]
	if pid < 0 {
		epoch, seq = -1, -1
	}
	var raw []byte
	if len(keep) == 0 {
		// An empty header: built with one record, cut to the header.
		full, err := recordbatch.Build(recordbatch.CodecNone, attrs, base, tsBase+base, pid, epoch, seq, []recordbatch.Record{record(base)})
		if err != nil {
			b.t.Fatal(err)
		}
		raw = full[:recordbatch.HeaderSize]
		binary.BigEndian.PutUint32(raw[8:], uint32(recordbatch.HeaderSize-12))
		binary.BigEndian.PutUint32(raw[57:], 0)
	} else {
		recs := make([]recordbatch.Record, len(keep))
		for i, d := range keep {
			recs[i] = record(base + int64(d))
		}
		var err error
		if raw, err = recordbatch.Build(codec, attrs, base, tsBase+base, pid, epoch, seq, recs); err != nil {
			b.t.Fatal(err)
		}
	}
	// The cleaner keeps the last offset delta of a batch it thins out.
	binary.BigEndian.PutUint32(raw[23:], uint32(n-1))
	fixCRC(raw)
	b.add(raw)
	if pid >= 0 {
		b.seq[pid] = addSeq(seq, int32(n))
	}
	if attrs&recordbatch.AttrTransactional != 0 {
		if _, ok := b.open[pid]; !ok {
			b.open[pid] = base
		}
	}
	b.next += int64(n)
	return raw
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func fixCRC(b []byte) { binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli)) }

func (b *logBuilder) add(raw []byte) {
	b.t.Helper()
	h, err := recordbatch.ParseHeader(raw)
	if err != nil {
		b.t.Fatal(err)
	}
	b.log.batches = append(b.log.batches, raw)
	b.log.headers = append(b.log.headers, h)
}

// plain appends a dense batch of n records of producer pid (-1: not
// idempotent).
func (b *logBuilder) plain(pid int64, codec recordbatch.Codec, n int) { b.batch(pid, 0, codec, n, nil) }

// txn appends a dense batch of n records of pid's transaction.
func (b *logBuilder) txn(pid int64, codec recordbatch.Codec, n int) {
	b.batch(pid, recordbatch.AttrTransactional, codec, n, nil)
}

// compacted appends a batch of n offsets that compaction left with the
// records at deltas keep only (none: an empty header).
func (b *logBuilder) compacted(pid int64, txn bool, codec recordbatch.Codec, n int, keep ...int) {
	var attrs int16
	if txn {
		attrs = recordbatch.AttrTransactional
	}
	if keep == nil {
		keep = []int{}
	}
	b.batch(pid, attrs, codec, n, keep)
}

// logAppendTime appends a LogAppendTime batch whose append time differs from
// its records' create times.
func (b *logBuilder) logAppendTime(pid int64, codec recordbatch.Codec, n int) {
	raw := b.batch(pid, recordbatch.AttrLogAppendTime, codec, n, nil)
	binary.BigEndian.PutUint64(raw[35:], uint64(tsBase+1_000_000+b.next))
	fixCRC(raw)
	b.log.headers[len(b.log.headers)-1].MaxTimestamp = tsBase + 1_000_000 + b.next
}

// marker appends pid's transaction marker.
func (b *logBuilder) marker(pid int64, commit bool) {
	b.t.Helper()
	raw, err := recordbatch.BuildControl(commit, b.next, tsBase+b.next, pid, 0, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	b.add(raw)
	if first, ok := b.open[pid]; ok && !commit {
		b.log.aborted = append(b.log.aborted, abortedRange{pid: pid, first: first, marker: b.next})
	} else if !ok && !commit {
		b.t.Fatalf("abort marker of producer %d at %d without a transaction", pid, b.next)
	}
	delete(b.open, pid)
	b.next++
}

func (b *logBuilder) commit(pid int64) { b.marker(pid, true) }
func (b *logBuilder) abort(pid int64)  { b.marker(pid, false) }

// gap skips n offsets whose batches the cleaner removed.
func (b *logBuilder) gap(n int) { b.next += int64(n) }

// removedTxn skips n offsets of pid's transaction that the cleaner removed
// (records of an aborted transaction): the transaction stays listed.
func (b *logBuilder) removedTxn(pid int64, n int) {
	if _, ok := b.open[pid]; !ok {
		b.open[pid] = b.next
	}
	b.next += int64(n)
}

func (b *logBuilder) done() *srcLog {
	b.t.Helper()
	if len(b.open) > 0 {
		b.t.Fatalf("transactions left open: %v", b.open)
	}
	b.log.end, b.log.lso, b.log.served = b.next, b.next, 1<<62
	return b.log
}

// sourceCluster answers the Fetch requests of a kfake cluster from srcLogs.
type sourceCluster struct {
	c *devcluster.Cluster

	mu     sync.Mutex
	byName map[string]*srcLog
	byID   map[[16]byte]string
	// perFetch caps the batches a fetch returns (0: no cap).
	perFetch int
	// failing: topics whose next fetch gets an error.
	failing map[string]bool
}

// failFetch answers the next fetch of topic with an error.
func (s *sourceCluster) failFetch(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing == nil {
		s.failing = map[string]bool{}
	}
	s.failing[topic] = true
}

func startSource(t *testing.T) *sourceCluster {
	s := &sourceCluster{
		c:      devclustertest.Start(t, devcluster.Name("source"), devcluster.Lenient()),
		byName: map[string]*srcLog{},
		byID:   map[[16]byte]string{},
	}
	kc := s.c.Kfake()
	kc.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		var anything bool
		for _, rt := range req.Topics {
			s.mu.Lock()
			name := rt.Topic
			if name == "" {
				name = s.byID[rt.TopicID]
			}
			l, per, failing := s.byName[name], s.perFetch, s.failing[name]
			delete(s.failing, name)
			s.mu.Unlock()
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = name, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				switch {
				case l == nil || rp.Partition != 0:
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				case failing:
					sp.ErrorCode = kerr.UnknownServerError.Code
				case rp.FetchOffset < l.start || rp.FetchOffset > l.end:
					sp.ErrorCode = kerr.OffsetOutOfRange.Code
				default:
					b := l.bounds()
					sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = b.HighWatermark, b.LastStable, b.LogStart
					recs, aborted := l.read(rp.FetchOffset, req.IsolationLevel == 1, per, rp.PartitionMaxBytes, l.servedEnd())
					sp.RecordBatches = recs
					for _, a := range aborted {
						at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
						at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
						sp.AbortedTransactions = append(sp.AbortedTransactions, at)
					}
					anything = anything || len(recs) > 0
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		if !anything {
			// A long poll, short: nothing new until the test serves more.
			// (It holds the source cluster's loop, which serves nothing
			// else that matters; overlapping SleepControls race inside
			// kfake.)
			time.Sleep(5 * time.Millisecond)
		}
		return resp, nil, true
	})
	return s
}

// addTopic creates topic on the source cluster (for its metadata) and serves
// l as its partition 0.
func (s *sourceCluster) addTopic(t *testing.T, topic string, l *srcLog) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.c.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating source topic %s: %v", topic, err)
	}
	s.mu.Lock()
	s.byName[topic], s.byID[resp.ID] = l, topic
	s.mu.Unlock()
}

// memSource is the Source of a partition mirror, read from the srcLog the
// source cluster serves for the topic.
type memSource struct {
	s     *sourceCluster
	topic string
}

func (s memSource) log() *srcLog {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	return s.s.byName[s.topic]
}

func (s memSource) Bounds(context.Context, string, int32) (leaders.Bounds, error) {
	return s.log().bounds(), nil
}

func (s memSource) ReadAt(_ context.Context, tp fetcher.TP, offset int64, maxBytes int32) (fetcher.Chunk, error) {
	l := s.log()
	if offset < l.start || offset > l.end {
		return fetcher.Chunk{}, fmt.Errorf("reading %s at %d: %w", tp, offset, kerr.OffsetOutOfRange)
	}
	// Not a fetch of the mirror's copy: the whole log is there.
	recs, _ := l.read(offset, false, 0, maxBytes, 1<<62)
	b := l.bounds()
	return fetcher.Chunk{TP: tp, FetchOffset: offset, Records: recs, HighWatermark: b.HighWatermark, LastStable: b.LastStable, LogStart: b.LogStart}, nil
}

// memCheckpoints keeps alignments in memory, as the state topic would.
type memCheckpoints struct {
	mu sync.Mutex
	a  map[fetcher.TP]Alignment
}

func (c *memCheckpoints) Alignment(tp fetcher.TP) (Alignment, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.a[tp]
	return a, ok
}

func (c *memCheckpoints) SaveAlignment(_ context.Context, tp fetcher.TP, a Alignment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.a == nil {
		c.a = map[fetcher.TP]Alignment{}
	}
	c.a[tp] = a
	return nil
}

func (c *memCheckpoints) forget(tp fetcher.TP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.a, tp)
}

// mirrorRig is one mirror topic partition across agent restarts: what
// outlives a process (the state topic's records, the plain writer's
// producer id) and how to start a process.
type mirrorRig struct {
	t       *testing.T
	src     *sourceCluster
	dst     *devcluster.Cluster
	log     *srcLog
	tp      fetcher.TP
	fillers FillerMethod
	// abortSpan is the processes' Config.AbortSpan (0: the default).
	abortSpan time.Duration
	pid       int64
	epoch     int16
	ckpt      *memCheckpoints
	owned     *fakeProducers
	// dw reads and writes the destination for the test itself.
	dw *writer.Writer
	// dup is the duplicate markers armed for the partition, if any.
	dup *devcluster.DuplicateMarkersHandle
	// last is the process started last.
	last *process
	// full is the source log a case serves later.
	full *srcLog
	// dstOpts are more options of each process's destination client.
	dstOpts []kgo.Opt
}

// newRig creates topic on both clusters, serving l on the source.
func newRig(t *testing.T, src *sourceCluster, dst *devcluster.Cluster, topic string, l *srcLog, fillers FillerMethod) *mirrorRig {
	t.Helper()
	ctx := context.Background()
	src.addTopic(t, topic, l)
	cl, err := kgo.NewClient(writer.ClientOpts([]kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)})...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfgs := map[string]*string{}
	for k, v := range topics.DestinationConfigs(nil, nil, 0) {
		cfgs[k] = kmsg.StringPtr(v)
	}
	cfgs["retention.ms"], cfgs["retention.bytes"] = kmsg.StringPtr("-1"), kmsg.StringPtr("-1")
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, cfgs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating destination topic %s: %v", topic, err)
	}
	w := writer.New(cl, leaders.New(cl))
	pid, epoch, err := w.InitProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := fetcher.TP{Topic: topic, Partition: 0}
	return &mirrorRig{t: t, src: src, dst: dst, log: l, tp: tp, fillers: fillers, pid: pid, epoch: epoch,
		ckpt: &memCheckpoints{}, owned: &fakeProducers{ids: map[fetcher.TP][]int64{}}, dw: w}
}

// replaceSource makes the source partition l from now on (its retention
// moved the log start, or it was truncated).
func (r *mirrorRig) replaceSource(l *srcLog) {
	r.src.mu.Lock()
	r.src.byName[r.tp.Topic] = l
	r.src.mu.Unlock()
	r.log = l
}

// txnIDs are the partition's destination transactional ids: of the
// transaction of aborted records, and of fillers.
func (r *mirrorRig) txnIDs() (data, fill string) {
	m := New(Config{Mirror: "m", TP: r.tp})
	return m.data.id, m.fill.id
}

// process is one agent process running the partition mirror.
type process struct {
	m      *Mirror
	cfg    Config
	ctx    context.Context    // the process's, its fetcher's
	cancel context.CancelFunc // the partition mirror's
	done   chan struct{}      // closed when the partition mirror's Run has returned
	fdone  chan struct{}
	close  func()
}

// start starts a process: clients, fetcher and partition mirror of its own.
func (r *mirrorRig) start() *process {
	r.t.Helper()
	scl, err := kgo.NewClient(kgo.SeedBrokers(r.src.c.Bootstrap()...))
	if err != nil {
		r.t.Fatal(err)
	}
	dcl, err := kgo.NewClient(writer.ClientOpts(append([]kgo.Opt{kgo.SeedBrokers(r.dst.Bootstrap()...)}, r.dstOpts...))...)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := fetcher.New(scl, leaders.New(scl), fetcher.Options{MaxWait: 20 * time.Millisecond})
	p := &process{ctx: ctx, fdone: make(chan struct{}), cfg: Config{
		Mirror: "m", TP: r.tp, ProducerID: r.pid, Epoch: r.epoch,
		Fetcher: f, Source: memSource{r.src, r.tp.Topic}, Writer: writer.New(dcl, leaders.New(dcl)),
		Checkpoints: r.ckpt, Producers: r.owned, Fillers: r.fillers, AbortSpan: r.abortSpan,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: devclustertest.Writer(r.t)}),
	}}
	go func() {
		defer close(p.fdone)
		_ = f.Run(ctx)
	}()
	p.run()
	p.close = func() {
		cancel()
		<-p.done
		<-p.fdone
		scl.Close()
		dcl.Close()
	}
	r.t.Cleanup(p.close)
	r.last = p
	return p
}

// run starts a partition mirror in the process, as the agent's runner does:
// a fresh Mirror on the process's writer and fetcher, whose registration
// with the fetcher goes once its Run has returned.
func (p *process) run() {
	ctx, cancel := context.WithCancel(p.ctx)
	m := New(p.cfg)
	done := make(chan struct{})
	p.m, p.cancel, p.done = m, cancel, done
	go func() {
		defer close(done)
		defer p.cfg.Fetcher.Remove(p.cfg.TP)
		m.Run(ctx)
	}()
}

// restart stops the process's partition mirror as the runner does when the
// partition is taken from it (its context cancelled, whatever it was doing)
// and starts another in the same process once Run has returned: the
// writer's connections, and what is on its way through them, stay.
func (p *process) restart() {
	p.cancel()
	<-p.done
	p.run()
}

// mirroredTo is closed once the process has mirrored up to destination
// offset end (or has stopped).
func (r *mirrorRig) mirroredTo(p *process, end int64) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			st := p.m.Status()
			if st.State == Mirroring && st.DestinationOffset == end {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return ch
}

// heldWrite is a destination write of the agent that the destination
// received and left unanswered, unapplied.
type heldWrite struct {
	r    *mirrorRig
	held chan struct{} // closed when the write is held
	req  kmsg.Request
	node int32
}

// holdWrite holds the k-th write request the agent sends for the
// partition: Produce, AddPartitionsToTxn, EndTxn, WriteTxnMarkers or
// DeleteRecords.
func (r *mirrorRig) holdWrite(k int) *heldWrite {
	kc := r.dst.Kfake()
	data, fill := r.txnIDs()
	h := &heldWrite{r: r, held: make(chan struct{})}
	seen := 0
	r.destControl(-1, func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		if !r.isWrite(kreq, data, fill) {
			return nil, false, false, nil
		}
		if seen++; seen < k {
			return nil, false, false, nil
		}
		h.req, h.node = kreq, kc.CurrentNode()
		close(h.held)
		return nil, true, true, nil // no answer: the sender waits for it
	})
	return h
}

// destControl installs fn for the destination's requests of key (-1: every
// key). fn returns done once it has acted; the control then passes every
// request on but stays installed. No control is ever dropped (nor any
// devcluster fault removed): kfake drops a control by shifting the list it
// is walking for the request at hand, which skips the control after it.
func (r *mirrorRig) destControl(key int16, fn func(kmsg.Request) (resp kmsg.Response, handled, done bool, err error)) {
	kc := r.dst.Kfake()
	var done atomic.Bool
	kc.ControlKey(key, func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if done.Load() {
			return nil, nil, false
		}
		resp, handled, d, err := fn(kreq)
		if d {
			done.Store(true)
		}
		return resp, err, handled
	})
}

// apply hands the held write to the destination now, through a connection
// of its own: the broker handles a request it has read even when its sender
// is gone.
func (h *heldWrite) apply() {
	r := h.r
	r.t.Helper()
	cl, err := kgo.NewClient(writer.ClientOpts([]kgo.Opt{kgo.SeedBrokers(r.dst.Bootstrap()...)})...)
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Broker(int(h.node)).Request(context.Background(), h.req); err != nil {
		r.t.Fatalf("applying the held %T: %v", h.req, err)
	}
}

// isWrite says whether req is a write of the agent for the partition.
func (r *mirrorRig) isWrite(kreq kmsg.Request, data, fill string) bool {
	switch req := kreq.(type) {
	case *kmsg.ProduceRequest:
		for _, rt := range req.Topics {
			if rt.Topic == r.tp.Topic {
				return true
			}
		}
	case *kmsg.AddPartitionsToTxnRequest:
		return req.TransactionalID == data || req.TransactionalID == fill
	case *kmsg.EndTxnRequest:
		return req.TransactionalID == data || req.TransactionalID == fill
	case *kmsg.WriteTxnMarkersRequest:
		for _, m := range req.Markers {
			for _, rt := range m.Topics {
				if rt.Topic == r.tp.Topic {
					return true
				}
			}
		}
	case *kmsg.DeleteRecordsRequest:
		for _, rt := range req.Topics {
			if rt.Topic == r.tp.Topic {
				return true
			}
		}
	}
	return false
}

// kill ends the process as a crash would, between two of its writes.
func (p *process) kill() { p.close() }

// waitMirrored waits until the process has mirrored up to destination
// offset end and is MIRRORING, and fails the test if it fails first or
// takes too long.
func (r *mirrorRig) waitMirrored(p *process, end int64) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := p.m.Status()
		if st.State == Mirroring && st.DestinationOffset == end {
			return
		}
		select {
		case <-p.done:
			r.t.Fatalf("the partition mirror stopped in %s before reaching destination offset %d (at %d): %v", st.State, end, st.DestinationOffset, st.Reason)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the partition mirror did not reach destination offset %d in time: state %s at %d, retries %d: %v", end, st.State, st.DestinationOffset, st.Retries, st.Reason)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// mirroring waits until the process's partition mirror is MIRRORING (has
// resynced and copies) or has stopped.
func (r *mirrorRig) mirroring(p *process) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for p.m.Status().State != Mirroring {
		select {
		case <-p.done:
			return
		default:
		}
		if time.Now().After(deadline) {
			st := p.m.Status()
			r.t.Fatalf("the partition mirror did not start copying in time: state %s: %v", st.State, st.Reason)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFailed waits until the process's Run returns, and fails the test
// unless the partition is FAILED.
func (r *mirrorRig) waitFailed(p *process) {
	r.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		st := p.m.Status()
		r.t.Fatalf("the partition mirror did not fail: state %s at %d: %v", st.State, st.DestinationOffset, st.Reason)
	}
	st := p.m.Status()
	if st.State != Failed {
		r.t.Fatalf("the partition mirror returned in state %s, want %s: %v", st.State, Failed, st.Reason)
	}
	r.t.Logf("failed: %v", st.Reason)
}

// bounds reads the destination partition's bounds.
func (r *mirrorRig) bounds() leaders.Bounds {
	r.t.Helper()
	b, err := r.dw.Bounds(context.Background(), r.tp.Topic, r.tp.Partition)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// destination reads every batch of the destination partition.
func (r *mirrorRig) destination() (leaders.Bounds, [][]byte) {
	r.t.Helper()
	ctx := context.Background()
	b := r.bounds()
	var out [][]byte
	for batch, err := range fetcher.ReadRange(ctx, r.dw.Client(), r.dw.Meta(), r.tp, b.LogStart, b.HighWatermark, 1<<20) {
		if err != nil {
			r.t.Fatalf("reading the destination: %v", err)
		}
		out = append(out, batch.Raw)
	}
	return b, out
}

// visibility is what consumers see of one offset.
type visibility int

const (
	invisible  visibility = iota // no consumer sees a record (a marker, a filler, a hole)
	committed                    // consumers at both isolation levels see it
	abortedRec                   // read_uncommitted consumers only see it
	undecided                    // its transaction has no marker yet
)

func (v visibility) String() string {
	return [...]string{"invisible", "committed", "aborted", "undecided"}[v]
}

type offsetView struct {
	vis visibility
	rec recordbatch.Record
}

// views classifies the offsets of a log's batches from the log itself: a
// transactional record's fate is its producer's next marker.
func views(t *testing.T, batches [][]byte) map[int64]offsetView {
	t.Helper()
	type marker struct {
		offset int64
		commit bool
	}
	markers := map[int64][]marker{}
	hs := make([]recordbatch.Header, len(batches))
	for i, b := range batches {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
		if h.IsControl() {
			commit, err := recordbatch.ControlRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			markers[h.ProducerID] = append(markers[h.ProducerID], marker{h.BaseOffset, commit})
		}
	}
	out := map[int64]offsetView{}
	for i, b := range batches {
		h := hs[i]
		if h.IsControl() {
			continue
		}
		vis := committed
		if h.IsTransactional() {
			vis = undecided
			for _, mk := range markers[h.ProducerID] {
				if mk.offset > h.LastOffset() {
					vis = abortedRec
					if mk.commit {
						vis = committed
					}
					break
				}
			}
		}
		recs, err := recordbatch.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			out[rec.Offset] = offsetView{vis, rec}
		}
	}
	return out
}

// checkIdentical checks the offset invariant of the destination against the
// source: the same log start and end, and at every offset the same
// visibility and, where a record is seen, the same record. No destination
// transaction may stay open.
func (r *mirrorRig) checkIdentical() {
	r.t.Helper()
	b, batches := r.destination()
	l := r.log
	if b.LogStart != l.start || b.HighWatermark != l.end {
		r.t.Errorf("destination log [%d, %d), source [%d, %d)", b.LogStart, b.HighWatermark, l.start, l.end)
	}
	if b.LastStable != b.HighWatermark {
		r.t.Errorf("destination last stable offset %d below its end %d: a destination transaction is open", b.LastStable, b.HighWatermark)
	}
	src, dst := views(r.t, l.batches), views(r.t, batches)
	bad := 0
	for o := l.start; o < max(l.end, b.HighWatermark); o++ {
		s, d := src[o], dst[o]
		switch {
		case s.vis != d.vis:
			r.t.Errorf("offset %d: %s on the source, %s on the destination", o, s.vis, d.vis)
		case s.vis != invisible && !sameRecord(s.rec, d.rec):
			r.t.Errorf("offset %d: source record %+v, destination %+v", o, s.rec, d.rec)
		default:
			continue
		}
		if bad++; bad == 10 {
			r.t.Fatalf("more offsets differ; destination: %s", describeBatches(batches))
		}
	}
	if bad > 0 {
		r.t.Logf("destination: %s", describeBatches(batches))
	}
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func sameRecord(a, b recordbatch.Record) bool {
	if a.Offset != b.Offset || a.Timestamp != b.Timestamp || !sameBytes(a.Key, b.Key) || !sameBytes(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !sameBytes(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

func describeBatches(batches [][]byte) string {
	var s string
	for _, b := range batches {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			return err.Error()
		}
		kind := "data"
		switch {
		case h.IsControl():
			commit, _ := recordbatch.ControlRecord(b)
			kind = "abort"
			if commit {
				kind = "commit"
			}
		case h.IsTransactional():
			kind = "txn"
		}
		s += fmt.Sprintf(" [%d-%d %s pid %d/%d seq %d n %d]", h.BaseOffset, h.LastOffset(), kind, h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.NumRecords)
	}
	return s
}
