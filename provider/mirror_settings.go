package provider

// A mirror's settings (KIP-1279's mirror configs): typed attributes of
// kafka_cluster_mirror, plus a free `config` map of the KIP's keys. Describe
// reports every setting with its default resolved, so an attribute left out
// plans the value the agent will report (from `config`, else the default)
// and a planned no-op stays a no-op; a value changed outside Terraform (kmirror
// update) differs from that plan and shows up as a change.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// The attributes of the settings.
const (
	attrTopicConfigExclude = "topic_config_exclude"
	attrGroupsInclude      = "consumer_groups_include"
	attrGroupsExclude      = "consumer_groups_exclude"
	attrACLInclude         = "acl_include"
	attrRefreshInterval    = "metadata_refresh_interval"
	attrTopicRegex         = "topic_regex"
	attrConfig             = "config"
)

// configAttribute is the typed attribute of each KIP-1279 config key.
var configAttribute = map[string]string{
	mirrorspec.ConfigTopicPropertiesExclude:    attrTopicConfigExclude,
	mirrorspec.ConfigGroupsInclude:             attrGroupsInclude,
	mirrorspec.ConfigGroupsExclude:             attrGroupsExclude,
	mirrorspec.ConfigACLInclude:                attrACLInclude,
	mirrorspec.ConfigMetadataRefreshIntervalMs: attrRefreshInterval,
}

// listSetting is one list setting: its attribute, the config key that can
// set it instead ("" for none), its field in the resource's model, in the
// agent's spec and in describe, and the default the agent reports for it.
type listSetting struct {
	attr, key string
	model     func(*clusterMirrorModel) *types.List
	spec      func(*mirrorapi.MirrorSpec) *[]string
	described func(mirrorapi.Mirror) []string
	def       func() []string
}

var listSettings = []listSetting{
	{attrTopicConfigExclude, mirrorspec.ConfigTopicPropertiesExclude,
		func(m *clusterMirrorModel) *types.List { return &m.TopicConfigExclude },
		func(s *mirrorapi.MirrorSpec) *[]string { return &s.TopicConfigExclude },
		func(m mirrorapi.Mirror) []string { return m.TopicConfigExclude }, mirrorspec.DefaultTopicConfigExclude},
	{attrGroupsInclude, mirrorspec.ConfigGroupsInclude,
		func(m *clusterMirrorModel) *types.List { return &m.GroupsInclude },
		func(s *mirrorapi.MirrorSpec) *[]string { return &s.GroupsInclude },
		func(m mirrorapi.Mirror) []string { return m.GroupsInclude }, mirrorspec.DefaultGroupsInclude},
	{attrGroupsExclude, mirrorspec.ConfigGroupsExclude,
		func(m *clusterMirrorModel) *types.List { return &m.GroupsExclude },
		func(s *mirrorapi.MirrorSpec) *[]string { return &s.GroupsExclude },
		func(m mirrorapi.Mirror) []string { return m.GroupsExclude }, func() []string { return []string{} }},
	{attrACLInclude, mirrorspec.ConfigACLInclude,
		func(m *clusterMirrorModel) *types.List { return &m.ACLInclude },
		func(s *mirrorapi.MirrorSpec) *[]string { return &s.ACLInclude },
		func(m mirrorapi.Mirror) []string { return m.ACLInclude }, mirrorspec.DefaultACLInclude},
	{attrTopicRegex, "",
		func(m *clusterMirrorModel) *types.List { return &m.TopicRegex },
		func(s *mirrorapi.MirrorSpec) *[]string { return &s.TopicRegex },
		func(m mirrorapi.Mirror) []string { return m.TopicRegex }, func() []string { return []string{} }},
}

func listSettingOf(attr string) listSetting {
	for _, s := range listSettings {
		if s.attr == attr {
			return s
		}
	}
	panic("no list setting " + attr)
}

