package e2e

// The shared harness of the end-to-end tests: two strict dev clusters, the
// coordinator run in-process, waiting for a mirror to catch up (by polling,
// with a deadline), and the identity checks (verify through franz-go at both
// isolation levels, kcat through librdkafka, and the raw batch layout).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/recordbatch"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// mirrorName is the one mirror every e2e test runs.
const mirrorName = "dr"

// pollEvery is how often the wait helpers poll.
const pollEvery = 50 * time.Millisecond

// pair is a source and a destination dev cluster with a client on each.
type pair struct {
	src, dst       *devcluster.Cluster
	srcCl, dstCl   *kgo.Client
	srcAdm, dstAdm *kadm.Client

	eng engine
	// topic is the name pairOpts.topic was created under (engines_test.go).
	topic string
	// suffix makes names this test's own on shared clusters, and
	// stateTopic is the agent's state topic there; both are empty on the
	// embedded engine.
	suffix, stateTopic string
}

type pairOpts struct {
	srcBrokers, dstBrokers int // 0 means 1
	// topic is seeded on the source with partitions partitions; the
	// destination starts empty (the agent creates the mirror topic).
	topic      string
	partitions int32
	// secured runs the clusters with SASL users and ACLs (the
	// StandardAuthorizer on Kafka) as securedOpts has them; the test
	// clients authenticate as the super user agent. Kafka engines only
	// (newPairOn; authPairOn in readonly_test.go is the form for both engines).
	secured bool
	// srcConfigs and dstConfigs are broker configs of the clusters (such
	// as a small transactional.id.expiration.ms). On a Kafka engine each
	// distinct set is a shared cluster of its own, so use them only for
	// what topic configs cannot say. Kafka engines only.
	srcConfigs, dstConfigs map[string]string
}

// newPair starts two strict dev clusters ("src" and "dst"), closed when the
// test ends.
func newPair(t *testing.T, o pairOpts) *pair {
	t.Helper()
	srcOpts := []devcluster.Option{devcluster.Name("src"), devcluster.Brokers(max(o.srcBrokers, 1))}
	if o.topic != "" {
		srcOpts = append(srcOpts, devcluster.KfakeOptions(kfake.SeedTopics(o.partitions, o.topic)))
	}
	p := &pair{
		src: devclustertest.Start(t, srcOpts...),
		dst: devclustertest.Start(t, devcluster.Name("dst"), devcluster.Brokers(max(o.dstBrokers, 1))),
	}
	p.connect(t)
	return p
}

// connect makes the pair's clients, with opts (authentication) added.
func (p *pair) connect(t *testing.T, opts ...kgo.Opt) {
	t.Helper()
	// Metadata cached for kgo's default 5s would make the polls below see
	// a topic the agent just created, or a leader that just moved, 5s
	// late.
	var err error
	if p.srcCl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.src.Bootstrap()...), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.srcCl.Close)
	if p.dstCl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.dstCl.Close)
	p.srcAdm, p.dstAdm = kadm.NewClient(p.srcCl), kadm.NewClient(p.dstCl)
}

// srcOpts are client options reaching the source, for workloads. A short
// metadata age lets producers follow leader moves at once.
func (p *pair) srcOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(p.src.Bootstrap()...), kgo.MetadataMinAge(100 * time.Millisecond)}
}

// spec is the mirror every test applies: mirrorName from the source to the
// destination, for topics.
func (p *pair) spec(topics ...string) mirrorspec.Spec {
	return mirrorspec.Spec{Name: mirrorName, Source: mirrorspec.Source{BootstrapServers: p.src.Bootstrap()}, Topics: topics}
}

// agent is a coordinator running in-process.
type agent struct {
	co  *coordinator.Coordinator
	run *coordinatortest.Agent
}

type agentOpts struct {
	// apply is applied before Run; nil runs what the state topic holds
	// (a restart).
	apply           *mirrorspec.Spec
	refreshInterval time.Duration
}

