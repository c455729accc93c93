// Package api serves the agent's HTTP API: health and readiness, and under
// /v1 the mirrors (create, list, describe, update, delete), their topics and
// their last mirrored offsets and their throttles, with bearer-token authentication and errors
// that carry a stable code (mirrorapi.Code*) and a message naming the field
// at fault. The OpenAPI document of every route is openapi.json, served at
// GET /v1/openapi.json.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

//go:embed openapi.json
var openAPI []byte

// maxBody bounds request bodies.
const maxBody = 1 << 20

// Backend is what the API needs of the coordinator.
type Backend interface {
	Describe() []coordinator.MirrorStatus
	Mirrors() []mirrorspec.Spec
	Create(ctx context.Context, spec mirrorspec.Spec) error
	// Update merges the fields partial gives into mirror name's spec.
	Update(ctx context.Context, name string, partial mirrorspec.Spec) error
	AddTopics(ctx context.Context, name string, topics []string) error
	Delete(ctx context.Context, name string, force bool) error
	PauseTopics(ctx context.Context, name string, topics []string) error
	ResumeTopics(ctx context.Context, name string, topics []string) error
	StopTopics(ctx context.Context, name string, topics []string, mode coordinator.StopMode) error
	RecoverTopics(ctx context.Context, name string, topics []string) error
	Throttle(name string) (mirrorapi.Throttle, error)
	SetThrottle(ctx context.Context, name string, t mirrorapi.Throttle) error
	RemoveThrottle(ctx context.Context, name string) error
	// AddTopicsWith adds topics, topic regexes or a failback.
	AddTopicsWith(ctx context.Context, name string, req coordinator.AddRequest) error
	// RecoverTopicsWith is RecoverTopics, with recreate.
	RecoverTopicsWith(ctx context.Context, name string, topics []string, recreate bool) error
	// Running says whether the state topic is loaded and mirrors run.
	Running() bool
}

// Options configure a Server.
type Options struct {
	// Tokens are the bearer tokens callers may present; none means no
	// authentication (the agent allows that on loopback addresses only).
	Tokens []string
	Logger hclog.Logger
	// Metrics, when set, is served at GET /metrics (Prometheus text
	// format), before the state topic is loaded too. It needs a bearer
	// token like /v1 when tokens are configured: the series name every
	// mirror and topic, and Prometheus sends one with authorization:
	// credentials_file. The agent's metrics_listen serves it without one.
	// It is not in routes: not part of the JSON API nor of openapi.json.
	Metrics http.Handler
	// RequireClientCert refuses (401) every route but /healthz and
	// /readyz to a caller without a verified TLS client certificate (see
	// ServerTLS).
	RequireClientCert bool
	// AgentID names this agent in the calls it forwards to the other
	// agents of its group.
	AgentID string
}

// Server is the API's handler. It answers /healthz at once, and the other
// routes with 503 COORDINATOR_LOAD_IN_PROGRESS until SetBackend is called
// and the backend runs.
type Server struct {
	tokens     [][sha256.Size]byte
	clientCert bool // a verified client certificate is required
	log        hclog.Logger
	backend    atomic.Pointer[Backend]
	// standby, when set and no backend runs, says why this agent does not
	// serve the API yet: it waits for the writer lease's agents (an
	// earlier release) to stop.
	standby atomic.Pointer[func() string]
	// agentStatus answers GET /v1/agent (SetAgentStatus).
	agentStatus atomic.Pointer[func() mirrorapi.AgentStatus]
	mux         *http.ServeMux
	// self names this agent in the calls it forwards (Options.AgentID).
	self string
}

// route is one registered route; Routes lists them for the OpenAPI test.
type route struct {
	method, path string
	public       bool // no token needed
	// anyRole: answered without a running backend, by standbys too;
	// handle gets a nil Backend.
	anyRole bool
	handle  func(s *Server, b Backend, w http.ResponseWriter, r *http.Request)
}

