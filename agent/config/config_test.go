package config

import (
	"slices"
	"strings"
	"testing"
)

// TestMirrorSync: a mirror block takes the metadata sync settings, and a bad
// one stops start-up naming the setting.
func TestMirrorSync(t *testing.T) {
	cfg, err := Parse("agent.hcl", []byte(`
mirror "dr" {
  source { bootstrap_servers = ["src:9092"] }
  topics                       = ["orders"]
  groups_include               = ["app-.*"]
  groups_exclude               = ["app-test"]
  acl_include                  = []
  metadata_refresh_interval_ms = 5000
}
mirror "mig" {
  source { bootstrap_servers = ["old:9092"] }
}`))
	if err != nil {
		t.Fatal(err)
	}
	dr, mig := cfg.Mirrors[0].Spec(), cfg.Mirrors[1].Spec()
	if !slices.Equal(dr.GroupsInclude, []string{"app-.*"}) || !slices.Equal(dr.GroupsExclude, []string{"app-test"}) ||
		dr.ACLInclude == nil || len(dr.ACLInclude) != 0 || dr.MetadataRefreshIntervalMs != 5000 {
		t.Errorf("dr: %+v", dr)
	}
	if mig.GroupsInclude != nil || mig.ACLInclude != nil || mig.MetadataRefreshIntervalMs != 0 {
		t.Errorf("mig, left to the defaults: %+v", mig)
	}

	for _, c := range []struct{ setting, want string }{
		{`groups_include = ["app-("]`, "groups_include"},
		{`acl_include = ["TOPIC;orders;READ;ALLOW;alice"]`, "acl_include"},
		{`metadata_refresh_interval_ms = 10`, "metadata_refresh_interval_ms"},
	} {
		_, err := Parse("agent.hcl", []byte(`mirror "dr" {
  source { bootstrap_servers = ["src:9092"] }
  `+c.setting+`
}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.setting, err, c.want)
		}
	}
}

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
	d := *cfg.Destination
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

func TestAgentID(t *testing.T) {
	if _, err := Parse("agent.hcl", []byte(`agent_id = "a b"`)); err == nil || !strings.Contains(err.Error(), `agent_id "a b": use 1 to 200 letters`) {
		t.Errorf("agent_id \"a b\": %v, want an error naming agent_id", err)
	}
}

func TestFillers(t *testing.T) {
	for _, c := range []struct{ hcl, want, errContains string }{
		{"", FillersAuto, ""},
		{`fillers = "coordinator"`, FillersCoordinator, ""},
		{`fillers = "markers"`, FillersMarkers, ""},
		{`fillers = "marker"`, "", `fillers "marker": use auto, coordinator or markers`},
	} {
		cfg, err := Parse("agent.hcl", []byte(c.hcl))
		switch {
		case c.errContains != "":
			if err == nil || !strings.Contains(err.Error(), c.errContains) {
				t.Errorf("%q: %v, want an error saying %q", c.hcl, err, c.errContains)
			}
		case err != nil || cfg.Fillers != c.want:
			t.Errorf("%q: fillers %q, %v; want %q", c.hcl, cfg.Fillers, err, c.want)
		}
	}
}

// TestCoordination: the agents' group is the default; the writer lease's
// settings, removed, are refused saying what to set instead; settings of
// the other mode are refused naming them.
func TestCoordination(t *testing.T) {
	for _, c := range []struct{ hcl, want, errContains string }{
		{"", CoordinationGroup, ""},
		{`group_session_timeout = "6s"`, CoordinationGroup, ""},
		{`coordination = "single"`, CoordinationSingle, ""},
		{`lease_duration = "15s"`, "", `lease_duration: the writer lease was removed; remove it, and the agents form a group`},
		{`lease_duration = "0s"`, "", `lease_duration: the writer lease was removed; for one agent without a group (what lease_duration = "0s" was), set coordination = "single"`},
		{`lease_request_timeout = "10s"`, "", `lease_request_timeout: the writer lease was removed; remove it`},
		{`lease_duration = "0ms"`, "", `set coordination = "single" instead`},
		{`coordination = "lease"`, "", `coordination = "lease": the writer lease was removed; remove it`},
		{"coordination = \"single\"\ngroup_session_timeout = \"6s\"", "", `group_session_timeout: it applies to coordination = "group" only`},
		{`coordination = "leader"`, "", `coordination "leader": use group`},
	} {
		cfg, err := Parse("agent.hcl", []byte(c.hcl))
		switch {
		case c.errContains != "":
			if err == nil || !strings.Contains(err.Error(), c.errContains) {
				t.Errorf("%q: %v, want an error saying %q", c.hcl, err, c.errContains)
			}
		case err != nil || cfg.Coordination != c.want:
			t.Errorf("%q: coordination %q, %v; want %q", c.hcl, cfg.Coordination, err, c.want)
		}
	}
}