// settingsAttributes are the settings' schema attributes.
func settingsAttributes() map[string]schema.Attribute {
	list := func(attr, desc string, validators ...validator.List) schema.ListAttribute {
		return schema.ListAttribute{
			Optional: true, Computed: true, ElementType: types.StringType, Description: desc,
			Validators:    validators,
			PlanModifiers: []planmodifier.List{listSettingPlan{listSettingOf(attr)}},
		}
	}
	return map[string]schema.Attribute{
		attrTopicConfigExclude: list(attrTopicConfigExclude,
			"Source topic config keys not copied to the destination (KIP-1279 `mirror.topic.properties.exclude`). "+
				"Unset means the KIP's default list, which is what the state then shows. Changes apply in place (the mirror reconnects).",
			listvalidator.SizeAtLeast(1), listvalidator.UniqueValues()),
		attrGroupsInclude: list(attrGroupsInclude,
			"Consumer groups whose committed offsets are synced to the destination, untranslated (KIP-1279 `mirror.groups.include`): "+
				"Go (RE2) regular expressions matching whole group ids. Unset means `[\".*\"]` (every group); `[]` syncs none. Changes apply in place.",
			listvalidator.UniqueValues()),
		attrGroupsExclude: list(attrGroupsExclude,
			"Consumer groups never synced, whatever `consumer_groups_include` says (KIP-1279 `mirror.groups.exclude`): "+
				"regular expressions matching whole group ids. Unset means `[]`. Changes apply in place.",
			listvalidator.UniqueValues()),
		attrACLInclude: list(attrACLInclude,
			"Source ACLs copied to the destination (KIP-1279 `mirror.acl.include`): rules "+
				"`RESOURCE-TYPE;RESOURCE-NAME;OPERATION;PERMISSION;PRINCIPAL` where `*` matches anything, RESOURCE-NAME is a regular "+
				"expression and trailing fields may be left out (such as `TOPIC;orders.*`). Unset means `[\"*\"]` (every ACL); `[]` syncs none. "+
				"Changes apply in place.",
			listvalidator.UniqueValues()),
		attrTopicRegex: list(attrTopicRegex,
			"Go (RE2) regular expressions matching whole source topic names (like Kafka's `mirror.topics.include`): every source "+
				"topic that matches, now or created later, is mirrored too (internal `__` topics never). Those topics are not "+
				"`kafka_mirror_topic` resources; `topic_count` counts them. Unset means `[]`. Changes apply in place; removing an "+
				"expression does not stop the topics it added.",
			listvalidator.UniqueValues()),
		attrRefreshInterval: schema.StringAttribute{
			Optional: true, Computed: true,
			Description: "How often topic configs, partitions, consumer group offsets and ACLs are synced from the source " +
				"(KIP-1279 `mirror.metadata.refresh.interval.ms`), as a Go duration such as `30s` or `1m30s` (at least 100ms, whole " +
				"milliseconds). Unset, the state shows the interval the agent uses: its default (30s unless the agent's " +
				"configuration says otherwise) for a new mirror; removing the attribute later keeps the current interval. " +
				"Changes apply in place.",
			Validators:    []validator.String{durationValidator{}},
			PlanModifiers: []planmodifier.String{intervalPlan{}},
		},
		attrConfig: schema.MapAttribute{
			Optional:    true,
			ElementType: types.StringType,
			Description: "KIP-1279 mirror configs by their Kafka names, for configurations written against the KIP: " +
				"`mirror.topic.properties.exclude`, `mirror.groups.include`, `mirror.groups.exclude`, `mirror.acl.include` " +
				"(comma-separated lists; empty is an empty list) and `mirror.metadata.refresh.interval.ms` (milliseconds). " +
				"Each sets the typed attribute of the same meaning, whose value the state shows; setting a key and its " +
				"typed attribute both is an error. Kept as written: not read back from the agent.",
		},
	}
}

// configMap reads the `config` attribute of cfg: the known values, and the
// keys whose value is not known yet. all is true when the whole map is
// unknown.
func configMap(ctx context.Context, cfg tfsdk.Config) (kv map[string]string, unknown map[string]bool, all bool, diags diag.Diagnostics) {
	var m types.Map
	diags = cfg.GetAttribute(ctx, path.Root(attrConfig), &m)
	if diags.HasError() || m.IsNull() {
		return nil, nil, false, diags
	}
	if m.IsUnknown() {
		return nil, nil, true, diags
	}
	kv, unknown = map[string]string{}, map[string]bool{}
	for k, v := range m.Elements() {
		s, ok := v.(types.String)
		switch {
		case !ok || s.IsUnknown():
			unknown[k] = true
		case !s.IsNull():
			kv[k] = s.ValueString()
		}
	}
	return kv, unknown, false, diags
}

// fromConfig is what config key says of spec, through ApplyConfig (the
// one translation of the KIP's names, shared with the CLI).
func fromConfig(key, value string) (mirrorapi.MirrorSpec, error) {
	var spec mirrorapi.MirrorSpec
	err := mirrorspec.ApplyConfig(&spec, map[string]string{key: value})
	return spec, err
}

// listSettingPlan plans a list setting left out of the configuration: the
// value its `config` key gives, else the default the agent reports.
type listSettingPlan struct{ s listSetting }

func (m listSettingPlan) Description(context.Context) string {
	return "unset, the value of its config key or the agent's default"
}

