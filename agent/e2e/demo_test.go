package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/devcluster"
)

// TestDemo runs `make demo`'s script with a short watch and checks what it
// promises: terraform apply creates the mirror and its three topics (plain,
// transactional, compacted), the agent mirrors, lag reaches 0, kmirror verify
// passes on every topic, an independent client reads the same record at the same offset on both
// clusters, a failover through terraform makes the destination writable right after the last
// mirrored offset, a consumer group resumes on the destination where it left off on the source;
// and that it cleans up.
//
// It runs on the embedded engine (make demo) and on the newest Kafka release
// (KMIRROR_ENGINE=kafka make demo).
func TestDemo(t *testing.T) {
	for _, e := range []engine{embedded, realEngines(false)[0]} {
		t.Run(e.name, func(t *testing.T) { testDemo(t, e) })
	}
}

func testDemo(t *testing.T, e engine) {
	root := moduleRoot(t)
	// The script waits up to 300 s for a Kafka cluster to start and then
	// prints the broker's log; the test's deadline is later, so a slow start
	// fails with the script's own message rather than a kill.
	limit := 4 * time.Minute
	if e.kind == devcluster.Kafka {
		limit = 8 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "tools", "demo.sh"))
	cmd.Dir = root
	// The script runs in a process group of its own. At the deadline the
	// whole group gets SIGTERM, so the script's exit trap stops the clusters
	// and the agent it started; a SIGKILL of bash alone would leave them
	// running, holding their ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	// Real brokers start slower and take the producers' first records
	// later: a longer watch leaves every partition the records the
	// checks below read at offset 500.
	watch := "5"
	if e.kind == devcluster.Kafka {
		watch = "20"
	}
	cmd.Env = append(os.Environ(), "DEMO_SECONDS="+watch, "KMIRROR_ENGINE="+string(e.kind), "KMIRROR_KAFKA_VERSION="+e.version)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// Whatever of the group ignored SIGTERM (only on failure: after
		// a clean exit the group id is free for reuse).
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		t.Fatalf("demo failed: %v\n%s%s", err, out, demoLogTails(root))
	}
	text := string(out)
	for _, want := range []string{
		"Apply complete! Resources: 4 added",
		"topic orders: OK", "topic payments: OK", "topic customers: OK",
		"MIRRORING",
		"Apply complete! Resources: 0 added, 1 changed",
		"stopping everything the demo started",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	// AGENT names each partition's agent of the group.
	if !regexp.MustCompile(`(?m)^MIRROR\s+TOPIC\s+PARTITION\s+SOURCE-OFFSET\s+DESTINATION-OFFSET\s+LAG\s+STATE\s+AGENT$`).MatchString(text) {
		t.Errorf("demo output lacks the describe table's header:\n%s", text)
	}
	src := regexp.MustCompile(`(?m)^source\s+(partition 1 offset 500 key \S+ timestamp \d+)$`).FindStringSubmatch(text)
	dst := regexp.MustCompile(`(?m)^destination\s+(partition 1 offset 500 key \S+ timestamp \d+)$`).FindStringSubmatch(text)
	if src == nil || dst == nil || src[1] != dst[1] {
		t.Errorf("kcat lines differ or are missing: source %q, destination %q\n%s", src, dst, text)
	}
	// After the failover, a write to the destination lands right after the
	// last mirrored offset, which the describe table shows for partition 1.
	end := regexp.MustCompile(`(?m)^dr\s+orders\s+1\s+(\d+)\s+(\d+)\s+0\s+STOPPED\s+\S+$`).FindStringSubmatch(text)
	write := regexp.MustCompile(`(?m)^destination\s+partition 1 offset (\d+) \(new write after failover\)$`).FindStringSubmatch(text)
	if end == nil || write == nil || end[2] != write[1] {
		t.Errorf("the write after failover did not land at the destination end: table %q, write %q\n%s", end, write, text)
	}
	// A consumer group that read on the source resumes on the destination
	// at the offsets it committed there (synced at the failover).
	next := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^source\s+group billing: partition (\d+) next offset (\d+)$`).FindAllStringSubmatch(text, -1) {
		next[m[1]] = m[2]
	}
	resumed := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^destination\s+group billing: partition (\d+) resumes at offset (\d+)$`).FindAllStringSubmatch(text, -1) {
		resumed[m[1]] = m[2]
	}
	if len(next) == 0 {
		t.Errorf("the demo's consumer group read nothing on the source:\n%s", text)
	}
	for p, o := range next {
		if resumed[p] != o {
			t.Errorf("group billing partition %s: next offset %s on the source, resumed at %q on the destination\n%s", p, o, resumed[p], text)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".work", "demo", "pids")); !os.IsNotExist(err) {
		t.Errorf("the demo left its pid file behind (processes not cleaned up?): %v", err)
	}
}

// demoLogTails returns the last lines of every log the demo wrote, for a
// failure that the script's output alone does not explain.
func demoLogTails(root string) string {
	logs, _ := filepath.Glob(filepath.Join(root, ".work", "demo", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-15):]
		fmt.Fprintf(&b, "\n--- %s (last %d lines)\n%s\n", filepath.Base(l), len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
