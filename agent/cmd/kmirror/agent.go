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
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/kafkaconn"
	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/agent/secrets"
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
	secretKeyFile := fs.String("secret-key-file", "", "file with the AES-256 key (64 hex digits, `openssl rand -hex 32`) that encrypts literal secrets of mirror sources in the state topic (env KMIRROR_SECRET_KEY_FILE; overrides secret_key_file)")
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
			cfg.Destination = &config.Cluster{}
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
	// Flags win over the environment, which wins over the config file.
	for _, o := range []struct {
		flag, env string
		dst       *string
	}{
		{*secretKeyFile, "KMIRROR_SECRET_KEY_FILE", &cfg.SecretKeyFile},
		{*tlsCertFile, "KMIRROR_TLS_CERT_FILE", &cfg.TLSCertFile},
		{*tlsKeyFile, "KMIRROR_TLS_KEY_FILE", &cfg.TLSKeyFile},
		{*clientCAFile, "KMIRROR_CLIENT_CA_FILE", &cfg.ClientCAFile},
	} {
		if v := cmp.Or(o.flag, os.Getenv(o.env)); v != "" {
			*o.dst = v
		}
	}
	if err := cfg.Check(); err != nil {
		return err
	}
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
	dstOpts, err := kafkaconn.Options("destination", cfg.Destination.Conn(), nil)
	if err != nil {
		return fmt.Errorf("connecting to the destination: %w", err)
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
		srv = api.New(api.Options{Tokens: tokens, Logger: log.Named("api"), Metrics: metricsHandler, RequireClientCert: cfg.ClientCAFile != ""})
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		if len(tokens) == 0 {
			log.Warn("API listening without authentication (loopback only); give --token-file to require a bearer token", "address", ln.Addr().String(), "tls", tlsCfg != nil)
		} else {
			log.Info("API listening", "address", ln.Addr().String(), "tokens", len(tokens), "tls", tlsCfg != nil, "client_certificates", cfg.ClientCAFile != "")
		}
	}

	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	co, err := coordinator.New(startCtx, coordinator.Config{
		Destination:     dstOpts,
		SecretBox:       box,
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
