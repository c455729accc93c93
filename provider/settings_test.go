package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

func strMap(kv map[string]string) tftypes.Value {
	vs := map[string]tftypes.Value{}
	for k, v := range kv {
		vs[k] = str(v)
	}
	return tftypes.NewValue(tftypes.Map{ElementType: tftypes.String}, vs)
}

// TestMirrorSettingsValidation: the settings are checked at plan time as the
// agent checks them, and a setting given twice is refused naming both.
func TestMirrorSettingsValidation(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	schemas, err := s.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	base := func(extra map[string]tftypes.Value) map[string]tftypes.Value {
		vals := map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092"))}
		for k, v := range extra {
			vals[k] = v
		}
		return vals
	}
	for _, c := range []struct {
		name string
		vals map[string]tftypes.Value
		want string // "" when valid
	}{
		{"all typed", map[string]tftypes.Value{
			"consumer_groups_include": strs("app-.*", "billing"), "consumer_groups_exclude": strs("app-test"),
			"acl_include": strs("TOPIC;orders.*;READ;ALLOW;User:*", "GROUP"), "metadata_refresh_interval": str("1m30s"),
			"topic_regex": strs(`orders\..*`)}, ""},
		{"sync no groups and no ACLs", map[string]tftypes.Value{"consumer_groups_include": strs(), "acl_include": strs()}, ""},
		{"group regex", map[string]tftypes.Value{"consumer_groups_include": strs("app-(")}, `consumer_groups_include: "app-(" is not a valid regular expression`},
		{"empty group", map[string]tftypes.Value{"consumer_groups_exclude": strs(" ")}, `consumer_groups_exclude: " " is not a valid regular expression`},
		{"duplicate group", map[string]tftypes.Value{"consumer_groups_include": strs("a", "a")}, "duplicate"},
		{"acl operation", map[string]tftypes.Value{"acl_include": strs("TOPIC;orders;FLY")}, `acl_include: "TOPIC;orders;FLY"`},
		{"acl principal", map[string]tftypes.Value{"acl_include": strs("TOPIC;orders;READ;ALLOW;alice")}, "is not TYPE:NAME"},
		{"topic regex", map[string]tftypes.Value{"topic_regex": strs("orders[")}, `topic_regex: "orders[" is not a valid regular expression`},
		{"empty topic regex", map[string]tftypes.Value{"topic_regex": strs("")}, "topic_regex: an empty regular expression"},
		{"interval unit", map[string]tftypes.Value{"metadata_refresh_interval": str("30")}, `"30" is not a duration`},
		{"interval small", map[string]tftypes.Value{"metadata_refresh_interval": str("50ms")}, "below the agent's minimum of 100ms"},
		{"interval fraction", map[string]tftypes.Value{"metadata_refresh_interval": str("1500us")}, "not a whole number of milliseconds"},
		{"config keys", map[string]tftypes.Value{"config": strMap(map[string]string{
			"mirror.groups.include": "app-.*, billing", "mirror.acl.include": "", "mirror.metadata.refresh.interval.ms": "5000"})}, ""},
		{"config unknown key", map[string]tftypes.Value{"config": strMap(map[string]string{"mirror.topics.include": "x"})},
			`"mirror.topics.include" is not a mirror config key; the known keys are mirror.acl.include`},
		{"config interval", map[string]tftypes.Value{"config": strMap(map[string]string{"mirror.metadata.refresh.interval.ms": "30s"})},
			"is not a positive number of milliseconds"},
		{"config interval small", map[string]tftypes.Value{"config": strMap(map[string]string{"mirror.metadata.refresh.interval.ms": "10"})},
			"below the agent's minimum of 100"},
		{"config group regex", map[string]tftypes.Value{"config": strMap(map[string]string{"mirror.groups.exclude": "a,b("})},
			`consumer_groups_exclude: "b(" is not a valid regular expression`},
		{"config empty exclude", map[string]tftypes.Value{"config": strMap(map[string]string{"mirror.topic.properties.exclude": ""})},
			"give at least one topic config key"},
		{"set twice", map[string]tftypes.Value{"consumer_groups_include": strs("a"), "config": strMap(map[string]string{"mirror.groups.include": "b"})},
			`config key "mirror.groups.include" and attribute consumer_groups_include set the same thing`},
		{"interval twice", map[string]tftypes.Value{"metadata_refresh_interval": str("1s"), "config": strMap(map[string]string{"mirror.metadata.refresh.interval.ms": "1000"})},
			`config key "mirror.metadata.refresh.interval.ms" and attribute metadata_refresh_interval`},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkValidation(ctx, t, s, &tfprotov6.ValidateResourceConfigRequest{
				TypeName: "kafka_cluster_mirror", Config: config(t, schemas.ResourceSchemas["kafka_cluster_mirror"], base(c.vals)),
			}, c.want)
		})
	}
}

