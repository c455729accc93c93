package e2e

// Compacted topics. On the embedded engine kfake's Compact removes
// superseded records at once; on Kafka the real log cleaner does, on its own
// schedule, on both sides: the source's leaves holes that the mirror turns
// into invisible destination offsets, and the destination's removes records
// (and empties batches) under the agent, including the last batch of the
// agent's plain producer, whose header the cleaner keeps with its last
// offset delta so that the producer's sequence survives.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/recordbatch"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// Broker configs of the shared Kafka clusters of the compaction tests and of
// kafkadefects_test.go: one source cluster for all of them, one destination
// for the compaction tests. The cleaner looks for work every 200ms instead
// of 15s. The source's transaction.max.timeout.ms is the lowest that
// defectDestinationConfigs allows: the preflight refuses a destination whose
// maximum is below the source's.
var (
	tunedSourceConfigs = map[string]string{
		"log.cleaner.backoff.ms":     "200",
		"transaction.max.timeout.ms": "60000",
	}
	cleanerDestinationConfigs = map[string]string{
		"log.cleaner.backoff.ms": "200",
	}
)

// cleanerSegment is the segment.ms of compacted topics on Kafka. Brokers roll
// a segment when a batch's timestamp is this much past the segment's first
// one, and the cleaner never touches the active segment: a write more than
// cleanerSegment after the last one makes everything before it cleanable.
const cleanerSegment = 100 * time.Millisecond

// compactedConfigs are the configs of a compacted source topic on e. On Kafka
// they make the cleaner compact within a second: short segments, any dirty
// byte worth a cleaning, no compaction lag, tombstones kept for 100ms after
// the cleaning that first saw them. The agent copies them to the mirror
// topic (they are not excluded), so the destination's cleaner is as eager.
func compactedConfigs(e engine) map[string]*string {
	c := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	if e.kind != devcluster.Embedded {
		c["segment.ms"] = kadm.StringPtr(fmt.Sprint(cleanerSegment.Milliseconds()))
		c["min.cleanable.dirty.ratio"] = kadm.StringPtr("0.01")
		c["min.compaction.lag.ms"] = kadm.StringPtr("0")
		c["delete.retention.ms"] = kadm.StringPtr("100")
	}
	return c
}

// TestCompacted mirrors a compacted source after its cleaner removed
// superseded records, leaving holes between and inside batches (partially
// kept batches keep their offsets): every hole must be an invisible
// destination offset, with each filler method, and a filler must never reach
// a consumer. On Kafka the destination's cleaner compacts the mirror too, so
// the comparison is key-aware there.
func TestCompacted(t *testing.T) {
	forTxnEngines(t, func(t *testing.T, e engine) {
		for _, method := range []partition.FillerMethod{partition.FillCoordinator, partition.FillMarkers} {
			t.Run(string(method), func(t *testing.T) { testCompacted(t, e, method) })
		}
	})
}

