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

// TestClientMetric: a metric's samples are summed over their labels, with
// the token sent; a metric whose name another's starts with is not one of
// them, and a metric the agent does not serve is not ok.
func TestClientMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`# HELP kmirror_group_handoffs_total Handoffs.
# TYPE kmirror_group_handoffs_total counter
kmirror_group_handoffs_total{agent_id="a}0"} 3
kmirror_group_handoffs_total{agent_id="a1"} 4.5
kmirror_group_handoffs_total_extra 100
kmirror_group_generation 7
`))
	}))
	defer srv.Close()
	c := NewClient(srv.URL+"/v1", "tok")
	for _, tc := range []struct {
		name string
		want float64
		ok   bool
	}{
		{"kmirror_group_handoffs_total", 7.5, true},
		{"kmirror_group_generation", 7, true},
		{"kmirror_group_items", 0, false},
	} {
		got, ok, err := c.Metric(context.Background(), tc.name)
		if err != nil || got != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v %v, want %v %v", tc.name, got, ok, err, tc.want, tc.ok)
		}
	}
	if _, _, err := NewClient(srv.URL, "").Metric(context.Background(), "kmirror_group_generation"); err == nil {
		t.Error("metrics without the token: no error")
	}
}
