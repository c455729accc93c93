package provider

import (
	"context"
	"fmt"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

var _ datasource.DataSourceWithConfigure = (*clusterMirrorDataSource)(nil)

// NewClusterMirrorDataSource is data "kafka_cluster_mirror".
func NewClusterMirrorDataSource() datasource.DataSource { return &clusterMirrorDataSource{} }

type clusterMirrorDataSource struct {
	client *mirrorapi.Client
}

// mirrorAttrTypes is one mirror as the data sources show it.
var mirrorAttrTypes = map[string]attr.Type{
	"name":         types.StringType,
	"source":       types.ObjectType{AttrTypes: map[string]attr.Type{"bootstrap_servers": types.ListType{ElemType: types.StringType}}},
	"topics":       types.ListType{ElemType: types.StringType},
	"max_lag":      types.Int64Type,
	"state_counts": types.MapType{ElemType: types.Int64Type},
	"topic_count":  types.Int64Type,
	"error":        types.StringType,

	"source_cluster_id":    types.StringType,
	"agent":                types.StringType,
	attrTopicConfigExclude: types.ListType{ElemType: types.StringType},
	attrGroupsInclude:      types.ListType{ElemType: types.StringType},
	attrGroupsExclude:      types.ListType{ElemType: types.StringType},
	attrACLInclude:         types.ListType{ElemType: types.StringType},
	attrTopicRegex:         types.ListType{ElemType: types.StringType},
	attrRefreshInterval:    types.StringType,
}

// mirrorObject turns the agent's view of a mirror into the data sources'
// object.
func mirrorObject(ctx context.Context, m mirrorapi.Mirror) (types.Object, diag.Diagnostics) {
	var diags diag.Diagnostics
	f, d := flattenMirror(ctx, m)
	diags.Append(d...)
	bs, d := types.ListValueFrom(ctx, types.StringType, m.Source.BootstrapServers)
	diags.Append(d...)
	src, d := types.ObjectValue(mirrorAttrTypes["source"].(types.ObjectType).AttrTypes, map[string]attr.Value{"bootstrap_servers": bs})
	diags.Append(d...)
	vals, d := settingsValues(ctx, m)
	diags.Append(d...)
	maps.Copy(vals, map[string]attr.Value{
		"name": types.StringValue(m.Name), "source": src, "topics": f.Topics, "max_lag": f.MaxLag,
		"state_counts": f.StateCounts, "topic_count": f.TopicCount, "error": f.Error,
	})
	obj, d := types.ObjectValue(mirrorAttrTypes, vals)
	diags.Append(d...)
	return obj, diags
}

// mirrorComputedAttributes are the computed attributes of a mirror in the
// data sources.
func mirrorComputedAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"source": schema.SingleNestedAttribute{
			Computed:    true,
			Description: "How the agent reaches the source cluster.",
			Attributes: map[string]schema.Attribute{
				"bootstrap_servers": schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "HOST:PORT of source brokers."},
			},
		},
		"topics":       schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "Names of the mirror's topics."},
		"max_lag":      schema.Int64Attribute{Computed: true, Description: "Largest lag, in records, of the mirror's partitions."},
		"state_counts": schema.MapAttribute{Computed: true, ElementType: types.Int64Type, Description: "Number of partitions in each state (lower case)."},
		"topic_count":  schema.Int64Attribute{Computed: true, Description: "Number of topics."},
		"error":        schema.StringAttribute{Computed: true, Description: "Why the mirror is not running, empty when it runs."},

		"source_cluster_id": schema.StringAttribute{Computed: true, Description: "The source cluster's id, from its metadata when the agent last connected to it; empty until it has."},
		"agent":             schema.StringAttribute{Computed: true, Description: "The `agent_id` of the agent that runs the mirror when the agents form a group (`coordination = \"group\"`); empty with `coordination = \"single\"`, where the one agent runs every mirror."},
		attrTopicConfigExclude: schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Source topic config keys not copied (KIP-1279 `mirror.topic.properties.exclude`), the KIP's default list unless set."},
		attrGroupsInclude: schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Consumer groups whose offsets are synced (KIP-1279 `mirror.groups.include`, whole-id regular expressions)."},
		attrGroupsExclude: schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Consumer groups never synced (KIP-1279 `mirror.groups.exclude`)."},
		attrACLInclude: schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Rules of the source ACLs copied to the destination (KIP-1279 `mirror.acl.include`)."},
		attrTopicRegex: schema.ListAttribute{Computed: true, ElementType: types.StringType,
			Description: "Regular expressions of source topics mirrored as they appear."},
		attrRefreshInterval: schema.StringAttribute{Computed: true,
			Description: "How often the agent syncs topic configs, partitions, group offsets and ACLs (KIP-1279 `mirror.metadata.refresh.interval.ms`), as a Go duration."},
	}
}

func (d *clusterMirrorDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_cluster_mirror"
}

func (d *clusterMirrorDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := mirrorComputedAttributes()
	attrs["name"] = schema.StringAttribute{Required: true, Description: "Name of the mirror.", Validators: []validator.String{mirrorNameValidator}}
	resp.Schema = schema.Schema{
		Description: "One mirror of the kmirror agent with its current lag and partition states, read at every plan.",
		Attributes:  attrs,
	}
}

func (d *clusterMirrorDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *clusterMirrorDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var name types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, pathName, &name)...)
	if resp.Diagnostics.HasError() || !needClient(d.client, &resp.Diagnostics) {
		return
	}
	m, err := d.client.Mirror(ctx, name.ValueString())
	if err != nil {
		addAgentError(&resp.Diagnostics, d.client, fmt.Sprintf("Reading mirror %q", name.ValueString()), err)
		return
	}
	obj, diags := mirrorObject(ctx, m)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, obj)...)
}
