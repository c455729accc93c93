package bench

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/javaclient"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrormaker"
	"github.com/kmirror/kmirror/internal/netshape"
)

// BenchmarkMirrorMaker measures `kmirror agent` against Apache Kafka's
// MirrorMaker 2 (dedicated mode, mirrormaker.DefaultVersion), each a process
// of its own copying the same source topics between the same two clusters in
// the same run, one after the other: on real brokers (the Kafka engine,
// devcluster.DefaultKafkaVersion) and on the embedded engine. Each cluster
// sits behind a netshape link whose shape a scenario sets:
//
//   - loopback: no shaping;
//   - 50 ms round trip with the agent next to the destination: the source
//     cluster 25 ms away, one way;
//   - 50 ms round trip with the agent next to the source: the destination
//     25 ms away;
//   - a transactional source written by the Java producer (4 producers at
//     once, 100-record transactions, 5% aborted) and its plain twin, as
//     many records of the same size written without transactions by the
//     same client;
//   - a compacted source with 50% holes (see fillerRun), 1 KiB values.
//
// Figures per scenario and contender: MB/s of source batches, CPU-seconds
// per GB of source batches (utime+stime of the process tree from /proc),
// both over the window from a tenth of the copy to its end as in
// BenchmarkThroughput, or a minute of it at most (peerLimit), and peak RSS
// (VmHWM) over the whole run; on real brokers also the destination
// brokers' CPU-seconds per GB over the same window, the work the
// contender's writes cost the cluster (on a machine of few cores it
// competes with the contender for them). They are printed side by side
// with their ratios (kmirror/MM2), then kmirror and MM2 at 50 ms over
// loopback, and transactional over plain. After each copy the
// destination topic's batches are counted (countLog): a broker appends
// each batch on its own, and kmirror writes a control batch for every
// offset the source hides, where MirrorMaker writes nothing. Before the
// first scenario of each source, each contender copies it once over
// loopback, not counted (warmUp): the brokers' JIT compiling otherwise
// fell on whichever ran first. The plain source is 900 MB of 1 KiB zstd
// values in 6 partitions on Kafka, 300 MB on the embedded engine
// (KMIRROR_BENCH_PEER_MB changes it), the transactional one 200 MB and its
// plain twin 400 MB.
// KMIRROR_BENCH_PEERS, a regular
// expression, runs only the scenarios whose names it matches.
//
// MirrorMaker runs as bin/connect-mirror-maker.sh starts it (heap, GC) with
// tasks.max 6 (a task per partition, MirrorMaker's best over a long round
// trip), its target producer compressing with zstd as the source is, and its
// source consumer read_committed (without which it copies aborted records);
// every other setting is its default. kmirror copies each source
// peerRuns times (3 on Kafka), MirrorMaker once, after kmirror's first
// copy: the figures are those of kmirror's run of median MB/s, as its
// short copies move with the machine's other load.
func BenchmarkMirrorMaker(b *testing.B) {
	for _, kind := range []devcluster.EngineKind{devcluster.Kafka, devcluster.Embedded} {
		b.Run(string(kind), func(b *testing.B) { benchPeers(b, kind) })
	}
}

// peerDelay is the one-way delay of a shaped link: a 50 ms round trip.
const peerDelay = 25 * time.Millisecond

// peerMB is the plain source's payload in MB; KMIRROR_BENCH_PEER_MB changes
// it. On Kafka, kmirror copied 300 MB in 0.8–1.1 s, a window short enough
// that a second of the other processes' load moves the figures (two runs:
// 0.70 and 0.75 of loopback near the source, 0.87 and 0.94 near the
// destination); 900 MB gives 2.2–2.9 s. The embedded engine keeps every
// cluster's log in this process's memory.
func peerMB(kind devcluster.EngineKind) int {
	if kind == devcluster.Embedded {
		return 300
	}
	return 900
}

