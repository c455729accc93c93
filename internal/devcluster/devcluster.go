// Package devcluster is the one harness that starts embedded Kafka clusters
// (franz-go's kfake) for kmirror: Go tests use it in-process and
// `kmirror dev-cluster` runs it in the foreground.
//
// kfake speaks the real wire protocol but accepts produce requests that
// Apache Kafka refuses (reference/kfake.md §2, §6). By default a cluster
// started here adds a strict-validation layer that refuses them the way
// Kafka does, with Kafka's error codes and per partition; see strict.go for
// the list and for how it is done. Lenient turns it off.
//
// Faults kfake can already imitate (timeouts that still apply the write,
// NOT_LEADER, delays, leader moves, broker removal) are reached through
// Kfake, which returns the raw kfake cluster.
package devcluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kmirror/kmirror/internal/netshape"
)

// Option configures Start.
type Option interface {
	apply(*config)
}

type option func(*config)

func (o option) apply(c *config) { o(c) }

// HasLogger says whether opts give a Logger (devclustertest logs through the
// test unless one is given).
func HasLogger(opts []Option) bool {
	var probe config
	for _, o := range opts {
		o.apply(&probe)
	}
	return probe.logger != nil
}

type config struct {
	name          string
	brokers       int
	firstPort     int
	dataDir       string
	lenient       bool
	logger        hclog.Logger
	brokerConfigs map[string]string
	kfakeOpts     []kfake.Opt
	saslUsers     []saslUser // auth.go
	acls          bool
	superUsers    []string
	tls           bool             // tls.go
	tlsCert       *tls.Certificate // tls.go
	engine        EngineKind       // kafka.go
	kafkaVersion  string
	txnVersion    int
	seeds         []seedTopics
	latency       time.Duration  // shape.go
	bandwidth     int64          // shape.go
	link          *netshape.Link // shape.go: given by Link, or made by resolveLink
}

// Name sets the cluster id reported in metadata, overriding "dev". Give the
// source and destination clusters of a test different names.
func Name(name string) Option { return option(func(c *config) { c.name = name }) }

// Brokers sets the number of brokers, overriding 1.
func Brokers(n int) Option { return option(func(c *config) { c.brokers = n }) }

// FirstPort makes the brokers listen on 127.0.0.1 ports port, port+1, ...,
// port+N-1. The default, 0, picks free ports at random, which is what
// parallel tests want.
func FirstPort(port int) Option { return option(func(c *config) { c.firstPort = port }) }

// DataDir makes the cluster keep its state in dir and reload it from there on
// the next Start with the same dir. Without it the state lives in memory and
// goes away on Close.
func DataDir(dir string) Option { return option(func(c *config) { c.dataDir = dir }) }

// Lenient turns the strict-validation layer off, leaving kfake's own checks.
func Lenient() Option { return option(func(c *config) { c.lenient = true }) }

// Logger sets where the cluster logs, overriding discarding everything.
// Strict rejections log at info; kfake's own request logs at debug and
// below.
func Logger(l hclog.Logger) Option { return option(func(c *config) { c.logger = l }) }

// BrokerConfigs sets broker-level configs at start (kfake.BrokerConfigs).
// The strict layer reads the ones it uses as defaults for topics that do not
// override them: log.cleanup.policy, message.max.bytes,
// log.message.timestamp.type, log.message.timestamp.before.max.ms,
// log.message.timestamp.after.max.ms and log.segment.bytes. Broker configs
// changed later through AlterConfigs reach kfake but not the strict layer,
// because kfake exposes no way to read them back from inside a request.
func BrokerConfigs(cfgs map[string]string) Option {
	return option(func(c *config) {
		if c.brokerConfigs == nil {
			c.brokerConfigs = make(map[string]string)
		}
		maps.Copy(c.brokerConfigs, cfgs)
	})
}

// KfakeOptions passes options straight to kfake.NewCluster, after the ones
// this package derives from its own options, so they win (for example
// SeedTopics, MaxVersions). For SASL users, ACLs and super users use
// SASLUser, ACLs and SuperUser, which keep the strict layer and the fault
// helpers working.
func KfakeOptions(opts ...kfake.Opt) Option {
	return option(func(c *config) { c.kfakeOpts = append(c.kfakeOpts, opts...) })
}

