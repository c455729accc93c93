package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/workload"
)

// txnMB is the payload (keys and values) of each source of
// BenchmarkTransactional, in MB; KMIRROR_BENCH_TXN_MB overrides it.
const txnMB = 300

// Shape of the transactional source.
const (
	txnProducers = 4
	txnRecords   = 100 // per transaction
	txnAbortN    = 20  // every 20th transaction aborted: 5%
)

// txnCounter counts the transactional requests the agent sends a
// destination cluster, by kind.
type txnCounter struct {
	fillers   atomic.Int64 // EndTxn of a ".fill" id: one coordinator filler
	aborts    atomic.Int64 // EndTxn of an ".abort" id: one destination transaction of aborted source data
	markers   atomic.Int64 // markers in WriteTxnMarkers requests (FillMarkers fillers)
	describes atomic.Int64 // DescribeTransactions (waiting for Complete*)
	removed   atomic.Bool
}

// countTxnRequests installs controls on kc that count, and pass on, the
// agent's transactional requests until remove.
func countTxnRequests(kc *kfake.Cluster) (c *txnCounter, remove func()) {
	c = &txnCounter{}
	count := func(key kmsg.Key, fn func(kmsg.Request)) {
		kc.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
			kc.KeepControl()
			if c.removed.Load() {
				kc.DropControl()
				return nil, nil, false
			}
			fn(r)
			return nil, nil, false
		})
	}
	count(kmsg.EndTxn, func(r kmsg.Request) {
		switch id := r.(*kmsg.EndTxnRequest).TransactionalID; {
		case strings.HasSuffix(id, ".fill"):
			c.fillers.Add(1)
		case strings.HasSuffix(id, ".abort"):
			c.aborts.Add(1)
		}
	})
	count(kmsg.WriteTxnMarkers, func(r kmsg.Request) { c.markers.Add(int64(len(r.(*kmsg.WriteTxnMarkersRequest).Markers))) })
	count(kmsg.DescribeTransactions, func(kmsg.Request) { c.describes.Add(1) })
	return c, func() { c.removed.Store(true) }
}

// countedRun is one measured mirror run with the agent's transactional
// requests counted over the whole copy.
type countedRun struct {
	result
	whole                                  time.Duration // apply to the last offset
	fillers, aborts, markers, describes    int64
	fillersPS, abortsPS, markersPS, descPS float64
}

