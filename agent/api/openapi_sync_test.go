package api_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestOpenAPIMetadataSync: openapi.json's MetadataSync has a required
// property for each kind of mirrorapi's table, in its order, each a
// SyncStatus, and nothing else; a status with every kind set validates.
func TestOpenAPIMetadataSync(t *testing.T) {
	d := loadDoc(t)
	schema, ok := d.Components.Schemas["MetadataSync"]
	if !ok {
		t.Fatal("openapi.json has no MetadataSync schema")
	}
	var names []string
	for _, k := range mirrorapi.SyncKinds() {
		names = append(names, k.String())
	}
	var required []string
	req, _ := schema["required"].([]any)
	for _, r := range req {
		s, _ := r.(string)
		required = append(required, s)
	}
	if !slices.Equal(required, names) {
		t.Errorf("MetadataSync requires %q, want the kinds %q", required, names)
	}
	props, _ := schema["properties"].(map[string]any)
	for _, n := range names {
		p, _ := props[n].(map[string]any)
		if ref, _ := p["$ref"].(string); ref != "#/components/schemas/SyncStatus" {
			t.Errorf("MetadataSync.%s is %v, want a $ref to SyncStatus", n, props[n])
		}
	}
	for n := range props {
		if !slices.Contains(names, n) {
			t.Errorf("MetadataSync documents %q, which is not a kind", n)
		}
	}

	var m mirrorapi.MetadataSync
	for _, k := range mirrorapi.SyncKinds() {
		m[k] = mirrorapi.SyncStatus{LastSuccess: "2026-11-30T12:00:00Z", Items: 1, LastError: "e", Errors: 2, Drift: []string{"d"}}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range validate(d, schema, v, "$") {
		t.Errorf("%s\n%s", p, b)
	}
}