// planMirror plans kafka_cluster_mirror's creation from vals and returns
// the planned attributes.
func planMirror(t *testing.T, vals map[string]tftypes.Value) map[string]tftypes.Value {
	t.Helper()
	s := server(t)
	ctx := context.Background()
	schemas, err := s.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sch := schemas.ResourceSchemas["kafka_cluster_mirror"]
	cfg := config(t, sch, vals)
	typ := sch.ValueType()
	prior, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, nil))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.PlanResourceChange(ctx, &tfprotov6.PlanResourceChangeRequest{
		TypeName: "kafka_cluster_mirror", PriorState: &prior, ProposedNewState: cfg, Config: cfg,
	})
	if err != nil || len(resp.Diagnostics) > 0 {
		t.Fatalf("plan: %v %s", err, diagText(resp.Diagnostics))
	}
	v, err := resp.PlannedState.Unmarshal(typ)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]tftypes.Value
	if err := v.As(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func listOf(t *testing.T, v tftypes.Value) []string {
	t.Helper()
	if !v.IsKnown() || v.IsNull() {
		t.Fatalf("%v is not a known list", v)
	}
	var vs []tftypes.Value
	if err := v.As(&vs); err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range vs {
		var s string
		if err := e.As(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestMirrorSettingsPlan: settings left out plan the value the agent will
// report (so that a no-op stays a no-op), from config when a key sets them.
func TestMirrorSettingsPlan(t *testing.T) {
	plain := planMirror(t, map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092"))})
	fromCfg := planMirror(t, map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092")),
		"consumer_groups_exclude": strs("x"),
		"config": strMap(map[string]string{"mirror.groups.include": "app-.*, billing", "mirror.acl.include": "",
			"mirror.metadata.refresh.interval.ms": "90000", "mirror.topic.properties.exclude": "retention.ms"})})
	for _, c := range []struct {
		plan map[string]tftypes.Value
		attr string
		want []string
	}{
		{plain, "topic_config_exclude", mirrorspec.DefaultTopicConfigExclude()},
		{plain, "consumer_groups_include", []string{".*"}},
		{plain, "consumer_groups_exclude", []string{}},
		{plain, "acl_include", []string{"*"}},
		{plain, "topic_regex", []string{}},
		{fromCfg, "topic_config_exclude", []string{"retention.ms"}},
		{fromCfg, "consumer_groups_include", []string{"app-.*", "billing"}},
		{fromCfg, "consumer_groups_exclude", []string{"x"}},
		{fromCfg, "acl_include", []string{}},
	} {
		if got := listOf(t, c.plan[c.attr]); strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("%s planned %q, want %q", c.attr, got, c.want)
		}
	}
	// Left out, the interval is the agent's: unknown until it says.
	if v := plain["metadata_refresh_interval"]; v.IsKnown() {
		t.Errorf("metadata_refresh_interval planned %v, want unknown", v)
	}
	var iv string
	if err := fromCfg["metadata_refresh_interval"].As(&iv); err != nil || iv != "1m30s" {
		t.Errorf("metadata_refresh_interval from config planned %q (%v), want 1m30s", iv, err)
	}
}

func TestSameInterval(t *testing.T) {
	for _, c := range []struct {
		prior string // "" for null
		ms    int64
		want  string
	}{
		{"", 30000, "30s"},
		{"30s", 30000, "30s"},
		{"30000ms", 30000, "30000ms"},
		{"0.5m", 30000, "0.5m"},
		{"30s", 60000, "1m0s"},
		{"", 200, "200ms"},
	} {
		prior := typesStringOrNull(c.prior)
		if got := sameInterval(prior, c.ms).ValueString(); got != c.want {
			t.Errorf("sameInterval(%q, %d) = %q, want %q", c.prior, c.ms, got, c.want)
		}
	}
}

func typesStringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// TestDescribedAgent: the resource and both data sources show the agent of
// the group that runs the mirror, and nothing for an agent alone.
func TestDescribedAgent(t *testing.T) {
	for _, agent := range []string{"a1", ""} {
		var model clusterMirrorModel
		m := mirrorapi.Mirror{Name: "dr", SourceClusterID: "src", Agent: agent}
		if diags := settingsFromAgent(context.Background(), &model, m); diags.HasError() {
			t.Fatal(diags)
		}
		if model.Agent.IsNull() || model.Agent.ValueString() != agent {
			t.Errorf("resource: agent %v, want %q", model.Agent, agent)
		}
		vals, diags := settingsValues(context.Background(), m)
		if diags.HasError() {
			t.Fatal(diags)
		}
		if v, ok := vals["agent"].(types.String); !ok || v.ValueString() != agent {
			t.Errorf("data sources: agent %v, want %q", vals["agent"], agent)
		}
		if _, ok := mirrorAttrTypes["agent"]; !ok {
			t.Error("the data sources' mirror object has no agent attribute")
		}
	}
}
