package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"github.com/kmirror/kmirror/internal/kmirrorbin"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// serveProvider serves the provider in this process in debug mode and
// returns the TF_REATTACH_PROVIDERS value that points terraform (or tofu)
// at it, under both registry hosts.
func serveProvider(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfgCh := make(chan *plugin.ReattachConfig, 1)
	closeCh := make(chan struct{})
	errCh := make(chan error, 1)
	go func() {
		errCh <- tf6server.Serve(Address, providerserver.NewProtocol6(New("test")()),
			tf6server.WithDebug(ctx, cfgCh, closeCh),
			tf6server.WithGoPluginLogger(hclog.NewNullLogger()),
			tf6server.WithoutLogStderrOverride(),
			tf6server.WithLoggingSink(t)) // TF_LOG decides, as for the other acceptance tests
	}()
	var rc *plugin.ReattachConfig
	select {
	case rc = <-cfgCh:
	case err := <-errCh:
		cancel()
		t.Fatalf("serving the provider: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the provider did not start serving within 30s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-closeCh:
		case <-time.After(10 * time.Second):
		}
	})
	type addr struct{ Network, String string }
	type reattach struct {
		Protocol        string
		ProtocolVersion int
		Pid             int
		Test            bool
		Addr            addr
	}
	r := reattach{Protocol: string(rc.Protocol), ProtocolVersion: rc.ProtocolVersion, Pid: rc.Pid, Test: true,
		Addr: addr{Network: rc.Addr.Network(), String: rc.Addr.String()}}
	b, err := json.Marshal(map[string]reattach{
		"registry.terraform.io/kmirror/kafka": r,
		"registry.opentofu.org/kmirror/kafka": r,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAccCIFailoverScript runs examples/ci-failover/ci-failover.sh as a
// CI job would, with the real terraform (or tofu) binary against an
// in-process agent and dev clusters: it fails on drift, then promotes the
// topic and checks that the destination accepts writes.
func TestAccCIFailoverScript(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	tf := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if tf == "" {
		var err error
		if tf, err = exec.LookPath("terraform"); err != nil {
			t.Skip("no terraform: set TF_ACC_TERRAFORM_PATH (make testacc does)")
		}
	}
	example, err := filepath.Abs("../examples/ci-failover")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mainTF, err := os.ReadFile(filepath.Join(example, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), mainTF, 0o644); err != nil {
		t.Fatal(err)
	}
	srcJSON, _ := json.Marshal(e.src.Bootstrap()[:1])
	env := append(os.Environ(),
		"TF_REATTACH_PROVIDERS="+serveProvider(t),
		"TF_CLI_CONFIG_FILE="+os.DevNull,
		"TF_VAR_agent_url="+e.url,
		"TF_VAR_token="+accToken,
		"TF_VAR_source_bootstrap="+string(srcJSON),
		"TF_DIR="+dir,
		"TERRAFORM="+tf,
		"DEST_BOOTSTRAP="+strings.Join(e.dst.Bootstrap(), ","),
		"CHECKPOINT_DISABLE=1",
	)
	if _, err := exec.LookPath("kcat"); err != nil {
		env = append(env, "KMIRROR="+kmirrorbin.Path(t))
	}
	run := func(name string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env, cmd.Dir = env, dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		t.Logf("%s %s: exit %d in %s", filepath.Base(name), strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
		if err != nil && code < 0 {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
		return out.String(), code
	}
	script := filepath.Join(example, "ci-failover.sh")

	// What the pipeline applied before: the topic mirroring.
	for _, args := range [][]string{{"init", "-input=false", "-no-color"}, {"apply", "-input=false", "-no-color", "-auto-approve"}} {
		if out, code := run(tf, args...); code != 0 {
			t.Fatalf("terraform %s: exit %d\n%s", args[0], code, out)
		}
	}
	e.produce(t, "orders", 0, 6)
	e.produce(t, "orders", 1, 2)
	e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 6, 1: 2})

	// Drift: paused outside Terraform, the job stops before promoting.
	if err := e.cl.PauseTopics(ctx, "dr", []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	out, code := run(script)
	if code != 2 || !strings.Contains(out, "DRIFT") || strings.Contains(out, "== promote") {
		t.Fatalf("script with a paused topic: exit %d, want 2 (drift) without promoting\n%s", code, out)
	}
	if err := e.cl.ResumeTopics(ctx, "dr", []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 6, 1: 2})

	// No drift: it promotes and writes to the destination.
	out, code = run(script)
	if code != 0 || !strings.Contains(out, "no drift") || !strings.Contains(out, "promoted and writable") {
		t.Fatalf("script: exit %d, want 0\n%s", code, out)
	}
	m, err := e.cl.Mirror(ctx, "dr")
	if err != nil {
		t.Fatal(err)
	}
	tp, _ := findTopic(m, "orders")
	for _, p := range tp.Partitions {
		if p.State != mirrorapi.StateStopped || p.StopMode != mirrorapi.StopModePromote {
			t.Errorf("partition %d after the script: %s (%q), want STOPPED by promote", p.Partition, p.State, p.StopMode)
		}
	}
	// 6 mirrored records and the script's own on partition 0.
	if err := e.destinationEnds("orders", map[int32]int64{0: 7, 1: 2}); err != nil {
		t.Error(err)
	}
	// The next run of the job sees the promoted topic as promoted: no
	// drift once the configuration says so.
	out, code = run(tf, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-var", "topic_state=promoted")
	if code != 0 {
		t.Errorf("plan after the promotion: exit %d, want 0 (no changes)\n%s", code, out)
	}
}
