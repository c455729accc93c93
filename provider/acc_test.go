package provider

// Acceptance tests: the real Terraform (or OpenTofu) CLI drives the provider
// in-process against a real agent (coordinator and API in this process) and
// two dev clusters. They run with TF_ACC=1; `make testacc` runs them with
// terraform and again with tofu (TF_ACC_TERRAFORM_PATH).

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

const accToken = "acc-token"

var accFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"kafka": providerserver.NewProtocol6WithError(New("test")()),
}

// accEnv is a running agent in front of two dev clusters.
type accEnv struct {
	src, dst *devcluster.Cluster
	co       *coordinator.Coordinator
	url      string
	cl       *mirrorapi.Client
	srcCl    *kgo.Client
	dstAdm   *kadm.Client
}

// newAccEnv skips unless TF_ACC is set, then starts the source (two
// brokers, topic orders with 2 partitions), the destination, the
// coordinator and the API.
func newAccEnv(t *testing.T) *accEnv {
	t.Helper()
	requireAcc(t)
	e := &accEnv{
		src: devclustertest.Start(t, devcluster.Name("src"), devcluster.Brokers(2),
			devcluster.KfakeOptions(kfake.SeedTopics(2, "orders"))),
		dst: devclustertest.Start(t, devcluster.Name("dst")),
	}
	var srv *httptest.Server
	e.co, srv = startAccAgent(t, coordinator.Config{Destination: []kgo.Opt{kgo.SeedBrokers(e.dst.Bootstrap()...)}}, nil)
	e.url = srv.URL
	e.cl = mirrorapi.NewClient(srv.URL, accToken)
	var err error
	if e.srcCl, err = kgo.NewClient(kgo.SeedBrokers(e.src.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srcCl.Close)
	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dcl.Close)
	e.dstAdm = kadm.NewClient(dcl)
	return e
}

// requireAcc skips the test unless TF_ACC is set, and serves the provider
// under its real address (setAccProviderAddress).
func requireAcc(t *testing.T) {
	t.Helper()
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skipf("acceptance test: set %s=1 (make testacc)", resource.EnvTfAcc)
	}
	setAccProviderAddress(t)
}