func testCompacted(t *testing.T, e engine, method partition.FillerMethod) {
	p := newPairOn(t, e, pairOpts{srcConfigs: tunedSourceConfigs, dstConfigs: cleanerDestinationConfigs})
	topic := p.name("profiles")
	createTopic(t, p.srcCl, topic, 2, compactedConfigs(e))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Few keys and small chunks: the cleaner keeps about one record in
	// ten, from many batches. Less on Kafka, where every hole is a filler
	// with coordinator round trips.
	records, keys, tail := 4000, 400, 400
	if e.kind != devcluster.Embedded {
		records, keys, tail = 800, 80, 100
	}
	if _, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{Topic: topic, Partitions: 2, Records: records, Keys: keys,
		Seed: 7, Codecs: workload.AllCodecs, ChunkRecords: 50, Headers: true}); err != nil {
		t.Fatal(err)
	}
	before := ends(t, p.srcAdm, topic)
	if e.kind == devcluster.Embedded {
		p.src.Kfake().Compact()
	} else {
		// The next write rolls the active segment (the broker's clock is
		// the records' timestamps), and the cleaner compacts what the
		// first write left in it.
		time.Sleep(2 * cleanerSegment)
	}
	// The tail keeps growing after compaction, so the mirror sees holes
	// in the middle of the log and dense data at its end.
	if _, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{Topic: topic, Partitions: 2, Records: tail, Keys: keys,
		Seed: 8, Codecs: []string{workload.CodecZstd}, ChunkRecords: 20}); err != nil {
		t.Fatal(err)
	}
	holes := waitCompacted(t, p.srcCl, topic, before)
	t.Logf("source compacted: %s", holes)
	visible := countVisible(ctx, t, p.srcCl, topic)
	var total int64
	for _, e := range before {
		total += e
	}
	if visible >= total {
		t.Fatalf("compaction removed nothing: %d visible records of %d offsets", visible, total)
	}

	spec := p.spec(topic)
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) { c.Fillers = method })
	start := time.Now()
	p.waitMirrored(t, a, topic, 2*time.Minute)
	t.Logf("%s fillers: %d offsets, %d visible records mirrored in %v", method, total, visible, time.Since(start).Round(time.Millisecond))
	if e.kind != devcluster.Embedded {
		// Each side's cleaner goes on compacting on its own.
		p.assertCompactedIdentical(t, topic)
		return
	}
	p.assertIdentical(t, topic, identityOpts{})
	// Fillers are invisible: a consumer reads exactly the source's
	// visible records on the destination.
	if got := countVisible(ctx, t, p.dstCl, topic); got != visible {
		t.Fatalf("destination consumers see %d records, source consumers %d", got, visible)
	}
}

// TestCompactedDestinationCleaner: the real cleaner compacts the source
// (holes between and inside batches) before the mirror copies it, then the
// destination's cleaner compacts the mirror's tail: the last batch of the
// agent's plain producer loses its records to duplicates within it, then its
// tombstones, and stays as an empty header (NumRecords 0) that keeps its last
// offset delta, because it holds the producer's last sequence. After a
// restart the agent must continue the producer's sequence from that header
// (BaseSequence+LastOffsetDelta+1): counting the records left sends a
// sequence behind the broker's, refused with OUT_OF_ORDER_SEQUENCE_NUMBER at
// every retry.
func TestCompactedDestinationCleaner(t *testing.T) {
	forKafkaEngines(t, true, testCompactedDestinationCleaner)
}

