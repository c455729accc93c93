package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/internal/certs"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestSecretsNeverLeak runs `kmirror agent` as a process against a TLS +
// SASL destination, with mirrors from a TLS + SASL source whose secrets are
// literal (sealed by the agent), ${env:} and ${file:} references, a wrong
// password and its correction, and requests that fail. Then it searches the
// agent's log (at trace level), every API response body and the bytes of
// the __kmirror_state topic for every secret value: none may appear. The
// state topic holds the literal secrets as ciphertext, which the agent
// opens again after a restart to keep mirroring.
func TestSecretsNeverLeak(t *testing.T) {
	// Every secret is distinctive, so that a hit is a leak, not chance.
	sec := map[string]string{
		"literal password":          "lit-pw-Q7v2Xk9f",
		"wrong password":            "wrong-pw-Hn4p8Tz1",
		"corrected password":        "fixed-pw-Rb6m3Wq8",
		"env password":              "env-pw-Lc5s9Vd2",
		"file password":             "file-pw-Yt3k7Gj4",
		"destination password":      "dst-pw-Ma8r2Np6",
		"destination file password": "dst-file-pw-Ke4w6Hs9",
	}
	ca, err := certs.NewCA("leak test clients")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Client("kmirror")
	if err != nil {
		t.Fatal(err)
	}
	// The first line of the PEM key's body: whatever escapes its line
	// breaks (JSON does), the line itself stays as it is.
	sec["tls key"] = strings.Split(string(client.KeyPEM), "\n")[1]

	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.TLS(),
		devcluster.SASLUser("lit", sec["literal password"]),
		devcluster.SASLUser("fix", sec["corrected password"]),
		devcluster.SASLUser("env", sec["env password"]),
		devcluster.SASLUser("file", sec["file password"]),
		devcluster.SASLUser("app", "app-pass"),
		devcluster.KfakeOptions(kfake.SeedTopics(1, "orders", "payments", "audit", "events")))
	dst := devclustertest.Start(t, devcluster.Name("dst"), devcluster.TLS(),
		devcluster.SASLUser("agent", sec["destination file password"]), devcluster.SuperUser("agent"),
		devcluster.SASLUser("dstapp", sec["destination password"]))

	dir := t.TempDir()
	write := func(name, content string) string { return writeFile(t, dir, name, content) }
	keyHex := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	sec["secret key"] = keyHex
	keyFile := write("secret.key", keyHex+"\n")
	srcCA := write("src-ca.pem", string(src.CACertPEM()))
	dstCA := write("dst-ca.pem", string(dst.CACertPEM()))
	props := write("kafka.properties", "# the source's credentials\nsasl.password="+sec["file password"]+"\n")
	dstProps := write("dst.properties", "password = "+sec["destination file password"]+"\n")

	setup := agentSetup{Dir: dir, Listen: devclustertest.FreeAddr(t), Path: filepath.Join(dir, "agent.hcl")}
	// The destination's password comes from a properties file ($${} is
	// HCL's escape for ${}); the literal destination password of the
	// unused user is in the config too, to be searched for in the logs.
	write("agent.hcl", fmt.Sprintf(`
destination {
  bootstrap_servers = [%q]
  sasl {
    mechanism = "SCRAM-SHA-512"
    username  = "agent"
    password  = "$${file:%s:password}"
  }
  tls {
    ca_file = %q
  }
}
listen          = %q
log_level       = "trace"
secret_key_file = %q
# not used to connect: only so that the search below covers a literal in the config
mirror "unused" {
  source {
    bootstrap_servers = [%q]
    sasl {
      mechanism = "PLAIN"
      username  = "dstapp"
      password  = "$${env:KMIRROR_LEAK_UNUSED}"
    }
    tls {
      ca_file = %q
    }
  }
}
`, dst.Bootstrap()[0], dstProps, dstCA, setup.Listen, keyFile, src.Bootstrap()[0], srcCA))
	t.Setenv("KMIRROR_LEAK_ENV_PW", sec["env password"])
	t.Setenv("KMIRROR_LEAK_UNUSED", sec["destination password"])

	agent := startAgentProcess(t, setup, "agent")
	base := "http://" + setup.Listen
	rec := &apiRecorder{base: base}
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		return rec.call(t, method, path, body, want)
	}
	waitReady(t, base)

	srcTLS := fmt.Sprintf(`"tls":{"ca_pem":%q}`, src.CACertPEM())
	spec := func(name, topic, mech, user, pass, extraTLS string) string {
		tlsPart := srcTLS
		if extraTLS != "" {
			tlsPart = strings.TrimSuffix(srcTLS, "}") + "," + extraTLS + "}"
		}
		return fmt.Sprintf(`{"name":%q,"source":{"bootstrap_servers":[%q],"sasl":{"mechanism":%q,"username":%q,"password":%q},%s},"topics":[%q]}`,
			name, src.Bootstrap()[0], mech, user, pass, tlsPart, topic)
	}
	clientTLS := fmt.Sprintf(`"cert_pem":%q,"key_pem":%q`, client.CertPEM, client.KeyPEM)
	call("POST", "/v1/mirrors", spec("lit", "orders", "SCRAM-SHA-256", "lit", sec["literal password"], clientTLS), 201)
	call("POST", "/v1/mirrors", spec("env", "audit", "SCRAM-SHA-512", "env", "${env:KMIRROR_LEAK_ENV_PW}", ""), 201)
	call("POST", "/v1/mirrors", spec("file", "events", "PLAIN", "file", "${file:"+props+":sasl.password}", ""), 201)
	call("POST", "/v1/mirrors", spec("fix", "payments", "PLAIN", "fix", sec["wrong password"], ""), 201)
	// Refused requests: what they say must not hold what they were sent.
	call("POST", "/v1/mirrors", spec("lit", "orders", "PLAIN", "lit", sec["literal password"], ""), 409)
	call("POST", "/v1/mirrors", strings.Replace(spec("bad", "logs", "PLAIN", "x", sec["literal password"], ""), `"username"`, `"user_name"`, 1), 400)
	call("POST", "/v1/mirrors", strings.Replace(spec("bad", "logs", "PLAIN", "x", sec["literal password"], ""), `"mechanism":"PLAIN"`, `"mechanism":"GSSAPI"`, 1), 400)
	call("POST", "/v1/mirrors", strings.Replace(spec("bad", "logs", "PLAIN", "x", "", ""), `"password":""`, `"password":["`+sec["literal password"]+`"]`, 1), 400)
	call("POST", "/v1/mirrors", spec("bad", "logs", "PLAIN", "x", mirrorapi.Redacted, ""), 400)

	// The wrong password is a mirror error (the source refuses it; kfake
	// closes the connection where Kafka answers SASL_AUTHENTICATION_FAILED),
	// then the update corrects it.
	waitUntil(t, 30*time.Second, "mirror fix to fail authenticating", func() (bool, string) {
		var m mirrorapi.Mirror
		_ = json.Unmarshal(call("GET", "/v1/mirrors/fix", "", 200), &m)
		return strings.Contains(m.Error, "connecting to source"), m.Error
	})
	fixed := strings.Replace(spec("fix", "payments", "PLAIN", "fix", sec["corrected password"], ""), `"name":"fix",`, "", 1)
	call("PUT", "/v1/mirrors/fix", fixed, 200)

	srcCl := newSecuredClient(t, src, "app", "app-pass")
	for _, topic := range []string{"orders", "payments", "audit", "events"} {
		produceSecured(t, srcCl, topic, 5)
	}
	waitMirrorOffsets := func(n int64) {
		t.Helper()
		rec.waitMirrorOffsets(t, n, 4)
	}
	waitMirrorOffsets(5)

	// Describe shows literals as redacted and references as written.
	var lit, file mirrorapi.Mirror
	_ = json.Unmarshal(call("GET", "/v1/mirrors/lit", "", 200), &lit)
	_ = json.Unmarshal(call("GET", "/v1/mirrors/file", "", 200), &file)
	if lit.Source.SASL == nil || lit.Source.SASL.Password != mirrorapi.Redacted || lit.Source.TLS == nil || lit.Source.TLS.KeyPEM != mirrorapi.Redacted || lit.Source.SASL.Username != "lit" {
		t.Errorf("describe of lit: %+v", lit.Source)
	}
	if file.Source.SASL == nil || file.Source.SASL.Password != "${file:"+props+":sasl.password}" {
		t.Errorf("describe of file: %+v", file.Source)
	}
	call("GET", "/v1/mirrors/lit/offsets", "", 200)
	call("GET", "/metrics", "", 200)

	// A restart reads the sealed secrets back from the state topic.
	agent.Stop()
	agent = startAgentProcess(t, setup, "agent-restarted")
	_ = agent
	waitReady(t, base)
	for _, topic := range []string{"orders", "payments", "audit", "events"} {
		produceSecured(t, srcCl, topic, 3)
	}
	waitMirrorOffsets(8)
	agent.Stop()

	// The search.
	logs, err := os.ReadFile(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	logs2, err := os.ReadFile(filepath.Join(dir, "agent-restarted.log"))
	if err != nil {
		t.Fatal(err)
	}
	state := stateTopicBytes(t, dst, "agent", sec["destination file password"])
	places := map[string][]byte{"the agent's log": append(logs, logs2...), "the API's responses": rec.bodies.Bytes(), "the state topic": state}
	searchLeaks(t, places, sec)
	// The state topic has the literal secrets of lit (password and key)
	// and fix (wrong, then corrected password) sealed, and references as
	// written.
	if n := bytes.Count(state, []byte(secrets.SealedPrefix)); n < 3 {
		t.Errorf("the state topic holds %d sealed values, want at least 3", n)
	}
	for _, ref := range []string{"${env:KMIRROR_LEAK_ENV_PW}", "${file:" + props + ":sasl.password}"} {
		if !bytes.Contains(state, []byte(ref)) {
			t.Errorf("the state topic does not hold the reference %s", ref)
		}
	}
	t.Logf("searched %d bytes of logs, %d bytes of responses, %d bytes of the state topic for %d secrets; %d sealed values in the state topic",
		len(places["the agent's log"]), rec.bodies.Len(), len(state), len(sec), bytes.Count(state, []byte(secrets.SealedPrefix)))
}