var routes = []route{
	{method: "GET", path: "/healthz", public: true},
	{method: "GET", path: "/readyz", public: true},
	{method: "GET", path: "/v1/openapi.json", anyRole: true, handle: (*Server).openAPI},
	{method: "GET", path: "/v1/agent", anyRole: true, handle: (*Server).agent},
	{method: "GET", path: "/v1/mirrors", handle: (*Server).list},
	{method: "POST", path: "/v1/mirrors", handle: (*Server).create},
	{method: "GET", path: "/v1/mirrors/{name}", handle: (*Server).get},
	{method: "PUT", path: "/v1/mirrors/{name}", handle: (*Server).update},
	{method: "DELETE", path: "/v1/mirrors/{name}", handle: (*Server).delete},
	{method: "POST", path: "/v1/mirrors/{name}/topics", handle: (*Server).addTopics},
	{method: "GET", path: "/v1/mirrors/{name}/offsets", handle: (*Server).offsets},
	{method: "POST", path: "/v1/mirrors/{name}/topics/pause", handle: (*Server).pauseTopics},
	{method: "POST", path: "/v1/mirrors/{name}/topics/resume", handle: (*Server).resumeTopics},
	{method: "POST", path: "/v1/mirrors/{name}/topics/stop", handle: (*Server).stopTopics},
	{method: "POST", path: "/v1/mirrors/{name}/topics/recover", handle: (*Server).recoverTopics},
	{method: "GET", path: "/v1/mirrors/{name}/throttle", handle: (*Server).getThrottle},
	{method: "PUT", path: "/v1/mirrors/{name}/throttle", handle: (*Server).putThrottle},
	{method: "DELETE", path: "/v1/mirrors/{name}/throttle", handle: (*Server).deleteThrottle},
}

// Routes returns every route as "METHOD PATH".
func Routes() []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		out = append(out, r.method+" "+r.path)
	}
	return out
}

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return slices.Clone(openAPI) }

// New returns a server without a backend yet.
func New(o Options) *Server {
	s := &Server{log: o.Logger, mux: http.NewServeMux(), clientCert: o.RequireClientCert, self: o.AgentID}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	for _, t := range o.Tokens {
		s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if b := s.backend.Load(); b == nil || !(*b).Running() {
			w.WriteHeader(http.StatusServiceUnavailable)
			if sb := s.standby.Load(); sb != nil {
				// Not ready: a load balancer sends API calls to the
				// active agent only. /healthz says the standby is well.
				_, _ = io.WriteString(w, "standby: "+(*sb)()+"\n")
				return
			}
			_, _ = io.WriteString(w, "not ready: loading the state topic\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if o.Metrics != nil {
		s.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kmirror"`)
				writeError(w, http.StatusUnauthorized, mirrorapi.CodeUnauthorized, "a valid bearer token is required: send the header Authorization: Bearer TOKEN")
				return
			}
			o.Metrics.ServeHTTP(w, r)
		})
	}
	for _, rt := range routes {
		if rt.public {
			continue
		}
		s.mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kmirror"`)
				writeError(w, http.StatusUnauthorized, mirrorapi.CodeUnauthorized, "a valid bearer token is required: send the header Authorization: Bearer TOKEN")
				return
			}
			if rt.anyRole {
				rt.handle(s, nil, w, r)
				return
			}
			b := s.backend.Load()
			if sb := s.standby.Load(); b == nil && sb != nil {
				writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotActive, (*sb)())
				return
			}
			if b == nil || !(*b).Running() {
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, "the agent is still loading its state topic; retry shortly")
				return
			}
			if name := r.PathValue("name"); name != "" && !s.route(*b, w, r, name) {
				return // forwarded to the agent that runs the mirror
			}
			rt.handle(s, *b, w, r)
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kmirror"`)
			writeError(w, http.StatusUnauthorized, mirrorapi.CodeUnauthorized, "a valid bearer token is required: send the header Authorization: Bearer TOKEN")
			return
		}
		writeError(w, http.StatusNotFound, mirrorapi.CodeNotFound, fmt.Sprintf("no route %s %s; see GET /v1/openapi.json", r.Method, r.URL.Path))
	})
	return s
}

