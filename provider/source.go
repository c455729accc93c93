package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// A mirror's source connection in kafka_cluster_mirror: bootstrap servers,
// security protocol, SASL and TLS.
//
// Secrets never reach the Terraform state in plain text: a literal secret
// goes in a write-only attribute (password_wo, key_pem_wo; Terraform and
// OpenTofu ≥ 1.11), sent to the agent at create and whenever its _version
// changes, and never stored; the sensitive attributes (password, token,
// client_secret, key_pem) take only references the agent resolves,
// ${env:NAME} or ${file:PATH:KEY}, which are not secret.

type sourceModel struct {
	BootstrapServers types.List   `tfsdk:"bootstrap_servers"`
	SecurityProtocol types.String `tfsdk:"security_protocol"`
	SASL             *saslModel   `tfsdk:"sasl"`
	TLS              *tlsModel    `tfsdk:"tls"`
}

type saslModel struct {
	Mechanism         types.String `tfsdk:"mechanism"`
	Username          types.String `tfsdk:"username"`
	Password          types.String `tfsdk:"password"`
	PasswordWO        types.String `tfsdk:"password_wo"`
	PasswordWOVersion types.Int64  `tfsdk:"password_wo_version"`
	Token             types.String `tfsdk:"token"`
	TokenEndpoint     types.String `tfsdk:"token_endpoint"`
	ClientID          types.String `tfsdk:"client_id"`
	ClientSecret      types.String `tfsdk:"client_secret"`
	Scope             types.String `tfsdk:"scope"`
}

type tlsModel struct {
	CAPEM              types.String `tfsdk:"ca_pem"`
	CAFile             types.String `tfsdk:"ca_file"`
	CertPEM            types.String `tfsdk:"cert_pem"`
	CertFile           types.String `tfsdk:"cert_file"`
	KeyPEM             types.String `tfsdk:"key_pem"`
	KeyPEMWO           types.String `tfsdk:"key_pem_wo"`
	KeyPEMWOVersion    types.Int64  `tfsdk:"key_pem_wo_version"`
	KeyFile            types.String `tfsdk:"key_file"`
	InsecureSkipVerify types.Bool   `tfsdk:"insecure_skip_verify"`
	ServerName         types.String `tfsdk:"server_name"`
}

const referenceHelp = "a reference the agent resolves when it connects, `${env:NAME}` (its environment) or `${file:PATH:KEY}` " +
	"(KEY of the Java properties file PATH on the agent's machine). Not secret, so it may be in the state"

// sourceAttribute is kafka_cluster_mirror's source.
func sourceAttribute() schema.SingleNestedAttribute {
	str := func(desc string, v ...validator.String) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Description: desc, Validators: v}
	}
	ref := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Sensitive: true, Description: desc + ": " + referenceHelp + "."}
	}
	wo := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Sensitive: true, WriteOnly: true, Description: desc}
	}
	version := func(of string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Description: "Change it to send a new `" + of + "` to the agent: " +
			"Terraform keeps no trace of a write-only value, so this number is what makes a rotation a plan."}
	}
	return schema.SingleNestedAttribute{
		Required:    true,
		Description: "How the agent reaches the source cluster. Changes apply in place: the mirror reconnects and resumes from the destination's log ends.",
		Attributes: map[string]schema.Attribute{
			"bootstrap_servers": schema.ListAttribute{
				Required:    true,
				ElementType: types.StringType,
				Description: "HOST:PORT of one or more source brokers.",
				Validators: []validator.List{
					listvalidator.SizeAtLeast(1),
					listvalidator.ValueStringsAre(hostPortValidator),
				},
			},
			"security_protocol": str("`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` (Kafka's `security.protocol`). "+
				"Unset, it follows from `sasl` and `tls`: both give `SASL_SSL`.",
				stringvalidator.OneOf(mirrorspec.SecurityProtocols()...)),
			"sasl": schema.SingleNestedAttribute{
				Optional:    true,
				Description: "SASL authentication to the source.",
				Attributes: map[string]schema.Attribute{
					"mechanism": schema.StringAttribute{Required: true,
						Description: "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`.",
						Validators:  []validator.String{stringvalidator.OneOf(mirrorspec.Mechanisms()...)}},
					"username":            str("User name (PLAIN, SCRAM)."),
					"password":            ref("Password (PLAIN, SCRAM) as a reference; a literal password goes in `password_wo`"),
					"password_wo":         wo("Password (PLAIN, SCRAM), write-only (Terraform or OpenTofu 1.11 and later): sent to the agent, which keeps it encrypted, and never stored in the Terraform state. The agent needs a `secret_key_file`."),
					"password_wo_version": version("password_wo"),
					"token":               ref("Static OAUTHBEARER token"),
					"token_endpoint":      str("OAUTHBEARER: https URL of the OAuth 2 token endpoint the agent gets tokens from (client-credentials grant)."),
					"client_id":           str("OAUTHBEARER: client id at `token_endpoint`."),
					"client_secret":       ref("OAUTHBEARER: client secret at `token_endpoint`"),
					"scope":               str("OAUTHBEARER: scope to ask `token_endpoint` for."),
				},
			},
			"tls": schema.SingleNestedAttribute{
				Optional:    true,
				Description: "TLS to the source. Without `ca_pem` or `ca_file`, the agent's system roots verify the brokers.",
				Attributes: map[string]schema.Attribute{
					"ca_pem":             str("PEM CA certificate(s) the brokers' certificates must chain to."),
					"ca_file":            str("Path of a PEM CA file on the agent's machine, instead of `ca_pem`."),
					"cert_pem":           str("PEM client certificate, for brokers that authenticate clients by certificate."),
					"cert_file":          str("Path of a PEM client certificate on the agent's machine, instead of `cert_pem`."),
					"key_pem":            ref("Private key of the client certificate as a reference; a literal key goes in `key_pem_wo`"),
					"key_pem_wo":         wo("PEM private key of the client certificate, write-only (Terraform or OpenTofu 1.11 and later): sent to the agent, which keeps it encrypted, and never stored in the Terraform state. The agent needs a `secret_key_file`."),
					"key_pem_wo_version": version("key_pem_wo"),
					"key_file":           str("Path of the PEM private key on the agent's machine, instead of `key_pem`."),
					"insecure_skip_verify": schema.BoolAttribute{Optional: true,
						Description: "Skip verifying the brokers' certificates. For tests only."},
					"server_name": str("Name to verify in the brokers' certificates, when it differs from the bootstrap host."),
				},
			},
		},
	}
}