// TestSecretsNeverLeakSASL is TestSecretsNeverLeak on real brokers: the
// shared secured clusters (SASL, the StandardAuthorizer), where the source
// users are SCRAM users this test creates (Kafka takes SCRAM credentials at
// run time; PLAIN users and TLS are fixed when a cluster starts, which is
// why TestSecretsNeverLeak, with PLAIN users, a TLS source and a client
// key, stays on the embedded engine). The agent runs as a process as the
// destination's super user, its password read from a properties file;
// mirrors have literal (sealed), ${env:} and ${file:} passwords and a wrong
// one that a real broker refuses (SASL_AUTHENTICATION_FAILED) before it is
// corrected. The agent's trace log, every API response and the state topic
// are searched for every secret value.
func TestSecretsNeverLeakSASL(t *testing.T) {
	engines := kafkaEngines(false)
	if len(engines) == 0 {
		t.Log("no Kafka engine selected (KMIRROR_E2E_ENGINES): TestSecretsNeverLeak covers the embedded engine")
	}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { testSecretsNeverLeakSASL(t, e) })
	}
}

func testSecretsNeverLeakSASL(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{secured: true})
	sec := map[string]string{
		"literal password":     "lit-pw-Fq8z3Nc5",
		"wrong password":       "wrong-pw-Vd2k7Lm9",
		"corrected password":   "fixed-pw-Hs4t6Bx1",
		"env password":         "env-pw-Pw9c2Jr6",
		"file password":        "file-pw-Ug5n8Qe3",
		"unused password":      "unused-pw-Ta7m1Ky4",
		"destination password": agentPass,
	}
	// The source users, with ACLs to read this test's topics, and gone
	// (with their ACLs) when it ends.
	topics := map[string]string{} // user -> topic
	var upserts []kadm.UpsertSCRAM
	var deletes []kadm.DeleteSCRAM
	for user, pw := range map[string]string{"lit": sec["literal password"], "env": sec["env password"], "file": sec["file password"], "fix": sec["corrected password"]} {
		name := p.name("leak-" + user)
		topics[user] = p.name("leak-" + user + "-topic")
		createTopic(t, p.srcCl, topics[user], 1, nil)
		for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
			upserts = append(upserts, kadm.UpsertSCRAM{User: name, Mechanism: m, Iterations: 4096, Password: pw})
			deletes = append(deletes, kadm.DeleteSCRAM{User: name, Mechanism: m})
		}
		dropACLsAtEnd(t, p.srcCl, principalFilter("User:"+name))
		for _, b := range []*kadm.ACLBuilder{
			kadm.NewACLs().Topics(topics[user]).Operations(kadm.OpAll),
			kadm.NewACLs().Clusters().Operations(kadm.OpDescribe, kadm.OpDescribeConfigs),
			kadm.NewACLs().Groups("*").TransactionalIDs("*").Operations(kadm.OpDescribe),
		} {
			rs, err := p.srcAdm.CreateACLs(testCtx(t), b.Allow("User:"+name).AllowHosts("*"))
			if err == nil {
				for _, r := range rs {
					err = errors.Join(err, r.Err)
				}
			}
			if err != nil {
				t.Fatalf("ACLs of %s: %v", name, err)
			}
		}
	}
	// Kafka takes one change per user and request: a request per
	// mechanism.
	for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
		var ups []kadm.UpsertSCRAM
		var dels []kadm.DeleteSCRAM
		for i := range upserts {
			if upserts[i].Mechanism == m {
				ups, dels = append(ups, upserts[i]), append(dels, deletes[i])
			}
		}
		rs, err := p.srcAdm.AlterUserSCRAMs(testCtx(t), nil, ups)
		if err == nil {
			for _, r := range rs {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatalf("creating the SCRAM users: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), failWait)
			defer cancel()
			if _, err := p.srcAdm.AlterUserSCRAMs(ctx, dels, nil); err != nil {
				t.Errorf("deleting the SCRAM users: %v", err)
			}
		})
	}

	dir := t.TempDir()
	write := func(name, content string) string { return writeFile(t, dir, name, content) }
	keyHex := "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"
	sec["secret key"] = keyHex
	keyFile := write("secret.key", keyHex+"\n")
	props := write("kafka.properties", "# the source's credentials\nsasl.password="+sec["file password"]+"\n")
	dstProps := write("dst.properties", "password = "+agentPass+"\n")
	setup := agentSetup{Dir: dir, Listen: devclustertest.FreeAddr(t), Path: filepath.Join(dir, "agent.hcl")}
	write("agent.hcl", fmt.Sprintf(`
destination {
  bootstrap_servers = %s
  sasl {
    mechanism = "SCRAM-SHA-512"
    username  = %q
    password  = "$${file:%s:password}"
  }
}
state_topic     = %q
listen          = %q
log_level       = "trace"
secret_key_file = %q
# not used to connect: only so that the search below covers a reference's value
mirror "unused" {
  source {
    bootstrap_servers = %s
    sasl {
      mechanism = "PLAIN"
      username  = "nobody"
      password  = "$${env:KMIRROR_LEAK_SASL_UNUSED}"
    }
  }
}
`, hclList(p.dst.Bootstrap()), agentUser, dstProps, p.stateTopic, setup.Listen, keyFile, hclList(p.src.Bootstrap())))
	t.Setenv("KMIRROR_LEAK_SASL_ENV_PW", sec["env password"])
	t.Setenv("KMIRROR_LEAK_SASL_UNUSED", sec["unused password"])

	agent := startAgentProcess(t, setup, "agent")
	base := "http://" + setup.Listen
	rec := &apiRecorder{base: base}
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		return rec.call(t, method, path, body, want)
	}
	waitReady(t, base)

	srcBoot, _ := json.Marshal(p.src.Bootstrap())
	spec := func(name, user, mech, pass string) string {
		return fmt.Sprintf(`{"name":%q,"source":{"bootstrap_servers":%s,"sasl":{"mechanism":%q,"username":%q,"password":%q}},"topics":[%q]}`,
			name, srcBoot, mech, p.name("leak-"+user), pass, topics[user])
	}
	call("POST", "/v1/mirrors", spec("lit", "lit", "SCRAM-SHA-256", sec["literal password"]), 201)
	call("POST", "/v1/mirrors", spec("env", "env", "SCRAM-SHA-512", "${env:KMIRROR_LEAK_SASL_ENV_PW}"), 201)
	call("POST", "/v1/mirrors", spec("file", "file", "SCRAM-SHA-512", "${file:"+props+":sasl.password}"), 201)
	call("POST", "/v1/mirrors", spec("fix", "fix", "SCRAM-SHA-256", sec["wrong password"]), 201)
	// Refused requests: what they say must not hold what they were sent.
	call("POST", "/v1/mirrors", spec("lit", "lit", "SCRAM-SHA-512", sec["literal password"]), 409)
	call("POST", "/v1/mirrors", strings.Replace(spec("bad", "lit", "PLAIN", sec["literal password"]), `"username"`, `"user_name"`, 1), 400)
	call("POST", "/v1/mirrors", strings.Replace(spec("bad", "lit", "PLAIN", sec["literal password"]), `"mechanism":"PLAIN"`, `"mechanism":"GSSAPI"`, 1), 400)
	call("POST", "/v1/mirrors", strings.Replace(spec("bad", "lit", "PLAIN", ""), `"password":""`, `"password":["`+sec["literal password"]+`"]`, 1), 400)
	call("POST", "/v1/mirrors", spec("bad", "lit", "PLAIN", mirrorapi.Redacted), 400)

	// The wrong password is a mirror error (the broker answers
	// SASL_AUTHENTICATION_FAILED), then the update corrects it.
	waitUntil(t, 60*time.Second, "mirror fix to fail authenticating", func() (bool, string) {
		var m mirrorapi.Mirror
		_ = json.Unmarshal(call("GET", "/v1/mirrors/fix", "", 200), &m)
		return strings.Contains(m.Error, "connecting to source"), m.Error
	})
	fixed := strings.Replace(spec("fix", "fix", "SCRAM-SHA-256", sec["corrected password"]), `"name":"fix",`, "", 1)
	call("PUT", "/v1/mirrors/fix", fixed, 200)

	produce := func(n int) {
		for _, topic := range topics {
			produceSecured(t, p.srcCl, topic, n)
		}
	}
	produce(5)
	waitMirrorOffsets := func(n int64) {
		t.Helper()
		rec.waitMirrorOffsets(t, n, 4)
	}
	waitMirrorOffsets(5)

	// Describe shows literals as redacted and references as written.
	var lit, file mirrorapi.Mirror
	_ = json.Unmarshal(call("GET", "/v1/mirrors/lit", "", 200), &lit)
	_ = json.Unmarshal(call("GET", "/v1/mirrors/file", "", 200), &file)
	if lit.Source.SASL == nil || lit.Source.SASL.Password != mirrorapi.Redacted || lit.Source.SASL.Username != p.name("leak-lit") {
		t.Errorf("describe of lit: %+v", lit.Source)
	}
	if file.Source.SASL == nil || file.Source.SASL.Password != "${file:"+props+":sasl.password}" {
		t.Errorf("describe of file: %+v", file.Source)
	}
	call("GET", "/v1/mirrors/lit/offsets", "", 200)
	call("GET", "/metrics", "", 200)

	// A restart reads the sealed secrets back from the state topic.
	agent.Stop()
	agent = startAgentProcess(t, setup, "agent-restarted")
	waitReady(t, base)
	produce(3)
	waitMirrorOffsets(8)
	agent.Stop()

	logs, err := os.ReadFile(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	logs2, err := os.ReadFile(filepath.Join(dir, "agent-restarted.log"))
	if err != nil {
		t.Fatal(err)
	}
	state := stateTopicBytesWith(t, []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass)}, p.stateTopic)
	places := map[string][]byte{"the agent's log": append(logs, logs2...), "the API's responses": rec.bodies.Bytes(), "the state topic": state}
	searchLeaks(t, places, sec)
	// lit's password and fix's wrong, then corrected, password sealed;
	// references as written.
	if n := bytes.Count(state, []byte(secrets.SealedPrefix)); n < 3 {
		t.Errorf("the state topic holds %d sealed values, want at least 3", n)
	}
	for _, ref := range []string{"${env:KMIRROR_LEAK_SASL_ENV_PW}", "${file:" + props + ":sasl.password}"} {
		if !bytes.Contains(state, []byte(ref)) {
			t.Errorf("the state topic does not hold the reference %s", ref)
		}
	}
	t.Logf("searched %d bytes of logs, %d bytes of responses, %d bytes of the state topic for %d secrets; %d sealed values in the state topic",
		len(places["the agent's log"]), rec.bodies.Len(), len(state), len(sec), bytes.Count(state, []byte(secrets.SealedPrefix)))
}

