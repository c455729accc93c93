package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/recordbatch"
	"github.com/kmirror/kmirror/internal/workload"
)

// backlogBytes is the size of the source log the agent catches up with.
const backlogBytes = 1 << 30

// BenchmarkBacklogRSS runs `kmirror agent` as a process of its own, with the
// default buffer (256 MiB), against a source topic already holding 1 GiB of
// zstd batches (6 partitions, 1 KiB values), and samples the agent's
// resident memory from /proc while it catches up. The clusters run in this
// process, in memory.
func BenchmarkBacklogRSS(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := clusters(b)
	const topic = "backlog"
	if err := createTopic(ctx, e.srcAdm, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	if err := deleteTopic(ctx, e.dstAdm, topic); err != nil {
		b.Fatal(err)
	}
	batches, err := fillBacklog(ctx, e, topic, backlogBytes)
	if err != nil {
		b.Fatal(err)
	}
	src := e.describeSource(ctx, b, topic)
	total, stored := src.total, src.stored

	p, api := agentProc(b, e.dstBoot, e.srcBoot, topic)
	defer p.stop()
	start := time.Now()
	cl := mirrorapi.NewClient(api, "")
	var (
		samples      int
		sumRSS, peak int64
		hwm          int64
		caughtUp     time.Duration
	)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for caughtUp == 0 {
		select {
		case <-ctx.Done():
			b.Fatalf("the agent did not catch up: %v", ctx.Err())
		case <-p.done:
			b.Fatalf("the agent exited: %s", p.stderr.String())
		case <-tick.C:
		}
		rss, h, err := memStatus(p.pid())
		if err != nil {
			b.Fatal(err)
		}
		samples++
		sumRSS += rss
		peak, hwm = max(peak, rss), h
		n, err := agentMirrored(ctx, cl, topic)
		if err != nil {
			b.Fatal(err)
		}
		if n >= total {
			caughtUp = time.Since(start)
		}
	}
	cpu, _ := cpuOf(p.pid())
	// Memory once the backlog is gone: what the agent keeps while idle.
	time.Sleep(2 * time.Second)
	idle, hwm2, err := memStatus(p.pid())
	if err != nil {
		b.Fatal(err)
	}
	hwm = max(hwm, hwm2)
	figure("agent RSS with a %.2f GiB backlog: peak %.0f MiB (VmHWM), mean %.0f MiB while catching up, %.0f MiB idle after (separate process, buffer_bytes default 256 MiB; caught up %d batches in %.1fs, %.1f MB/s, %.1f CPU-seconds)",
		float64(stored)/(1<<30), float64(hwm)/(1<<20), float64(sumRSS)/float64(samples)/(1<<20), float64(idle)/(1<<20),
		batches, caughtUp.Seconds(), float64(stored)/caughtUp.Seconds()/MB, cpu.Seconds())
	b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(stored)/caughtUp.Seconds()/MB, "catch-up-MB/s")
	p.stop()
	_ = deleteTopic(ctx, e.srcAdm, topic)
	_ = deleteTopic(ctx, e.dstAdm, topic)
}

// fillBacklog appends zstd batches of 1 KiB workload records to every
// partition of topic until it holds at least size bytes. One batch per
// partition is built and produced again and again (raw, without a
// producer id), which is much faster than producing records.
func fillBacklog(ctx context.Context, e *env, topic string, size int64) (int, error) {
	md, err := e.srcAdm.Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	t := md.Topics[topic]
	spec := workload.Spec{Topic: topic, Partitions: partitions, ValueSize: valueSize, Seed: 3}.WithDefaults()
	const perBatch = 170 // about what a kgo producer puts in one batch in BenchmarkThroughput
	now := time.Now().UnixMilli()
	recs := make([]recordbatch.Record, perBatch)
	for i := range recs {
		r := spec.Record(i)
		recs[i] = recordbatch.Record{Offset: int64(i), Timestamp: now, Key: r.Key, Value: r.Value}
	}
	batch, err := recordbatch.Build(recordbatch.CodecZstd, 0, 0, now, -1, -1, -1, recs)
	if err != nil {
		return 0, err
	}
	var n int
	for done := int64(0); done < size; done += int64(len(batch)) * partitions {
		if err := e.produceRaw(ctx, topic, t, batch); err != nil {
			return n, err
		}
		n += partitions
	}
	return n, nil
}

// produceRaw appends batch, a record batch with base offset 0 and no
// producer id, to every partition of topic (t, all led by one broker) in
// one produce request.
func (e *env) produceRaw(ctx context.Context, topic string, t kadm.TopicDetail, batch []byte) error {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, t.ID
	for p := int32(0); p < int32(len(t.Partitions)); p++ {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	kresp, err := e.srcCl.Broker(int(t.Partitions[0].Leader)).Request(ctx, req)
	if err != nil {
		return err
	}
	for _, rp := range kresp.(*kmsg.ProduceResponse).Topics[0].Partitions {
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			return fmt.Errorf("filling %s/%d: %w", topic, rp.Partition, err)
		}
	}
	return nil
}
