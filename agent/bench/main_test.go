package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// Shape of the benchmark data, shared by every benchmark.
const (
	partitions = 6
	valueSize  = 1024
)

// MB is the unit figures are printed in (10^6 bytes, as MB/s is usually
// meant for throughput).
const MB = 1e6

// env is the pair of embedded clusters the in-process benchmarks share.
type env struct {
	src, dst         *devcluster.Cluster // nil for clusters of other processes
	srcBoot, dstBoot []string
	srcCl, dstCl     *kgo.Client
	srcAdm, dstAdm   *kadm.Client
}

// segments makes kfake roll segments at 16 MiB instead of 100 MiB. Without a
// data directory kfake keeps each segment in one growing []byte that doubles
// its capacity; near 100 MiB every partition of a topic copies and clears
// 64-128 MiB at about the same moment, stalling the cluster's one goroutine
// for hundreds of milliseconds and making runs unrepeatable.
var segments = devcluster.BrokerConfigs(map[string]string{"log.segment.bytes": strconv.Itoa(16 << 20)})

var (
	envOnce sync.Once
	envVal  *env
	envErr  error
)

// clusters starts the shared clusters on first use: one broker each (kfake
// handles every request of a cluster on one goroutine, so more brokers add
// no parallelism), lenient.
func clusters(b *testing.B) *env {
	b.Helper()
	envOnce.Do(func() {
		e := &env{}
		if e.src, envErr = devcluster.Start(devcluster.Name("src"), devcluster.Lenient(), segments); envErr != nil {
			return
		}
		if e.dst, envErr = devcluster.Start(devcluster.Name("dst"), devcluster.Lenient(), segments); envErr != nil {
			return
		}
		e.srcBoot, e.dstBoot = e.src.Bootstrap(), e.dst.Bootstrap()
		// The harness polls topics the agent creates: a short metadata
		// age keeps kgo from answering "unknown topic" from its cache for
		// seconds after the topic appears.
		if e.srcCl, envErr = kgo.NewClient(kgo.SeedBrokers(e.srcBoot...), kgo.MetadataMinAge(20*time.Millisecond)); envErr != nil {
			return
		}
		if e.dstCl, envErr = kgo.NewClient(kgo.SeedBrokers(e.dstBoot...), kgo.MetadataMinAge(20*time.Millisecond)); envErr != nil {
			return
		}
		e.srcAdm, e.dstAdm = kadm.NewClient(e.srcCl), kadm.NewClient(e.dstCl)
		envVal = e
	})
	if envErr != nil {
		b.Fatalf("starting the clusters: %v", envErr)
	}
	return envVal
}

// memoryMode is the GODEBUG setting `make bench` runs the benchmarks with.
// kfake allocates about ten bytes per byte it moves, and with the Go
// runtime's default (MADV_DONTNEED) the memory freed when a contender's
// destination topic is deleted goes back to the kernel and is faulted in
// again, zero-filled, by the next contender: on this 2-core machine that
// made the same contender's throughput vary 2-3x from run to run. With
// MADV_FREE the pages stay mapped while the machine has memory to spare.
// Processes the benchmarks start (the agent whose RSS is measured, clusters)
// run with the default.
const memoryMode = "madvdontneed=0"

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" && !strings.Contains(os.Getenv("GODEBUG"), memoryMode) {
		fmt.Printf("note: GODEBUG=%s is not set (make bench sets it): throughput figures will vary more from run to run\n", memoryMode)
	}
	code := m.Run()
	if envVal != nil {
		envVal.srcCl.Close()
		envVal.dstCl.Close()
		envVal.src.Close()
		envVal.dst.Close()
	}
	os.Exit(code)
}

// figure prints one labelled result line on stdout, where `make bench` shows
// it between the benchmark lines.
func figure(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}

// goal formats "goal ≥ g: met" or "not met".
func goal(v, g float64) string {
	if v >= g {
		return fmt.Sprintf("goal ≥ %g: met", g)
	}
	return fmt.Sprintf("goal ≥ %g: NOT met", g)
}