// toAPI returns the source to send to the agent: s as configured, with
// the write-only values (which only the configuration holds).
func (s *sourceModel) toAPI(ctx context.Context) (mirrorapi.Source, diag.Diagnostics) {
	var out mirrorapi.Source
	diags := s.BootstrapServers.ElementsAs(ctx, &out.BootstrapServers, false)
	out.SecurityProtocol = s.SecurityProtocol.ValueString()
	if a := s.SASL; a != nil {
		out.SASL = &mirrorapi.SourceSASL{
			Mechanism: a.Mechanism.ValueString(), Username: a.Username.ValueString(),
			Password: firstSet(a.PasswordWO, a.Password), Token: a.Token.ValueString(),
			TokenEndpoint: a.TokenEndpoint.ValueString(), ClientID: a.ClientID.ValueString(),
			ClientSecret: a.ClientSecret.ValueString(), Scope: a.Scope.ValueString(),
		}
	}
	if t := s.TLS; t != nil {
		out.TLS = &mirrorapi.SourceTLS{
			CAPEM: t.CAPEM.ValueString(), CAFile: t.CAFile.ValueString(), CertPEM: t.CertPEM.ValueString(),
			CertFile: t.CertFile.ValueString(), KeyPEM: firstSet(t.KeyPEMWO, t.KeyPEM), KeyFile: t.KeyFile.ValueString(),
			InsecureSkipVerify: t.InsecureSkipVerify.ValueBool(), ServerName: t.ServerName.ValueString(),
		}
	}
	return out, diags
}

func firstSet(vs ...types.String) string {
	for _, v := range vs {
		if !v.IsNull() && !v.IsUnknown() {
			return v.ValueString()
		}
	}
	return ""
}

// sourceFromAgent returns the source as the state keeps it: what the agent
// reports, with prior (the plan, or the state) deciding what the agent
// cannot say: a redacted secret keeps its prior value (null for a
// write-only one), write-only attributes are null, versions are kept.
func sourceFromAgent(ctx context.Context, src mirrorapi.Source, prior *sourceModel) (*sourceModel, diag.Diagnostics) {
	bs, diags := types.ListValueFrom(ctx, types.StringType, src.BootstrapServers)
	if prior == nil {
		prior = &sourceModel{}
	}
	out := &sourceModel{BootstrapServers: bs, SecurityProtocol: optString(src.SecurityProtocol, prior.SecurityProtocol)}
	if a := src.SASL; a != nil {
		p := prior.SASL
		if p == nil {
			p = &saslModel{}
		}
		out.SASL = &saslModel{
			Mechanism: types.StringValue(a.Mechanism), Username: optString(a.Username, p.Username),
			Password: secretString(a.Password, p.Password), PasswordWO: types.StringNull(), PasswordWOVersion: p.PasswordWOVersion,
			Token: secretString(a.Token, p.Token), TokenEndpoint: optString(a.TokenEndpoint, p.TokenEndpoint),
			ClientID: optString(a.ClientID, p.ClientID), ClientSecret: secretString(a.ClientSecret, p.ClientSecret),
			Scope: optString(a.Scope, p.Scope),
		}
	}
	if t := src.TLS; t != nil {
		p := prior.TLS
		if p == nil {
			p = &tlsModel{}
		}
		insecure := types.BoolNull()
		if t.InsecureSkipVerify || !p.InsecureSkipVerify.IsNull() {
			insecure = types.BoolValue(t.InsecureSkipVerify)
		}
		out.TLS = &tlsModel{
			CAPEM: optString(t.CAPEM, p.CAPEM), CAFile: optString(t.CAFile, p.CAFile),
			CertPEM: optString(t.CertPEM, p.CertPEM), CertFile: optString(t.CertFile, p.CertFile),
			KeyPEM: secretString(t.KeyPEM, p.KeyPEM), KeyPEMWO: types.StringNull(), KeyPEMWOVersion: p.KeyPEMWOVersion,
			KeyFile: optString(t.KeyFile, p.KeyFile), InsecureSkipVerify: insecure, ServerName: optString(t.ServerName, p.ServerName),
		}
	}
	return out, diags
}

