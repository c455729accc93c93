package mirrorapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestClientBaseURL: the agent's address may be given with or without a
// trailing slash or the API's /v1 prefix; every form reaches /v1/mirrors.
func TestClientBaseURL(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path
		_ = json.NewEncoder(w).Encode(DescribeResponse{Mirrors: []Mirror{}})
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/v1", srv.URL + "/v1/"} {
		got = ""
		if _, err := NewClient(base, "").Describe(context.Background()); err != nil || got != "/v1/mirrors" {
			t.Errorf("base %q: asked for %q (%v), want /v1/mirrors", base, got, err)
		}
	}
}
