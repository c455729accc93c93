package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/kmirrorbin"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// This file runs `kmirror agent` as a separate process, so that tests can
// kill it the way a machine or an OOM killer does: SIGKILL, no deferred
// function, no flush, sockets closed by the kernel.

// kmirrorBin returns the kmirror binary the agent processes run.
func kmirrorBin(t testing.TB) string { return kmirrorbin.Path(t) }

// agentMirror is one mirror block of an agent config.
type agentMirror struct {
	Name   string
	Source *devcluster.Cluster
	Topics []string
}

// agentSetup is an agent configuration file and what it says.
type agentSetup struct {
	Path   string // the HCL file, in a t.TempDir()
	Listen string // the API address
	Dir    string // where the config and the agents' logs live
	// Bin is the kmirror binary the agent runs (default kmirrorBin):
	// another release's, for an upgrade.
	Bin string
}

// writeAgentConfig writes an agent config for dst and mirrors, with the API
// on a free loopback port and debug logs (they go to files, see
// startAgentProcess). The tests using it run one agent at a time, alone
// (coordination = "single"): a restarted agent writes at once, relying on
// the brokers' fencing only, which is what they test. The group's tests
// (group_test.go) run agents that wait out a session.
func writeAgentConfig(t testing.TB, dst *devcluster.Cluster, mirrors ...agentMirror) agentSetup {
	t.Helper()
	return writeAgentConfigWith(t, dst, "coordination = \"single\"\n", mirrors...)
}

// writeAgentConfigWith is writeAgentConfig with extra top-level settings
// (HCL lines).
func writeAgentConfigWith(t testing.TB, dst *devcluster.Cluster, extra string, mirrors ...agentMirror) agentSetup {
	t.Helper()
	return writeAgentConfigTo(t, dst.Bootstrap(), extra, mirrors...)
}

// writeAgentConfigTo is writeAgentConfigWith for the destination brokers at
// bootstrap (a wireWatch's listeners).
func writeAgentConfigTo(t testing.TB, bootstrap []string, extra string, mirrors ...agentMirror) agentSetup {
	t.Helper()
	quote := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	s := agentSetup{Dir: t.TempDir(), Listen: devclustertest.FreeAddr(t)}
	s.Path = filepath.Join(s.Dir, "agent.hcl")
	var b strings.Builder
	fmt.Fprintf(&b, "destination {\n  bootstrap_servers = %s\n}\n", quote(bootstrap))
	fmt.Fprintf(&b, "listen = %q\nlog_level = \"debug\"\n", s.Listen)
	b.WriteString(extra)
	for _, m := range mirrors {
		fmt.Fprintf(&b, "\nmirror %q {\n  source {\n    bootstrap_servers = %s\n  }\n  topics = %s\n}\n",
			m.Name, quote(m.Source.Bootstrap()), quote(m.Topics))
	}
	if err := os.WriteFile(s.Path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// agentProcess is one `kmirror agent` process.
type agentProcess struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	logPath string
	api     *mirrorapi.Client
	exited  chan struct{}
	waitErr error // valid once exited is closed

	// TailLines is how much of the log a failing test prints (default 60).
	TailLines int
}

// startAgentProcess starts `kmirror agent --config setup.Path` with its
// stdout and stderr going to DIR/NAME.log, and returns once /healthz
// answers. If the test fails, the tail of the log is printed; the process
// is killed at the end of the test if it still runs.
func startAgentProcess(t testing.TB, setup agentSetup, name string) *agentProcess {
	t.Helper()
	bin := setup.Bin
	if bin == "" {
		bin = kmirrorBin(t)
	}
	logPath := filepath.Join(setup.Dir, name+".log")
	if dir := os.Getenv("KMIRROR_E2E_LOGDIR"); dir != "" {
		// Kept after the test, for a look at a run that passed too.
		logPath = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log")
	}
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the child has its own descriptor
	a := &agentProcess{
		t: t, name: name, logPath: logPath,
		api:       mirrorapi.NewClient("http://"+setup.Listen, ""),
		exited:    make(chan struct{}),
		TailLines: 60,
	}
	// No keep-alive: a connection to a killed agent's port must not be
	// reused for the next agent listening there.
	a.api.HTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	a.cmd = exec.Command(bin, "agent", "--config", setup.Path)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		a.waitErr = a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
		if t.Failed() {
			a.logTail()
		}
	})
	if err := a.waitHealthy(30 * time.Second); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return a
}

// waitHealthy polls /healthz until it answers 200.
func (a *agentProcess) waitHealthy(timeout time.Duration) error {
	cl := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := cl.Get(a.api.BaseURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-a.exited:
			return fmt.Errorf("the agent exited before /healthz answered: %v", a.waitErr)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/healthz did not answer within %v (last error: %v)", timeout, err)
		}
	}
}

// Kill sends SIGKILL and waits for the process to be gone: no graceful
// shutdown, the kernel closes its sockets.
func (a *agentProcess) Kill() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		a.t.Fatalf("killing %s: %v", a.name, err)
	}
	<-a.exited
}

// Freeze stops the process (SIGSTOP) the way a long GC pause, a hung VM or
// a debugger does: its sockets stay open and its clocks keep running.
func (a *agentProcess) Freeze() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		a.t.Fatalf("freezing %s: %v", a.name, err)
	}
}

// Thaw resumes a frozen process (SIGCONT).
func (a *agentProcess) Thaw() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		a.t.Fatalf("resuming %s: %v", a.name, err)
	}
}

// Ready returns the status and body of the agent's /readyz: 200 when it is
// the active agent and runs, 503 otherwise (the body says why).
func (a *agentProcess) Ready(timeout time.Duration) (int, string, error) {
	cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get(a.api.BaseURL + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// Stop asks the agent to shut down (SIGTERM) and waits for it.
func (a *agentProcess) Stop() {
	a.t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		a.t.Errorf("%s did not stop within 30s of SIGTERM", a.name)
	}
}

// Describe returns the agent's GET /v1/mirrors.
func (a *agentProcess) Describe(ctx context.Context) ([]mirrorapi.Mirror, error) {
	return a.api.Describe(ctx)
}

// logTail prints the last TailLines lines of the agent's log.
func (a *agentProcess) logTail() {
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		a.t.Logf("%s: reading its log: %v", a.name, err)
		return
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	n := a.TailLines
	if n <= 0 {
		n = 60
	}
	from := max(0, len(lines)-n)
	a.t.Logf("%s (exit: %v) log %s, last %d of %d lines:\n%s", a.name, a.waitErr, a.logPath, len(lines)-from, len(lines),
		bytes.Join(lines[from:], []byte("\n")))
}

// partitions flattens a describe answer.
func describedPartitions(ms []mirrorapi.Mirror) []mirrorapi.Partition {
	var out []mirrorapi.Partition
	for _, m := range ms {
		for _, t := range m.Topics {
			out = append(out, t.Partitions...)
		}
	}
	return out
}
