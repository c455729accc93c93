package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// inProcessAgent is `kmirror agent` run by runAgent in the test process.
type inProcessAgent struct {
	base   string
	cancel context.CancelFunc
	done   chan error
}

func startInProcessAgent(t *testing.T, args ...string) *inProcessAgent {
	t.Helper()
	addr := devclustertest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	a := &inProcessAgent{base: "http://" + addr, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- runAgent(ctx, append([]string{"--listen", addr, "--log-level", "error"}, args...)) }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop cancels the agent as SIGTERM does and waits for it.
func (a *inProcessAgent) stop(t *testing.T) {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	if err := <-a.done; err != nil {
		t.Errorf("agent %s: %v", a.base, err)
	}
}

func (a *inProcessAgent) ready() (int, string) {
	resp, err := http.Get(a.base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func (a *inProcessAgent) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(a.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitReady polls /readyz until it answers want with a body containing
// substr, and returns how long that took.
func (a *inProcessAgent) waitReady(t *testing.T, want int, substr string, timeout time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		code, body := a.ready()
		if code == want && strings.Contains(body, substr) {
			return time.Since(began)
		}
		if time.Since(began) > timeout {
			t.Fatalf("%s/readyz answers %d %q after %v; want %d with %q", a.base, code, body, timeout, want, substr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAgentStandby runs two agents on one destination: the second is a
// standby whose /readyz and API name the active agent (NOT_ACTIVE, not
// retried by the client), and which takes over at once when the active one
// stops cleanly and releases the lease.
func TestAgentStandby(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	const lease = 2 * time.Second
	first := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--agent-id", "first", "--lease-duration", lease.String())
	first.waitReady(t, http.StatusOK, "ready", 20*time.Second)
	second := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--agent-id", "second", "--lease-duration", lease.String())
	second.waitReady(t, http.StatusServiceUnavailable, "the active agent is first", 20*time.Second)

	// Three lease durations: the active agent keeps renewing, the standby
	// stays one.
	time.Sleep(3 * lease)
	if code, body := first.ready(); code != http.StatusOK {
		t.Fatalf("the active agent lost its lease while running: %d %q", code, body)
	}
	// kmirror status on either agent says which is active, and the
	// active one how it writes fillers (a standby has not chosen yet).
	for a, want := range map[*inProcessAgent]string{
		first: "agent first: active; writer lease epoch 1 held by first (lease 2s)\n" +
			`fillers: markers (fillers = "auto": the destination authorizes WriteTxnMarkers, and the agents' group (or the writer lease) bounds how late a marker can land)`,
		second: "agent second: standby; writer lease epoch 1 held by first (lease 2s)",
	} {
		out, err := capture(t, runStatus, "--agent", a.base)
		if err != nil || strings.TrimSpace(out) != want {
			t.Errorf("kmirror status --agent %s: %q, %v; want %q", a.base, out, err, want)
		}
	}
	cl := mirrorapi.NewClient(second.base, "")
	began := time.Now()
	_, err := cl.Describe(context.Background())
	if !mirrorapi.IsCode(err, mirrorapi.CodeNotActive) || !strings.Contains(err.Error(), "the active agent is first") {
		t.Fatalf("describe on the standby: %v; want NOT_ACTIVE naming agent first", err)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("describe on the standby took %v: NOT_ACTIVE must not be retried", took)
	}
	if _, err := mirrorapi.NewClient(first.base, "").Describe(context.Background()); err != nil {
		t.Errorf("describe on the active agent: %v", err)
	}
	for a, want := range map[*inProcessAgent]string{
		first:  `kmirror_agent_active{agent_id="first"} 1`,
		second: `kmirror_agent_active{agent_id="second"} 0`,
	} {
		if m := a.metrics(t); !strings.Contains(m, want) || !strings.Contains(m, "kmirror_lease_epoch") {
			t.Errorf("%s/metrics lacks %q or kmirror_lease_epoch", a.base, want)
		}
	}

	// A clean stop releases the lease: the standby takes over without
	// waiting for it to run out.
	first.stop(t)
	took := second.waitReady(t, http.StatusOK, "ready", 20*time.Second)
	if took >= lease {
		t.Errorf("the standby took %v to take over a released lease, want less than the lease duration %v", took, lease)
	}
	t.Logf("takeover after a clean stop: %v", took.Round(time.Millisecond))
}

// TestAgentStopsWithoutDestination: an active agent asked to stop after its
// destination went away (the demo stops both at once) exits within a bounded
// time, although it cannot release its lease.
func TestAgentStopsWithoutDestination(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	a := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--agent-id", "only", "--lease-duration", "2s")
	a.waitReady(t, http.StatusOK, "ready", 20*time.Second)
	dst.Close()
	began := time.Now()
	a.cancel()
	a.cancel = nil
	select {
	case err := <-a.done:
		t.Logf("the agent stopped %v after SIGTERM (destination gone): %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30s of SIGTERM with its destination gone")
	}
}
