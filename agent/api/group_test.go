package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// groupBackend is one agent of a group as the API sees it: the mirrors and
// shares it runs, and where the others are. The API calls nothing else of
// it in these tests (the embedded Backend is nil).
type groupBackend struct {
	api.Backend
	own   []mirrorapi.Mirror
	specs []string
	here  map[string]bool // mirror homes run here (all Shared)
	peers []coordinator.Peer
}

func (b *groupBackend) Describe() []mirrorapi.Mirror { return slices.Clone(b.own) }
func (b *groupBackend) Running() bool                { return true }
func (b *groupBackend) Mirrors() []mirrorspec.Spec {
	var out []mirrorspec.Spec
	for _, n := range b.specs {
		out = append(out, mirrorspec.Spec{Name: n})
	}
	return out
}
func (b *groupBackend) Peers() []coordinator.Peer { return b.peers }
func (b *groupBackend) Locate(name string) (coordinator.Location, bool) {
	if !slices.Contains(b.specs, name) {
		return coordinator.Location{}, false
	}
	return coordinator.Location{Here: b.here[name], Shared: b.here[name]}, true
}

// home is mirror name as its home describes it, with partitions of topic t.
func home(name string, parts ...int32) mirrorapi.Mirror {
	return mirrorapi.Mirror{Name: name, Topics: []mirrorapi.Topic{{Name: "t", Partitions: partitions(parts)}},
		StateCounts: map[mirrorapi.State]int{mirrorapi.StateMirroring: len(parts)}}
}

// share is what another agent runs of mirror name: partitions of topic t.
func share(name string, parts ...int32) mirrorapi.Mirror {
	m := home(name, parts...)
	m.Share = "partitions"
	return m
}

func partitions(ps []int32) []mirrorapi.Partition {
	var out []mirrorapi.Partition
	for _, p := range ps {
		out = append(out, mirrorapi.Partition{Partition: p, State: mirrorapi.StateMirroring})
	}
	return out
}

// recorder serves h and keeps the query of every call.
type recorder struct {
	mu      sync.Mutex
	queries []string
	h       http.Handler
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.queries = append(r.queries, req.URL.RawQuery)
	r.mu.Unlock()
	r.h.ServeHTTP(w, req)
}

// TestGroupDescribeOneMirror: describing one mirror asks every other agent
// of the group for that mirror only (GET /v1/mirrors?mirror=NAME), and
// merges their shares of it into the home's; an agent of an earlier
// release that answers its whole list is filtered, not trusted to.
func TestGroupDescribeOneMirror(t *testing.T) {
	names := []string{"a", "b", "c"}
	peer := &recorder{h: api.Handler(&groupBackend{own: []mirrorapi.Mirror{share("a", 1), home("b", 0)}, specs: names}, api.Options{})}
	peerSrv := httptest.NewServer(peer)
	defer peerSrv.Close()
	// An earlier release ignores the query: its whole list.
	old := &recorder{h: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(mirrorapi.DescribeResponse{Mirrors: []mirrorapi.Mirror{share("a", 2), home("c", 0), share("b", 1)}})
	})}
	oldSrv := httptest.NewServer(old)
	defer oldSrv.Close()
	local := &groupBackend{
		own: []mirrorapi.Mirror{home("a", 0)}, specs: names, here: map[string]bool{"a": true},
		peers: []coordinator.Peer{{Agent: "peer", API: peerSrv.URL}, {Agent: "old", API: oldSrv.URL}},
	}
	srv := httptest.NewServer(api.Handler(local, api.Options{AgentID: "local"}))
	defer srv.Close()
	cl := mirrorapi.NewClient(srv.URL, "")

	parts := func(m mirrorapi.Mirror) []int32 {
		var out []int32
		for _, p := range m.Topics[0].Partitions {
			out = append(out, p.Partition)
		}
		return out
	}
	m, err := cl.Mirror(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := parts(m); !slices.Equal(got, []int32{0, 1, 2}) || m.StateCounts[mirrorapi.StateMirroring] != 3 {
		t.Errorf("GET /v1/mirrors/a: partitions %v, state counts %v; want 0, 1 and 2 mirroring (the home's and both shares)", got, m.StateCounts)
	}
	if !slices.Equal(peer.queries, []string{"mirror=a"}) || !slices.Equal(old.queries, []string{"mirror=a"}) {
		t.Errorf("the other agents were asked %q and %q; want mirror=a once each", peer.queries, old.queries)
	}

	// The list, filtered by a caller, the same way.
	var dr mirrorapi.DescribeResponse
	resp, err := http.Get(srv.URL + "/v1/mirrors?mirror=a")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&dr); err != nil {
		t.Fatal(err)
	}
	if len(dr.Mirrors) != 1 || dr.Mirrors[0].Name != "a" || !slices.Equal(parts(dr.Mirrors[0]), []int32{0, 1, 2}) {
		t.Errorf("GET /v1/mirrors?mirror=a: %+v; want mirror a alone with partitions 0, 1 and 2", dr.Mirrors)
	}

	// The whole list merges every agent's.
	all, err := cl.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range all {
		got = append(got, m.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, names) {
		t.Errorf("GET /v1/mirrors: %v; want %v", got, names)
	}
}