// startAgent starts a coordinator against p's destination and runs it until
// stop or the end of the test.
func (p *pair) startAgent(t *testing.T, o agentOpts) *agent {
	t.Helper()
	return p.startAgentWith(t, o, func(*coordinator.Config) {})
}

// startAgentWith is startAgent with coordinator settings the harness does
// not expose.
func (p *pair) startAgentWith(t *testing.T, o agentOpts, tune func(*coordinator.Config)) *agent {
	t.Helper()
	cfg := coordinator.Config{
		Destination:     []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...)},
		StateTopic:      p.stateTopic,
		RefreshInterval: o.refreshInterval,
		Logger:          testLogger(t, "agent"),
	}
	tune(&cfg)
	var specs []mirrorspec.Spec
	if o.apply != nil {
		specs = append(specs, *o.apply)
	}
	run := coordinatortest.Start(t, cfg, specs...)
	return &agent{co: run.Coordinator, run: run}
}

// stop ends the agent; it may be called more than once.
func (a *agent) stop() { a.run.Stop() }

// status returns the mirror's status as Describe shows it.
func (a *agent) status() (coordinator.MirrorStatus, bool) {
	for _, m := range a.co.Describe() {
		if m.Name == mirrorName {
			return m, true
		}
	}
	return coordinator.MirrorStatus{}, false
}

// partitions returns the Describe figures of topic's partitions, by number.
func (a *agent) partitions(topic string) map[int32]partition.Status {
	out := map[int32]partition.Status{}
	m, _ := a.status()
	for _, ts := range m.Topics {
		if ts.Name != topic {
			continue
		}
		for _, ps := range ts.Partitions {
			out[ps.Partition] = ps
		}
	}
	return out
}

// describe renders Describe for failure messages.
func (a *agent) describe() string {
	b, err := json.MarshalIndent(a.co.Describe(), "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// bounds is one side's log start and end per partition.
type bounds map[int32][2]int64

func listBounds(ctx context.Context, adm *kadm.Client, topic string) (bounds, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	out := bounds{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		out[o.Partition] = [2]int64{s.Offset, o.Offset}
	})
	return out, nil
}

func (b bounds) String() string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(b)) {
		parts = append(parts, fmt.Sprintf("p%d [%d, %d)", p, b[p][0], b[p][1]))
	}
	return strings.Join(parts, " ")
}

// mirroredNow says whether every source partition of topic is mirrored to
// its end: the destination has as many partitions and the same high
// watermarks, and Describe shows each partition MIRRORING at the source
// high watermark with lag 0. Otherwise it says why not.
func (p *pair) mirroredNow(ctx context.Context, a *agent, topic string) (bool, string) {
	src, err := listBounds(ctx, p.srcAdm, topic)
	if err != nil {
		return false, fmt.Sprintf("source offsets: %v", err)
	}
	dst, err := listBounds(ctx, p.dstAdm, topic)
	if err != nil {
		return false, fmt.Sprintf("destination offsets: %v", err)
	}
	if len(dst) != len(src) {
		return false, fmt.Sprintf("the destination has %d partitions, the source %d", len(dst), len(src))
	}
	m, ok := a.status()
	if !ok {
		return false, "Describe has no mirror " + mirrorName
	}
	if m.Error != "" {
		return false, "mirror error: " + m.Error
	}
	ps := a.partitions(topic)
	for part, sb := range src {
		st, ok := ps[part]
		switch {
		case dst[part][1] != sb[1]:
			return false, fmt.Sprintf("partition %d: destination end %d, source end %d", part, dst[part][1], sb[1])
		case !ok:
			return false, fmt.Sprintf("partition %d: not in Describe", part)
		case st.State != partition.Mirroring || st.DestinationOffset != sb[1] || st.Lag != 0:
			return false, fmt.Sprintf("partition %d: state %s (%s), destination offset %d, lag %d, source end %d",
				part, st.State, st.Reason, st.DestinationOffset, st.Lag, sb[1])
		}
	}
	// Not m.MaxLag: it covers the mirror's other topics too.
	return true, ""
}

