package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestSourceSecurity: a source with SASL and TLS round-trips through the
// API as the OpenAPI document says, references shown as written; a literal
// secret without the agent's secret key, the redaction marker sent back and
// a SASL block over PLAINTEXT are refused, naming the field.
func TestSourceSecurity(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	src := e.src.Bootstrap()[0]
	body := `{"name":"sec","topics":["logs"],"source":{"bootstrap_servers":["` + src + `"],"security_protocol":"SASL_SSL",` +
		`"sasl":{"mechanism":"SCRAM-SHA-512","username":"reader","password":"${env:KMIRROR_API_TEST_PW}"},` +
		`"tls":{"ca_file":"/etc/kmirror/ca.pem","cert_file":"/etc/kmirror/c.pem","key_pem":"${file:/etc/kmirror/k.properties:key}","server_name":"kafka"}}}`
	status, b := e.call(t, token, "POST", "/v1/mirrors", body)
	if status != 201 {
		t.Fatalf("create: %d %s", status, b)
	}
	checkResponse(t, d, "POST", "/v1/mirrors", status, b)
	status, b = e.call(t, token, "GET", "/v1/mirrors/sec", "")
	checkResponse(t, d, "GET", "/v1/mirrors/{name}", status, b)
	var m mirrorapi.Mirror
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Source.SASL == nil || m.Source.SASL.Password != "${env:KMIRROR_API_TEST_PW}" || m.Source.TLS == nil ||
		m.Source.TLS.KeyPEM != "${file:/etc/kmirror/k.properties:key}" || m.Source.TLS.ServerName != "kafka" || m.Source.SecurityProtocol != "SASL_SSL" {
		t.Errorf("describe: %+v %+v %+v", m.Source, m.Source.SASL, m.Source.TLS)
	}
	// The CA file is not on this machine: the mirror says which field.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(m.Error, "source.tls.ca_file: open /etc/kmirror/ca.pem") {
		if time.Now().After(deadline) {
			t.Fatalf("mirror error: %q", m.Error)
		}
		time.Sleep(20 * time.Millisecond)
		m, _ = e.cl.Mirror(context.Background(), "sec")
	}

	for _, tc := range []struct{ sasl, want string }{
		{`{"mechanism":"PLAIN","username":"u","password":"hunter2-literal"}`, "source.sasl.password: the agent keeps literal secrets encrypted and has no key"},
		{`{"mechanism":"PLAIN","username":"u","password":"(sensitive)"}`, `source.sasl.password: "(sensitive)" is how responses hide a secret`},
		{`{"mechanism":"PLAIN","username":"u","password":"${vault:x}"}`, "source.sasl.password: not a valid reference"},
	} {
		status, b := e.call(t, token, "POST", "/v1/mirrors", `{"name":"bad","topics":["audit"],"source":{"bootstrap_servers":["`+src+`"],"sasl":`+tc.sasl+`}}`)
		checkResponse(t, d, "POST", "/v1/mirrors", status, b)
		var ae mirrorapi.Error
		_ = json.Unmarshal(b, &ae)
		if status != 400 || ae.Code != mirrorapi.CodeInvalidConfig || !strings.Contains(ae.Message, tc.want) || strings.Contains(string(b), "hunter2") {
			t.Errorf("sasl %s: %d %s, want 400 INVALID_CONFIG %q", tc.sasl, status, b, tc.want)
		}
	}
	status, b = e.call(t, token, "POST", "/v1/mirrors", `{"name":"bad","topics":["audit"],"source":{"bootstrap_servers":["`+src+`"],"security_protocol":"PLAINTEXT","sasl":{"mechanism":"PLAIN","username":"u","password":"${env:X}"}}}`)
	if status != 400 || !strings.Contains(string(b), "source.sasl: security_protocol PLAINTEXT does not authenticate with SASL") {
		t.Errorf("SASL over PLAINTEXT: %d %s", status, b)
	}
}
