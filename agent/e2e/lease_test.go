package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/workload"
)

// Lease settings of TestLeaseTakeover: short, so that ten takeovers fit in
// a test, and long enough for a loaded machine to renew in time.
const (
	e2eLease        = 1500 * time.Millisecond
	e2eLeaseTimeout = 500 * time.Millisecond
)

// TestLeaseTakeover runs two agent processes against one destination and
// state topic while producers keep writing to the source (a plain topic and
// a transactional one, a third of its transactions aborted). Ten times, the
// active agent is killed (SIGKILL, then started again as a standby) or
// frozen (SIGSTOP, resumed with SIGCONT once the other took over),
// alternating. Each time the other agent must take over by the lease's
// protocol (its log shows one claim, then the takeover wait before its
// first write) and within a bounded time; a resumed agent must find it lost
// the lease and stay a standby; the produce requests the agent had on the
// way are held and land late, after the new agent's first writes
// (deduplicated or rejected); and at the end the destination is
// offset-identical to the source at both isolation levels with no
// destination transaction left open.
//
// KMIRROR_LEASE_SEED=N replays a run's pauses.
func TestLeaseTakeover(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KMIRROR_LEASE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("KMIRROR_LEASE_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (rerun with KMIRROR_LEASE_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 3))

	const rounds = 10
	specs := []workload.Spec{{
		Topic: "orders", Partitions: 3, Seed: seed,
		Codecs:  workload.AllCodecs,
		Headers: true, ExplicitTimestamps: true,
	}, {
		Topic: "payments", Partitions: 3, Seed: seed + 1,
		Codecs:  []string{workload.CodecZstd, workload.CodecNone, workload.CodecLz4},
		Headers: true, ExplicitTimestamps: true,
		TransactionalID: "payments", AbortEvery: 3,
	}}
	topics := specTopics(specs)
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.Brokers(3), devcluster.KfakeOptions(kfake.SeedTopics(3, topics...)))
	dst := devclustertest.Start(t, devcluster.Name("dst"), devcluster.Brokers(3))
	// Produce requests of the mirror topics take a few ms, and those of an
	// agent killed or frozen on the way are held until the new active
	// agent has read the partition's end and written 0 to 7 batches there
	// (kill_test.go): the late writes of a zombie, which must be
	// deduplicated or rejected.
	lat := injectLatency(t, dst.Kfake(), topics, seed)

	stopProducing := runProducers(ctx, t, src, specs, 500, 100)

	mirror := agentMirror{Name: "dr", Source: src, Topics: topics}
	leaseCfg := func(id string) string {
		return fmt.Sprintf("agent_id = %q\nlease_duration = %q\nlease_request_timeout = %q\n", id, e2eLease, e2eLeaseTimeout)
	}
	setups := map[string]agentSetup{
		"a": writeAgentConfigWith(t, dst, leaseCfg("a"), mirror),
		"b": writeAgentConfigWith(t, dst, leaseCfg("b"), mirror),
	}
	starts := map[string]int{}
	start := func(id string) *agentProcess {
		starts[id]++
		return startAgentProcess(t, setups[id], fmt.Sprintf("agent-%s-%d", id, starts[id]))
	}
	agents := map[string]*agentProcess{"a": start("a"), "b": start("b")}
	other := map[string]string{"a": "b", "b": "a"}

	active, _ := waitActive(ctx, t, agents, "", 30*time.Second)
	var takeovers []time.Duration
	for i := 1; i <= rounds; i++ {
		// Let the active agent mirror for a while: the kill or freeze
		// lands at a random moment of its copying.
		pause := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
		select {
		case <-ctx.Done():
			t.Fatalf("round %d: %v", i, ctx.Err())
		case <-time.After(pause):
		}
		// Whichever agent is active now (a lease that lapsed under load
		// would have moved it; that is liveness, not safety).
		if cur, _ := waitActive(ctx, t, agents, "", 30*time.Second); cur != active {
			t.Logf("round %2d: agent %s is active, not %s", i, cur, active)
			active = cur
		}
		a := agents[active]
		standby := other[active]
		assertNotFailed(ctx, t, a, i)
		// Kill, kill, freeze, freeze, ...: each agent is killed and
		// frozen in turn.
		freeze := (i-1)/2%2 == 1
		lostBefore := lostLeaseLines(t, a)
		busy := lat.InFlight()
		stopped := time.Now()
		if freeze {
			a.Freeze()
		} else {
			a.Kill()
		}
		// Its requests on the way are late from now on; the standby's
		// writes, after the takeover, release them.
		lat.Killed()
		lat.Arm()
		next, took := waitActive(ctx, t, agents, active, 30*time.Second)
		if next != standby {
			t.Fatalf("round %d: agent %s is active, want %s", i, next, standby)
		}
		takeovers = append(takeovers, took)
		timeline := checkTakeover(t, i, agents[next], stopped, active)
		how := "killed"
		if freeze {
			how = "frozen"
			// The frozen agent resumes after the takeover: it must find
			// its lease expired and go back to standby, naming the new
			// active agent, without writing (the final verify and the
			// partitions' states show any write it made).
			a.Thaw()
			if err := waitStandby(ctx, a, next, 2*e2eLease); err != nil {
				t.Fatalf("round %d: agent %s resumed after agent %s took over: %v", i, active, next, err)
			}
			if n := lostLeaseLines(t, a); n <= lostBefore {
				t.Fatalf("round %d: the log of agent %s does not say it lost the writer lease after it resumed", i, active)
			}
			if code, body, err := agents[next].Ready(2 * time.Second); err != nil || code != http.StatusOK {
				t.Fatalf("round %d: agent %s is no longer active after agent %s resumed: %d %q %v", i, next, active, code, body, err)
			}
		} else {
			agents[active] = start(active) // a standby now
		}
		t.Logf("round %2d: agent %s %s after %4dms with %d writes in flight; agent %s active %v later%s", i, active, how, pause.Milliseconds(), busy, next, took.Round(time.Millisecond), formatLeaseLines(timeline))
		active = next
	}
	stats := stopProducing()
	sorted := slices.Clone(takeovers)
	slices.Sort(sorted)
	t.Logf("%d takeovers (lease %v, request timeout %v): min %v, median %v, max %v", len(sorted), e2eLease, e2eLeaseTimeout,
		sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
	// Bounded: the holder's lease runs out at most a lease after its last
	// renewal, the new owner waits a lease and the request timeout, and it
	// then loads its state topic and starts (a few hundred ms here). The
	// rounds' lines say where the time went when it does not hold (a
	// resumed agent that lost the lease once waited 5 s for the answers of
	// its writes before it could claim again).
	if limit := 2*e2eLease + e2eLeaseTimeout + 3*time.Second; sorted[len(sorted)-1] > limit {
		t.Errorf("a takeover took %v, more than the %v the lease bounds it by", sorted[len(sorted)-1], limit)
	}
	for _, st := range stats {
		t.Logf("%s: %d records produced (%d aborted), per partition %v", st.Spec.Topic, st.Records, st.Aborted, st.PerPartition)
	}

	assertSettled(ctx, t, src, dst, topics, lat, agents[active])
	// Both agents agree on the lease: held by the active one, at an epoch
	// that counts the first claim and every takeover.
	for id, a := range agents {
		st, err := a.api.Agent(ctx)
		if err != nil || st.LeaseHolder != active || st.LeaseEpoch < rounds+1 || st.AgentID != id {
			t.Errorf("GET /v1/agent of agent %s: %+v, %v; want holder %s at epoch %d or more", id, st, err, active, rounds+1)
		}
	}
	// The standby never served: its /readyz names the active agent.
	if code, body, err := agents[other[active]].Ready(2 * time.Second); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "the active agent is "+active) {
		t.Errorf("the standby's /readyz: %d %q %v; want 503 naming agent %s", code, body, err, active)
	}
	for _, a := range agents {
		a.Stop()
	}
}

