package provider

import (
	"context"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// server returns the provider's protocol 6 server, as Terraform sees it.
func server(t *testing.T) tfprotov6.ProviderServer {
	t.Helper()
	s, err := providerserver.NewProtocol6WithError(New("test")())()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSchemasValid(t *testing.T) {
	resp, err := server(t).GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.Diagnostics {
		t.Errorf("schema diagnostic: %s: %s", d.Summary, d.Detail)
	}
	for _, name := range []string{"kafka_cluster_mirror", "kafka_mirror_topic"} {
		if resp.ResourceSchemas[name] == nil {
			t.Errorf("resource %s missing", name)
		}
	}
	for _, name := range []string{"kafka_cluster_mirror", "kafka_cluster_mirrors", "kafka_mirror_topic"} {
		if resp.DataSourceSchemas[name] == nil {
			t.Errorf("data source %s missing", name)
		}
	}
	if a := attribute(resp.Provider, "token"); a == nil || !a.Sensitive {
		t.Errorf("provider token is not sensitive: %+v", a)
	}
	// state is an argument with a default, reported back by Read.
	if a := attribute(resp.ResourceSchemas["kafka_mirror_topic"], "state"); a == nil || !a.Optional || !a.Computed {
		t.Errorf("kafka_mirror_topic state is not optional and computed: %+v", a)
	}
	if b := resp.ResourceSchemas["kafka_mirror_topic"].Block; len(b.BlockTypes) != 1 || b.BlockTypes[0].TypeName != "timeouts" {
		t.Errorf("kafka_mirror_topic blocks: %+v", b.BlockTypes)
	}
	if d := resp.ResourceSchemas["kafka_mirror_topic"].Block.Description; !strings.Contains(d, "never deletes data") {
		t.Errorf("kafka_mirror_topic description does not warn what destroy does: %q", d)
	}
	// Secrets: references in sensitive attributes, literals only in
	// write-only ones.
	src := attribute(resp.ResourceSchemas["kafka_cluster_mirror"], "source")
	if src == nil || src.NestedType == nil {
		t.Fatalf("source attributes: %+v", src)
	}
	nested := func(a *tfprotov6.SchemaAttribute, name string) *tfprotov6.SchemaAttribute {
		for _, n := range a.NestedType.Attributes {
			if n.Name == name {
				return n
			}
		}
		t.Fatalf("no attribute %s in %s", name, a.Name)
		return nil
	}
	sasl, tls := nested(src, "sasl"), nested(src, "tls")
	for _, a := range []*tfprotov6.SchemaAttribute{nested(sasl, "password"), nested(sasl, "token"), nested(sasl, "client_secret"), nested(tls, "key_pem")} {
		if !a.Sensitive || a.WriteOnly {
			t.Errorf("%s: sensitive %v, write-only %v; want sensitive", a.Name, a.Sensitive, a.WriteOnly)
		}
	}
	for _, a := range []*tfprotov6.SchemaAttribute{nested(sasl, "password_wo"), nested(tls, "key_pem_wo")} {
		if !a.Sensitive || !a.WriteOnly {
			t.Errorf("%s: sensitive %v, write-only %v; want both", a.Name, a.Sensitive, a.WriteOnly)
		}
	}
}

func attribute(s *tfprotov6.Schema, name string) *tfprotov6.SchemaAttribute {
	if s == nil {
		return nil
	}
	for _, a := range s.Block.Attributes {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// config builds a config value of schema's type from the given attributes,
// the others null.
func config(t *testing.T, s *tfprotov6.Schema, vals map[string]tftypes.Value) *tfprotov6.DynamicValue {
	t.Helper()
	typ := s.ValueType().(tftypes.Object)
	all := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		if v, ok := vals[name]; ok {
			all[name] = v
		} else {
			all[name] = tftypes.NewValue(at, nil)
		}
	}
	for name := range vals {
		if _, ok := typ.AttributeTypes[name]; !ok {
			t.Fatalf("no attribute %q", name)
		}
	}
	dv, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, all))
	if err != nil {
		t.Fatal(err)
	}
	return &dv
}

// resourceSchema returns the schema of resource type typ.
func resourceSchema(t *testing.T, s tfprotov6.ProviderServer, typ string) *tfprotov6.Schema {
	t.Helper()
	resp, err := s.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.ResourceSchemas[typ]
}

// planDiagnostics plans a change of a resource of type typ from prior to
// cfg and returns the plan's diagnostics as text.
func planDiagnostics(t *testing.T, s tfprotov6.ProviderServer, typ string, prior, cfg *tfprotov6.DynamicValue) string {
	t.Helper()
	resp, err := s.PlanResourceChange(context.Background(), &tfprotov6.PlanResourceChangeRequest{
		TypeName: typ, PriorState: prior, ProposedNewState: cfg, Config: cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return diagText(resp.Diagnostics)
}

func str(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }

func strs(ss ...string) tftypes.Value {
	vs := make([]tftypes.Value, 0, len(ss))
	for _, s := range ss {
		vs = append(vs, str(s))
	}
	return tftypes.NewValue(tftypes.List{ElementType: tftypes.String}, vs)
}

func source(servers tftypes.Value) tftypes.Value {
	return sourceWith(servers, "", nil, nil)
}

// sourceWith builds kafka_cluster_mirror's source: protocol, and the sasl
// and tls attributes given (nil: no block).
func sourceWith(servers tftypes.Value, protocol string, sasl, tls map[string]tftypes.Value) tftypes.Value {
	var resp resource.SchemaResponse
	(&clusterMirrorResource{}).Schema(context.Background(), resource.SchemaRequest{}, &resp)
	typ := resp.Schema.Type().TerraformType(context.Background()).(tftypes.Object).AttributeTypes["source"].(tftypes.Object)
	obj := func(t tftypes.Object, vals map[string]tftypes.Value) tftypes.Value {
		if vals == nil {
			return tftypes.NewValue(t, nil)
		}
		all := map[string]tftypes.Value{}
		for name, at := range t.AttributeTypes {
			if v, ok := vals[name]; ok {
				all[name] = v
			} else {
				all[name] = tftypes.NewValue(at, nil)
			}
		}
		return tftypes.NewValue(t, all)
	}
	proto := tftypes.NewValue(tftypes.String, nil)
	if protocol != "" {
		proto = str(protocol)
	}
	return tftypes.NewValue(typ, map[string]tftypes.Value{
		"bootstrap_servers": servers, "security_protocol": proto,
		"sasl": obj(typ.AttributeTypes["sasl"].(tftypes.Object), sasl),
		"tls":  obj(typ.AttributeTypes["tls"].(tftypes.Object), tls),
	})
}

func diagText(ds []*tfprotov6.Diagnostic) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.Summary + ": " + d.Detail + "\n")
	}
	return b.String()
}