func testCompactedDestinationCleaner(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{srcConfigs: tunedSourceConfigs, dstConfigs: cleanerDestinationConfigs})
	topic := p.name("accounts")
	createTopic(t, p.srcCl, topic, 1, compactedConfigs(e))
	src := failClient(t, append(p.srcOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(50*time.Millisecond))...)
	const keys = 20
	key := func(i int) string { return fmt.Sprintf("k%02d", i%keys) }

	// Keys overwritten many times, each batch a window of ten keys moving
	// on by seven: the cleaner removes whole batches and parts of others.
	for round := range 30 {
		var kvs []keyValue
		for i := range 10 {
			kvs = append(kvs, keyValue{key: key(round*7 + i), value: fmt.Sprintf("round %d", round)})
		}
		produceBatch(t, src, topic, kvs)
	}
	time.Sleep(2 * cleanerSegment) // the next write rolls the segment
	produceBatch(t, src, topic, []keyValue{{key: key(0), value: "rolled"}})
	holes := waitCompacted(t, p.srcCl, topic, ends(t, p.srcAdm, topic))
	t.Logf("source compacted: %s", holes)

	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, failWait)
	p.assertCompactedIdentical(t, topic)
	assertCompactedMirrorConfigs(t, p, topic)

	// The plain producer's last batch: values for five keys, then a
	// tombstone for each. Copied before any write after it rolls the
	// source's segment, it reaches the destination whole.
	bBase := ends(t, p.srcAdm, topic)[0]
	var last []keyValue
	for i := range 5 {
		last = append(last, keyValue{key: key(i), value: "superseded in its own batch"})
	}
	for i := range 5 {
		last = append(last, keyValue{key: key(i), tombstone: true})
	}
	produceBatch(t, src, topic, last)
	p.waitMirrored(t, a, topic, failWait)
	b := headerAt(t, p.dstCl, topic, 0, bBase)
	if b.IsControl() || b.IsTransactional() || b.NumRecords != 10 || b.LastOffsetDelta != 9 {
		t.Fatalf("the destination's batch at %d is %+v, want the plain writer's 10 records", bBase, b)
	}
	plainPID := b.ProducerID

	// Aborted transactions after it, mirrored through the agent's ".abort"
	// transactional id, roll the destination's segments: the cleaner
	// removes the batch's first five records (superseded by its
	// tombstones), then, a cleaning past the tombstones' delete horizon,
	// the tombstones too. Their keys are among those written again below,
	// so that the aborted records one side's cleaner removed first are
	// superseded on both sides.
	txn := p.txnProducer(t, p.name("accounts-app"))
	deadline := time.Now().Add(time.Minute)
	for round := 0; ; round++ {
		time.Sleep(2 * cleanerSegment)
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var kvs []keyValue
		for i := range 5 {
			kvs = append(kvs, keyValue{key: key(5 + i), value: fmt.Sprintf("aborted %d", round)})
		}
		produceBatch(t, txn, topic, kvs)
		endTxn(t, testCtx(t), txn, false)
		p.waitMirrored(t, a, topic, failWait)
		if b = headerAt(t, p.dstCl, topic, 0, bBase); b.NumRecords == 0 {
			t.Logf("after %d aborted transactions the destination cleaner left the plain producer's last batch as an empty header: %+v", round+1, b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the destination's cleaner did not empty the batch at %d within a minute: %+v", bBase, b)
		}
	}
	if b.ProducerID != plainPID || b.BaseOffset != bBase || b.LastOffsetDelta != 9 || b.IsControl() {
		t.Fatalf("the destination's empty batch at %d is %+v, want producer id %d and last offset delta 9", bBase, b, plainPID)
	}
	// The broker's state for the producer is past what the header's record
	// count says.
	wantSeq := b.BaseSequence + b.LastOffsetDelta
	if dp, ok := activeProducer(t, p.dstAdm, topic, 0, plainPID); !ok || dp.LastSequence != wantSeq {
		t.Fatalf("the destination holds producer %d at %+v (known %v), want last sequence %d", plainPID, dp, ok, wantSeq)
	}

	// A restart resyncs from that header; then the source goes on.
	a.stop()
	a = p.startAgent(t, agentOpts{})
	var again []keyValue
	for i := range keys {
		again = append(again, keyValue{key: key(i), value: "after the restart"})
	}
	produceBatch(t, src, topic, again)
	produceBatch(t, src, topic, again[:7])
	p.waitMirrored(t, a, topic, failWait)
	if st := a.partitions(topic)[0]; st.State != partition.Mirroring || st.Reason != "" {
		t.Fatalf("p0 after the restart: %s (%s)", st.State, st.Reason)
	}
	wantSeq += int32(len(again) + 7)
	if dp, ok := activeProducer(t, p.dstAdm, topic, 0, plainPID); !ok || dp.LastSequence != wantSeq {
		t.Fatalf("the destination holds producer %d at %+v (known %v), want last sequence %d", plainPID, dp, ok, wantSeq)
	}
	p.assertCompactedIdentical(t, topic)
}

// keyValue is one record to produce; tombstone makes its value null.
type keyValue struct {
	key, value string
	tombstone  bool
}