// Handler returns a server already backed by b.
func Handler(b Backend, o Options) *Server {
	s := New(o)
	s.SetBackend(b)
	return s
}

// SetBackend makes the server answer from b.
func (s *Server) SetBackend(b Backend) {
	s.backend.Store(&b)
	s.standby.Store(nil)
}

// SetAgentStatus makes GET /v1/agent answer status(), also while the agent
// waits. Without it the route answers role active once a backend runs.
func (s *Server) SetAgentStatus(status func() mirrorapi.AgentStatus) { s.agentStatus.Store(&status) }

func (s *Server) agent(_ Backend, w http.ResponseWriter, _ *http.Request) {
	if f := s.agentStatus.Load(); f != nil {
		writeJSON(w, http.StatusOK, (*f)())
		return
	}
	if b := s.backend.Load(); b == nil || !(*b).Running() {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, "the agent is still loading its state topic; retry shortly")
		return
	}
	writeJSON(w, http.StatusOK, mirrorapi.AgentStatus{Role: mirrorapi.RoleActive})
}

// SetStandby makes the server refuse /v1 calls with 503 NOT_ACTIVE and
// answer /readyz with 503, both with why() (which names the active agent),
// until SetBackend: the agent waits for the writer lease's agents (an
// earlier release) to stop. State changes are not accepted meanwhile: the
// caller sends them to the agent that runs the mirrors.
func (s *Server) SetStandby(why func() string) {
	s.backend.Store(nil)
	s.standby.Store(&why)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// authorized compares the request's bearer token with every configured one
// in constant time (hashes, so lengths do not leak either).
func (s *Server) authorized(r *http.Request) bool {
	if s.clientCert && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		return false
	}
	if len(s.tokens) == 0 {
		return true
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for _, want := range s.tokens {
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	return match == 1
}

func (s *Server) openAPI(_ Backend, w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

func (s *Server) list(b Backend, w http.ResponseWriter, r *http.Request) {
	ms, err := s.gather(b, r, r.URL.Query().Get("mirror"))
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, err.Error()+"; retry shortly")
		return
	}
	for i := range ms {
		ms[i] = normalize(ms[i])
	}
	writeJSON(w, http.StatusOK, mirrorapi.DescribeResponse{Mirrors: ms})
}

// normalize turns nil lists into empty ones, as the OpenAPI document says.
func normalize(m mirrorapi.Mirror) mirrorapi.Mirror {
	if m.Topics == nil {
		m.Topics = []mirrorapi.Topic{}
	}
	for i := range m.Topics {
		if m.Topics[i].Partitions == nil {
			m.Topics[i].Partitions = []mirrorapi.Partition{}
		}
	}
	if m.Source.BootstrapServers == nil {
		m.Source.BootstrapServers = []string{}
	}
	if m.StateCounts == nil {
		m.StateCounts = map[mirrorapi.State]int{}
	}
	for _, l := range []*[]string{&m.TopicConfigExclude, &m.GroupsInclude, &m.GroupsExclude, &m.ACLInclude} {
		if *l == nil {
			*l = []string{}
		}
	}
	return m
}

func (s *Server) get(b Backend, w http.ResponseWriter, r *http.Request) {
	if m, ok := s.mirror(b, w, r, r.PathValue("name")); ok {
		writeJSON(w, http.StatusOK, m)
	}
}

// mirror finds name in describe, or answers 404. In group mode it adds
// the partitions other agents run.
func (s *Server) mirror(b Backend, w http.ResponseWriter, r *http.Request, name string) (mirrorapi.Mirror, bool) {
	for _, m := range b.Describe() {
		if m.Name == name && m.Share == "" {
			if g, ok := b.(Group); ok && shared(g, name) {
				peers, err := s.peerMirrors(g, r, name)
				if err != nil {
					w.Header().Set("Retry-After", "1")
					writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, fmt.Sprintf("mirror %q: gathering its partitions from the agents of the group: %v; retry shortly", name, err))
					return mirrorapi.Mirror{}, false
				}
				for _, p := range peers {
					if p.Name == name && p.Share != "" {
						addShare(&m, p)
					}
				}
			}
			return normalize(m), true
		}
	}
	writeError(w, http.StatusNotFound, mirrorapi.CodeMirrorNotFound, fmt.Sprintf("name: no mirror named %q", name))
	return mirrorapi.Mirror{}, false
}