// startAccAgent starts a coordinator with cfg (refreshing metadata every
// 200ms) and serves its API, with accToken, over TLS when serverTLS is set;
// both stop with the test.
func startAccAgent(t *testing.T, cfg coordinator.Config, serverTLS *tls.Config) (*coordinator.Coordinator, *httptest.Server) {
	t.Helper()
	cfg.RefreshInterval = 200 * time.Millisecond
	co := coordinatortest.Start(t, cfg).Coordinator
	srv := httptest.NewUnstartedServer(api.Handler(co, api.Options{Tokens: []string{accToken}}))
	if serverTLS != nil {
		srv.TLS = serverTLS
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return co, srv
}

// accProvider is the HCL that requires the provider kafka and configures it
// for the agent at url with accToken; settings are more of its arguments.
func accProvider(url string, settings ...string) string {
	return accRequiredProviders("kafka") + accProviderBlock("kafka", url, settings...)
}

// accRequiredProviders is the terraform block requiring each named
// provider at kmirror/NAME (the test's factories serve them all).
func accRequiredProviders(names ...string) string {
	var b strings.Builder
	b.WriteString("\nterraform {\n  required_providers {\n")
	for _, n := range names {
		fmt.Fprintf(&b, "    %s = { source = %q }\n", n, "kmirror/"+n)
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// accProviderBlock configures provider name for the agent at url with
// accToken; settings are more of its arguments.
func accProviderBlock(name, url string, settings ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nprovider %q {\n  agent_url = %q\n  token     = %q\n", name, url, accToken)
	for _, s := range settings {
		b.WriteString("  " + s + "\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// setAccProviderAddress makes the harness serve the provider under its
// real source address, kmirror/kafka, on the registry host of the CLI in
// use (OpenTofu resolves "kmirror/kafka" on registry.opentofu.org).
func setAccProviderAddress(t *testing.T) {
	if os.Getenv(resource.EnvTfAccProviderNamespace) == "" {
		t.Setenv(resource.EnvTfAccProviderNamespace, "kmirror")
	}
	if os.Getenv(resource.EnvTfAccProviderHost) == "" && strings.Contains(filepath.Base(os.Getenv("TF_ACC_TERRAFORM_PATH")), "tofu") {
		t.Setenv(resource.EnvTfAccProviderHost, "registry.opentofu.org")
	}
	if f := os.Getenv("TF_CLI_CONFIG_FILE"); f == "" || !exists(f) {
		// No CLI config: a missing one makes OpenTofu print a warning
		// where the harness expects its version.
		t.Setenv("TF_CLI_CONFIG_FILE", os.DevNull)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// produce writes n records to topic's partition on the source.
func (e *accEnv) produce(t *testing.T, topic string, partition int32, n int) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := e.srcCl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitMirrored waits until every partition of mirror's topic has no lag
// and ends (destination offset) where want says.
func (e *accEnv) waitMirrored(t *testing.T, mirror, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := e.cl.Offsets(context.Background(), mirror, topic)
		ok := err == nil && len(out.Topics) == 1 && len(out.Topics[0].Partitions) == len(want)
		if ok {
			for _, p := range out.Topics[0].Partitions {
				ok = ok && p.Lag == 0 && p.DestinationOffset == want[p.Partition] && p.State == mirrorapi.StateMirroring
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not mirrored to %v: %+v (%v)", mirror, topic, want, out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkExclude checks the exclude list the agent persisted for mirror.
func (e *accEnv) checkExclude(mirror string, want []string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, m := range e.co.Mirrors() {
			if m.Name == mirror {
				if !slices.Equal(m.TopicConfigExclude, want) {
					return fmt.Errorf("mirror %s excludes %q, want %q", mirror, m.TopicConfigExclude, want)
				}
				return nil
			}
		}
		return fmt.Errorf("no mirror %s", mirror)
	}
}

// destinationEnds checks the destination topic's end offsets.
func (e *accEnv) destinationEnds(topic string, want map[int32]int64) error {
	ends, err := e.dstAdm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		return err
	}
	for p, w := range want {
		o, ok := ends.Lookup(topic, p)
		if !ok || o.Err != nil || o.Offset != w {
			return fmt.Errorf("destination %s/%d ends at %d (%v), want %d", topic, p, o.Offset, o.Err, w)
		}
	}
	return nil
}

// accConfig is the test configuration: one mirror and its topic orders.
func (e *accEnv) accConfig(bootstrap string, exclude ...string) string {
	ex := ""
	if len(exclude) > 0 {
		quoted := make([]string, 0, len(exclude))
		for _, k := range exclude {
			quoted = append(quoted, strconv.Quote(k))
		}
		ex = "topic_config_exclude = [" + strings.Join(quoted, ", ") + "]"
	}
	return e.mirrorConfig(bootstrap, ex)
}

// mirrorConfig is mirror dr of the source at bootstrap, with more of its
// arguments in body (HCL), and its topic orders.
func (e *accEnv) mirrorConfig(bootstrap, body string) string {
	return accProvider(e.url) + fmt.Sprintf(`
resource "kafka_cluster_mirror" "dr" {
  name   = "dr"
  source = { bootstrap_servers = [%q] }
  %s
}

resource "kafka_mirror_topic" "orders" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "orders"
}
`, bootstrap, body)
}

// accDataSources reads accConfig's mirror and topic with the three data
// sources.
const accDataSources = `
data "kafka_mirror_topic" "orders" {
  mirror = kafka_mirror_topic.orders.mirror
  topic  = kafka_mirror_topic.orders.topic
}
` + accMirrorDataSources

// accMirrorDataSources reads accConfig's mirror with the two mirror data
// sources.
const accMirrorDataSources = `
data "kafka_cluster_mirror" "dr" {
  name       = kafka_cluster_mirror.dr.name
  depends_on = [kafka_mirror_topic.orders]
}

data "kafka_cluster_mirrors" "all" {
  depends_on = [kafka_mirror_topic.orders]
}
`

func strList(ss ...string) knownvalue.Check {
	cs := make([]knownvalue.Check, 0, len(ss))
	for _, s := range ss {
		cs = append(cs, knownvalue.StringExact(s))
	}
	return knownvalue.ListExact(cs)
}

// TestAccClusterMirror_lifecycle: create a mirror and a topic, records
// flow, the source changes in place, import, destroy leaves the data.
func TestAccClusterMirror_lifecycle(t *testing.T) {
	e := newAccEnv(t)
	src := e.src.Bootstrap()
	const mirror, topic = "kafka_cluster_mirror.dr", "kafka_mirror_topic.orders"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := e.cl.Mirror(context.Background(), "dr"); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
				return fmt.Errorf("mirror dr after destroy: %v, want MIRROR_NOT_FOUND", err)
			}
			// Destroy stops mirroring but leaves the destination data.
			return e.destinationEnds("orders", map[int32]int64{0: 7, 1: 3})
		},
		Steps: []resource.TestStep{
			{
				Config: e.accConfig(src[0]) + accDataSources,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionCreate),
					plancheck.ExpectUnknownValue(mirror, tfjsonpath.New("max_lag")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("id"), knownvalue.StringExact("dr")),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("bootstrap_servers"), strList(src[0])),
					// Left out, the KIP's default list, as the agent reports it.
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_config_exclude"), strList(mirrorspec.DefaultTopicConfigExclude()...)),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("error"), knownvalue.StringExact("")),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("id"), knownvalue.StringExact("dr/orders")),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("mirror"), knownvalue.StringExact("dr")),
					statecheck.ExpectKnownValue("data.kafka_cluster_mirror.dr", tfjsonpath.New("topics"), strList("orders")),
				},
				Check: func(*terraform.State) error {
					m, err := e.cl.Mirror(context.Background(), "dr")
					if err != nil || len(m.Topics) != 1 || m.Topics[0].Name != "orders" {
						return fmt.Errorf("agent after create: %+v (%v)", m, err)
					}
					return nil
				},
			},
			{
				// Records flow; a refresh reads the lag back.
				PreConfig: func() {
					e.produce(t, "orders", 0, 5)
					e.produce(t, "orders", 1, 3)
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 5, 1: 3})
				},
				RefreshState: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(topic, "max_lag", "0"),
					resource.TestCheckResourceAttr(topic, "reason", ""),
					resource.TestCheckResourceAttr(topic, "partitions.#", "2"),
					resource.TestCheckResourceAttr(topic, "partitions.0.partition", "0"),
					resource.TestCheckResourceAttr(topic, "partitions.0.destination_offset", "5"),
					resource.TestCheckResourceAttr(topic, "partitions.0.source_offset", "5"),
					resource.TestCheckResourceAttr(topic, "partitions.0.last_mirrored_offset", "4"),
					resource.TestCheckResourceAttr(topic, "partitions.0.lag", "0"),
					resource.TestCheckResourceAttr(topic, "partitions.0.state", "mirroring"),
					resource.TestCheckResourceAttr(topic, "partitions.1.destination_offset", "3"),
					resource.TestCheckResourceAttr(mirror, "max_lag", "0"),
					resource.TestCheckResourceAttr(mirror, "topic_count", "1"),
					resource.TestCheckResourceAttr(mirror, "state_counts.mirroring", "2"),
				),
			},
			{
				// The source bootstrap and the exclude list change in place.
				Config: e.accConfig(src[1], "min.insync.replicas", "retention.ms") + accDataSources,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("source").AtMapKey("bootstrap_servers"), strList(src[1])),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_config_exclude"), strList("min.insync.replicas", "retention.ms")),
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_count"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.kafka_cluster_mirror.dr", tfjsonpath.New("source").AtMapKey("bootstrap_servers"), strList(src[1])),
					statecheck.ExpectKnownValue("data.kafka_mirror_topic.orders", tfjsonpath.New("partitions"), knownvalue.ListSizeExact(2)),
					statecheck.ExpectKnownValue("data.kafka_cluster_mirrors.all", tfjsonpath.New("mirrors"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"name": knownvalue.StringExact("dr"), "topics": strList("orders"), "topic_count": knownvalue.Int64Exact(1),
						}),
					})),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					func(*terraform.State) error {
						m, err := e.cl.Mirror(context.Background(), "dr")
						if err != nil || len(m.Source.BootstrapServers) != 1 || m.Source.BootstrapServers[0] != src[1] || len(m.Topics) != 1 {
							return fmt.Errorf("agent after update: %+v (%v)", m, err)
						}
						return nil
					},
					e.checkExclude("dr", []string{"min.insync.replicas", "retention.ms"}),
				),
			},
			{
				// Mirroring goes on through the new bootstrap.
				PreConfig: func() {
					e.produce(t, "orders", 0, 2)
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 7, 1: 3})
				},
				RefreshState: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(topic, "max_lag", "0"),
					resource.TestCheckResourceAttr(topic, "partitions.0.destination_offset", "7"),
					resource.TestCheckResourceAttr(topic, "partitions.0.last_mirrored_offset", "6"),
				),
			},
			{
				// Import while the exclude list is set: read back too.
				ResourceName:      mirror,
				ImportState:       true,
				ImportStateId:     "dr",
				ImportStateVerify: true,
			},
			{
				// Unsetting the exclude list sends the KIP default it
				// stands for (the agent keeps a list left out).
				Config: e.accConfig(src[1]) + accDataSources,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_config_exclude"), strList(mirrorspec.DefaultTopicConfigExclude()...)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_config_exclude"), strList(mirrorspec.DefaultTopicConfigExclude()...)),
				},
				Check: e.checkExclude("dr", mirrorspec.DefaultTopicConfigExclude()),
			},
			{
				// The update restarted the mirror: let it settle and read
				// the figures back before comparing them with an import.
				PreConfig:    func() { e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 7, 1: 3}) },
				RefreshState: true,
				Check:        resource.TestCheckResourceAttr(mirror, "state_counts.mirroring", "2"),
			},
			{
				ResourceName:      mirror,
				ImportState:       true,
				ImportStateId:     "dr",
				ImportStateVerify: true,
			},
			{
				ResourceName:      topic,
				ImportState:       true,
				ImportStateId:     "dr/orders",
				ImportStateVerify: true,
			},
			{
				ResourceName:  topic,
				ImportState:   true,
				ImportStateId: "dr:orders",
				ExpectError:   regexp.MustCompile(`(?s)Invalid import ID for kafka_mirror_topic.*expected MIRROR/TOPIC`),
			},
			{
				ResourceName:  topic,
				ImportState:   true,
				ImportStateId: "dr/payments",
				ExpectError:   regexp.MustCompile(`(?i)non-existent|Cannot import`),
			},
		},
	})
}

