// Package provider is the kmirror Terraform provider ("kafka"): it drives a
// kmirror agent through its admin API (internal/mirrorapi). Each resource and
// data source lives in its own file; models.go holds what they share.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/kmirror/kafka"

// The environment variables the provider falls back on, the same as the
// kmirror CLI's.
const (
	EnvAddr  = "KMIRROR_ADDR"
	EnvToken = "KMIRROR_TOKEN"
)

var _ provider.Provider = (*kafkaProvider)(nil)

type kafkaProvider struct {
	version string
}

// New returns the provider's constructor for providerserver.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &kafkaProvider{version: version} }
}

type providerModel struct {
	AgentURL           types.String `tfsdk:"agent_url"`
	Token              types.String `tfsdk:"token"`
	CACertPEM          types.String `tfsdk:"ca_cert_pem"`
	InsecureSkipVerify types.Bool   `tfsdk:"insecure_skip_verify"`
	ClientCertPEM      types.String `tfsdk:"client_cert_pem"`
	ClientKeyPEM       types.String `tfsdk:"client_key_pem"`
}

func (p *kafkaProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "kafka"
	resp.Version = p.version
}

func (p *kafkaProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Mirrors Kafka topics offset-for-offset by driving a kmirror agent through its admin API. " +
			"The agent runs next to the destination cluster; this provider only talks to the agent.",
		Attributes: map[string]schema.Attribute{
			"agent_url": schema.StringAttribute{
				Optional: true,
				Description: "URL of the kmirror agent's admin API, such as `https://kmirror.example:8080`. " +
					"Falls back on the `" + EnvAddr + "` environment variable; one of the two is required.",
			},
			"token": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				Description: "Bearer token the agent accepts (a line of its `token_file`). Falls back on `" + EnvToken + "`. " +
					"Without one, only an agent listening on a loopback address without tokens answers.",
			},
			"ca_cert_pem": schema.StringAttribute{
				Optional: true,
				Description: "PEM-encoded CA certificate(s) to verify an `https` agent with, instead of the system's " +
					"trusted roots.",
			},
			"insecure_skip_verify": schema.BoolAttribute{
				Optional:    true,
				Description: "Skip verifying the agent's TLS certificate. For tests only. Default `false`.",
			},
			"client_cert_pem": schema.StringAttribute{
				Optional: true,
				Description: "PEM-encoded client certificate to present to an agent started with `client_ca_file`, " +
					"with `client_key_pem`.",
			},
			"client_key_pem": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "PEM-encoded private key of `client_cert_pem`. Provider settings are not kept in the state.",
			},
		},
	}
}

// providerData is what Configure hands resources and data sources.
type providerData struct {
	client *mirrorapi.Client
}

func (p *kafkaProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// A provider fed by values not known until apply configures later;
	// resources say so if they need the agent before then.
	for name, v := range map[string]interface{ IsUnknown() bool }{
		"agent_url": cfg.AgentURL, "token": cfg.Token, "ca_cert_pem": cfg.CACertPEM, "insecure_skip_verify": cfg.InsecureSkipVerify,
		"client_cert_pem": cfg.ClientCertPEM, "client_key_pem": cfg.ClientKeyPEM,
	} {
		if v.IsUnknown() {
			tflog.Debug(ctx, "provider configuration not known yet", map[string]any{"attribute": name})
			return
		}
	}
	client, diags := newClient(cfg, os.Getenv)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	// One call now, so that a wrong URL or token gives one clear error
	// instead of one per resource.
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.Describe(pctx); err != nil {
		addAgentError(&resp.Diagnostics, client, "Cannot configure the kafka provider", err)
		return
	}
	data := &providerData{client: client}
	resp.ResourceData = data
	resp.DataSourceData = data
}

