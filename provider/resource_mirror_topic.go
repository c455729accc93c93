package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

var (
	_ resource.Resource                = (*mirrorTopicResource)(nil)
	_ resource.ResourceWithConfigure   = (*mirrorTopicResource)(nil)
	_ resource.ResourceWithImportState = (*mirrorTopicResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*mirrorTopicResource)(nil)
)

// The default timeouts of the timeouts block: how long a change of state
// waits until every partition holds it. A promote waits for lag 0, so
// update gets the longest.
const (
	defaultCreateTimeout = 10 * time.Minute
	defaultUpdateTimeout = 20 * time.Minute
	defaultDeleteTimeout = 10 * time.Minute
)

// pollInterval is how often a change of state reads describe back.
var pollInterval = 250 * time.Millisecond

// NewMirrorTopicResource is kafka_mirror_topic.
func NewMirrorTopicResource() resource.Resource { return &mirrorTopicResource{} }

type mirrorTopicResource struct {
	client *mirrorapi.Client
}

type mirrorTopicModel struct {
	ID               types.String   `tfsdk:"id"`
	Mirror           types.String   `tfsdk:"mirror"`
	Topic            types.String   `tfsdk:"topic"`
	State            types.String   `tfsdk:"state"`
	Partitions       types.List     `tfsdk:"partitions"`
	MaxLag           types.Int64    `tfsdk:"max_lag"`
	Reason           types.String   `tfsdk:"reason"`
	ReasonCode       types.String   `tfsdk:"reason_code"`
	ReadOnlyEnforced types.Bool     `tfsdk:"read_only_enforced"`
	Failback         types.Bool     `tfsdk:"failback"`
	Recreate         types.Bool     `tfsdk:"recreate"`
	DivergentTopic   types.String   `tfsdk:"divergent_topic"`
	DivergentRecords types.Int64    `tfsdk:"divergent_records"`
	Timeouts         timeouts.Value `tfsdk:"timeouts"`
}

func (r *mirrorTopicResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mirror_topic"
}

// topicFiguresDescriptions are the computed attributes' descriptions,
// shared with the data source.
func topicFiguresDescriptions() (partitions, maxLag, reason, readOnly string) {
	return "The topic's partitions as the agent last reported them: `partition`, `source_offset` (source high watermark), " +
			"`destination_offset` (next offset to write: every offset below it is mirrored), `lag` (records: `source_offset` " +
			"minus `destination_offset`, in every state; null when the agent has not read the source's end since it started, never a stale 0; " +
			"`kmirror describe` and the API say how old the figures are), " +
			"`state` (`initializing`, `preparing`, `mirroring`, `paused`, `stopping`, `stopped` or `failed`), " +
			"`stop_mode` (`failover` or `promote` for a stopping or stopped partition, else empty), " +
			"`last_mirrored_offset` (-1 when none is; after a stop, the final offset) and " +
			"`agent` (the agent of the group that runs the partition with `coordination = \"group\"`; empty with `coordination = \"single\"`). Empty until the agent has read " +
			"the source topic's metadata.",
		"Largest partition lag of the topic, in records, when last read; null when some partition's lag is unknown (the agent has not read the source's end).",
		"Why the topic or some of its partitions are not mirroring, or how its partitions' states differ; empty when there is nothing to say.",
		"Whether the destination topic is read-only for everyone but the agent (a DENY WRITE ACL for `User:*`). " +
			"False without an authorizer on the destination, when the agent is not a super user there, and once the topic is stopped."
}

// reasonCodeDescription is reason_code's description, shared with the data
// source.
const reasonCodeDescription = "Stable code of `reason`, for conditions, checks and alerts (`reason` is for people and may be reworded): " +
	"the topic's error code when it has one, else the code of its lowest-numbered failed partition, else that of its " +
	"lowest-numbered partition whose reason has one; empty when there is none. Codes such as `FOREIGN_WRITE`, " +
	"`SOURCE_TOPIC_MISSING` or `PROMOTE_TIMED_OUT` never change meaning; the troubleshooting guide has a section for each."