func (s *Server) create(b Backend, w http.ResponseWriter, r *http.Request) {
	var in mirrorapi.MirrorSpec
	if !decode(w, r, &in) {
		return
	}
	spec := in
	if err := b.Create(r.Context(), spec); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("mirror created", "mirror", spec.Name, "topics", spec.Topics)
	if !s.placed(b, w, r, spec.Name) {
		return // answered by the agent the group gave it to
	}
	if m, ok := s.mirror(b, w, r, spec.Name); ok {
		writeJSON(w, http.StatusCreated, m)
	}
}

func (s *Server) update(b Backend, w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var in mirrorapi.MirrorSpec
	if !decode(w, r, &in) {
		return
	}
	if in.Name != "" && in.Name != name {
		writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidRequest, fmt.Sprintf("name: %q differs from the mirror in the path, %q; a mirror cannot be renamed", in.Name, name))
		return
	}
	// The coordinator merges the fields given into the mirror's spec.
	if err := b.Update(r.Context(), name, in); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("mirror updated", "mirror", name)
	if m, ok := s.mirror(b, w, r, name); ok {
		writeJSON(w, http.StatusOK, m)
	}
}

func (s *Server) delete(b Backend, w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidRequest, fmt.Sprintf("force: %q is not true or false", v))
			return
		}
	}
	if err := b.Delete(r.Context(), name, force); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("mirror deleted", "mirror", name, "force", force)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) addTopics(b Backend, w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var in mirrorapi.AddTopicsRequest
	if !decode(w, r, &in) {
		return
	}
	req := coordinator.AddRequest{Topics: in.Topics, TopicRegex: in.TopicRegex, Failback: in.Failback, Recreate: in.Recreate}
	if err := b.AddTopicsWith(r.Context(), name, req); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("topics added", "mirror", name, "topics", in.Topics, "topic_regex", in.TopicRegex, "failback", in.Failback, "recreate", in.Recreate)
	if m, ok := s.mirror(b, w, r, name); ok {
		writeJSON(w, http.StatusOK, m)
	}
}

