package e2e

// Mirror throttles (KIP-1279's mirror.replication.throttled.rate and
// .replicas) against a backlog: the mirrored byte rate while throttled,
// full speed once the throttle is lifted, without a restart; only the listed
// partitions held back; a restarted agent applying the persisted throttle.

import (
	"context"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/workload"
)

// throttleWindow is how long a throttled rate is measured, and
// throttleTolerance how far from the ceiling it may be.
const (
	throttleWindow    = 10 * time.Second
	throttleTolerance = 0.20
)

// produceBacklog writes records of valueSize bytes (uncompressed) to topic,
// spread over its partitions, before any mirror runs.
func produceBacklog(t *testing.T, p *pair, topic string, partitions int32, records, valueSize int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	st, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{Topic: topic, Partitions: partitions, Records: records, ValueSize: valueSize, Seed: 7})
	if err != nil {
		t.Fatalf("producing the backlog: %v", err)
	}
	t.Logf("backlog: %d records of %d bytes in %d partitions (%d bytes of batches), produced in %v", records, valueSize, partitions, st.Bytes, time.Since(start).Round(time.Millisecond))
}

// mirroredBytes returns the record batch bytes the agent wrote per
// partition of topic, as Describe counts them.
func mirroredBytes(a *agent, topic string) map[int32]int64 {
	out := map[int32]int64{}
	for part, st := range a.partitions(topic) {
		out[part] = st.Bytes
	}
	return out
}

func sumBytes(m map[int32]int64, parts ...int32) int64 {
	var n int64
	if len(parts) == 0 {
		for _, v := range m {
			n += v
		}
		return n
	}
	for _, p := range parts {
		n += m[p]
	}
	return n
}

// measureRate returns the bytes per second the agent mirrored for parts of
// topic (all when none) over window.
func measureRate(a *agent, topic string, window time.Duration, parts ...int32) float64 {
	before, t0 := sumBytes(mirroredBytes(a, topic), parts...), time.Now()
	time.Sleep(window)
	after, t1 := sumBytes(mirroredBytes(a, topic), parts...), time.Now()
	return float64(after-before) / t1.Sub(t0).Seconds()
}

// waitBytes polls until the agent has mirrored at least n bytes of parts of
// topic.
func waitBytes(t *testing.T, a *agent, topic string, n int64, timeout time.Duration, parts ...int32) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for sumBytes(mirroredBytes(a, topic), parts...) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than %d bytes mirrored within %v\nDescribe:\n%s", topic, n, timeout, a.describe())
		}
		time.Sleep(pollEvery)
	}
}

// startThrottled starts an agent whose mirror has throttle t before it has
// topics, so that not one fetch of topic escapes the throttle, and then
// adds topic.
func (p *pair) startThrottled(t *testing.T, th mirrorapi.Throttle, topic string) *agent {
	t.Helper()
	spec := p.spec()
	a := p.startAgent(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond})
	ctx := testCtx(t)
	if err := a.co.SetThrottle(ctx, mirrorName, th); err != nil {
		t.Fatal(err)
	}
	if err := a.co.AddTopics(ctx, mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestThrottle: a mirror throttled to 1 MiB/s moves 1 MiB/s ±20% over 10 s
// of a backlog, then at least five times as fast once the throttle is
// removed, without a restart.
func TestThrottle(t *testing.T) {
	const (
		topic = "throttled"
		rate  = 1 << 20
	)
	p := newPair(t, pairOpts{topic: topic, partitions: 4})
	produceBacklog(t, p, topic, 4, 40000, 1000) // about 40 MB
	a := p.startThrottled(t, mirrorapi.Throttle{RateBytesPerSecond: rate}, topic)

	// Past the start (topic creation, the first fetches), then one window.
	waitBytes(t, a, topic, rate/2, 30*time.Second)
	got := measureRate(a, topic, throttleWindow)
	t.Logf("throttled to %d B/s: mirrored %.0f B/s over %v (%.1f%% of the ceiling)", rate, got, throttleWindow, 100*got/rate)
	if got < rate*(1-throttleTolerance) || got > rate*(1+throttleTolerance) {
		t.Errorf("throttled rate %.0f B/s, want %d B/s ±%.0f%%", got, rate, 100*throttleTolerance)
	}
	m, _ := a.status()
	if m.Throttle == nil || m.Throttle.RateBytesPerSecond != rate {
		t.Errorf("describe shows throttle %+v", m.Throttle)
	}
	if m.Fetch.ThrottledMillis < 1000 {
		t.Errorf("describe says the throttle held partitions back for %d ms over a throttled backlog", m.Fetch.ThrottledMillis)
	}

	// Lifted: the rest of the backlog at full speed, same agent, same
	// fetch sessions.
	before, t0 := sumBytes(mirroredBytes(a, topic)), time.Now()
	if err := a.co.RemoveThrottle(testCtx(t), mirrorName); err != nil {
		t.Fatal(err)
	}
	p.waitMirrored(t, a, topic, 2*time.Minute)
	elapsed := time.Since(t0)
	full := float64(sumBytes(mirroredBytes(a, topic))-before) / elapsed.Seconds()
	t.Logf("throttle removed: %d bytes in %v, %.0f B/s (%.1fx the ceiling)", sumBytes(mirroredBytes(a, topic))-before, elapsed.Round(time.Millisecond), full, full/rate)
	if full < 5*rate {
		t.Errorf("after removal %.0f B/s, want at least 5x the throttled %d B/s", full, rate)
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: 40000})
}

