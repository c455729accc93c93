package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// TestAgentMetrics runs `kmirror agent` in-process with a token file and
// --metrics-listen: the metrics address serves /metrics without a token
// (and nothing else), the API address only with the token.
func TestAgentMetrics(t *testing.T) {
	cfg, err := config.Parse("agent.hcl", []byte(`metrics_listen = "0.0.0.0:9464"`))
	if err != nil || cfg.MetricsListen != "0.0.0.0:9464" {
		t.Fatalf("metrics_listen in the config: %+v, %v", cfg, err)
	}

	dst := devclustertest.Start(t, devcluster.Name("dst"))
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr := devclustertest.FreeAddr(t)
	a := startInProcessAgent(t, "--destination-bootstrap", dst.BootstrapString(), "--token-file", tokFile, "--metrics-listen", metricsAddr)
	get := func(url, tok string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	a.waitReady(t, http.StatusOK, "", 20*time.Second)
	for _, c := range []struct {
		url, tok string
		status   int
	}{
		{"http://" + metricsAddr + "/metrics", "", 200},
		{a.base + "/metrics", "", 401},
		{a.base + "/metrics", "tok-1", 200},
		{"http://" + metricsAddr + "/v1/mirrors", "tok-1", 404},
	} {
		status, body := get(c.url, c.tok)
		if status != c.status {
			t.Errorf("GET %s (token %q): %d, want %d: %.200s", c.url, c.tok, status, c.status, body)
			continue
		}
		if status == 200 {
			for _, s := range []string{"\nkmirror_fetch_requests_total ", "\ngo_goroutines ", "\nprocess_start_time_seconds "} {
				if !strings.Contains(body, s) {
					t.Errorf("GET %s: no %q", c.url, strings.TrimSpace(s))
				}
			}
		}
	}
}
