package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/metrics"
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
		cfg.Destination = &config.Cluster{BootstrapServers: strings.Split(*dstBootstrap, ",")}
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
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.Destination == nil || len(cfg.Destination.BootstrapServers) == 0 {
		return errors.New("no destination cluster: pass --destination-bootstrap HOST:PORT or add a destination block to --config")
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name: "kmirror", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogFormat == "json", Output: os.Stderr,
	})

	// Metrics read the coordinator once it exists; until then only the
	// fetch, Go and process series.
	collector := metrics.NewCollector()
	metricsHandler := metrics.Handler(metrics.Registry(collector))
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
	// the state topic is loaded; the other routes answer 503 until then.
	var srv *api.Server
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
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w; choose a free address with --listen", cfg.Listen, err)
		}
		srv = api.New(api.Options{Tokens: tokens, Logger: log.Named("api"), Metrics: metricsHandler})
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		if len(tokens) == 0 {
			log.Warn("API listening without authentication (loopback only); give --token-file to require a bearer token", "address", ln.Addr().String())
		} else {
			log.Info("API listening", "address", ln.Addr().String(), "tokens", len(tokens))
		}
	}

	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	co, err := coordinator.New(startCtx, coordinator.Config{
		Destination:     []kgo.Opt{kgo.SeedBrokers(cfg.Destination.BootstrapServers...)},
		StateTopic:      cfg.StateTopic,
		BufferBytes:     cfg.BufferBytes,
		RefreshInterval: cfg.RefreshInterval(),
		// A promote fences source writes with a DENY WRITE ACL
		// (DESIGN §4).
		SourceFence: coordinator.ACLSourceFence{},
		Logger:      log,
	})
	if err != nil {
		return err
	}
	defer co.Close()
	for _, m := range cfg.Mirrors {
		if err := co.Apply(startCtx, m.Spec()); err != nil {
			return fmt.Errorf("applying mirror %q from the config: %w", m.Name, err)
		}
	}
	if srv != nil {
		srv.SetBackend(co)
	}
	collector.SetSource(co)
	log.Info("agent running", "destination", strings.Join(cfg.Destination.BootstrapServers, ","), "state_topic", cfg.StateTopic, "mirrors", len(co.Mirrors()))
	return co.Run(ctx)
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