// newClient builds the agent client from the configuration, with getenv
// for the fallbacks.
func newClient(cfg providerModel, getenv func(string) string) (*mirrorapi.Client, diag.Diagnostics) {
	var diags diag.Diagnostics
	addr := cfg.AgentURL.ValueString()
	if addr == "" {
		addr = getenv(EnvAddr)
	}
	token := cfg.Token.ValueString()
	if token == "" {
		token = getenv(EnvToken)
	}
	if addr == "" {
		diags.AddAttributeError(path.Root("agent_url"), "Missing kmirror agent URL",
			"Set agent_url in the provider block, or the "+EnvAddr+" environment variable, to the agent's admin API URL, such as https://kmirror.example:8080.")
		return nil, diags
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		diags.AddAttributeError(path.Root("agent_url"), "Invalid kmirror agent URL",
			fmt.Sprintf("%q is not an http:// or https:// URL with a host (from %s).", addr, sourceOf(cfg.AgentURL, EnvAddr)))
		return nil, diags
	}
	if u.Scheme == "http" && token != "" && !isLoopback(u.Hostname()) {
		diags.AddAttributeWarning(path.Root("agent_url"), "Token sent in clear text",
			fmt.Sprintf("agent_url %q uses http:// to a non-loopback host, so the bearer token crosses the network unencrypted. Serve the agent over https.", addr))
	}
	if cfg.ClientCertPEM.IsNull() != cfg.ClientKeyPEM.IsNull() {
		diags.AddAttributeError(path.Root("client_cert_pem"), "Incomplete client certificate",
			"Give client_cert_pem and client_key_pem together (the certificate and its private key), or neither.")
		return nil, diags
	}
	c := mirrorapi.NewClient(addr, token)
	err = c.SetTLS(mirrorapi.ClientTLS{
		CAPEM: []byte(cfg.CACertPEM.ValueString()), InsecureSkipVerify: cfg.InsecureSkipVerify.ValueBool(),
		CertPEM: []byte(cfg.ClientCertPEM.ValueString()), KeyPEM: []byte(cfg.ClientKeyPEM.ValueString()),
	})
	switch {
	case errors.Is(err, mirrorapi.ErrNoCACert):
		diags.AddAttributeError(path.Root("ca_cert_pem"), "Invalid CA certificate",
			"ca_cert_pem holds no PEM-encoded certificate (expected one or more -----BEGIN CERTIFICATE----- blocks).")
		return nil, diags
	case err != nil:
		diags.AddAttributeError(path.Root("client_cert_pem"), "Invalid client certificate",
			// SetTLS wraps ErrClientCert and formats the cause (%v):
			// the cause is in the message only.
			"client_cert_pem and client_key_pem do not form a certificate and its key: "+strings.TrimPrefix(err.Error(), mirrorapi.ErrClientCert.Error()+": "))
		return nil, diags
	}
	return c, diags
}

func sourceOf(v types.String, env string) string {
	if v.ValueString() != "" {
		return "agent_url"
	}
	return env
}

func isLoopback(host string) bool {
	return host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1"
}

func (p *kafkaProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewClusterMirrorResource, NewMirrorTopicResource, NewMirrorThrottleResource}
}

func (p *kafkaProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewClusterMirrorDataSource, NewClusterMirrorsDataSource, NewMirrorTopicDataSource}
}

// clientFrom takes the client out of provider data, or says why there is none.
func clientFrom(data any, diags *diag.Diagnostics) *mirrorapi.Client {
	if data == nil {
		// Not configured yet (or the configuration was unknown).
		return nil
	}
	pd, ok := data.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("Expected *providerData, got %T. Please report this issue to the provider developers.", data))
		return nil
	}
	return pd.client
}

// needClient reports an error when a resource needs the agent but the
// provider could not be configured.
func needClient(c *mirrorapi.Client, diags *diag.Diagnostics) bool {
	if c != nil {
		return true
	}
	diags.AddError("kafka provider not configured",
		"The provider's agent_url, token, ca_cert_pem or insecure_skip_verify is not known yet (it depends on a resource not created yet), "+
			"so the kmirror agent cannot be called. Apply the resources it depends on first (terraform apply -target=...).")
	return false
}

// addAgentError turns an agent call's error into a diagnostic that says what
// to do: unreachable agent, refused token, agent not ready, or the agent's
// own error code and message.
func addAgentError(diags *diag.Diagnostics, c *mirrorapi.Client, summary string, err error) {
	var apiErr *mirrorapi.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
		diags.AddError(summary+": the agent refused the token",
			fmt.Sprintf("The kmirror agent at %s answered 401 %s: %s\n\nSet the provider's token argument (or %s) to one of the tokens the agent was started with. "+
				"An agent started with client_ca_file also wants client_cert_pem and client_key_pem.",
				c.BaseURL, apiErr.Body.Code, apiErr.Body.Message, EnvToken))
	case errors.As(err, &apiErr) && apiErr.Body.Code == mirrorapi.CodeNotReady:
		diags.AddError(summary+": the agent is not ready",
			fmt.Sprintf("The kmirror agent at %s is still loading its state (%s: %s). Retry in a moment.", c.BaseURL, apiErr.Body.Code, apiErr.Body.Message))
	case errors.As(err, &apiErr):
		diags.AddError(summary,
			fmt.Sprintf("The kmirror agent answered %d %s: %s", apiErr.Status, apiErr.Body.Code, apiErr.Body.Message))
	default:
		// The client's own hint names CLI flags; keep the cause only.
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
		diags.AddError(summary+": cannot reach the kmirror agent",
			fmt.Sprintf("Calling the kmirror agent at %s failed: %v\n\nCheck the provider's agent_url (or %s), that `kmirror agent` runs and listens there, "+
				"and for https the ca_cert_pem / insecure_skip_verify settings.", c.BaseURL, err, EnvAddr))
	}
}