// TestAccClusterMirror_drift: a topic and then the mirror removed outside
// Terraform show up as creations in the plan.
func TestAccClusterMirror_drift(t *testing.T) {
	e := newAccEnv(t)
	src := e.src.Bootstrap()
	const mirror, topic = "kafka_cluster_mirror.dr", "kafka_mirror_topic.orders"
	ctx := context.Background()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{Config: e.accConfig(src[0])},
			{
				// The topic leaves the mirror outside Terraform (the
				// agent has no stop yet: delete the mirror and create it
				// again without topics).
				PreConfig: func() {
					if err := e.cl.Delete(ctx, "dr", true); err != nil {
						t.Fatal(err)
					}
					if _, err := e.cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: src[:1]}}); err != nil {
						t.Fatal(err)
					}
				},
				Config:             e.accConfig(src[0]),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionCreate),
				}},
			},
			{
				// The mirror is deleted outside Terraform.
				PreConfig: func() {
					if err := e.cl.Delete(ctx, "dr", true); err != nil {
						t.Fatal(err)
					}
				},
				Config:             e.accConfig(src[0]),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionCreate),
				}},
			},
		},
	})
}

// TestAccProvider_agentErrors: a wrong token and an unreachable agent fail
// the plan with a diagnostic saying what to fix.
func TestAccProvider_agentErrors(t *testing.T) {
	e := newAccEnv(t)
	cfg := func(url, token string) string {
		return accRequiredProviders("kafka") + fmt.Sprintf(`
provider "kafka" {
  agent_url = %q
  token     = %q
}
data "kafka_cluster_mirrors" "all" {}
`, url, token)
	}
	// An address where nothing listens any more.
	gone := httptest.NewServer(http.NotFoundHandler())
	closed := gone.URL
	gone.Close()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{Config: cfg(e.url, "wrong"), ExpectError: regexp.MustCompile(`(?s)refused the token.*KMIRROR_TOKEN`)},
			{Config: cfg(closed, accToken), ExpectError: regexp.MustCompile(`(?s)cannot reach the kmirror agent.*agent_url`)},
			{
				Config: cfg(e.url, accToken),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.kafka_cluster_mirrors.all", tfjsonpath.New("mirrors"), knownvalue.ListSizeExact(0)),
				},
			},
		},
	})
}
