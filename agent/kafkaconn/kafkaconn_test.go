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
	"github.com/kmirror/kmirror/internal/certs"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func newCA(t *testing.T) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestValidate(t *testing.T) {
	ca := newCA(t)
	b := []string{"h:9092"}
	plain := &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: "p"}
	for _, tc := range []struct {
		name string
		c    mirrorapi.Source
		want []string // each a substring of one message; none means valid
	}{
		{"plaintext", mirrorapi.Source{BootstrapServers: b}, nil},
		{"inferred sasl_ssl", mirrorapi.Source{BootstrapServers: b, SASL: plain, TLS: &mirrorapi.SourceTLS{CAPEM: string(ca.CertPEM())}}, nil},
		{"scram by reference", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "${file:/etc/k.properties:pw}"}}, nil},
		{"oauth static", mirrorapi.Source{BootstrapServers: b, SecurityProtocol: "SASL_SSL", SASL: &mirrorapi.SourceSASL{Mechanism: "OAUTHBEARER", Token: "${env:TOK}"}}, nil},
		{"oauth oidc", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "https://idp/token", ClientID: "c", ClientSecret: "s"}}, nil},
		{"ssl without tls block", mirrorapi.Source{BootstrapServers: b, SecurityProtocol: "SSL"}, nil},
		{"unknown protocol", mirrorapi.Source{BootstrapServers: b, SecurityProtocol: "TLS"}, []string{`x.security_protocol: "TLS": use PLAINTEXT`}},
		{"sasl protocol without sasl", mirrorapi.Source{BootstrapServers: b, SecurityProtocol: "SASL_SSL"}, []string{"x.sasl: security_protocol SASL_SSL needs a sasl block"}},
		{"sasl with plaintext", mirrorapi.Source{BootstrapServers: b, SecurityProtocol: "PLAINTEXT", SASL: plain}, []string{"x.sasl: security_protocol PLAINTEXT does not authenticate"}},
		{"tls with sasl_plaintext", mirrorapi.Source{BootstrapServers: b, SecurityProtocol: "SASL_PLAINTEXT", SASL: plain, TLS: &mirrorapi.SourceTLS{}}, []string{"x.tls: security_protocol SASL_PLAINTEXT does not use TLS"}},
		{"no mechanism", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{}}, []string{"x.sasl.mechanism: missing"}},
		{"bad mechanism", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "GSSAPI"}}, []string{`x.sasl.mechanism: "GSSAPI"`}},
		{"plain without credentials", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN"}}, []string{"x.sasl.username: mechanism PLAIN needs", "x.sasl.password: mechanism PLAIN needs"}},
		{"scram with a token", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p", Token: "t"}}, []string{"x.sasl.token: mechanism SCRAM-SHA-256 does not use it"}},
		{"oauth with a password", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "OAUTHBEARER", Token: "t", Password: "p"}}, []string{"x.sasl.password: mechanism OAUTHBEARER does not use it"}},
		{"oauth without token", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "OAUTHBEARER"}}, []string{"x.sasl.token: mechanism OAUTHBEARER needs a token"}},
		{"oauth both", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "OAUTHBEARER", Token: "t", TokenEndpoint: "https://i/t"}}, []string{"x.sasl.token: give either"}},
		{"oidc over http", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "http://idp.example/token", ClientID: "c"}},
			[]string{"x.sasl.client_secret: token_endpoint needs", "x.sasl.token_endpoint: \"http://idp.example/token\": use https://"}},
		{"redacted password sent back", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: mirrorapi.Redacted}}, []string{`x.sasl.password: "(sensitive)" is how responses hide a secret`}},
		{"bad reference", mirrorapi.Source{BootstrapServers: b, SASL: &mirrorapi.SourceSASL{Mechanism: "PLAIN", Username: "u", Password: "${vault:x}"}}, []string{"x.sasl.password: not a valid reference"}},
		{"tls both ca forms", mirrorapi.Source{BootstrapServers: b, TLS: &mirrorapi.SourceTLS{CAPEM: string(ca.CertPEM()), CAFile: "/ca"}}, []string{"x.tls.ca_pem: give ca_pem or ca_file"}},
		{"tls bad ca", mirrorapi.Source{BootstrapServers: b, TLS: &mirrorapi.SourceTLS{CAPEM: "nope"}}, []string{"x.tls.ca_pem: no PEM certificate"}},
		{"tls cert without key", mirrorapi.Source{BootstrapServers: b, TLS: &mirrorapi.SourceTLS{CertFile: "/c"}}, []string{"x.tls.key_pem: a client certificate needs its private key"}},
		{"tls key without cert", mirrorapi.Source{BootstrapServers: b, TLS: &mirrorapi.SourceTLS{KeyPEM: "${env:K}"}}, []string{"x.tls.cert_pem: a private key needs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Validate("x", tc.c)
			if len(got) != len(tc.want) {
				t.Fatalf("Validate = %q, want %d messages like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("message %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

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
	tlsC := devcluster.StartT(t, devcluster.Name("tls"), devcluster.TLS(), devcluster.SASLUser("alice", pw))
	saslC := devcluster.StartT(t, devcluster.Name("sasl"), devcluster.SASLUser("alice", pw))
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
