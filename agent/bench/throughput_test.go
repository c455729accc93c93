package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/workload"
)

// throughputMB is the source payload (keys and values) each contender
// copies, in MB; KMIRROR_BENCH_MB overrides it.
const throughputMB = 2000

// warmFraction of each copy is excluded from the measurement: the clock
// starts when a contender has written that share of the offsets (its
// connections, goroutines, buffers and the Go heap are then warm) and stops
// when it has written them all.
const warmFraction = 0.1

// result is one contender's measured run.
type result struct {
	name    string
	records int64         // offsets written inside the window
	bytes   float64       // source batch bytes inside the window
	elapsed time.Duration // the window
	cpu     time.Duration // process CPU time (user+system) inside the window
	// dstCPU is the destination brokers' CPU time inside the window, when
	// the watch could read it (watch.dstCPU).
	dstCPU time.Duration
	alloc  uint64 // bytes allocated by the process inside the window
}

func (r result) mbps() float64  { return r.bytes / r.elapsed.Seconds() / MB }
func (r result) cores() float64 { return r.cpu.Seconds() / r.elapsed.Seconds() }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure watches a contender of this process copying total offsets whose
// batches hold stored bytes on the source, and times the window from
// warmFraction of the offsets written to all of them.
func measure(ctx context.Context, name string, total, stored int64, progress func() (int64, error), done <-chan error) (result, error) {
	return watch{name: name, total: total, stored: stored, progress: progress, done: done}.measure(ctx)
}

// watch is how a contender is measured.
type watch struct {
	name          string
	total, stored int64                 // offsets to copy, and their batch bytes on the source
	progress      func() (int64, error) // offsets copied so far
	done          <-chan error          // nil, or the contender's end: nil when done, else its error
	// cpu is the contender's CPU clock; nil is this process's.
	cpu func() (time.Duration, error)
	// dstCPU, when not nil, is the destination brokers' CPU clock: the
	// work a contender's writes cost the cluster.
	dstCPU func() (time.Duration, error)
	// every is how often progress is read; 0 is 2 ms. A contender of its
	// own process answers over the network, and is read less often so
	// that the reading does not cost it CPU.
	every time.Duration
	// limit, when not 0, ends the window after that long even if the
	// copy goes on: a rate measured over part of a long copy, so that a
	// slow contender does not hold a benchmark up for many minutes.
	limit time.Duration
}

func (w watch) measure(ctx context.Context) (result, error) {
	warm := int64(float64(w.total) * warmFraction)
	every, cpu, dstCPU := w.every, w.cpu, w.dstCPU
	if every == 0 {
		every = 2 * time.Millisecond
	}
	if cpu == nil {
		cpu = func() (time.Duration, error) { return cpuTime(), nil }
	}
	if dstCPU == nil {
		dstCPU = func() (time.Duration, error) { return 0, nil }
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var (
		t0, t1     time.Time
		p0, p1     int64
		cpu0, cpu1 time.Duration
		dst0, dst1 time.Duration
		ms         runtime.MemStats
		alloc0     uint64
		done       = w.done
	)
	for {
		finished := false
		select {
		case <-ctx.Done():
			return result{}, fmt.Errorf("%s: %w", w.name, ctx.Err())
		case err := <-done:
			if err != nil {
				return result{}, fmt.Errorf("%s: %w", w.name, err)
			}
			done, finished = nil, true
		case <-tick.C:
		}
		n, err := w.progress()
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", w.name, err)
		}
		now := time.Now()
		if t0.IsZero() && n >= warm {
			if cpu0, err = cpu(); err != nil {
				return result{}, fmt.Errorf("%s: reading its CPU time: %w", w.name, err)
			}
			if dst0, err = dstCPU(); err != nil {
				return result{}, fmt.Errorf("%s: reading the destination's CPU time: %w", w.name, err)
			}
			t0, p0 = now, n
			runtime.ReadMemStats(&ms)
			alloc0 = ms.TotalAlloc
		}
		if n >= w.total || (w.limit > 0 && !t0.IsZero() && now.Sub(t0) >= w.limit) {
			if cpu1, err = cpu(); err != nil {
				return result{}, fmt.Errorf("%s: reading its CPU time: %w", w.name, err)
			}
			if dst1, err = dstCPU(); err != nil {
				return result{}, fmt.Errorf("%s: reading the destination's CPU time: %w", w.name, err)
			}
			t1, p1 = now, min(n, w.total)
			runtime.ReadMemStats(&ms)
			break
		}
		if finished {
			return result{}, fmt.Errorf("%s stopped after %d of %d offsets", w.name, n, w.total)
		}
	}
	r := result{name: w.name, records: p1 - p0, elapsed: t1.Sub(t0), cpu: cpu1 - cpu0, dstCPU: dst1 - dst0, alloc: ms.TotalAlloc - alloc0}
	r.bytes = float64(w.stored) * float64(r.records) / float64(w.total)
	return r, nil
}

// source is the topic every contender copies.
type source struct {
	topic  string
	ends   map[int32]int64
	total  int64 // offsets
	stored int64 // batch bytes
	spec   workload.Stats
}

func (s source) batches() int {
	n := 0
	for _, v := range s.spec.Batches {
		n += v
	}
	return n
}

func produceSource(ctx context.Context, b *testing.B, e *env, topic string, mb int) source {
	b.Helper()
	if err := createTopic(ctx, e.srcAdm, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	st, err := workload.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(e.srcBoot...)}, workload.Spec{
		Topic: topic, Partitions: partitions, Records: mb * int(MB) / valueSize, ValueSize: valueSize,
		Codecs: []string{workload.CodecZstd}, Seed: 1,
	})
	if err != nil {
		b.Fatal(err)
	}
	s := e.describeSource(ctx, b, topic)
	s.spec = st
	return s
}

