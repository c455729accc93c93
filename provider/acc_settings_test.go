package provider

// Acceptance test of kafka_cluster_mirror's settings: typed attributes and
// the KIP config map applied and read back, drift made with the API (what
// kmirror update does) planned back, import, and unset settings planning
// the defaults the agent reports, with no perpetual diff.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// settingsConfig is mirror dr with settings (HCL) and topic orders, read
// by the mirror data sources.
func (e *accEnv) settingsConfig(settings string) string {
	return e.mirrorConfig(e.src.Bootstrap()[0], settings) + accMirrorDataSources
}

const accSettings = `
  consumer_groups_include   = ["app-.*"]
  consumer_groups_exclude   = ["app-test"]
  acl_include               = ["TOPIC;orders", "GROUP;app-.*;READ"]
  metadata_refresh_interval = "1s"
  topic_regex               = ["events\\..*"]
  config = {
    "mirror.topic.properties.exclude" = "retention.ms, min.insync.replicas"
  }
`

// specIs checks the spec the agent keeps for mirror dr.
func (e *accEnv) specIs(check func(mirrorspec.Spec) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, m := range e.co.Mirrors() {
			if m.Name == "dr" {
				return check(m)
			}
		}
		return fmt.Errorf("the agent has no mirror dr")
	}
}

