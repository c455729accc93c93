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

// TestAgentSingle: an agent of coordination = "single" runs alone, says so
// in kmirror status, takes coordinator fillers (nothing bounds how late a
// marker of a process it replaced could land), and refuses to start beside
// the agents of a group on the same state topic.
func TestAgentSingle(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	a := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--agent-id", "only", "--coordination", "single")
	a.waitReady(t, http.StatusOK, "ready", 20*time.Second)
	want := "agent only: runs every mirror alone (coordination = \"single\")\n" +
		`fillers: coordinator (fillers = "auto": the agent runs alone (coordination = "single"), and only coordinator fillers are fenced across a restart)`
	out, err := capture(t, runStatus, "--agent", a.base)
	if err != nil || strings.TrimSpace(out) != want {
		t.Errorf("kmirror status: %q, %v; want %q", out, err, want)
	}
	a.stop(t)

	g := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--agent-id", "g")
	g.waitReady(t, http.StatusOK, "ready", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = runAgent(ctx, []string{"--destination-bootstrap", dst.BootstrapString(), "--agent-id", "alone", "--coordination", "single", "--log-level", "error"})
	if err == nil || !strings.Contains(err.Error(), `agent(s) with coordination = "group"`) {
		t.Fatalf("a single agent beside a group: %v; want a refusal naming the group", err)
	}
}

// TestAgentRefusesLeaseSettings: the writer lease's settings are refused at
// start, saying what to set instead, before anything is written.
func TestAgentRefusesLeaseSettings(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease-duration", "15s"}, `lease_duration: the writer lease was removed; remove it, and the agents form a group`},
		{[]string{"--lease-duration", "0s"}, `set coordination = "single" instead`},
		{[]string{"--coordination", "lease"}, `coordination = "lease": the writer lease was removed`},
	} {
		err := runAgent(context.Background(), append([]string{"--destination-bootstrap", "127.0.0.1:1"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kmirror agent %v: %v; want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestAgentStopsWithoutDestination: an agent asked to stop after its
// destination went away (the demo stops both at once) exits within a bounded
// time, although it cannot leave its group.
func TestAgentStopsWithoutDestination(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	a := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--agent-id", "only")
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