// peerRuns is how many times kmirror copies each scenario's source; the
// figures are those of the run of median MB/s. Its windows on Kafka were
// 2.6 to 8.0 s, in which the machine's other load moves the figures: on 2
// cores, two runs of the transactional source and its twin 15 minutes
// apart gave 11.8 and 17.1 MB/s, 55.6 and 33.5 for the twin, so 0.21 and
// 0.51 for transactional over plain. MirrorMaker's windows were 6.7 to 60
// s (peerLimit), and it runs once. The three runs added 7 s to the Kafka
// half (803 s against 796). KMIRROR_BENCH_PEER_RUNS changes it.
func peerRuns(kind devcluster.EngineKind) int {
	if kind == devcluster.Embedded {
		return 1
	}
	return 3
}

// medianRun is the run of median MB/s (the lower of the two middle ones
// for an even count).
func medianRun(rs []peerRun) peerRun {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b peerRun) int { return cmp.Compare(a.mbps(), b.mbps()) })
	return s[(len(s)-1)/2]
}

// runsMBps describes the median of runs as "14.0 MB/s over 6.2s", and for
// more than one run adds " (median of 3 runs: 12.1, 17.1, 14.0 MB/s)".
func runsMBps(rs []peerRun) string {
	m := medianRun(rs)
	out := fmt.Sprintf("%.1f MB/s over %.1fs", m.mbps(), m.elapsed.Seconds())
	if len(rs) == 1 {
		return out
	}
	each := make([]string, len(rs))
	for i, r := range rs {
		each[i] = fmt.Sprintf("%.1f", r.mbps())
	}
	return fmt.Sprintf("%s (median of %d runs: %s MB/s)", out, len(rs), strings.Join(each, ", "))
}

// peerTxnMB is the payload of the transactional source. With 100 MB (53 MB
// of batches) kmirror's window was 1.3 s, and its figures moved by a fifth
// between runs (Kafka 4.4.0: 30.3, 35.0 and 32.6 MB/s; the destination
// brokers 31.9, 21.7 and 31.3 CPU-s per GB).
const peerTxnMB = 200

// twinScale is how much larger the plain twin is than the transactional
// source: the ratio compares their MB/s, and kmirror copied a twin of the
// same size (53 MB) in 0.4 s, too short a window to measure.
const twinScale = 2

// peerEnv is one engine's pair of clusters, each behind a link.
type peerEnv struct {
	*env
	kind             devcluster.EngineKind
	srcLink, dstLink *netshape.Link
	mm2Runs          int
}

func startPeerEnv(b *testing.B, kind devcluster.EngineKind) *peerEnv {
	b.Helper()
	pe := &peerEnv{env: &env{}, kind: kind,
		srcLink: netshape.NewLink(netshape.Shape{}), dstLink: netshape.NewLink(netshape.Shape{})}
	opts := func(name string, link *netshape.Link) []devcluster.Option {
		o := []devcluster.Option{devcluster.Engine(kind), devcluster.Name(name), devcluster.Link(link)}
		if kind == devcluster.Embedded {
			return append(o, devcluster.Lenient(), segments)
		}
		// The cleaner looks for work every 200 ms, not 15 s, so that the
		// compacted source is compacted within seconds.
		return append(o, devcluster.BrokerConfigs(map[string]string{"log.cleaner.backoff.ms": "200"}))
	}
	var err error
	if pe.src, err = devcluster.Start(opts("peers-src", pe.srcLink)...); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pe.src.Close)
	if pe.dst, err = devcluster.Start(opts("peers-dst", pe.dstLink)...); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pe.dst.Close)
	pe.srcBoot, pe.dstBoot = pe.src.Bootstrap(), pe.dst.Bootstrap()
	// A short metadata age, as in clusters: the harness polls topics the
	// contenders create.
	client := func(boot []string) (*kgo.Client, *kadm.Client) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(boot...), kgo.MetadataMinAge(20*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		return cl, kadm.NewClient(cl)
	}
	pe.srcCl, pe.srcAdm = client(pe.srcBoot)
	pe.dstCl, pe.dstAdm = client(pe.dstBoot)
	return pe
}

func (pe *peerEnv) engineName() string {
	if pe.kind == devcluster.Kafka {
		return "Kafka " + pe.src.KafkaVersion()
	}
	return "embedded (kfake)"
}

