package provider

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/internal/certs"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// secureEnv is an agent serving its API over TLS, with a secret key, in
// front of a TLS + SASL source and a destination.
type secureEnv struct {
	src    *devcluster.Cluster
	url    string
	caPEM  string // of the agent's certificate
	cl     *mirrorapi.Client
	reader string // the source user's password
	co     *coordinator.Coordinator
	ca     *certs.CA
	cert   tls.Certificate // the agent's
}

func newSecureEnv(t *testing.T) *secureEnv {
	t.Helper()
	requireAcc(t)
	e := &secureEnv{reader: "reader-pw-Fk3n8Qd1"}
	e.src = devclustertest.Start(t, devcluster.Name("src"), devcluster.TLS(),
		devcluster.SASLUser("reader", e.reader), devcluster.SASLUser("app", "app-pass"),
		devcluster.KfakeOptions(kfake.SeedTopics(1, "orders")))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	box, err := secrets.NewBox([]byte(strings.Repeat("k", secrets.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.NewCA("agent")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pair.TLS()
	if err != nil {
		t.Fatal(err)
	}
	co, srv := startAccAgent(t, coordinator.Config{Destination: []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}, SecretBox: box},
		&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	e.url, e.caPEM, e.co, e.ca, e.cert = srv.URL, string(ca.CertPEM()), co, ca, cert
	e.cl = mirrorapi.NewClient(srv.URL, accToken)
	if err := e.cl.SetTLS(mirrorapi.ClientTLS{CAPEM: ca.CertPEM()}); err != nil {
		t.Fatal(err)
	}
	return e
}

// config is a mirror of orders from the SASL_SSL source, its password
// write-only at version.
func (e *secureEnv) config(password string, version int) string {
	return e.mirrorOnly(password, version) + `
resource "kafka_mirror_topic" "orders" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "orders"
}
`
}

// mirrorOnly is config without the topic: a topic cannot be created while
// its mirror cannot reach the source.
func (e *secureEnv) mirrorOnly(password string, version int) string {
	return accProvider(e.url, fmt.Sprintf("ca_cert_pem = %q", e.caPEM)) + fmt.Sprintf(`
resource "kafka_cluster_mirror" "dr" {
  name = "dr"
  source = {
    bootstrap_servers = [%q]
    sasl = {
      mechanism           = "SCRAM-SHA-512"
      username            = "reader"
      password_wo         = %q
      password_wo_version = %d
    }
    tls = { ca_pem = %q }
  }
}
`, e.src.Bootstrap()[0], password, version, e.src.CACertPEM())
}

// noSecretsInState fails when the state, as `terraform show -json` gives
// it (sensitive values included), holds any of the secrets.
type noSecretsInState struct{ secrets []string }

func (c noSecretsInState) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	b, err := json.Marshal(req.State)
	if err != nil {
		resp.Error = err
		return
	}
	if !strings.Contains(string(b), "kafka_cluster_mirror") {
		resp.Error = fmt.Errorf("the state has no kafka_cluster_mirror: %s", b)
		return
	}
	for _, s := range c.secrets {
		if strings.Contains(string(b), s) {
			resp.Error = fmt.Errorf("the state holds a secret, %q", s)
			return
		}
	}
}

// check is CheckState for steps without a configuration: every attribute
// of every resource in the state.
func (c noSecretsInState) check(st *terraform.State) error {
	n := 0
	for _, m := range st.Modules {
		for name, r := range m.Resources {
			for k, v := range r.Primary.Attributes {
				n++
				for _, s := range c.secrets {
					if strings.Contains(v, s) {
						return fmt.Errorf("the state of %s holds a secret in %s", name, k)
					}
				}
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("no attribute in the state")
	}
	return nil
}

// waitMirrorRuns polls the agent until mirror dr runs and orders/0 has n
// records mirrored.
func (e *secureEnv) waitMirrorRuns(n int64) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := e.cl.Mirror(context.Background(), "dr")
		if err == nil && m.Error == "" && len(m.Topics) == 1 && len(m.Topics[0].Partitions) == 1 &&
			m.Topics[0].Partitions[0].DestinationOffset == n && m.Topics[0].Partitions[0].Lag == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mirror dr did not mirror %d records: %+v %v", n, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAccClusterMirror_saslSource: a mirror from a SASL_SSL source through
// an HTTPS agent (ca_cert_pem). The password is write-only: a wrong one
// leaves the mirror failing to connect, and rotating it (a new
// password_wo_version) is planned as an update that fixes it; a new
// password_wo alone plans nothing. No password is ever in the state.
func TestAccClusterMirror_saslSource(t *testing.T) {
	e := newSecureEnv(t)
	const mirror = "kafka_cluster_mirror.dr"
	wrong := "wrong-pw-Vc7m2Lx5"
	noSecrets := noSecretsInState{secrets: []string{wrong, e.reader}}
	app, err := kgo.NewClient(kgo.SeedBrokers(e.src.Bootstrap()...), kgo.DialTLSConfig(e.src.ClientTLS()),
		kgo.SASL(scram.Auth{User: "app", Pass: "app-pass"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	produce := func(n int) {
		for range n {
			if err := app.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config: e.mirrorOnly(wrong, 1),
				ConfigStateChecks: []statecheck.StateCheck{
					noSecrets,
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("sasl").AtMapKey("password_wo"), knownvalue.Null()),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("sasl").AtMapKey("password"), knownvalue.Null()),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("sasl").AtMapKey("password_wo_version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("sasl").AtMapKey("username"), knownvalue.StringExact("reader")),
				},
				Check: func(*terraform.State) error {
					// The source refuses the password.
					deadline := time.Now().Add(30 * time.Second)
					for {
						m, err := e.cl.Mirror(context.Background(), "dr")
						if err == nil && strings.Contains(m.Error, "connecting to source") {
							if m.Source.SASL == nil || m.Source.SASL.Password != mirrorapi.Redacted {
								return fmt.Errorf("the agent shows the password as %+v", m.Source.SASL)
							}
							return nil
						}
						if time.Now().After(deadline) {
							return fmt.Errorf("mirror dr with a wrong password: %+v %v", m, err)
						}
						time.Sleep(50 * time.Millisecond)
					}
				},
			},
			{
				// A new write-only value without a new version: nothing
				// to plan (Terraform cannot see it).
				Config:             e.mirrorOnly(e.reader, 1),
				PlanOnly:           true,
				ExpectNonEmptyPlan: false,
			},
			{
				// The rotation: a new version plans an in-place update
				// (and the topic, which can mirror now, is added).
				PreConfig: func() { produce(3) },
				Config:    e.config(e.reader, 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					noSecrets,
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("sasl").AtMapKey("password_wo_version"), knownvalue.Int64Exact(2)),
				},
				Check: func(*terraform.State) error { return e.waitMirrorRuns(3) },
			},
			{
				// Refreshed, the state still matches and holds no secret.
				RefreshState: true,
				Check:        noSecrets.check,
			},
			{
				Config:   e.config(e.reader, 2),
				PlanOnly: true,
			},
		},
	})
}

// TestAccProvider_tlsAgent: an https agent is reached with ca_cert_pem or
// insecure_skip_verify, and refused without either.
func TestAccProvider_tlsAgent(t *testing.T) {
	e := newSecureEnv(t)
	cfg := func(settings string) string {
		return accProvider(e.url, settings) + `data "kafka_cluster_mirrors" "all" {}` + "\n"
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{Config: cfg(""), ExpectError: regexp.MustCompile(`(?s)cannot reach the kmirror agent.*certificate.*ca_cert_pem`)},
			{Config: cfg(fmt.Sprintf("ca_cert_pem = %q", "not a certificate")), ExpectError: regexp.MustCompile(`Invalid CA certificate`)},
			{
				Config: cfg(fmt.Sprintf("ca_cert_pem = %q", e.caPEM)),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kafka_cluster_mirrors.all", tfjsonpath.New("mirrors"), knownvalue.ListSizeExact(0)),
				},
			},
			{
				Config: cfg("insecure_skip_verify = true"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kafka_cluster_mirrors.all", tfjsonpath.New("mirrors"), knownvalue.ListSizeExact(0)),
				},
			},
		},
	})
}