// PortInUseError reports the port a broker could not listen on because
// something else holds it.
type PortInUseError struct {
	Port int
	Err  error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("port %d is already in use: %v", e.Port, e.Err)
}

func (e *PortInUseError) Unwrap() error { return e.Err }

// Cluster is a running embedded cluster.
type Cluster struct {
	kc        *kfake.Cluster
	name      string
	bootstrap []string
	auth      *internalAuth  // how the helpers authenticate; nil without SASL or ACLs
	clientTLS *tls.Config    // how the helpers connect with TLS (tls.go); nil without
	caPEM     []byte         // the CA of the brokers' certificate (tls.go)
	kafka     *kafkaEngine   // the Kafka engine's brokers (kafka.go); nil on the embedded engine
	link      *netshape.Link // what clients reach the brokers through (shape.go); nil: loopback
}

// Start starts a cluster and returns once every broker listens.
func Start(opts ...Option) (*Cluster, error) {
	cfg := config{name: "dev", brokers: 1}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = hclog.NewNullLogger()
	}
	switch {
	case cfg.name == "":
		return nil, errors.New("devcluster: Name must not be empty")
	case cfg.brokers < 1:
		return nil, fmt.Errorf("devcluster: Brokers must be at least 1, got %d", cfg.brokers)
	case cfg.firstPort < 0 || cfg.firstPort > 65535:
		return nil, fmt.Errorf("devcluster: FirstPort must be between 0 and 65535, got %d", cfg.firstPort)
	case cfg.firstPort > 0 && cfg.firstPort+cfg.brokers-1 > 65535:
		return nil, fmt.Errorf("devcluster: FirstPort %d with %d brokers needs ports up to %d, past 65535",
			cfg.firstPort, cfg.brokers, cfg.firstPort+cfg.brokers-1)
	}
	if err := cfg.validateAuth(); err != nil {
		return nil, err
	}
	link, err := cfg.resolveLink()
	if err != nil {
		return nil, err
	}
	cfg.link = link
	// What clusters killed before they could close left behind
	// (orphans.go).
	if removed, err := sweepOrphans(); err != nil {
		cfg.logger.Warn("could not remove every directory of a killed dev-cluster", "err", err)
	} else if len(removed) > 0 {
		cfg.logger.Info("removed the directories of dev-clusters killed before they could close", "dirs", removed)
	}
	switch cfg.engine {
	case Kafka:
		return startKafka(cfg)
	case "", Embedded:
	default:
		return nil, fmt.Errorf("devcluster: engine %q is not one of %s, %s", cfg.engine, Embedded, Kafka)
	}
	if cfg.kafkaVersion != "" || cfg.txnVersion != 0 {
		return nil, errors.New("devcluster: KafkaVersion and TransactionVersion apply to the Kafka engine only; add Engine(Kafka)")
	}
	authOpts, auth, err := cfg.authOptions()
	if err != nil {
		return nil, err
	}
	serverTLS, clientTLS, caPEM, err := cfg.tlsOptions()
	if err != nil {
		return nil, err
	}

	// kfake accepts connections before NewCluster returns, and the strict
	// controls can only be added after; holding Accept until they are in
	// place keeps a client that is already retrying (a restarted
	// dev-cluster) from slipping a request past them.
	ready := make(chan struct{})
	defer close(ready) // also on failure, so the accept goroutines see their closed listeners
	kopts := []kfake.Opt{
		kfake.ClusterID(cfg.name),
		kfake.NumBrokers(cfg.brokers),
		kfake.WithLogger(kfakeLogger{cfg.logger.Named("kfake")}),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := listen(network, addr)
			if err != nil {
				return nil, err
			}
			if cfg.link != nil {
				ln = cfg.link.Listener(ln)
			}
			if serverTLS != nil {
				ln = tls.NewListener(ln, serverTLS)
			}
			return gatedListener{compatListener{ln}, ready}, nil
		}),
	}
	if cfg.firstPort > 0 {
		ports := make([]int, cfg.brokers)
		for i := range ports {
			ports[i] = cfg.firstPort + i
		}
		kopts = append(kopts, kfake.Ports(ports...))
	}
	if cfg.dataDir != "" {
		kopts = append(kopts, kfake.DataDir(cfg.dataDir))
	}
	if len(cfg.brokerConfigs) > 0 {
		kopts = append(kopts, kfake.BrokerConfigs(cfg.brokerConfigs))
	}
	for _, st := range cfg.seeds {
		kopts = append(kopts, kfake.SeedTopics(st.partitions, st.topics...))
	}
	kopts = append(kopts, authOpts...)
	kopts = append(kopts, cfg.kfakeOpts...)

	kc, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("devcluster: starting cluster %q: %w", cfg.name, err)
	}
	c := &Cluster{
		kc:        kc,
		name:      cfg.name,
		bootstrap: kc.ListenAddrs(), // read now: ListenAddrs blocks forever once the cluster is closed
		auth:      auth,
		clientTLS: clientTLS,
		caPEM:     caPEM,
		link:      cfg.link,
	}
	if !cfg.lenient {
		s := &strictValidator{
			kc:     kc,
			log:    cfg.logger.Named("strict"),
			broker: maps.Clone(cfg.brokerConfigs),
			now:    time.Now,
		}
		s.install()
		installFetchCut(kc)
		if !cfg.acls {
			installSecurityDisabled(kc)
		}
	}
	cfg.logger.Debug("cluster started", "name", cfg.name, "bootstrap", c.BootstrapString(), "strict", !cfg.lenient, "tls", cfg.tls,
		"auth", cfg.describeAuth(), "link", cfg.describeLink())
	return c, nil
}