// waitActive polls the agents' /readyz until one other than old answers 200,
// and returns its id and how long that took.
func waitActive(ctx context.Context, t *testing.T, agents map[string]*agentProcess, old string, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	began := time.Now()
	deadline := time.After(timeout)
	var last []string
	for {
		last = last[:0]
		for id, a := range agents {
			if id == old {
				continue // killed, or frozen: it would not answer
			}
			code, body, err := a.Ready(time.Second)
			if err == nil && code == http.StatusOK {
				return id, time.Since(began)
			}
			last = append(last, fmt.Sprintf("agent %s: %d %q %v", id, code, body, err))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for an active agent: %v (%s)", ctx.Err(), strings.Join(last, "; "))
		case <-deadline:
			t.Fatalf("no agent became active within %v: %s", timeout, strings.Join(last, "; "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitStandby waits until a's /readyz says it is a standby of active.
func waitStandby(ctx context.Context, a *agentProcess, active string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var code int
	var body string
	var err error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		code, body, err = a.Ready(time.Second)
		if err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "the active agent is "+active) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("its /readyz still answers %d %q (%v) after %v; want 503 naming agent %s as active", code, body, err, timeout, active)
}

// assertNotFailed fails the test when the agent describes a FAILED partition
// (a write of a zombie would show as one: a foreign write, a shifted
// offset).
func assertNotFailed(ctx context.Context, t *testing.T, a *agentProcess, round int) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms, err := a.Describe(dctx)
	if err != nil {
		t.Fatalf("round %d: describe of the active agent %s: %v", round, a.name, err)
	}
	for _, p := range describedPartitions(ms) {
		if p.State == mirrorapi.StateFailed {
			t.Fatalf("round %d: %s/%d FAILED: %s", round, p.Topic, p.Partition, p.Reason)
		}
	}
}

// leaseLine is a line of an agent's log about the lease, at its time
// relative to a moment of the test.
type leaseLine struct {
	at  time.Duration
	msg string
}

// leaseLines returns what a's log says about the lease since the moment
// the other agent was stopped, each line's time relative to it.
func leaseLines(t *testing.T, a *agentProcess, since time.Time) []leaseLine {
	t.Helper()
	var out []leaseLine
	for line := range strings.Lines(agentLog(t, a)) {
		stamp, rest, ok := strings.Cut(line, " ")
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", stamp)
		if !ok || err != nil || at.Before(since.Truncate(time.Millisecond)) || !strings.Contains(rest, "lease") {
			continue
		}
		out = append(out, leaseLine{at.Sub(since), strings.TrimSpace(rest)})
	}
	return out
}

// checkTakeover checks, from the new agent's log, that it took the lease
// over by the protocol: one claim that it won, naming the previous holder
// and the wait of the lease plus the request timeout, and its first write
// no sooner than that wait after the claim. It returns the lines, for the
// round's report of where the time went.
func checkTakeover(t *testing.T, round int, a *agentProcess, since time.Time, previous string) []leaseLine {
	t.Helper()
	lines := leaseLines(t, a, since)
	var claims []leaseLine
	var active *leaseLine
	for i, l := range lines {
		switch {
		case strings.Contains(l.msg, "another agent claimed the writer lease first"):
			t.Errorf("round %d: %s lost a claim with no other agent running: %s", round, a.name, l.msg)
		case strings.Contains(l.msg, "claimed the writer lease:"):
			claims = append(claims, l)
		case strings.Contains(l.msg, "active: this agent writes") && active == nil:
			active = &lines[i]
		}
	}
	wantWait := "wait=" + (e2eLease + e2eLeaseTimeout).String()
	switch {
	case len(claims) != 1 || active == nil:
		t.Errorf("round %d: %s's log since the other agent stopped has %d claims and active=%v; want one claim, then active:%s", round, a.name, len(claims), active != nil, formatLeaseLines(lines))
	case !strings.Contains(claims[0].msg, "previous_holder="+previous) || !strings.Contains(claims[0].msg, wantWait):
		t.Errorf("round %d: %s claimed with %q; want previous_holder=%s and %s", round, a.name, claims[0].msg, previous, wantWait)
	case active.at-claims[0].at < e2eLease+e2eLeaseTimeout-time.Millisecond: // log times are in ms
		t.Errorf("round %d: %s wrote %v after its claim, before the %v the previous holder's writes may take:%s", round, a.name, active.at-claims[0].at, e2eLease+e2eLeaseTimeout, formatLeaseLines(lines))
	}
	return lines
}

func formatLeaseLines(lines []leaseLine) string {
	var out strings.Builder
	for _, l := range lines {
		msg := l.msg
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		fmt.Fprintf(&out, "\n\t%+6dms %s", l.at.Milliseconds(), msg)
	}
	return out.String()
}

// agentLog returns a's log so far.
func agentLog(t *testing.T, a *agentProcess) string {
	t.Helper()
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		t.Fatalf("reading the log of %s: %v", a.name, err)
	}
	return string(b)
}

// lostLeaseLines counts the times the agent's log says it lost the lease.
func lostLeaseLines(t *testing.T, a *agentProcess) int {
	t.Helper()
	return strings.Count(agentLog(t, a), "writer lease lost: this agent stops writing")
}
