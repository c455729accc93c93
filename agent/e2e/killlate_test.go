package e2e

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/recordbatch"
	"github.com/kmirror/kmirror/internal/workload"
)

// lateTopic has one partition, so that the agent's produce requests are the
// source batches in order.
const (
	lateTopic = "late"
	lateChunk = 50 // records per chunk of the workload
)

// TestLateRequestOfKilledAgent is the case DESIGN §3 builds the writer's
// deterministic sequences for: a produce request of a killed agent that the
// destination broker applies only after a new agent has read the log end.
//
// The destination (kfake) holds one produce request of the first agent
// (its k-th: source batch k) with a sleeping control; the agent is then killed with SIGKILL, so the
// request belongs to a connection the kernel has closed. kfake still
// processes a request it read before the connection closed (its request
// loop runs it when the control wakes and drops the response, as Kafka's
// SocketServer does), so no imitation is needed: the held request is the
// killed process's own request, applied late. A fault that only observes
// proves that the broker processed it.
//
// Each case asserts that the held request and the new agent's write of the
// same batch carry the same producer id, epoch and sequence, that the
// broker never appends the batch twice, and that the destination is
// offset-identical to the source afterwards.
func TestLateRequestOfKilledAgent(t *testing.T) {
	t.Run("duplicate after the new agent wrote it", func(t *testing.T) {
		// The new agent writes the held batch and the 3 after it: the
		// held one is in the broker's window of the producer's last
		// five batches.
		lateRequestAfterCatchUp(t, 8, 3, nil)
	})
	t.Run("out of sequence after the new agent wrote past it", func(t *testing.T) {
		// The new agent writes the held batch and at least 7 more: it
		// left the window of five, so the broker refuses the late
		// request.
		lateRequestAfterCatchUp(t, 12, 7, kerr.OutOfOrderSequenceNumber)
	})
	t.Run("between the new agent's read of the end and its write", lateRequestBetweenReadAndWrite)
	t.Run("write of an aborted source transaction, killed after AddPartitionsToTxn", lateRequestInAdoptedTransaction)
	t.Run("timeout that still applies", timeoutThatStillApplies)
}

// lateSetup is a source with chunks chunks of lateChunk records on
// lateTopic, and an empty destination.
type lateSetup struct {
	src, dst       *devcluster.Cluster
	srcCl, dstCl   *kgo.Client
	setup          agentSetup
	sourceBatches  []recordbatch.Header
	sourceEnd      int64
	ctx            context.Context
	destinationEnd func() int64
}

func newLateSetup(t *testing.T, chunks int) *lateSetup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	s := &lateSetup{ctx: ctx}
	s.src = devclustertest.Start(t, devcluster.Name("src"), devcluster.KfakeOptions(kfake.SeedTopics(1, lateTopic)))
	s.dst = devclustertest.Start(t, devcluster.Name("dst"))
	s.srcCl, s.dstCl = newClient(t, s.src), newClient(t, s.dst)
	// A long linger makes each chunk of the workload one batch, mostly:
	// a client's first chunk can be split while its metadata arrives.
	// The cases work from the batches the source really holds.
	_, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(s.src.Bootstrap()...), kgo.ProducerLinger(time.Minute)}, workload.Spec{
		Topic: lateTopic, Records: chunks * lateChunk, ChunkRecords: lateChunk, Seed: int64(chunks),
		Codecs: workload.AllCodecs, Headers: true, ExplicitTimestamps: true, NullKeyEvery: 7, EmptyValueEvery: 11,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.sourceBatches = readBatchHeaders(ctx, t, s.srcCl, lateTopic, 0)
	if len(s.sourceBatches) < chunks {
		t.Fatalf("the source holds %d batches, want at least %d", len(s.sourceBatches), chunks)
	}
	s.sourceEnd = int64(chunks * lateChunk)
	da := kadm.NewClient(s.dstCl)
	s.destinationEnd = func() int64 {
		t.Helper()
		ends, err := da.ListEndOffsets(ctx, lateTopic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			t.Fatalf("destination end: %v", err)
		}
		o, _ := ends.Lookup(lateTopic, 0)
		return o.Offset
	}
	s.setup = writeAgentConfig(t, s.dst, agentMirror{Name: "dr", Source: s.src, Topics: []string{lateTopic}})
	return s
}

