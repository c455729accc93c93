package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

var _ datasource.DataSourceWithConfigure = (*clusterMirrorsDataSource)(nil)

// NewClusterMirrorsDataSource is data "kafka_cluster_mirrors".
func NewClusterMirrorsDataSource() datasource.DataSource { return &clusterMirrorsDataSource{} }

type clusterMirrorsDataSource struct {
	client *mirrorapi.Client
}

type clusterMirrorsModel struct {
	Mirrors types.List `tfsdk:"mirrors"`
}

func (d *clusterMirrorsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_cluster_mirrors"
}

func (d *clusterMirrorsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := mirrorComputedAttributes()
	attrs["name"] = schema.StringAttribute{Computed: true, Description: "Name of the mirror."}
	resp.Schema = schema.Schema{
		Description: "Every mirror of the kmirror agent, sorted by name, with current lag and partition states.",
		Attributes: map[string]schema.Attribute{
			"mirrors": schema.ListNestedAttribute{
				Computed:     true,
				Description:  "The mirrors.",
				NestedObject: schema.NestedAttributeObject{Attributes: attrs},
			},
		},
	}
}

func (d *clusterMirrorsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *clusterMirrorsDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	if !needClient(d.client, &resp.Diagnostics) {
		return
	}
	ms, err := d.client.Describe(ctx)
	if err != nil {
		addAgentError(&resp.Diagnostics, d.client, "Listing mirrors", err)
		return
	}
	objs := make([]attr.Value, 0, len(ms))
	for _, m := range ms {
		obj, diags := mirrorObject(ctx, m)
		resp.Diagnostics.Append(diags...)
		objs = append(objs, obj)
	}
	list, diags := types.ListValue(types.ObjectType{AttrTypes: mirrorAttrTypes}, objs)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, clusterMirrorsModel{Mirrors: list})...)
}
