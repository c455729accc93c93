package provider

// Acceptance tests of kafka_mirror_topic's state: pause, resume, failover,
// promote, the plan-time refusal to mirror a stopped topic again, drift
// made outside Terraform, import, and destroy leaving the data.

import (
	"context"
	"fmt"
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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// stateConfig is accConfig with topic orders in state (the default when
// empty) and the extra HCL appended.
func (e *accEnv) stateConfig(state, extra string) string {
	cfg := e.accConfig(e.src.Bootstrap()[0])
	if state != "" {
		cfg = regexp.MustCompile(`(topic  = "orders")`).ReplaceAllString(cfg, fmt.Sprintf("$1\n  state  = %q", state))
	}
	return cfg + extra
}

// partitionsAre checks the agent's partition states (and stop modes) of
// mirror dr's topic.
func (e *accEnv) partitionsAre(topic string, state mirrorapi.State, mode string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		m, err := e.cl.Mirror(context.Background(), "dr")
		if err != nil {
			return err
		}
		t, ok := findTopic(m, topic)
		if !ok || len(t.Partitions) == 0 {
			return fmt.Errorf("agent has no partitions of %s: %+v", topic, m)
		}
		for _, p := range t.Partitions {
			if p.State != state || p.StopMode != mode {
				return fmt.Errorf("%s partition %d is %s (stop mode %q), want %s (%q)", topic, p.Partition, p.State, p.StopMode, state, mode)
			}
		}
		return nil
	}
}

// destinationWritable produces one record to the destination topic's
// partition 0 and checks that it landed at the end.
func (e *accEnv) destinationWritable(t *testing.T, topic string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		ctx := context.Background()
		before, err := e.dstAdm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		b, _ := before.Lookup(topic, 0)
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			return err
		}
		defer cl.Close()
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("written after failover")}).First()
		if err != nil {
			return fmt.Errorf("destination %s does not accept writes: %w", topic, err)
		}
		if r.Offset != b.Offset {
			return fmt.Errorf("write landed at %d, want the end %d", r.Offset, b.Offset)
		}
		t.Logf("destination %s/0 accepted a write at offset %d", topic, r.Offset)
		return nil
	}
}

// eventually polls cond for up to 30 s and fails the test with its last
// answer when it never holds.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, last)
		}
	}
}

// driftToMirroring is a plan-only step after preConfig changed topic
// outside Terraform: the plan, with no error, updates it back to mirroring.
func driftToMirroring(topic string, config string, preConfig func()) resource.TestStep {
	return resource.TestStep{
		PreConfig:          preConfig,
		Config:             config,
		PlanOnly:           true,
		ExpectNonEmptyPlan: true,
		ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
			plancheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
		}},
	}
}

