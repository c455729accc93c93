package api_test

// The OpenAPI document against the code: every route is documented and
// every documented route exists, and answers validate structurally against
// the documented schemas (types, required fields, enums; $refs resolved).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/agent/api"
)

type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	Responses map[string]struct {
		Content map[string]struct {
			Schema map[string]any `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

func loadDoc(t *testing.T) openAPIDoc {
	t.Helper()
	var d openAPIDoc
	if err := json.Unmarshal(api.OpenAPI(), &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return d
}

func TestOpenAPIRoutes(t *testing.T) {
	d := loadDoc(t)
	var documented []string
	for path, item := range d.Paths {
		for method := range item {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	registered := api.Routes()
	slices.Sort(documented)
	slices.Sort(registered)
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(registered, r) {
			t.Errorf("openapi.json documents %s, which the API does not serve", r)
		}
	}
	// Every $ref resolves.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if _, ok := d.Components.Schemas[name]; !ok {
					t.Errorf("unresolved $ref %s", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var all any
	_ = json.Unmarshal(api.OpenAPI(), &all)
	walk(all)
}

// checkResponse validates body against the schema documented for method,
// pattern (a documented path) and status.
func checkResponse(t *testing.T, d openAPIDoc, method, pattern string, status int, body []byte) {
	t.Helper()
	raw, ok := d.Paths[pattern][strings.ToLower(method)]
	if !ok {
		t.Errorf("%s %s is not documented", method, pattern)
		return
	}
	var op operation
	if err := json.Unmarshal(raw, &op); err != nil {
		t.Fatal(err)
	}
	resp, ok := op.Responses[strconv.Itoa(status)]
	if !ok {
		t.Errorf("%s %s answered %d, which is not documented", method, pattern, status)
		return
	}
	c, ok := resp.Content["application/json"]
	if !ok {
		if len(resp.Content) == 0 && len(body) != 0 {
			t.Errorf("%s %s %d: documented without a body, got %s", method, pattern, status, body)
		}
		return
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("%s %s %d: not JSON: %v: %s", method, pattern, status, err, body)
		return
	}
	for _, p := range validate(d, c.Schema, v, "$") {
		t.Errorf("%s %s %d: %s\n%s", method, pattern, status, p, body)
	}
}

// validate returns what in v does not fit schema.
func validate(d openAPIDoc, schema map[string]any, v any, at string) []string {
	if ref, ok := schema["$ref"].(string); ok {
		return validate(d, d.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")], v, at)
	}
	var probs []string
	bad := func(f string, a ...any) []string { return append(probs, at+": "+fmt.Sprintf(f, a...)) }
	switch schema["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return bad("want an object, got %T", v)
		}
		req, _ := schema["required"].([]any)
		for _, r := range req {
			if _, ok := obj[r.(string)]; !ok {
				probs = bad("required field %q missing", r)
			}
		}
		props, _ := schema["properties"].(map[string]any)
		for k, x := range obj {
			if ps, ok := props[k].(map[string]any); ok {
				probs = append(probs, validate(d, ps, x, at+"."+k)...)
			} else if ap, ok := schema["additionalProperties"].(map[string]any); ok {
				probs = append(probs, validate(d, ap, x, at+"."+k)...)
			} else if props != nil {
				probs = bad("field %q is not documented", k)
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return bad("want an array, got %T", v)
		}
		items, _ := schema["items"].(map[string]any)
		for i, x := range arr {
			probs = append(probs, validate(d, items, x, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return bad("want a string, got %T", v)
		}
		if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, any(s)) {
			probs = bad("%q is not one of %v", s, enum)
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			return bad("want an integer, got %v", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad("want a boolean, got %T", v)
		}
	}
	return probs
}