// peerSource is a source topic and what each contender must copy of it.
type peerSource struct {
	source
	visible int64 // records a read_committed consumer sees: what MirrorMaker copies
	about   string
	rounds  *rounds // what its layout asks of the writes; nil: not read
}

// peerRun is one contender's copy of one source in one scenario.
type peerRun struct {
	result
	hwm    int64        // peak RSS, bytes
	writes writer.Stats // kmirror's requests to the destination (none for MM2)
	// dstLog is what the destination topic held when the contender
	// stopped, and dstMB the source batch MB that stands for: the broker
	// appended each of its batches on its own.
	dstLog logCount
	dstMB  float64
}

// dstBatchesPerMB is how many batches the contender had the destination
// append per MB of source batches copied.
func (r peerRun) dstBatchesPerMB() float64 { return float64(r.dstLog.batches) / max(r.dstMB, 1e-9) }

func (r peerRun) cpuPerGB() float64 { return r.cpu.Seconds() / (r.bytes / 1e9) }

// dstCPUPerGB is the destination brokers' CPU-seconds per GB of source
// batches: what the contender's writes cost the cluster.
func (r peerRun) dstCPUPerGB() float64 { return r.dstCPU.Seconds() / (r.bytes / 1e9) }

// peerScenario is a row of the table.
type peerScenario struct {
	name               string
	src                *peerSource
	srcShape, dstShape netshape.Shape
	kmirror, mm2       peerRun
}

func benchPeers(b *testing.B, kind devcluster.EngineKind) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	pe := startPeerEnv(b, kind)
	mb := peerMB(kind)
	if v, err := strconv.Atoi(os.Getenv("KMIRROR_BENCH_PEER_MB")); err == nil && v > 0 {
		mb = v
	}
	// KMIRROR_BENCH_PEERS picks scenarios by name (a regular expression);
	// only their sources are written.
	pick := regexp.MustCompile(os.Getenv("KMIRROR_BENCH_PEERS"))
	picked := func(names ...string) bool { return slices.ContainsFunc(names, pick.MatchString) }
	plain, txn, twin, holes := &peerSource{}, &peerSource{}, &peerSource{}, &peerSource{}
	if picked(nameLoopback, nameNearDst, nameNearSrc) {
		plain = pe.plainSource(ctx, b, mb)
	}
	if picked(nameTxn, nameTwin) {
		txn, twin = pe.txnSources(ctx, b, peerTxnMB)
	}
	if picked(nameHoles) {
		holes = pe.holesSource(ctx, b)
	}
	abouts := slices.DeleteFunc([]string{plain.about, txn.about, twin.about, holes.about}, func(a string) bool { return a == "" })
	figure("peers on %s: sources ready in %.0fs: %s", pe.engineName(), time.Since(start).Seconds(), strings.Join(abouts, "; "))

	shaped := netshape.Shape{Delay: peerDelay}
	scenarios := []*peerScenario{
		{name: nameLoopback, src: plain},
		{name: nameNearDst, src: plain, srcShape: shaped},
		{name: nameNearSrc, src: plain, dstShape: shaped},
		{name: nameTxn, src: txn},
		{name: nameTwin, src: twin},
		{name: nameHoles, src: holes},
	}
	scenarios = slices.DeleteFunc(scenarios, func(s *peerScenario) bool { return !pick.MatchString(s.name) })
	warm := os.Getenv("KMIRROR_BENCH_PEER_WARMUP") != "0"
	runs := peerRuns(kind)
	if v, err := strconv.Atoi(os.Getenv("KMIRROR_BENCH_PEER_RUNS")); err == nil && v > 0 {
		runs = v
	}
	warmed := map[*peerSource]bool{}
	for _, s := range scenarios {
		if warm && !warmed[s.src] {
			warmed[s.src] = true
			pe.warmUp(ctx, b, s)
		}
		pe.srcLink.SetShape(s.srcShape)
		pe.dstLink.SetShape(s.dstShape)
		// MirrorMaker between kmirror's first run and the others.
		ks := []peerRun{pe.runKmirror(ctx, b, s.src)}
		s.mm2 = pe.runMM2(ctx, b, s.src)
		for len(ks) < runs {
			ks = append(ks, pe.runKmirror(ctx, b, s.src))
		}
		s.kmirror = medianRun(ks)
		figure("  %s: kmirror %s, MM2 %s", s.name, runsMBps(ks), runsMBps([]peerRun{s.mm2}))
	}
	pe.srcLink.SetShape(netshape.Shape{})
	pe.dstLink.SetShape(netshape.Shape{})
	printPeers(b, pe, scenarios, time.Since(start))
}