const stateDescription = "Desired state of the topic: `mirroring` (the default), `paused` (mirroring halts and keeps its position; " +
	"the destination topic stays read-only), `stopped` (failover: mirroring ends at once, the source reachable or not; " +
	"records not mirrored yet stay on the source only) or `promoted` (mirroring ends once the destination has everything " +
	"the source acknowledged: lag 0, RPO 0). A stopped or promoted topic is an ordinary writable topic on the destination " +
	"and never mirrors again: changing `state` back fails at plan time (to mirror the other way, fail back with a mirror " +
	"in the other direction, `kmirror add --failback`). A change of state waits until every partition holds it, within the `timeouts` block, " +
	"and the final offsets are in `partitions`.\n\n" +
	"Read reports what the agent says: a topic paused or stopped outside Terraform shows up as a planned change. " +
	"A stop made outside Terraform (`kmirror stop`) cannot be undone: the plan shows it as drift, with a warning, and applying " +
	"it fails; set `state = \"stopped\"` (or `\"promoted\"`) to accept it. Destroy works either way. " +
	"Besides the four values above it can report `stopping` (a stop under way), `failed` (some partition failed: " +
	"`reason` says why; `mirroring` recovers it) and `mixed` (partitions in different states)."

func (r *mirrorTopicResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	pd, ld, rd, rod := topicFiguresDescriptions()
	resp.Schema = schema.Schema{
		Description: "A topic mirrored by a `kafka_cluster_mirror`: the agent creates the destination topic and copies every " +
			"partition offset-for-offset. `state` pauses, resumes, fails over or promotes it.\n\n" +
			"**Destroying this resource never deletes data**: it stops mirroring the topic (a failover stop, unless it is " +
			"already stopped or promoted) and leaves the destination topic and all its data in place, writable. The " +
			"topic stays listed by its mirror as stopped and cannot be mirrored again by the same mirror; " +
			"destroying the mirror forgets it.",
		Attributes: map[string]schema.Attribute{
			// Required attributes
			"mirror": schema.StringAttribute{
				Required:      true,
				Description:   "Name of the mirror (a `kafka_cluster_mirror`'s `name`). Changing it replaces the resource.",
				Validators:    []validator.String{mirrorNameValidator},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"topic": schema.StringAttribute{
				Required:      true,
				Description:   "Source topic to mirror; the destination topic has the same name. Changing it replaces the resource.",
				Validators:    []validator.String{topicNameValidator},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			// Optional attributes
			"state": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString(topicMirroring),
				Description: stateDescription,
				Validators:  []validator.String{stringvalidator.OneOf(configurableTopicStates...)},
			},
			"failback": schema.BoolAttribute{
				Optional: true,
				Description: "Add the topic as a failback (`kmirror add --failback`): `mirror` is a mirror in the other direction, on the " +
					"agent whose destination is the old source cluster, reading the cluster the topic was failed over to. Mirroring " +
					"resumes at each partition's last mirrored offset, read from the state topic of the stopped mirror; the topic must be " +
					"stopped or promoted there. When the old source took records after that offset, creating the resource fails, " +
					"unless `recreate` is true. Only used when the resource is created; changing it replaces the resource. " +
					"See the failback guide.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.RequiresReplace()},
			},
			"recreate": schema.BoolAttribute{
				Optional: true,
				Description: "Allows the agent to delete the destination topic and mirror it again whole, from the source's log start, " +
					"where resuming cannot keep offsets identical. **Recovery**: when the topic is `failed` and `state` is `mirroring`, " +
					"apply recovers it with `kmirror recover --recreate` instead of a plain recover; use it when `reason_code` is one a " +
					"plain recover cannot clear (`FOREIGN_WRITE`, `DESTINATION_TOPIC_RECREATED`, `DESTINATION_LOST_RECORDS`, " +
					"`DESTINATION_AHEAD`, `MARKERS_REFUSED`, `SOURCE_TOPIC_RECREATED`), and set it back to false once the topic mirrors again. The plan " +
					"warns before it deletes anything. **Failback** (with `failback = true`, at creation): when the destination (the old " +
					"source) took records after the last mirrored offset, copy them to a side topic `TOPIC.kmirror-divergent-<unix time>` " +
					"(see `divergent_topic`), delete the topic and mirror it whole.",
			},
			// Computed attributes
			"divergent_topic": schema.StringAttribute{
				Computed:      true,
				Description:   divergentTopicDescription,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"divergent_records": schema.Int64Attribute{
				Computed:      true,
				Description:   divergentRecordsDescription,
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			},
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "`MIRROR/TOPIC`, the import ID.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"partitions": schema.ListAttribute{
				Computed:    true,
				ElementType: partitionObjectType,
				Description: pd,
			},
			"max_lag":            schema.Int64Attribute{Computed: true, Description: ld},
			"reason":             schema.StringAttribute{Computed: true, Description: rd},
			"reason_code":        schema.StringAttribute{Computed: true, Description: reasonCodeDescription},
			"read_only_enforced": schema.BoolAttribute{Computed: true, Description: rod},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create: true, Update: true, Delete: true,
				CreateDescription: "How long creating waits for a topic created `paused` to pause (default 10m).",
				UpdateDescription: "How long a change of `state` waits until every partition holds it (default 20m; a promote waits for lag 0).",
				DeleteDescription: "How long destroying waits for the failover stop to complete (default 10m).",
			}),
		},
	}
}

