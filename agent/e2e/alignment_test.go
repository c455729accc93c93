package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/workload"
)

// produceBatches appends records from..to-1 of spec to one partition, one
// batch per group of size records, rotating codecs by group:
// with a minute of linger and a flush per group, each group is exactly one
// batch, so a test knows where the source's batch boundaries are.
func produceBatches(t *testing.T, p *pair, spec workload.Spec, part int32, from, to, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec = spec.WithDefaults()
	codecs := map[string]kgo.CompressionCodec{
		workload.CodecNone: kgo.NoCompression(), workload.CodecGzip: kgo.GzipCompression(), workload.CodecSnappy: kgo.SnappyCompression(),
		workload.CodecLz4: kgo.Lz4Compression(), workload.CodecZstd: kgo.ZstdCompression(),
	}
	var clients []*kgo.Client
	for _, name := range workload.AllCodecs {
		cl, err := kgo.NewClient(append(p.srcOpts(),
			kgo.ProducerBatchCompression(codecs[name]),
			kgo.ProducerLinger(time.Minute),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
		)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	for g, i := 0, from; i < to; g++ {
		end := min(to, i+size)
		cl := clients[g%len(clients)]
		for ; i < end; i++ {
			r := spec.Record(i)
			r.Partition = part
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					t.Errorf("producing to %s/%d: %v", r.Topic, r.Partition, err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// deleteRecords moves source log starts, as retention or an operator does.
func deleteRecords(t *testing.T, adm *kadm.Client, topic string, to map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := kadm.Offsets{}
	for part, off := range to {
		o.AddOffset(topic, part, off, -1)
	}
	resp, err := adm.DeleteRecords(ctx, o)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("DeleteRecords %v on %s: %v", to, topic, err)
	}
}

// logStarts returns the log start per partition.
func logStarts(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := listBounds(ctx, adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for part, v := range b {
		out[part] = v[0]
	}
	return out
}

// checkLoss checks what Describe says of records lost to source retention.
func checkLoss(t *testing.T, a *agent, topic string, want map[int32]int64) {
	t.Helper()
	for part, st := range a.partitions(topic) {
		w := want[part]
		if st.LostRecords != w {
			t.Errorf("p%d: Describe reports %d lost records, want %d (reason %q)", part, st.LostRecords, w, st.Reason)
		}
		if w > 0 && !strings.Contains(st.Reason, "retention") {
			t.Errorf("p%d: lost %d records, reason %q does not say why", part, st.LostRecords, st.Reason)
		}
		if w == 0 && st.Reason != "" {
			t.Errorf("p%d: no record lost, reason %q", part, st.Reason)
		}
	}
}

// TestAlignNewMirror mirrors a source topic whose log starts at 50,000: on
// p0 that offset starts a source batch, on p1 it falls in the middle of one
// (batch [49,500, 50,499]). The destination must start at 50,000 too, hold
// the same records at the same offsets, report no lost record, and keep the
// source's batches, but for the one re-encoded from 50,000.
func TestAlignNewMirror(t *testing.T) {
	forEngines(t, testAlignNewMirror)
}

func testAlignNewMirror(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "aligned", partitions: 2})
	topic := p.topic
	spec := workload.Spec{Topic: topic, Seed: 3, NullKeyEvery: 5, NullValueEvery: 9, Headers: true, ExplicitTimestamps: true}.WithDefaults()
	produceBatches(t, p, spec, 0, 0, 60_000, 1000)
	produceBatches(t, p, spec, 1, 0, 500, 500)
	produceBatches(t, p, spec, 1, 500, 60_000, 1000)
	// The layouts the cases need.
	b0 := rawBatches(t, p.srcCl, topic, 0, 50_000, 50_001)
	b1 := rawBatches(t, p.srcCl, topic, 1, 50_000, 50_001)
	if len(b0) != 1 || b0[0].Base != 50_000 || len(b1) != 1 || b1[0].Base != 49_500 || b1[0].Last != 50_499 {
		t.Fatalf("source batches at 50,000: p0 %+v, p1 %+v; want one starting there and one around it", b0, b1)
	}
	// The source log starts at 50,000, as retention or an operator
	// leaves it (DeleteRecords on Kafka too).
	deleteRecords(t, p.srcAdm, topic, map[int32]int64{0: 50_000, 1: 50_000})
	if s := logStarts(t, p.srcAdm, topic); s[0] != 50_000 || s[1] != 50_000 {
		t.Fatalf("source log starts %v after DeleteRecords, want 50000", s)
	}

	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, time.Minute)
	for part, s := range logStarts(t, p.dstAdm, topic) {
		if s != 50_000 {
			t.Errorf("p%d: destination log start %d, want 50000", part, s)
		}
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: 20_000})
	checkLoss(t, a, topic, nil)

	for part := range int32(2) {
		sb := rawBatches(t, p.srcCl, topic, part, 50_000, 60_000)
		db := rawBatches(t, p.dstCl, topic, part, 50_000, 60_000)
		if len(sb) != len(db) || len(sb) < 2 {
			t.Fatalf("p%d: %d source batches, %d destination batches from 50,000", part, len(sb), len(db))
		}
		first := 0
		if part == 1 {
			// The straddling batch is re-encoded from 50,000 with its codec.
			if db[0].Base != 50_000 || db[0].Last != sb[0].Last || db[0].Codec != sb[0].Codec || db[0].NumRecords != 500 {
				t.Errorf("p1: first destination batch %+v, want [50000, %d] of 500 records in %v", db[0], sb[0].Last, sb[0].Codec)
			}
			first = 1
		}
		if !slices.Equal(sb[first:], db[first:]) {
			t.Errorf("p%d: destination batches from 50,000 differ from the source's", part)
		}
	}
}

// TestAlignRetentionOvertakes: source retention removes records a mirror has
// not copied yet. The destination log start must move to the source's, the
// loss must be reported in Describe (count and reason) and stay reported
// after a restart, and what remains must be identical. Retention is
// imitated with DeleteRecords on the source, while the agent is stopped and
// while the topic is paused; TestAlignRetentionOvertakesRunning holds a
// running mirror back with a fault on the embedded engine.
func TestAlignRetentionOvertakes(t *testing.T) {
	forEngines(t, func(t *testing.T, e engine) {
		t.Run("agent stopped", func(t *testing.T) { overtakeStopped(t, e) })
		t.Run("topic paused", func(t *testing.T) { overtakePaused(t, e) })
	})
}

func overtakeStopped(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "overtaken", partitions: 2})
	topic := p.topic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := workload.Spec{Topic: topic, Partitions: 2, Records: 60_000, Seed: 4, Codecs: workload.AllCodecs, Headers: true, ExplicitTimestamps: true}
	if _, err := workload.Produce(ctx, p.srcOpts(), spec); err != nil {
		t.Fatal(err)
	}
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, time.Minute)
	a.stop()

	// 30,000 more records a partition while the agent is down, then
	// retention removes p0 below 50,000, past the destination's end
	// (30,000); p1 keeps its log.
	spec.Seed = 5
	if _, err := workload.Produce(ctx, p.srcOpts(), spec); err != nil {
		t.Fatal(err)
	}
	deleteRecords(t, p.srcAdm, topic, map[int32]int64{0: 50_000})

	a = p.startAgent(t, agentOpts{})
	p.waitMirrored(t, a, topic, time.Minute)
	if s := logStarts(t, p.dstAdm, topic); s[0] != 50_000 || s[1] != 0 {
		t.Errorf("destination log starts %v, want p0 at 50000 and p1 at 0", s)
	}
	checkLoss(t, a, topic, map[int32]int64{0: 20_000})
	p.assertIdentical(t, topic, identityOpts{wantRecords: 10_000 + 60_000})

	// The loss is still reported after a restart.
	a.stop()
	a = p.startAgent(t, agentOpts{})
	p.waitMirrored(t, a, topic, time.Minute)
	checkLoss(t, a, topic, map[int32]int64{0: 20_000})
}

