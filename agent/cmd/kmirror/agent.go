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
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.Destination == nil || len(cfg.Destination.BootstrapServers) == 0 {
		return errors.New("no destination cluster: pass --destination-bootstrap HOST:PORT or add a destination block to --config")
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name: "kmirror", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogFormat == "json", Output: os.Stderr,
	})

	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	co, err := coordinator.New(startCtx, coordinator.Config{
		Destination:     []kgo.Opt{kgo.SeedBrokers(cfg.Destination.BootstrapServers...)},
		StateTopic:      cfg.StateTopic,
		BufferBytes:     cfg.BufferBytes,
		RefreshInterval: cfg.RefreshInterval(),
		Logger:          log,
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
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w; choose a free address with --listen", cfg.Listen, err)
		}
		srv := &http.Server{Handler: api.Handler(co), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("API listening", "address", ln.Addr().String())
	}
	log.Info("agent running", "destination", strings.Join(cfg.Destination.BootstrapServers, ","), "state_topic", cfg.StateTopic, "mirrors", len(co.Mirrors()))
	return co.Run(ctx)
}
