package provider

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// The agent's naming rules (agent/coordinator MirrorSpec.Validate), checked
// at plan time too.
var (
	mirrorNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,200}$`)
	topicNameRE  = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	hostPortRE   = regexp.MustCompile(`^[^\s:]+:[0-9]{1,5}$|^\[[0-9a-fA-F:.]+\]:[0-9]{1,5}$`)
)

const (
	mirrorNameRule = "use 1 to 200 letters, digits, '.', '_' or '-'"
	topicNameRule  = "use 1 to 249 letters, digits, '.', '_' or '-' (not \".\", \"..\" or an internal \"__\" name)"
	hostPortRule   = "give HOST:PORT of a source broker, such as kafka-1.example:9092"
)

// partitionAttrTypes is one element of a topic's computed partitions list.
var partitionAttrTypes = map[string]attr.Type{
	"partition":            types.Int64Type,
	"source_offset":        types.Int64Type,
	"destination_offset":   types.Int64Type,
	"lag":                  types.Int64Type,
	"state":                types.StringType,
	"last_mirrored_offset": types.Int64Type,
}

var partitionObjectType = types.ObjectType{AttrTypes: partitionAttrTypes}

// stateName is how a partition state shows in Terraform: lower case, as
// the future state argument of kafka_mirror_topic will take it.
func stateName(s mirrorapi.State) string { return strings.ToLower(string(s)) }

// topicFigures are a mirror topic's computed attributes.
type topicFigures struct {
	Partitions types.List
	MaxLag     types.Int64
	Reason     types.String
}

// flattenTopic turns the agent's view of a topic into its computed
// attributes.
func flattenTopic(t mirrorapi.Topic) (topicFigures, diag.Diagnostics) {
	var diags diag.Diagnostics
	parts := make([]attr.Value, 0, len(t.Partitions))
	var maxLag int64
	var reasons []string
	if t.Error != "" {
		reasons = append(reasons, t.Error)
	}
	ps := append([]mirrorapi.Partition(nil), t.Partitions...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
	for _, p := range ps {
		obj, d := types.ObjectValue(partitionAttrTypes, map[string]attr.Value{
			"partition":            types.Int64Value(int64(p.Partition)),
			"source_offset":        types.Int64Value(p.SourceOffset),
			"destination_offset":   types.Int64Value(p.DestinationOffset),
			"lag":                  types.Int64Value(p.Lag),
			"state":                types.StringValue(stateName(p.State)),
			"last_mirrored_offset": types.Int64Value(p.LastMirrored),
		})
		diags.Append(d...)
		parts = append(parts, obj)
		maxLag = max(maxLag, p.Lag)
		if p.Reason != "" {
			reasons = append(reasons, fmt.Sprintf("partition %d: %s", p.Partition, p.Reason))
		}
	}
	list, d := types.ListValue(partitionObjectType, parts)
	diags.Append(d...)
	return topicFigures{Partitions: list, MaxLag: types.Int64Value(maxLag), Reason: types.StringValue(strings.Join(reasons, "; "))}, diags
}

// findTopic returns topic of mirror m.
func findTopic(m mirrorapi.Mirror, topic string) (mirrorapi.Topic, bool) {
	for _, t := range m.Topics {
		if t.Name == topic {
			return t, true
		}
	}
	return mirrorapi.Topic{}, false
}

// mirrorFigures are a mirror's computed attributes.
type mirrorFigures struct {
	MaxLag      types.Int64
	StateCounts types.Map
	TopicCount  types.Int64
	Error       types.String
	Topics      types.List
}

func flattenMirror(ctx context.Context, m mirrorapi.Mirror) (mirrorFigures, diag.Diagnostics) {
	var diags diag.Diagnostics
	counts := map[string]int64{}
	for s, n := range m.StateCounts {
		counts[stateName(s)] += int64(n)
	}
	sc, d := types.MapValueFrom(ctx, types.Int64Type, counts)
	diags.Append(d...)
	names := make([]string, 0, len(m.Topics))
	for _, t := range m.Topics {
		names = append(names, t.Name)
	}
	tl, d := types.ListValueFrom(ctx, types.StringType, names)
	diags.Append(d...)
	return mirrorFigures{
		MaxLag: types.Int64Value(m.MaxLag), StateCounts: sc, TopicCount: types.Int64Value(int64(len(m.Topics))),
		Error: types.StringValue(m.Error), Topics: tl,
	}, diags
}

// parseTopicID splits a kafka_mirror_topic import id, "MIRROR/TOPIC".
func parseTopicID(id string) (mirror, topic string, err error) {
	mirror, topic, ok := strings.Cut(id, "/")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q has no '/': expected MIRROR/TOPIC, such as dr/orders", id)
	case strings.Contains(topic, "/"):
		return "", "", fmt.Errorf("%q has more than one '/': expected MIRROR/TOPIC (mirror and topic names cannot contain '/')", id)
	case !mirrorNameRE.MatchString(mirror):
		return "", "", fmt.Errorf("%q: mirror name %q is not valid (%s); expected MIRROR/TOPIC", id, mirror, mirrorNameRule)
	case !validTopic(topic):
		return "", "", fmt.Errorf("%q: topic name %q is not valid (%s); expected MIRROR/TOPIC", id, topic, topicNameRule)
	}
	return mirror, topic, nil
}

func validTopic(t string) bool {
	return topicNameRE.MatchString(t) && t != "." && t != ".." && !strings.HasPrefix(t, "__")
}

func topicID(mirror, topic string) string { return mirror + "/" + topic }