func (r *mirrorTopicResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// The descriptions of the failback's computed attributes.
const (
	divergentTopicDescription = "After a failback with `recreate`: the side topic, on the destination, holding the records the " +
		"destination took after the last mirrored offset; empty when there were none."
	divergentRecordsDescription = "After a failback with `recreate`: how many records were copied to `divergent_topic`."
)

// failbackHint is what to do instead of mirroring a stopped topic again.
const failbackHint = "A stopped topic is writable on the destination and its mirror has ended for good: it cannot mirror, " +
	"pause or be promoted again. To mirror it back, fail back with a mirror in the other direction: on the agent whose " +
	"destination is the old source cluster, declare a kafka_cluster_mirror reading this cluster and a kafka_mirror_topic " +
	"for the topic with failback = true (add recreate = true if the old source took records after the stop; " +
	"CLI: kmirror add --failback). It resumes at the last mirrored offset; once it has caught up, promote it there. " +
	"To keep this resource, set state to %q again."

// checkTransition says why a plan cannot move a topic from state from to
// state to, "" when it can. It is the plan-time side of the agent's rule
// (partition.Transition): a stopped topic stays stopped.
func checkTransition(from, to string) (summary, detail string) {
	if from == to {
		return "", ""
	}
	switch from {
	case topicStopped, topicPromoted:
		summary = fmt.Sprintf("Cannot change a %s topic to %s", from, to)
		detail = fmt.Sprintf(failbackHint, from)
		if terminal(to) {
			detail = fmt.Sprintf("The topic is already stopped (by a %s stop); how it stopped cannot change afterwards. Set state to %q.",
				map[string]string{topicStopped: "failover", topicPromoted: "promote"}[from], from)
		}
		return summary, detail
	case topicStopping:
		if !terminal(to) {
			return fmt.Sprintf("Cannot change a stopping topic to %s", to),
				"A stop is under way (started outside this configuration, or by an earlier apply that timed out): " +
					"the topic becomes writable on the destination and cannot mirror again. Set state to \"stopped\" " +
					"(which completes it as a failover) or \"promoted\"; to mirror back, fail back with a mirror in the other direction (kmirror add --failback)."
		}
	}
	return "", ""
}

// ModifyPlan refuses impossible changes of state at plan time, and warns
// what destroying does.
func (r *mirrorTopicResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		if req.State.Raw.IsNull() {
			return
		}
		var state mirrorTopicModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if !terminal(state.State.ValueString()) {
			resp.Diagnostics.AddWarning(fmt.Sprintf("Destroying kafka_mirror_topic %s stops mirroring it", topicID(state.Mirror.ValueString(), state.Topic.ValueString())),
				"Destroy stops mirroring the topic (a failover stop: records not mirrored yet stay on the source only). "+
					"The destination topic and its data stay in place and become writable; nothing is deleted.")
		}
		return
	}
	var plan mirrorTopicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.State.IsUnknown() || plan.State.IsNull() {
		return
	}
	to := plan.State.ValueString()
	if req.State.Raw.IsNull() {
		if terminal(to) {
			resp.Diagnostics.AddAttributeError(path.Root("state"), fmt.Sprintf("A new mirror topic cannot start %s", to),
				"A kafka_mirror_topic starts by mirroring: create it with state \"mirroring\" (or \"paused\"), then change "+
					"state to stop or promote it. To manage a topic that is already stopped, import it: terraform import <address> MIRROR/TOPIC.")
		}
		if !plan.Failback.ValueBool() {
			r.checkNewTopic(ctx, &resp.Diagnostics, plan.Mirror, plan.Topic)
		}
		return
	}
	var state mirrorTopicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !plan.Mirror.Equal(state.Mirror) || !plan.Topic.Equal(state.Topic) {
		return // replaced: a new topic
	}
	cur := state.State.ValueString()
	if cur == topicFailed && to == topicMirroring {
		warnRecovery(&resp.Diagnostics, state, plan.Recreate.ValueBool())
	}
	summary, detail := checkTransition(cur, to)
	if summary == "" {
		if terminal(to) && !terminal(cur) {
			what := "a failover: mirroring ends at once, and records the source took but the destination has not yet stay on the source only"
			if to == topicPromoted {
				what = "a promote: mirroring ends once the destination has every record the source acknowledged"
			}
			resp.Diagnostics.AddAttributeWarning(path.Root("state"), fmt.Sprintf("Stopping topic %q cannot be undone", state.Topic.ValueString()),
				fmt.Sprintf("state = %q is %s. The destination topic becomes writable and this mirror never mirrors it again; "+
					"mirroring back takes a failback with a mirror in the other direction.", to, what))
		}
		return
	}
	if applied, ok := appliedState(ctx, req.Private); ok && applied == cur {
		// Terraform put the topic there and the configuration now asks
		// for what cannot follow: refused before anything is applied.
		resp.Diagnostics.AddAttributeError(path.Root("state"), summary, detail+destroyHint)
		return
	}
	// Changed outside Terraform (kmirror stop, another workspace): drift,
	// which a plan shows as a change rather than an error, so that
	// plan -detailed-exitcode reports it and destroy still works. Applying
	// it fails, saying the same.
	resp.Diagnostics.AddAttributeWarning(path.Root("state"), summary+" (it was changed outside Terraform)",
		fmt.Sprintf("The agent reports topic %q as %s, which this configuration did not ask for. Applying this plan fails. ",
			state.Topic.ValueString(), cur)+detail)
}

