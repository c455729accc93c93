package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/kmirrorbin"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// Some figures need the agent or the clusters in a process of their own:
// the agent's memory (its RSS must not include the clusters), and its
// allocations (runtime.MemStats of this process must not include kfake's).

// kmirrorBin returns the kmirror binary the benchmark processes run.
func kmirrorBin(b testing.TB) string { return kmirrorbin.Path(b) }

// childEnv is this process's environment without the benchmark's GODEBUG
// memory setting, so that child processes run as they would in production.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			var keep []string
			for _, s := range strings.Split(v, ",") {
				if s != memoryMode && s != "" {
					keep = append(keep, s)
				}
			}
			if len(keep) == 0 {
				continue
			}
			kv = "GODEBUG=" + strings.Join(keep, ",")
		}
		env = append(env, kv)
	}
	return env
}

// proc is a child process, stopped with SIGTERM (SIGKILL after 10s).
type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *lockedBuffer
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// lockedBuffer collects the first MiB of a child's stderr for error
// messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 1<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// devClusterProc runs `kmirror dev-cluster` (lenient, one broker, free
// port) in its own process and returns its bootstrap address.
func devClusterProc(b *testing.B, name string) (*proc, string) {
	b.Helper()
	cmd := exec.Command(kmirrorBin(b), "dev-cluster", "--name", name, "--port", "0", "--lenient", "--log-level", "error")
	cmd.Env = childEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), stderr: stderr}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case l := <-lines:
		bs, ok := strings.CutPrefix(l, "bootstrap: ")
		if !ok {
			p.stop()
			b.Fatalf("dev-cluster %s printed %q, not its bootstrap line", name, l)
		}
		return p, bs
	case <-p.done:
		b.Fatalf("dev-cluster %s exited: %s", name, stderr.String())
	case <-time.After(30 * time.Second):
		p.stop()
		b.Fatalf("dev-cluster %s did not start in 30s", name)
	}
	return nil, ""
}

// agentProcs counts the agents agentProc started, to give each a state
// topic of its own: an agent that found an earlier one's would resume its
// mirror instead of starting over.
var agentProcs atomic.Int64

// agentProc runs `kmirror agent` with an HCL config mirroring topics from
// src to dst, its API on a free port; it returns the API's base URL.
func agentProc(b *testing.B, dst, src []string, topics ...string) (*proc, string) {
	b.Helper()
	addr := devclustertest.FreeAddr(b)
	cfg := agentHCL(dst, addr, fmt.Sprintf("__kmirror_state_proc%d", agentProcs.Add(1)), fmt.Sprintf(`mirror "backlog" {
  source {
    bootstrap_servers = %s
  }
  topics = %s
}
`, hclList(src), hclList(topics)))
	return startAgentProc(b, cfg), "http://" + addr
}

// agentHCL is an agent's config: destination dst, its API at addr, state
// topic state, quiet logs, then rest.
func agentHCL(dst []string, addr, state, rest string) string {
	return fmt.Sprintf(`destination {
  bootstrap_servers = %s
}
listen      = %q
log_level   = "error"
state_topic = %q
`, hclList(dst), addr, state) + rest
}

// startAgentProc starts `kmirror agent` with config cfg (HCL) and env added
// to its environment.
func startAgentProc(b *testing.B, cfg string, env ...string) *proc {
	b.Helper()
	path := filepath.Join(b.TempDir(), "agent.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(kmirrorBin(b), "agent", "--config", path)
	cmd.Env = append(childEnv(), env...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), stderr: stderr}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p
}

func hclList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// memStatus reads VmRSS and VmHWM (peak RSS) of a process, in bytes.
func memStatus(pid int) (rss, hwm int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: unexpected %q", pid, line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, errors.New("no VmRSS/VmHWM in /proc status")
	}
	return rss, hwm, nil
}

// cpuOf returns a process's user+system CPU time from /proc/PID/stat.
func cpuOf(pid int) (time.Duration, error) {
	st, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return st.cpu, nil
}

// stat is what the benchmarks read of /proc/PID/stat.
type stat struct {
	ppid int
	cpu  time.Duration // user+system, all threads
}

func procStat(pid int) (stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return stat{}, errors.New("short /proc stat")
	}
	ppid, err0 := strconv.Atoi(f[1])
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil {
		return stat{}, errors.New("malformed /proc stat fields")
	}
	const hz = 100 // USER_HZ on Linux
	return stat{ppid: ppid, cpu: time.Duration(ut+st) * time.Second / hz}, nil
}

// procsCPU returns the user+system CPU time of the processes pids, as a
// clock for watch.dstCPU; nil when there are none (the embedded engine
// runs in this process, whose clock is the contender's own).
func procsCPU(pids []int) func() (time.Duration, error) {
	if len(pids) == 0 {
		return nil
	}
	return func() (time.Duration, error) {
		var total time.Duration
		for _, p := range pids {
			st, err := procStat(p)
			if err != nil {
				return 0, err
			}
			total += st.cpu
		}
		return total, nil
	}
}

// treeCPU returns the user+system CPU time of process pid and of every
// process below it (a JVM, a wrapper script's child), read from /proc.
func treeCPU(pid int) (time.Duration, error) {
	root, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int]int{}
	cpu := map[int]time.Duration{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if st, err := procStat(p); err == nil { // gone since listed: not ours to count
			parent[p], cpu[p] = st.ppid, st.cpu
		}
	}
	total := root.cpu
	for p := range parent {
		for a := parent[p]; a > 1; a = parent[a] {
			if a == pid {
				total += cpu[p]
				break
			}
		}
	}
	return total, nil
}

// agentMirrored sums the destination offsets the agent behind cl reports
// for topic; 0 while its API is not up yet, an error when a mirror or a
// partition failed.
func agentMirrored(ctx context.Context, cl *mirrorapi.Client, topic string) (int64, error) {
	ms, err := cl.Describe(ctx)
	if err != nil {
		return 0, nil
	}
	var n int64
	for _, m := range ms {
		if m.Error != "" {
			return 0, fmt.Errorf("mirror %s: %s", m.Name, m.Error)
		}
		for _, t := range m.Topics {
			if t.Name != topic {
				continue
			}
			for _, pt := range t.Partitions {
				if pt.State == mirrorapi.StateFailed {
					return 0, fmt.Errorf("partition %s/%d failed: %s", topic, pt.Partition, pt.Reason)
				}
				n += pt.DestinationOffset
			}
		}
	}
	return n, nil
}
