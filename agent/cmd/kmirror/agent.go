package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/kafkaconn"
	"github.com/kmirror/kmirror/agent/lease"
	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

func init() {
	register("agent", "run the mirroring agent", runAgent)
}

func runAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror agent", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "agent configuration file (HCL)")
	dstBootstrap := fs.String("destination-bootstrap", "", "destination cluster HOST:PORT,... (overrides the config file)")
	listen := fs.String("listen", "", "HTTP API address, such as 127.0.0.1:8080 (overrides the config file)")
	logLevel := fs.String("log-level", "", "trace, debug, info, warn or error (overrides the config file)")
	metricsListen := fs.String("metrics-listen", "", "address serving only GET /metrics (Prometheus) without authentication, such as 0.0.0.0:9464 (overrides metrics_listen in the config file); the API address serves /metrics too, behind the bearer token")
	tokenFile := fs.String("token-file", "", "file of API bearer tokens, one a line (overrides token_file in the config file); without it the API listens on loopback only")
	agentID := fs.String("agent-id", "", "this agent's name in the group (its static member id: keep it across restarts), describe and logs (overrides agent_id in the config file; default HOSTNAME-PID)")
	fillers := fs.String("fillers", "", "how invisible destination offsets are written: auto, coordinator or markers (overrides fillers in the config file; default auto)")
	leaseDuration := fs.String("lease-duration", "", "removed with the writer lease: the agent says what to set instead")
	coordination := fs.String("coordination", "", "group (the default: the agents of the destination and state topic divide the mirrors) or single (this agent alone, no group) (overrides coordination in the config file)")
	apiAdvertiseURL := fs.String("api-advertise-url", "", "with coordination = \"group\": where the other agents reach this agent's API, such as http://10.0.0.5:8080 (env KMIRROR_API_ADVERTISE_URL; overrides api_advertise_url)")
	secretKeyFile := fs.String("secret-key-file", "", "file with the AES-256 key (64 hex digits, as openssl rand -hex 32 prints, or base64) that encrypts literal secrets of mirror sources in the state topic (env KMIRROR_SECRET_KEY_FILE; overrides secret_key_file)")
	tlsCertFile := fs.String("tls-cert-file", "", "PEM certificate of the API, to serve HTTPS (env KMIRROR_TLS_CERT_FILE; overrides tls_cert_file)")
	tlsKeyFile := fs.String("tls-key-file", "", "PEM private key of --tls-cert-file (env KMIRROR_TLS_KEY_FILE; overrides tls_key_file)")
	clientCAFile := fs.String("client-ca-file", "", "PEM CA: API callers must present a client certificate it signed, except on /healthz and /readyz (env KMIRROR_CLIENT_CA_FILE; overrides client_ca_file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := &config.File{}
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	if *dstBootstrap != "" {
		if cfg.Destination == nil {
			cfg.Destination = &mirrorspec.Source{}
		}
		// The config file's TLS and SASL settings stay.
		cfg.Destination.BootstrapServers = strings.Split(*dstBootstrap, ",")
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *logLevel != "" {
		cfg.LogLevel = *logLevel
	}
	if *tokenFile != "" {
		cfg.TokenFile = *tokenFile
	}
	if *metricsListen != "" {
		cfg.MetricsListen = *metricsListen
	}
	if *agentID != "" {
		cfg.AgentID = *agentID
	}
	if *leaseDuration != "" {
		cfg.LeaseDuration = *leaseDuration // refused by Check, saying what to set
	}
	if *coordination != "" {
		cfg.Coordination = *coordination
	}
	if *fillers != "" {
		cfg.Fillers = *fillers
	}
	// Flags win over the environment, which wins over the config file.
	for _, o := range []struct {
		flag, env string
		dst       *string
	}{
		{*secretKeyFile, "KMIRROR_SECRET_KEY_FILE", &cfg.SecretKeyFile},
		{*tlsCertFile, "KMIRROR_TLS_CERT_FILE", &cfg.TLSCertFile},
		{*tlsKeyFile, "KMIRROR_TLS_KEY_FILE", &cfg.TLSKeyFile},
		{*clientCAFile, "KMIRROR_CLIENT_CA_FILE", &cfg.ClientCAFile},
		{*apiAdvertiseURL, "KMIRROR_API_ADVERTISE_URL", &cfg.APIAdvertiseURL},
	} {
		if v := cmp.Or(o.flag, os.Getenv(o.env)); v != "" {
			*o.dst = v
		}
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	limitMemory(cfg.BufferBytes)
	var box *secrets.Box
	if cfg.SecretKeyFile != "" {
		var err error
		if box, err = secrets.LoadKeyFile(cfg.SecretKeyFile); err != nil {
			return fmt.Errorf("secret_key_file: %w", err)
		}
	}
	if cfg.Destination == nil || len(cfg.Destination.BootstrapServers) == 0 {
		return errors.New("no destination cluster: pass --destination-bootstrap HOST:PORT or add a destination block to --config")
	}
	// Secrets of the destination are resolved now: a reference that
	// does not resolve stops start-up, naming the field.
	dstOpts, err := kafkaconn.Options("destination", *cfg.Destination, nil)
	if err != nil {
		return fmt.Errorf("connecting to the destination: %w", err)
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name: "kmirror", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogFormat == "json", Output: os.Stderr,
	})

	// Metrics read the coordinator once it exists; until then only the
	// fetch, Go and process series.
	collector := metrics.NewCollector()
	registry := metrics.Registry(collector)
	metricsHandler := metrics.Handler(registry)
	if cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("listen %q: %w; choose a free address with --metrics-listen", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metricsHandler)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		log.Info("metrics listening (GET /metrics, no authentication)", "address", ln.Addr().String())
	}

	// The API listens first, so that /healthz answers and /readyz says when
	// the state topic is loaded (and whether this agent is the active one);
	// the other routes answer 503 until then.
	var srv *api.Server
	advertise := cfg.APIAdvertiseURL
	if cfg.Listen != "" {
		var tokens []string
		if cfg.TokenFile != "" {
			var err error
			if tokens, err = readTokens(cfg.TokenFile); err != nil {
				return err
			}
		} else if !isLoopback(cfg.Listen) {
			return fmt.Errorf("--listen %q is not a loopback address and no --token-file is given: give --token-file FILE (or token_file in the config) so that API callers must authenticate, or listen on 127.0.0.1", cfg.Listen)
		}
		var tlsCfg *tls.Config
		if cfg.TLSCertFile != "" {
			var err error
			if tlsCfg, err = api.ServerTLS(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.ClientCAFile); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w; choose a free address with --listen", cfg.Listen, err)
		}
		if tlsCfg != nil {
			ln = tls.NewListener(ln, tlsCfg)
		}
		srv = api.New(api.Options{Tokens: tokens, Logger: log.Named("api"), Metrics: metricsHandler, RequireClientCert: cfg.ClientCAFile != "", AgentID: idOf(cfg)})
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		if cfg.APIAdvertiseURL == "" {
			scheme := "http://"
			if tlsCfg != nil {
				scheme = "https://"
			}
			if host, _, _ := net.SplitHostPort(cfg.Listen); host != "" && !net.ParseIP(host).IsUnspecified() {
				advertise = scheme + ln.Addr().String()
			} else if cfg.Coordination == config.CoordinationGroup {
				// Listening on every address (a container): the
				// other agents reach this one at its own address.
				if ip := hostAddress(); ip != nil {
					_, port, _ := net.SplitHostPort(ln.Addr().String())
					advertise = scheme + net.JoinHostPort(ip.String(), port)
					log.Info("advertising the API to the other agents at this host's address; set api_advertise_url if they reach it elsewhere", "api", advertise)
				}
			}
		}
		if len(tokens) == 0 {
			log.Warn("API listening without authentication (loopback only); give --token-file to require a bearer token", "address", ln.Addr().String(), "tls", tlsCfg != nil)
		} else {
			log.Info("API listening", "address", ln.Addr().String(), "tokens", len(tokens), "tls", tlsCfg != nil, "client_certificates", cfg.ClientCAFile != "")
		}
	}

	if srv == nil {
		srv = api.New(api.Options{Logger: log.Named("api")}) // no listener: nobody calls it
	}
	run := &agentRun{cfg: cfg, dstOpts: dstOpts, box: box, log: log, srv: srv, collector: collector, registry: registry}
	if cfg.Coordination == config.CoordinationGroup {
		return run.group(ctx, advertise)
	}
	return run.single(ctx)
}

