package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

var (
	_ resource.Resource                = (*mirrorTopicResource)(nil)
	_ resource.ResourceWithConfigure   = (*mirrorTopicResource)(nil)
	_ resource.ResourceWithImportState = (*mirrorTopicResource)(nil)
)

// NewMirrorTopicResource is kafka_mirror_topic.
func NewMirrorTopicResource() resource.Resource { return &mirrorTopicResource{} }

type mirrorTopicResource struct {
	client *mirrorapi.Client
}

type mirrorTopicModel struct {
	ID         types.String `tfsdk:"id"`
	Mirror     types.String `tfsdk:"mirror"`
	Topic      types.String `tfsdk:"topic"`
	Partitions types.List   `tfsdk:"partitions"`
	MaxLag     types.Int64  `tfsdk:"max_lag"`
	Reason     types.String `tfsdk:"reason"`
}

func (r *mirrorTopicResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mirror_topic"
}

// topicFiguresSchema is the computed part shared with the data source.
func topicFiguresDescriptions() (partitions, maxLag, reason string) {
	return "The topic's partitions as the agent last reported them: `partition`, `source_offset` (source high watermark), " +
			"`destination_offset` (next offset to write: every offset below it is mirrored), `lag` (records), " +
			"`state` (`initializing`, `preparing`, `mirroring`, `paused`, `stopping`, `stopped` or `failed`) and " +
			"`last_mirrored_offset` (-1 when none is). Empty until the agent has read the source topic's metadata.",
		"Largest partition lag of the topic, in records, when last read.",
		"Why the topic or some of its partitions are not mirroring, empty when all are."
}

func (r *mirrorTopicResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	pd, ld, rd := topicFiguresDescriptions()
	resp.Schema = schema.Schema{
		Description: "A topic mirrored by a `kafka_cluster_mirror`: the agent creates the destination topic and copies every " +
			"partition offset-for-offset.\n\n" +
			"This version only mirrors: there is no `state` argument yet; pausing, stopping and failing over come with " +
			"the mirror lifecycle work and will add one (defaulting to mirroring). The per-partition states the agent " +
			"reports are in `partitions`.\n\n" +
			"Destroying this resource alone does not stop mirroring yet, because the agent has no stop operation in this " +
			"version: the topic leaves the Terraform state with a warning and keeps mirroring until its mirror is destroyed. " +
			"Destroying the mirror stops all of its topics and leaves the destination topics and their data in place.",
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
			// Computed attributes
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
			"max_lag": schema.Int64Attribute{Computed: true, Description: ld},
			"reason":  schema.StringAttribute{Computed: true, Description: rd},
		},
	}
}

func (r *mirrorTopicResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *mirrorTopicResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan mirrorTopicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror, topic := plan.Mirror.ValueString(), plan.Topic.ValueString()
	m, err := r.client.AddTopics(ctx, mirror, []string{topic})
	if err != nil {
		what := fmt.Sprintf("Adding topic %q to mirror %q", topic, mirror)
		if cur, gerr := r.client.Mirror(ctx, mirror); gerr == nil {
			if _, ok := findTopic(cur, topic); ok {
				resp.Diagnostics.AddError(what+": already mirrored",
					fmt.Sprintf("Mirror %q already mirrors topic %q. To manage it with Terraform, import it: terraform import <address> %s",
						mirror, topic, topicID(mirror, topic)))
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
	resp.Diagnostics.Append(setTopic(&plan, mirror, t)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func setTopic(model *mirrorTopicModel, mirror string, t mirrorapi.Topic) diag.Diagnostics {
	f, diags := flattenTopic(t)
	model.ID = types.StringValue(topicID(mirror, t.Name))
	model.Mirror = types.StringValue(mirror)
	model.Topic = types.StringValue(t.Name)
	model.Partitions, model.MaxLag, model.Reason = f.Partitions, f.MaxLag, f.Reason
	return diags
}

func (r *mirrorTopicResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state mirrorTopicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror, topic := state.Mirror.ValueString(), state.Topic.ValueString()
	m, err := r.client.Mirror(ctx, mirror)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading topic %q of mirror %q", topic, mirror), err)
		return
	}
	t, ok := findTopic(m, topic)
	if !ok {
		// No longer mirrored (removed outside Terraform): the plan adds it.
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(setTopic(&state, mirror, t)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update only refreshes: every argument forces replacement, so a plan
// reaches Update only when nothing the user sets changed.
func (r *mirrorTopicResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan mirrorTopicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror, topic := plan.Mirror.ValueString(), plan.Topic.ValueString()
	m, err := r.client.Mirror(ctx, mirror)
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading topic %q of mirror %q", topic, mirror), err)
		return
	}
	t, ok := findTopic(m, topic)
	if !ok {
		resp.Diagnostics.AddError(fmt.Sprintf("Topic %q is no longer mirrored by %q", topic, mirror),
			"The topic was removed outside Terraform during this run. Run terraform apply again to add it back.")
		return
	}
	resp.Diagnostics.Append(setTopic(&plan, mirror, t)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *mirrorTopicResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state mirrorTopicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !needClient(r.client, &resp.Diagnostics) {
		return
	}
	mirror, topic := state.Mirror.ValueString(), state.Topic.ValueString()
	m, err := r.client.Mirror(ctx, mirror)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		return
	}
	if err != nil {
		addAgentError(&resp.Diagnostics, r.client, fmt.Sprintf("Reading topic %q of mirror %q", topic, mirror), err)
		return
	}
	if _, ok := findTopic(m, topic); !ok {
		return
	}
	// TODO(lifecycle): call the agent's stop route once it exists.
	resp.Diagnostics.AddWarning(fmt.Sprintf("Topic %q still mirrors", topic),
		fmt.Sprintf("The kmirror agent has no stop operation in this provider version, so topic %q keeps mirroring under mirror %q; "+
			"it was only removed from the Terraform state. Mirroring stops when the mirror is destroyed (the destination topic and its data stay). "+
			"To manage the topic again, import it: terraform import <address> %s", topic, mirror, topicID(mirror, topic)))
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
