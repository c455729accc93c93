package provider

// Acceptance test of a failback from Terraform: topics mirrored P → D by
// one agent are stopped; a second agent, whose destination is P, mirrors
// them back D → P with kafka_mirror_topic failback = true. The clean topic
// resumes at its last mirrored offsets; the topic P took records on after
// the stop is refused without recreate, and with it they go to a side topic.

import (
	"context"
	"fmt"
	"regexp"
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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// failbackFactories serve the provider twice: as kafka, for the agent of
// P → D, and as kafkaback, for the failback agent. Two configurations of one
// provider (an alias) would share one in-process server, and so one agent.
var failbackFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"kafka":     providerserver.NewProtocol6WithError(New("test")()),
	"kafkaback": providerserver.NewProtocol6WithError(New("test")()),
}

// failbackConfig: mirror dr (P → D) with orders and payments in state, and,
// when back is set, the agent at backURL with mirror back (D → P) and the
// failback topics in backTopics (HCL).
func (e *accEnv) failbackConfig(state, backURL, backTopics string) string {
	cfg := accRequiredProviders("kafka", "kafkaback") + accProviderBlock("kafka", e.url) + fmt.Sprintf(`
resource "kafka_cluster_mirror" "dr" {
  name   = "dr"
  source = { bootstrap_servers = [%q] }
}

resource "kafka_mirror_topic" "orders" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "orders"
  state  = %q
}

resource "kafka_mirror_topic" "payments" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "payments"
  state  = %[2]q
}
`, e.src.Bootstrap()[0], state)
	if backURL == "" {
		return cfg
	}
	return cfg + accProviderBlock("kafkaback", backURL) + fmt.Sprintf(`
resource "kafka_cluster_mirror" "back" {
  provider = kafkaback
  name     = "back"
  source   = { bootstrap_servers = [%q] }
}
%s`, e.dst.Bootstrap()[0], backTopics)
}

func failbackTopic(topic string, recreate bool) string {
	r := ""
	if recreate {
		r = "\n  recreate = true"
	}
	return fmt.Sprintf(`
resource "kafka_mirror_topic" "back_%[1]s" {
  provider = kafkaback
  mirror   = kafka_cluster_mirror.back.name
  topic    = %[1]q
  failback = true%[2]s
}
`, topic, r)
}