// holdFirstAgent starts the first agent, waits until the destination holds
// its k-th produce request (source batch k), checks where that batch goes,
// and kills the agent.
func (s *lateSetup) holdFirstAgent(t *testing.T, k int) (*produceHold, int64) {
	t.Helper()
	held := holdProduce(t, s.dst.Kfake(), lateTopic, func(_ *kmsg.ProduceRequest, n int, _ recordbatch.Header) bool {
		return n == k
	})
	a := startAgentProcess(t, s.setup, "agent-a")
	held.WaitHeld(s.ctx, t)
	at := s.destinationEnd()
	src := s.sourceBatches[k-1]
	if at != src.BaseOffset {
		t.Fatalf("destination end %d when the agent's request %d is held, want %d (source batch %d)", at, k, src.BaseOffset, k)
	}
	if h := held.hdr; h.BaseSequence != int32(at) || h.NumRecords != src.NumRecords {
		t.Fatalf("held batch: sequence %d, %d records; want sequence %d (records the agent's producer id wrote before), %d records",
			h.BaseSequence, h.NumRecords, at, src.NumRecords)
	}
	a.Kill()
	t.Logf("held the first agent's batch for offset %d (producer id %d, epoch %d, sequence %d, %d records) and killed the agent",
		at, held.hdr.ProducerID, held.hdr.ProducerEpoch, held.hdr.BaseSequence, held.hdr.NumRecords)
	return held, at
}

// lateRequestAfterCatchUp holds the first agent's request for the batch
// that has `after` batches after it in the source, and releases it once the
// new agent has copied everything, so that agent wrote after+1 batches from
// the held one on. The broker
// must answer it as a duplicate with the original offset (wantErr nil) or
// refuse it (wantErr): either way the log does not change. A replay of the
// exact bytes by a new client shows the broker's answer, which the dead
// agent's closed connection cannot.
func lateRequestAfterCatchUp(t *testing.T, chunks, after int, wantErr *kerr.Error) {
	s := newLateSetup(t, chunks)
	k := len(s.sourceBatches) - after
	if wantErr != nil {
		k = 3 // at least `after` batches after it
	}
	held, at := s.holdFirstAgent(t, k)
	t.Logf("the new agent writes %d batches from the held one on", len(s.sourceBatches)-k+1)

	b := startAgentProcess(t, s.setup, "agent-b")
	waitCaughtUp(s.ctx, t, s.srcCl, s.dstCl, lateTopic, b, 30*time.Second)
	if got := s.destinationEnd(); got != s.sourceEnd {
		t.Fatalf("destination end %d, source end %d", got, s.sourceEnd)
	}
	same := batchAt(s.ctx, t, s.dstCl, at)
	assertSameWrite(t, "the new agent's batch at the held request's offset", same, held.hdr)

	held.Release()
	held.WaitProcessed(s.ctx, t)
	if got := s.destinationEnd(); got != s.sourceEnd {
		t.Fatalf("after the killed agent's late request: destination end %d, want %d (unchanged)", got, s.sourceEnd)
	}

	off, err := replayProduce(s.ctx, t, s.dst, held.batch)
	switch {
	case wantErr == nil && (err != nil || off != at):
		t.Fatalf("replaying the held request: offset %d, error %v; want a duplicate answered with its original offset %d", off, err, at)
	case wantErr != nil && !errors.Is(err, wantErr):
		t.Fatalf("replaying the held request: offset %d, error %v; want %v", off, err, wantErr)
	}
	t.Logf("the broker answers the late request with offset %d, error %v", off, err)
	if got := s.destinationEnd(); got != s.sourceEnd {
		t.Fatalf("after the replay: destination end %d, want %d (unchanged)", got, s.sourceEnd)
	}
	assertNoRetries(s.ctx, t, b)
	assertIdentical(s.ctx, t, s.srcCl, s.dstCl, lateTopic)
	b.Stop()
}