// checkValidation validates a resource config through the protocol, as
// terraform validate does, and checks the diagnostics: none when want is
// "", else one containing want.
func checkValidation(ctx context.Context, t *testing.T, s tfprotov6.ProviderServer, req *tfprotov6.ValidateResourceConfigRequest, want string) {
	t.Helper()
	resp, err := s.ValidateResourceConfig(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := diagText(resp.Diagnostics)
	switch {
	case want == "" && got != "":
		t.Errorf("valid config refused: %s", got)
	case want != "" && !strings.Contains(got, want):
		t.Errorf("got diagnostics %q, want one containing %q", got, want)
	}
}

func TestResourceValidation(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	schemas, err := s.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, typ string
		vals      map[string]tftypes.Value
		want      string // "" when valid
	}{
		{"mirror ok", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092", "[::1]:9093"))}, ""},
		{"mirror with exclude", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr-1.x_y"), "source": source(strs("a:9092")), "topic_config_exclude": strs("retention.ms")}, ""},
		{"mirror name with slash", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("d/r"), "source": source(strs("a:9092"))}, "Invalid mirror name"},
		{"mirror name empty", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str(""), "source": source(strs("a:9092"))}, "Invalid mirror name"},
		{"bootstrap without port", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092", "kafka-2"))}, "Invalid bootstrap server"},
		{"no bootstrap", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": source(strs())}, "at least 1"},
		{"empty exclude", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092")), "topic_config_exclude": strs()}, "at least 1"},
		{"duplicate exclude", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": source(strs("a:9092")), "topic_config_exclude": strs("x", "x")}, "duplicate"},
		{"sasl_ssl by reference", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "",
			map[string]tftypes.Value{"mechanism": str("SCRAM-SHA-512"), "username": str("u"), "password": str("${env:SRC_PASSWORD}")},
			map[string]tftypes.Value{"ca_file": str("/etc/ca.pem"), "key_pem": str("${file:/etc/k.properties:key}"), "cert_file": str("/etc/c.pem")})}, ""},
		{"write-only password", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "SASL_PLAINTEXT",
			map[string]tftypes.Value{"mechanism": str("PLAIN"), "username": str("u"), "password_wo": str("s3cret"), "password_wo_version": tftypes.NewValue(tftypes.Number, 1)}, nil)}, ""},
		{"literal password", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "",
			map[string]tftypes.Value{"mechanism": str("PLAIN"), "username": str("u"), "password": str("s3cret")}, nil)}, "put it in password_wo"},
		{"literal key", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "", nil,
			map[string]tftypes.Value{"cert_file": str("/c"), "key_pem": str("-----BEGIN EC PRIVATE KEY-----")})}, "put it in key_pem_wo"},
		{"literal token", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "",
			map[string]tftypes.Value{"mechanism": str("OAUTHBEARER"), "token": str("eyJhbGciOi")}, nil)}, "Secret in plain text"},
		{"password twice", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "",
			map[string]tftypes.Value{"mechanism": str("PLAIN"), "username": str("u"), "password": str("${env:P}"), "password_wo": str("x")}, nil)}, "Give password or password_wo, not both"},
		{"bad protocol", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "SASL", nil, nil)}, "value must be one of"},
		{"sasl over plaintext", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "PLAINTEXT",
			map[string]tftypes.Value{"mechanism": str("PLAIN"), "username": str("u"), "password": str("${env:P}")}, nil)}, "security_protocol PLAINTEXT does not authenticate with SASL"},
		{"scram without username", "kafka_cluster_mirror", map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "",
			map[string]tftypes.Value{"mechanism": str("SCRAM-SHA-256"), "password_wo": str("x")}, nil)}, "mechanism SCRAM-SHA-256 needs a username"},
		{"topic ok", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("orders.v1")}, ""},
		{"internal topic", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("__consumer_offsets")}, "Invalid topic name"},
		{"dot topic", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("..")}, "Invalid topic name"},
		{"topic with space", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("a b")}, "Invalid topic name"},
		{"topic bad mirror", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("d r"), "topic": str("orders")}, "Invalid mirror name"},
		{"topic paused", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("orders"), "state": str("paused")}, ""},
		{"topic promoted", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("orders"), "state": str("promoted")}, ""},
		{"topic state failed", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("orders"), "state": str("failed")}, "value must be one of"},
		{"topic state upper case", "kafka_mirror_topic", map[string]tftypes.Value{"mirror": str("dr"), "topic": str("orders"), "state": str("MIRRORING")}, "value must be one of"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkValidation(ctx, t, s, &tfprotov6.ValidateResourceConfigRequest{
				TypeName: c.typ, Config: config(t, schemas.ResourceSchemas[c.typ], c.vals),
				ClientCapabilities: &tfprotov6.ValidateResourceConfigClientCapabilities{WriteOnlyAttributesAllowed: true},
			}, c.want)
		})
	}
	// A Terraform without write-only attributes (before 1.11) is told so.
	wo := config(t, schemas.ResourceSchemas["kafka_cluster_mirror"], map[string]tftypes.Value{"name": str("dr"), "source": sourceWith(strs("a:9093"), "",
		map[string]tftypes.Value{"mechanism": str("PLAIN"), "username": str("u"), "password_wo": str("x")}, nil)})
	if resp, err := s.ValidateResourceConfig(ctx, &tfprotov6.ValidateResourceConfigRequest{TypeName: "kafka_cluster_mirror", Config: wo}); err != nil ||
		!strings.Contains(diagText(resp.Diagnostics), "Terraform 1.11 and later") {
		t.Errorf("password_wo on an older Terraform: %v %s", err, diagText(resp.Diagnostics))
	}
	// The data sources share the name rules.
	resp, err := s.ValidateDataResourceConfig(ctx, &tfprotov6.ValidateDataResourceConfigRequest{
		TypeName: "kafka_mirror_topic",
		Config:   config(t, schemas.DataSourceSchemas["kafka_mirror_topic"], map[string]tftypes.Value{"mirror": str("dr"), "topic": str("__x")}),
	})
	if err != nil || !strings.Contains(diagText(resp.Diagnostics), "Invalid topic name") {
		t.Errorf("data source kafka_mirror_topic accepted an internal topic: %v %s", err, diagText(resp.Diagnostics))
	}
}

