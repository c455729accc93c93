package bench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/devcluster"
)

// Produce latency of the slow destination, and the source payload copied.
const (
	slowProduce = 5 * time.Millisecond
	slowMB      = 200
)

// BenchmarkSlowDestination repeats the throughput comparison against a
// destination that takes slowProduce to answer every Produce request, as
// acks=all does on a real cluster while followers replicate (kfake answers
// at once). kfake, like Kafka, handles one request at a time per
// connection, so the delay also serializes requests that share a
// connection. This is an extra scenario, not one of the goals: it shows the
// limit that kfake's instant acknowledgements hide.
func BenchmarkSlowDestination(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	shared := clusters(b)
	slow, err := devcluster.Start(devcluster.Name("dst-slow"), devcluster.Lenient(), segments)
	if err != nil {
		b.Fatal(err)
	}
	defer slow.Close()
	kc := slow.Kfake()
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		kc.SleepControl(func() { time.Sleep(slowProduce) })
		return nil, nil, false // then handled as usual
	})
	dcl, err := kgo.NewClient(kgo.SeedBrokers(slow.Bootstrap()...), kgo.MetadataMinAge(20*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer dcl.Close()
	e := &env{srcCl: shared.srcCl, srcAdm: shared.srcAdm, srcBoot: shared.srcBoot, dstCl: dcl, dstAdm: kadm.NewClient(dcl), dstBoot: slow.Bootstrap()}
	src := produceSource(ctx, b, e, "slow", slowMB)

	m := runMirrorOnce(ctx, b, e, src, "slow")
	run := func(name, to string, start func(context.Context, *env, string, string, map[int32]int64) (func() (int64, error), <-chan error, error)) result {
		if err := createTopic(ctx, e.dstAdm, to, partitions, nil); err != nil {
			b.Fatal(err)
		}
		progress, done, err := start(ctx, e, src.topic, to, src.ends)
		if err != nil {
			b.Fatal(err)
		}
		r, err := measure(ctx, name, src.total, src.stored, progress, done)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	c := run("copy-loop", "slow-copy", copyLoop)
	re := run("re-encode", "slow-reencode", reencode)
	figure("with %s destination produce latency (simulated acks=all replication; extra scenario, no goal): mirror %.1f MB/s, copy-loop %.1f MB/s, re-encode %.1f MB/s: mirror/re-encode %.2f, mirror/copy-loop %.2f (%.0f MB of batches)",
		slowProduce, m.mbps(), c.mbps(), re.mbps(), m.mbps()/re.mbps(), m.mbps()/c.mbps(), float64(src.stored)/MB)
	b.ReportMetric(m.mbps(), "mirror-MB/s")
	b.ReportMetric(m.mbps()/re.mbps(), "mirror/re-encode")
	_ = deleteTopic(ctx, e.srcAdm, src.topic)
}
