package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestCompacted mirrors a compacted source after kfake's cleaner removed
// superseded records, leaving holes between and inside batches (partially
// kept batches are rewritten with offset gaps): every hole must be an
// invisible destination offset, with each filler method, and a filler must
// never reach a consumer.
func TestCompacted(t *testing.T) {
	for _, method := range []partition.FillerMethod{partition.FillCoordinator, partition.FillMarkers} {
		t.Run(string(method), func(t *testing.T) {
			const topic = "profiles"
			p := newPair(t, pairOpts{})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			resp, err := p.srcAdm.CreateTopic(ctx, 2, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatal(err)
			}
			// Few keys and small chunks: the cleaner keeps about one record
			// in ten, from many batches.
			if _, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{Topic: topic, Partitions: 2, Records: 4000, Keys: 400,
				Seed: 7, Codecs: workload.AllCodecs, ChunkRecords: 50, Headers: true}); err != nil {
				t.Fatal(err)
			}
			before := ends(t, p.srcAdm, topic)
			p.src.Kfake().Compact()
			// The tail keeps growing after compaction, so the mirror sees
			// holes in the middle of the log and dense data at its end.
			if _, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{Topic: topic, Partitions: 2, Records: 400, Keys: 400,
				Seed: 8, Codecs: []string{workload.CodecZstd}, ChunkRecords: 20}); err != nil {
				t.Fatal(err)
			}
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
			p.assertIdentical(t, topic, identityOpts{})
			// Fillers are invisible: a consumer reads exactly the source's
			// visible records on the destination.
			if got := countVisible(ctx, t, p.dstCl, topic); got != visible {
				t.Fatalf("destination consumers see %d records, source consumers %d", got, visible)
			}
		})
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
