package config

import (
	"strings"
	"testing"
)

func TestParseConnections(t *testing.T) {
	cfg, err := Parse("agent.hcl", []byte(`
destination {
  bootstrap_servers = ["dst:9093"]
  security_protocol = "SASL_SSL"
  sasl {
    mechanism = "SCRAM-SHA-512"
    username  = "kmirror"
    password  = "$${file:/etc/kmirror/dst.properties:password}"
  }
  tls {
    ca_file     = "/etc/kmirror/ca.pem"
    server_name = "kafka.internal"
  }
}
secret_key_file = "/etc/kmirror/secret.key"
tls_cert_file   = "/etc/kmirror/api.crt"
tls_key_file    = "/etc/kmirror/api.key"
client_ca_file  = "/etc/kmirror/clients.pem"
mirror "dr" {
  source {
    bootstrap_servers = ["src:9093"]
    sasl {
      mechanism = "OAUTHBEARER"
      token     = "$${env:SRC_TOKEN}"
    }
    tls {}
  }
  topics = ["orders"]
}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Destination.Conn()
	if d.SecurityProtocol != "SASL_SSL" || d.SASL.Password != "${file:/etc/kmirror/dst.properties:password}" || d.TLS.ServerName != "kafka.internal" {
		t.Errorf("destination: %+v %+v %+v", d, d.SASL, d.TLS)
	}
	if cfg.SecretKeyFile == "" || cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" || cfg.ClientCAFile == "" {
		t.Errorf("file settings: %+v", cfg)
	}
	s := cfg.Mirrors[0].Spec().Source
	if s.SASL == nil || s.SASL.Token != "${env:SRC_TOKEN}" || s.TLS == nil || s.TLS.CAFile != "" {
		t.Errorf("mirror source: %+v", s)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ hcl, want string }{
		{`destination {
  bootstrap_servers = ["d:1"]
  security_protocol = "SSL_SASL"
}`, `destination.security_protocol: "SSL_SASL": use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL`},
		{`destination {
  bootstrap_servers = ["d:1"]
  sasl {
    mechanism = "PLAIN"
    username  = "u"
  }
}`, "destination.sasl.password: mechanism PLAIN needs a password"},
		{`destination {
  bootstrap_servers = ["d:1"]
  sasl {
    mechanism = "PLAIN"
    username  = "u"
    password  = "${env:P}"
  }
}`, `escape it by starting with "$${"`},
		{`destination {
  bootstrap_servers = ["d:1"]
  tls {
    ca_cert = "/ca.pem"
  }
}`, `Unsupported argument: An argument named "ca_cert" is not expected here`},
		{`tls_cert_file = "/a.crt"`, "tls_cert_file and tls_key_file: give both"},
		{`client_ca_file = "/ca.pem"`, "client_ca_file: client certificates need TLS"},
		{`mirror "dr" {
  source {
    bootstrap_servers = ["s:1"]
    security_protocol = "PLAINTEXT"
    tls {}
  }
}`, "source.tls: security_protocol PLAINTEXT does not use TLS"},
	} {
		_, err := Parse("agent.hcl", []byte(tc.hcl))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\n: %v\nwant %q", tc.hcl, err, tc.want)
		}
	}
}