func (m listSettingPlan) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (m listSettingPlan) PlanModifyList(ctx context.Context, req planmodifier.ListRequest, resp *planmodifier.ListResponse) {
	if !req.ConfigValue.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	def := m.s.def()
	if m.s.key != "" {
		kv, unknown, all, d := configMap(ctx, req.Config)
		resp.Diagnostics.Append(d...)
		if all || unknown[m.s.key] {
			resp.PlanValue = types.ListUnknown(types.StringType)
			return
		}
		if v, ok := kv[m.s.key]; ok {
			spec, err := fromConfig(m.s.key, v)
			if err != nil {
				return // ValidateConfig says why
			}
			def = *m.s.spec(&spec)
		}
	}
	v, d := types.ListValueFrom(ctx, types.StringType, def)
	resp.Diagnostics.Append(d...)
	resp.PlanValue = v
}

// intervalPlan plans metadata_refresh_interval left out of the
// configuration: the value of its config key, else the interval in the
// state (the agent's, which depends on the agent's configuration), else
// unknown until the agent says.
type intervalPlan struct{}

func (intervalPlan) Description(context.Context) string {
	return "unset, the value of its config key or the interval the agent uses"
}

func (p intervalPlan) MarkdownDescription(ctx context.Context) string { return p.Description(ctx) }

func (intervalPlan) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if !req.ConfigValue.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	kv, unknown, all, d := configMap(ctx, req.Config)
	resp.Diagnostics.Append(d...)
	key := mirrorspec.ConfigMetadataRefreshIntervalMs
	switch v, ok := kv[key]; {
	case all || unknown[key]:
		resp.PlanValue = types.StringUnknown()
	case ok:
		if spec, err := fromConfig(key, v); err == nil {
			resp.PlanValue = sameInterval(req.StateValue, spec.MetadataRefreshIntervalMs)
		}
	case !req.StateValue.IsNull():
		resp.PlanValue = req.StateValue
	}
}

// sameInterval is ms as a duration string: prior when it says the same
// (30s and 30000ms are one interval), so that no diff shows.
func sameInterval(prior types.String, ms int64) types.String {
	want := time.Duration(ms) * time.Millisecond
	if !prior.IsNull() && !prior.IsUnknown() {
		if d, err := time.ParseDuration(prior.ValueString()); err == nil && d == want {
			return prior
		}
	}
	return types.StringValue(want.String())
}

// parseInterval checks a metadata_refresh_interval as the agent would.
func parseInterval(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: give a number with a unit, such as 30s, 1m or 500ms", s)
	case d%time.Millisecond != 0:
		return 0, fmt.Errorf("%q is not a whole number of milliseconds", s)
	case d < mirrorspec.MinMetadataRefreshIntervalMs*time.Millisecond:
		return 0, fmt.Errorf("%q is below the agent's minimum of %dms; leave it out for the agent's default", s, mirrorspec.MinMetadataRefreshIntervalMs)
	}
	return d.Milliseconds(), nil
}

type durationValidator struct{}

func (durationValidator) Description(context.Context) string {
	return fmt.Sprintf("a Go duration of at least %dms, in whole milliseconds", mirrorspec.MinMetadataRefreshIntervalMs)
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (durationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := parseInterval(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+attrRefreshInterval, attrRefreshInterval+": "+err.Error()+".")
	}
}

// knownStrings is a known list's strings (never nil); ok is false for a
// null or unknown list, or one with unknown elements.
func knownStrings(ctx context.Context, l types.List) (out []string, ok bool) {
	if l.IsNull() || l.IsUnknown() {
		return nil, false
	}
	for _, e := range l.Elements() {
		if e.IsUnknown() {
			return nil, false
		}
	}
	out = []string{}
	if d := l.ElementsAs(ctx, &out, false); d.HasError() {
		return nil, false
	}
	return out, true
}