// lateRequestBetweenReadAndWrite holds the new agent's write of the same
// batch too, so that the killed agent's request is applied after the new
// agent read the log end and before its own write: the broker appends the
// late request (it is the next sequence) and must then answer the new
// agent's identical write as a duplicate, with the same offset, which the
// new agent accepts without a retry.
func lateRequestBetweenReadAndWrite(t *testing.T) {
	s := newLateSetup(t, 8)
	heldA, at := s.holdFirstAgent(t, 3)
	heldB := holdProduce(t, s.dst.Kfake(), lateTopic, func(req *kmsg.ProduceRequest, _ int, h recordbatch.Header) bool {
		return req != heldA.req && h.ProducerID == heldA.hdr.ProducerID && h.BaseSequence == heldA.hdr.BaseSequence
	})
	b := startAgentProcess(t, s.setup, "agent-b")
	heldB.WaitHeld(s.ctx, t)
	assertSameWrite(t, "the new agent's write of the held batch", heldB.hdr, heldA.hdr)
	if got := s.destinationEnd(); got != at {
		t.Fatalf("destination end %d while both writes are held, want %d", got, at)
	}

	heldA.Release()
	heldA.WaitProcessed(s.ctx, t)
	// Appended: it is the next sequence. The batches the killed agent
	// pipelined behind it may land too, each at its own offset.
	if got, want := s.destinationEnd(), at+int64(heldA.hdr.NumRecords); got < want || got > s.sourceEnd {
		t.Fatalf("after the killed agent's late request: destination end %d, want %d to %d", got, want, s.sourceEnd)
	}
	assertSameWrite(t, "the batch the late request appended", batchAt(s.ctx, t, s.dstCl, at), heldA.hdr)

	heldB.Release()
	heldB.WaitProcessed(s.ctx, t)
	waitCaughtUp(s.ctx, t, s.srcCl, s.dstCl, lateTopic, b, 30*time.Second)
	if got := s.destinationEnd(); got != s.sourceEnd {
		t.Fatalf("destination end %d, source end %d", got, s.sourceEnd)
	}
	assertNoRetries(s.ctx, t, b)
	assertIdentical(s.ctx, t, s.srcCl, s.dstCl, lateTopic)
	b.Stop()
}

// lateRequestInAdoptedTransaction holds the first agent's write into its
// destination transaction for aborted source records: the second such
// transaction of the same producer epoch, so the epoch's sequence is already
// past 0 in the partition. The agent has added the partition to the
// transaction (AddPartitionsToTxn) when it is killed; the new agent finds
// the transaction ongoing, adopts it (review B4), and must write the same
// batch with the same producer id, epoch and sequence, which the broker
// expects to continue the epoch's sequence across the earlier transaction's
// marker. The late request is released afterwards and must change nothing.
func lateRequestInAdoptedTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.KfakeOptions(kfake.SeedTopics(1, lateTopic)))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	srcCl, dstCl := newClient(t, src), newClient(t, dst)
	// Chunks 1, 3 and 5 are aborted transactions, the others committed:
	// one batch and one marker each.
	if _, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(src.Bootstrap()...), kgo.ProducerLinger(time.Minute)}, workload.Spec{
		Topic: lateTopic, Records: 6 * lateChunk, ChunkRecords: lateChunk, Seed: 5,
		Codecs: workload.AllCodecs, Headers: true, ExplicitTimestamps: true,
		TransactionalID: "late", AbortEvery: 2,
	}); err != nil {
		t.Fatal(err)
	}
	var txnal int
	held := holdProduce(t, dst.Kfake(), lateTopic, func(_ *kmsg.ProduceRequest, _ int, h recordbatch.Header) bool {
		if h.IsTransactional() {
			txnal++
		}
		return h.IsTransactional() && txnal == 2
	})
	setup := writeAgentConfig(t, dst, agentMirror{Name: "dr", Source: src, Topics: []string{lateTopic}})
	a := startAgentProcess(t, setup, "agent-a")
	held.WaitHeld(ctx, t)
	if held.hdr.BaseSequence == 0 {
		t.Fatalf("held transactional batch has sequence 0: want the second transaction of the epoch")
	}
	a.Kill()
	t.Logf("held the first agent's transactional batch (producer id %d, epoch %d, sequence %d, %d records) and killed the agent",
		held.hdr.ProducerID, held.hdr.ProducerEpoch, held.hdr.BaseSequence, held.hdr.NumRecords)

	b := startAgentProcess(t, setup, "agent-b")
	ends := waitCaughtUp(ctx, t, srcCl, dstCl, lateTopic, b, 30*time.Second)
	var same *recordbatch.Header
	for _, h := range readBatchHeaders(ctx, t, dstCl, lateTopic, 0) {
		if h.ProducerID == held.hdr.ProducerID && h.BaseSequence == held.hdr.BaseSequence && !h.IsControl() {
			same = &h
		}
	}
	if same == nil {
		t.Fatalf("the destination has no batch of producer id %d with sequence %d", held.hdr.ProducerID, held.hdr.BaseSequence)
	}
	assertSameWrite(t, "the new agent's write in the adopted transaction", *same, held.hdr)
	held.Release()
	held.WaitProcessed(ctx, t)
	if again := waitCaughtUp(ctx, t, srcCl, dstCl, lateTopic, b, 30*time.Second); again[0] != ends[0] {
		t.Fatalf("destination end moved from %d to %d after the late request", ends[0], again[0])
	}
	assertIdentical(ctx, t, srcCl, dstCl, lateTopic)
	b.Stop()
}

