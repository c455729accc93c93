package provider

import (
	"context"
	"fmt"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

var (
	_ resource.Resource                   = (*clusterMirrorResource)(nil)
	_ resource.ResourceWithConfigure      = (*clusterMirrorResource)(nil)
	_ resource.ResourceWithImportState    = (*clusterMirrorResource)(nil)
	_ resource.ResourceWithValidateConfig = (*clusterMirrorResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*clusterMirrorResource)(nil)
)

// NewClusterMirrorResource is kafka_cluster_mirror.
func NewClusterMirrorResource() resource.Resource { return &clusterMirrorResource{} }

type clusterMirrorResource struct {
	client *mirrorapi.Client
}

type clusterMirrorModel struct {
	ID                 types.String `tfsdk:"id"`
	Name               types.String `tfsdk:"name"`
	Source             *sourceModel `tfsdk:"source"`
	TopicConfigExclude types.List   `tfsdk:"topic_config_exclude"`
	GroupsInclude      types.List   `tfsdk:"consumer_groups_include"`
	GroupsExclude      types.List   `tfsdk:"consumer_groups_exclude"`
	ACLInclude         types.List   `tfsdk:"acl_include"`
	TopicRegex         types.List   `tfsdk:"topic_regex"`
	// MetadataRefreshInterval is a Go duration string.
	MetadataRefreshInterval types.String `tfsdk:"metadata_refresh_interval"`
	Config                  types.Map    `tfsdk:"config"`
	SourceClusterID         types.String `tfsdk:"source_cluster_id"`
	Agent                   types.String `tfsdk:"agent"`
	MaxLag                  types.Int64  `tfsdk:"max_lag"`
	StateCounts             types.Map    `tfsdk:"state_counts"`
	TopicCount              types.Int64  `tfsdk:"topic_count"`
	Error                   types.String `tfsdk:"error"`
}

func (r *clusterMirrorResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_cluster_mirror"
}

func (r *clusterMirrorResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A mirror on the kmirror agent: a source cluster whose topics the agent copies offset-for-offset " +
			"into the destination cluster it runs against. Topics are added with `kafka_mirror_topic`.\n\n" +
			"Destroying this resource deletes the mirror on the agent with force: mirroring of all its topics stops, " +
			"and the destination topics and their data stay in place as ordinary topics.",
		Attributes: map[string]schema.Attribute{
			// Required attributes
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "Name of the mirror (" + mirrorspec.MirrorNameRule + "). Changing it replaces the mirror.",
				Validators:    []validator.String{mirrorNameValidator},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"source": sourceAttribute(),
			// Computed attributes
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The mirror's name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"max_lag": schema.Int64Attribute{
				Computed:    true,
				Description: "Largest lag, in records, of the mirror's partitions when last read.",
			},
			"state_counts": schema.MapAttribute{
				Computed:    true,
				ElementType: types.Int64Type,
				Description: "Number of partitions in each state (`initializing`, `preparing`, `mirroring`, `paused`, `stopping`, `stopped`, `failed`) when last read.",
			},
			"topic_count": schema.Int64Attribute{
				Computed:    true,
				Description: "Number of topics the mirror has, whether managed by Terraform or not.",
			},
			"error": schema.StringAttribute{
				Computed:    true,
				Description: "Why the mirror is not running (for example an unreachable source), empty when it runs.",
			},
			"source_cluster_id": schema.StringAttribute{
				Computed:    true,
				Description: "The source cluster's id, from its metadata when the agent last connected to it; empty until it has.",
			},
			"agent": schema.StringAttribute{
				Computed:    true,
				Description: "The `agent_id` of the agent that runs the mirror when the agents form a group (`coordination = \"group\"`); empty with `coordination = \"single\"`, where the one agent runs every mirror.",
			},
		},
	}
	maps.Copy(resp.Schema.Attributes, settingsAttributes())
}

