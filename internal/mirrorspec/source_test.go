package mirrorspec

import (
	"strings"
	"testing"

	"github.com/kmirror/kmirror/internal/certs"
)

func TestValidateSource(t *testing.T) {
	ca, err := certs.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	b := []string{"h:9092"}
	plain := &SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}
	for _, tc := range []struct {
		name string
		c    Source
		want []string // each a substring of one message; none means valid
	}{
		{"plaintext", Source{BootstrapServers: b}, nil},
		{"inferred sasl_ssl", Source{BootstrapServers: b, SASL: plain, TLS: &TLS{CAPEM: string(ca.CertPEM())}}, nil},
		{"scram by reference", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "${file:/etc/k.properties:pw}"}}, nil},
		{"oauth static", Source{BootstrapServers: b, SecurityProtocol: "SASL_SSL", SASL: &SASL{Mechanism: "OAUTHBEARER", Token: "${env:TOK}"}}, nil},
		{"oauth oidc", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "https://idp/token", ClientID: "c", ClientSecret: "s"}}, nil},
		{"ssl without tls block", Source{BootstrapServers: b, SecurityProtocol: "SSL"}, nil},
		{"unknown protocol", Source{BootstrapServers: b, SecurityProtocol: "TLS"}, []string{`x.security_protocol: "TLS": use PLAINTEXT`}},
		{"sasl protocol without sasl", Source{BootstrapServers: b, SecurityProtocol: "SASL_SSL"}, []string{"x.sasl: security_protocol SASL_SSL needs a sasl block"}},
		{"sasl with plaintext", Source{BootstrapServers: b, SecurityProtocol: "PLAINTEXT", SASL: plain}, []string{"x.sasl: security_protocol PLAINTEXT does not authenticate"}},
		{"tls with sasl_plaintext", Source{BootstrapServers: b, SecurityProtocol: "SASL_PLAINTEXT", SASL: plain, TLS: &TLS{}}, []string{"x.tls: security_protocol SASL_PLAINTEXT does not use TLS"}},
		{"no mechanism", Source{BootstrapServers: b, SASL: &SASL{}}, []string{"x.sasl.mechanism: missing"}},
		{"bad mechanism", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "GSSAPI"}}, []string{`x.sasl.mechanism: "GSSAPI"`}},
		{"plain without credentials", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "PLAIN"}}, []string{"x.sasl.username: mechanism PLAIN needs", "x.sasl.password: mechanism PLAIN needs"}},
		{"scram with a token", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p", Token: "t"}}, []string{"x.sasl.token: mechanism SCRAM-SHA-256 does not use it"}},
		{"oauth with a password", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "OAUTHBEARER", Token: "t", Password: "p"}}, []string{"x.sasl.password: mechanism OAUTHBEARER does not use it"}},
		{"oauth without token", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "OAUTHBEARER"}}, []string{"x.sasl.token: mechanism OAUTHBEARER needs a token"}},
		{"oauth both", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "OAUTHBEARER", Token: "t", TokenEndpoint: "https://i/t"}}, []string{"x.sasl.token: give either"}},
		{"oidc over http", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "http://idp.example/token", ClientID: "c"}},
			[]string{"x.sasl.client_secret: token_endpoint needs", "x.sasl.token_endpoint: \"http://idp.example/token\": use https://"}},
		{"redacted password sent back", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "PLAIN", Username: "u", Password: Redacted}}, []string{`x.sasl.password: "(sensitive)" is how responses hide a secret`}},
		{"bad reference", Source{BootstrapServers: b, SASL: &SASL{Mechanism: "PLAIN", Username: "u", Password: "${vault:x}"}}, []string{"x.sasl.password: not a valid reference"}},
		{"tls both ca forms", Source{BootstrapServers: b, TLS: &TLS{CAPEM: string(ca.CertPEM()), CAFile: "/ca"}}, []string{"x.tls.ca_pem: give ca_pem or ca_file"}},
		{"tls bad ca", Source{BootstrapServers: b, TLS: &TLS{CAPEM: "nope"}}, []string{"x.tls.ca_pem: no PEM certificate"}},
		{"tls cert without key", Source{BootstrapServers: b, TLS: &TLS{CertFile: "/c"}}, []string{"x.tls.key_pem: a client certificate needs its private key"}},
		{"tls key without cert", Source{BootstrapServers: b, TLS: &TLS{KeyPEM: "${env:K}"}}, []string{"x.tls.cert_pem: a private key needs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ValidateSource("x", tc.c)
			if len(got) != len(tc.want) {
				t.Fatalf("ValidateSource = %q, want %d messages like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("message %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