// optString is an optional string the agent reports: null when empty,
// unless the prior value is an explicit "".
func optString(v string, prior types.String) types.String {
	if v == "" && (prior.IsNull() || prior.IsUnknown() || prior.ValueString() != "") {
		return types.StringNull()
	}
	return types.StringValue(v)
}

// secretString is a secret field the agent reports: a reference as
// written, a redacted literal as the prior value (null when it came from a
// write-only attribute).
func secretString(v string, prior types.String) types.String {
	if v == mirrorapi.Redacted {
		if prior.IsUnknown() {
			return types.StringNull()
		}
		return prior
	}
	return optString(v, prior)
}

// validateSource checks the configured source at plan time: references
// only in the sensitive attributes, a secret given once, and what the agent
// would refuse (mirrorspec.ValidateSource), each at its attribute.
func validateSource(ctx context.Context, s *sourceModel) diag.Diagnostics {
	var diags diag.Diagnostics
	if s == nil {
		return diags
	}
	root := path.Root("source")
	refOnly := func(p path.Path, v types.String, wo string) {
		if v.IsNull() || v.IsUnknown() || mirrorspec.IsReference(v.ValueString()) {
			return
		}
		fix := "give a reference the agent resolves, ${env:NAME} or ${file:PATH:KEY}"
		if wo != "" {
			fix = "put it in " + wo + " (write-only: Terraform and OpenTofu 1.11 and later never store it), or " + fix
		}
		diags.AddAttributeError(p, "Secret in plain text",
			fmt.Sprintf("This attribute holds a literal secret, which Terraform would keep in its state in plain text: %s.", fix))
	}
	once := func(p path.Path, a, b types.String, names string) {
		if !a.IsNull() && !b.IsNull() {
			diags.AddAttributeError(p, "Conflicting attributes", "Give "+names+", not both.")
		}
	}
	if a := s.SASL; a != nil {
		p := root.AtName("sasl")
		refOnly(p.AtName("password"), a.Password, "password_wo")
		refOnly(p.AtName("token"), a.Token, "")
		refOnly(p.AtName("client_secret"), a.ClientSecret, "")
		once(p.AtName("password_wo"), a.Password, a.PasswordWO, "password or password_wo")
	}
	if t := s.TLS; t != nil {
		p := root.AtName("tls")
		refOnly(p.AtName("key_pem"), t.KeyPEM, "key_pem_wo")
		once(p.AtName("key_pem_wo"), t.KeyPEM, t.KeyPEMWO, "key_pem or key_pem_wo")
	}
	if diags.HasError() || !sourceKnown(s) {
		return diags
	}
	src, d := s.toAPI(ctx)
	diags.Append(d...)
	for _, msg := range mirrorspec.ValidateSource("source", src) {
		field, why, _ := strings.Cut(msg, ": ")
		p := root
		for _, step := range strings.Split(field, ".")[1:] {
			p = p.AtName(step)
		}
		diags.AddAttributeError(p, "Invalid source connection", why)
	}
	return diags
}

// sourceKnown says whether every value of s is known (plan-time checks of
// the whole source need them all).
func sourceKnown(s *sourceModel) bool {
	vals := []interface{ IsUnknown() bool }{s.BootstrapServers, s.SecurityProtocol}
	if a := s.SASL; a != nil {
		vals = append(vals, a.Mechanism, a.Username, a.Password, a.PasswordWO, a.Token, a.TokenEndpoint, a.ClientID, a.ClientSecret, a.Scope)
	}
	if t := s.TLS; t != nil {
		vals = append(vals, t.CAPEM, t.CAFile, t.CertPEM, t.CertFile, t.KeyPEM, t.KeyPEMWO, t.KeyFile, t.InsecureSkipVerify, t.ServerName)
	}
	for _, v := range vals {
		if v.IsUnknown() {
			return false
		}
	}
	return true
}