func TestParseTopicID(t *testing.T) {
	for _, c := range []struct{ id, mirror, topic, err string }{
		{id: "dr/orders", mirror: "dr", topic: "orders"},
		{id: "dr.1/orders_v-2.x", mirror: "dr.1", topic: "orders_v-2.x"},
		{id: "orders", err: "has no '/'"},
		{id: "dr:orders", err: "has no '/'"},
		{id: "dr/orders/0", err: "more than one '/'"},
		{id: "/orders", err: "mirror name \"\""},
		{id: "dr/", err: "topic name \"\""},
		{id: "d r/orders", err: "mirror name"},
		{id: "dr/__consumer_offsets", err: "topic name"},
		{id: "", err: "has no '/'"},
	} {
		m, tp, err := parseTopicID(c.id)
		switch {
		case c.err == "" && (err != nil || m != c.mirror || tp != c.topic):
			t.Errorf("parseTopicID(%q) = %q, %q, %v; want %q, %q", c.id, m, tp, err, c.mirror, c.topic)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "MIRROR/TOPIC")):
			t.Errorf("parseTopicID(%q) error %v, want one containing %q and naming the format", c.id, err, c.err)
		}
	}
}

// TestImportIDErrors goes through the protocol, as terraform import does.
func TestImportIDErrors(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	for _, c := range []struct{ typ, id, want string }{
		{"kafka_mirror_topic", "orders", "expected MIRROR/TOPIC"},
		{"kafka_mirror_topic", "a/b/c", "more than one '/'"},
		{"kafka_cluster_mirror", "dr/orders", "Import a mirror by its name"},
	} {
		resp, err := s.ImportResourceState(ctx, &tfprotov6.ImportResourceStateRequest{TypeName: c.typ, ID: c.id})
		if err != nil {
			t.Fatal(err)
		}
		if got := diagText(resp.Diagnostics); !strings.Contains(got, c.want) || !strings.Contains(got, "Invalid import ID") {
			t.Errorf("import %s %q: %q, want %q", c.typ, c.id, got, c.want)
		}
	}
	resp, err := s.ImportResourceState(ctx, &tfprotov6.ImportResourceStateRequest{TypeName: "kafka_mirror_topic", ID: "dr/orders"})
	if err != nil || len(resp.Diagnostics) > 0 || len(resp.ImportedResources) != 1 {
		t.Fatalf("import dr/orders: %v %s", err, diagText(resp.Diagnostics))
	}
}