// TestAccProvider_clientCertificate: an agent that requires client
// certificates refuses the provider without client_cert_pem and
// client_key_pem, and answers with them.
func TestAccProvider_clientCertificate(t *testing.T) {
	e := newSecureEnv(t)
	srv := httptest.NewUnstartedServer(api.Handler(e.co, api.Options{Tokens: []string{accToken}, RequireClientCert: true}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{e.cert}, ClientCAs: e.ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client, err := e.ca.Client("terraform")
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(settings string) string {
		return accProvider(srv.URL, fmt.Sprintf("ca_cert_pem = %q", e.caPEM), settings) + `data "kafka_cluster_mirrors" "all" {}` + "\n"
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{Config: cfg(""), ExpectError: regexp.MustCompile(`(?s)refused the token.*client_cert_pem`)},
			{Config: cfg(fmt.Sprintf("client_cert_pem = %q", client.CertPEM)), ExpectError: regexp.MustCompile(`Incomplete client certificate`)},
			{
				Config: cfg(fmt.Sprintf("client_cert_pem = %q\n  client_key_pem = %q", client.CertPEM, client.KeyPEM)),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kafka_cluster_mirrors.all", tfjsonpath.New("mirrors"), knownvalue.ListSizeExact(0)),
				},
			},
		},
	})
}