// overtakePaused: the mirror lags because the topic is paused, while the
// agent runs; retention passes the destination end, and the resume aligns.
func overtakePaused(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "behind", partitions: 1})
	topic := p.topic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := workload.Spec{Topic: topic, Records: 10_000, Seed: 6, Codecs: workload.AllCodecs, Headers: true}
	if _, err := workload.Produce(ctx, p.srcOpts(), spec); err != nil {
		t.Fatal(err)
	}
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, time.Minute)
	if err := a.co.PauseTopics(ctx, mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	spec.Seed, spec.Records = 7, 20_000
	if _, err := workload.Produce(ctx, p.srcOpts(), spec); err != nil {
		t.Fatal(err)
	}
	deleteRecords(t, p.srcAdm, topic, map[int32]int64{0: 25_000})
	if end := ends(t, p.dstAdm, topic)[0]; end != 10_000 {
		t.Fatalf("destination end %d while paused, want 10000", end)
	}
	if err := a.co.ResumeTopics(ctx, mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	p.waitMirrored(t, a, topic, time.Minute)
	if s := logStarts(t, p.dstAdm, topic); s[0] != 25_000 {
		t.Errorf("destination log start %d, want 25000", s[0])
	}
	checkLoss(t, a, topic, map[int32]int64{0: 15_000})
	p.assertIdentical(t, topic, identityOpts{wantRecords: 5_000})

	// The loss is still reported after a restart.
	a.stop()
	a = p.startAgent(t, agentOpts{})
	p.waitMirrored(t, a, topic, time.Minute)
	checkLoss(t, a, topic, map[int32]int64{0: 15_000})
}

// TestAlignRetentionOvertakesRunning: the mirror runs but falls behind
// (every fetch of the topic fails, a kfake fault: embedded only; the real
// brokers' counterpart is the paused case of TestAlignRetentionOvertakes)
// while retention passes its end; once fetches work again it aligns.
func TestAlignRetentionOvertakesRunning(t *testing.T) {
	const topic = "behind"
	p := newPair(t, pairOpts{topic: topic, partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := workload.Spec{Topic: topic, Records: 10_000, Seed: 6, Codecs: workload.AllCodecs, Headers: true}
	if _, err := workload.Produce(ctx, p.srcOpts(), spec); err != nil {
		t.Fatal(err)
	}
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	p.waitMirrored(t, a, topic, time.Minute)

	// Hold the mirror back: every fetch of the topic fails. Once one
	// has, nothing more is copied.
	h := p.src.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1})
	e := faultEnv{t: t, p: p, a: a, topic: topic}
	e.waitHits(h, 1)
	spec.Seed, spec.Records = 7, 20_000
	if _, err := workload.Produce(ctx, p.srcOpts(), spec); err != nil {
		t.Fatal(err)
	}
	deleteRecords(t, p.srcAdm, topic, map[int32]int64{0: 25_000})
	if end := ends(t, p.dstAdm, topic)[0]; end != 10_000 {
		t.Fatalf("destination end %d while fetches fail, want 10000", end)
	}
	h.Remove()

	p.waitMirrored(t, a, topic, time.Minute)
	if s := logStarts(t, p.dstAdm, topic); s[0] != 25_000 {
		t.Errorf("destination log start %d, want 25000", s[0])
	}
	checkLoss(t, a, topic, map[int32]int64{0: 15_000})
	p.assertIdentical(t, topic, identityOpts{wantRecords: 5_000})
}