func TestNewClient(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cfg := func(url, token, ca string) providerModel {
		m := providerModel{AgentURL: types.StringNull(), Token: types.StringNull(), CACertPEM: types.StringNull(), InsecureSkipVerify: types.BoolNull()}
		if url != "" {
			m.AgentURL = types.StringValue(url)
		}
		if token != "" {
			m.Token = types.StringValue(token)
		}
		if ca != "" {
			m.CACertPEM = types.StringValue(ca)
		}
		return m
	}
	errs := func(d diag.Diagnostics) string {
		var b strings.Builder
		for _, e := range d {
			b.WriteString(e.Summary() + ": " + e.Detail() + "\n")
		}
		return b.String()
	}

	c, d := newClient(cfg("", "", ""), env(map[string]string{EnvAddr: "https://agent:8080/", EnvToken: "t0k"}))
	if d.HasError() || c.BaseURL != "https://agent:8080" || c.Token != "t0k" {
		t.Errorf("env fallback: %+v %s", c, errs(d))
	}
	c, d = newClient(cfg("https://cfg:1", "cfgtok", ""), env(map[string]string{EnvAddr: "https://env:2", EnvToken: "envtok"}))
	if d.HasError() || c.BaseURL != "https://cfg:1" || c.Token != "cfgtok" {
		t.Errorf("config over env: %+v %s", c, errs(d))
	}
	if _, d = newClient(cfg("", "", ""), env(nil)); !strings.Contains(errs(d), "Missing kmirror agent URL") || !strings.Contains(errs(d), EnvAddr) {
		t.Errorf("missing URL: %s", errs(d))
	}
	if _, d = newClient(cfg("agent:8080", "", ""), env(nil)); !strings.Contains(errs(d), "Invalid kmirror agent URL") {
		t.Errorf("URL without scheme: %s", errs(d))
	}
	if _, d = newClient(cfg("https://agent:8080", "", "not a pem"), env(nil)); !strings.Contains(errs(d), "Invalid CA certificate") {
		t.Errorf("bad CA: %s", errs(d))
	}
	badPair := cfg("https://agent:8080", "", "")
	badPair.ClientCertPEM, badPair.ClientKeyPEM = types.StringValue("not a pem"), types.StringValue("not a key")
	// The diagnostic says why the pair does not load (crypto/tls's words).
	if _, d = newClient(badPair, env(nil)); !strings.Contains(errs(d), "Invalid client certificate") || !strings.Contains(errs(d), "tls: failed to find any PEM data") {
		t.Errorf("bad client certificate: %s", errs(d))
	}
	if _, d = newClient(cfg("http://agent.example:8080", "tok", ""), env(nil)); d.HasError() || d.WarningsCount() != 1 {
		t.Errorf("token over http: want one warning, got %s", errs(d))
	}
	if _, d = newClient(cfg("http://127.0.0.1:8080", "tok", ""), env(nil)); len(d) != 0 {
		t.Errorf("token over loopback http: %s", errs(d))
	}
}

// TestAgentErrors checks the diagnostics of an unreachable agent and of a
// refused token.
func TestAgentErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":"UNAUTHORIZED","message":"missing or unknown bearer token"}`))
	}))
	defer srv.Close()
	c := mirrorapi.NewClient(srv.URL, "wrong")
	_, err := c.Describe(context.Background())
	var d diag.Diagnostics
	addAgentError(&d, c, "Cannot configure the kafka provider", err)
	if len(d) != 1 || !strings.Contains(d[0].Summary(), "refused the token") || !strings.Contains(d[0].Detail(), EnvToken) {
		t.Errorf("401: %+v", d)
	}

	srv.Close()
	c = mirrorapi.NewClient(srv.URL, "")
	c.Retries = -1
	_, err = c.Describe(context.Background())
	d = nil
	addAgentError(&d, c, "Cannot configure the kafka provider", err)
	if len(d) != 1 || !strings.Contains(d[0].Summary(), "cannot reach") || !strings.Contains(d[0].Detail(), srv.URL) ||
		!strings.Contains(d[0].Detail(), EnvAddr) || strings.Contains(d[0].Detail(), "--agent") {
		t.Errorf("unreachable: %+v", d)
	}
}
