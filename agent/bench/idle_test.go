package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/workload"
)

// idleMB is the backlog of the busy partitions in BenchmarkIdlePartition.
const idleMB = 1000

// BenchmarkIdlePartition is BenchmarkThroughput's comparison with one of the
// six source partitions idle (caught up, no new records) while the other
// five hold a backlog: the agent must not let the idle partition's long
// poll hold back the busy ones (before the fetcher capped that poll when
// partitions are held back by flow control, the busy ones were fetched at
// most once per 250 ms MaxWait, and the mirror ran at about a quarter of
// the copy loop's speed here).
func BenchmarkIdlePartition(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := clusters(b)
	const topic = "idle"
	if err := createTopic(ctx, e.srcAdm, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	st, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(e.srcBoot...)}, workload.Spec{
		Topic: topic, Partitions: partitions - 1, Records: idleMB * int(MB) / valueSize, ValueSize: valueSize,
		Codecs: []string{workload.CodecZstd}, Seed: 4,
	})
	if err != nil {
		b.Fatal(err)
	}
	src := e.describeSource(ctx, b, topic)
	src.spec = st
	var mirrors, copies []result
	for run := 1; run <= 3; run++ {
		mirrors = append(mirrors, runMirrorOnce(ctx, b, e, src, fmt.Sprintf("idle-%d", run)))
		if err := createTopic(ctx, e.dstAdm, "idle-copy", partitions, nil); err != nil {
			b.Fatal(err)
		}
		progress, done, err := copyLoop(ctx, e, topic, "idle-copy", src.ends)
		if err != nil {
			b.Fatal(err)
		}
		r, err := measure(ctx, "copy-loop", src.total, src.stored, progress, done)
		if err != nil {
			b.Fatal(err)
		}
		copies = append(copies, r)
		if err := deleteTopic(ctx, e.dstAdm, "idle-copy"); err != nil {
			b.Fatal(err)
		}
	}
	m, c := median(mirrors), median(copies)
	figure("mirror/copy-loop ratio with 1 of 6 partitions idle: %.2f (mirror %.1f MB/s, copy-loop %.1f MB/s; %.0f MB of batches in 5 partitions, medians of 3 runs)",
		m/c, m, c, float64(src.stored)/MB)
	b.ReportMetric(m/c, "mirror/copy-loop")
	_ = deleteTopic(ctx, e.srcAdm, topic)
}