// recreateCures are the failures of a partition that a plain recover
// cannot clear, because the destination no longer holds what the source
// does at the same offsets: only recreating the destination topic can.
var recreateCures = []reason.Code{reason.ForeignWrite, reason.DestinationTopicRecreated, reason.DestinationLostRecords,
	reason.DestinationAhead, reason.MarkersRefused, reason.SourceTopicRecreated, reason.SourceTopicRecreatedRealignFailed, reason.RealignFailed}

// warnRecovery says, in a plan that recovers a failed topic, what apply
// will do: delete the destination topic (recreate), or a recover that is
// bound to fail again for the reason the topic reports.
func warnRecovery(diags *diag.Diagnostics, state mirrorTopicModel, recreate bool) {
	topic := state.Topic.ValueString()
	if recreate {
		diags.AddAttributeWarning(path.Root("recreate"), fmt.Sprintf("Recovering topic %q deletes its destination topic", topic),
			fmt.Sprintf("recreate = true: apply deletes the destination topic %q (every record on it, and any record written there "+
				"outside the mirror), creates it again with its configs and mirrors it whole from the source's log start. "+
				"Consumers of the destination read the same offsets again once it has caught up. Set recreate = false after the apply.", topic))
		return
	}
	if code := reason.Code(state.ReasonCode.ValueString()); slices.Contains(recreateCures, code) {
		diags.AddAttributeWarning(path.Root("state"), fmt.Sprintf("A plain recover of topic %q will fail again (%s)", topic, code),
			fmt.Sprintf("The topic failed with %s: %s. Resuming cannot make the destination hold what the source holds at the same "+
				"offsets. Set recreate = true to delete the destination topic and mirror it again whole, or state = \"stopped\" to fail over.",
				code, state.Reason.ValueString()))
	}
}

// checkNewTopic refuses at plan time a topic the agent would refuse at
// apply, after other resources of the same apply were changed: one its
// mirror already lists (not in this state: import it), or one another
// mirror mirrors (a destination topic has one source). It says nothing when
// the agent cannot be asked or a value is not known yet.
func (r *mirrorTopicResource) checkNewTopic(ctx context.Context, diags *diag.Diagnostics, mirror, topic types.String) {
	if r.client == nil || mirror.IsUnknown() || topic.IsUnknown() || mirror.IsNull() || topic.IsNull() {
		return
	}
	ms, err := r.client.Describe(ctx)
	if err != nil {
		return
	}
	for _, m := range ms {
		if _, ok := findTopic(m, topic.ValueString()); !ok {
			continue
		}
		if m.Name == mirror.ValueString() {
			diags.AddAttributeError(path.Root("topic"), fmt.Sprintf("Mirror %q already mirrors topic %q", m.Name, topic.ValueString()),
				fmt.Sprintf("The agent lists it, but this state does not (added outside Terraform, by another configuration, or "+
					"a destroyed kafka_mirror_topic, which stays listed as stopped). To manage it here, import it: "+
					"terraform import <address> %s", topicID(m.Name, topic.ValueString())))
			return
		}
		diags.AddAttributeError(path.Root("topic"), fmt.Sprintf("Topic %q is mirrored by mirror %q", topic.ValueString(), m.Name),
			fmt.Sprintf("A destination topic has one source: mirror %q already mirrors %q on this agent, so mirror %q cannot. "+
				"Remove one of them, or mirror the topic with %q.", m.Name, topic.ValueString(), mirror.ValueString(), m.Name))
		return
	}
}