// describeSource reads the end offsets and the stored bytes of topic, a
// source of benchmarks' partitions count.
func (e *env) describeSource(ctx context.Context, b *testing.B, topic string) source {
	b.Helper()
	ends, err := endOffsets(ctx, e.srcAdm, topic)
	if err != nil {
		b.Fatal(err)
	}
	s := source{topic: topic, ends: ends}
	for _, o := range ends {
		s.total += o
	}
	if s.stored, err = storedBytes(ctx, e.srcAdm, topic, partitions); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchMB() int {
	if v, err := strconv.Atoi(os.Getenv("KMIRROR_BENCH_MB")); err == nil && v > 0 {
		return v
	}
	return throughputMB
}

// BenchmarkThroughput copies one source topic with each contender in turn,
// each to a fresh destination topic on the same clusters: the agent
// (in-process coordinator), the bare copy loop, and the re-encoding
// pipeline. After one unmeasured copy by each, the agent and the copy loop
// run three times each, interleaved
// (mirror, copy loop, re-encode, copy loop, mirror, mirror, copy loop) so
// that drift over the run (heap growth, kfake state) weighs on both alike;
// their figures are the medians of their runs.
func BenchmarkThroughput(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := clusters(b)
	mb := benchMB()
	start := time.Now()
	src := produceSource(ctx, b, e, "bench", mb)
	figure("throughput source: %d MB of 1 KiB values (%d records, %d partitions, zstd by kgo), %.1f MB of batches (%d) on the source, produced in %.1fs",
		mb, src.total, partitions, float64(src.stored)/MB, src.batches(), time.Since(start).Seconds())

	runMirror := func(run int) result { return runMirrorOnce(ctx, b, e, src, fmt.Sprintf("bench-%d", run)) }
	type starter func(context.Context, *env, string, string, map[int32]int64) (func() (int64, error), <-chan error, error)
	runOther := func(name, to string, run int, start starter) result {
		if err := createTopic(ctx, e.dstAdm, to, partitions, nil); err != nil {
			b.Fatal(err)
		}
		var r result
		err := profile(fmt.Sprintf("%s-%d", name, run), func() error {
			progress, done, err := start(ctx, e, src.topic, to, src.ends)
			if err != nil {
				return err
			}
			r, err = measure(ctx, name, src.total, src.stored, progress, done)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := deleteTopic(ctx, e.dstAdm, to); err != nil {
			b.Fatal(err)
		}
		return r
	}

	// Warm-up: one unmeasured copy by each, which also brings the heap to
	// the size it keeps for the measured runs.
	runMirror(0)
	runOther("copy-loop", "bench-copy", 0, copyLoop)

	var mirrors, copies []result
	mirrors = append(mirrors, runMirror(1))
	copies = append(copies, runOther("copy-loop", "bench-copy", 1, copyLoop))
	re := runOther("re-encode", "bench-reencode", 1, reencode)
	copies = append(copies, runOther("copy-loop", "bench-copy", 2, copyLoop))
	mirrors = append(mirrors, runMirror(2), runMirror(3))
	copies = append(copies, runOther("copy-loop", "bench-copy", 3, copyLoop))

	for _, r := range append(append(append([]result(nil), mirrors...), copies...), re) {
		figure("  run %-9s %6.1f MB/s over %.2fs (%d offsets), %.2f cores busy, %.1f B allocated per byte (whole process, kfake included)",
			r.name, r.mbps(), r.elapsed.Seconds(), r.records, r.cores(), float64(r.alloc)/r.bytes)
	}
	m, c := median(mirrors), median(copies)
	cr, rr := m/c, m/re.mbps()
	figure("mirror/copy-loop ratio: %.2f (mirror %.1f MB/s, copy-loop %.1f MB/s; medians of 3 runs, MB/s of source batches) %s", cr, m, c, goal(cr, 0.8))
	figure("mirror/re-encode ratio: %.2f (mirror %.1f MB/s, re-encode %.1f MB/s) %s", rr, m, re.mbps(), goal(rr, 2))
	b.ReportMetric(cr, "mirror/copy-loop")
	b.ReportMetric(rr, "mirror/re-encode")
	b.ReportMetric(m, "mirror-MB/s")
	b.ReportMetric(c, "copy-loop-MB/s")
	b.ReportMetric(re.mbps(), "re-encode-MB/s")
	if err := deleteTopic(ctx, e.srcAdm, src.topic); err != nil {
		b.Fatal(err)
	}
}

// runMirrorOnce mirrors src with a new in-process agent (its own state
// topic) into a fresh destination topic of the source's name.
func runMirrorOnce(ctx context.Context, b *testing.B, e *env, src source, run string) result {
	b.Helper()
	if err := deleteTopic(ctx, e.dstAdm, src.topic); err != nil {
		b.Fatal(err)
	}
	waitTopicGone(ctx, b, e, src.topic)
	var r result
	err := profile("mirror-"+run, func() error {
		co, stop, err := startAgent(ctx, e, "__kmirror_state_"+run, "", src.topic)
		if err != nil {
			return err
		}
		defer stop()
		r, err = measure(ctx, "mirror", src.total, src.stored, func() (int64, error) { return mirrored(co, src.topic) }, nil)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := deleteTopic(ctx, e.dstAdm, src.topic); err != nil {
		b.Fatal(err)
	}
	return r
}

func median(rs []result) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.mbps()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// waitTopicGone waits until the destination no longer lists topic.
func waitTopicGone(ctx context.Context, b *testing.B, e *env, topic string) {
	b.Helper()
	err := waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		td, err := e.dstAdm.ListTopics(ctx, topic)
		if err != nil {
			return false, err
		}
		return !td.Has(topic), nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
