package api

// Group mode: every agent of a destination's group answers the whole API.
// A call about a mirror another agent runs is forwarded to that agent, with
// the caller's credentials; the list of mirrors gathers each agent's own.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
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

// gather returns the mirrors of every agent of the group, or only mirror
// name when it is not "": this agent's, and each other's own. A mirror
// that none runs now (it is moving) or an agent that does not answer makes
// it fail: a list missing a mirror would read as a mirror deleted.
func (s *Server) gather(b Backend, r *http.Request, name string) ([]mirrorapi.Mirror, error) {
	ms := named(b.Describe(), name)
	g, ok := b.(Group)
	if !ok || r.Header.Get(ForwardedHeader) != "" {
		return ms, nil
	}
	peers, err := s.peerMirrors(g, r, name)
	if err != nil {
		return nil, err
	}
	ms = merge(append(ms, peers...))
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Name] = true
	}
	for _, spec := range b.Mirrors() {
		if !seen[spec.Name] && (name == "" || spec.Name == name) {
			return nil, fmt.Errorf("mirror %q is moving between agents of the group: it runs again within moments", spec.Name)
		}
	}
	return ms, nil
}

// named returns the entries of mirror name in ms (its home's, and shares
// of it), or ms when name is "".
func named(ms []mirrorapi.Mirror, name string) []mirrorapi.Mirror {
	if name == "" {
		return ms
	}
	return slices.DeleteFunc(ms, func(m mirrorapi.Mirror) bool { return m.Name != name })
}

// shared says whether other agents of the group run partitions of mirror
// name, which this agent runs the home of: only then does its describe
// ask them.
func shared(g Group, name string) bool {
	loc, ok := g.Locate(name)
	return ok && loc.Here && loc.Shared && len(g.Peers()) > 0
}

// peerMirrors are the mirrors, and shares of mirrors, each other agent of
// the group runs; only those of mirror name when it is not "". The agents
// are asked at once, each for its own entries of name only (an agent of an
// earlier release answers its whole list, filtered here).
func (s *Server) peerMirrors(g Group, r *http.Request, name string) ([]mirrorapi.Mirror, error) {
	peers := g.Peers()
	for _, p := range peers {
		if p.API == "" {
			return nil, fmt.Errorf("agent %s of the group told no API address (api_advertise_url)", p.Agent)
		}
	}
	u := "/v1/mirrors"
	if name != "" {
		u += "?" + url.Values{"mirror": {name}}.Encode()
	}
	answers := make([]mirrorapi.DescribeResponse, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			if err := s.peerGet(r.Context(), r, p.API+u, &answers[i]); err != nil {
				errs[i] = fmt.Errorf("listing the mirrors of agent %s at %s: %w", p.Agent, p.API, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []mirrorapi.Mirror
	for _, a := range answers {
		out = append(out, named(a.Mirrors, name)...)
	}
	return out, nil
}

// merge folds the shares of mirrors other agents run (Share "partitions":
// some of a mirror's partitions) into the mirrors as their homes describe
// them. A mirror or partition told twice (caught mid-move) counts once; a
// share whose home is not in ms is left out.
func merge(ms []mirrorapi.Mirror) []mirrorapi.Mirror {
	out := make([]mirrorapi.Mirror, 0, len(ms))
	at := map[string]int{}
	for _, m := range ms {
		if _, dup := at[m.Name]; m.Share == "" && !dup {
			at[m.Name] = len(out)
			out = append(out, m)
		}
	}
	for _, part := range ms {
		i, ok := at[part.Name]
		if part.Share == "" || !ok {
			continue
		}
		addShare(&out[i], part)
	}
	return out
}

// addShare adds the partitions of share to m, with what they count for; a
// share whose agent cannot run its partitions says why in m's warnings.
func addShare(m *mirrorapi.Mirror, share mirrorapi.Mirror) {
	if share.Error != "" {
		m.Warnings = append(m.Warnings, fmt.Sprintf("agent %s, which runs partitions of the mirror: %s", share.Agent, share.Error))
	}
	if m.StateCounts == nil {
		m.StateCounts = map[mirrorapi.State]int{}
	}
	for _, st := range share.Topics {
		j := slices.IndexFunc(m.Topics, func(t mirrorapi.Topic) bool { return t.Name == st.Name })
		if j < 0 {
			continue // not a topic of the mirror as its home has it
		}
		t := &m.Topics[j]
		for _, p := range st.Partitions {
			if slices.ContainsFunc(t.Partitions, func(q mirrorapi.Partition) bool { return q.Partition == p.Partition }) {
				continue
			}
			t.Partitions = append(t.Partitions, p)
			m.StateCounts[p.State]++
			m.MaxLag = max(m.MaxLag, p.Lag)
		}
		slices.SortFunc(t.Partitions, func(a, b mirrorapi.Partition) int { return int(a.Partition - b.Partition) })
	}
	m.BufferedBytes += share.BufferedBytes
	m.Fetch.Requests += share.Fetch.Requests
	m.Fetch.Errors += share.Fetch.Errors
	m.Fetch.Bytes += share.Fetch.Bytes
	m.Fetch.DeadFetchers += share.Fetch.DeadFetchers
	m.Fetch.ThrottledMillis += share.Fetch.ThrottledMillis
}

// placed waits, in group mode, until the group has given mirror name, just
// created, to an agent, and answers the creation with that agent's describe
// when it is another. It returns true when this agent runs it (or there is
// no group): the caller answers.
func (s *Server) placed(b Backend, w http.ResponseWriter, r *http.Request, name string) bool {
	g, ok := b.(Group)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), placeTimeout)
	defer cancel()
	last := "the group has not given it to an agent"
	for {
		loc, ok := g.Locate(name)
		switch {
		case !ok || loc.Here:
			return true
		case !loc.Moving && loc.API != "":
			// Its owner answers 503 until it has started it.
			m, err := s.describeAt(ctx, r, loc.API, name)
			if err == nil {
				writeJSON(w, http.StatusCreated, normalize(m))
				return false
			}
			last = fmt.Sprintf("agent %s, which the group gave it to, did not describe it: %v", loc.Agent, err)
		}
		select {
		case <-ctx.Done():
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, fmt.Sprintf(
				"mirror %q was created, and does not run on an agent of the group within %v (%s): read it again shortly", name, placeTimeout, last))
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// placeTimeout bounds how long a creation waits for the group to place the
// new mirror: a rebalance, then its owner reads the state topic up to it
// and starts it (a new mirror has no earlier owner to wait out).
const placeTimeout = 30 * time.Second

// describeAt reads mirror name from the agent at api, with r's credentials.
func (s *Server) describeAt(ctx context.Context, r *http.Request, api, name string) (mirrorapi.Mirror, error) {
	var m mirrorapi.Mirror
	err := s.peerGet(ctx, r, api+"/v1/mirrors/"+url.PathEscape(name), &m)
	return m, err
}

// peerGet GETs the JSON at u from another agent of the group, as a call
// forwarded by this one with r's credentials, into out.
func (s *Server) peerGet(ctx context.Context, r *http.Request, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set(ForwardedHeader, s.self)
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := peerClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e mirrorapi.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("HTTP %d %s: %s", resp.StatusCode, e.Code, e.Message)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
