package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/kmirrorbin"
)

// TestDevClusterFlagErrors checks that each bad value is refused before
// anything starts, with an error naming the flag.
func TestDevClusterFlagErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--brokers", "0"}, []string{"--brokers must be at least 1"}},
		{[]string{"--port", "-1"}, []string{"--port must be between 0 and 65535"}},
		{[]string{"--port", "65535", "--brokers", "2"}, []string{"--port 65535 with --brokers 2", "choose a lower --port"}},
		{[]string{"--log-level", "loud"}, []string{`--log-level "loud"`}},
		{[]string{"--name", ""}, []string{"--name must not be empty"}},
		{[]string{"extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"--sasl-user", "alice"}, []string{"-sasl-user", "want NAME:PASSWORD"}},
		{[]string{"--sasl-user", ":secret"}, []string{"-sasl-user", "name before the colon must not be empty"}},
		{[]string{"--sasl-user", "alice:"}, []string{"-sasl-user", `password of "alice" must not be empty`}},
		{[]string{"--sasl-user", "kmirror-devcluster-internal:x"}, []string{"-sasl-user", "reserved"}},
		{[]string{"--sasl-user", "alice:a", "--sasl-user", "alice:b"}, []string{`--sasl-user "alice" is given twice`}},
		{[]string{"--super-user", ""}, []string{"-super-user", "must not be empty"}},
		{[]string{"--sasl-user", "alice:a", "--super-user", "root"}, []string{`--super-user "root" is not a --sasl-user`, "--sasl-user root:PASSWORD"}},
		{[]string{"--tls-cert", "c.pem"}, []string{"--tls-cert and --tls-key: give both"}},
		{[]string{"--tls", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, []string{"use one of them"}},
		{[]string{"--tls-ca-out", "ca.pem"}, []string{"--tls-ca-out", "add --tls"}},
		{[]string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, []string{"--tls-cert and --tls-key: open /nonexistent/c.pem"}},
		{[]string{"--latency", "-5ms"}, []string{"--latency must not be negative"}},
		{[]string{"--latency", "soon"}, []string{"-latency"}},
		{[]string{"--bandwidth", "fast"}, []string{"--bandwidth", `"fast"`}},
		{[]string{"--bandwidth", "10Mb"}, []string{"--bandwidth", `unit "Mb"`}},
		{[]string{"--port", strconv.Itoa(busyPort)}, []string{
			"--port", fmt.Sprintf("port %d is already in use", busyPort), "try --port"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a run that got past validation would return at once
			err := devCluster(ctx, tc.args, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	if err := devCluster(context.Background(), []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp (exit status 2)", err)
	}
}

// devClusterInProcess runs the command with args in this process until ctx
// ends, and returns the bootstrap it printed, its log, and its result once
// it returns.
func devClusterInProcess(ctx context.Context, t *testing.T, args ...string) (bootstrap string, stderr *syncBuffer, done <-chan error) {
	t.Helper()
	stdoutR, stdoutW := io.Pipe()
	stderr = new(syncBuffer)
	result := make(chan error, 1)
	go func() {
		result <- devCluster(ctx, args, stdoutW, stderr)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the bootstrap line: %v (%v); stderr:\n%s", err, <-result, stderr)
	}
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()
	bootstrap, ok := strings.CutPrefix(strings.TrimSpace(line), "bootstrap: ")
	if !ok {
		t.Fatalf("first line %q is not the bootstrap line", line)
	}
	return bootstrap, stderr, result
}

// TestDevClusterSASLAndACLs runs the command in-process with SASL users,
// the authorizer and a super user: the super user may do anything (each
// mechanism), a user without ACLs is refused writes with
// TOPIC_AUTHORIZATION_FAILED, a client without SASL is refused, and the
// passwords never reach the log.
func TestDevClusterSASLAndACLs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bootstrap, stderr, done := devClusterInProcess(ctx, t, "--port", "0", "--acls",
		"--sasl-user", "admin:adm:in-pass", "--sasl-user", "alice:alice-pass", "--super-user", "admin")
	seeds := kgo.SeedBrokers(strings.Split(bootstrap, ",")...)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()

	for i, mech := range []sasl.Mechanism{
		plain.Auth{User: "admin", Pass: "adm:in-pass"}.AsMechanism(),
		scram.Auth{User: "admin", Pass: "adm:in-pass"}.AsSha256Mechanism(),
		scram.Auth{User: "admin", Pass: "adm:in-pass"}.AsSha512Mechanism(),
	} {
		cl, err := kgo.NewClient(seeds, kgo.SASL(mech))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		topic := fmt.Sprintf("t%d", i)
		if _, err := kadm.NewClient(cl).CreateTopic(rctx, 1, 1, nil, topic); err != nil {
			t.Fatalf("super user (%s) creating a topic: %v", mech.Name(), err)
		}
		if err := cl.ProduceSync(rctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("super user (%s) producing: %v", mech.Name(), err)
		}
	}

	alice, err := kgo.NewClient(seeds, kgo.SASL(plain.Auth{User: "alice", Pass: "alice-pass"}.AsMechanism()), kgo.RecordRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	if err := alice.ProduceSync(rctx, &kgo.Record{Topic: "t0", Key: []byte("k"), Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice without ACLs: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	anon, err := kgo.NewClient(seeds, kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := kadm.NewClient(anon).ListTopics(rctx); err == nil {
		t.Fatal("a client without SASL listed topics")
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev-cluster returned %v", err)
	}
	logged := stderr.String()
	if strings.Contains(logged, "in-pass") || strings.Contains(logged, "alice-pass") {
		t.Fatalf("a password reached the log:\n%s", logged)
	}
	if !strings.Contains(logged, "alice") || !strings.Contains(logged, "acls=true") {
		t.Fatalf("the ready line does not name the users and the authorizer:\n%s", logged)
	}
}

// freePortPair returns a port P such that P and P+1 were free a moment ago.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p >= 65535 {
			continue
		}
		if ln2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			ln2.Close()
			return p
		}
	}
	t.Fatal("no two adjacent free ports found")
	return 0
}

// devProcess is a running `kmirror dev-cluster`.
type devProcess struct {
	cmd    *exec.Cmd
	lines  chan string // stdout lines; closed at EOF
	stderr *syncBuffer
}

// startDevCluster starts the binary and waits for its bootstrap line. It
// returns ok=false (and no error) when the ports were taken in the meantime,
// so the caller can pick others.
func startDevCluster(t *testing.T, bin string, args ...string) (p *devProcess, bootstrap string, ok bool) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev-cluster"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p = &devProcess{cmd: cmd, lines: make(chan string, 16), stderr: new(syncBuffer)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	select {
	case line, open := <-p.lines:
		if !open {
			err := cmd.Wait()
			if strings.Contains(p.stderr.String(), "already in use") {
				return nil, "", false
			}
			t.Fatalf("dev-cluster exited before printing the bootstrap line (%v):\n%s", err, p.stderr)
		}
		rest, found := strings.CutPrefix(line, "bootstrap: ")
		if !found {
			t.Fatalf("first stdout line %q is not the bootstrap line", line)
		}
		return p, rest, true
	case <-time.After(3 * time.Minute): // Kafka brokers are JVMs, slow to start on a loaded machine
		t.Fatalf("no bootstrap line within 3 minutes; stderr:\n%s", p.stderr)
	}
	return nil, "", false
}

// stop sends SIGTERM and returns the exit code.
func (p *devProcess) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("dev-cluster did not stop within 30s of SIGTERM; stderr:\n%s", p.stderr)
		return -1
	}
}