// single runs the agent alone (coordination = "single"): no group, every
// mirror here, writing at once after a restart (a late write of the dead
// process it replaces is deduplicated or refused, DESIGN §3). Nothing
// guards against a second agent on the same destination and state topic:
// two that create a mirror together each write it with a producer of their
// own, and shift offsets (TestWireWatchSeesTwoWriters). It refuses to start
// beside a group.
func (r *agentRun) single(ctx context.Context) error {
	id := idOf(r.cfg)
	if _, err := r.waitLeaseAgents(ctx, id); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting
		}
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := checkNoGroup(startCtx, r.dstOpts, r.cfg.StateTopic, r.log); err != nil {
		return err
	}
	r.srv.SetAgentStatus(func() mirrorapi.AgentStatus {
		return r.withFillers(mirrorapi.AgentStatus{AgentID: id, Role: mirrorapi.RoleActive, Coordination: config.CoordinationSingle})
	})
	r.log.Warn(`running alone (coordination = "single"): no other agent may use this destination and state topic`, "agent_id", id)
	return r.term(ctx)
}

// hostAddress is the first address of an interface that is up and not
// loopback (IPv4 first), nil when there is none.
func hostAddress() net.IP {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var v6 net.IP
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || !n.IP.IsGlobalUnicast() {
				continue
			}
			if n.IP.To4() != nil {
				return n.IP
			}
			if v6 == nil {
				v6 = n.IP
			}
		}
	}
	return v6
}

