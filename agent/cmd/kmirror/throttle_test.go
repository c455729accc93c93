package main

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "1048576", want: 1048576},
		{in: "1MiB", want: 1 << 20},
		{in: "1 MiB/s", want: 1 << 20},
		{in: "1.5MB", want: 1500000},
		{in: "500KiB", want: 500 << 10},
		{in: "2GB", want: 2e9},
		{in: "1GiB/s", want: 1 << 30},
		{in: "100B", want: 100},
		{in: "0", err: "at least 1 byte per second"},
		{in: "-5MiB", err: "at least 1 byte per second"},
		{in: "fast", err: "such as 1048576, 1MiB"},
		{in: "1Mb", err: "such as 1048576, 1MiB"},
		{in: "", err: "such as 1048576"},
	} {
		got, err := parseRate(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %d, %v, want %d", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %d, %v, want an error saying %q", c.in, got, err, c.err)
		}
	}
}

// TestThrottleVerb sets, shows, changes and removes a throttle through the
// real API and coordinator, and refuses bad command lines with exit status
// 2 before calling the agent.
func TestThrottleVerb(t *testing.T) {
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.KfakeOptions(kfake.SeedTopics(2, "orders")))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	co := coordinatortest.Start(t, coordinator.Config{Destination: []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}, RefreshInterval: 200 * time.Millisecond}).Coordinator
	srv := httptest.NewServer(api.Handler(co, api.Options{}))
	defer srv.Close()
	t.Setenv("KMIRROR_ADDR", srv.URL)
	run := func(want string, args ...string) {
		t.Helper()
		out, err := capture(t, runThrottle, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out != want {
			t.Fatalf("%v printed %q, want %q", args, out, want)
		}
	}
	if _, err := capture(t, runCreate, "--mirror", "dr", "--source-bootstrap", src.BootstrapString(), "--topic", "orders"); err != nil {
		t.Fatal(err)
	}

	run("Mirror dr has no throttle\n", "--mirror", "dr")
	run("null\n", "--mirror", "dr", "--output", "json")
	run("Mirror dr throttled to 1048576 bytes/s (1.0 MiB/s) on *\n", "--mirror", "dr", "--rate", "1MiB")
	run("Mirror dr throttled to 1048576 bytes/s (1.0 MiB/s) on *\n", "--mirror", "dr")
	run("Mirror dr throttled to 500000 bytes/s (488.3 KiB/s) on orders:0 orders:1\nSource quota: consumer_byte_rate=500000 for client-id=kmirror-dr\n",
		"--mirror", "dr", "--rate", "500KB", "--partition", "orders:0", "--partition", "orders:1", "--source-quota")
	run(`{
  "rate_bytes_per_second": 500000,
  "partitions": [
    "orders:0",
    "orders:1"
  ],
  "source_quota": true,
  "source_quota_entity": "client-id=kmirror-dr"
}
`, "--mirror", "dr", "--output", "json")
	if m := co.Describe(); len(m) != 1 || m[0].Throttle == nil || m[0].Throttle.RateBytesPerSecond != 500000 {
		t.Errorf("describe after the CLI set a throttle: %+v", m)
	}

	// Refusals: the agent's, with their code, and bad command lines.
	if _, err := capture(t, runThrottle, "--mirror", "nope", "--rate", "1MiB"); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		t.Errorf("throttle of an unknown mirror: %v", err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--rate", "1MiB"}, "--mirror NAME is required"},
		{[]string{"--mirror", "dr", "--rate", "0"}, "at least 1 byte per second"},
		{[]string{"--mirror", "dr", "--rate", "lots"}, "--rate \"lots\""},
		{[]string{"--mirror", "dr", "--rate", "1MiB", "--partition", "orders"}, `--partition[0]: "orders": use TOPIC:PARTITION`},
		{[]string{"--mirror", "dr", "--partition", "orders:0"}, "--rate is required"},
		{[]string{"--mirror", "dr", "--remove", "--rate", "1MiB"}, "--remove lifts the throttle"},
		{[]string{"--mirror", "dr", "--output", "yaml"}, "--output"},
	} {
		_, err := capture(t, runThrottle, c.args...)
		var st *exitStatus
		if !errors.As(err, &st) || st.Code != 2 || st.Err == nil || !strings.Contains(st.Err.Error(), c.says) {
			t.Errorf("%v: %v, want a usage error (exit status 2) saying %q", c.args, err, c.says)
		}
	}
	if th, err := co.Throttle("dr"); err != nil || th.RateBytesPerSecond != 500000 {
		t.Errorf("refused command lines changed the throttle: %+v %v", th, err)
	}

	run("Removed the throttle of mirror dr\n", "--mirror", "dr", "--remove")
	run("Mirror dr has no throttle\n", "--mirror", "dr")
	if _, err := co.Throttle("dr"); !errors.Is(err, coordinator.ErrThrottleNotFound) {
		t.Errorf("after --remove: %v", err)
	}
}
