package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestAgentListenNeedsToken: without a token file the agent refuses a
// non-loopback address, naming the flag, before it connects to anything.
func TestAgentListenNeedsToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		err := runAgent(context.Background(), []string{"--destination-bootstrap", "127.0.0.1:1", "--listen", addr})
		if err == nil || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("--listen %s without --token-file: %v", addr, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:1": true, "[::1]:1": true, "127.0.0.2:1": true, "10.0.0.1:1": false, ":8080": false, "bad": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toks, err := readTokens(write("ok", "# rotation\nnew-token\n\n  old-token  \n"))
	if err != nil || strings.Join(toks, ",") != "new-token,old-token" {
		t.Errorf("tokens %q, %v", toks, err)
	}
	for _, s := range []string{"", "# only a comment\n", "two words\n"} {
		if _, err := readTokens(write("bad", s)); err == nil || !strings.Contains(err.Error(), "--token-file") {
			t.Errorf("token file %q: %v", s, err)
		}
	}
	if _, err := readTokens(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing token file is accepted")
	}
	cfg, err := config.Parse("agent.hcl", []byte(`token_file = "/etc/kmirror/tokens"`))
	if err != nil || cfg.TokenFile != "/etc/kmirror/tokens" {
		t.Errorf("token_file in the config: %+v, %v", cfg, err)
	}
}

// TestAgentTokenFile runs `kmirror agent` in-process with a token file:
// /readyz answers without a token once the state topic is loaded, the API
// only with the token.
func TestAgentTokenFile(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokFile, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--token-file", tokFile)
	a.waitReady(t, http.StatusOK, "", 20*time.Second)
	base := a.base
	if _, err := mirrorapi.NewClient(base, "").Describe(context.Background()); !mirrorapi.IsCode(err, mirrorapi.CodeUnauthorized) {
		t.Errorf("no token: %v", err)
	}
	if _, err := mirrorapi.NewClient(base, "tok-1").Describe(context.Background()); err != nil {
		t.Errorf("with the token: %v", err)
	}
}
