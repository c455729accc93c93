package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// lifecycleBackend moves a two-partition topic to the state an operation
// asks for, one partition per describe call, and records the calls.
type lifecycleBackend struct {
	api.Backend
	mu      sync.Mutex
	target  mirrorapi.State
	reached int
	calls   []string
}

func (b *lifecycleBackend) Running() bool { return true }

func (b *lifecycleBackend) Describe() []coordinator.MirrorStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ps []mirrorapi.Partition
	counts := map[mirrorapi.State]int{}
	for i := range 2 {
		st := mirrorapi.StateMirroring
		if i < b.reached {
			st = b.target
		}
		counts[st]++
		ps = append(ps, mirrorapi.Partition{Mirror: "dr", Topic: "orders", Partition: int32(i), State: st, Lag: int64(2 - b.reached)})
	}
	if b.target != "" && b.reached < 2 {
		b.reached++
	}
	return []coordinator.MirrorStatus{{Name: "dr", StateCounts: counts, Topics: []mirrorapi.Topic{{Name: "orders", Partitions: ps}}}}
}

func (b *lifecycleBackend) op(call string, target mirrorapi.State) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, call)
	b.target, b.reached = target, 0
	return nil
}

func (b *lifecycleBackend) PauseTopics(_ context.Context, name string, topics []string) error {
	return b.op("pause "+name+" "+strings.Join(topics, ","), mirrorapi.StatePaused)
}

func (b *lifecycleBackend) StopTopics(_ context.Context, name string, topics []string, mode coordinator.StopMode) error {
	return b.op("stop "+name+" "+strings.Join(topics, ",")+" "+string(mode), mirrorapi.StateStopped)
}

// TestLifecycleVerbs runs pause and stop with --wait against the API, and
// the bad command lines.
func TestLifecycleVerbs(t *testing.T) {
	b := &lifecycleBackend{}
	srv := httptest.NewServer(api.Handler(b, api.Options{}))
	defer srv.Close()
	t.Setenv("KMIRROR_ADDR", srv.URL)
	out, err := capture(t, lifecycleVerb("pause"), "--mirror", "dr", "--topic", "orders", "--wait", "--timeout", "20s")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "2/2 partitions PAUSED; states PAUSED=2; lag 0") {
		t.Errorf("pause --wait printed:\n%s", out)
	}
	out, err = capture(t, lifecycleVerb("stop"), "--mirror", "dr", "--topic", "orders", "--mode", "promote", "--wait")
	if err != nil || !strings.Contains(out, "2/2 partitions STOPPED") {
		t.Errorf("stop --wait: %v\n%s", err, out)
	}
	if want := []string{"pause dr orders", "stop dr orders promote"}; strings.Join(b.calls, ";") != strings.Join(want, ";") {
		t.Errorf("calls %q, want %q", b.calls, want)
	}
	for _, args := range [][]string{
		{"--topic", "orders"},
		{"--mirror", "dr"},
		{"--mirror", "dr", "--topic", "orders", "--mode", "later"},
	} {
		if _, err := capture(t, lifecycleVerb("stop"), args...); err == nil {
			t.Errorf("stop %q: no error", args)
		}
	}
	// A timeout says where the partitions are.
	b.op("none", "")
	_ = b.Describe
	_, err = capture(t, func(ctx context.Context, _ []string) error {
		return waitTopics(ctx, mirrorapi.NewClient(srv.URL, ""), "dr", []string{"orders"}, mirrorapi.StatePaused, 700*time.Millisecond)
	})
	if err == nil || !strings.Contains(err.Error(), "timed out") || !strings.Contains(err.Error(), "MIRRORING=2") {
		t.Errorf("wait timeout: %v", err)
	}
}

// TestStopNeedsModeAndConfirmation: a stop cannot be undone, so the CLI
// requires --mode and, on a terminal, a typed yes (--yes for scripts); a
// refusal or a "no" sends nothing to the agent.
func TestStopNeedsModeAndConfirmation(t *testing.T) {
	b := &lifecycleBackend{}
	srv := httptest.NewServer(api.Handler(b, api.Options{}))
	defer srv.Close()
	t.Setenv("KMIRROR_ADDR", srv.URL)
	oldIn, oldTerm := stdin, stdinIsTerminal
	defer func() { stdin, stdinIsTerminal = oldIn, oldTerm }()
	for _, tc := range []struct {
		name     string
		terminal bool
		answer   string
		args     []string
		want     string // "" means the stop is sent
		sent     bool
	}{
		{"no mode", false, "", nil, "--mode is required", false},
		{"no mode on a terminal", true, "yes\n", nil, "--mode is required", false},
		{"script", false, "", []string{"--mode", "failover"}, "", true},
		{"terminal, yes", true, "yes\n", []string{"--mode", "failover"}, "", true},
		{"terminal, y", true, "Y\n", []string{"--mode", "promote"}, "", true},
		{"terminal, no", true, "no\n", []string{"--mode", "failover"}, "cancelled: nothing was stopped", false},
		{"terminal, nothing typed", true, "", []string{"--mode", "failover"}, "cancelled", false},
		{"terminal, --yes", true, "", []string{"--mode", "failover", "--yes"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.mu.Lock()
			b.calls = nil
			b.mu.Unlock()
			stdin, stdinIsTerminal = strings.NewReader(tc.answer), func() bool { return tc.terminal }
			_, err := capture(t, lifecycleVerb("stop"), append([]string{"--mirror", "dr", "--topic", "orders"}, tc.args...)...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("stop: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("stop: %v, want an error containing %q", err, tc.want)
			}
			b.mu.Lock()
			sent := len(b.calls) > 0
			b.mu.Unlock()
			if sent != tc.sent {
				t.Errorf("stop sent to the agent: %v, want %v (calls %q)", sent, tc.sent, b.calls)
			}
		})
	}
}
