package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/internal/devcluster"
)

func init() {
	register("dev-cluster", "run an embedded Kafka cluster (kfake) for tests and demos", runDevCluster)
}

// runDevCluster runs one embedded cluster in the foreground until ctx ends
// (SIGINT/SIGTERM). Scripts wait for the single "bootstrap: ..." line on
// stdout; everything else goes to stderr.
func runDevCluster(ctx context.Context, args []string) error {
	return devCluster(ctx, args, os.Stdout, os.Stderr)
}

func devCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kmirror dev-cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "dev", "cluster id reported in metadata; give each cluster of a demo its own")
	brokers := fs.Int("brokers", 1, "number of brokers")
	port := fs.Int("port", 9092, "first port: brokers listen on 127.0.0.1 ports PORT..PORT+BROKERS-1 (0 picks free ports)")
	dataDir := fs.String("data-dir", "", "keep the cluster's state in this directory across restarts (default: in memory)")
	lenient := fs.Bool("lenient", false, "accept what kfake accepts instead of refusing what Apache Kafka refuses")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn, error or off (kfake's request log is at debug)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: dev-cluster takes only flags", fs.Arg(0))
	}

	switch {
	case *name == "":
		return errors.New("--name must not be empty")
	case *brokers < 1:
		return fmt.Errorf("--brokers must be at least 1, got %d", *brokers)
	case *port < 0 || *port > 65535:
		return fmt.Errorf("--port must be between 0 and 65535, got %d", *port)
	case *port > 0 && *port+*brokers-1 > 65535:
		return fmt.Errorf("--port %d with --brokers %d needs ports up to %d, past 65535; choose a lower --port",
			*port, *brokers, *port+*brokers-1)
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level %q is not one of trace, debug, info, warn, error, off", *logLevel)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "dev-cluster", Level: level, Output: stderr})

	opts := []devcluster.Option{
		devcluster.Name(*name),
		devcluster.Brokers(*brokers),
		devcluster.FirstPort(*port),
		devcluster.Logger(log),
	}
	if *dataDir != "" {
		opts = append(opts, devcluster.DataDir(*dataDir))
	}
	if *lenient {
		opts = append(opts, devcluster.Lenient())
	}
	c, err := devcluster.Start(opts...)
	if err != nil {
		var inUse *devcluster.PortInUseError
		if errors.As(err, &inUse) {
			return fmt.Errorf("--port: port %d is already in use (the brokers need %d..%d); %s",
				inUse.Port, *port, *port+*brokers-1, suggestPort(inUse.Port, *brokers))
		}
		return err
	}
	defer c.Close()

	if _, err := fmt.Fprintf(stdout, "bootstrap: %s\n", c.BootstrapString()); err != nil {
		return fmt.Errorf("writing the bootstrap line: %w", err)
	}
	log.Info("cluster ready", "name", *name, "brokers", *brokers, "strict", !*lenient, "data_dir", *dataDir)
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}

// suggestPort proposes a range starting just past the busy port, or random
// ports when that would run past 65535.
func suggestPort(busy, brokers int) string {
	if next := busy + 1; next+brokers-1 <= 65535 {
		return fmt.Sprintf("try --port %d, or --port 0 for free ports", next)
	}
	return "try --port 0 for free ports"
}