// apiRecorder calls an agent's API and keeps every response body, to be
// searched for secrets.
type apiRecorder struct {
	base   string
	bodies bytes.Buffer
}

// call sends a request and fails the test unless the status is want.
func (r *apiRecorder) call(t *testing.T, method, path, body string, want int) []byte {
	t.Helper()
	code, b := r.do(t, method, path, body)
	if code != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, b)
	}
	return b
}

// do is call without the check: the status and the body.
func (r *apiRecorder) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Fprintf(&r.bodies, "%s %s -> %d\n%s\n", method, path, resp.StatusCode, b)
	return resp.StatusCode, b
}

// waitMirrorOffsets waits until want partitions are MIRRORING at
// destination offset n. A list answered 503 COORDINATOR_LOAD_IN_PROGRESS
// (a mirror between agents of the group, or given to a restarted agent
// that waits out its previous process's session first) is asked again, as
// the CLI and the provider do; any other answer than 200 fails the test.
func (r *apiRecorder) waitMirrorOffsets(t *testing.T, n int64, want int) {
	t.Helper()
	waitUntil(t, 60*time.Second, fmt.Sprintf("every mirror at offset %d", n), func() (bool, string) {
		code, b := r.do(t, "GET", "/v1/mirrors", "")
		if code == http.StatusServiceUnavailable && bytes.Contains(b, []byte(mirrorapi.CodeNotReady)) {
			return false, string(b)
		}
		if code != http.StatusOK {
			t.Fatalf("GET /v1/mirrors: %d, want 200: %s", code, b)
		}
		var d mirrorapi.DescribeResponse
		_ = json.Unmarshal(b, &d)
		done := 0
		for _, p := range describedPartitions(d.Mirrors) {
			if p.DestinationOffset == n && p.State == mirrorapi.StateMirroring {
				done++
			}
		}
		return done == want, string(b)
	})
}