// warmUp copies s's source once with each contender, over loopback, and
// prints what they did without counting it: a Kafka broker's JVM compiles
// the code of each kind of request in the first seconds it serves it, so
// that the first contender of a scenario paid the destination broker's
// compiling, and the second did not. kmirror ran first: on its
// transactional copy (Kafka 4.4.0, per-thread CPU of the destination
// broker from /proc, one run) the JIT compiler threads took 2.43 of the
// broker's 4.92 CPU-seconds, in the plain twin's copy after it 1.77 of
// 4.06, on a machine of 2 cores that the agent shares. Warm brokers are
// what a mirror meets in production. KMIRROR_BENCH_PEER_WARMUP=0 skips it.
func (pe *peerEnv) warmUp(ctx context.Context, b *testing.B, s *peerScenario) {
	b.Helper()
	pe.srcLink.SetShape(netshape.Shape{})
	pe.dstLink.SetShape(netshape.Shape{})
	k := pe.runKmirror(ctx, b, s.src)
	m := pe.runMM2(ctx, b, s.src)
	dst := func(r peerRun) string {
		if pe.kind != devcluster.Kafka {
			return ""
		}
		return fmt.Sprintf(", destination brokers %.1f CPU-s/GB", r.dstCPUPerGB())
	}
	figure("  warm-up (not counted) on the source of %s: kmirror %.1f MB/s%s; MM2 %.1f MB/s%s",
		s.name, k.mbps(), dst(k), m.mbps(), dst(m))
}

// The scenarios' names.
const (
	nameLoopback = "loopback"
	nameNearDst  = "50ms RTT, agent near destination"
	nameNearSrc  = "50ms RTT, agent near source"
	nameTxn      = "transactional, 5% aborted"
	nameTwin     = "plain twin of transactional"
	nameHoles    = "compacted, 50% holes"
)

