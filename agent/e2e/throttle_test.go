package e2e

// Mirror throttles (KIP-1279's mirror.replication.throttled.rate and
// .replicas) against a backlog: the mirrored byte rate while throttled,
// nothing held back once the throttle is lifted, without a restart; only the
// listed partitions held back; a restarted agent applying the persisted
// throttle.
//
// The throttle is the agent's own token bucket (fetcher.Throttle), on every
// engine: the figures asserted are the bucket's. Its ceiling holds whatever
// the machine does, so the upper bound is tight (20% over a 10 s window,
// where the bucket is off by a burst and a fetch at most); a loaded machine
// can only make the agent slower than the ceiling, so the lower bound is
// wide (half the ceiling). How fast the agent goes unthrottled is a figure
// of the machine, not of the bucket: it is logged, and belongs in the
// benchmarks.

import (
	"context"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/workload"
)

// throttleWindow is how long a throttled rate is measured;
// throttleOver is how far above the ceiling it may be, throttleUnder how
// far below.
const (
	throttleWindow = 10 * time.Second
	throttleOver   = 0.20
	throttleUnder  = 0.50
)

// checkThrottled fails the test when got (bytes per second) is outside the
// bounds of a ceiling of rate.
func checkThrottled(t *testing.T, what string, got float64, rate int64) {
	t.Helper()
	if lo, hi := float64(rate)*(1-throttleUnder), float64(rate)*(1+throttleOver); got < lo || got > hi {
		t.Errorf("%s: %.0f B/s, want %d B/s -%.0f%%/+%.0f%% (%.0f to %.0f)", what, got, rate, 100*throttleUnder, 100*throttleOver, lo, hi)
	}
}

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

// TestThrottle: a mirror throttled to 1 MiB/s moves 1 MiB/s (-50%/+20%)
// over 10 s of a backlog; once the throttle is removed, without a restart,
// the bucket holds nothing back any more and the rest of the backlog is
// mirrored.
func TestThrottle(t *testing.T) {
	forEngines(t, testThrottle)
}

func testThrottle(t *testing.T, e engine) {
	const rate = 1 << 20
	p := newPairOn(t, e, pairOpts{topic: "throttled", partitions: 4})
	topic := p.topic
	produceBacklog(t, p, topic, 4, 40000, 1000) // about 40 MB
	a := p.startThrottled(t, mirrorapi.Throttle{RateBytesPerSecond: rate}, topic)

	// Past the start (topic creation, the first fetches), then one window.
	waitBytes(t, a, topic, rate/2, 30*time.Second)
	got := measureRate(a, topic, throttleWindow)
	t.Logf("throttled to %d B/s: mirrored %.0f B/s over %v (%.1f%% of the ceiling)", rate, got, throttleWindow, 100*got/rate)
	checkThrottled(t, "throttled rate", got, rate)
	m, _ := a.status()
	if m.Throttle == nil || m.Throttle.RateBytesPerSecond != rate {
		t.Errorf("describe shows throttle %+v", m.Throttle)
	}
	if m.Fetch.ThrottledMillis < 1000 {
		t.Errorf("describe says the throttle held partitions back for %d ms over a throttled backlog", m.Fetch.ThrottledMillis)
	}

	// Lifted: the rest of the backlog, same agent, same fetch sessions.
	// Removing the throttle settles the bucket's account: from then on
	// it holds nothing back, so the time it held partitions back stops
	// growing.
	before, t0 := sumBytes(mirroredBytes(a, topic)), time.Now()
	if err := a.co.RemoveThrottle(testCtx(t), mirrorName); err != nil {
		t.Fatal(err)
	}
	m, _ = a.status()
	heldAtRemoval := m.Fetch.ThrottledMillis
	if m.Throttle != nil {
		t.Errorf("describe shows throttle %+v after its removal", m.Throttle)
	}
	p.waitMirrored(t, a, topic, 2*time.Minute)
	elapsed := time.Since(t0)
	rest := sumBytes(mirroredBytes(a, topic)) - before
	full := float64(rest) / elapsed.Seconds()
	t.Logf("throttle removed: %d bytes in %v, %.0f B/s (%.1fx the ceiling)", rest, elapsed.Round(time.Millisecond), full, full/rate)
	if rest <= 0 {
		t.Errorf("nothing mirrored after the throttle was removed")
	}
	if m, _ = a.status(); m.Fetch.ThrottledMillis != heldAtRemoval {
		t.Errorf("the throttle held partitions back for %d ms at its removal and %d ms once the backlog was mirrored: it still throttled", heldAtRemoval, m.Fetch.ThrottledMillis)
	}
	p.assertIdentical(t, topic, identityOpts{wantRecords: 40000})
}

// TestThrottlePartitions: a throttle on one partition holds back that
// partition only: the other is mirrored to its end meanwhile, while the
// throttled one moves no more than the ceiling lets through. A restarted
// agent throttles the same partition at the same rate, from the state topic.
func TestThrottlePartitions(t *testing.T) {
	forEngines(t, testThrottlePartitions)
}

func testThrottlePartitions(t *testing.T, e engine) {
	const rate = 512 << 10
	p := newPairOn(t, e, pairOpts{topic: "some", partitions: 2})
	topic := p.topic
	produceBacklog(t, p, topic, 2, 24000, 1000) // about 12 MB per partition
	a := p.startThrottled(t, mirrorapi.Throttle{RateBytesPerSecond: rate, Partitions: []string{topic + ":0"}}, topic)

	// Partition 1 is not throttled: all of it is mirrored while
	// partition 0 has moved no more than the ceiling allows over that
	// time (plus the bucket's burst and one fetch, a megabyte at most
	// with these batches).
	t0 := time.Now()
	p.waitMirroredParts(t, a, topic, []int32{1})
	free := time.Since(t0)
	b := mirroredBytes(a, topic)
	t.Logf("unthrottled partition 1: %d bytes in %v; throttled partition 0 meanwhile: %d bytes", b[1], free.Round(time.Millisecond), b[0])
	if ceiling := int64(float64(rate)*free.Seconds()*(1+throttleOver)) + 1<<20; b[0] > ceiling {
		t.Errorf("partition 0 mirrored %d bytes in the %v partition 1 took, above the %d the ceiling lets through: not held back", b[0], free.Round(time.Millisecond), ceiling)
	}
	got := measureRate(a, topic, throttleWindow, 0)
	t.Logf("partition 0 throttled to %d B/s: %.0f B/s over %v", rate, got, throttleWindow)
	checkThrottled(t, "throttled partition 0", got, rate)

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
	checkThrottled(t, "after a restart partition 0", got, rate)
	if err := a.co.RemoveThrottle(testCtx(t), mirrorName); err != nil {
		t.Fatal(err)
	}
	p.waitMirrored(t, a, topic, 2*time.Minute)
	p.assertIdentical(t, topic, identityOpts{wantRecords: 24000})
}