func TestAccClusterMirror_settings(t *testing.T) {
	e := newAccEnv(t)
	ctx := context.Background()
	const mirror = "kafka_cluster_mirror.dr"
	set := func(groups []string, interval string, exclude []string) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			statecheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_include"), strList(groups...)),
			statecheck.ExpectKnownValue(mirror, tfjsonpath.New("metadata_refresh_interval"), knownvalue.StringExact(interval)),
			statecheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_config_exclude"), strList(exclude...)),
		}
	}
	configured := append(set([]string{"app-.*"}, "1s", []string{"retention.ms", "min.insync.replicas"}),
		statecheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_exclude"), strList("app-test")),
		statecheck.ExpectKnownValue(mirror, tfjsonpath.New("acl_include"), strList("TOPIC;orders", "GROUP;app-.*;READ")),
		statecheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_regex"), strList(`events\..*`)),
		statecheck.ExpectKnownValue(mirror, tfjsonpath.New("config"), knownvalue.MapExact(map[string]knownvalue.Check{
			"mirror.topic.properties.exclude": knownvalue.StringExact("retention.ms, min.insync.replicas"),
		})),
		statecheck.ExpectKnownValue("data.kafka_cluster_mirror.dr", tfjsonpath.New("consumer_groups_include"), strList("app-.*")),
		statecheck.ExpectKnownValue("data.kafka_cluster_mirror.dr", tfjsonpath.New("metadata_refresh_interval"), knownvalue.StringExact("1s")),
	)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			{
				Config:            e.settingsConfig(accSettings),
				ConfigStateChecks: configured,
				Check: e.specIs(func(s mirrorspec.Spec) error {
					if !slices.Equal(s.GroupsInclude, []string{"app-.*"}) || !slices.Equal(s.GroupsExclude, []string{"app-test"}) ||
						!slices.Equal(s.ACLInclude, []string{"TOPIC;orders", "GROUP;app-.*;READ"}) || s.MetadataRefreshIntervalMs != 1000 ||
						!slices.Equal(s.TopicRegex, []string{`events\..*`}) || !slices.Equal(s.TopicConfigExclude, []string{"retention.ms", "min.insync.replicas"}) {
						return fmt.Errorf("agent spec after create: %+v", s)
					}
					return nil
				}),
			},
			{
				// The agent connects (source_cluster_id) and topic_regex
				// picks up a topic created on the source.
				PreConfig: func() {
					if _, err := kadm.NewClient(e.srcCl).CreateTopic(ctx, 1, -1, nil, "events.a"); err != nil {
						t.Fatal(err)
					}
					waitMirror(t, e.cl, "dr", func(m mirrorapi.Mirror) bool { return m.SourceClusterID != "" && len(m.Topics) == 2 })
				},
				RefreshState: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(mirror, "source_cluster_id", "src"),
					resource.TestCheckResourceAttr(mirror, "topic_count", "2"),
					resource.TestCheckResourceAttr("data.kafka_cluster_mirrors.all", "mirrors.0.source_cluster_id", "src"),
					resource.TestCheckResourceAttr("data.kafka_cluster_mirrors.all", "mirrors.0.acl_include.1", "GROUP;app-.*;READ"),
					resource.TestCheckResourceAttr("data.kafka_cluster_mirrors.all", "mirrors.0.topic_regex.0", `events\..*`),
					resource.TestCheckResourceAttr("data.kafka_cluster_mirror.dr", "source_cluster_id", "src"),
					// An agent alone (no group) runs every mirror: no agent named.
					resource.TestCheckResourceAttr(mirror, "agent", ""),
					resource.TestCheckResourceAttr("data.kafka_cluster_mirror.dr", "agent", ""),
				),
			},
			{
				// Changed outside Terraform (kmirror update --config ...):
				// the plan puts every setting back.
				PreConfig: func() {
					_, err := e.cl.Update(ctx, "dr", mirrorapi.MirrorSpec{GroupsInclude: []string{"other"}, GroupsExclude: []string{},
						ACLInclude: []string{}, MetadataRefreshIntervalMs: 5000, TopicConfigExclude: []string{"retention.ms"}, TopicRegex: []string{}})
					if err != nil {
						t.Fatal(err)
					}
				},
				Config:             e.settingsConfig(accSettings),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_include"), strList("app-.*")),
					plancheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_exclude"), strList("app-test")),
					plancheck.ExpectKnownValue(mirror, tfjsonpath.New("acl_include"), strList("TOPIC;orders", "GROUP;app-.*;READ")),
					plancheck.ExpectKnownValue(mirror, tfjsonpath.New("metadata_refresh_interval"), knownvalue.StringExact("1s")),
					plancheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_config_exclude"), strList("retention.ms", "min.insync.replicas")),
					plancheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_regex"), strList(`events\..*`)),
				}},
			},
			{
				// Apply restores them; then nothing is left to do.
				Config: e.settingsConfig(accSettings),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: configured,
				Check: e.specIs(func(s mirrorspec.Spec) error {
					if !slices.Equal(s.GroupsInclude, []string{"app-.*"}) || !slices.Equal(s.ACLInclude, []string{"TOPIC;orders", "GROUP;app-.*;READ"}) ||
						s.MetadataRefreshIntervalMs != 1000 || !slices.Equal(s.TopicRegex, []string{`events\..*`}) ||
						!slices.Equal(s.TopicConfigExclude, []string{"retention.ms", "min.insync.replicas"}) {
						return fmt.Errorf("agent spec after the restoring apply: %+v", s)
					}
					return nil
				}),
			},
			{
				// The exclude list's change restarted the mirror: let it
				// settle before comparing with an import.
				PreConfig: func() {
					waitMirror(t, e.cl, "dr", func(m mirrorapi.Mirror) bool { return m.StateCounts[mirrorapi.StateMirroring] == 3 })
				},
				RefreshState: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(mirror, "state_counts.mirroring", "3"),
					resource.TestCheckResourceAttr(mirror, "source_cluster_id", "src"),
				),
			},
			{
				// Import reads every setting back; config is kept as
				// written, not read (the typed attributes show it).
				ResourceName:            mirror,
				ImportState:             true,
				ImportStateId:           "dr",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"config"},
			},
			{
				// A setting given twice fails at plan time naming both.
				Config: e.settingsConfig(`
  consumer_groups_include = ["a"]
  config = { "mirror.groups.include" = "b" }
`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Mirror setting given twice.*mirror\.groups\.include.*consumer_groups_include`),
			},
			{
				// Unset: the defaults the agent reports are planned and
				// sent; the interval stays what it is.
				Config: e.settingsConfig(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(mirror, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_include"), strList(".*")),
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("acl_include"), strList("*")),
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_exclude"), knownvalue.ListSizeExact(0)),
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("topic_regex"), knownvalue.ListSizeExact(0)),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: set([]string{".*"}, "1s", mirrorspec.DefaultTopicConfigExclude()),
				Check: e.specIs(func(s mirrorspec.Spec) error {
					if !slices.Equal(s.GroupsInclude, []string{".*"}) || len(s.GroupsExclude) != 0 || len(s.TopicRegex) != 0 ||
						!slices.Equal(s.TopicConfigExclude, mirrorspec.DefaultTopicConfigExclude()) {
						return fmt.Errorf("agent spec after unsetting: %+v", s)
					}
					return nil
				}),
			},
			{
				// The KIP's names through config.
				Config: e.settingsConfig(`
  config = {
    "mirror.groups.include"               = "billing, app-.*"
    "mirror.metadata.refresh.interval.ms" = "2000"
  }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("consumer_groups_include"), strList("billing", "app-.*")),
						plancheck.ExpectKnownValue(mirror, tfjsonpath.New("metadata_refresh_interval"), knownvalue.StringExact("2s")),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: e.specIs(func(s mirrorspec.Spec) error {
					if !slices.Equal(s.GroupsInclude, []string{"billing", "app-.*"}) || s.MetadataRefreshIntervalMs != 2000 {
						return fmt.Errorf("agent spec after config: %+v", s)
					}
					return nil
				}),
			},
		},
	})
}

// waitMirror waits until describe of mirror satisfies ok.
func waitMirror(t *testing.T, cl *mirrorapi.Client, mirror string, ok func(mirrorapi.Mirror) bool) mirrorapi.Mirror {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := cl.Mirror(context.Background(), mirror)
		if err == nil && ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror %s: %+v (%v)", mirror, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