// produceTo writes n records to topic's partition through cl.
func produceTo(t *testing.T, cl *kgo.Client, topic string, partition int32, n int, what string) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "%s-%d", what, i)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// sameEnds waits until topic ends at the same offsets on P and D.
func sameEnds(p, d *kadm.Client, topic string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		ctx := context.Background()
		deadline := time.Now().Add(60 * time.Second)
		for {
			pe, perr := p.ListEndOffsets(ctx, topic)
			de, derr := d.ListEndOffsets(ctx, topic)
			same := perr == nil && derr == nil && len(pe[topic]) > 0 && len(pe[topic]) == len(de[topic])
			for part, o := range de[topic] {
				q, ok := pe.Lookup(topic, part)
				same = same && ok && q.Err == nil && o.Err == nil && q.Offset == o.Offset
			}
			if same {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: P ends %v (%v), D ends %v (%v)", topic, pe[topic], perr, de[topic], derr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestAccMirrorTopic_failback(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	srcAdm := kadm.NewClient(e.srcCl)
	if _, err := srcAdm.CreateTopic(ctx, 2, -1, nil, "payments"); err != nil {
		t.Fatal(err)
	}
	dstCl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dstCl.Close)

	// The failback agent: its destination is P, the old primary.
	_, srv := startAccAgent(t, coordinator.Config{Destination: []kgo.Opt{kgo.SeedBrokers(e.src.Bootstrap()...)}}, nil)
	backCl := mirrorapi.NewClient(srv.URL, accToken)

	const (
		backOrders   = "kafka_mirror_topic.back_orders"
		backPayments = "kafka_mirror_topic.back_payments"
	)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: failbackFactories,
		Steps: []resource.TestStep{
			{
				Config: e.failbackConfig("mirroring", "", ""),
				Check: func(*terraform.State) error {
					for _, topic := range []string{"orders", "payments"} {
						produceTo(t, e.srcCl, topic, 0, 5, "p")
						produceTo(t, e.srcCl, topic, 1, 3, "p")
						e.waitMirrored(t, "dr", topic, map[int32]int64{0: 5, 1: 3})
					}
					return nil
				},
			},
			{
				// Failover to D; D takes writes; P takes writes on
				// payments only (it diverges there).
				Config: e.failbackConfig("stopped", "", ""),
				Check: func(*terraform.State) error {
					produceTo(t, dstCl, "orders", 0, 4, "d")
					produceTo(t, dstCl, "payments", 1, 2, "d")
					produceTo(t, e.srcCl, "payments", 0, 3, "p-after-stop")
					return nil
				},
			},
			{
				// Failback of both: orders resumes, payments is refused,
				// saying to set recreate.
				Config:      e.failbackConfig("stopped", srv.URL, failbackTopic("orders", false)+failbackTopic("payments", false)),
				ExpectError: regexp.MustCompile(`(?s)Failback of topic "payments" refused.*holds\s+records.*set\s+recreate\s+=\s+true`),
			},
			{
				// orders made it, resumed where dr stopped.
				Config: e.failbackConfig("stopped", srv.URL, failbackTopic("orders", false)),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(backOrders, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
					statecheck.ExpectKnownValue(backOrders, tfjsonpath.New("failback"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(backOrders, tfjsonpath.New("divergent_topic"), knownvalue.StringExact("")),
					statecheck.ExpectKnownValue(backOrders, tfjsonpath.New("divergent_records"), knownvalue.Int64Exact(0)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					sameEnds(srcAdm, e.dstAdm, "orders"),
					func(*terraform.State) error {
						m, err := backCl.Mirror(ctx, "back")
						if err != nil {
							return err
						}
						tp, ok := findTopic(m, "orders")
						if !ok || tp.Failback == nil || tp.Failback.SourceMirror != "dr" || tp.Failback.Recreated {
							return fmt.Errorf("back/orders: %+v", tp)
						}
						for _, p := range tp.Failback.Partitions {
							if want := map[int32]int64{0: 5, 1: 3}[p.Partition]; p.ResumedAt != want {
								return fmt.Errorf("back/orders partition %d resumed at %d, want %d (dr's last mirrored offset + 1)", p.Partition, p.ResumedAt, want)
							}
						}
						return nil
					},
				),
			},
			{
				// payments with recreate: P's records after the stop go to
				// a side topic, and P's topic becomes D's.
				Config: e.failbackConfig("stopped", srv.URL, failbackTopic("orders", false)+failbackTopic("payments", true)),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(backPayments, tfjsonpath.New("divergent_topic"), knownvalue.StringRegexp(regexp.MustCompile(`^payments\.kmirror-divergent-[0-9]+$`))),
					statecheck.ExpectKnownValue(backPayments, tfjsonpath.New("divergent_records"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue(backPayments, tfjsonpath.New("recreate"), knownvalue.Bool(true)),
				},
				Check: sameEnds(srcAdm, e.dstAdm, "payments"),
			},
			{
				// Read back: nothing to change.
				Config:   e.failbackConfig("stopped", srv.URL, failbackTopic("orders", false)+failbackTopic("payments", true)),
				PlanOnly: true,
			},
			{
				// Switch back to P: promote the failback topic, in place.
				Config: e.failbackConfig("stopped", srv.URL,
					strings.Replace(failbackTopic("orders", false), "failback = true", "failback = true\n  state    = \"promoted\"", 1)+failbackTopic("payments", true)),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(backOrders, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(backOrders, tfjsonpath.New("state"), knownvalue.StringExact("promoted")),
				},
			},
		},
	})
}