// createTopic creates topic with the benchmark's partition count, deleting
// any leftover of the same name first.
func createTopic(ctx context.Context, adm *kadm.Client, topic string, parts int32, configs map[string]*string) error {
	if err := deleteTopic(ctx, adm, topic); err != nil {
		return err
	}
	resp, err := adm.CreateTopic(ctx, parts, 1, configs, topic)
	if err != nil {
		return fmt.Errorf("creating %s: %w", topic, err)
	}
	if resp.Err != nil {
		return fmt.Errorf("creating %s: %w", topic, resp.Err)
	}
	return nil
}

// deleteTopic deletes topic if it exists, releasing what kfake holds for it.
func deleteTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	resp, err := adm.DeleteTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("deleting %s: %w", topic, err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("deleting %s: %w", topic, r.Err)
		}
	}
	return nil
}

// endOffsets returns the high watermark of every partition of topic.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	lo, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var ferr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
		}
		out[o.Partition] = o.Offset
	})
	return out, ferr
}

// storedBytes is the size of topic's log on a cluster (kfake counts the
// batch bytes it holds), summed over partitions.
func storedBytes(ctx context.Context, adm *kadm.Client, topic string, parts int32) (int64, error) {
	set := kadm.TopicsSet{}
	set.Add(topic, func() []int32 {
		ps := make([]int32, parts)
		for i := range ps {
			ps[i] = int32(i)
		}
		return ps
	}()...)
	dirs, err := adm.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return 0, err
	}
	var n int64
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) { n += p.Size })
	})
	return n, nil
}

// startAgent runs an in-process coordinator (the agent minus its HTTP API)
// mirroring topics from src into dst, with its own state topic and filler
// method ("" for the default).
func startAgent(ctx context.Context, e *env, stateTopic string, fillers partition.FillerMethod, topics ...string) (*coordinator.Coordinator, func(), error) {
	co, err := coordinator.New(ctx, coordinator.Config{
		Destination: []kgo.Opt{kgo.SeedBrokers(e.dstBoot...)},
		StateTopic:  stateTopic,
		Fillers:     fillers,
		Logger:      hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Error, Output: os.Stderr}),
	})
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = co.Run(rctx); close(done) }()
	if err := co.Apply(ctx, mirrorspec.Spec{Name: "bench", Source: mirrorspec.Source{BootstrapServers: e.srcBoot}, Topics: topics}); err != nil {
		cancel()
		<-done
		co.Close()
		return nil, nil, err
	}
	return co, func() { cancel(); <-done; co.Close() }, nil
}

// mirrored returns the destination offset summed over the partitions of
// topic, and whether any partition failed.
func mirrored(co *coordinator.Coordinator, topic string) (int64, error) {
	var n int64
	for _, m := range co.Describe() {
		if m.Error != "" {
			return 0, fmt.Errorf("mirror %s: %s", m.Name, m.Error)
		}
		for _, t := range m.Topics {
			if t.Name != topic {
				continue
			}
			if t.Error != "" {
				return 0, fmt.Errorf("mirror topic %s: %s", t.Name, t.Error)
			}
			for _, p := range t.Partitions {
				if p.State == partition.Failed {
					return 0, fmt.Errorf("partition %s/%d failed: %s", t.Name, p.Partition, p.Reason)
				}
				n += p.DestinationOffset
			}
		}
	}
	return n, nil
}

// profile writes a CPU profile of fn to $KMIRROR_BENCH_PROFILE/name.pprof
// when that variable names a directory; otherwise it only runs fn.
func profile(name string, fn func() error) error {
	dir := os.Getenv("KMIRROR_BENCH_PROFILE")
	if dir == "" {
		return fn()
	}
	f, err := os.Create(dir + "/" + strings.ReplaceAll(name, "/", "_") + ".pprof")
	if err != nil {
		return err
	}
	defer f.Close()
	if os.Getenv("KMIRROR_BENCH_TRACE") != "" {
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
		return fn()
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return fn()
}

// waitFor polls cond every interval until it is true, it fails, or ctx ends.
func waitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
