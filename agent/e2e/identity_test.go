package e2e

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestByteIdentity mirrors 100k records over 3 partitions, written through
// every codec with headers, null and empty keys and values, and explicit
// timestamps, and checks that every offset holds the same record on both
// sides, read by franz-go (verify, both isolation levels) and by librdkafka
// (kcat, both isolation levels), and that the destination holds the source's
// batches at the same offsets with the same codec and the same compressed
// bytes (only producer id, epoch, sequence, leader epoch and CRC differ).
func TestByteIdentity(t *testing.T) {
	forEngines(t, testByteIdentity)
}

func testByteIdentity(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{srcBrokers: 3, topic: "identity", partitions: 3})
	topic := p.topic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{
		Topic: topic, Partitions: 3, Records: 100_000, Seed: 1,
		Codecs:       workload.AllCodecs,
		NullKeyEvery: 7, EmptyKeyEvery: 11, NullValueEvery: 13, EmptyValueEvery: 17,
		Headers: true, ExplicitTimestamps: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range workload.AllCodecs {
		if st.Batches[c] == 0 {
			t.Fatalf("the workload wrote no %s batch (batches by codec: %v): the test would not cover it", c, st.Batches)
		}
	}

	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, time.Minute)
	p.assertIdentical(t, topic, identityOpts{
		kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted},
		wantRecords:    100_000,
	})

	// The batches themselves: same boundaries, codecs and compressed bytes.
	srcEnds := ends(t, p.srcAdm, topic)
	for part := int32(0); part < 3; part++ {
		sb := rawBatches(t, p.srcCl, topic, part, 0, srcEnds[part])
		db := rawBatches(t, p.dstCl, topic, part, 0, srcEnds[part])
		if len(sb) == 0 {
			t.Fatalf("p%d: no source batch", part)
		}
		if sc, dc := codecCounts(sb), codecCounts(db); !maps.Equal(sc, dc) {
			t.Errorf("p%d: source batches by codec %v, destination %v", part, sc, dc)
		}
		if !slices.Equal(sb, db) {
			for i := range min(len(sb), len(db)) {
				if sb[i] != db[i] {
					t.Fatalf("p%d: batch %d differs: source %+v, destination %+v", part, i, sb[i], db[i])
				}
			}
			t.Fatalf("p%d: %d source batches, %d destination batches", part, len(sb), len(db))
		}
	}
	for _, s := range a.partitions(topic) {
		if s.LostRecords != 0 || s.Records != srcEnds[s.Partition] {
			t.Errorf("p%d: Describe reports %d records mirrored and %d lost, want %d and 0", s.Partition, s.Records, s.LostRecords, srcEnds[s.Partition])
		}
	}
}
