package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/internal/recordbatch"
)

// padOffsets is where the source log of the padding benchmark starts, in
// every partition; KMIRROR_BENCH_PAD overrides it. Padding records take
// about 0.54 bytes each on the destination (zstd batches of 65536 empty
// records; 8.6 bytes uncompressed before) and the destination holds them in
// memory until the final DeleteRecords: 6 × 500M offsets take about 1.6 GB.
const padOffsets = 500_000_000

// BenchmarkPad measures how fast the agent aligns a new mirror topic whose
// source log starts far above 0: each source partition gets N tiny records,
// DeleteRecords(N) then moves its log start to N (kfake cannot move it past
// the high watermark), and the clock runs from the moment the mirror is
// applied until every destination partition starts at N, padded and cut by
// the agent.
func BenchmarkPad(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := clusters(b)
	n := int64(padOffsets)
	if v, err := strconv.ParseInt(os.Getenv("KMIRROR_BENCH_PAD"), 10, 64); err == nil && v > 0 {
		n = v
	}
	const topic = "pad"
	if err := createTopic(ctx, e.srcAdm, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	if err := deleteTopic(ctx, e.dstAdm, topic); err != nil {
		b.Fatal(err)
	}
	if err := fillEmpty(ctx, e, topic, n); err != nil {
		b.Fatal(err)
	}
	del := kadm.Offsets{}
	for p := int32(0); p < partitions; p++ {
		del.Add(kadm.Offset{Topic: topic, Partition: p, At: n})
	}
	dr, err := e.srcAdm.DeleteRecords(ctx, del)
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		b.Fatalf("moving the source log start: %v", err)
	}

	start := time.Now()
	_, stop, err := startAgent(ctx, e, "__kmirror_state_pad", "", topic)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	padded := map[int32]padSample{}
	err = waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		so, err := e.dstAdm.ListStartOffsets(ctx, topic)
		if err != nil {
			return false, nil // the agent has not created the topic yet
		}
		done := 0
		so.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset == n {
				done++
			}
		})
		samplePadBytes(ctx, e, topic, so, padded)
		return done == partitions, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	rate := float64(n*partitions) / elapsed.Seconds()
	figure("pad rate: %.2f M offsets/s (%d partitions aligned to log start %d in %.1fs, %.2f M offsets/s per partition; from applying the mirror to every destination log start at %d)",
		rate/1e6, partitions, n, elapsed.Seconds(), rate/partitions/1e6, n)
	b.ReportMetric(rate, "pad-offsets/s")
	var bytes, offsets int64
	for _, p := range padded {
		bytes, offsets = bytes+p.bytes, offsets+p.offsets
	}
	if offsets > 0 {
		perOffset := float64(bytes) / float64(offsets)
		figure("pad size: %.3f bytes per pad offset on the destination (%d bytes for %d offsets, the last sample of each partition before its DeleteRecords)",
			perOffset, bytes, offsets)
		b.ReportMetric(perOffset, "pad-bytes/offset")
	}
	_ = deleteTopic(ctx, e.srcAdm, topic)
	_ = deleteTopic(ctx, e.dstAdm, topic)
}

// padSample is a destination partition's log size and its offsets while
// padding, before DeleteRecords cut them.
type padSample struct{ bytes, offsets int64 }

// samplePadBytes records in padded the size and end offset of every
// partition of topic whose destination log still starts at 0 (start holds
// the start offsets just listed), keeping the latest sample of each.
func samplePadBytes(ctx context.Context, e *env, topic string, start kadm.ListedOffsets, padded map[int32]padSample) {
	ends, err := e.dstAdm.ListEndOffsets(ctx, topic)
	if err != nil {
		return
	}
	dirs, err := e.dstAdm.DescribeAllLogDirs(ctx, nil) // all topics: a set without partitions asks for none
	if err != nil {
		return
	}
	sizes := map[int32]int64{}
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic {
				sizes[p.Partition] += p.Size
			}
		})
	})
	ends.Each(func(o kadm.ListedOffset) {
		s, ok := start.Lookup(topic, o.Partition)
		if o.Err != nil || !ok || s.Err != nil || s.Offset != 0 || o.Offset == 0 || sizes[o.Partition] == 0 {
			return
		}
		padded[o.Partition] = padSample{bytes: sizes[o.Partition], offsets: o.Offset}
	})
}

// fillEmpty appends n empty records to every partition of topic, in large
// zstd batches produced raw (fast: nothing to compress but the framing).
func fillEmpty(ctx context.Context, e *env, topic string, n int64) error {
	const per = 50_000
	md, err := e.srcAdm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	t := md.Topics[topic]
	now := time.Now().UnixMilli()
	batch := func(k int) ([]byte, error) {
		recs := make([]recordbatch.Record, k)
		for i := range recs {
			recs[i] = recordbatch.Record{Offset: int64(i), Timestamp: now}
		}
		return recordbatch.Build(recordbatch.CodecZstd, 0, 0, now, -1, -1, -1, recs)
	}
	full, err := batch(per)
	if err != nil {
		return err
	}
	for done := int64(0); done < n; {
		k := min(int64(per), n-done)
		b := full
		if k < per {
			if b, err = batch(int(k)); err != nil {
				return err
			}
		}
		if err := e.produceRaw(ctx, topic, t, b); err != nil {
			return err
		}
		done += k
	}
	return nil
}
