package mirrorapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestSyncKindNames(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range SyncKinds() {
		name := k.String()
		if name == "" || strings.HasPrefix(name, "SyncKind(") || name != strings.ToLower(name) {
			t.Errorf("kind %d has name %q, want a lower-case word", int(k), name)
		}
		if seen[name] {
			t.Errorf("kind %d: name %q taken by another kind", int(k), name)
		}
		seen[name] = true
		if b, err := k.MarshalText(); err != nil || string(b) != name {
			t.Errorf("kind %s: MarshalText = %q, %v", k, b, err)
		}
	}
	if len(seen) != len(MetadataSync{}) {
		t.Errorf("%d kinds named, MetadataSync holds %d", len(seen), len(MetadataSync{}))
	}
	if got := SyncKind(len(syncKindNames)).String(); got != fmt.Sprintf("SyncKind(%d)", len(syncKindNames)) {
		t.Errorf("a kind past the table is %q", got)
	}
}

// TestMetadataSyncJSONShape pins the API's JSON: an object with one key per
// kind, in describe's order, each a SyncStatus, even before any sync ran.
func TestMetadataSyncJSONShape(t *testing.T) {
	got, err := json.Marshal(Mirror{}.Sync)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"configs":{"items":0,"errors":0},"partitions":{"items":0,"errors":0},"groups":{"items":0,"errors":0},"acls":{"items":0,"errors":0}}`
	if string(got) != want {
		t.Errorf("zero MetadataSync is\n%s\nwant\n%s", got, want)
	}
	// Indented inside a Mirror, as the API and the CLI's JSON write it.
	b, err := json.MarshalIndent(struct {
		Sync MetadataSync `json:"sync"`
	}{}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\n    \"configs\": {\n      \"items\": 0,")) {
		t.Errorf("indented:\n%s", b)
	}
}

// TestMetadataSyncJSON: every kind is a key of the JSON object, in
// SyncKinds's order, with its own status, and decodes back to it.
func TestMetadataSyncJSON(t *testing.T) {
	var m MetadataSync
	for _, k := range SyncKinds() {
		m[k] = SyncStatus{LastSuccess: "2026-11-30T12:00:00Z", Items: 10 + int(k), LastError: "e " + k.String(), Errors: int64(k) + 1, Drift: []string{"d " + k.String()}}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%s: not an object: %v %v", b, tok, err)
	}
	for _, k := range SyncKinds() {
		tok, err := dec.Token()
		if err != nil || tok != k.String() {
			t.Fatalf("%s: key %v (%v), want %q", b, tok, err, k)
		}
		var s SyncStatus
		if err := dec.Decode(&s); err != nil || !reflect.DeepEqual(s, m[k]) {
			t.Errorf("key %s: %+v (%v), want %+v", k, s, err, m[k])
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		t.Errorf("%s: more than the kinds: %v %v", b, tok, err)
	}

	var back MetadataSync
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, m) {
		t.Errorf("decoded back %+v (%v), want %+v", back, err, m)
	}
}

func TestMetadataSyncUnmarshal(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     MetadataSync
		err      bool
	}{
		{"null", `null`, MetadataSync{}, false},
		{"some kinds", `{"groups":{"items":4,"errors":1}}`, MetadataSync{SyncGroups: {Items: 4, Errors: 1}}, false},
		{"a kind this version does not know", `{"acls":{"items":2},"x-newer-kind":{"items":9}}`, MetadataSync{SyncACLs: {Items: 2}}, false},
		{"not an object", `[]`, MetadataSync{}, true},
		{"a kind not a status", `{"configs":3}`, MetadataSync{}, true},
	} {
		var got MetadataSync
		err := json.Unmarshal([]byte(c.in), &got)
		if (err != nil) != c.err || !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v, error %v", c.name, got, err, c.want, c.err)
		}
	}
}