// searchLeaks fails the test for every secret (a name and its value) found
// in a place (a name and its bytes), and for a place too small to mean
// anything.
func searchLeaks(t *testing.T, places map[string][]byte, secrets map[string]string) {
	t.Helper()
	for where, b := range places {
		if len(b) < 100 {
			t.Fatalf("%s: only %d bytes to search", where, len(b))
		}
		for what, v := range secrets {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s holds the %s", where, what)
			}
		}
	}
}

// writeFile writes a file of the test's in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// hclList is ss as an HCL list of strings.
func hclList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestAgentRefusesLiteralSecretWithoutKey: an agent without a secret key
// takes references but refuses literal secrets, saying how to configure a
// key or use a reference.
func TestAgentRefusesLiteralSecretWithoutKey(t *testing.T) {
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.SASLUser("env", "env-pw-Zp4c8Ru3"),
		devcluster.KfakeOptions(kfake.SeedTopics(1, "orders")))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	setup := writeAgentConfig(t, dst)
	t.Setenv("KMIRROR_NOKEY_PW", "env-pw-Zp4c8Ru3")
	a := startAgentProcess(t, setup, "agent")
	waitReady(t, "http://"+setup.Listen)
	ctx := context.Background()
	spec := mirrorapi.MirrorSpec{Name: "dr", Topics: []string{"orders"}, Source: mirrorapi.Source{
		BootstrapServers: src.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-256", Username: "env", Password: "env-pw-Zp4c8Ru3"}}}
	_, err := a.api.Create(ctx, spec)
	if !mirrorapi.IsCode(err, mirrorapi.CodeInvalidConfig) {
		t.Fatalf("a literal secret without a key: %v", err)
	}
	for _, want := range []string{"source.sasl.password", "secret_key_file", "--secret-key-file", "KMIRROR_SECRET_KEY_FILE", "${env:NAME}", "${file:PATH:KEY}"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "env-pw-Zp4c8Ru3") {
		t.Errorf("the refusal holds the password: %v", err)
	}
	spec.Source.SASL.Password = "${env:KMIRROR_NOKEY_PW}"
	if _, err := a.api.Create(ctx, spec); err != nil {
		t.Fatalf("a reference without a key: %v", err)
	}
	waitUntil(t, 30*time.Second, "mirror dr to run", func() (bool, string) {
		m, err := a.api.Mirror(ctx, "dr")
		return err == nil && m.Error == "" && m.StateCounts[mirrorapi.StateMirroring] == 1, fmt.Sprintf("%+v %v", m, err)
	})
}

// waitReady polls /readyz until the agent has loaded its state.
func waitReady(t *testing.T, base string) {
	t.Helper()
	waitUntil(t, 30*time.Second, "/readyz", func() (bool, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}

// waitFor polls cond until it holds, failing the test after timeout with
// cond's last word.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, why := poll(timeout, cond); !ok {
		t.Fatalf("waiting for %s: %s", what, why)
	}
}

// newSecuredClient connects to a TLS + SASL dev cluster as user.
func newSecuredClient(t *testing.T, c *devcluster.Cluster, user, pass string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.DialTLSConfig(c.ClientTLS()),
		kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produceSecured(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// stateTopicBytes returns the keys and values of every record of the
// agent's state topic, read as user.
func stateTopicBytes(t *testing.T, c *devcluster.Cluster, user, pass string) []byte {
	t.Helper()
	return stateTopicBytesWith(t, []kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.DialTLSConfig(c.ClientTLS()),
		kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}, "__kmirror_state")
}

// stateTopicBytesWith returns the keys and values of every record of the
// state topic topic, read through a client with opts.
func stateTopicBytesWith(t *testing.T, opts []kgo.Opt, topic string) []byte {
	t.Helper()
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	var out bytes.Buffer
	got := map[int32]int64{}
	reached := func() bool {
		for p, end := range want {
			if got[p] < end {
				return false
			}
		}
		return true
	}
	for idle := 0; !reached() && idle < 5; {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			out.Write(r.Key)
			out.WriteByte(' ')
			out.Write(r.Value)
			out.WriteByte('\n')
			got[r.Partition] = r.Offset + 1
		})
		if n == 0 {
			idle++ // the end may be a transaction marker, never returned
		}
	}
	return out.Bytes()
}
