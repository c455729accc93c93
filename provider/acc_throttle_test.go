package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// throttleConfig is accConfig's mirror with a throttle; body holds the
// throttle's arguments after mirror, none for no throttle resource.
func (e *accEnv) throttleConfig(body string) string {
	cfg := e.accConfig(e.src.Bootstrap()[0])
	if body == "" {
		return cfg
	}
	return cfg + fmt.Sprintf(`
resource "kafka_mirror_throttle" "dr" {
  mirror = kafka_cluster_mirror.dr.name
  %s
}
`, body)
}

// checkThrottle checks the agent's throttle of mirror dr (nil: none) and
// the consumer_byte_rate quota on the source (0: none).
func (e *accEnv) checkThrottle(want *mirrorapi.Throttle, quota float64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		ctx := context.Background()
		got, err := e.cl.Throttle(ctx, "dr")
		switch {
		case want == nil && !mirrorapi.IsCode(err, mirrorapi.CodeThrottleNotFound) && !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound):
			return fmt.Errorf("throttle of dr: %+v (%v), want none", got, err)
		case want != nil && err != nil:
			return fmt.Errorf("throttle of dr: %v", err)
		case want != nil && (got.RateBytesPerSecond != want.RateBytesPerSecond || fmt.Sprint(got.Partitions) != fmt.Sprint(want.Partitions) || got.SourceQuota != want.SourceQuota):
			return fmt.Errorf("throttle of dr: %+v, want %+v", got, *want)
		}
		id := mirrorapi.SourceQuotaClientID("dr")
		qs, err := kadm.NewClient(e.srcCl).DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &id}})
		if err != nil {
			return err
		}
		var have float64
		for _, q := range qs {
			for _, v := range q.Values {
				if v.Key == "consumer_byte_rate" {
					have = v.Value
				}
			}
		}
		if have != quota {
			return fmt.Errorf("source consumer_byte_rate for %s: %v, want %v", id, have, quota)
		}
		return nil
	}
}

// TestAccMirrorThrottle_lifecycle: create with defaults, update in place
// (rate, partitions, source quota), a no-op plan, drift (changed and removed
// outside Terraform), import by mirror name, and removal lifting the
// throttle and its source quota.
func TestAccMirrorThrottle_lifecycle(t *testing.T) {
	e := newAccEnv(t)
	const th = "kafka_mirror_throttle.dr"
	updated := `rate_bytes_per_second = 2000000
  partitions            = ["orders:1", "orders:0"]
  source_quota          = true`
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		CheckDestroy:             e.checkThrottle(nil, 0),
		Steps: []resource.TestStep{
			{
				Config: e.throttleConfig(`rate_bytes_per_second = 1048576`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(th, plancheck.ResourceActionCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(th, tfjsonpath.New("id"), knownvalue.StringExact("dr")),
					statecheck.ExpectKnownValue(th, tfjsonpath.New("rate_bytes_per_second"), knownvalue.Int64Exact(1048576)),
					statecheck.ExpectKnownValue(th, tfjsonpath.New("partitions"), strList("*")),
					statecheck.ExpectKnownValue(th, tfjsonpath.New("source_quota"), knownvalue.Bool(false)),
				},
				Check: e.checkThrottle(&mirrorapi.Throttle{RateBytesPerSecond: 1048576, Partitions: []string{"*"}}, 0),
			},
			{
				Config: e.throttleConfig(updated),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(th, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(th, tfjsonpath.New("partitions"), strList("orders:1", "orders:0")),
					statecheck.ExpectKnownValue(th, tfjsonpath.New("source_quota"), knownvalue.Bool(true)),
				},
				Check: e.checkThrottle(&mirrorapi.Throttle{RateBytesPerSecond: 2000000, Partitions: []string{"orders:1", "orders:0"}, SourceQuota: true}, 2000000),
			},
			{
				// Nothing changed: the plan is empty.
				Config: e.throttleConfig(updated),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
			{
				// Changed outside Terraform: read back, and set again in place.
				PreConfig: func() {
					if _, err := e.cl.SetThrottle(context.Background(), "dr", mirrorapi.Throttle{RateBytesPerSecond: 5}); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.throttleConfig(updated),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(th, plancheck.ResourceActionUpdate),
				}},
				Check: e.checkThrottle(&mirrorapi.Throttle{RateBytesPerSecond: 2000000, Partitions: []string{"orders:1", "orders:0"}, SourceQuota: true}, 2000000),
			},
			{
				// Removed outside Terraform: the plan sets it again.
				PreConfig: func() {
					if err := e.cl.RemoveThrottle(context.Background(), "dr"); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.throttleConfig(updated),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(th, plancheck.ResourceActionCreate),
				}},
				Check: e.checkThrottle(&mirrorapi.Throttle{RateBytesPerSecond: 2000000, Partitions: []string{"orders:1", "orders:0"}, SourceQuota: true}, 2000000),
			},
			{
				ResourceName:      th,
				ImportState:       true,
				ImportStateId:     "dr",
				ImportStateVerify: true,
			},
			{
				ResourceName:  th,
				ImportState:   true,
				ImportStateId: "dr/orders",
				ExpectError:   regexp.MustCompile(`(?s)Invalid import ID for kafka_mirror_throttle.*by its mirror's name`),
			},
			{
				// The throttle leaves the configuration: lifted, with
				// its source quota; the mirror stays.
				Config: e.throttleConfig(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(th, plancheck.ResourceActionDestroy),
					plancheck.ExpectResourceAction("kafka_cluster_mirror.dr", plancheck.ResourceActionNoop),
				}},
				Check: e.checkThrottle(nil, 0),
			},
			{
				// A throttle set outside Terraform is imported, not
				// overwritten.
				PreConfig: func() {
					if _, err := e.cl.SetThrottle(context.Background(), "dr", mirrorapi.Throttle{RateBytesPerSecond: 7}); err != nil {
						t.Fatal(err)
					}
				},
				Config:      e.throttleConfig(`rate_bytes_per_second = 1000`),
				ExpectError: regexp.MustCompile(`(?s)Mirror already has a throttle.*terraform import`),
			},
			{
				PreConfig: func() {
					if err := e.cl.RemoveThrottle(context.Background(), "dr"); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.throttleConfig(`rate_bytes_per_second = 1000`),
				Check:  e.checkThrottle(&mirrorapi.Throttle{RateBytesPerSecond: 1000, Partitions: []string{"*"}}, 0),
			},
		},
	})
}