func (r *clusterMirrorResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *clusterMirrorResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan clusterMirrorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	spec := mirrorapi.MirrorSpec{Name: plan.Name.ValueString()}
	var d diag.Diagnostics
	spec.Source, d = configuredSource(ctx, req.Config)
	resp.Diagnostics.Append(d...)
	settingsToSpec(ctx, plan, nil, &spec)
	if resp.Diagnostics.HasError() {
		return
	}
	m, err := r.client.Create(ctx, spec)
	if err != nil {
		if mirrorapi.IsCode(err, mirrorapi.CodeMirrorAlreadyExists) {
			resp.Diagnostics.AddAttributeError(path.Root("name"), "Mirror already exists",
				fmt.Sprintf("The kmirror agent already has a mirror named %q. To manage it with Terraform, import it: terraform import <address> %s",
					spec.Name, spec.Name))
			return
		}
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Creating mirror %q", spec.Name), err)
		return
	}
	resp.Diagnostics.Append(r.setFromAgent(ctx, &plan, m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// setFromAgent copies what the agent reports into model; config keeps its
// value (the typed attributes show what it set).
func (r *clusterMirrorResource) setFromAgent(ctx context.Context, model *clusterMirrorModel, m mirrorapi.Mirror) (diags diag.Diagnostics) {
	model.ID = types.StringValue(m.Name)
	model.Name = types.StringValue(m.Name)
	src, d := sourceFromAgent(ctx, m.Source, model.Source)
	diags.Append(d...)
	model.Source = src
	f, d := flattenMirror(ctx, m)
	diags.Append(d...)
	model.MaxLag, model.StateCounts, model.TopicCount, model.Error = f.MaxLag, f.StateCounts, f.TopicCount, f.Error
	diags.Append(settingsFromAgent(ctx, model, m)...)
	return diags
}

func (r *clusterMirrorResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state clusterMirrorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	name := state.Name.ValueString()
	m, err := r.client.Mirror(ctx, name)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		// Deleted outside Terraform: gone from state, so the plan creates it.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading mirror %q", name), err)
		return
	}
	resp.Diagnostics.Append(r.setFromAgent(ctx, &state, m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *clusterMirrorResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state clusterMirrorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	name := plan.Name.ValueString()
	// Topics left out (nil) keep theirs: kafka_mirror_topic manages them.
	var spec mirrorapi.MirrorSpec
	var d diag.Diagnostics
	spec.Source, d = configuredSource(ctx, req.Config)
	resp.Diagnostics.Append(d...)
	// Settings unset again plan the default they stand for, which is sent:
	// the agent keeps a field left out.
	settingsToSpec(ctx, plan, &state, &spec)
	if resp.Diagnostics.HasError() {
		return
	}
	m, err := r.client.Update(ctx, name, spec)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		resp.Diagnostics.AddError(fmt.Sprintf("Mirror %q no longer exists", name),
			"The mirror was deleted outside Terraform during this run. Run terraform apply again to create it.")
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Updating mirror %q", name), err)
		return
	}
	resp.Diagnostics.Append(r.setFromAgent(ctx, &plan, m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *clusterMirrorResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state clusterMirrorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	name := state.Name.ValueString()
	// Forced: mirroring of every topic stops; the destination topics and
	// their data stay.
	err := r.client.Delete(ctx, name, true)
	if err != nil && !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Deleting mirror %q", name), err)
	}
}

func (r *clusterMirrorResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if mirrorspec.CheckMirrorName(req.ID) != nil {
		resp.Diagnostics.AddError("Invalid import ID for kafka_cluster_mirror",
			fmt.Sprintf("%q is not a mirror name (%s). Import a mirror by its name, such as: terraform import kafka_cluster_mirror.dr dr", req.ID, mirrorspec.MirrorNameRule))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// ModifyPlan marks the figures unknown when an update is planned. The
// framework does so only when the configuration differs from the state,
// before the settings' plan modifiers run, and a setting left out that
// plans its default again is an update too (the mirror may reconnect, and
// its figures change).
func (r *clusterMirrorResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() || req.Plan.Raw.Equal(req.State.Raw) {
		return
	}
	for name, v := range map[string]attr.Value{
		"max_lag": types.Int64Unknown(), "topic_count": types.Int64Unknown(), "error": types.StringUnknown(),
		"source_cluster_id": types.StringUnknown(), "agent": types.StringUnknown(), "state_counts": types.MapUnknown(types.Int64Type),
	} {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(name), v)...)
	}
}

func (r *clusterMirrorResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var src *sourceModel
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("source"), &src)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(validateSource(ctx, src)...)
	resp.Diagnostics.Append(validateSettings(ctx, req.Config)...)
}

// configuredSource returns the source of the configuration, the only place
// write-only values are found.
func configuredSource(ctx context.Context, cfg tfsdk.Config) (mirrorapi.Source, diag.Diagnostics) {
	var src *sourceModel
	diags := cfg.GetAttribute(ctx, path.Root("source"), &src)
	if diags.HasError() || src == nil {
		return mirrorapi.Source{}, diags
	}
	out, d := src.toAPI(ctx)
	diags.Append(d...)
	return out, diags
}
