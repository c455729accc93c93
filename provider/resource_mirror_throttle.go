package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

var (
	_ resource.Resource                = (*mirrorThrottleResource)(nil)
	_ resource.ResourceWithConfigure   = (*mirrorThrottleResource)(nil)
	_ resource.ResourceWithImportState = (*mirrorThrottleResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*mirrorThrottleResource)(nil)
)

// NewMirrorThrottleResource is kafka_mirror_throttle.
func NewMirrorThrottleResource() resource.Resource { return &mirrorThrottleResource{} }

type mirrorThrottleResource struct {
	client *mirrorapi.Client
}

type mirrorThrottleModel struct {
	ID                 types.String `tfsdk:"id"`
	Mirror             types.String `tfsdk:"mirror"`
	RateBytesPerSecond types.Int64  `tfsdk:"rate_bytes_per_second"`
	Partitions         types.List   `tfsdk:"partitions"`
	SourceQuota        types.Bool   `tfsdk:"source_quota"`
}

func (r *mirrorThrottleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mirror_throttle"
}

func (r *mirrorThrottleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The replication throttle of a mirror (KIP-1279 `mirror.replication.throttled.rate` over " +
			"`mirror.replication.throttled.replicas`): a ceiling on the bytes per second the agent fetches from the source " +
			"for some or all of the mirror's partitions, together. Throttled partitions wait while the others keep going. " +
			"Changes take effect at once, without restarting the mirror. A mirror has at most one throttle.\n\n" +
			"Destroying this resource lifts the throttle (and removes its source quota).",
		Attributes: map[string]schema.Attribute{
			// Required attributes
			"mirror": schema.StringAttribute{
				Required:      true,
				Description:   "Name of the throttled mirror. Changing it replaces the throttle.",
				Validators:    []validator.String{mirrorNameValidator},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"rate_bytes_per_second": schema.Int64Attribute{
				Required:    true,
				Description: "Ceiling on the bytes per second fetched for the throttled partitions together; above 0. Changes apply in place.",
				Validators:  []validator.Int64{int64validator.AtLeast(1)},
			},
			// Optional attributes
			"partitions": schema.ListAttribute{
				Optional:    true,
				Computed:    true,
				ElementType: types.StringType,
				Default:     listdefault.StaticValue(types.ListValueMust(types.StringType, []attr.Value{types.StringValue(mirrorapi.AllPartitions)})),
				Description: "Throttled partitions as `TOPIC:PARTITION` (such as `orders:0`), or `[\"*\"]` (the default) for every " +
					"partition of the mirror, those of topics added later included. Changes apply in place.",
				Validators: []validator.List{listvalidator.SizeAtLeast(1), throttlePartitionsValidator{}},
			},
			"source_quota": schema.BoolAttribute{
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
				Description: "Also set the `consumer_byte_rate` client quota to the same rate on the source cluster, for the client id " +
					"the agent uses for this mirror (`kmirror-MIRROR`), together with the SASL user when the source uses SASL " +
					"(`user=USER,client-id=kmirror-MIRROR`, so that a quota of that user does not take precedence), so that the " +
					"source brokers hold the agent back too; it is removed with the throttle or when this turns false. The agent " +
					"needs ALTER_CONFIGS on the source cluster for it.",
			},
			// Computed attributes
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The mirror's name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *mirrorThrottleResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// throttleOf is the agent's form of model.
func throttleOf(ctx context.Context, model mirrorThrottleModel) (mirrorapi.Throttle, diag.Diagnostics) {
	t := mirrorapi.Throttle{RateBytesPerSecond: model.RateBytesPerSecond.ValueInt64(), SourceQuota: model.SourceQuota.ValueBool()}
	diags := model.Partitions.ElementsAs(ctx, &t.Partitions, false)
	return t, diags
}

// setFromAgent copies what the agent reports into model.
func setFromAgent(ctx context.Context, model *mirrorThrottleModel, mirror string, t mirrorapi.Throttle) diag.Diagnostics {
	t = t.Normalized()
	model.ID = types.StringValue(mirror)
	model.Mirror = types.StringValue(mirror)
	model.RateBytesPerSecond = types.Int64Value(t.RateBytesPerSecond)
	model.SourceQuota = types.BoolValue(t.SourceQuota)
	ps, diags := types.ListValueFrom(ctx, types.StringType, t.Partitions)
	model.Partitions = ps
	return diags
}

// planned reads the planned throttle of Create and Update; ok is false when
// the diagnostics say to stop.
func (r *mirrorThrottleResource) planned(ctx context.Context, p tfsdk.Plan, diags *diag.Diagnostics) (plan mirrorThrottleModel, t mirrorapi.Throttle, ok bool) {
	diags.Append(p.Get(ctx, &plan)...)
	if diags.HasError() || !needClient(r.client, diags) {
		return plan, t, false
	}
	t, d := throttleOf(ctx, plan)
	diags.Append(d...)
	return plan, t, !diags.HasError()
}

// set sets the throttle of Create and Update on the agent, and the state
// from what the agent answers; doing names the step in an agent's error.
func (r *mirrorThrottleResource) set(ctx context.Context, plan mirrorThrottleModel, t mirrorapi.Throttle, doing string, state *tfsdk.State, diags *diag.Diagnostics) {
	mirror := plan.Mirror.ValueString()
	got, err := r.client.SetThrottle(ctx, mirror, t)
	if err != nil {
		addAgentError(diags, r.client, fmt.Sprintf("%s the throttle of mirror %q", doing, mirror), err)
		return
	}
	diags.Append(setFromAgent(ctx, &plan, mirror, got)...)
	diags.Append(state.Set(ctx, &plan)...)
}

// ModifyPlan refuses at plan time a new throttle of a mirror that already
// has one on the agent (Create would, after other resources of the apply
// were changed). It says nothing when the agent cannot be asked.
func (r *mirrorThrottleResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || !req.State.Raw.IsNull() || r.client == nil {
		return
	}
	var mirror types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("mirror"), &mirror)...)
	if resp.Diagnostics.HasError() || mirror.IsUnknown() || mirror.IsNull() {
		return
	}
	if _, err := r.client.Throttle(ctx, mirror.ValueString()); err == nil {
		resp.Diagnostics.AddAttributeError(path.Root("mirror"), "Mirror already has a throttle", throttleExistsDetail(mirror.ValueString()))
	}
}

func throttleExistsDetail(mirror string) string {
	return fmt.Sprintf("Mirror %q already has a throttle on the kmirror agent (set outside Terraform, or by another kafka_mirror_throttle: "+
		"a mirror has one). To manage it with Terraform, import it: terraform import <address> %s", mirror, mirror)
}

func (r *mirrorThrottleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	plan, t, ok := r.planned(ctx, req.Plan, &resp.Diagnostics)
	if !ok {
		return
	}
	mirror := plan.Mirror.ValueString()
	// A throttle set outside Terraform is imported, not overwritten.
	switch _, err := r.client.Throttle(ctx, mirror); {
	case err == nil:
		resp.Diagnostics.AddAttributeError(path.Root("mirror"), "Mirror already has a throttle", throttleExistsDetail(mirror))
		return
	case mirrorapi.IsCode(err, mirrorapi.CodeThrottleNotFound):
	case mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound):
		resp.Diagnostics.AddAttributeError(path.Root("mirror"), "Mirror not found",
			fmt.Sprintf("The kmirror agent has no mirror %q. Create it first (kafka_cluster_mirror), and refer to it as kafka_cluster_mirror.NAME.name so that Terraform orders the two.", mirror))
		return
	default:
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading the throttle of mirror %q", mirror), err)
		return
	}
	r.set(ctx, plan, t, "Setting", &resp.State, &resp.Diagnostics)
}

func (r *mirrorThrottleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state mirrorThrottleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror := state.Mirror.ValueString()
	t, err := r.client.Throttle(ctx, mirror)
	if mirrorapi.IsCode(err, mirrorapi.CodeThrottleNotFound) || mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		// Removed outside Terraform: gone from state, so the plan sets
		// it again.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading the throttle of mirror %q", mirror), err)
		return
	}
	resp.Diagnostics.Append(setFromAgent(ctx, &state, mirror, t)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *mirrorThrottleResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if plan, t, ok := r.planned(ctx, req.Plan, &resp.Diagnostics); ok {
		r.set(ctx, plan, t, "Changing", &resp.State, &resp.Diagnostics)
	}
}

func (r *mirrorThrottleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state mirrorThrottleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror := state.Mirror.ValueString()
	// A deleted mirror took its throttle with it.
	if err := r.client.RemoveThrottle(ctx, mirror); err != nil && !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Removing the throttle of mirror %q", mirror), err)
	}
}