// destroyHint ends a plan-time refusal: terraform destroy plans the
// configuration first, so the refusal would stop it too.
const destroyHint = " To destroy the resource with this configuration, run terraform destroy -refresh=false."

// appliedKey is the private state key holding the state Terraform last
// applied, which tells a change made outside Terraform from one of the
// configuration.
const appliedKey = "applied_state"

// privateState is the part of the framework's private state data the
// resource uses.
type privateState interface {
	GetKey(ctx context.Context, key string) ([]byte, diag.Diagnostics)
}

// appliedState is the state Terraform last applied to the topic; ok is
// false when none is known (an import, a state from an older provider).
func appliedState(ctx context.Context, p privateState) (state string, ok bool) {
	if p == nil {
		return "", false
	}
	b, diags := p.GetKey(ctx, appliedKey)
	if diags.HasError() || len(b) == 0 {
		return "", false
	}
	if err := json.Unmarshal(b, &state); err != nil {
		return "", false
	}
	return state, true
}

// recordApplied keeps the state Terraform has just applied in the private
// state.
func recordApplied(ctx context.Context, p interface {
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}, state string) diag.Diagnostics {
	b, _ := json.Marshal(state)
	return p.SetKey(ctx, appliedKey, b)
}

func (r *mirrorTopicResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan mirrorTopicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	timeout, d := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mirror, topic, target := plan.Mirror.ValueString(), plan.Topic.ValueString(), plan.State.ValueString()
	m, err := r.client.AddTopicsWith(ctx, mirror, mirrorapi.AddTopicsRequest{
		Topics: []string{topic}, Failback: plan.Failback.ValueBool(), Recreate: plan.Failback.ValueBool() && plan.Recreate.ValueBool(),
	})
	if err != nil {
		what := fmt.Sprintf("Adding topic %q to mirror %q", topic, mirror)
		if mirrorapi.IsCode(err, mirrorapi.CodeFailbackRefused) {
			detail := err.Error()
			var apiErr *mirrorapi.APIError
			if errors.As(err, &apiErr) {
				detail = apiErr.Body.Message
			}
			if !plan.Recreate.ValueBool() && strings.Contains(detail, "recreate") {
				detail += "\n\nIn Terraform: set recreate = true on this kafka_mirror_topic (with failback = true) to do so."
			}
			resp.Diagnostics.AddAttributeError(path.Root("failback"), fmt.Sprintf("Failback of topic %q refused by mirror %q", topic, mirror), detail)
			return
		}
		if cur, gerr := r.client.Mirror(ctx, mirror); gerr == nil {
			if _, ok := findTopic(cur, topic); ok {
				resp.Diagnostics.AddError(what+": already mirrored",
					fmt.Sprintf("Mirror %q already mirrors topic %q (or mirrored it: a destroyed kafka_mirror_topic stays listed as stopped). "+
						"To manage it with Terraform, import it: terraform import <address> %s", mirror, topic, topicID(mirror, topic)))
				return
			}
		}
		addAgentError(&resp.Diagnostics, r.client, what, err)
		return
	}
	t, ok := findTopic(m, topic)
	if !ok {
		resp.Diagnostics.AddError("Topic missing after adding it",
			fmt.Sprintf("The agent accepted topic %q for mirror %q but does not list it. Please report this issue to the provider developers.", topic, mirror))
		return
	}
	if len(t.Partitions) == 0 {
		var cause string
		if t, cause = r.settle(ctx, mirror, topic, t); cause != "" {
			// Nothing was mirrored: the agent forgets the topic again,
			// so that a corrected configuration can add it.
			detail := cause + "\n\nNothing was written to the destination. Fix the cause (a topic name that exists on the source, a source the agent can reach) and apply again."
			if err := r.client.StopTopics(context.WithoutCancel(ctx), mirror, []string{topic}, mirrorapi.StopModeFailover); err != nil {
				detail += fmt.Sprintf("\n\nThe agent still lists the topic (removing it failed: %v); it goes away when the mirror is destroyed.", err)
			}
			resp.Diagnostics.AddAttributeError(path.Root("topic"), fmt.Sprintf("Topic %q of mirror %q cannot mirror", topic, mirror), detail)
			return
		}
	}
	if target == topicPaused {
		// The agent pauses partitions it knows: wait until it has read
		// the source topic and created the destination one.
		if t, ok = r.pauseNew(ctx, &resp.Diagnostics, mirror, topic, timeout); !ok {
			// Mirroring, not paused: keep it in the state so that the
			// next plan pauses it (or destroys it) instead of adding it.
			resp.Diagnostics.Append(setTopic(&plan, mirror, t)...)
			resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
			return
		}
	}
	resp.Diagnostics.Append(setTopic(&plan, mirror, t)...)
	// A new topic is mirroring as soon as the agent has it, whatever its
	// partitions say yet (initializing, or none read): the next refresh
	// reports what they do.
	plan.State = types.StringValue(target)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	resp.Diagnostics.Append(recordApplied(ctx, resp.Private, target)...)
}