// listen is net.Listen that names the port when it is taken, so that callers
// (the dev-cluster command) can say which one and suggest another.
func listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p) // kfake formats addr itself, so it parses
		return nil, &PortInUseError{Port: port, Err: err}
	}
	return nil, err
}

// gatedListener holds Accept until ready is closed.
type gatedListener struct {
	net.Listener
	ready <-chan struct{}
}

func (l gatedListener) Accept() (net.Conn, error) {
	<-l.ready
	return l.Listener.Accept()
}

// Name returns the cluster id.
func (c *Cluster) Name() string { return c.name }

// Bootstrap returns the brokers' addresses as they were at Start. Brokers
// added later with Kfake().AddNode are not included.
func (c *Cluster) Bootstrap() []string { return append([]string(nil), c.bootstrap...) }

// BootstrapString returns Bootstrap joined by commas, the form Kafka clients
// and the dev-cluster command print: "127.0.0.1:p1,127.0.0.1:p2".
func (c *Cluster) BootstrapString() string { return strings.Join(c.bootstrap, ",") }

// Kfake returns the underlying kfake cluster (nil on the Kafka engine), for faults (Fault, Control,
// SleepControl), leader moves (MoveTopicPartition), broker churn
// (RemoveNode, AddNode) and log maintenance (Compact, ApplyRetention).
//
// How these meet the strict layer: its controls are added at Start, so they
// see every Produce and DeleteRecords request before controls a test adds,
// and they answer a request themselves only when Kafka refuses it as a whole.
// A Fault a test installs is checked before the strict layer's per-partition
// refusals, so its code is the one the client gets; a refused batch is still
// never appended, even under a fault that imitates a timeout after the
// append. The Go helpers kfake runs outside the request path
// (Cluster.DeleteRecords, CreateTopic) are not checked.
func (c *Cluster) Kfake() *kfake.Cluster { return c.kc }

// Close stops the cluster; with DataDir it first saves the state. It is safe
// to call more than once.
func (c *Cluster) Close() {
	if c.kafka != nil {
		c.kafka.close()
		return
	}
	c.kc.Close()
}

// kfakeLogger adapts hclog to kfake's logger. kfake logs every request at
// its info level, so its levels move one step down: kfake info is hclog
// debug and kfake debug is hclog trace, keeping an info-level dev-cluster
// readable.
type kfakeLogger struct{ l hclog.Logger }

func (k kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	var (
		hl      hclog.Level
		enabled bool // checked first: formatting every request is not free
	)
	switch level {
	case kfake.LogLevelError:
		hl, enabled = hclog.Error, k.l.IsError()
	case kfake.LogLevelWarn:
		hl, enabled = hclog.Warn, k.l.IsWarn()
	case kfake.LogLevelInfo:
		hl, enabled = hclog.Debug, k.l.IsDebug()
	case kfake.LogLevelDebug:
		hl, enabled = hclog.Trace, k.l.IsTrace()
	}
	if enabled {
		k.l.Log(hl, fmt.Sprintf(msg, args...))
	}
}
