package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestStandby: an agent that waits (for the writer lease's agents of an
// earlier release to stop) is healthy, not ready, and refuses /v1 calls
// with NOT_ACTIVE naming the lease's holder, which the client does not
// retry; it serves once it runs, and refuses again when told to wait.
func TestStandby(t *testing.T) {
	s := api.New(api.Options{})
	srv := httptest.NewServer(s)
	defer srv.Close()
	const why = "this agent (b, coordination = \"group\") waits for the agents of the writer lease of state topic \"__kmirror_state\" (an earlier release) to stop: a holds the lease (epoch 4, renewed 3ms ago)"
	s.SetStandby(func() string { return why })
	get := func(p string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("/healthz"); st != http.StatusOK {
		t.Errorf("/healthz of a standby: %d, want 200", st)
	}
	if st, body := get("/readyz"); st != http.StatusServiceUnavailable || !strings.Contains(body, "standby: "+why) {
		t.Errorf("/readyz of a standby: %d %q", st, body)
	}
	// GET /v1/agent is answered by a standby too.
	s.SetAgentStatus(func() mirrorapi.AgentStatus {
		return mirrorapi.AgentStatus{AgentID: "b", Role: mirrorapi.RoleStandby, LeaseHolder: "a", LeaseEpoch: 4, LeaseDurationMs: 15000}
	})
	if st, body := get("/v1/agent"); st != http.StatusOK || !strings.Contains(body, `"role": "standby"`) || !strings.Contains(body, `"lease_holder": "a"`) {
		t.Errorf("GET /v1/agent of a standby: %d %s", st, body)
	} else {
		checkResponse(t, loadDoc(t), "GET", "/v1/agent", st, []byte(body))
	}
	// So is the API's document: a client is built against any agent.
	if st, body := get("/v1/openapi.json"); st != http.StatusOK || !strings.Contains(body, `"openapi"`) {
		t.Errorf("GET /v1/openapi.json of a standby: %d %.200s", st, body)
	}
	cl := mirrorapi.NewClient(srv.URL, "")
	cl.Backoff = time.Second
	began := time.Now()
	_, err := cl.Describe(context.Background())
	if !mirrorapi.IsCode(err, mirrorapi.CodeNotActive) || !strings.Contains(err.Error(), why) {
		t.Errorf("describe on a standby: %v; want NOT_ACTIVE with %q", err, why)
	}
	if took := time.Since(began); took >= cl.Backoff {
		t.Errorf("the client retried NOT_ACTIVE (%v)", took)
	}

	f := &fakeBackend{}
	f.running.Store(true)
	s.SetBackend(f)
	if st, _ := get("/readyz"); st != http.StatusOK {
		t.Errorf("/readyz once active: %d", st)
	}
	if _, err := cl.Describe(context.Background()); err != nil {
		t.Errorf("describe once active: %v", err)
	}
	s.SetStandby(func() string { return why })
	if _, err := cl.Describe(context.Background()); !mirrorapi.IsCode(err, mirrorapi.CodeNotActive) {
		t.Errorf("describe after losing the lease: %v", err)
	}
}