// waitMirrored polls until mirroredNow holds, failing the test with the
// offsets and Describe when it does not. The source must not be written
// meanwhile (stop producers first).
//
// timeout is how long the destination may go without progress: a machine
// whose cores are shared by many broker JVMs slows mirroring down (on real
// brokers each filler is several replicated coordinator writes), and a wait
// for liveness must tell a slow mirror from a stuck one. It ends after ten
// timeouts whatever the progress.
func (p *pair) waitMirrored(t *testing.T, a *agent, topic string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*timeout)
	defer cancel()
	why := ""
	var lastEnds int64 = -1
	stall := time.Now().Add(timeout)
	for {
		var ok bool
		if ok, why = p.mirroredNow(ctx, a, topic); ok {
			return
		}
		if ends := p.destinationEnds(ctx, topic); ends > lastEnds {
			lastEnds, stall = ends, time.Now().Add(timeout)
		}
		if time.Now().After(stall) {
			cancel()
		}
		select {
		case <-ctx.Done():
			p.fatalWithBounds(t, a, topic, fmt.Sprintf("%s not mirrored (no progress for %v, or 10 times that in all): %s", topic, timeout, why))
		case <-time.After(pollEvery):
		}
	}
}

// fatalWithBounds fails t with msg, the source and destination offsets of
// topic as they are now, and a's Describe.
func (p *pair) fatalWithBounds(t *testing.T, a *agent, topic, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	src, _ := listBounds(ctx, p.srcAdm, topic)
	dst, _ := listBounds(ctx, p.dstAdm, topic)
	t.Fatalf("%s\nsource %v\ndestination %v\nDescribe:\n%s", msg, src, dst, a.describe())
}

// destinationEnds is the sum of the destination's end offsets of topic, -1
// when they cannot be read.
func (p *pair) destinationEnds(ctx context.Context, topic string) int64 {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dst, err := listBounds(qctx, p.dstAdm, topic)
	if err != nil {
		return -1
	}
	var sum int64
	for _, b := range dst {
		sum += b[1]
	}
	return sum
}

// waitProgress polls until the destination end of every partition of topic
// is at least min[partition], failing after timeout with Describe.
func (p *pair) waitProgress(t *testing.T, a *agent, topic string, minEnd map[int32]int64, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		dst, err := listBounds(ctx, p.dstAdm, topic)
		if err == nil {
			ok := true
			for part, want := range minEnd {
				if dst[part][1] < want {
					ok = false
				}
			}
			if ok {
				return
			}
		}
		select {
		case <-ctx.Done():
			p.fatalWithBounds(t, a, topic, fmt.Sprintf("destination of %s did not reach %v within %v (last error %v)", topic, minEnd, timeout, err))
		case <-time.After(pollEvery):
		}
	}
}

// ends returns the high watermark per partition, retrying errors such as
// NOT_LEADER_FOR_PARTITION right after a leader move.
func ends(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		b, err := listBounds(ctx, adm, topic)
		if err == nil {
			out := map[int32]int64{}
			for part, v := range b {
				out[part] = v[1]
			}
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("listing offsets of %s: %v", topic, err)
		case <-time.After(pollEvery):
		}
	}
}

// identityOpts tunes assertIdentical.
type identityOpts struct {
	// kcatIsolations are the levels kcat reads both sides at; nil means
	// read_uncommitted only.
	kcatIsolations []string
	// wantRecords, when positive, is how many records the source must
	// hold (all partitions), so that the comparison cannot pass on empty
	// logs.
	wantRecords int64
}

