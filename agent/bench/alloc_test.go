package bench

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// allocMB is the source payload of the allocation benchmark.
const allocMB = 500

// BenchmarkAlloc measures what the agent allocates per byte it mirrors: the
// agent runs in this process and both clusters in processes of their own
// (`kmirror dev-cluster --lenient`), so that runtime.MemStats.TotalAlloc
// counts the agent (and this benchmark's polling of Describe) and not
// kfake. The first tenth of the copy is excluded, as in
// BenchmarkThroughput. It also reports the CPU time the agent spends per
// gigabyte, the cost that remains when the brokers are real machines.
func BenchmarkAlloc(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sp, srcBoot := devClusterProc(b, "src-alloc")
	defer sp.stop()
	dp, dstBoot := devClusterProc(b, "dst-alloc")
	defer dp.stop()
	srcCl, err := kgo.NewClient(kgo.SeedBrokers(srcBoot))
	if err != nil {
		b.Fatal(err)
	}
	defer srcCl.Close()
	e := &env{srcCl: srcCl, srcAdm: kadm.NewClient(srcCl), srcBoot: []string{srcBoot}, dstBoot: []string{dstBoot}}
	src := produceSource(ctx, b, e, "alloc", allocMB)

	co, err := coordinator.New(ctx, coordinator.Config{
		Destination: []kgo.Opt{kgo.SeedBrokers(dstBoot)},
		Logger:      hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Error, Output: os.Stderr}),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer co.Close()
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = co.Run(rctx); close(done) }()
	defer func() { rcancel(); <-done }()
	runtime.GC()
	if err := co.Apply(ctx, mirrorspec.Spec{Name: "alloc", Source: mirrorspec.Source{BootstrapServers: []string{srcBoot}}, Topics: []string{src.topic}}); err != nil {
		b.Fatal(err)
	}
	var r result
	err = profile("alloc-mirror", func() error {
		var err error
		r, err = measure(ctx, "mirror", src.total, src.stored, func() (int64, error) { return mirrored(co, src.topic) }, nil)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	perByte := float64(r.alloc) / r.bytes
	coreSecPerGB := r.cpu.Seconds() / (r.bytes / 1e9)
	figure("bytes allocated per byte mirrored: %.3f (in-process agent, clusters in separate processes; %.1f MB allocated while mirroring %.1f MB of batches at %.1f MB/s)",
		perByte, float64(r.alloc)/MB, r.bytes/MB, r.mbps())
	figure("agent CPU per GB mirrored: %.2f core-seconds (user+system of the agent's process while mirroring; the clusters run elsewhere)", coreSecPerGB)
	b.ReportMetric(perByte, "alloc-B/B")
	b.ReportMetric(coreSecPerGB, "agent-core-s/GB")
}