// TestDevClusterBinary runs the real binary on each engine: two brokers on
// fixed ports, produce and consume through them, refuse a keyless record on
// a compacted topic (the strict layer on the embedded engine, the broker
// itself on Kafka), and exit 0 on SIGTERM with nothing else on stdout and,
// on Kafka, no broker JVM left behind.
func TestDevClusterBinary(t *testing.T) {
	for _, engine := range []string{"embedded", "kafka"} {
		t.Run(engine, func(t *testing.T) { testDevClusterBinary(t, engine) })
	}
}

func testDevClusterBinary(t *testing.T, engine string) {
	bin := kmirrorbin.Path(t)
	name := "bin-test-" + engine

	var (
		p         *devProcess
		bootstrap string
		port      int
	)
	for attempt := 0; ; attempt++ {
		port = freePortPair(t)
		var ok bool
		p, bootstrap, ok = startDevCluster(t, bin, "--engine", engine, "--name", name, "--brokers", "2", "--port", strconv.Itoa(port), "--log-level", "warn")
		if ok {
			break
		}
		if attempt == 4 {
			t.Fatal("ports kept being taken by something else")
		}
	}
	if want := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", port, port+1); bootstrap != want {
		t.Fatalf("bootstrap %q, want %q", bootstrap, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.DefaultProduceTopic("demo"),
		kgo.ConsumeTopics("demo"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	meta, err := adm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantID := name
	if engine == "kafka" {
		wantID = devcluster.KafkaClusterID(name)
	}
	if meta.Cluster != wantID || len(meta.Brokers) != 2 {
		t.Fatalf("metadata: cluster %q with %d brokers, want %s with 2", meta.Cluster, len(meta.Brokers), wantID)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "demo"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	seen := make(map[string]bool)
	for len(seen) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(seen), n)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}

	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "compacted"); err != nil {
		t.Fatal(err)
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "compacted", Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("keyless record on a compacted topic: %v, want INVALID_RECORD", err)
	}
	cl.Close()

	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr)
	}
	for line := range p.lines {
		t.Errorf("unexpected extra stdout line %q", line)
	}
	if engine == "kafka" {
		if jvms := brokerJVMs(t, name); len(jvms) > 0 {
			t.Fatalf("broker JVMs %v still run after dev-cluster exited", jvms)
		}
	}
}