// assertIdentical checks the invariant on topic: verify.Compare (franz-go)
// at both isolation levels, then kcat (librdkafka) on both sides record by
// record. It returns the read_uncommitted partition reports.
func (p *pair) assertIdentical(t *testing.T, topic string, o identityOpts) map[int32]verify.PartitionReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic})
	if err != nil {
		t.Fatalf("verify %s: %v", topic, err)
	}
	if !rep.OK() {
		var buf bytes.Buffer
		_ = rep.WriteText(&buf)
		t.Fatalf("verify %s found mismatches:\n%s", topic, buf.String())
	}
	uncommitted := map[int32]verify.PartitionReport{}
	visible := map[verify.Isolation]map[int32]int64{verify.ReadUncommitted: {}, verify.ReadCommitted: {}}
	levels := map[verify.Isolation]int{}
	var total int64
	for _, pr := range rep.Partitions {
		levels[pr.Isolation]++
		if visible[pr.Isolation] != nil {
			visible[pr.Isolation][pr.Partition] = pr.SourceVisible
		}
		if pr.Compared != pr.SourceVisible || pr.Compared != pr.DestinationVisible {
			t.Errorf("verify %s p%d %s: compared %d, source visible %d, destination visible %d", topic, pr.Partition, pr.Isolation,
				pr.Compared, pr.SourceVisible, pr.DestinationVisible)
		}
		if pr.Source.LogStart != pr.Destination.LogStart || pr.Source.HighWatermark != pr.Destination.HighWatermark {
			t.Errorf("verify %s p%d: source log [%d, %d), destination [%d, %d)", topic, pr.Partition,
				pr.Source.LogStart, pr.Source.HighWatermark, pr.Destination.LogStart, pr.Destination.HighWatermark)
		}
		if pr.Isolation == verify.ReadUncommitted {
			uncommitted[pr.Partition] = pr
			total += pr.Compared
		}
	}
	if levels[verify.ReadUncommitted] == 0 || levels[verify.ReadCommitted] != levels[verify.ReadUncommitted] {
		t.Fatalf("verify %s compared partitions per level %v, want both levels", topic, levels)
	}
	if o.wantRecords > 0 && total != o.wantRecords {
		t.Fatalf("verify %s compared %d records, want %d", topic, total, o.wantRecords)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("verify %s: %d records identical at each isolation level over %d partitions", topic, total, len(uncommitted))

	isos := o.kcatIsolations
	if isos == nil {
		isos = []string{kcat.ReadUncommitted}
	}
	if err := kcat.Available(); err != nil {
		t.Fatalf("kcat is needed to read with an independent client: %v", err)
	}
	srcBoot, dstBoot := p.src.BootstrapString(), p.dst.BootstrapString()
	for _, part := range slices.Sorted(maps.Keys(uncommitted)) {
		for _, iso := range isos {
			var srcRecs, dstRecs []verify.Record
			var srcErr, dstErr error
			var wg sync.WaitGroup
			wg.Go(func() { srcRecs, srcErr = kcat.Read(ctx, srcBoot, topic, part, iso, -1, -1) })
			wg.Go(func() { dstRecs, dstErr = kcat.Read(ctx, dstBoot, topic, part, iso, -1, -1) })
			wg.Wait()
			if srcErr != nil || dstErr != nil {
				t.Fatalf("kcat %s p%d %s: source: %v; destination: %v", topic, part, iso, srcErr, dstErr)
			}
			if want := visible[verify.Isolation(iso)][part]; int64(len(srcRecs)) != want {
				t.Fatalf("kcat %s p%d %s read %d source records, franz-go %d", topic, part, iso, len(srcRecs), want)
			}
			if len(dstRecs) != len(srcRecs) {
				t.Fatalf("kcat %s p%d %s: %d source records, %d destination records", topic, part, iso, len(srcRecs), len(dstRecs))
			}
			for i := range srcRecs {
				if d := srcRecs[i].Diff(dstRecs[i]); len(d) > 0 {
					t.Fatalf("kcat %s p%d %s: record %d differs in %v:\nsource      %v\ndestination %v", topic, part, iso, i, d, srcRecs[i], dstRecs[i])
				}
			}
			t.Logf("kcat %s p%d %s: %d records identical", topic, part, iso, len(srcRecs))
		}
	}
	return uncommitted
}