// timeoutThatStillApplies answers three of the agent's produce requests
// with REQUEST_TIMED_OUT after applying them (kfake's Fault does that for
// this code on Produce): the agent cannot know whether the batch landed,
// rebuilds its position from the destination log end and must go on from
// there without writing the batch again.
func timeoutThatStillApplies(t *testing.T) {
	// Requests 2, 102 and 202 time out: a hundred apart, more than the
	// batches a plain partition has in flight (each refused behind a
	// timed-out one counts too, and a window of 64 once put three 20
	// apart in one), so each is the first error of its window and makes
	// a resync of its own.
	s := newLateSetup(t, 300)
	var mu sync.Mutex
	seen := map[kmsg.Request]bool{} // a request is asked about once per partition and topic
	var n int
	faults := s.dst.Kfake().Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: lateTopic, Err: kerr.RequestTimedOut, Count: 3,
		When: func(req kmsg.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			if v, ok := seen[req]; ok {
				return v
			}
			n++
			seen[req] = n%100 == 2 // requests 2, 102 and 202
			return seen[req]
		},
	})
	t.Cleanup(faults.Remove)
	a := startAgentProcess(t, s.setup, "agent")
	waitCaughtUp(s.ctx, t, s.srcCl, s.dstCl, lateTopic, a, 30*time.Second)
	if hits := faults.Hits(); hits != 3 {
		t.Fatalf("%d produce requests timed out, want 3", hits)
	}
	if got := s.destinationEnd(); got != s.sourceEnd {
		t.Fatalf("destination end %d, source end %d", got, s.sourceEnd)
	}
	dst := readBatchHeaders(s.ctx, t, s.dstCl, lateTopic, 0)
	if len(dst) != len(s.sourceBatches) {
		t.Fatalf("the destination holds %d batches, the source %d", len(dst), len(s.sourceBatches))
	}
	ms, err := a.Describe(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps := describedPartitions(ms)
	if len(ps) != 1 || ps[0].Retries < 3 {
		t.Fatalf("describe %+v: want one partition that resynced at least 3 times", ps)
	}
	t.Logf("3 writes timed out after landing; the agent resynced %d times", ps[0].Retries)
	assertIdentical(s.ctx, t, s.srcCl, s.dstCl, lateTopic)
	a.Stop()
}

// produceHold holds one produce request in the destination with a sleeping
// kfake control until Release, and observes when kfake processes it.
type produceHold struct {
	kc       *kfake.Cluster
	held     chan struct{}
	release  chan struct{}
	once     sync.Once
	req      *kmsg.ProduceRequest
	batch    []byte // the held batch as sent, copied before kfake saw it
	hdr      recordbatch.Header
	observed *kfake.FaultHandle
}

