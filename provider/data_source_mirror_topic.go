package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

var _ datasource.DataSourceWithConfigure = (*mirrorTopicDataSource)(nil)

var pathName = path.Root("name")

type mirrorTopicDataModel struct {
	ID               types.String `tfsdk:"id"`
	Mirror           types.String `tfsdk:"mirror"`
	Topic            types.String `tfsdk:"topic"`
	State            types.String `tfsdk:"state"`
	Partitions       types.List   `tfsdk:"partitions"`
	MaxLag           types.Int64  `tfsdk:"max_lag"`
	Reason           types.String `tfsdk:"reason"`
	ReasonCode       types.String `tfsdk:"reason_code"`
	ReadOnlyEnforced types.Bool   `tfsdk:"read_only_enforced"`
	DivergentTopic   types.String `tfsdk:"divergent_topic"`
	DivergentRecords types.Int64  `tfsdk:"divergent_records"`
}

// NewMirrorTopicDataSource is data "kafka_mirror_topic".
func NewMirrorTopicDataSource() datasource.DataSource { return &mirrorTopicDataSource{} }

type mirrorTopicDataSource struct {
	client *mirrorapi.Client
}

func (d *mirrorTopicDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mirror_topic"
}

func (d *mirrorTopicDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	pd, ld, rd, rod := topicFiguresDescriptions()
	resp.Schema = schema.Schema{
		Description: "One mirror topic's partitions, offsets, lag and states, read at every plan. " +
			"Prefer it over the kafka_mirror_topic resource's computed values for outputs, checks and alerts.",
		Attributes: map[string]schema.Attribute{
			"mirror":      schema.StringAttribute{Required: true, Description: "Name of the mirror.", Validators: []validator.String{mirrorNameValidator}},
			"topic":       schema.StringAttribute{Required: true, Description: "Name of the topic.", Validators: []validator.String{topicNameValidator}},
			"id":          schema.StringAttribute{Computed: true, Description: "`MIRROR/TOPIC`."},
			"partitions":  schema.ListAttribute{Computed: true, ElementType: partitionObjectType, Description: pd},
			"max_lag":     schema.Int64Attribute{Computed: true, Description: ld},
			"reason":      schema.StringAttribute{Computed: true, Description: rd},
			"reason_code": schema.StringAttribute{Computed: true, Description: reasonCodeDescription},
			"state": schema.StringAttribute{Computed: true, Description: "The topic's state: `mirroring`, `paused`, `stopped` (by a failover stop), " +
				"`promoted` (stopped by a promote), or `stopping`, `failed` or `mixed` (partitions in different states) while it is none of these."},
			"read_only_enforced": schema.BoolAttribute{Computed: true, Description: rod},
			"divergent_topic":    schema.StringAttribute{Computed: true, Description: divergentTopicDescription},
			"divergent_records":  schema.Int64Attribute{Computed: true, Description: divergentRecordsDescription},
		},
	}
}

func (d *mirrorTopicDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *mirrorTopicDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg mirrorTopicDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() || !needClient(d.client, &resp.Diagnostics) {
		return
	}
	mirror, topic := cfg.Mirror.ValueString(), cfg.Topic.ValueString()
	m, err := d.client.Mirror(ctx, mirror)
	if err != nil {
		addAgentError(&resp.Diagnostics, d.client, fmt.Sprintf("Reading mirror %q", mirror), err)
		return
	}
	t, ok := findTopic(m, topic)
	if !ok {
		resp.Diagnostics.AddAttributeError(path.Root("topic"), "Topic not mirrored",
			fmt.Sprintf("Mirror %q has no topic %q.", mirror, topic))
		return
	}
	f, diags := flattenTopic(t)
	resp.Diagnostics.Append(diags...)
	cfg.ID = types.StringValue(topicID(mirror, t.Name))
	cfg.State, cfg.Partitions, cfg.MaxLag, cfg.Reason, cfg.ReadOnlyEnforced = f.State, f.Partitions, f.MaxLag, f.Reason, f.ReadOnlyEnforced
	cfg.ReasonCode = f.ReasonCode
	cfg.DivergentTopic, cfg.DivergentRecords = f.DivergentTopic, f.DivergentRecords
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}