// batch is one raw record batch as a log holds it.
type batch struct {
	Base, Last int64
	Codec      recordbatch.Codec
	NumRecords int32
	// Content hashes what a mirror must forward unchanged: attributes,
	// last offset delta, timestamps, record count and the (compressed)
	// records, that is every byte but the base offset, leader epoch,
	// CRC and producer id, epoch and sequence.
	Content [32]byte
}

// rawBatches reads partition's batches in [from, end) through cl.
func rawBatches(t *testing.T, cl *kgo.Client, topic string, part int32, from, end int64) []batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []batch
	for b, err := range fetcher.ReadRange(ctx, cl, leaders.New(cl), fetcher.TP{Topic: topic, Partition: part}, from, end, 4<<20) {
		if err != nil {
			t.Fatalf("reading raw batches of %s/%d: %v", topic, part, err)
		}
		sum := sha256.New()
		sum.Write(b.Raw[21:43])
		sum.Write(b.Raw[57:])
		bt := batch{Base: b.BaseOffset, Last: b.LastOffset(), Codec: b.Codec(), NumRecords: b.NumRecords}
		copy(bt.Content[:], sum.Sum(nil))
		out = append(out, bt)
	}
	if len(out) > 0 && out[len(out)-1].Last+1 < end {
		t.Fatalf("raw batches of %s/%d end at %d, want %d", topic, part, out[len(out)-1].Last+1, end)
	}
	return out
}

// codecCounts counts batches per codec.
func codecCounts(bs []batch) map[string]int {
	out := map[string]int{}
	for _, b := range bs {
		out[b.Codec.String()]++
	}
	return out
}

// testLogger logs through t until the test ends, at the level named by
// KMIRROR_E2E_LOG (default info).
func testLogger(t *testing.T, name string) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv("KMIRROR_E2E_LOG"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: devclustertest.Writer(t)})
}

// runProducer runs a continuous workload producer until the returned stop
// is called; stop waits for it and returns what it produced, failing the
// test on a produce error.
func runProducer(t *testing.T, prod *workload.Producer) func() workload.Stats {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  workload.Stats
		err error
	}
	ch := make(chan result, 1)
	go func() {
		st, err := prod.Run(ctx)
		if err != nil && ctx.Err() == nil {
			// Stopped on its own: said now, as a test waiting for the
			// source to grow would otherwise fail on a timeout without
			// the cause. (The test waits for this goroutine before it
			// ends: stop and the cleanup below read ch.)
			var acked int64
			for _, n := range prod.Acked() {
				acked += n
			}
			t.Logf("producer of %s stopped after %d acknowledged records: %v", prod.Spec().Topic, acked, err)
		}
		ch <- result{st, err}
	}()
	var once sync.Once
	var res result
	stop := func() workload.Stats {
		once.Do(func() {
			cancel()
			res = <-ch
		})
		if res.err != nil {
			t.Fatalf("producer of %s: %v", prod.Spec().Topic, res.err)
		}
		return res.st
	}
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			res = <-ch
		})
	})
	return stop
}

// runProducers runs a continuous producer of each spec on src, at
// perSecond records a second, and returns once each has had acked records
// acknowledged; stop stops them all and returns what they produced, in the
// order of specs.
func runProducers(ctx context.Context, t *testing.T, src *devcluster.Cluster, specs []workload.Spec, perSecond int, acked int64) (stop func() []workload.Stats) {
	t.Helper()
	var stops []func() workload.Stats
	for _, spec := range specs {
		prod := workload.NewProducer([]kgo.Opt{kgo.SeedBrokers(src.Bootstrap()...)}, spec, perSecond)
		stops = append(stops, runProducer(t, prod))
		if err := prod.WaitAcked(ctx, acked); err != nil {
			t.Fatalf("producer of %s: %v", spec.Topic, err)
		}
	}
	return func() []workload.Stats {
		var stats []workload.Stats
		for _, stop := range stops {
			stats = append(stats, stop())
		}
		return stats
	}
}

// specTopics lists the topics of specs.
func specTopics(specs []workload.Spec) []string {
	var topics []string
	for _, s := range specs {
		topics = append(topics, s.Topic)
	}
	return topics
}