// TestAccMirrorTopic_state: drift from an out-of-band pause, resume,
// pause, failover (the destination accepts writes), stopped → mirroring
// refused at plan time, import keeps the state, and a no-op stays one.
func TestAccMirrorTopic_state(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	const topic = "kafka_mirror_topic.orders"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		CheckDestroy: func(*terraform.State) error {
			// The stopped topic's data stays: 4 + 2 mirrored, 1 written.
			return e.destinationEnds("orders", map[int32]int64{0: 5, 1: 2})
		},
		Steps: []resource.TestStep{
			{
				Config: e.stateConfig("", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionCreate),
					plancheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
				},
			},
			// Paused outside Terraform: the plan resumes it.
			driftToMirroring(topic, e.stateConfig("", ""), func() {
				e.produce(t, "orders", 0, 4)
				e.produce(t, "orders", 1, 2)
				e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 4, 1: 2})
				if err := e.cl.PauseTopics(ctx, "dr", []string{"orders"}); err != nil {
					t.Fatal(err)
				}
			}),
			{
				// Apply resumes it and waits until it mirrors.
				Config: e.stateConfig("", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("partitions").AtSliceIndex(0).AtMapKey("state"), knownvalue.StringExact("mirroring")),
				},
				Check: e.partitionsAre("orders", mirrorapi.StateMirroring, ""),
			},
			{
				Config: e.stateConfig("paused", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("paused")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("partitions").AtSliceIndex(1).AtMapKey("state"), knownvalue.StringExact("paused")),
				},
				Check: e.partitionsAre("orders", mirrorapi.StatePaused, ""),
			},
			{
				// Failover from paused: the destination becomes writable;
				// the final offsets are in partitions.
				Config: e.stateConfig("stopped", `
resource "terraform_data" "offsets" {
  input = [for p in kafka_mirror_topic.orders.partitions : p.last_mirrored_offset]
}
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue(topic, tfjsonpath.New("partitions")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("stopped")),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("read_only_enforced"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("partitions").AtSliceIndex(0).AtMapKey("stop_mode"), knownvalue.StringExact("failover")),
					statecheck.ExpectKnownValue("terraform_data.offsets", tfjsonpath.New("output"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.Int64Exact(3), knownvalue.Int64Exact(1)})),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					e.partitionsAre("orders", mirrorapi.StateStopped, mirrorapi.StopModeFailover),
					e.destinationWritable(t, "orders"),
				),
			},
			{
				// Mirroring a stopped topic again is refused at plan time,
				// saying to fail back instead.
				Config:      e.stateConfig("mirroring", ""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Cannot change a stopped topic to mirroring.*writable on the destination.*fail\s+back.*other\s+direction.*failback\s+=\s+true`),
			},
			{
				Config:      e.stateConfig("promoted", ""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)already stopped \(by a failover stop\)`),
			},
			{
				// Import reads the state back.
				ResourceName:      topic,
				ImportState:       true,
				ImportStateId:     "dr/orders",
				ImportStateVerify: true,
				ImportStateCheck: func(is []*terraform.InstanceState) error {
					if len(is) != 1 || is[0].Attributes["state"] != "stopped" {
						return fmt.Errorf("imported %+v, want state stopped", is)
					}
					return nil
				},
			},
			{
				// A planned no-op stays one.
				Config: e.stateConfig("stopped", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionNoop),
				}},
			},
		},
	})
}

// TestAccMirrorTopic_promoteAndDestroy: promote reaches lag 0 and stops;
// destroying a mirroring topic stops it with a failover and leaves its
// data; destroying a promoted one changes nothing.
func TestAccMirrorTopic_promoteAndDestroy(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	if _, err := kadm.NewClient(e.srcCl).CreateTopic(ctx, 1, -1, nil, "payments"); err != nil {
		t.Fatal(err)
	}
	e.produce(t, "payments", 0, 1)
	const orders, payments = "kafka_mirror_topic.orders", "kafka_mirror_topic.payments"
	paymentsHCL := `
resource "kafka_mirror_topic" "payments" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "payments"
  timeouts {
    delete = "2m"
  }
}
`
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{Config: e.stateConfig("", paymentsHCL)},
			{
				PreConfig: func() {
					e.produce(t, "orders", 0, 3)
					e.produce(t, "orders", 1, 1)
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 3, 1: 1})
					e.waitMirrored(t, "dr", "payments", map[int32]int64{0: 1})
				},
				Config: e.stateConfig("promoted", paymentsHCL+`
resource "terraform_data" "ends" {
  input = [for p in kafka_mirror_topic.orders.partitions : p.destination_offset]
}
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(orders, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(payments, plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(orders, tfjsonpath.New("state"), knownvalue.StringExact("promoted")),
					statecheck.ExpectKnownValue(orders, tfjsonpath.New("max_lag"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("terraform_data.ends", tfjsonpath.New("output"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.Int64Exact(3), knownvalue.Int64Exact(1)})),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					e.partitionsAre("orders", mirrorapi.StateStopped, mirrorapi.StopModePromote),
					e.destinationWritable(t, "orders"),
				),
			},
			{
				Config:      e.stateConfig("stopped", paymentsHCL),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Cannot change a promoted topic to stopped.*Set state to "promoted"`),
			},
			{
				// payments leaves the configuration: destroy stops it
				// (failover) and keeps its data.
				Config: e.stateConfig("promoted", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(payments, plancheck.ResourceActionDestroy),
					plancheck.ExpectResourceAction(orders, plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					e.partitionsAre("payments", mirrorapi.StateStopped, mirrorapi.StopModeFailover),
					func(*terraform.State) error {
						ends, err := e.dstAdm.ListEndOffsets(ctx, "payments")
						if err != nil {
							return err
						}
						var total int64
						ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
						if total != 1 {
							return fmt.Errorf("destination payments holds %d records after destroy, want 1", total)
						}
						return nil
					},
				),
			},
		},
	})
}

// TestAccMirrorTopic_promoteRetry: a promote that the mirror's throttle
// holds back past the update timeout fails saying what holds it, and goes
// on in the agent; the next apply, with the throttle removed, waits for
// that same promote (it was refused before: "a stop is already in
// progress") and ends with lag 0.
func TestAccMirrorTopic_promoteRetry(t *testing.T) {
	e := newAccEnv(t)
	const topic = "kafka_mirror_topic.orders"
	throttle := `
resource "kafka_mirror_throttle" "dr" {
  mirror                = kafka_cluster_mirror.dr.name
  rate_bytes_per_second = 1024
}
`
	shortWait := func(cfg string) string {
		return strings.Replace(cfg, `topic  = "orders"`, "topic  = \"orders\"\n  timeouts {\n    update = \"3s\"\n  }", 1)
	}
	const batches, perBatch = 300, 10
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config: e.stateConfig("", throttle),
				Check:  e.partitionsAre("orders", mirrorapi.StateMirroring, ""),
			},
			{
				// About 50 KB in 300 batches behind a 1 KiB/s throttle:
				// the promote cannot finish in 3 s.
				PreConfig: func() {
					for range batches {
						e.produce(t, "orders", 0, perBatch)
					}
				},
				Config:      shortWait(e.stateConfig("promoted", throttle)),
				ExpectError: regexp.MustCompile(`(?s)to be promoted: timed out.*throttle \(1024 bytes/s\) holds this partition's fetches back`),
			},
			{
				// The throttle goes, and the apply waits for the promote
				// under way.
				Config: e.stateConfig("promoted", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("promoted")),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("max_lag"), knownvalue.Int64Exact(0)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					e.partitionsAre("orders", mirrorapi.StateStopped, mirrorapi.StopModePromote),
					func(*terraform.State) error {
						return e.destinationEnds("orders", map[int32]int64{0: batches * perBatch, 1: 0})
					},
				),
			},
		},
	})
}