// idOf is the agent's id: agent_id, or HOSTNAME-PID.
func idOf(cfg *config.File) string {
	if cfg.AgentID != "" {
		return cfg.AgentID
	}
	return membership.DefaultAgentID()
}

// group runs the agent as a member of its destination's group of agents
// (coordination = "group"): it runs the mirrors the group gives it, and its
// API forwards calls about the others to the agents that run them.
func (r *agentRun) group(ctx context.Context, advertise string) error {
	id := idOf(r.cfg)
	if advertise == "" && r.cfg.Listen != "" {
		return fmt.Errorf("api_advertise_url: with coordination = \"group\" and listen %q (no host), and no address of this host found to advertise, give the URL other agents reach this agent's API at, such as \"http://10.0.0.5:8080\"", r.cfg.Listen)
	}
	var co atomic.Pointer[coordinator.Coordinator]
	var m *membership.Member
	for m == nil {
		dead, err := r.waitLeaseAgents(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting
			}
			return err
		}
		joined, err := membership.Join(membership.Config{
			// One group per state topic: the agents that share one.
			Destination: r.dstOpts, Group: groupID(r.cfg.StateTopic), AgentID: id, SessionTimeout: r.cfg.SessionTimeout(), API: advertise,
			Items: func() []membership.Item {
				if c := co.Load(); c != nil {
					return c.Items()
				}
				return nil
			},
			Logger: r.log.Named("membership"),
		})
		if err != nil {
			return err
		}
		// A lease agent that started while this one joined: each side
		// looks for the other after announcing itself (a lease agent
		// after its claim, see checkNoGroup), so one of them sees the
		// other and steps back before writing.
		if err := r.leaseClaimedSince(ctx, dead, joined); err != nil {
			joined.Close()
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("leaving the group and waiting for the lease agents again", "reason", err)
			continue
		}
		m = joined
	}
	defer m.Close() // after every write of the mirrors returned (term)
	r.owner = m
	r.registry.MustRegister(groupMetrics(id, m)...)
	// Filler markers are the one write the broker cannot refuse late (no
	// sequence, no epoch): a request of them not answered well within the
	// write grace is reset, so that none of it still arrives once the
	// session may have run out. A tenth is left for the reset itself.
	r.markersDeadline = m.WriteGrace() * 9 / 10
	r.onCoordinator = func(c *coordinator.Coordinator) {
		co.Store(c)
		m.Refresh()
	}
	r.srv.SetAgentStatus(func() mirrorapi.AgentStatus {
		v := m.View()
		return r.withFillers(mirrorapi.AgentStatus{AgentID: id, Role: mirrorapi.RoleActive, Coordination: config.CoordinationGroup,
			GroupGeneration: v.Generation, GroupMembers: groupMembers(v)})
	})
	r.log.Info("agents' group", "agent_id", id, "api", advertise, "session_timeout", r.cfg.SessionTimeout())
	return r.term(ctx)
}

