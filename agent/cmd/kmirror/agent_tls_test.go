package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/internal/certs"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// tlsAgent is `kmirror agent` run in-process with an HTTPS API that wants a
// bearer token and a client certificate, a TLS + SASL destination from its
// config file and a TLS + SASL source cluster.
type tlsAgent struct {
	base              string
	dir               string
	ca                *certs.CA // signed the API's certificate and the client's
	caFile            string
	certFile, keyFile string // a client certificate the agent accepts
	src, dst          *devcluster.Cluster
	srcPass           string
}

const tlsToken = "tls-token-1"

func startTLSAgent(t *testing.T) *tlsAgent {
	t.Helper()
	a := &tlsAgent{dir: t.TempDir(), srcPass: "src-pass-Jq2w"}
	var err error
	if a.ca, err = certs.NewCA("agent test"); err != nil {
		t.Fatal(err)
	}
	server, err := a.ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	client, err := a.ca.Client("operator")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := server.WriteFiles(a.dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	if a.certFile, a.keyFile, err = client.WriteFiles(a.dir, "client"); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(a.dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a.caFile = write("ca.pem", a.ca.CertPEM())
	tokFile := write("tokens", []byte(tlsToken+"\n"))
	a.src = devclustertest.Start(t, devcluster.Name("src"), devcluster.TLS(), devcluster.SASLUser("reader", a.srcPass),
		devcluster.SASLUser("app", "app-pass"), devcluster.KfakeOptions(kfake.SeedTopics(2, "orders"), kfake.SeedTopics(1, "events")))
	a.dst = devclustertest.Start(t, devcluster.Name("dst"), devcluster.TLS(), devcluster.SASLUser("agent", "agent-pass"))
	dstCA := write("dst-ca.pem", a.dst.CACertPEM())
	cfg := write("agent.hcl", fmt.Appendf(nil, `
destination {
  bootstrap_servers = [%q]
  security_protocol = "SASL_SSL"
  sasl {
    mechanism = "SCRAM-SHA-256"
    username  = "agent"
    password  = "$${env:KMIRROR_TEST_DST_PASSWORD}"
  }
  tls {
    ca_file = %q
  }
}
log_level = "error"
`, a.dst.Bootstrap()[0], dstCA))
	t.Setenv("KMIRROR_TEST_DST_PASSWORD", "agent-pass")
	// From the environment, as a container would pass them.
	t.Setenv("KMIRROR_TLS_CERT_FILE", srvCert)
	t.Setenv("KMIRROR_TLS_KEY_FILE", srvKey)
	t.Setenv("KMIRROR_CLIENT_CA_FILE", a.caFile)
	t.Setenv("KMIRROR_SECRET_KEY_FILE", write("secret.key", []byte(strings.Repeat("5a", 32))))

	addr := devclustertest.FreeAddr(t)
	a.base = "https://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runAgent(ctx, []string{"--config", cfg, "--listen", addr, "--token-file", tokFile})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	// /readyz needs neither token nor client certificate.
	hc := a.httpClient(t, true, false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(a.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the agent exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a
}

// httpClient returns an HTTPS client that trusts the CA when trust is set
// and presents the client certificate when withCert is set.
func (a *tlsAgent) httpClient(t *testing.T, trust, withCert bool) *http.Client {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if trust {
		cfg.RootCAs = a.ca.Pool()
	}
	if withCert {
		pair, err := tls.LoadX509KeyPair(a.certFile, a.keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// client returns the API client with the CA, the client certificate and
// the token.
func (a *tlsAgent) client(t *testing.T) *mirrorapi.Client {
	t.Helper()
	cl := mirrorapi.NewClient(a.base, tlsToken)
	caPEM, _ := os.ReadFile(a.caFile)
	cert, _ := os.ReadFile(a.certFile)
	key, _ := os.ReadFile(a.keyFile)
	if err := cl.SetTLS(mirrorapi.ClientTLS{CAPEM: caPEM, CertPEM: cert, KeyPEM: key}); err != nil {
		t.Fatal(err)
	}
	cl.Backoff = 10 * time.Millisecond
	return cl
}

// TestAgentTLSRoutes: over HTTPS, every route answers 401 (with the same
// body, naming neither what was missing nor why) without a token or without
// a client certificate, but /healthz and /readyz, which need neither; with
// both, every route is served.
func TestAgentTLSRoutes(t *testing.T) {
	a := startTLSAgent(t)
	full := a.httpClient(t, true, true)
	noCert := a.httpClient(t, true, false)
	do := func(hc *http.Client, tok, method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var unauthorized string
	for _, r := range api.Routes() {
		method, pattern, _ := strings.Cut(r, " ")
		path := strings.ReplaceAll(pattern, "{name}", "nope")
		public := path == "/healthz" || path == "/readyz"
		for _, c := range []struct {
			name string
			hc   *http.Client
			tok  string
		}{
			{"no token", full, ""},
			{"wrong token", full, "not-" + tlsToken},
			{"no client certificate", noCert, tlsToken},
		} {
			status, body := do(c.hc, c.tok, method, path, "{}")
			switch {
			case public && status != http.StatusOK:
				t.Errorf("%s %s, %s: %d, want 200", method, path, c.name, status)
			case !public && status != http.StatusUnauthorized:
				t.Errorf("%s %s, %s: %d, want 401: %s", method, path, c.name, status, body)
			case !public && unauthorized == "":
				unauthorized = body
			case !public && body != unauthorized:
				t.Errorf("%s %s, %s: 401 body %q differs from %q: it should not say why", method, path, c.name, body, unauthorized)
			}
		}
		if status, body := do(full, tlsToken, method, path, "{}"); status == http.StatusUnauthorized || status >= 500 {
			t.Errorf("%s %s with token and certificate: %d %s", method, path, status, body)
		}
	}
	if status, _ := do(full, "", "GET", "/metrics", ""); status != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d", status)
	}
	if status, _ := do(full, tlsToken, "GET", "/metrics", ""); status != http.StatusOK {
		t.Errorf("/metrics with token and certificate: %d", status)
	}
}

// TestAgentTLSHandshake: the API's certificate verifies with the CA and
// not without; plain HTTP gets no API answer; a client certificate from
// another CA is refused in the handshake.
func TestAgentTLSHandshake(t *testing.T) {
	a := startTLSAgent(t)
	ctx := context.Background()
	if _, err := a.client(t).Describe(ctx); err != nil {
		t.Fatalf("with the CA, a client certificate and the token: %v", err)
	}
	untrusting := mirrorapi.NewClient(a.base, tlsToken)
	if _, err := untrusting.Describe(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v", err)
	}
	plain := mirrorapi.NewClient(strings.Replace(a.base, "https://", "http://", 1), tlsToken)
	plain.Retries = -1
	if _, err := plain.Describe(ctx); err == nil {
		t.Error("plain HTTP to the TLS port is answered")
	}
	other, err := certs.NewCA("someone else")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Client("intruder")
	if err != nil {
		t.Fatal(err)
	}
	cl := mirrorapi.NewClient(a.base, tlsToken)
	cl.Retries = -1
	if err := cl.SetTLS(mirrorapi.ClientTLS{CAPEM: a.ca.CertPEM(), CertPEM: foreign.CertPEM, KeyPEM: foreign.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Describe(ctx); err == nil {
		t.Error("a client certificate of another CA is accepted")
	}
	insecure := mirrorapi.NewClient(a.base, tlsToken)
	cert, _ := os.ReadFile(a.certFile)
	key, _ := os.ReadFile(a.keyFile)
	if err := insecure.SetTLS(mirrorapi.ClientTLS{InsecureSkipVerify: true, CertPEM: cert, KeyPEM: key}); err != nil {
		t.Fatal(err)
	}
	if _, err := insecure.Describe(ctx); err != nil {
		t.Errorf("insecure_skip_verify: %v", err)
	}

	// The CLI: --ca-cert, --client-cert and --client-key, or the
	// environment.
	args := []string{"--agent", a.base, "--token", tlsToken}
	if _, err := capture(t, runList, args...); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("kmirror list without --ca-cert: %v", err)
	}
	if out, err := capture(t, runList, append(args, "--ca-cert", a.caFile, "--client-cert", a.certFile, "--client-key", a.keyFile)...); err != nil {
		t.Errorf("kmirror list with --ca-cert, --client-cert, --client-key: %v %s", err, out)
	}
	t.Setenv("KMIRROR_CA_CERT", a.caFile)
	t.Setenv("KMIRROR_CLIENT_CERT", a.certFile)
	t.Setenv("KMIRROR_CLIENT_KEY", a.keyFile)
	if out, err := capture(t, runList, args...); err != nil {
		t.Errorf("kmirror list with KMIRROR_CA_CERT, KMIRROR_CLIENT_CERT, KMIRROR_CLIENT_KEY: %v %s", err, out)
	}
	if _, err := capture(t, runList, append(args, "--client-key", "")...); err == nil || !strings.Contains(err.Error(), "--client-cert and --client-key") {
		t.Errorf("kmirror list with --client-cert but no key: %v", err)
	}
}

// TestAgentTLSMirror: through the HTTPS API, a mirror from a SASL_SSL
// source to the SASL_SSL destination of the config file mirrors, and goes
// through every mirror route.
func TestAgentTLSMirror(t *testing.T) {
	a := startTLSAgent(t)
	cl := a.client(t)
	ctx := context.Background()
	spec := mirrorapi.MirrorSpec{Name: "dr", Topics: []string{"orders"}, Source: mirrorapi.Source{
		BootstrapServers: a.src.Bootstrap(),
		SASL:             &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-512", Username: "reader", Password: a.srcPass},
		TLS:              &mirrorapi.SourceTLS{CAPEM: string(a.src.CACertPEM())},
	}}
	m, err := cl.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if m.Source.SASL == nil || m.Source.SASL.Password != mirrorapi.Redacted || m.Source.SecurityProtocol != "" {
		t.Errorf("create answered the source %+v", m.Source)
	}
	if _, err := cl.AddTopics(ctx, "dr", []string{"events"}); err != nil {
		t.Fatal(err)
	}
	app, err := kgo.NewClient(kgo.SeedBrokers(a.src.Bootstrap()...), kgo.DialTLSConfig(a.src.ClientTLS()),
		kgo.SASL(scram.Auth{User: "app", Pass: "app-pass"}.AsSha256Mechanism()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	for _, r := range []*kgo.Record{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: "orders", Partition: 1}, {Topic: "events"}} {
		r.Value = []byte("v")
		if err := app.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{"orders/0": 1, "orders/1": 2, "events/0": 1}
	deadline := time.Now().Add(60 * time.Second)
	for {
		offs, err := cl.Offsets(ctx, "dr", "")
		got := map[string]int64{}
		if err == nil {
			for _, tp := range offs.Topics {
				for _, p := range tp.Partitions {
					got[fmt.Sprintf("%s/%d", tp.Name, p.Partition)] = p.DestinationOffset
				}
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			ms, _ := cl.Describe(ctx)
			t.Fatalf("destination offsets %v, want %v (%v); describe: %+v", got, want, err, ms)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Update with the secret left out keeps it (the sealed value).
	if _, err := cl.Update(ctx, "dr", mirrorapi.MirrorSpec{TopicConfigExclude: []string{"retention.ms"}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.PauseTopics(ctx, "dr", []string{"events"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.ResumeTopics(ctx, "dr", []string{"events"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.StopTopics(ctx, "dr", []string{"events"}, mirrorapi.StopModeFailover); err != nil {
		t.Fatal(err)
	}
	if err := cl.RecoverTopics(ctx, "dr", []string{"orders"}); !mirrorapi.IsCode(err, mirrorapi.CodeInvalidStateTransition) {
		t.Errorf("recovering a mirroring topic: %v", err)
	}
	if _, err := cl.OpenAPI(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, "dr", true); err != nil {
		t.Fatal(err)
	}
}

// TestCLICreateSecuredSource: `kmirror create` with the source's SASL and
// TLS flags, the password from a file and as a reference, through the
// HTTPS agent; both mirrors connect, and describe shows the literal
// password redacted and the reference as written.
func TestCLICreateSecuredSource(t *testing.T) {
	a := startTLSAgent(t)
	t.Setenv("KMIRROR_CA_CERT", a.caFile)
	t.Setenv("KMIRROR_CLIENT_CERT", a.certFile)
	t.Setenv("KMIRROR_CLIENT_KEY", a.keyFile)
	t.Setenv("KMIRROR_TEST_SRC_PASSWORD", a.srcPass)
	srcCA := filepath.Join(a.dir, "src-ca.pem")
	pwFile := filepath.Join(a.dir, "src-password")
	if err := os.WriteFile(srcCA, a.src.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte(a.srcPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--agent", a.base, "--token", tlsToken, "--source-bootstrap", a.src.BootstrapString(),
		"--source-sasl-mechanism", "SCRAM-SHA-256", "--source-sasl-username", "reader", "--source-ca-cert", srcCA}
	if out, err := capture(t, runCreate, append(common, "--mirror", "from-file", "--topic", "orders", "--source-sasl-password-file", pwFile)...); err != nil {
		t.Fatalf("create with --source-sasl-password-file: %v %s", err, out)
	}
	if out, err := capture(t, runCreate, append(common, "--mirror", "from-env", "--topic", "events", "--source-sasl-password", "${env:KMIRROR_TEST_SRC_PASSWORD}")...); err != nil {
		t.Fatalf("create with a reference: %v %s", err, out)
	}
	_, err := capture(t, runCreate, append(common, "--mirror", "bad", "--topic", "logs", "--source-security-protocol", "PLAINTEXT", "--source-sasl-password", "${env:X}")...)
	if !mirrorapi.IsCode(err, mirrorapi.CodeInvalidConfig) || !strings.Contains(err.Error(), "source.sasl: security_protocol PLAINTEXT does not authenticate with SASL") {
		t.Errorf("create with SASL over PLAINTEXT: %v", err)
	}
	cl := a.client(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms, err := cl.Describe(context.Background())
		running := 0
		for _, m := range ms {
			if m.Error == "" && m.StateCounts[mirrorapi.StateMirroring] > 0 {
				running++
			}
			switch m.Name {
			case "from-file":
				if m.Source.SASL == nil || m.Source.SASL.Password != mirrorapi.Redacted {
					t.Fatalf("from-file shows the password as %+v", m.Source.SASL)
				}
			case "from-env":
				if m.Source.SASL == nil || m.Source.SASL.Password != "${env:KMIRROR_TEST_SRC_PASSWORD}" {
					t.Fatalf("from-env shows the password as %+v", m.Source.SASL)
				}
			}
		}
		if running == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirrors not running: %+v %v", ms, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := capture(t, runDescribe, "--agent", a.base, "--token", tlsToken, "--output", "json")
	if err != nil || strings.Contains(out, a.srcPass) || !strings.Contains(out, mirrorapi.Redacted) {
		t.Errorf("kmirror describe --output json: %v, holds the password: %v", err, strings.Contains(out, a.srcPass))
	}
}