func (s *Server) offsets(b Backend, w http.ResponseWriter, r *http.Request) {
	m, ok := s.mirror(b, w, r, r.PathValue("name"))
	if !ok {
		return
	}
	only := r.URL.Query().Get("topic")
	out := mirrorapi.OffsetsResponse{Mirror: m.Name, Topics: []mirrorapi.TopicOffsets{}}
	for _, t := range m.Topics {
		if only != "" && t.Name != only {
			continue
		}
		to := mirrorapi.TopicOffsets{Name: t.Name, Partitions: []mirrorapi.PartitionOffsets{}}
		for _, p := range t.Partitions {
			to.Partitions = append(to.Partitions, mirrorapi.PartitionOffsets{
				Partition: p.Partition, LastMirroredOffset: p.LastMirrored, SourceOffset: p.SourceOffset, SourceOffsetAt: p.SourceOffsetAt,
				DestinationOffset: p.DestinationOffset, Lag: p.Lag, State: p.State,
			})
		}
		out.Topics = append(out.Topics, to)
	}
	if only != "" && len(out.Topics) == 0 {
		writeError(w, http.StatusNotFound, mirrorapi.CodeUnknownTopic, fmt.Sprintf("topic: mirror %q has no topic %q", m.Name, only))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) pauseTopics(b Backend, w http.ResponseWriter, r *http.Request) {
	s.lifecycle(b, w, r, "pause", topicsOnly("pause", b.PauseTopics))
}

func (s *Server) resumeTopics(b Backend, w http.ResponseWriter, r *http.Request) {
	s.lifecycle(b, w, r, "resume", topicsOnly("resume", b.ResumeTopics))
}

// topicsOnly adapts an operation that takes topics only, refusing recreate.
func topicsOnly(verb string, op func(context.Context, string, []string) error) func(context.Context, string, mirrorapi.TopicsRequest) error {
	return func(ctx context.Context, name string, in mirrorapi.TopicsRequest) error {
		if in.Recreate {
			return &coordinator.InvalidSpecError{Err: fmt.Errorf("recreate: applies to recover only, not to %s", verb)}
		}
		return op(ctx, name, in.Topics)
	}
}

func (s *Server) recoverTopics(b Backend, w http.ResponseWriter, r *http.Request) {
	s.lifecycle(b, w, r, "recover", func(ctx context.Context, name string, in mirrorapi.TopicsRequest) error {
		return b.RecoverTopicsWith(ctx, name, in.Topics, in.Recreate)
	})
}

func (s *Server) stopTopics(b Backend, w http.ResponseWriter, r *http.Request) {
	var in mirrorapi.StopTopicsRequest
	if !decode(w, r, &in) || !checkTopics(w, in.Topics, "stop") {
		return
	}
	switch in.Mode {
	case mirrorapi.StopModeFailover, mirrorapi.StopModePromote:
	case "":
		writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidRequest, `mode: missing; give "failover" (stop at once, the source reachable or not) or "promote" (wait until the destination has everything the source acknowledged)`)
		return
	default:
		writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidRequest, fmt.Sprintf(`mode: %q is not "failover" or "promote"`, in.Mode))
		return
	}
	name := r.PathValue("name")
	if err := b.StopTopics(r.Context(), name, in.Topics, coordinator.StopMode(in.Mode)); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("topics stopping", "mirror", name, "topics", in.Topics, "mode", in.Mode)
	if m, ok := s.mirror(b, w, r, name); ok {
		writeJSON(w, http.StatusAccepted, m)
	}
}

// lifecycle serves pause, resume and recover: the operation is accepted
// (202) and describe shows its progress.
func (s *Server) lifecycle(b Backend, w http.ResponseWriter, r *http.Request, verb string, op func(context.Context, string, mirrorapi.TopicsRequest) error) {
	var in mirrorapi.TopicsRequest
	if !decode(w, r, &in) || !checkTopics(w, in.Topics, verb) {
		return
	}
	name := r.PathValue("name")
	if err := op(r.Context(), name, in); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("topics "+verb, "mirror", name, "topics", in.Topics)
	if m, ok := s.mirror(b, w, r, name); ok {
		writeJSON(w, http.StatusAccepted, m)
	}
}

func (s *Server) getThrottle(b Backend, w http.ResponseWriter, r *http.Request) {
	t, err := b.Throttle(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t.Normalized())
}

// putThrottle sets or replaces the throttle: the body is the whole throttle
// (a PUT, so a repeated call is harmless).
func (s *Server) putThrottle(b Backend, w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var in mirrorapi.Throttle
	if !decode(w, r, &in) {
		return
	}
	if err := b.SetThrottle(r.Context(), name, in); err != nil {
		s.fail(w, err)
		return
	}
	t, err := b.Throttle(name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t.Normalized())
}