// TestThrottlePartitions: a throttle on one partition holds back that
// partition only: the other catches up at full speed meanwhile. A restarted
// agent throttles the same partition at the same rate, from the state topic.
func TestThrottlePartitions(t *testing.T) {
	const (
		topic = "some"
		rate  = 512 << 10
	)
	p := newPair(t, pairOpts{topic: topic, partitions: 2})
	produceBacklog(t, p, topic, 2, 24000, 1000) // about 12 MB per partition
	a := p.startThrottled(t, mirrorapi.Throttle{RateBytesPerSecond: rate, Partitions: []string{topic + ":0"}}, topic)

	// Partition 1 is not throttled: all of it is mirrored while
	// partition 0 has moved a fraction.
	t0 := time.Now()
	p.waitMirroredParts(t, a, topic, []int32{1})
	free := time.Since(t0)
	b := mirroredBytes(a, topic)
	t.Logf("unthrottled partition 1: %d bytes in %v; throttled partition 0 meanwhile: %d bytes", b[1], free.Round(time.Millisecond), b[0])
	if b[0] >= b[1]/2 {
		t.Errorf("partition 0 mirrored %d bytes while partition 1 mirrored all of its %d: not held back", b[0], b[1])
	}
	got := measureRate(a, topic, throttleWindow, 0)
	t.Logf("partition 0 throttled to %d B/s: %.0f B/s over %v", rate, got, throttleWindow)
	if got < rate*(1-throttleTolerance) || got > rate*(1+throttleTolerance) {
		t.Errorf("throttled partition 0: %.0f B/s, want %d B/s ±%.0f%%", got, rate, 100*throttleTolerance)
	}

	// Restart: the throttle comes back from the state topic before the
	// first fetch.
	a.stop()
	a = p.startAgent(t, agentOpts{refreshInterval: 200 * time.Millisecond})
	m, ok := a.status()
	if !ok || m.Throttle == nil || m.Throttle.RateBytesPerSecond != rate || len(m.Throttle.Partitions) != 1 || m.Throttle.Partitions[0] != topic+":0" {
		t.Fatalf("after a restart describe shows throttle %+v", m.Throttle)
	}
	waitBytes(t, a, topic, rate/2, 30*time.Second, 0)
	got = measureRate(a, topic, throttleWindow, 0)
	t.Logf("after a restart, partition 0: %.0f B/s over %v", got, throttleWindow)
	if got < rate*(1-throttleTolerance) || got > rate*(1+throttleTolerance) {
		t.Errorf("after a restart partition 0: %.0f B/s, want %d B/s ±%.0f%%", got, rate, 100*throttleTolerance)
	}
	if err := a.co.RemoveThrottle(testCtx(t), mirrorName); err != nil {
		t.Fatal(err)
	}
	p.waitMirrored(t, a, topic, 2*time.Minute)
	p.assertIdentical(t, topic, identityOpts{wantRecords: 24000})
}