// TestAccMirrorTopic_stoppedOutOfBand: a failover stop made outside
// Terraform (kmirror stop) is drift: the plan shows a change and no error
// (plan -detailed-exitcode exits 2), applying it fails saying what to do,
// accepting it (state = "stopped") is a no-op, and destroy works with the
// drifted configuration too.
func TestAccMirrorTopic_stoppedOutOfBand(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	const topic = "kafka_mirror_topic.orders"
	stopOutside := func() {
		if err := e.cl.StopTopics(ctx, "dr", []string{"orders"}, mirrorapi.StopModeFailover); err != nil {
			t.Fatal(err)
		}
		eventually(t, "stopped outside Terraform", func() (bool, string) {
			err := e.partitionsAre("orders", mirrorapi.StateStopped, mirrorapi.StopModeFailover)(nil)
			return err == nil, fmt.Sprint(err)
		})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config: e.stateConfig("", ""),
				PostApplyFunc: func() {
					e.produce(t, "orders", 0, 3)
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 3, 1: 0})
				},
			},
			driftToMirroring(topic, e.stateConfig("", ""), stopOutside),
			{
				Config:      e.stateConfig("", ""),
				ExpectError: regexp.MustCompile(`(?s)Cannot change a stopped topic to mirroring.*To keep this resource, set state to "stopped"`),
			},
			{
				// Accepted: nothing to change, the data stays.
				Config: e.stateConfig("stopped", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionNoop),
				}},
				Check: func(*terraform.State) error { return e.destinationEnds("orders", map[int32]int64{0: 3, 1: 0}) },
			},
			{
				// Back to the drifted configuration: the test's destroy
				// runs with it and must succeed.
				Config:             e.stateConfig("", ""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// TestAccMirrorTopic_lagWhilePaused: a paused topic whose source moves on
// shows the lag (it read 0 before: the source's end was only read from
// fetch responses, and a paused partition is not fetched), with the time
// the source's end was read.
func TestAccMirrorTopic_lagWhilePaused(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	const topic = "kafka_mirror_topic.orders"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config: e.stateConfig("", ""),
				PostApplyFunc: func() {
					e.produce(t, "orders", 0, 4)
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 4, 1: 0})
				},
			},
			{
				Config: e.stateConfig("paused", ""),
				Check:  e.partitionsAre("orders", mirrorapi.StatePaused, ""),
			},
			{
				PreConfig: func() {
					e.produce(t, "orders", 0, 6)
					eventually(t, "lag of paused orders/0 (want source 10, destination 4, lag 6)", func() (bool, string) {
						out, err := e.cl.Offsets(ctx, "dr", "orders")
						if err != nil || len(out.Topics) != 1 || len(out.Topics[0].Partitions) != 2 {
							return false, fmt.Sprintf("%+v, %v", out, err)
						}
						p := out.Topics[0].Partitions[0]
						return p.Lag == 6 && p.SourceOffset == 10 && p.DestinationOffset == 4 && !p.SourceOffsetAt.IsZero(),
							fmt.Sprintf("source %d, destination %d, lag %d, read at %v", p.SourceOffset, p.DestinationOffset, p.Lag, p.SourceOffsetAt)
					})
				},
				RefreshState: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(topic, "max_lag", "6"),
					resource.TestCheckResourceAttr(topic, "partitions.0.lag", "6"),
					resource.TestCheckResourceAttr(topic, "partitions.0.source_offset", "10"),
					resource.TestCheckResourceAttr(topic, "partitions.1.lag", "0"),
				),
			},
		},
	})
}