// brokerJVMs lists the pids of the Kafka engine's broker processes of the
// cluster named name (their command lines hold its data directory).
func brokerJVMs(t *testing.T, name string) []string {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", "kafka.Kafka .*kmirror-kafka-"+name+"-").Output()
	if err != nil {
		return nil // pgrep exits 1 when nothing matches
	}
	return strings.Fields(string(out))
}

// TestDevClusterKafkaKilled: a dev-cluster killed with SIGKILL (no deferred
// close) takes its broker JVMs with it, and the next dev-cluster to start
// removes the directory it left.
func TestDevClusterKafkaKilled(t *testing.T) {
	bin := kmirrorbin.Path(t)
	const name = "killed"
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the dev-cluster's, and devcluster.Start's below
	p, _, ok := startDevCluster(t, bin, "--engine", "kafka", "--name", name, "--port", "0", "--log-level", "warn")
	if !ok {
		t.Fatal("ports taken")
	}
	if jvms := brokerJVMs(t, name); len(jvms) != 1 {
		t.Fatalf("broker JVMs of a running 1-broker cluster: %v, want 1", jvms)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		jvms := brokerJVMs(t, name)
		if len(jvms) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker JVMs %v outlived their SIGKILLed dev-cluster", jvms)
		}
		time.Sleep(100 * time.Millisecond)
	}
	left, err := filepath.Glob(filepath.Join(tmp, "kmirror-kafka-"+name+"-*"))
	if err != nil || len(left) != 1 {
		t.Fatalf("directories the killed dev-cluster left: %v (%v), want its one", left, err)
	}
	// pgrep no longer lists a JVM that is exiting; its process is gone
	// once reaped.
	owners, err := os.ReadFile(filepath.Join(left[0], "kmirror-owners"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(owners)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("owner file %q: %v", owners, err)
		}
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("process %d, an owner of the killed dev-cluster's directory, still exists", pid)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c, err := devcluster.Start(devcluster.Name("after"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := os.Stat(left[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after the next dev-cluster started (stat: %v)", left[0], err)
	}
}

// syncBuffer lets the test read stderr while exec copies into it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevClusterTLS runs the command with --tls and --tls-ca-out: a client
// trusting the written CA connects with SCRAM over TLS (SASL_SSL), one
// without TLS does not.
func TestDevClusterTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	bootstrap, _, done := devClusterInProcess(ctx, t, "--port", "0", "--tls", "--tls-ca-out", caFile, "--sasl-user", "alice:alice-pass")
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("--tls-ca-out wrote no certificate: %q", caPEM)
	}
	seeds := kgo.SeedBrokers(strings.Split(bootstrap, ",")...)
	auth := kgo.SASL(scram.Auth{User: "alice", Pass: "alice-pass"}.AsSha512Mechanism())
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	cl, err := kgo.NewClient(seeds, auth, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(rctx); err != nil {
		t.Fatalf("SASL_SSL client trusting the CA: %v", err)
	}
	plainCl, err := kgo.NewClient(seeds, auth, kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer plainCl.Close()
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if err := plainCl.Ping(pctx); err == nil {
		t.Error("a client without TLS connected")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("dev-cluster: %v", err)
	}
}

// TestDevClusterLatency runs the command in-process with --latency and
// --bandwidth: a request on an open connection takes at least the round
// trip, and the log says what link the cluster is behind.
func TestDevClusterLatency(t *testing.T) {
	const latency = 40 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bootstrap, stderr, done := devClusterInProcess(ctx, t, "--port", "0", "--latency", latency.String(), "--bandwidth", "100MB")
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	if err := cl.Ping(rctx); err != nil { // opens the connection
		t.Fatal(err)
	}
	start := time.Now()
	if err := cl.Ping(rctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*latency {
		t.Fatalf("a request took %s, less than the round trip of --latency %s", d, latency)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "link=\"40ms one-way, 100MB/s\"") {
		t.Fatalf("the log does not say what link the cluster is behind:\n%s", stderr)
	}
}
