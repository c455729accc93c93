package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/workload"
)

// Latency at a steady rate: latencyRate bytes of values a second, measured
// for latencyFor after latencyWarm.
const (
	latencyRate = 10 * MB
	latencyWarm = 3 * time.Second
	latencyFor  = 15 * time.Second
)

// BenchmarkLatency produces 1 KiB records at a steady 10 MB/s to a source
// topic (6 partitions, zstd) while the agent mirrors it, and measures, for
// every record, the time from the producer's Produce call (the record's
// timestamp, which the client sets then, in milliseconds) to when a
// consumer of the destination receives it. A consumer of the source measures
// the same up to the source, so that what the mirror adds shows.
func BenchmarkLatency(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := clusters(b)
	const topic = "latency"
	if err := createTopic(ctx, e.srcAdm, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	if err := deleteTopic(ctx, e.dstAdm, topic); err != nil {
		b.Fatal(err)
	}
	_, stop, err := startAgent(ctx, e, "__kmirror_state_latency", "", topic)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	// Start the clock once the agent has created the destination topic, so
	// that the destination consumer finds it at once.
	err = waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		td, err := e.dstAdm.ListTopics(ctx, topic)
		return err == nil && td.Has(topic), nil
	})
	if err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	from, until := start.Add(latencyWarm), start.Add(latencyWarm+latencyFor)
	var wg sync.WaitGroup
	type lat struct {
		ds   []time.Duration
		seen map[int64]time.Time // partition<<48 | offset: when it was received
		err  error
	}
	src, dst := lat{seen: map[int64]time.Time{}}, lat{seen: map[int64]time.Time{}}
	consume := func(boot []string, out *lat) {
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(boot...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second))
		if err != nil {
			out.err = err
			return
		}
		defer cl.Close()
		cctx, ccancel := context.WithDeadline(ctx, until.Add(2*time.Second))
		defer ccancel()
		for {
			fs := cl.PollFetches(cctx)
			if cctx.Err() != nil {
				return
			}
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Timestamp.After(from) && r.Timestamp.Before(until) {
					out.ds = append(out.ds, now.Sub(r.Timestamp))
					out.seen[int64(r.Partition)<<48|r.Offset] = now
				}
			})
		}
	}
	wg.Add(2)
	go consume(e.srcBoot, &src)
	go consume(e.dstBoot, &dst)

	pctx, pcancel := context.WithDeadline(ctx, until.Add(200*time.Millisecond))
	defer pcancel()
	p := workload.NewProducer([]kgo.Opt{kgo.SeedBrokers(e.srcBoot...)}, workload.Spec{
		Topic: topic, Partitions: partitions, ValueSize: valueSize, Codecs: []string{workload.CodecZstd}, Seed: 2,
	}, int(latencyRate)/valueSize)
	st, err := p.Run(pctx)
	if err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	for _, l := range []*lat{&src, &dst} {
		if l.err != nil {
			b.Fatal(l.err)
		}
	}
	want := latencyFor.Seconds() * latencyRate / valueSize
	if float64(len(dst.ds)) < 0.9*want {
		b.Fatalf("the destination consumer saw %d records of the measured window, expected about %.0f", len(dst.ds), want)
	}
	// What the mirror adds: for each record, from when the source
	// consumer received it to when the destination consumer did.
	var added []time.Duration
	for k, t := range dst.seen {
		if s, ok := src.seen[k]; ok {
			added = append(added, t.Sub(s))
		}
	}
	ap50, ap99 := quantile(added, 0.5), quantile(added, 0.99)
	sp50, sp99 := quantile(src.ds, 0.5), quantile(src.ds, 0.99)
	dp50, dp99 := quantile(dst.ds, 0.5), quantile(dst.ds, 0.99)
	rate := float64(st.Bytes) / st.Elapsed.Seconds() / MB
	figure("produce-to-visible latency at %.1f MB/s: p50 %s, p99 %s on the destination (on the source: p50 %s, p99 %s; from the producer's Produce call, kgo defaults (10 ms linger); %d records over %s after %s warm-up)",
		rate, ms(dp50), ms(dp99), ms(sp50), ms(sp99), len(dst.ds), latencyFor, latencyWarm)
	figure("latency added by the mirror (visible on the source → visible on the destination, per record): p50 %s, p99 %s", ms(ap50), ms(ap99))
	b.ReportMetric(float64(dp50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(dp99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(ap50.Microseconds())/1000, "added-p50-ms")
	b.ReportMetric(float64(ap99.Microseconds())/1000, "added-p99-ms")
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