// settleWait bounds how long creating waits for the agent to read a new
// topic's partitions, and errorGrace how long an error must last to fail
// the creation (a mirror just created may report a transient one).
var (
	settleWait = 60 * time.Second
	errorGrace = 3 * time.Second
)

// settle waits until the agent has read the partitions of topic, just added
// to mirror, and says why it cannot when the agent reports a lasting cause:
// the source topic does not exist, or the mirror cannot reach its source.
// Without either within settleWait (a slow source), it returns "" and the
// topic as it is: Read shows what follows.
func (r *mirrorTopicResource) settle(ctx context.Context, mirror, topic string, t mirrorapi.Topic) (mirrorapi.Topic, string) {
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	var since time.Time
	for {
		m, err := r.client.Mirror(ctx, mirror)
		if err == nil {
			if cur, ok := findTopic(m, topic); ok {
				t = cur
			}
			cause := ""
			switch {
			case len(t.Partitions) > 0:
				return t, ""
			case t.Error != "":
				cause = fmt.Sprintf("The agent reports: %s", withReasonCode(t.ErrorCode, t.Error))
			case m.Error != "":
				cause = fmt.Sprintf("Mirror %q cannot run: %s", mirror, m.Error)
			}
			switch {
			case cause == "":
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) >= errorGrace:
				return t, cause
			}
		}
		select {
		case <-ctx.Done():
			return t, ""
		case <-time.After(pollInterval):
		}
	}
}

// withReasonCode puts a code before its message, as the CLI does.
func withReasonCode(code mirrorapi.ReasonCode, msg string) string {
	if code == "" {
		return msg
	}
	return "[" + string(code) + "] " + msg
}