// printPeers prints the table of one engine's scenarios and their ratios,
// and reports the ratios as metrics.
func printPeers(b *testing.B, pe *peerEnv, ss []*peerScenario, took time.Duration) {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "scenario\tkmirror MB/s\tMM2 MB/s\tratio\tkmirror CPU-s/GB\tMM2 CPU-s/GB\tratio\tkmirror peak RSS MiB\tMM2 peak RSS MiB\tratio\t")
	if pe.kind == devcluster.Kafka {
		fmt.Fprintf(w, "kmirror dst brokers CPU-s/GB\tMM2 dst brokers CPU-s/GB\tratio\t")
	}
	fmt.Fprintln(w)
	for _, s := range ss {
		k, m := s.kmirror, s.mm2
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%.3g\t%.2f\t%.1f\t%.3g\t%.0f\t%.0f\t%.3g\t", s.name,
			k.mbps(), m.mbps(), k.mbps()/m.mbps(),
			k.cpuPerGB(), m.cpuPerGB(), k.cpuPerGB()/m.cpuPerGB(),
			float64(k.hwm)/(1<<20), float64(m.hwm)/(1<<20), float64(k.hwm)/float64(m.hwm))
		if pe.kind == devcluster.Kafka {
			fmt.Fprintf(w, "%.1f\t%.1f\t%.3g\t", k.dstCPUPerGB(), m.dstCPUPerGB(), k.dstCPUPerGB()/m.dstCPUPerGB())
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	figure("kmirror against MirrorMaker 2 %s on %s (MB/s of source batches and CPU over the window from a tenth of the copy to its end, or %s at most; peak RSS over the whole run; ratios kmirror/MM2; whole benchmark %.0fs):\n%s",
		mirrormaker.DefaultVersion, pe.engineName(), peerLimit, took.Seconds(), strings.TrimRight(sb.String(), "\n"))
	// What each request to the destination carried: the broker does a
	// share of its work per request, whatever it carries.
	for _, s := range ss {
		w, mb := s.kmirror.writes, float64(s.src.stored)/MB
		per := func(items, reqs int64) float64 { return float64(items) / max(float64(reqs), 1) }
		figure("  %s: kmirror wrote with %.1f requests per MB: %d produce (%.2f batches each), %d WriteTxnMarkers (%.2f markers each), %d transactional produce; it ended %d transactions through the coordinator",
			s.name, float64(w.Produce+w.Markers+w.ProduceTxn)/mb, w.Produce, per(w.ProduceBatches, w.Produce), w.Markers, per(w.MarkersWritten, w.Markers), w.ProduceTxn, w.Transactions)
		k, m := s.kmirror, s.mm2
		cost := ""
		if pe.kind == devcluster.Kafka {
			// CPU-s per GB over batches per GB: what one append cost the
			// destination brokers on average, the work per byte in it
			// (the CPU is the window's, the batches the whole copy's).
			perBatch := func(r peerRun) float64 { return r.dstCPUPerGB() * 1e3 / max(r.dstBatchesPerMB(), 1e-9) }
			cost = fmt.Sprintf("; destination brokers' CPU per batch: kmirror %.0f µs, MM2 %.0f µs", perBatch(k), perBatch(m))
		}
		figure("    the destination appended per MB: kmirror %.0f batches (%.0f of them markers), MM2 %.0f batches (%.0f markers)%s",
			k.dstBatchesPerMB(), float64(k.dstLog.control)/max(k.dstMB, 1e-9), m.dstBatchesPerMB(), float64(m.dstLog.control)/max(m.dstMB, 1e-9), cost)
		if r := s.src.rounds; r != nil {
			figure("    its layout (a partition's batch, or its markers in a row, per request, each after the answer to the last) needs at least %d rounds of requests, %.1f per MB; %d, %.1f per MB, writing each round the kind most partitions are at",
				r.least, float64(r.least)/mb, r.greedy, float64(r.greedy)/mb)
		}
	}
	ratio := func(a, b peerRun) float64 { return a.mbps() / b.mbps() }
	for _, s := range ss {
		unit := strings.NewReplacer(" ", "-", ",", "", "%", "pct").Replace(s.name)
		b.ReportMetric(ratio(s.kmirror, s.mm2), unit+":kmirror/MM2")
	}
	named := func(name string) *peerScenario {
		i := slices.IndexFunc(ss, func(s *peerScenario) bool { return s.name == name })
		if i < 0 {
			return nil
		}
		return ss[i]
	}
	if loop, nearDst, nearSrc := named(nameLoopback), named(nameNearDst), named(nameNearSrc); loop != nil && nearDst != nil && nearSrc != nil {
		figure("  at 50ms RTT over loopback: kmirror %.2f near the destination, %.2f near the source; MM2 %.2f near the destination, %.2f near the source",
			ratio(nearDst.kmirror, loop.kmirror), ratio(nearSrc.kmirror, loop.kmirror), ratio(nearDst.mm2, loop.mm2), ratio(nearSrc.mm2, loop.mm2))
		b.ReportMetric(ratio(nearDst.kmirror, loop.kmirror), "kmirror-50ms-near-dst/loopback")
		b.ReportMetric(ratio(nearSrc.kmirror, loop.kmirror), "kmirror-50ms-near-src/loopback")
		b.ReportMetric(loop.kmirror.mbps(), "kmirror-loopback-MB/s")
		b.ReportMetric(loop.mm2.mbps(), "MM2-loopback-MB/s")
	}
	if txn, twin := named(nameTxn), named(nameTwin); txn != nil && twin != nil {
		figure("  transactional over plain twin: kmirror %.2f, MM2 %.2f", ratio(txn.kmirror, twin.kmirror), ratio(txn.mm2, twin.mm2))
		b.ReportMetric(ratio(txn.kmirror, twin.kmirror), "kmirror-txn/plain")
	}
}