// TestAccMirrorTopic_cannotMirror: a topic that does not exist on the
// source, and one of a mirror whose source is unreachable, fail creation
// with the cause (they were created green, with max_lag 0, before) and
// leave nothing listed; a topic whose source topic goes away later shows
// in plan.
func TestAccMirrorTopic_cannotMirror(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	if _, err := kadm.NewClient(e.srcCl).CreateTopic(ctx, 1, -1, nil, "payments"); err != nil {
		t.Fatal(err)
	}
	defer func(w, g time.Duration) { settleWait, errorGrace = w, g }(settleWait, errorGrace)
	settleWait, errorGrace = 30*time.Second, 500*time.Millisecond
	broken := `
resource "kafka_mirror_topic" "typo" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "no-such-topic"
}

resource "kafka_cluster_mirror" "dead" {
  name   = "dead"
  source = { bootstrap_servers = ["127.0.0.1:1"] }
}

resource "kafka_mirror_topic" "dead" {
  mirror = kafka_cluster_mirror.dead.name
  topic  = "invoices"
}
`
	payments := `
resource "kafka_mirror_topic" "payments" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "payments"
}
`
	const (
		typoErr = `Topic "no-such-topic" of mirror "dr" cannot mirror.*SOURCE_TOPIC_MISSING.*Nothing was written`
		deadErr = `Topic "invoices" of mirror "dead" cannot mirror.*Mirror "dead" cannot run: connecting to source 127.0.0.1:1`
	)
	listed := func(mirror, topic string) bool {
		m, err := e.cl.Mirror(ctx, mirror)
		if err != nil {
			return false
		}
		_, ok := findTopic(m, topic)
		return ok
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config:      e.stateConfig("", broken),
				ExpectError: regexp.MustCompile(`(?s)(` + typoErr + `.*` + deadErr + `|` + deadErr + `.*` + typoErr + `)`),
			},
			{
				PreConfig: func() {
					if listed("dr", "no-such-topic") || listed("dead", "invoices") {
						t.Fatal("a topic whose creation failed is still listed by the agent")
					}
				},
				Config: e.stateConfig("", payments),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("kafka_mirror_topic.payments", "state", "mirroring"),
					resource.TestCheckResourceAttr("kafka_mirror_topic.orders", "state", "mirroring"),
				),
			},
			{
				// The source topic goes away: the plan shows the topic
				// cannot mirror, instead of a quiet "mirroring".
				PreConfig: func() {
					if _, err := kadm.NewClient(e.srcCl).DeleteTopic(ctx, "payments"); err != nil {
						t.Fatal(err)
					}
					eventually(t, "the agent reports payments' source topic missing", func() (bool, string) {
						m, err := e.cl.Mirror(ctx, "dr")
						tp, ok := findTopic(m, "payments")
						return err == nil && ok && tp.ErrorCode == reason.SourceTopicMissing, fmt.Sprintf("%+v, %v", tp, err)
					})
				},
				Config:             e.stateConfig("", payments),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kafka_mirror_topic.payments", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("kafka_mirror_topic.orders", plancheck.ResourceActionNoop),
				}},
			},
		},
	})
}