// mirrorCounted mirrors src into a fresh destination topic of its name with
// a new agent using fillers, timing it as measure does and counting the
// transactional requests it sends the destination.
func mirrorCounted(ctx context.Context, b *testing.B, e *env, src source, name, run string, fillers partition.FillerMethod) countedRun {
	b.Helper()
	if err := deleteTopic(ctx, e.dstAdm, src.topic); err != nil {
		b.Fatal(err)
	}
	waitTopicGone(ctx, b, e, src.topic)
	cnt, remove := countTxnRequests(e.dst.Kfake())
	defer remove()
	var r countedRun
	err := profile(name+"-"+run, func() error {
		start := time.Now()
		co, stop, err := startAgent(ctx, e, "__kmirror_state_"+run, fillers, src.topic)
		if err != nil {
			return err
		}
		defer stop()
		r.result, err = measure(ctx, name, src.total, src.stored, func() (int64, error) { return mirrored(co, src.topic) }, nil)
		r.whole = time.Since(start)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	remove()
	s := r.whole.Seconds()
	r.fillers, r.aborts, r.markers, r.describes = cnt.fillers.Load(), cnt.aborts.Load(), cnt.markers.Load(), cnt.describes.Load()
	r.fillersPS, r.abortsPS, r.markersPS, r.descPS = float64(r.fillers)/s, float64(r.aborts)/s, float64(r.markers)/s, float64(r.describes)/s
	if err := deleteTopic(ctx, e.dstAdm, src.topic); err != nil {
		b.Fatal(err)
	}
	return r
}

// produceTxnSource writes mb MB of 1 KiB zstd values to a new topic with
// txnProducers producers at once, each its own share of the records; with
// transactional, each producer writes transactions of txnRecords records
// and aborts every txnAbortN-th. The plain source gets the same records
// (same seeds) without transactions.
func produceTxnSource(ctx context.Context, b *testing.B, e *env, topic string, mb int, transactional bool) source {
	b.Helper()
	if err := createTopic(ctx, e.srcAdm, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	per := mb * int(MB) / valueSize / txnProducers
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total workload.Stats
		errs  []error
	)
	total.Batches = map[string]int{}
	for i := range txnProducers {
		spec := workload.Spec{
			Topic: topic, Partitions: partitions, Records: per, ValueSize: valueSize,
			Codecs: []string{workload.CodecZstd}, Seed: int64(10 + i), ChunkRecords: txnRecords,
		}
		if transactional {
			spec.TransactionalID = fmt.Sprintf("bench-txn-%d", i)
			spec.AbortEvery = txnAbortN
		}
		wg.Go(func() {
			st, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(e.srcBoot...)}, spec)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			total.Records += st.Records
			total.Aborted += st.Aborted
			total.Bytes += st.Bytes
			for k, v := range st.Batches {
				total.Batches[k] += v
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	s := e.describeSource(ctx, b, topic)
	s.spec = total
	return s
}

// BenchmarkTransactional mirrors a transactional source (4 transactional
// producers at once, 100 records a transaction, 5% of transactions
// aborted, 1 KiB values, zstd, 6 partitions) and a non-transactional source
// of the same records, one after the other on the same clusters, twice
// each (txn, plain, plain, txn), and prints the ratio of the medians. Every
// transaction leaves one marker in each source partition it wrote; the
// agent writes committed records as plain data and gives every marker
// offset a filler (a coordinator transaction: AddPartitionsToTxn, EndTxn,
// then DescribeTransactions until Complete*, then ListOffsets), and writes
// aborted records through a destination transaction aborted at their
// marker; the counts of those per second say what bounds the ratio.
func BenchmarkTransactional(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := clusters(b)
	mb := txnMB
	if v, err := strconv.Atoi(os.Getenv("KMIRROR_BENCH_TXN_MB")); err == nil && v > 0 {
		mb = v
	}
	start := time.Now()
	txn := produceTxnSource(ctx, b, e, "bench-txn", mb, true)
	plain := produceTxnSource(ctx, b, e, "bench-plain", mb, false)
	markers := txn.total - txn.spec.Records
	figure("transactional source: %d records (%d aborted) in %d transactions + %d markers = %d offsets, %.1f MB of batches; plain source: %d offsets, %.1f MB; produced in %.1fs",
		txn.spec.Records, txn.spec.Aborted, txn.spec.Records/txnRecords, markers, txn.total, float64(txn.stored)/MB,
		plain.total, float64(plain.stored)/MB, time.Since(start).Seconds())

	var txns, plains []countedRun
	txns = append(txns, mirrorCounted(ctx, b, e, txn, "transactional", "txn-1", partition.FillCoordinator))
	plains = append(plains, mirrorCounted(ctx, b, e, plain, "plain", "plain-1", partition.FillCoordinator))
	plains = append(plains, mirrorCounted(ctx, b, e, plain, "plain", "plain-2", partition.FillCoordinator))
	txns = append(txns, mirrorCounted(ctx, b, e, txn, "transactional", "txn-2", partition.FillCoordinator))
	for _, r := range append(append([]countedRun(nil), txns...), plains...) {
		figure("  run %-13s %6.1f MB/s over %.2fs (%d offsets), %.2f cores busy; whole copy %.2fs: %d fillers (%.0f/s), %d destination transactions (%.0f/s), %d DescribeTransactions (%.0f/s)",
			r.name, r.mbps(), r.elapsed.Seconds(), r.records, r.cores(), r.whole.Seconds(),
			r.fillers, r.fillersPS, r.aborts, r.abortsPS, r.describes, r.descPS)
	}
	res := func(rs []countedRun) []result {
		out := make([]result, len(rs))
		for i, r := range rs {
			out[i] = r.result
		}
		return out
	}
	t, p := median(res(txns)), median(res(plains))
	ratio := t / p
	figure("mirror/transactional ratio: %.2f (transactional %.1f MB/s, plain %.1f MB/s; medians of 2 runs, MB/s of source batches)", ratio, t, p)
	last := txns[len(txns)-1]
	perPart := last.fillersPS / partitions
	figure("  bound: %.0f coordinator fillers/s (%.0f per partition, one every %.2f ms, each AddPartitionsToTxn + EndTxn + %.1f DescribeTransactions + ListOffsets, one partition's fillers in series) and %.0f destination transactions/s; a filler per %.0f records per partition (%d-record transactions from %d producers spread over %d partitions)",
		last.fillersPS, perPart, 1000/perPart, float64(last.describes)/float64(max(1, last.fillers+last.aborts)), last.abortsPS,
		float64(txn.spec.Records)/float64(max(1, markers)), txnRecords, txnProducers, partitions)
	b.ReportMetric(ratio, "mirror/transactional")
	b.ReportMetric(t, "transactional-MB/s")
	b.ReportMetric(p, "plain-MB/s")
	b.ReportMetric(last.fillersPS, "fillers/s")
	_ = deleteTopic(ctx, e.srcAdm, txn.topic)
	_ = deleteTopic(ctx, e.srcAdm, plain.topic)
}

// fillerRun, fillerHole: the compacted source of BenchmarkFillers has, in
// each partition, one record that stays, then groups of 2·fillerRun records
// where the first fillerRun share their keys with the next fillerRun: the
// cleaner removes exactly the first half of each group, leaving runs of
// fillerRun holes between runs of fillerRun records (50% holes).
const (
	fillerRun     = 10
	fillerOffsets = 30000 // per partition
)

// fillerKey is the key of the partition-local record j.
func fillerKey(part int32, j int) string {
	if j == 0 {
		return fmt.Sprintf("p%d-head", part)
	}
	j--
	return fmt.Sprintf("p%d-g%d-%d", part, j/(2*fillerRun), j%fillerRun)
}

// BenchmarkFillers mirrors a compacted source with 50% holes (see fillerRun)
// with each filler method in turn and prints the offsets mirrored per
// second. kfake's cleaner keeps the first batch (its first record stays),
// so the source log start stays 0; the last batch of each partition is its
// active segment and keeps its records.
func BenchmarkFillers(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := clusters(b)
	const topic = "bench-holes"
	if err := createTopic(ctx, e.srcAdm, topic, partitions, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}); err != nil {
		b.Fatal(err)
	}
	if err := produceHoleRuns(ctx, e.srcBoot, topic, 100); err != nil {
		b.Fatal(err)
	}
	if err := produceHoleTails(ctx, e.srcBoot, topic); err != nil {
		b.Fatal(err)
	}
	e.src.Kfake().Compact()
	src := e.describeSource(ctx, b, topic)
	starts, err := e.srcAdm.ListStartOffsets(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			b.Fatalf("kfake's cleaner moved the log start of %s/%d to %d", topic, o.Partition, o.Offset)
		}
	})
	visible, err := countRecords(ctx, e, topic, src.ends)
	if err != nil {
		b.Fatal(err)
	}
	holes := src.total - visible
	figure("compacted source: %d offsets over %d partitions, %d visible records, %d holes (%.0f%%) in runs of %d",
		src.total, partitions, visible, holes, 100*float64(holes)/float64(src.total), fillerRun)

	rs := map[partition.FillerMethod]countedRun{}
	for _, m := range []partition.FillerMethod{partition.FillCoordinator, partition.FillMarkers} {
		rs[m] = mirrorCounted(ctx, b, e, src, "fillers-"+string(m), "fillers-"+string(m), m)
	}
	c, m := rs[partition.FillCoordinator], rs[partition.FillMarkers]
	// Offsets over the whole copy (apply to last offset): the agent
	// reports progress once per fetched chunk, too coarsely for the
	// measured window of a copy this short.
	cps := float64(src.total) / c.whole.Seconds()
	mps := float64(src.total) / m.whole.Seconds()
	figure("fillers/coordinator: %.0f offsets/s (%d coordinator fillers, %.0f/s, %d DescribeTransactions over %.2fs)", cps, c.fillers, c.fillersPS, c.describes, c.whole.Seconds())
	figure("fillers/markers: %.0f offsets/s (%d markers in WriteTxnMarkers, %.0f/s, over %.2fs)", mps, m.markers, m.markersPS, m.whole.Seconds())
	figure("fillers markers/coordinator ratio: %.1f", mps/cps)
	b.ReportMetric(cps, "coordinator-offsets/s")
	b.ReportMetric(mps, "markers-offsets/s")
	b.ReportMetric(mps/cps, "markers/coordinator")
	_ = deleteTopic(ctx, e.srcAdm, topic)
}

// produceHoleRuns writes the records of a source with fillerRun holes to a
// compacted topic (see fillerRun), fillerOffsets per partition, with values
// of valueSize bytes of workload's compressible noise, in zstd batches.
func produceHoleRuns(ctx context.Context, seeds []string, topic string, valueSize int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	noise := workload.Spec{Topic: topic, ValueSize: valueSize, Seed: 5}.WithDefaults()
	var perr atomic.Value
	for j := range fillerOffsets {
		for part := range int32(partitions) {
			value := noise.Record(j*partitions + int(part)).Value
			cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: part, Key: []byte(fillerKey(part, j)), Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.Store(err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if err, _ := perr.Load().(error); err != nil {
		return err
	}
	return nil
}

// produceHoleTails writes each partition of topic one more record, with a
// key of its own, as a batch of its own: a cleaner leaves a partition's
// last batch (kfake) or active segment (Kafka, which this record rolls once
// the topic's segment.ms has passed) alone, and so keeps only this.
func produceHoleTails(ctx context.Context, seeds []string, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for part := range int32(partitions) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Key: fmt.Appendf(nil, "p%d-tail", part), Value: make([]byte, 100)}).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// countRecords counts the records a consumer reads from topic up to ends.
func countRecords(ctx context.Context, e *env, topic string, ends map[int32]int64) (int64, error) {
	offs := map[int32]kgo.Offset{}
	for p := range ends {
		offs[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.srcBoot...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var n int64
	reached := map[int32]bool{}
	for len(reached) < len(ends) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if r.Offset+1 >= ends[r.Partition] {
				reached[r.Partition] = true
			}
		})
	}
	return n, nil
}