// produceBatch writes kvs to partition 0 of topic in one synchronous call
// (one batch with a lingering producer).
func produceBatch(t *testing.T, cl *kgo.Client, topic string, kvs []keyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	recs := make([]*kgo.Record, len(kvs))
	for i, kv := range kvs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(kv.key)}
		if !kv.tombstone {
			recs[i].Value = []byte(kv.value)
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// rawHeaders returns the headers of partition's batches that end at or
// after from and start before end, as the log holds them (batches the
// cleaner emptied included).
func rawHeaders(t *testing.T, cl *kgo.Client, topic string, part int32, from, end int64) []recordbatch.Header {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []recordbatch.Header
	for b, err := range fetcher.ReadRange(ctx, cl, leaders.New(cl), fetcher.TP{Topic: topic, Partition: part}, from, end, 4<<20) {
		if err != nil {
			t.Fatalf("reading raw batches of %s/%d: %v", topic, part, err)
		}
		out = append(out, b.Header)
	}
	return out
}

// headerAt returns the header of the batch that starts at base.
func headerAt(t *testing.T, cl *kgo.Client, topic string, part int32, base int64) recordbatch.Header {
	t.Helper()
	for _, h := range rawHeaders(t, cl, topic, part, base, base+1) {
		if h.BaseOffset == base {
			return h
		}
	}
	t.Fatalf("%s/%d has no batch starting at %d", topic, part, base)
	return recordbatch.Header{}
}

// compaction describes the holes the cleaner left in one log.
type compaction struct {
	offsets, records int64 // below the end looked at, from the log start
	emptied          int   // batches kept as headers without records
	inner            int   // batches that lost some of their records
	gaps             int   // runs of offsets no batch covers any more
}

func (c compaction) String() string {
	return fmt.Sprintf("%d records left at %d offsets; %d batches kept without records, %d with holes inside, %d gaps between batches",
		c.records, c.offsets, c.emptied, c.inner, c.gaps)
}

// holesIn reads what compaction left of partition part below end.
func holesIn(t *testing.T, cl *kgo.Client, topic string, part int32, end int64) compaction {
	t.Helper()
	start := logStarts(t, kadm.NewClient(cl), topic)[part]
	c := compaction{offsets: end - start}
	prev := start - 1
	for _, h := range rawHeaders(t, cl, topic, part, start, end) {
		if h.IsControl() {
			prev = h.LastOffset()
			continue
		}
		c.records += int64(h.NumRecords)
		switch {
		case h.NumRecords == 0:
			c.emptied++
		case h.NumRecords != h.LastOffsetDelta+1:
			c.inner++
		}
		if h.BaseOffset > prev+1 {
			c.gaps++
		}
		prev = h.LastOffset()
	}
	return c
}

// waitCompacted polls until the cleaner has compacted topic on cl below
// before (per partition): every partition holds fewer records than offsets
// there, and between them the partitions have both a batch with holes
// inside and a gap between batches. It returns what it found.
func waitCompacted(t *testing.T, cl *kgo.Client, topic string, before map[int32]int64) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var inner, gaps int
		var lines []string
		done := true
		for _, part := range slices.Sorted(maps.Keys(before)) {
			c := holesIn(t, cl, topic, part, before[part])
			inner, gaps = inner+c.inner, gaps+c.gaps
			done = done && c.records < c.offsets
			lines = append(lines, fmt.Sprintf("p%d: %s", part, c))
		}
		if done && inner > 0 && gaps > 0 {
			return fmt.Sprint(lines)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cleaner did not compact %s within a minute: %v", topic, lines)
		}
		time.Sleep(10 * pollEvery)
	}
}

// activeProducer returns the state the partition's leader keeps for producer
// id pid (DescribeProducers), and whether it has any.
func activeProducer(t *testing.T, adm *kadm.Client, topic string, part int32, pid int64) (kadm.DescribedProducer, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	for {
		ds, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {part: {}}})
		var perr error
		if err == nil {
			dp, ok := ds[topic].Partitions[part]
			if !ok {
				perr = fmt.Errorf("no answer for %s/%d", topic, part)
			} else if perr = dp.Err; perr == nil {
				d, ok := dp.ActiveProducers[pid]
				return d, ok
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("describing the producers of %s/%d: %v %v", topic, part, err, perr)
		case <-time.After(pollEvery):
		}
	}
}