// TestAccMirrorTopic_conflictsAtPlan: a topic another mirror mirrors, a
// topic the mirror already lists outside this state, and a second throttle
// of a mirror are refused by plan, before anything is applied (they failed
// only at apply before, after the rest of the change was made).
func TestAccMirrorTopic_conflictsAtPlan(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	for _, topic := range []string{"payments", "refunds"} {
		if _, err := kadm.NewClient(e.srcCl).CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	conflicting := `
resource "kafka_mirror_topic" "payments" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "payments"
}

resource "kafka_mirror_topic" "refunds" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "refunds"
}

resource "kafka_mirror_throttle" "dr" {
  mirror                = kafka_cluster_mirror.dr.name
  rate_bytes_per_second = 1048576
}
`
	const (
		otherErr    = `Topic "payments" is mirrored by mirror "other".*one\s+source`
		listedErr   = `Mirror "dr" already mirrors topic "refunds".*terraform\s+import\s+<address>\s+dr/refunds`
		throttleErr = `Mirror already has a throttle.*terraform\s+import`
	)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{Config: e.stateConfig("", "")},
			{
				PreConfig: func() {
					if _, err := e.cl.Create(ctx, mirrorapi.MirrorSpec{Name: "other", Source: mirrorapi.Source{BootstrapServers: e.src.Bootstrap()}, Topics: []string{"payments"}}); err != nil {
						t.Fatal(err)
					}
					if _, err := e.cl.AddTopics(ctx, "dr", []string{"refunds"}); err != nil {
						t.Fatal(err)
					}
					if _, err := e.cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 1 << 20, Partitions: []string{mirrorapi.AllPartitions}}); err != nil {
						t.Fatal(err)
					}
				},
				Config:      e.stateConfig("", conflicting),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)` + otherErr),
			},
			{Config: e.stateConfig("", conflicting), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)` + listedErr)},
			{Config: e.stateConfig("", conflicting), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)` + throttleErr)},
			{
				// Nothing of the refused plan was applied.
				Config: e.stateConfig("", ""),
				Check: func(*terraform.State) error {
					if _, err := e.cl.Mirror(ctx, "other"); err != nil {
						return err
					}
					return e.partitionsAre("orders", mirrorapi.StateMirroring, "")(nil)
				},
			},
		},
	})
}

// TestAccMirrorTopic_recoverRecreate: a foreign write on the destination
// fails partition 0 (FOREIGN_WRITE); the plan shows the recovery, a plain
// recover fails again saying what clears it, and applying it with
// recreate = true deletes the destination topic and mirrors it whole: the
// foreign record is gone and both partitions end where the source does.
func TestAccMirrorTopic_recoverRecreate(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	const topic = "kafka_mirror_topic.orders"
	foreignWrite := func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("foreign")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		e.produce(t, "orders", 0, 2)
		eventually(t, "partition 0 failed by the foreign write", func() (bool, string) {
			m, err := e.cl.Mirror(ctx, "dr")
			if err != nil {
				return false, err.Error()
			}
			tp, _ := findTopic(m, "orders")
			for _, p := range tp.Partitions {
				if p.Partition == 0 {
					return p.State == mirrorapi.StateFailed && p.ReasonCode == reason.ForeignWrite, fmt.Sprintf("%s %s %s", p.State, p.ReasonCode, p.Reason)
				}
			}
			return false, fmt.Sprintf("no partition 0: %+v", tp)
		})
	}
	withRecreate := func(v bool) string {
		return regexp.MustCompile(`(topic  = "orders")`).ReplaceAllString(e.stateConfig("", ""), fmt.Sprintf("$1\n  recreate = %t", v))
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config: e.stateConfig("", ""),
				PostApplyFunc: func() {
					e.produce(t, "orders", 0, 3)
					e.produce(t, "orders", 1, 2)
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 3, 1: 2})
				},
			},
			driftToMirroring(topic, e.stateConfig("", ""), foreignWrite),
			{
				// A plain recover (the plan warned) fails again, saying
				// what clears it.
				Config:      e.stateConfig("", ""),
				ExpectError: regexp.MustCompile(`(?s)Partition 0 failed:.*recreate = true`),
			},
			{
				Config: withRecreate(true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
					statecheck.ExpectKnownValue(topic, tfjsonpath.New("reason_code"), knownvalue.StringExact("")),
				},
				Check: func(*terraform.State) error {
					e.waitMirrored(t, "dr", "orders", map[int32]int64{0: 5, 1: 2})
					return e.noForeignRecord("orders", 0, 5)
				},
			},
			{
				Config: withRecreate(false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(topic, tfjsonpath.New("state"), knownvalue.StringExact("mirroring")),
				}},
			},
		},
	})
}

// noForeignRecord reads the first n records of the destination's topic
// partition and fails if one is not the source's (value "v<i>").
func (e *accEnv) noForeignRecord(topic string, partition int32, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("reading destination %s/%d after %d records: %w", topic, partition, len(got), err)
		}
		got = append(got, fs.Records()...)
	}
	for _, r := range got {
		if string(r.Value) == "foreign" {
			return fmt.Errorf("destination %s/%d still holds the foreign record at offset %d", topic, partition, r.Offset)
		}
	}
	return nil
}
