package kafkaconn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func TestSealRedact(t *testing.T) {
	const pw, key = "pw-7c1f-distinctive", "key-9a2e-distinctive"
	box, err := secrets.NewBox([]byte(strings.Repeat("x", secrets.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	in := mirrorapi.Source{BootstrapServers: []string{"h:1"},
		SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: pw},
		TLS:  &mirrorapi.SourceTLS{CertFile: "/c", KeyPEM: key}}
	if _, err := Seal("source", in, nil); err == nil || !strings.Contains(err.Error(), "source.sasl.password") ||
		!strings.Contains(err.Error(), "secret_key_file") || !strings.Contains(err.Error(), "${env:NAME}") || strings.Contains(err.Error(), pw) {
		t.Errorf("sealing a literal without a key: %v", err)
	}
	sealed, err := Seal("source", in, box)
	if err != nil {
		t.Fatal(err)
	}
	if in.SASL.Password != pw || in.TLS.KeyPEM != key {
		t.Fatal("Seal changed its argument")
	}
	if !secrets.IsSealed(sealed.SASL.Password) || !secrets.IsSealed(sealed.TLS.KeyPEM) {
		t.Fatalf("sealed: %+v %+v", sealed.SASL, sealed.TLS)
	}
	// Sealing again keeps sealed values; another key refuses them.
	again, err := Seal("source", sealed, box)
	if err != nil || again.SASL.Password != sealed.SASL.Password {
		t.Errorf("resealing: %v", err)
	}
	other, _ := secrets.NewBox([]byte(strings.Repeat("y", secrets.KeySize)))
	if _, err := Seal("source", sealed, other); err == nil || !strings.Contains(err.Error(), "source.sasl.password") {
		t.Errorf("a value sealed with another key: %v", err)
	}
	// References need no key and stay as written.
	ref := mirrorapi.Source{BootstrapServers: []string{"h:1"}, SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: "${env:PW}"}}
	if got, err := Seal("source", ref, nil); err != nil || got.SASL.Password != "${env:PW}" {
		t.Errorf("sealing a reference: %+v, %v", got.SASL, err)
	}
	for _, c := range []mirrorapi.Source{in, sealed} {
		r := Redact(c)
		if r.SASL.Password != mirrorapi.Redacted || r.TLS.KeyPEM != mirrorapi.Redacted || r.SASL.Username != "u" || r.TLS.CertFile != "/c" {
			t.Errorf("redacted: %+v %+v", r.SASL, r.TLS)
		}
	}
	if r := Redact(ref); r.SASL.Password != "${env:PW}" {
		t.Errorf("a redacted reference: %q", r.SASL.Password)
	}
}

// TestOptions connects to dev clusters with TLS, SASL and both, with
// literal, sealed and referenced secrets, and checks that wrong settings
// fail to connect.
func TestOptions(t *testing.T) {
	const pw = "alice-5e3b-distinctive"
	tlsC := devclustertest.Start(t, devcluster.Name("tls"), devcluster.TLS(), devcluster.SASLUser("alice", pw))
	saslC := devclustertest.Start(t, devcluster.Name("sasl"), devcluster.SASLUser("alice", pw))
	caPEM := string(tlsC.CACertPEM())
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	props := filepath.Join(dir, "kafka.properties")
	if err := os.WriteFile(caFile, []byte(caPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(props, []byte("password="+pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KAFKACONN_TEST_PW", pw)
	box, _ := secrets.NewBox([]byte(strings.Repeat("z", secrets.KeySize)))
	sealedPW, _ := box.Seal(pw)

	for _, tc := range []struct {
		name string
		c    mirrorapi.Source
		ok   bool
	}{
		{"sasl_ssl plain literal", mirrorapi.Source{BootstrapServers: tlsC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "alice", Password: pw}, TLS: &mirrorapi.SourceTLS{CAPEM: caPEM}}, true},
		{"sasl_ssl scram-256 sealed", mirrorapi.Source{BootstrapServers: tlsC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-256", Username: "alice", Password: sealedPW}, TLS: &mirrorapi.SourceTLS{CAFile: caFile}}, true},
		{"sasl_ssl scram-512 env", mirrorapi.Source{BootstrapServers: tlsC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-512", Username: "alice", Password: "${env:KAFKACONN_TEST_PW}"}, TLS: &mirrorapi.SourceTLS{CAPEM: caPEM}}, true},
		{"sasl_plaintext file", mirrorapi.Source{BootstrapServers: saslC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-512", Username: "alice", Password: "${file:" + props + ":password}"}}, true},
		{"insecure skip verify", mirrorapi.Source{BootstrapServers: tlsC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "alice", Password: pw}, TLS: &mirrorapi.SourceTLS{InsecureSkipVerify: true}}, true},
		{"wrong password", mirrorapi.Source{BootstrapServers: saslC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "alice", Password: "nope"}}, false},
		{"system roots", mirrorapi.Source{BootstrapServers: tlsC.Bootstrap(), SecurityProtocol: "SASL_SSL", SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "alice", Password: pw}}, false},
		{"no tls to a tls cluster", mirrorapi.Source{BootstrapServers: tlsC.Bootstrap(), SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "alice", Password: pw}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := Options("source", tc.c, box)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = cl.Ping(ctx)
			if (err == nil) != tc.ok {
				t.Fatalf("ping: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("the error holds the password: %v", err)
			}
		})
	}

	// Secrets that do not resolve fail before connecting, naming the
	// field and never the value.
	for _, tc := range []struct {
		c    mirrorapi.Source
		want string
	}{
		{mirrorapi.Source{BootstrapServers: []string{"h:1"}, SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: "${env:KAFKACONN_UNSET}"}}, "source.sasl.password: ${env:KAFKACONN_UNSET}: the environment variable KAFKACONN_UNSET is not set"},
		{mirrorapi.Source{BootstrapServers: []string{"h:1"}, SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: "${file:" + props + ":nokey}"}}, `source.sasl.password: ${file:` + props + `:nokey}: the properties file ` + props + ` has no key "nokey"`},
		{mirrorapi.Source{BootstrapServers: []string{"h:1"}, TLS: &mirrorapi.SourceTLS{CertFile: caFile, KeyPEM: pw}}, "source.tls: the client certificate and private key do not form a pair"},
		{mirrorapi.Source{BootstrapServers: []string{"h:1"}, TLS: &mirrorapi.SourceTLS{CAFile: filepath.Join(dir, "missing.pem")}}, "source.tls.ca_file: open"},
	} {
		_, err := Options("source", tc.c, box)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), pw) {
			t.Errorf("Options: %v, want %q", err, tc.want)
		}
	}
}
