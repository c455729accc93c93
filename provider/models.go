package provider

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
)

// partitionAttrTypes is one element of a topic's computed partitions list.
var partitionAttrTypes = map[string]attr.Type{
	"partition":            types.Int64Type,
	"source_offset":        types.Int64Type,
	"destination_offset":   types.Int64Type,
	"lag":                  types.Int64Type,
	"state":                types.StringType,
	"stop_mode":            types.StringType,
	"last_mirrored_offset": types.Int64Type,
	"agent":                types.StringType,
}

var partitionObjectType = types.ObjectType{AttrTypes: partitionAttrTypes}

// stateName is how a partition state shows in Terraform: lower case.
func stateName(s mirrorapi.State) string { return strings.ToLower(string(s)) }

// The values of kafka_mirror_topic's state: the four a configuration can
// ask for, and three more Read can report so that a plan shows the drift.
const (
	topicMirroring = "mirroring" // every partition INITIALIZING, PREPARING or MIRRORING
	topicPaused    = "paused"    // every partition PAUSED
	topicStopped   = "stopped"   // every partition STOPPED, at least one by a failover stop
	topicPromoted  = "promoted"  // every partition STOPPED by a promote (RPO 0)

	topicStopping = "stopping" // a stop is under way on some partition
	topicFailed   = "failed"   // some partition FAILED (reason says why)
	topicMixed    = "mixed"    // partitions in different states
)

// configurableTopicStates are what state = ... accepts.
var configurableTopicStates = []string{topicMirroring, topicPaused, topicStopped, topicPromoted}

// terminal says whether a topic state is final: a stopped topic is
// writable on the destination and never mirrors again.
func terminal(state string) bool { return state == topicStopped || state == topicPromoted }

// partitionTopicState is what one partition says of its topic's state.
func partitionTopicState(p mirrorapi.Partition) string {
	switch p.State {
	case mirrorapi.StateInitializing, mirrorapi.StatePreparing, mirrorapi.StateMirroring:
		return topicMirroring
	case mirrorapi.StatePaused:
		return topicPaused
	case mirrorapi.StateStopped:
		if p.StopMode == mirrorapi.StopModePromote {
			return topicPromoted
		}
		return topicStopped
	case mirrorapi.StateStopping:
		return topicStopping
	case mirrorapi.StateFailed:
		return topicFailed
	}
	return topicMixed
}

// topicState maps the agent's partition states to kafka_mirror_topic's
// state, and says how the partitions differ when they do. A topic whose
// partitions the agent has not read yet is mirroring (it is about to).
func topicState(t mirrorapi.Topic) (state, mixed string) {
	counts := map[string]int{}
	for _, p := range t.Partitions {
		counts[partitionTopicState(p)]++
	}
	switch {
	case len(counts) == 0:
		return topicMirroring, ""
	case len(counts) == 1:
		for s := range counts {
			return s, ""
		}
	}
	keys := make([]string, 0, len(counts))
	for s := range counts {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, s := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	mixed = "partitions in different states: " + strings.Join(parts, ", ")
	switch {
	case counts[topicFailed] > 0:
		return topicFailed, mixed
	case counts[topicStopping] > 0:
		return topicStopping, mixed
	case len(counts) == 2 && counts[topicStopped] > 0 && counts[topicPromoted] > 0:
		// Stopped, some by failover: no RPO 0 promise for the topic.
		return topicStopped, ""
	}
	return topicMixed, mixed
}

// lastingTopicError says whether a topic error keeps the topic from
// mirroring until someone acts (as opposed to a retry in progress).
func lastingTopicError(code mirrorapi.ReasonCode) bool {
	return code == reason.SourceTopicMissing || code == reason.DestinationHasMorePartitions
}

// topicFigures are a mirror topic's computed attributes.
type topicFigures struct {
	State            types.String
	Partitions       types.List
	MaxLag           types.Int64
	Reason           types.String
	ReasonCode       types.String
	ReadOnlyEnforced types.Bool
	// DivergentTopic and DivergentRecords are where a failback with
	// recreate put the records the destination took after the last
	// mirrored offset; "" and 0 when none.
	DivergentTopic   types.String
	DivergentRecords types.Int64
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
	state, mixed := topicState(t)
	if mixed != "" {
		reasons = append(reasons, mixed)
	}
	if state == topicMirroring && lastingTopicError(t.ErrorCode) {
		// It cannot mirror until someone fixes the cause: a plan must
		// show it, not a quiet "mirroring".
		state = topicFailed
	}
	ps := append([]mirrorapi.Partition(nil), t.Partitions...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
	lagKnown := true
	for _, p := range ps {
		// Unknown figures are null, never 0: the source's end has not
		// been read since the agent started.
		lag := types.Int64Value(p.Lag)
		if p.Lag == mirrorapi.LagUnknown || p.SourceOffsetAt.IsZero() {
			lag, lagKnown = types.Int64Null(), false
		}
		obj, d := types.ObjectValue(partitionAttrTypes, map[string]attr.Value{
			"partition":            types.Int64Value(int64(p.Partition)),
			"source_offset":        types.Int64Value(p.SourceOffset),
			"destination_offset":   types.Int64Value(p.DestinationOffset),
			"lag":                  lag,
			"state":                types.StringValue(stateName(p.State)),
			"stop_mode":            types.StringValue(p.StopMode),
			"last_mirrored_offset": types.Int64Value(p.LastMirrored),
			"agent":                types.StringValue(p.Agent),
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
	maxLagValue := types.Int64Value(maxLag)
	if !lagKnown {
		maxLagValue = types.Int64Null()
	}
	f := topicFigures{
		State: types.StringValue(state), Partitions: list, MaxLag: maxLagValue,
		Reason: types.StringValue(strings.Join(reasons, "; ")), ReasonCode: types.StringValue(string(topicReasonCode(t.ErrorCode, ps))),
		ReadOnlyEnforced: types.BoolValue(t.ReadOnlyEnforced),
		DivergentTopic:   types.StringValue(""), DivergentRecords: types.Int64Value(0),
	}
	if t.Failback != nil {
		f.DivergentTopic, f.DivergentRecords = types.StringValue(t.Failback.DivergentTopic), types.Int64Value(t.Failback.DivergentRecords)
	}
	return f, diags
}

// topicReasonCode is the code kafka_mirror_topic's reason_code shows: the
// topic error's (errCode), else that of the first FAILED partition of ps
// with one, else that of the first partition with one; "" when none has.
func topicReasonCode(errCode mirrorapi.ReasonCode, ps []mirrorapi.Partition) mirrorapi.ReasonCode {
	if errCode != "" {
		return errCode
	}
	var first mirrorapi.ReasonCode
	for _, p := range ps {
		switch {
		case p.ReasonCode == "":
		case p.State == mirrorapi.StateFailed:
			return p.ReasonCode
		case first == "":
			first = p.ReasonCode
		}
	}
	return first
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
	}
	if err := mirrorspec.CheckMirrorName(mirror); err != nil {
		return "", "", fmt.Errorf("%q: mirror name %w; expected MIRROR/TOPIC", id, err)
	}
	if err := mirrorspec.CheckTopicName(topic); err != nil {
		return "", "", fmt.Errorf("%q: topic name %w; expected MIRROR/TOPIC", id, err)
	}
	return mirror, topic, nil
}

func topicID(mirror, topic string) string { return mirror + "/" + topic }
