package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestTransactions mirrors a topic written by transactional producers (every
// fifth transaction aborted) interleaved with plain producers: committed
// records must be visible at both isolation levels, aborted ones only to
// read_uncommitted consumers, and every marker offset invisible, on the
// destination exactly as on the source.
func TestTransactions(t *testing.T) {
	const topic = "payments"
	p := newPair(t, pairOpts{srcBrokers: 3, topic: topic, partitions: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	specs := []workload.Spec{
		{Topic: topic, Partitions: 3, Records: 6000, Seed: 1, Codecs: workload.AllCodecs, ChunkRecords: 200,
			TransactionalID: "app-a", AbortEvery: 5, Headers: true, NullKeyEvery: 7},
		{Topic: topic, Partitions: 3, Records: 4000, Seed: 2, Codecs: []string{workload.CodecZstd, workload.CodecNone}, ChunkRecords: 150,
			TransactionalID: "app-b", AbortEvery: 3},
		{Topic: topic, Partitions: 3, Records: 3000, Seed: 3, Codecs: []string{workload.CodecLz4}, ChunkRecords: 100},
	}
	// Half of the data is written before the agent starts, half while it
	// runs, so both the backlog and the live path see transactions.
	produce := func(half int) {
		var wg sync.WaitGroup
		for _, s := range specs {
			s.Records /= 2
			s.Seed += int64(half) * 100
			if s.TransactionalID != "" {
				s.TransactionalID += string(rune('0' + half))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := workload.Produce(ctx, p.srcOpts(), s); err != nil {
					t.Errorf("producing %+v: %v", s, err)
				}
			}()
		}
		wg.Wait()
	}
	produce(0)
	spec := p.spec(topic)
	a := p.startAgent(t, agentOpts{apply: &spec})
	produce(1)
	if t.Failed() {
		t.FailNow()
	}
	p.waitMirrored(t, a, topic, 2*time.Minute)
	reports := p.assertIdentical(t, topic, identityOpts{})

	// librdkafka's read_committed consumer must see the same records on
	// both sides, fewer than read_uncommitted (some were aborted).
	var committed, all int
	for part, pr := range reports {
		read := func(bootstrap string) []verify.Record {
			recs, err := kcat.Read(ctx, bootstrap, topic, part, kcat.ReadCommitted, -1, -1)
			if err != nil {
				t.Fatalf("kcat read_committed p%d: %v", part, err)
			}
			return recs
		}
		src, dst := read(p.src.BootstrapString()), read(p.dst.BootstrapString())
		if len(src) != len(dst) {
			t.Fatalf("kcat read_committed p%d: %d source records, %d destination records", part, len(src), len(dst))
		}
		for i := range src {
			if !src[i].Equal(dst[i]) {
				t.Fatalf("kcat read_committed p%d: record %d differs: source %s, destination %s", part, i, src[i], dst[i])
			}
		}
		committed += len(src)
		all += int(pr.Compared)
	}
	if committed == 0 || committed >= all {
		t.Fatalf("read_committed saw %d of %d records: the workload should have aborted some", committed, all)
	}
	t.Logf("kcat read_committed: %d of %d records visible on both sides", committed, all)
}
