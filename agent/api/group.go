package api

// Group mode: every agent of a destination's group answers the whole API.
// A call about a mirror another agent runs is forwarded to that agent, with
// the caller's credentials; the list of mirrors gathers each agent's own.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// ForwardedHeader marks a call one agent forwarded to another: it is never
// forwarded again, and a list answered under it holds the agent's own
// mirrors only.
const ForwardedHeader = "X-Kmirror-Forwarded"

// Group is the agents' group as the API sees it (the coordinator).
type Group interface {
	// Locate says where mirror name runs; ok is false when there is no
	// such mirror.
	Locate(name string) (loc coordinator.Location, ok bool)
	// Peers are the other agents of the group.
	Peers() []coordinator.Peer
}

// peerClient calls the other agents.
var peerClient = &http.Client{Timeout: 30 * time.Second}

// route sends a call about mirror name to the agent that runs it, when that
// is another; it returns false once it answered the call.
func (s *Server) route(b Backend, w http.ResponseWriter, r *http.Request, name string) bool {
	g, ok := b.(Group)
	if !ok {
		return true
	}
	loc, ok := g.Locate(name)
	if !ok || loc.Here {
		return true
	}
	switch {
	case r.Header.Get(ForwardedHeader) != "":
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, fmt.Sprintf(
			"mirror %q: this agent was sent the call by %s, but does not run it (the group moved it, generation %d); retry shortly", name, r.Header.Get(ForwardedHeader), loc.Generation))
	case loc.Moving || loc.API == "":
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, fmt.Sprintf(
			"mirror %q is moving between agents of the group (generation %d): it runs again within moments; retry shortly", name, loc.Generation))
	default:
		s.forward(w, r, loc.Agent, loc.API)
	}
	return false
}

// forward proxies r to the agent at api.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, agent, api string) {
	target, err := url.Parse(api)
	if err != nil {
		writeError(w, http.StatusInternalServerError, mirrorapi.CodeInternal, fmt.Sprintf("agent %s told the group an API address that is no URL (%q): %v", agent, api, err))
		return
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(ForwardedHeader, s.self)
		},
		Transport: peerClient.Transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, fmt.Sprintf(
				"the call goes to agent %s, which runs the mirror, and it did not answer at %s: %v; retry shortly", agent, api, err))
		},
	}
	p.ServeHTTP(w, r)
}

// gather returns the mirrors of every agent of the group: this one's, and
// each other's own list. A mirror that none runs now (it is moving) or an
// agent that does not answer makes it fail: a list missing a mirror would
// read as a mirror deleted.
func (s *Server) gather(b Backend, r *http.Request) ([]mirrorapi.Mirror, error) {
	ms := b.Describe()
	g, ok := b.(Group)
	if !ok || r.Header.Get(ForwardedHeader) != "" {
		return ms, nil
	}
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Name] = true
	}
	for _, p := range g.Peers() {
		if p.API == "" {
			return nil, fmt.Errorf("agent %s of the group told no API address (api_advertise_url)", p.Agent)
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, p.API+"/v1/mirrors", nil)
		if err != nil {
			return nil, fmt.Errorf("listing the mirrors of agent %s: %w", p.Agent, err)
		}
		req.Header.Set(ForwardedHeader, s.self)
		if a := r.Header.Get("Authorization"); a != "" {
			req.Header.Set("Authorization", a)
		}
		resp, err := peerClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("listing the mirrors of agent %s at %s: %w", p.Agent, p.API, err)
		}
		var dr mirrorapi.DescribeResponse
		err = json.NewDecoder(resp.Body).Decode(&dr)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if err != nil {
			return nil, fmt.Errorf("listing the mirrors of agent %s at %s: %w", p.Agent, p.API, err)
		}
		for _, m := range dr.Mirrors {
			if !seen[m.Name] { // twice: caught mid-move; one is enough
				seen[m.Name] = true
				ms = append(ms, m)
			}
		}
	}
	for _, spec := range b.Mirrors() {
		if !seen[spec.Name] {
			return nil, fmt.Errorf("mirror %q is moving between agents of the group: it runs again within moments", spec.Name)
		}
	}
	return ms, nil
}