// waitLeaseAgents keeps this agent from writing beside the agents of the
// writer lease (earlier releases) on the same state topic, which is how a
// state topic moves from lease agents to this release without a gap: start
// the new agents, then stop the lease agents. While a lease agent holds the
// lease, this agent waits: /healthz answers, /readyz and the /v1 calls
// answer 503 saying what it waits for. It goes on once the lease is
// released (the last lease agent stopped cleanly) or its holder stopped
// renewing it and it ran out (the holder died). It returns the epoch it
// waited out that way, 0 when the lease was released or never claimed.
func (r *agentRun) waitLeaseAgents(ctx context.Context, id string) (dead int64, err error) {
	l, err := r.readLease(ctx, "")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	st := l.Status()
	if st.Holder == "" {
		return 0, nil
	}
	why := func() string {
		now := l.Status()
		return fmt.Sprintf(`this agent (%s, coordination = %q) waits for the agents of the writer lease of state topic %q (an earlier release) to stop: %s holds the lease (epoch %d, renewed %v ago). It starts once the lease is released or runs out`,
			id, r.cfg.Coordination, r.cfg.StateTopic, now.Holder, now.Epoch, now.SinceRenewal.Round(time.Millisecond))
	}
	r.srv.SetStandby(why)
	r.srv.SetAgentStatus(func() mirrorapi.AgentStatus {
		now := l.Status()
		return mirrorapi.AgentStatus{AgentID: id, Role: mirrorapi.RoleStandby, Coordination: r.cfg.Coordination,
			LeaseHolder: now.Holder, LeaseEpoch: now.Epoch, LeaseDurationMs: now.Duration.Milliseconds()}
	})
	r.log.Warn("waiting for the agents of the writer lease (an earlier release) on this state topic to stop (stop them to move their mirrors to this agent)", "holder", st.Holder, "epoch", st.Epoch, "lease_duration", st.Duration)
	holder := st.Holder
	for {
		// Woken by the next lease record, or when the holder's lease
		// (twice, plus its requests' timeout) has run out without one.
		changed := l.Changed()
		now := l.Status()
		runOut := 2*now.Duration + lease.DefaultRequestTimeout
		switch {
		case now.Holder == "":
			r.log.Info("the writer lease was released: starting", "epoch", now.Epoch)
			return 0, nil
		case now.SinceRenewal > runOut:
			r.log.Warn("the writer lease's holder stopped renewing it without releasing it: starting", "holder", now.Holder, "epoch", now.Epoch, "since_renewal", now.SinceRenewal)
			return now.Epoch, nil
		case now.Holder != holder:
			r.log.Info("the writer lease moved to another lease agent: still waiting", "holder", now.Holder, "epoch", now.Epoch)
			holder = now.Holder
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-changed:
		case <-time.After(runOut - now.SinceRenewal + time.Millisecond):
		}
	}
}