// plainSource writes mb MB of 1 KiB zstd values with franz-go, as
// BenchmarkThroughput's source.
func (pe *peerEnv) plainSource(ctx context.Context, b *testing.B, mb int) *peerSource {
	b.Helper()
	s := produceSource(ctx, b, pe.env, "peers-plain", mb)
	return &peerSource{source: s, visible: s.total,
		about: fmt.Sprintf("plain: %d records of 1 KiB (franz-go, zstd), %.0f MB of batches", s.total, float64(s.stored)/MB)}
}

// txnSources writes the transactional source with the Java producer, and
// its plain twin: twinScale times as many records of the same shape (the
// same client, values padded to 1 KiB, zstd) without transactions.
func (pe *peerEnv) txnSources(ctx context.Context, b *testing.B, mb int) (txn, twin *peerSource) {
	b.Helper()
	records := mb * int(MB) / valueSize
	txns := max(1, records/txnRecords/txnProducers)
	conn := clientop.Conn{Bootstrap: strings.Join(pe.srcBoot, ",")}
	for _, topic := range []string{"peers-txn", "peers-twin"} {
		if err := createTopic(ctx, pe.srcAdm, topic, partitions, nil); err != nil {
			b.Fatal(err)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		res  clientop.Result
		errs []error
	)
	for i := range txnProducers {
		wg.Go(func() {
			r, err := javaclient.Run(ctx, clientop.ProduceTxn{Conn: conn, Topic: "peers-txn", TransactionalID: fmt.Sprintf("peers-txn-%d", i),
				Transactions: txns, RecordsPerTxn: txnRecords, AbortEvery: txnAbortN, Compression: "zstd", ValueSize: valueSize})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			res.CommittedRecords += r.CommittedRecords
			res.AbortedRecords += r.AbortedRecords
		})
	}
	wg.Go(func() {
		_, err := javaclient.Run(ctx, clientop.Produce{Conn: conn, Topic: "peers-twin", Records: twinScale * txns * txnRecords * txnProducers,
			Idempotent: true, Compression: "zstd", ValueSize: valueSize})
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	wg.Wait()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	txn = &peerSource{source: pe.describeSource(ctx, b, "peers-txn"), visible: int64(res.CommittedRecords)}
	r := layoutRounds(ctx, b, pe.srcCl, "peers-txn", partitions)
	txn.rounds = &r
	txn.about = fmt.Sprintf("transactional: %d records committed and %d aborted in %d-record transactions by %d Java producers, %d offsets, %.0f MB of batches",
		res.CommittedRecords, res.AbortedRecords, txnRecords, txnProducers, txn.total, float64(txn.stored)/MB)
	twin = &peerSource{source: pe.describeSource(ctx, b, "peers-twin")}
	twin.visible = twin.total
	twin.about = fmt.Sprintf("its plain twin: %d records, %.0f MB of batches", twin.total, float64(twin.stored)/MB)
	return txn, twin
}

// holesSource writes BenchmarkFillers' compacted source, with 1 KiB values
// as the other sources have, and waits until the cleaner has left half its
// offsets as holes.
func (pe *peerEnv) holesSource(ctx context.Context, b *testing.B) *peerSource {
	b.Helper()
	const topic = "peers-holes"
	configs := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	const segment = 100 * time.Millisecond
	if pe.kind == devcluster.Kafka {
		// Segments rolled every 100 ms of record timestamps, each worth
		// cleaning at once, so that the cleaner compacts within seconds.
		configs["segment.ms"] = kadm.StringPtr(strconv.Itoa(int(segment.Milliseconds())))
		configs["min.cleanable.dirty.ratio"] = kadm.StringPtr("0.01")
		configs["min.compaction.lag.ms"] = kadm.StringPtr("0")
	}
	if err := createTopic(ctx, pe.srcAdm, topic, partitions, configs); err != nil {
		b.Fatal(err)
	}
	if err := produceHoleRuns(ctx, pe.srcBoot, topic, valueSize); err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * segment) // the tails then roll the last segment of the runs
	if err := produceHoleTails(ctx, pe.srcBoot, topic); err != nil {
		b.Fatal(err)
	}
	s := &peerSource{source: pe.describeSource(ctx, b, topic)}
	if pe.kind == devcluster.Embedded {
		pe.src.Kfake().Compact()
	}
	// Half the offsets of each run of 2·fillerRun go; the heads and tails
	// stay.
	want := s.total/2 + 2*partitions
	deadline := time.Now().Add(3 * time.Minute) // against a cleaner that never runs, not a speed check
	for {
		var err error
		if s.visible, err = countRecords(ctx, pe.env, topic, s.ends); err != nil {
			b.Fatal(err)
		}
		if s.visible <= want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cleaner left %d of %d offsets of %s visible after 3 minutes, want at most %d", s.visible, s.total, topic, want)
		}
		time.Sleep(2 * time.Second)
	}
	if pe.kind == devcluster.Kafka {
		// The settings that hurried the cleaner go back to their defaults
		// before anything copies the topic: both contenders copy a
		// source's topic configs, and 100 ms segments would have the
		// destination roll a segment (new files, a producer state
		// snapshot written and flushed) every few batches, which measures
		// the destination's file system rather than the copy.
		var alter []kadm.AlterConfig
		for k := range configs {
			if k != "cleanup.policy" {
				alter = append(alter, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
			}
		}
		rs, err := pe.srcAdm.AlterTopicConfigs(ctx, alter, topic)
		if err == nil {
			err = rs[0].Err
		}
		if err != nil {
			b.Fatalf("resetting the cleaner settings of %s: %v", topic, err)
		}
	}
	var err error
	if s.stored, err = storedBytes(ctx, pe.srcAdm, topic, partitions); err != nil {
		b.Fatal(err)
	}
	s.about = fmt.Sprintf("compacted: %d offsets, %d visible (%.0f%% holes in runs of %d), %.1f MB of batches after cleaning",
		s.total, s.visible, 100*float64(s.total-s.visible)/float64(s.total), fillerRun, float64(s.stored)/MB)
	return s
}

// peerPoll is how often a contender's progress is read: over HTTP from the
// agent, with ListOffsets from the destination for MirrorMaker.
const peerPoll = 10 * time.Millisecond

// peerLimit bounds a measured window: MirrorMaker copies at about 1 MB/s
// with the destination 25 ms away, and a whole copy would take minutes.
// Its rate over a minute of the copy is as telling.
const peerLimit = time.Minute

// runKmirror copies src with a new `kmirror agent` process into a fresh
// destination topic of the source's name.
func (pe *peerEnv) runKmirror(ctx context.Context, b *testing.B, src *peerSource) peerRun {
	b.Helper()
	if err := deleteTopic(ctx, pe.dstAdm, src.topic); err != nil {
		b.Fatal(err)
	}
	waitTopicGone(ctx, b, pe.env, src.topic)
	p, api := agentProc(b, pe.dstBoot, pe.srcBoot, src.topic)
	defer p.stop()
	cl := mirrorapi.NewClient(api, "")
	done := make(chan error, 1)
	go func() {
		<-p.done
		done <- fmt.Errorf("the agent exited: %s", p.stderr.String())
	}()
	r, err := watch{name: "kmirror", total: src.total, stored: src.stored, done: done, every: peerPoll, limit: peerLimit,
		progress: func() (int64, error) { return agentMirrored(ctx, cl, src.topic) },
		cpu:      func() (time.Duration, error) { return treeCPU(p.pid()) }, dstCPU: procsCPU(pe.dst.BrokerPIDs())}.measure(ctx)
	if err != nil {
		b.Fatal(err)
	}
	run := peerRun{result: r}
	if _, run.hwm, err = memStatus(p.pid()); err != nil {
		b.Fatal(err)
	}
	if run.writes, err = agentWrites(ctx, api); err != nil {
		b.Fatal(err)
	}
	p.stop()
	run.dstLog = countLog(ctx, b, pe.dstCl, src.topic, partitions)
	run.dstMB = float64(src.stored) / MB * float64(run.dstLog.offsets) / float64(src.total)
	if err := deleteTopic(ctx, pe.dstAdm, src.topic); err != nil {
		b.Fatal(err)
	}
	return run
}

// runMM2 copies src with a new MirrorMaker 2 process, under a source alias
// of its own so that it starts from nothing, into the remote topic
// alias.topic.
func (pe *peerEnv) runMM2(ctx context.Context, b *testing.B, src *peerSource) peerRun {
	b.Helper()
	pe.mm2Runs++
	alias := fmt.Sprintf("mm%d", pe.mm2Runs)
	cfg := mirrormaker.Config{
		SourceAlias: alias, Source: pe.srcBoot, Target: pe.dstBoot,
		Topics: regexp.QuoteMeta(src.topic), Tasks: partitions, Dir: b.TempDir(),
		Properties: map[string]string{
			alias + ".consumer.isolation.level": "read_committed",
			"target.producer.compression.type":  "zstd",
		},
	}
	remote := cfg.RemoteTopic(src.topic)
	p, err := mirrormaker.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop(20 * time.Second)
	done := make(chan error, 1)
	go func() {
		<-p.Done()
		done <- fmt.Errorf("MirrorMaker exited:\n%s", p.LogTail())
	}()
	copied := func() (int64, error) {
		ends, err := pe.dstAdm.ListEndOffsets(ctx, remote)
		if err != nil {
			return 0, nil // not created yet
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				n += o.Offset
			}
		})
		return n, nil
	}
	// MirrorMaker writes the records a read_committed consumer sees, at
	// offsets of its own: its progress is counted in records, and the
	// source's batch bytes are shared out over them.
	r, err := watch{name: "MM2", total: src.visible, stored: src.stored, done: done, every: peerPoll, limit: peerLimit,
		progress: copied, cpu: func() (time.Duration, error) { return treeCPU(p.Pid()) }, dstCPU: procsCPU(pe.dst.BrokerPIDs())}.measure(ctx)
	if err != nil {
		b.Fatalf("%v\n%s", err, p.LogTail())
	}
	run := peerRun{result: r}
	if _, run.hwm, err = memStatus(p.Pid()); err != nil {
		b.Fatal(err)
	}
	// More records than a read_committed consumer sees would mean that
	// the figures measured something else: aborted records copied too,
	// which MirrorMaker does by default. Those would come within moments
	// of the last committed ones.
	if src.visible < src.total {
		time.Sleep(2 * time.Second)
	}
	p.Stop(20 * time.Second)
	if n, _ := copied(); n > src.visible {
		b.Fatalf("MirrorMaker wrote %d records to %s, more than the %d the source shows a read_committed consumer", n, remote, src.visible)
	}
	run.dstLog = countLog(ctx, b, pe.dstCl, remote, partitions)
	run.dstMB = float64(src.stored) / MB * float64(run.dstLog.offsets) / float64(src.visible)
	if err := deleteTopic(ctx, pe.dstAdm, remote); err != nil {
		b.Fatal(err)
	}
	return run
}

// agentWrites reads an agent's write request counters from its /metrics.
func agentWrites(ctx context.Context, api string) (writer.Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/metrics", nil)
	if err != nil {
		return writer.Stats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return writer.Stats{}, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return writer.Stats{}, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	// value reads a counter's series of a kind, or its only one ("").
	value := func(name, kind string) int64 {
		for _, m := range fams[name].GetMetric() {
			if kind == "" {
				return int64(m.GetCounter().GetValue())
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return int64(m.GetCounter().GetValue())
				}
			}
		}
		return 0
	}
	const reqs, items = "kmirror_write_requests_total", "kmirror_write_request_items_total"
	return writer.Stats{
		Produce: value(reqs, "produce"), ProduceBatches: value(items, "produce"),
		Markers: value(reqs, "markers"), MarkersWritten: value(items, "markers"),
		ProduceTxn: value(reqs, "produce_txn"), Transactions: value("kmirror_destination_transactions_total", ""),
	}, nil
}
