package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/netshape"
)

func init() {
	register("dev-cluster", "run a Kafka cluster for tests and demos: embedded (kfake) or Apache Kafka brokers", runDevCluster)
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
	engineName := fs.String("engine", string(devcluster.Embedded), "what runs the cluster: embedded (kfake in this process, with Apache Kafka's produce validation) or kafka (Apache Kafka brokers from the official jars, one JVM each, in KRaft combined mode)")
	kafkaVersion := fs.String("kafka-version", "", "with --engine kafka: the Apache Kafka release, fetched once from Maven Central into the user cache (default $KMIRROR_KAFKA_VERSION, else "+devcluster.DefaultKafkaVersion+")")
	txnVersion := fs.Int("transaction-version", 0, "with --engine kafka on 4.x: format the cluster with this transaction.version (1 classic, 2 KIP-890; default the release's)")
	fetchOnly := fs.Bool("fetch-only", false, "with --engine kafka: fetch the release's jars, print their directory and exit")
	name := fs.String("name", "dev", "cluster id reported in metadata; give each cluster of a demo its own")
	brokers := fs.Int("brokers", 1, "number of brokers")
	port := fs.Int("port", 9092, "first port: brokers listen on 127.0.0.1 ports PORT..PORT+BROKERS-1 (0 picks free ports)")
	dataDir := fs.String("data-dir", "", "keep the cluster's state in this directory across restarts (default: in memory; with --engine kafka a temporary directory, removed on exit, or by the next dev-cluster to start when this one was killed)")
	lenient := fs.Bool("lenient", false, "accept what kfake accepts instead of refusing what Apache Kafka refuses")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn, error or off (kfake's request log is at debug)")
	var saslUsers saslUserFlag
	fs.Var(&saslUsers, "sasl-user", "NAME:PASSWORD of a SASL user (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512); turns SASL on; repeatable")
	acls := fs.Bool("acls", false, "turn the authorizer on: a principal may do only what ACLs allow (super users excepted)")
	var superUsers stringsFlag
	fs.Var(&superUsers, "super-user", "NAME of a --sasl-user that bypasses ACLs, as Kafka's super.users; repeatable")
	withTLS := fs.Bool("tls", false, "brokers listen with TLS only, with a certificate for localhost and 127.0.0.1 signed by a CA made at start (see --tls-ca-out)")
	tlsCAOut := fs.String("tls-ca-out", "", "with --tls: write the CA certificate (PEM) to this file, for clients to trust")
	tlsCert := fs.String("tls-cert", "", "brokers listen with TLS only, presenting this PEM certificate (with --tls-key) instead of a generated one")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	latency := fs.Duration("latency", 0, "one-way delay of every byte between clients and the brokers, as over a wide-area link (a round trip takes twice it; requests in flight overlap); 0: none")
	bandwidth := fs.String("bandwidth", "0", "bytes per second between clients and the brokers in each direction, shared by all connections, such as 100MB or 64MiB (powers of 1000 and of 1024); 0: unlimited")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: dev-cluster takes only flags", fs.Arg(0))
	}

	engine, err := devcluster.ParseEngine(*engineName)
	if err != nil {
		return fmt.Errorf("--engine: %w", err)
	}
	if engine != devcluster.Kafka {
		switch {
		case *kafkaVersion != "":
			return errors.New("--kafka-version applies to --engine kafka only")
		case *txnVersion != 0:
			return errors.New("--transaction-version applies to --engine kafka only")
		case *fetchOnly:
			return errors.New("--fetch-only applies to --engine kafka only")
		}
	}
	if *fetchOnly {
		v := *kafkaVersion
		if v == "" {
			v = os.Getenv("KMIRROR_KAFKA_VERSION")
		}
		if v == "" {
			v = devcluster.DefaultKafkaVersion
		}
		dir, err := devcluster.FetchKafka(ctx, v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, dir)
		return err
	}
	switch {
	case *lenient && engine == devcluster.Kafka:
		return errors.New("--lenient applies to the embedded engine only: Apache Kafka validates what it validates")
	case *txnVersion != 0 && *txnVersion != 1 && *txnVersion != 2:
		return fmt.Errorf("--transaction-version must be 1 or 2, got %d", *txnVersion)
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
	users := make(map[string]bool, len(saslUsers))
	for _, u := range saslUsers {
		if users[u.name] {
			return fmt.Errorf("--sasl-user %q is given twice", u.name)
		}
		users[u.name] = true
	}
	for _, s := range superUsers {
		if !users[s] {
			return fmt.Errorf("--super-user %q is not a --sasl-user; add --sasl-user %s:PASSWORD", s, s)
		}
	}
	switch {
	case (*tlsCert == "") != (*tlsKey == ""):
		return errors.New("--tls-cert and --tls-key: give both, or use --tls for a generated certificate")
	case *tlsCert != "" && *withTLS:
		return errors.New("--tls generates a certificate and --tls-cert gives one: use one of them")
	case *tlsCAOut != "" && !*withTLS:
		return errors.New("--tls-ca-out writes the CA of the certificate --tls generates: add --tls")
	}
	if *latency < 0 {
		return fmt.Errorf("--latency must not be negative, got %s", *latency)
	}
	bytesPerSec, err := netshape.ParseBandwidth(*bandwidth)
	if err != nil {
		return fmt.Errorf("--bandwidth: %w", err)
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level %q is not one of trace, debug, info, warn, error, off", *logLevel)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "dev-cluster", Level: level, Output: stderr})

	opts := []devcluster.Option{
		devcluster.Engine(engine),
		devcluster.Name(*name),
		devcluster.Brokers(*brokers),
		devcluster.FirstPort(*port),
		devcluster.Logger(log),
	}
	if *dataDir != "" {
		opts = append(opts, devcluster.DataDir(*dataDir))
	}
	if *latency > 0 {
		opts = append(opts, devcluster.Latency(*latency))
	}
	if bytesPerSec > 0 {
		opts = append(opts, devcluster.Bandwidth(bytesPerSec))
	}
	if *lenient {
		opts = append(opts, devcluster.Lenient())
	}
	if *kafkaVersion != "" {
		opts = append(opts, devcluster.KafkaVersion(*kafkaVersion))
	}
	if *txnVersion != 0 {
		opts = append(opts, devcluster.TransactionVersion(*txnVersion))
	}
	for _, u := range saslUsers {
		opts = append(opts, devcluster.SASLUser(u.name, u.pass))
	}
	if *acls {
		opts = append(opts, devcluster.ACLs())
	}
	for _, s := range superUsers {
		opts = append(opts, devcluster.SuperUser(s))
	}
	if *withTLS {
		opts = append(opts, devcluster.TLS())
	}
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert and --tls-key: %w", err)
		}
		opts = append(opts, devcluster.TLSCertificate(cert))
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
	if *tlsCAOut != "" {
		if err := os.WriteFile(*tlsCAOut, c.CACertPEM(), 0o644); err != nil {
			return fmt.Errorf("--tls-ca-out: %w", err)
		}
	}

	if _, err := fmt.Fprintf(stdout, "bootstrap: %s\n", c.BootstrapString()); err != nil {
		return fmt.Errorf("writing the bootstrap line: %w", err)
	}
	log.Info("cluster ready", "engine", engine, "kafka_version", c.KafkaVersion(), "name", *name, "brokers", *brokers, "strict", !*lenient, "data_dir", *dataDir,
		"sasl_users", saslUsers.names(), "acls", *acls, "super_users", []string(superUsers), "tls", *withTLS || *tlsCert != "",
		"link", netshape.Shape{Delay: *latency, Bandwidth: bytesPerSec})
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

// saslUserFlag is the repeatable --sasl-user NAME:PASSWORD. The password is
// everything after the first colon, so it may contain colons.
type saslUserFlag []struct{ name, pass string }

func (f *saslUserFlag) String() string { return strings.Join(f.names(), ",") } // never the passwords

func (f *saslUserFlag) names() []string {
	names := make([]string, 0, len(*f))
	for _, u := range *f {
		names = append(names, u.name)
	}
	return names
}

func (f *saslUserFlag) Set(v string) error {
	name, pass, ok := strings.Cut(v, ":")
	switch {
	case !ok:
		return errors.New("want NAME:PASSWORD")
	case name == "":
		return errors.New("the name before the colon must not be empty")
	case pass == "":
		return fmt.Errorf("the password of %q must not be empty", name)
	case name == devcluster.InternalUser:
		return fmt.Errorf("%q is reserved for the cluster's own helpers", name)
	}
	*f = append(*f, struct{ name, pass string }{name, pass})
	return nil
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (f *stringsFlag) String() string { return strings.Join(*f, ",") }

func (f *stringsFlag) Set(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	*f = append(*f, v)
	return nil
}