// pauseNew pauses a topic just added, retrying while the agent does not
// know its partitions yet, and waits until it is paused.
func (r *mirrorTopicResource) pauseNew(ctx context.Context, diags *diag.Diagnostics, mirror, topic string, timeout time.Duration) (mirrorapi.Topic, bool) {
	for {
		err := r.client.PauseTopics(ctx, mirror, []string{topic})
		if err == nil {
			break
		}
		if !mirrorapi.IsCode(err, mirrorapi.CodeUnknownTopic) || ctx.Err() != nil {
			what := fmt.Sprintf("Pausing new topic %q of mirror %q", topic, mirror)
			t, _ := r.readTopic(context.WithoutCancel(ctx), mirror, topic)
			if ctx.Err() != nil {
				diags.AddError(what+": timed out",
					fmt.Sprintf("After %s the agent has not read the topic's partitions yet (%s), so it cannot pause it; it mirrors "+
						"as soon as it has them. Run terraform apply again to pause it, or raise the timeouts block's create.", timeout, orNone(t.Error)))
				return t, false
			}
			addAgentError(diags, r.client, what, err)
			return t, false
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
	return r.waitFor(ctx, diags, mirror, topic, topicPaused, timeout, "create")
}

func setTopic(model *mirrorTopicModel, mirror string, t mirrorapi.Topic) diag.Diagnostics {
	f, diags := flattenTopic(t)
	model.ID = types.StringValue(topicID(mirror, t.Name))
	model.Mirror = types.StringValue(mirror)
	model.Topic = types.StringValue(t.Name)
	model.State = f.State
	model.Partitions, model.MaxLag, model.Reason, model.ReadOnlyEnforced = f.Partitions, f.MaxLag, f.Reason, f.ReadOnlyEnforced
	model.ReasonCode = f.ReasonCode
	model.DivergentTopic, model.DivergentRecords = f.DivergentTopic, f.DivergentRecords
	return diags
}

// readTopic reads topic of mirror from the agent; ok is false when the
// mirror or the topic is gone.
func (r *mirrorTopicResource) readTopic(ctx context.Context, mirror, topic string) (t mirrorapi.Topic, err error) {
	m, err := r.client.Mirror(ctx, mirror)
	if err != nil {
		return t, err
	}
	t, ok := findTopic(m, topic)
	if !ok {
		return t, errTopicGone
	}
	return t, nil
}

var errTopicGone = errors.New("topic not mirrored")

func (r *mirrorTopicResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state mirrorTopicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror, topic := state.Mirror.ValueString(), state.Topic.ValueString()
	t, err := r.readTopic(ctx, mirror, topic)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) || errors.Is(err, errTopicGone) {
		// No longer mirrored (removed outside Terraform): the plan adds it.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading topic %q of mirror %q", topic, mirror), err)
		return
	}
	resp.Diagnostics.Append(setTopic(&state, mirror, t)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update changes the topic's state (mirror and topic force replacement):
// it calls the agent's operation and waits until every partition holds
// the new state, then records the final figures.
func (r *mirrorTopicResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, prior mirrorTopicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	timeout, d := plan.Timeouts.Update(ctx, defaultUpdateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mirror, topic := plan.Mirror.ValueString(), plan.Topic.ValueString()
	from, to := prior.State.ValueString(), plan.State.ValueString()
	t, err := r.readTopic(ctx, mirror, topic)
	if errors.Is(err, errTopicGone) || mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		resp.Diagnostics.AddError(fmt.Sprintf("Topic %q is no longer mirrored by %q", topic, mirror),
			"The topic was removed outside Terraform during this run. Run terraform apply again to add it back.")
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading topic %q of mirror %q", topic, mirror), err)
		return
	}
	if cur, _ := topicState(t); cur != to {
		// The agent, not the prior state, says where the topic is now.
		if summary, detail := checkTransition(cur, to); summary != "" {
			resp.Diagnostics.AddAttributeError(path.Root("state"), summary, detail)
			return
		}
		if err := r.apply(ctx, mirror, topic, cur, to, plan.Recreate.ValueBool()); err != nil {
			addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Changing topic %q of mirror %q from %s to %s", topic, mirror, from, to), err)
			return
		}
		var ok bool
		if t, ok = r.waitFor(ctx, &resp.Diagnostics, mirror, topic, to, timeout, "update"); !ok {
			return
		}
		logFinalOffsets(ctx, mirror, to, t)
	}
	resp.Diagnostics.Append(setTopic(&plan, mirror, t)...)
	if plan.State.ValueString() != to {
		resp.Diagnostics.AddError(fmt.Sprintf("Topic %q of mirror %q is %s, not %s", topic, mirror, plan.State.ValueString(), to),
			"The agent reports another state than the one asked for: "+plan.Reason.ValueString())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	resp.Diagnostics.Append(recordApplied(ctx, resp.Private, to)...)
}

// apply calls the agent's operation that moves topic from state from to
// state to.
func (r *mirrorTopicResource) apply(ctx context.Context, mirror, topic, from, to string, recreate bool) error {
	topics := []string{topic}
	switch to {
	case topicMirroring:
		if from == topicFailed {
			return r.client.RecoverTopicsWith(ctx, mirror, mirrorapi.TopicsRequest{Topics: topics, Recreate: recreate})
		}
		return r.client.ResumeTopics(ctx, mirror, topics)
	case topicPaused:
		return r.client.PauseTopics(ctx, mirror, topics)
	case topicStopped:
		return r.client.StopTopics(ctx, mirror, topics, mirrorapi.StopModeFailover)
	case topicPromoted:
		return r.client.StopTopics(ctx, mirror, topics, mirrorapi.StopModePromote)
	}
	return fmt.Errorf("state %q cannot be asked for", to)
}

// reached says whether every partition of t holds state.
func reached(t mirrorapi.Topic, state string) bool {
	if len(t.Partitions) == 0 {
		return false
	}
	for _, p := range t.Partitions {
		if state == topicMirroring && p.State != mirrorapi.StateMirroring {
			return false // settled: not just initializing
		}
		if s := partitionTopicState(p); s != state && !(state == topicStopped && terminal(s)) {
			return false
		}
	}
	return true
}

// waitFor polls the agent until every partition of topic holds state, a
// partition fails on the way, or ctx ends; ok says whether it holds.
func (r *mirrorTopicResource) waitFor(ctx context.Context, diags *diag.Diagnostics, mirror, topic, state string, timeout time.Duration, op string) (t mirrorapi.Topic, ok bool) {
	what := fmt.Sprintf("Waiting for topic %q of mirror %q to be %s", topic, mirror, state)
	for {
		var err error
		t, err = r.readTopic(ctx, mirror, topic)
		switch {
		case err == nil && reached(t, state):
			return t, true
		case err == nil:
			if msg := stuck(t, state); msg != "" {
				diags.AddError(what+": it cannot get there", msg)
				return t, false
			}
		case ctx.Err() == nil && !mirrorapi.IsCode(err, mirrorapi.CodeNotReady):
			addAgentError(diags, r.client, what, err)
			return t, false
		}
		select {
		case <-ctx.Done():
			f, _ := flattenTopic(t)
			diags.AddError(what+": timed out",
				fmt.Sprintf("After %s the partitions are not all %s yet (%s). The operation goes on in the agent: run terraform apply "+
					"again to wait more, or raise the timeouts block's %s (timeouts { %s = \"30m\" }). Partition states: %s",
					timeout, state, orNone(f.Reason.ValueString()), op, op, partitionStates(t)))
			return t, false
		case <-time.After(pollInterval):
		}
	}
}

// stuck says why topic t will not reach state on its own, "" when it may.
func stuck(t mirrorapi.Topic, state string) string {
	for _, p := range t.Partitions {
		switch {
		case p.State == mirrorapi.StateFailed && state != topicStopped:
			return fmt.Sprintf("Partition %d failed: %s. Set state to \"mirroring\" to recover it (with recreate = true when the "+
				"destination must be mirrored again whole), or to \"stopped\" to fail over.", p.Partition, p.Reason)
		case state == topicPromoted && p.State == mirrorapi.StateMirroring && p.ReasonCode == reason.PromoteTimedOut:
			return fmt.Sprintf("Partition %d: %s. Run terraform apply again to retry the promote, or set state to \"stopped\" to fail over at once.", p.Partition, p.Reason)
		case state == topicPromoted && p.State == mirrorapi.StateStopped && p.StopMode == mirrorapi.StopModeFailover:
			return fmt.Sprintf("Partition %d was stopped by a failover stop, not a promote (records not mirrored then stay on the source only). Set state to \"stopped\".", p.Partition)
		}
	}
	return ""
}

func partitionStates(t mirrorapi.Topic) string {
	if len(t.Partitions) == 0 {
		return "none known yet"
	}
	parts := make([]string, 0, len(t.Partitions))
	for _, p := range t.Partitions {
		parts = append(parts, fmt.Sprintf("%d %s", p.Partition, stateName(p.State)))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "no reason reported"
	}
	return s
}

// logFinalOffsets logs where each partition ended after a change of state.
func logFinalOffsets(ctx context.Context, mirror, state string, t mirrorapi.Topic) {
	for _, p := range t.Partitions {
		tflog.Info(ctx, "mirror topic partition reached its state", map[string]any{
			"mirror": mirror, "topic": t.Name, "partition": p.Partition, "state": state,
			"destination_offset": p.DestinationOffset, "last_mirrored_offset": p.LastMirrored, "source_offset": p.SourceOffset,
		})
	}
}

// Delete stops mirroring the topic (failover) and waits until it has
// stopped; the destination topic and its data stay.
func (r *mirrorTopicResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state mirrorTopicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	timeout, d := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mirror, topic := state.Mirror.ValueString(), state.Topic.ValueString()
	t, err := r.readTopic(ctx, mirror, topic)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) || errors.Is(err, errTopicGone) {
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading topic %q of mirror %q", topic, mirror), err)
		return
	}
	cur, _ := topicState(t)
	if terminal(cur) {
		return // already stopped: nothing mirrors, the data stays
	}
	if len(t.Partitions) == 0 {
		// Nothing created on the destination yet: the stop makes the
		// agent forget the topic.
		if err := r.client.StopTopics(ctx, mirror, []string{topic}, mirrorapi.StopModeFailover); err != nil {
			resp.Diagnostics.AddWarning(fmt.Sprintf("Topic %q keeps its place in mirror %q", topic, mirror),
				fmt.Sprintf("The agent has not read topic %q's partitions yet (%s) and could not forget it (%v); it stays listed by mirror %q "+
					"until the mirror is destroyed. Nothing was written to the destination.", topic, orNone(t.Error), err, mirror))
		}
		return
	}
	if err := r.client.StopTopics(ctx, mirror, []string{topic}, mirrorapi.StopModeFailover); err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Stopping topic %q of mirror %q", topic, mirror), err)
		return
	}
	if t, ok := r.waitFor(ctx, &resp.Diagnostics, mirror, topic, topicStopped, timeout, "delete"); ok {
		logFinalOffsets(ctx, mirror, topicStopped, t)
	}
}

func (r *mirrorTopicResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	mirror, topic, err := parseTopicID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID for kafka_mirror_topic",
			err.Error()+". Example: terraform import kafka_mirror_topic.orders dr/orders")
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("mirror"), mirror)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("topic"), topic)...)
}
