package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryDependencies: the provider's plugin binary is built from the
// API types, their client and the mirror spec only (none of the agent's
// packages, no Kafka client), and the agent's binary does not link the
// testing package (the provider's does, through HashiCorp's go-plugin).
// `go list -deps` is the import graph the linker sees.
func TestBinaryDependencies(t *testing.T) {
	for _, tc := range []struct {
		binary string
		forbid []string // import path prefixes
	}{
		{".", []string{"github.com/kmirror/kmirror/agent/", "github.com/twmb/franz-go/"}},
		{"./agent/cmd/kmirror", []string{"testing"}},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.binary).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.binary, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed %d packages: %q", tc.binary, len(deps), deps)
		}
		for _, d := range deps {
			for _, f := range tc.forbid {
				if d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
					t.Errorf("%s links %s", tc.binary, d)
				}
			}
		}
	}
}