// holdProduce holds the first produce request to topic for which match
// (given the request, the count of the topic's produce requests so far and
// the batch's header) is true.
func holdProduce(t testing.TB, kc *kfake.Cluster, topic string, match func(*kmsg.ProduceRequest, int, recordbatch.Header) bool) *produceHold {
	ph := &produceHold{kc: kc, held: make(chan struct{}), release: make(chan struct{})}
	var (
		mu    sync.Mutex
		n     int
		taken bool
	)
	kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		var records []byte
		for _, rt := range pr.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic {
					records = rp.Records
				}
			}
		}
		if records == nil {
			return nil, nil, false
		}
		h, err := recordbatch.ParseHeader(records)
		mu.Lock()
		if taken || err != nil {
			mu.Unlock()
			return nil, nil, false
		}
		n++
		if !match(pr, n, h) {
			mu.Unlock()
			return nil, nil, false
		}
		taken = true
		mu.Unlock()
		ph.req, ph.batch, ph.hdr = pr, slices.Clone(records), h
		ph.observed = kc.Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Observe: true, Count: -1,
			When: func(r kmsg.Request) bool { return r == req },
		})
		kc.DropControl()
		close(ph.held)
		kc.SleepControl(func() { <-ph.release })
		return nil, nil, false // kfake processes it now
	})
	t.Cleanup(func() {
		ph.Release() // a cluster closes only once its sleeping controls return
		if ph.observed != nil {
			ph.observed.Remove()
		}
	})
	return ph
}

func (ph *produceHold) WaitHeld(ctx context.Context, t testing.TB) {
	t.Helper()
	select {
	case <-ph.held:
	case <-ctx.Done():
		t.Fatalf("no produce request was held: %v", ctx.Err())
	}
}

func (ph *produceHold) Release() { ph.once.Do(func() { close(ph.release) }) }

// WaitProcessed waits until kfake has handled the held request.
func (ph *produceHold) WaitProcessed(ctx context.Context, t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ph.observed.Wait(ctx, 1); err != nil {
		t.Fatalf("the held produce request was not processed: %v", err)
	}
}

// assertSameWrite checks that two batches carry the same producer id, epoch,
// sequence and record count.
func assertSameWrite(t testing.TB, what string, got, want recordbatch.Header) {
	t.Helper()
	if got.ProducerID != want.ProducerID || got.ProducerEpoch != want.ProducerEpoch ||
		got.BaseSequence != want.BaseSequence || got.NumRecords != want.NumRecords {
		t.Fatalf("%s: producer id %d epoch %d sequence %d, %d records; the killed agent's: %d, %d, %d, %d records",
			what, got.ProducerID, got.ProducerEpoch, got.BaseSequence, got.NumRecords,
			want.ProducerID, want.ProducerEpoch, want.BaseSequence, want.NumRecords)
	}
}

// assertNoRetries checks that the agent never had to resync.
func assertNoRetries(ctx context.Context, t testing.TB, a *agentProcess) {
	t.Helper()
	ms, err := a.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range describedPartitions(ms) {
		if p.State != mirrorapi.StateMirroring || p.Retries != 0 {
			t.Fatalf("partition %d: %s %s after %d retries; want MIRRORING with no retry", p.Partition, p.State, p.Reason, p.Retries)
		}
	}
}

// readBatchHeaders returns the headers of every batch of a partition, read
// uncommitted from the log start to the high watermark.
func readBatchHeaders(ctx context.Context, t testing.TB, cl *kgo.Client, topic string, partition int32) []recordbatch.Header {
	t.Helper()
	meta := leaders.New(cl)
	tp := fetcher.TP{Topic: topic, Partition: partition}
	b, err := meta.Bounds(ctx, topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	var out []recordbatch.Header
	for batch, err := range fetcher.ReadRange(ctx, cl, meta, tp, b.LogStart, b.HighWatermark, 8<<20) {
		if err != nil {
			t.Fatal(err)
		}
		if batch.BaseOffset >= b.LogStart {
			out = append(out, batch.Header)
		}
	}
	return out
}

// batchAt returns the header of the destination batch starting at offset.
func batchAt(ctx context.Context, t testing.TB, cl *kgo.Client, offset int64) recordbatch.Header {
	t.Helper()
	for _, h := range readBatchHeaders(ctx, t, cl, lateTopic, 0) {
		if h.BaseOffset == offset {
			return h
		}
	}
	t.Fatalf("no batch starts at offset %d of the destination", offset)
	return recordbatch.Header{}
}

// replayProduce sends batch to partition 0 of lateTopic on c as the agent's
// writer does (same client options, acks=all) and returns the broker's
// answer.
func replayProduce(ctx context.Context, t testing.TB, c *devcluster.Cluster, batch []byte) (int64, error) {
	t.Helper()
	cl, err := kgo.NewClient(writer.ClientOpts([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)})...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return writer.New(cl, leaders.New(cl)).Produce(ctx, lateTopic, 0, slices.Clone(batch))
}
