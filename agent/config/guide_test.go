package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// deployGuide is the source of docs/guides/deploy.md (make docs copies it).
const deployGuide = "../../templates/guides/deploy.md"

// TestDeployGuideCoversSettings checks that the deployment guide's
// configuration reference names every setting the agent's configuration
// file accepts, so that a new setting is documented with it.
func TestDeployGuideCoversSettings(t *testing.T) {
	b, err := os.ReadFile(deployGuide)
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	settings := hclNames(reflect.TypeFor[File](), "")
	if len(settings) < 10 {
		t.Fatalf("found %d settings in config.File, want at least 10: %q", len(settings), settings)
	}
	for _, s := range settings {
		if !strings.Contains(guide, "`"+s.name+"`") {
			t.Errorf("%s does not document the setting %s (write it as `%s` in the configuration table)", deployGuide, s.path, s.name)
		}
	}
}

type setting struct{ name, path string }

// hclNames lists the hcl-tagged fields of struct type typ, blocks included,
// recursively.
func hclNames(typ reflect.Type, prefix string) []setting {
	var out []setting
	for f := range typ.Fields() {
		tag := f.Tag.Get("hcl")
		if tag == "" {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		if kind == "label" {
			continue
		}
		out = append(out, setting{name, prefix + name})
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if kind == "block" && ft.Kind() == reflect.Struct {
			out = append(out, hclNames(ft, prefix+name+".")...)
		}
	}
	return out
}