// leaseClaimedSince, once m has its first generation, says (as an error)
// whether an agent claimed the writer lease after waitLeaseAgents let this
// one go on: a lease that is held, at another epoch than the dead one it
// waited out. It runs before the coordinator, so before any write.
func (r *agentRun) leaseClaimedSince(ctx context.Context, dead int64, m *membership.Member) error {
	// Until the first generation, or a while: the check runs either way,
	// and nothing is written without a grant.
	joined := time.After(r.cfg.SessionTimeout() + 30*time.Second)
wait:
	for m.View().Generation <= 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-joined:
			break wait
		case <-m.Changed():
		}
	}
	l, err := r.readLease(ctx, " after joining the group")
	if err != nil {
		return err
	}
	defer l.Close()
	if st := l.Status(); st.Holder != "" && st.Epoch != dead {
		return fmt.Errorf("agent %s claimed the writer lease of state topic %q (epoch %d) while this agent joined the group", st.Holder, r.cfg.StateTopic, st.Epoch)
	}
	return nil
}

// readLease opens the writer lease of the state topic, which agents of
// earlier releases kept; when says at which step, for the error.
func (r *agentRun) readLease(ctx context.Context, when string) (*lease.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	l, err := lease.Open(ctx, lease.Config{Destination: r.dstOpts, Topic: r.cfg.StateTopic, Logger: r.log.Named("lease")})
	if err != nil {
		return nil, fmt.Errorf("reading the writer lease of state topic %q%s: %w", r.cfg.StateTopic, when, err)
	}
	return l, nil
}