func (r *mirrorThrottleResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if mirrorspec.CheckMirrorName(req.ID) != nil {
		resp.Diagnostics.AddError("Invalid import ID for kafka_mirror_throttle",
			fmt.Sprintf("%q is not a mirror name (%s). Import a throttle by its mirror's name, such as: terraform import kafka_mirror_throttle.dr dr", req.ID, mirrorspec.MirrorNameRule))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("mirror"), req, resp)
}

// throttlePartitionsValidator checks the partitions list with the agent's
// rules (mirrorapi.Throttle.Validate) at plan time: TOPIC:PARTITION or "*"
// alone, no entry twice.
type throttlePartitionsValidator struct{}

var _ validator.List = throttlePartitionsValidator{}

func (throttlePartitionsValidator) Description(context.Context) string {
	return `each entry TOPIC:PARTITION, or "*" alone; no entry twice`
}

func (v throttlePartitionsValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (throttlePartitionsValidator) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	var ps []string
	for _, e := range req.ConfigValue.Elements() {
		s, ok := e.(basetypes.StringValue)
		if !ok || s.IsUnknown() || s.IsNull() {
			return // known at apply; the agent checks it then
		}
		ps = append(ps, s.ValueString())
	}
	if err := (mirrorapi.Throttle{RateBytesPerSecond: 1, Partitions: ps}).Validate(); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid throttled partitions", err.Error()+".")
	}
}