// validateSettings checks the settings of a configuration as the agent
// will (metasync's group filter and ACL rules, the topic regex rules), and
// that no setting is given twice, by attribute and by config key. Unknown
// values are checked at apply time by the agent.
func validateSettings(ctx context.Context, cfg tfsdk.Config) (diags diag.Diagnostics) {
	lists := map[string]types.List{}
	for _, s := range listSettings {
		var l types.List
		diags.Append(cfg.GetAttribute(ctx, path.Root(s.attr), &l)...)
		lists[s.attr] = l
	}
	var interval types.String
	diags.Append(cfg.GetAttribute(ctx, path.Root(attrRefreshInterval), &interval)...)
	kv, _, _, d := configMap(ctx, cfg)
	diags.Append(d...)
	if diags.HasError() {
		return diags
	}
	// Where each setting comes from, for the errors; and its value.
	from := map[string]path.Path{}
	values := map[string][]string{}
	for _, s := range listSettings {
		if v, ok := knownStrings(ctx, lists[s.attr]); ok {
			from[s.attr], values[s.attr] = path.Root(s.attr), v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		at := path.Root(attrConfig).AtMapKey(k)
		spec, err := fromConfig(k, kv[k])
		if err != nil {
			diags.AddAttributeError(at, "Invalid mirror config", fmt.Sprintf("config: %v.", err))
			continue
		}
		attr := configAttribute[k]
		set := !interval.IsNull()
		if attr != attrRefreshInterval {
			set = !lists[attr].IsNull()
		}
		if set {
			diags.AddAttributeError(at, "Mirror setting given twice",
				fmt.Sprintf("config key %q and attribute %s set the same thing; remove one of them (the typed attribute %s is preferred).", k, attr, attr))
			continue
		}
		if attr == attrRefreshInterval {
			if spec.MetadataRefreshIntervalMs < mirrorspec.MinMetadataRefreshIntervalMs {
				diags.AddAttributeError(at, "Invalid mirror config", fmt.Sprintf("config: %s: %d is below the agent's minimum of %d; leave it out for the agent's default.",
					k, spec.MetadataRefreshIntervalMs, mirrorspec.MinMetadataRefreshIntervalMs))
			}
			continue
		}
		v := *listSettingOf(attr).spec(&spec)
		if attr == attrTopicConfigExclude && len(v) == 0 {
			diags.AddAttributeError(at, "Invalid mirror config", fmt.Sprintf("config: %s: give at least one topic config key; leave it out for the KIP's default list.", k))
			continue
		}
		from[attr], values[attr] = at, v
	}

	// The agent's own checks, on the values as they will be sent.
	groupsInclude := values[attrGroupsInclude]
	if _, ok := from[attrGroupsInclude]; !ok {
		groupsInclude = nil // the default, or not known yet
	}
	if _, err := mirrorspec.NewGroupFilter(groupsInclude, values[attrGroupsExclude]); err != nil {
		at, name := from[attrGroupsInclude], attrGroupsInclude
		if strings.HasPrefix(err.Error(), "groups_exclude") {
			at, name = from[attrGroupsExclude], attrGroupsExclude
		}
		diags.AddAttributeError(at, "Invalid "+name, name+": "+strings.TrimPrefix(strings.TrimPrefix(err.Error(), "groups_include: "), "groups_exclude: ")+".")
	}
	if rules, ok := values[attrACLInclude]; ok {
		if _, err := mirrorspec.ParseACLRules(attrACLInclude, rules); err != nil {
			diags.AddAttributeError(from[attrACLInclude], "Invalid "+attrACLInclude, err.Error()+".")
		}
	}
	if errs := mirrorspec.ValidateTopicRegex(values[attrTopicRegex]); len(errs) > 0 {
		diags.AddAttributeError(from[attrTopicRegex], "Invalid "+attrTopicRegex, strings.Join(errs, "; ")+".")
	}
	return diags
}

// settingsToSpec puts the settings of plan into spec: all of them, or with
// prior only those that differ from it (the agent keeps a field left out).
func settingsToSpec(ctx context.Context, plan clusterMirrorModel, prior *clusterMirrorModel, spec *mirrorapi.MirrorSpec) {
	for _, s := range listSettings {
		l := *s.model(&plan)
		if prior != nil && l.Equal(*s.model(prior)) {
			continue
		}
		if v, ok := knownStrings(ctx, l); ok {
			*s.spec(spec) = v
		}
	}
	iv := plan.MetadataRefreshInterval
	if iv.IsNull() || iv.IsUnknown() || (prior != nil && iv.Equal(prior.MetadataRefreshInterval)) {
		return
	}
	if ms, err := parseInterval(iv.ValueString()); err == nil {
		spec.MetadataRefreshIntervalMs = ms
	}
}

// settingsFromAgent sets the settings of model from describe.
func settingsFromAgent(ctx context.Context, model *clusterMirrorModel, m mirrorapi.Mirror) (diags diag.Diagnostics) {
	for _, s := range listSettings {
		v := s.described(m)
		if v == nil {
			v = []string{}
		}
		l, d := types.ListValueFrom(ctx, types.StringType, v)
		diags.Append(d...)
		*s.model(model) = l
	}
	model.MetadataRefreshInterval = sameInterval(model.MetadataRefreshInterval, m.MetadataRefreshIntervalMs)
	model.SourceClusterID = types.StringValue(m.SourceClusterID)
	model.Agent = types.StringValue(m.Agent)
	return diags
}

// settingsValues are the settings of m for the data sources' objects.
func settingsValues(ctx context.Context, m mirrorapi.Mirror) (map[string]attr.Value, diag.Diagnostics) {
	var model clusterMirrorModel
	diags := settingsFromAgent(ctx, &model, m)
	out := map[string]attr.Value{
		attrRefreshInterval: model.MetadataRefreshInterval,
		"source_cluster_id": model.SourceClusterID,
		"agent":             model.Agent,
	}
	for _, s := range listSettings {
		out[s.attr] = *s.model(&model)
	}
	return out, diags
}