// assertCompactedMirrorConfigs checks what the agent set on a compacted
// source's mirror topic: cleanup.policy=compact,delete with infinite
// retention (DeleteRecords needs delete), and the source's cleaner settings
// copied.
func assertCompactedMirrorConfigs(t *testing.T, p *pair, topic string) {
	t.Helper()
	rcs, err := p.dstAdm.DescribeTopicConfigs(testCtx(t), topic)
	if err == nil && len(rcs) == 1 {
		err = rcs[0].Err
	}
	if err != nil {
		t.Fatalf("describing the configs of the mirror topic %s: %v", topic, err)
	}
	got := map[string]string{}
	for _, c := range rcs[0].Configs {
		got[c.Key] = c.MaybeValue()
	}
	want := map[string]string{
		"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1",
		"segment.ms": fmt.Sprint(cleanerSegment.Milliseconds()), "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("mirror topic %s has %s=%q, want %q", topic, k, got[k], v)
		}
	}
}

// assertCompactedIdentical checks a compacted topic whose two sides each
// compact on their own schedule: verify's key-aware comparison at both
// isolation levels (records at the same offset equal, a record on one side
// only superseded by a later record of its key on both), and, read by kcat
// (librdkafka), the last committed record of every key the same on both
// sides, at the same offset.
func (p *pair) assertCompactedIdentical(t *testing.T, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic, KeyAware: true})
	if err != nil {
		t.Fatalf("verify %s: %v", topic, err)
	}
	if !rep.OK() {
		var buf bytes.Buffer
		_ = rep.WriteText(&buf)
		t.Fatalf("key-aware verify %s found mismatches:\n%s", topic, buf.String())
	}
	levels := map[verify.Isolation]int{}
	var compared, superseded int64
	for _, pr := range rep.Partitions {
		levels[pr.Isolation]++
		if pr.Source.HighWatermark != pr.Destination.HighWatermark || pr.Compared == 0 {
			t.Fatalf("verify %s p%d %s: source end %d, destination end %d, %d records compared", topic, pr.Partition, pr.Isolation,
				pr.Source.HighWatermark, pr.Destination.HighWatermark, pr.Compared)
		}
		compared += pr.Compared
		superseded += pr.Superseded
	}
	if levels[verify.ReadUncommitted] == 0 || levels[verify.ReadCommitted] != levels[verify.ReadUncommitted] {
		t.Fatalf("verify %s compared partitions per level %v, want both levels", topic, levels)
	}
	t.Logf("key-aware verify %s: %d records compared, %d on one side only and superseded", topic, compared, superseded)

	if err := kcat.Available(); err != nil {
		t.Fatalf("kcat is needed to read with an independent client: %v", err)
	}
	for part := range levels[verify.ReadCommitted] {
		latest := func(boot string) map[string]verify.Record {
			recs, err := kcat.Read(ctx, boot, topic, int32(part), kcat.ReadCommitted, -1, -1)
			if err != nil {
				t.Fatalf("kcat %s p%d: %v", topic, part, err)
			}
			out := map[string]verify.Record{}
			for _, r := range recs {
				out[string(r.Key)] = r
			}
			return out
		}
		s, d := latest(p.src.BootstrapString()), latest(p.dst.BootstrapString())
		if len(s) == 0 || len(s) != len(d) {
			t.Fatalf("kcat %s p%d: %d keys on the source, %d on the destination", topic, part, len(s), len(d))
		}
		for k, sr := range s {
			dr, ok := d[k]
			if !ok {
				t.Fatalf("kcat %s p%d: key %q only on the source (%v)", topic, part, k, sr)
			}
			if diff := sr.Diff(dr); len(diff) > 0 {
				t.Fatalf("kcat %s p%d: the last record of key %q differs in %v:\nsource      %v\ndestination %v", topic, part, k, diff, sr, dr)
			}
		}
		t.Logf("kcat %s p%d: the last records of %d keys identical", topic, part, len(s))
	}
}

// countVisible counts the records a read_uncommitted consumer gets from topic.
func countVisible(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) int64 {
	t.Helper()
	rep, err := verify.Compare(ctx, cl, cl, verify.Options{Topic: topic, Isolation: []verify.Isolation{verify.ReadUncommitted}})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, pr := range rep.Partitions {
		n += pr.SourceVisible
	}
	return n
}