// deleteThrottle lifts the throttle; lifting none is not an error, so that a
// retried call succeeds.
func (s *Server) deleteThrottle(b Backend, w http.ResponseWriter, r *http.Request) {
	if err := b.RemoveThrottle(r.Context(), r.PathValue("name")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkTopics refuses an empty or malformed topic list.
func checkTopics(w http.ResponseWriter, topics []string, verb string) bool {
	if len(topics) == 0 {
		writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidRequest, fmt.Sprintf("topics: give at least one topic to %s", verb))
		return false
	}
	for _, t := range topics {
		if t == "" {
			writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidRequest, "topics: an empty topic name")
			return false
		}
	}
	return true
}

// fail answers with the status and code of a coordinator error.
func (s *Server) fail(w http.ResponseWriter, err error) {
	var invalid *coordinator.InvalidSpecError
	var transition *partition.TransitionError
	switch {
	case errors.As(err, &transition):
		writeError(w, http.StatusConflict, mirrorapi.CodeInvalidStateTransition, err.Error())
	case errors.Is(err, coordinator.ErrFailbackRefused):
		writeError(w, http.StatusConflict, mirrorapi.CodeFailbackRefused, err.Error())
	case errors.Is(err, coordinator.ErrUnknownTopic):
		writeError(w, http.StatusNotFound, mirrorapi.CodeUnknownTopic, err.Error())
	case errors.As(err, &invalid):
		writeError(w, http.StatusBadRequest, mirrorapi.CodeInvalidConfig, err.Error())
	case errors.Is(err, coordinator.ErrThrottleNotFound):
		writeError(w, http.StatusNotFound, mirrorapi.CodeThrottleNotFound, err.Error()+"; set one with PUT")
	case errors.Is(err, coordinator.ErrGathering):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotReady, err.Error())
	case errors.Is(err, coordinator.ErrNotRunHere):
		writeError(w, http.StatusServiceUnavailable, mirrorapi.CodeNotActive, err.Error())
	case errors.Is(err, coordinator.ErrMirrorNotFound):
		writeError(w, http.StatusNotFound, mirrorapi.CodeMirrorNotFound, "name: "+err.Error())
	case errors.Is(err, coordinator.ErrMirrorExists):
		writeError(w, http.StatusConflict, mirrorapi.CodeMirrorAlreadyExists, err.Error())
	case errors.Is(err, coordinator.ErrMirrorHasTopics):
		writeError(w, http.StatusConflict, mirrorapi.CodeMirrorHasTopics, "force: "+err.Error())
	case errors.Is(err, mirrorspec.ErrTopicMirrored):
		writeError(w, http.StatusConflict, mirrorapi.CodeTopicAlreadyMirrored, err.Error())
	default:
		s.log.Error("API request failed", "error", err)
		writeError(w, http.StatusInternalServerError, mirrorapi.CodeInternal, err.Error())
	}
}

// decode reads r's JSON body into v, refusing unknown fields, wrong types,
// trailing data and an empty body with a message naming the field.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("body: more than one JSON value; send one object")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("body: data after the JSON object")
		}
	}
	if err == nil {
		return true
	}
	status := http.StatusBadRequest
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var big *http.MaxBytesError
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF):
		msg = "body: empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "body: the JSON ends too early"
	case errors.As(err, &syn):
		msg = fmt.Sprintf("body: invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		msg = fmt.Sprintf("%s: JSON %s where %s is expected", field, typ.Value, jsonType(typ.Type.Kind().String()))
	case errors.As(err, &big):
		status = http.StatusRequestEntityTooLarge
		msg = fmt.Sprintf("body: larger than %d bytes", big.Limit)
	case strings.HasPrefix(msg, "json: unknown field "):
		msg = strings.TrimPrefix(msg, "json: unknown field ") + ": unknown field; see GET /v1/openapi.json"
	}
	writeError(w, status, mirrorapi.CodeInvalidRequest, msg)
	return false
}

func jsonType(kind string) string {
	switch kind {
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	default:
		return "a number"
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, mirrorapi.Error{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