// checkNoGroup keeps an agent of coordination = "single" from writing
// beside the agents of a group on the same state topic. It is a guard, not a requirement: when the
// destination cannot say (no group coordinator yet on a new cluster, no
// DESCRIBE right on the group), the agent starts, saying so.
func checkNoGroup(ctx context.Context, dstOpts []kgo.Opt, stateTopic string, log hclog.Logger) error {
	cl, err := kgo.NewClient(dstOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	group := groupID(stateTopic)
	deadline := time.Now().Add(5 * time.Second)
	for {
		groups, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
		if err == nil {
			err = groups.Error()
		}
		if err == nil {
			for _, g := range groups {
				if len(g.Members) > 0 {
					return fmt.Errorf(`state topic %q has %d agent(s) with coordination = "group" (group %s): this agent (coordination = "single") would write beside them. Give every agent of this state topic the same coordination`,
						stateTopic, len(g.Members), g.Group)
				}
			}
			return nil
		}
		if !kerr.IsRetriable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			log.Warn(`could not check that no agent of coordination = "group" uses this state topic; starting`, "group", group, "error", err)
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// groupID is the group of the agents that share stateTopic.
func groupID(stateTopic string) string { return "kmirror-agents." + stateTopic }

// groupMembers lists the group's agents for /v1/agent.
func groupMembers(v membership.View) []mirrorapi.GroupMember {
	var out []mirrorapi.GroupMember
	homes, parts := map[string][]string{}, map[string][]string{}
	for item, agent := range v.Owners {
		if name, ok := strings.CutPrefix(item, "mirror/"); ok {
			homes[agent] = append(homes[agent], name)
		} else if p, ok := strings.CutPrefix(item, "partition/"); ok {
			parts[agent] = append(parts[agent], p)
		}
	}
	for _, mm := range v.Members {
		ms := append([]string{}, homes[mm.Agent]...)
		slices.Sort(ms)
		ps := parts[mm.Agent]
		slices.Sort(ps)
		out = append(out, mirrorapi.GroupMember{AgentID: mm.Agent, API: mm.API, Mirrors: ms, Partitions: ps, Weight: mm.Weight})
	}
	return out
}

// agentRun runs the agent's coordinator, alone or in the agents' group.
type agentRun struct {
	cfg       *config.File
	dstOpts   []kgo.Opt    // the destination's connection (TLS, SASL)
	box       *secrets.Box // encrypts literal secrets of mirror sources; nil: none accepted
	log       hclog.Logger
	srv       *api.Server
	collector *metrics.Collector
	registry  *prometheus.Registry // the agent's series (metrics.Registry)
	// fillers is the filler method in use (nil until chosen).
	fillers atomic.Pointer[fillerChoice]
	// owner and onCoordinator are the agents' group and what learns of
	// the coordinator once made (coordination = "group"; nil alone).
	owner         coordinator.Owner
	onCoordinator func(*coordinator.Coordinator)
	// markersDeadline is the writer's (coordinator.Config), in group mode.
	markersDeadline time.Duration
}

// withFillers adds the filler method in use to st.
func (r *agentRun) withFillers(st mirrorapi.AgentStatus) mirrorapi.AgentStatus {
	if f := r.fillers.Load(); f != nil {
		st.Fillers, st.FillersReason = string(f.method), f.why
	}
	return st
}

// term loads the state topic and runs the mirrors until ctx ends. It
// returns once every write has returned; an error only when the agent must
// exit.
func (r *agentRun) term(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	fillers, err := chooseFillers(startCtx, r.cfg.Fillers, r.dstOpts, r.owner != nil)
	if err != nil {
		return err
	}
	r.fillers.Store(&fillers)
	r.log.Info("fillers", "method", fillers.method, "why", fillers.why)
	co, err := coordinator.New(startCtx, coordinator.Config{
		Destination:     r.dstOpts,
		SecretBox:       r.box,
		StateTopic:      r.cfg.StateTopic,
		BufferBytes:     r.cfg.BufferBytes,
		RefreshInterval: r.cfg.RefreshInterval(),
		// A promote fences source writes with a DENY WRITE ACL
		// (DESIGN §4).
		SourceFence:     coordinator.ACLSourceFence{},
		Fillers:         fillers.method,
		Owner:           r.owner,
		MarkersDeadline: r.markersDeadline,
		AgentID:         idOf(r.cfg),
		Logger:          r.log,
	})
	if err != nil {
		return err
	}
	defer co.Close()
	if r.onCoordinator != nil {
		r.onCoordinator(co)
	}
	for _, m := range r.cfg.Mirrors {
		if err := co.Apply(startCtx, m.Spec()); err != nil {
			return fmt.Errorf("applying mirror %q from the config: %w", m.Name, err)
		}
	}
	r.srv.SetBackend(co)
	r.collector.SetSource(co)
	r.log.Info("agent running", "destination", strings.Join(r.cfg.Destination.BootstrapServers, ","), "state_topic", r.cfg.StateTopic, "mirrors", len(co.Mirrors()), "coordination", r.cfg.Coordination)
	return co.Run(ctx)
}

// groupMetrics are the agents' group's series, as this agent sees it: its
// generation, the items (mirror homes and partitions) it runs, and the
// handoffs it made (each stops an item until its writes returned; many of
// them outside joins and leaves mean the group keeps rebalancing).
func groupMetrics(id string, m *membership.Member) []prometheus.Collector {
	labels := prometheus.Labels{"agent_id": id}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "kmirror_group_generation",
			Help:        "The generation of the agents' group this agent was last assigned in; it grows at every rebalance.",
			ConstLabels: labels,
		}, func() float64 { return float64(m.View().Generation) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "kmirror_group_items",
			Help:        "The mirror homes and partitions the agents' group gives this agent now.",
			ConstLabels: labels,
		}, func() float64 { return float64(len(m.View().Items)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "kmirror_group_handoffs_total",
			Help:        "Mirror homes and partitions this agent stopped and handed on to another agent of its group, each once every write of it returned.",
			ConstLabels: labels,
		}, func() float64 { return float64(m.HandedOn()) }),
	}
}

// readTokens reads the API's bearer tokens: one a line, blank lines and
// lines starting with # ignored.
func readTokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	var tokens []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("--token-file %s: a token cannot contain spaces (one token a line)", path)
		}
		tokens = append(tokens, line)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("--token-file %s: no token in it (one token a line)", path)
	}
	return tokens, nil
}

// isLoopback says whether a listen address only accepts local connections.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
