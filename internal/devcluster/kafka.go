package devcluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/certs"
	"github.com/kmirror/kmirror/internal/netshape"
)

// The real engine: Apache Kafka brokers from the official jars, each a JVM
// in KRaft combined mode (broker and controller in one process, every node a
// voter), on 127.0.0.1. It takes the same options as the embedded engine
// where they mean something on Kafka (Brokers, FirstPort, DataDir,
// BrokerConfigs, SASLUser, ACLs with the StandardAuthorizer, SuperUser, TLS,
// SeedTopics); what exists only on kfake (KfakeOptions, Lenient, the fault
// helpers) is refused or unavailable.
//
// Each node has three listeners: EXTERNAL, the one clients use and
// Bootstrap returns (PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL as the
// options say); INTERNAL for replication; CONTROLLER for the quorum. With
// SASL or ACLs on, INTERNAL and CONTROLLER authenticate with PLAIN as
// InternalUser, a super user, so that brokers are authorized under any ACLs
// a test sets.

// EngineKind names what runs a dev cluster.
type EngineKind string

const (
	// Embedded is franz-go's kfake in this process, with the strict layer.
	Embedded EngineKind = "embedded"
	// Kafka is Apache Kafka brokers, one JVM per broker.
	Kafka EngineKind = "kafka"
)

// ParseEngine returns the engine named s ("" is Embedded).
func ParseEngine(s string) (EngineKind, error) {
	switch EngineKind(s) {
	case "", Embedded:
		return Embedded, nil
	case Kafka:
		return Kafka, nil
	}
	return "", fmt.Errorf("engine %q is not one of %s, %s", s, Embedded, Kafka)
}

// EngineFromEnv returns the engine KMIRROR_ENGINE names, Embedded when it is
// unset; the demo and the benchmarks choose their clusters with it.
func EngineFromEnv() (EngineKind, error) {
	e, err := ParseEngine(os.Getenv("KMIRROR_ENGINE"))
	if err != nil {
		return "", fmt.Errorf("KMIRROR_ENGINE: %w", err)
	}
	return e, nil
}

// Engine chooses what runs the cluster, overriding Embedded.
func Engine(e EngineKind) Option { return option(func(c *config) { c.engine = e }) }

// KafkaVersion chooses the Apache Kafka release of the Kafka engine,
// overriding KMIRROR_KAFKA_VERSION and then DefaultKafkaVersion. Its jars
// are fetched once (FetchKafka).
func KafkaVersion(v string) Option { return option(func(c *config) { c.kafkaVersion = v }) }

// TransactionVersion formats a 4.x Kafka cluster with this
// transaction.version feature level (1: the classic protocol, 2: KIP-890's),
// overriding the release's default (2 on 4.x). 3.x has only the classic one.
func TransactionVersion(v int) Option { return option(func(c *config) { c.txnVersion = v }) }

// SeedTopics creates topics with partitions partitions once the cluster is
// up, on either engine.
func SeedTopics(partitions int32, topics ...string) Option {
	return option(func(c *config) {
		c.seeds = append(c.seeds, seedTopics{partitions, append([]string(nil), topics...)})
	})
}

type seedTopics struct {
	partitions int32
	topics     []string
}

// kafkaEngine is the brokers of one cluster.
type kafkaEngine struct {
	version  string
	libs     string
	root     string
	tempRoot bool   // root is ours to remove at Close
	external string // EXTERNAL's security protocol
	nodes    []*kafkaNode
	stopped  sync.Once
	java     []string       // JVM options
	link     *netshape.Link // clients reach each broker through a proxy across it (shape.go); nil: directly
}

type kafkaNode struct {
	id         int
	dir        string
	props      string // server.properties path
	port       int    // EXTERNAL as advertised: the port clients connect to
	listen     int    // EXTERNAL as the broker binds it: port, or behind the shaping proxy on port another one
	internal   int
	controller int
	proxy      *netshape.Proxy // on port, forwarding to listen; nil without a link

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// kafkaStartTimeout bounds how long a cluster may take to come up: a broker
// JVM starts in 3 to 5 s on an idle 2-core machine, but took over 90 s to
// register when some 30 other JVMs and test binaries shared the cores. A
// deadline against a hang, not a speed check.
const kafkaStartTimeout = 5 * time.Minute

func startKafka(cfg config) (*Cluster, error) {
	switch {
	case len(cfg.kfakeOpts) > 0:
		return nil, errors.New("devcluster: KfakeOptions apply to the embedded engine only; use SeedTopics and BrokerConfigs on the Kafka engine")
	case cfg.lenient:
		return nil, errors.New("devcluster: Lenient applies to the embedded engine only: Apache Kafka validates what it validates")
	}
	version := cfg.kafkaVersion
	if version == "" {
		version = os.Getenv("KMIRROR_KAFKA_VERSION")
	}
	if version == "" {
		version = DefaultKafkaVersion
	}
	if cfg.txnVersion != 0 && strings.HasPrefix(version, "3.") {
		return nil, fmt.Errorf("devcluster: TransactionVersion(%d): Kafka %s has no transaction.version feature (it runs the classic protocol)", cfg.txnVersion, version)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, errors.New("devcluster: the Kafka engine needs java on PATH (17 or newer): run `make deps`, or apt-get install openjdk-17-jre-headless")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	libs, err := FetchKafka(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}

	e := &kafkaEngine{version: version, libs: libs, root: cfg.dataDir, link: cfg.link,
		java: []string{"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:MaxDirectMemorySize=256m",
			"-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true"}}
	// For profiling the brokers, e.g. with Java Flight Recorder:
	// KMIRROR_KAFKA_JVM_OPTS="-XX:StartFlightRecording=settings=profile",
	// then `jcmd PID JFR.dump filename=F` while the broker runs (a broker
	// that is killed writes no recording).
	e.java = append(e.java, strings.Fields(os.Getenv("KMIRROR_KAFKA_JVM_OPTS"))...)
	if e.root == "" {
		if e.root, err = os.MkdirTemp("", tempRootPrefix+cfg.name+"-"); err != nil {
			return nil, fmt.Errorf("devcluster: %w", err)
		}
		if err := addOwner(e.root, os.Getpid()); err != nil {
			_ = os.RemoveAll(e.root)
			return nil, err
		}
		e.tempRoot = true
	} else if e.root, err = filepath.Abs(e.root); err != nil {
		return nil, fmt.Errorf("devcluster: DataDir: %w", err)
	}
	c := &Cluster{name: cfg.name, kafka: e, link: cfg.link}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()

	var auth *internalAuth
	if len(cfg.saslUsers) > 0 || cfg.acls {
		if auth, err = loadInternalAuth(e.root); err != nil {
			return nil, err
		}
	}
	var tlsPEM *pemPair
	if cfg.tls {
		if tlsPEM, c.clientTLS, c.caPEM, err = cfg.kafkaTLS(); err != nil {
			return nil, err
		}
	}
	c.auth = auth

	// Ports are chosen before the JVMs bind them, seconds later; another
	// process on the machine may bind one in between. A start that failed on
	// a port it chose itself is tried again on other ports.
	for attempt := 1; ; attempt++ {
		chosen, err := e.layout(cfg)
		if err != nil {
			return nil, err
		}
		if portsLaidOut != nil {
			portsLaidOut(e, attempt)
		}
		err = c.startNodes(cfg, auth, tlsPEM)
		if err == nil {
			break
		}
		var inUse *PortInUseError
		if attempt == portAttempts || !chosen || !(e.portClash() || errors.As(err, &inUse)) {
			return nil, err
		}
		cfg.logger.Debug("kafka cluster: a port was taken before its broker bound it; starting again on other ports",
			"name", cfg.name, "attempt", attempt, "err", err)
		if err := e.reset(); err != nil {
			return nil, err
		}
	}
	if err := c.seedTopics(cfg.seeds); err != nil {
		return nil, err
	}
	ok = true
	cfg.logger.Debug("kafka cluster started", "name", cfg.name, "version", version, "bootstrap", c.BootstrapString(),
		"root", e.root, "tls", cfg.tls, "auth", cfg.describeAuth(), "link", cfg.describeLink())
	return c, nil
}

// portsLaidOut, when set by a test, runs after each layout, before any JVM
// binds its ports.
var portsLaidOut func(e *kafkaEngine, attempt int)

// portAttempts bounds the starts of a cluster whose chosen ports were
// taken by another process before its brokers bound them.
const portAttempts = 3

// startNodes writes each node's configuration, formats its storage and
// starts it, then waits until every broker is registered.
func (c *Cluster) startNodes(cfg config, auth *internalAuth, tlsPEM *pemPair) error {
	e := c.kafka
	c.bootstrap = c.bootstrap[:0]
	for _, n := range e.nodes {
		c.bootstrap = append(c.bootstrap, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)))
	}
	for _, n := range e.nodes {
		if err := e.writeNodeConfig(cfg, n, auth, tlsPEM); err != nil {
			return err
		}
	}
	if err := e.format(cfg, auth); err != nil {
		return err
	}
	if err := e.startProxies(); err != nil {
		return err
	}
	for _, n := range e.nodes {
		if err := e.startNode(n, cfg); err != nil {
			return err
		}
	}
	return c.waitKafkaReady()
}

// portClash says whether a node failed to bind a listener port.
func (e *kafkaEngine) portClash() bool {
	for _, n := range e.nodes {
		if strings.Contains(n.logTail(), "Address already in use") {
			return true
		}
	}
	return false
}

// reset stops every node and removes what layout and format wrote, so that
// a fresh cluster can be laid out again on other ports.
func (e *kafkaEngine) reset() error {
	e.stopProxies()
	for _, n := range e.nodes {
		n.stop(true, 0)
		if err := os.RemoveAll(n.dir); err != nil {
			return fmt.Errorf("devcluster: %w", err)
		}
	}
	e.nodes = nil
	if err := os.Remove(filepath.Join(e.root, "ports.txt")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("devcluster: %w", err)
	}
	return nil
}

// layout picks each node's ports and directory. Ports are kept in
// ports.txt under DataDir, so a restarted cluster listens where it did.
// chosen says whether layout picked every port itself (none from FirstPort
// or ports.txt), so that a start may be tried again on others.
func (e *kafkaEngine) layout(cfg config) (chosen bool, err error) {
	saved := map[int][]int{} // node id: port, internal, controller and, behind a link, listen
	portsFile := filepath.Join(e.root, "ports.txt")
	if b, err := os.ReadFile(portsFile); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var ports []int
			for _, f := range strings.Fields(line) {
				p, err := strconv.Atoi(f)
				if err != nil {
					break
				}
				ports = append(ports, p)
			}
			if len(ports) >= 4 {
				saved[ports[0]] = ports[1:]
			}
		}
	}
	var held []net.Listener // kept open until every port is chosen, so no two are the same
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	chosen = cfg.firstPort == 0 && len(saved) == 0
	for i := range cfg.brokers {
		n := &kafkaNode{id: i + 1, dir: filepath.Join(e.root, fmt.Sprintf("broker-%d", i+1))}
		n.props = filepath.Join(n.dir, "server.properties")
		s, ok := saved[n.id]
		switch {
		case cfg.firstPort > 0:
			n.port = cfg.firstPort + i
		case ok:
			n.port = s[0]
		}
		if ok {
			n.internal, n.controller = s[1], s[2]
			if e.link != nil && len(s) > 3 {
				n.listen = s[3]
			}
		}
		if n.port != 0 {
			if err := portFree(n.port); err != nil {
				return false, err
			}
		}
		ports := []*int{&n.port, &n.internal, &n.controller}
		if e.link != nil {
			ports = append(ports, &n.listen)
		}
		for _, p := range ports {
			if *p == 0 {
				ln, err := listenQuietPort()
				if err != nil {
					return false, fmt.Errorf("devcluster: picking a port: %w", err)
				}
				held = append(held, ln)
				*p = ln.Addr().(*net.TCPAddr).Port
			}
		}
		if e.link == nil {
			n.listen = n.port
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return false, fmt.Errorf("devcluster: %w", err)
		}
		e.nodes = append(e.nodes, n)
	}
	return chosen, e.writePorts()
}

// writePorts keeps the nodes' ports in ports.txt (see layout).
func (e *kafkaEngine) writePorts() error {
	var lines []string
	for _, n := range e.nodes {
		line := fmt.Sprintf("%d %d %d %d", n.id, n.port, n.internal, n.controller)
		if e.link != nil {
			line += fmt.Sprintf(" %d", n.listen)
		}
		lines = append(lines, line)
	}
	if err := os.WriteFile(filepath.Join(e.root, "ports.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	return nil
}

// listenQuietPort listens on a free loopback port below the kernel's
// ephemeral range, falling back to any free port. A port picked from the
// ephemeral range (port 0) is free only until the broker JVM binds it, and
// every outgoing connection on the machine draws its local port from that
// range: under a full test run one did take a controller's port (CI).
func listenQuietPort() (net.Listener, error) {
	lo, hi := quietPortRange()
	if hi-lo >= 1000 {
		for range 50 {
			port := lo + rand.IntN(hi-lo)
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return ln, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// FreeAddr returns 127.0.0.1:PORT with a port that was free a moment ago,
// drawn as the Kafka engine draws its brokers' ports (listenQuietPort), for
// a process that binds it later (an agent started by a test).
func FreeAddr() (string, error) {
	ln, err := listenQuietPort()
	if err != nil {
		return "", fmt.Errorf("devcluster: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// quietPortRange is the range listenQuietPort draws from: the 12,000 ports
// below the ephemeral range (ip_local_port_range), never below 10000.
func quietPortRange() (lo, hi int) {
	eph := 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				eph = v
			}
		}
	}
	return max(10000, eph-12000), eph
}

// portFree reports a client port something else holds as PortInUseError,
// as the embedded engine does.
func portFree(port int) error {
	ln, err := listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}

// writeNodeConfig writes server.properties and the log configuration of n.
func (e *kafkaEngine) writeNodeConfig(cfg config, n *kafkaNode, auth *internalAuth, tlsPEM *pemPair) error {
	rf := strconv.Itoa(min(cfg.brokers, 3))
	voters := make([]string, len(e.nodes))
	for i, o := range e.nodes {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", o.id, o.controller)
	}
	ext := "PLAINTEXT"
	switch {
	case len(cfg.saslUsers) > 0 && cfg.tls:
		ext = "SASL_SSL"
	case len(cfg.saslUsers) > 0:
		ext = "SASL_PLAINTEXT"
	case cfg.tls:
		ext = "SSL"
	}
	e.external = ext
	inner := "PLAINTEXT"
	if auth != nil {
		inner = "SASL_PLAINTEXT"
	}
	p := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(n.id),
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"listeners":                                        fmt.Sprintf("EXTERNAL://127.0.0.1:%d,INTERNAL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.listen, n.internal, n.controller),
		"advertised.listeners":                             fmt.Sprintf("EXTERNAL://127.0.0.1:%d,INTERNAL://127.0.0.1:%d", n.port, n.internal),
		"listener.security.protocol.map":                   fmt.Sprintf("EXTERNAL:%s,INTERNAL:%s,CONTROLLER:%s", ext, inner, inner),
		"inter.broker.listener.name":                       "INTERNAL",
		"controller.listener.names":                        "CONTROLLER",
		"log.dirs":                                         filepath.Join(n.dir, "data"),
		"num.partitions":                                   "1",
		"default.replication.factor":                       rf,
		"min.insync.replicas":                              "1",
		"offsets.topic.replication.factor":                 rf,
		"offsets.topic.num.partitions":                     "5",
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "5",
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		"auto.create.topics.enable":                        "false",
		"num.network.threads":                              "2",
		"num.io.threads":                                   "4",
		"num.recovery.threads.per.data.dir":                "1",
		"log.cleaner.dedupe.buffer.size":                   strconv.Itoa(16 << 20),
		"controlled.shutdown.enable":                       "true",
		"unclean.leader.election.enable":                   "false",
	}
	if auth != nil {
		plainInternal := fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="%s" user_%s="%s";`,
			InternalUser, auth.pass, InternalUser, auth.pass)
		p["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
		p["sasl.mechanism.controller.protocol"] = "PLAIN"
		p["listener.name.internal.sasl.enabled.mechanisms"] = "PLAIN"
		p["listener.name.controller.sasl.enabled.mechanisms"] = "PLAIN"
		p["listener.name.internal.plain.sasl.jaas.config"] = plainInternal
		p["listener.name.controller.plain.sasl.jaas.config"] = plainInternal
	}
	if len(cfg.saslUsers) > 0 {
		var b strings.Builder
		b.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		fmt.Fprintf(&b, ` user_%s="%s"`, InternalUser, auth.pass)
		for _, u := range cfg.saslUsers {
			fmt.Fprintf(&b, ` user_%s="%s"`, u.name, jaasEscape(u.pass))
		}
		b.WriteString(";")
		p["listener.name.external.sasl.enabled.mechanisms"] = strings.Join(saslMechanisms, ",")
		p["listener.name.external.plain.sasl.jaas.config"] = b.String()
		p["listener.name.external.scram-sha-256.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		p["listener.name.external.scram-sha-512.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	}
	if cfg.acls {
		p["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
		supers := []string{"User:" + InternalUser}
		for _, s := range cfg.superUsers {
			supers = append(supers, "User:"+s)
		}
		p["super.users"] = strings.Join(supers, ";")
	}
	if tlsPEM != nil {
		p["listener.name.external.ssl.keystore.type"] = "PEM"
		p["listener.name.external.ssl.keystore.certificate.chain"] = string(tlsPEM.cert)
		p["listener.name.external.ssl.keystore.key"] = string(tlsPEM.key)
	}
	for k, v := range cfg.brokerConfigs {
		p[k] = v
	}
	var b strings.Builder
	b.WriteString("# written by kmirror dev-cluster (engine kafka); rewritten at every start\n")
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, propEscape(p[k]))
	}
	if err := os.WriteFile(n.props, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("devcluster: writing %s: %w", n.props, err)
	}
	return e.writeLogConfig(cfg, n)
}

// propEscape escapes a value for a Java properties file: backslashes, and
// newlines (a PEM) as \n.
func propEscape(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	return strings.ReplaceAll(v, "\n", `\n`)
}

// jaasEscape escapes a JAAS option value inside double quotes.
func jaasEscape(v string) string {
	return strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `"`, `\"`)
}

// writeLogConfig sends the broker's log to server.log in its directory:
// warnings only, unless the cluster's logger is at debug.
func (e *kafkaEngine) writeLogConfig(cfg config, n *kafkaNode) error {
	level := "WARN"
	if cfg.logger.IsDebug() {
		level = "INFO"
	}
	logFile := filepath.Join(n.dir, "server.log")
	var body string
	if strings.HasPrefix(e.version, "3.") {
		body = fmt.Sprintf(`log4j.rootLogger=%s, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=%s
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%%d] %%p %%m (%%c)%%n
`, level, logFile)
	} else {
		body = fmt.Sprintf(`status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = %s
rootLogger.appenderRef.file.ref = file
`, logFile, level)
	}
	return os.WriteFile(filepath.Join(n.dir, "log4j.properties"), []byte(body), 0o644)
}

func (e *kafkaEngine) classpath() string { return filepath.Join(e.libs, "*") }

func (e *kafkaEngine) logOpt(n *kafkaNode) string {
	f := filepath.Join(n.dir, "log4j.properties")
	if strings.HasPrefix(e.version, "3.") {
		return "-Dlog4j.configuration=file:" + f
	}
	return "-Dlog4j2.configurationFile=" + f
}

// KafkaClusterID is the cluster id the Kafka engine gives a cluster named
// name (Kafka's ids are 22-character UUIDs, so the name cannot be the id as
// on the embedded engine); derived from the name, so that a restart with
// DataDir finds the id it was formatted with.
func KafkaClusterID(name string) string {
	sum := sha256.Sum256([]byte("kmirror dev-cluster " + name))
	sum[0] &= 0x7f // never a leading '-', which tools take for a flag (as Kafka's Uuid.randomUuid avoids)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// format formats each node's storage once (a restarted DataDir cluster
// keeps its logs).
func (e *kafkaEngine) format(cfg config, auth *internalAuth) error {
	errs := make([]error, len(e.nodes))
	var wg sync.WaitGroup
	for i, n := range e.nodes {
		if _, err := os.Stat(filepath.Join(n.dir, "data", "meta.properties")); err == nil {
			continue
		}
		args := append([]string{"-Xmx256m"}, e.logOpt(n), "-cp", e.classpath(),
			"kafka.tools.StorageTool", "format", "-t", KafkaClusterID(cfg.name), "-c", n.props)
		if cfg.txnVersion != 0 {
			args = append(args, "--feature", "transaction.version="+strconv.Itoa(cfg.txnVersion))
		}
		if len(cfg.saslUsers) > 0 {
			args = append(args, "--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", InternalUser, auth.pass),
				"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", InternalUser, auth.pass))
			for _, u := range cfg.saslUsers {
				for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
					args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, u.name, u.pass))
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command("java", args...).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("devcluster: formatting broker %d's storage (java kafka.tools.StorageTool format): %v\n%s", n.id, err, tail(string(out), 15))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// running says whether n's JVM is started and has not exited.
func (n *kafkaNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.aliveLocked()
}

func (n *kafkaNode) aliveLocked() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// startNode starts n's JVM. It is killed with this process (Pdeathsig), so a
// test binary or dev-cluster that dies leaves no broker behind.
func (e *kafkaEngine) startNode(n *kafkaNode, cfg config) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.aliveLocked() {
		return fmt.Errorf("devcluster: broker %d is already running", n.id)
	}
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	args := append(slices.Clone(e.java), e.logOpt(n), "-cp", e.classpath(), "kafka.Kafka", n.props)
	cmd := exec.Command("java", args...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("devcluster: starting broker %d (java kafka.Kafka): %w", n.id, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	done := n.done
	if e.tempRoot {
		// Its directory stays while it runs, even past this process.
		if err := addOwner(e.root, cmd.Process.Pid); err != nil {
			cfg.logger.Warn("kafka cluster: a killed cluster's directory may be removed while this broker still runs", "err", err)
		}
	}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	return nil
}

// stopNode stops n: SIGKILL when kill, else SIGTERM and a controlled
// shutdown, SIGKILL after grace.
func (n *kafkaNode) stop(kill bool, grace time.Duration) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	if !kill {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
			return
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

func (n *kafkaNode) exited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return true
	}
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// logTail is the end of n's log, for errors.
func (n *kafkaNode) logTail() string {
	var parts []string
	for _, f := range []string{"stdout.log", "server.log"} {
		if b, err := os.ReadFile(filepath.Join(n.dir, f)); err == nil && len(b) > 0 {
			parts = append(parts, f+":\n"+tail(string(b), 15))
		}
	}
	return strings.Join(parts, "\n")
}

// adminOpts are the options the Kafka engine's own helpers connect with:
// as InternalUser on INTERNAL when auth is on (EXTERNAL may have no SASL,
// and then its principal is ANONYMOUS), else as any client.
func (c *Cluster) adminOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.RequestRetries(3), kgo.RetryTimeout(30 * time.Second)}
	if c.auth != nil {
		return append(opts, kgo.SeedBrokers(c.internalBootstrap()...), c.auth.opt())
	}
	return append(append(opts, kgo.SeedBrokers(c.bootstrap...)), c.tlsOpt()...)
}

func (c *Cluster) internalBootstrap() []string {
	out := make([]string, len(c.kafka.nodes))
	for i, n := range c.kafka.nodes {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.internal))
	}
	return out
}

// waitKafkaReady waits until every broker is registered and answers, or a
// JVM exits.
func (c *Cluster) waitKafkaReady() error {
	deadline := time.Now().Add(kafkaStartTimeout)
	var (
		last    error
		missing = c.kafka.nodes[0]
	)
	for time.Now().Before(deadline) {
		for _, n := range c.kafka.nodes {
			if n.exited() {
				return fmt.Errorf("devcluster: broker %d (Kafka %s) exited during start; its log ends:\n%s", n.id, c.kafka.version, n.logTail())
			}
		}
		var ids []int32
		if ids, last = c.registeredBrokers(); last == nil {
			if len(ids) == len(c.kafka.nodes) {
				return nil
			}
			last = fmt.Errorf("%d of %d brokers registered (%v)", len(ids), len(c.kafka.nodes), ids)
			for _, n := range c.kafka.nodes {
				if !slices.Contains(ids, int32(n.id)) {
					missing = n
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("devcluster: Kafka %s brokers did not come up within %s (%v); broker %d's log ends:\n%s",
		c.kafka.version, kafkaStartTimeout, last, missing.id, missing.logTail())
}

// registeredBrokers asks the cluster which brokers it has, with a client of
// its own: kgo keeps what it learnt of the brokers, and a broker that
// registered after the first answer would go unseen.
func (c *Cluster) registeredBrokers() ([]int32, error) {
	cl, err := kgo.NewClient(c.adminOpts()...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return nil, err
	}
	return md.Brokers.NodeIDs(), nil
}

// seedTopics creates the SeedTopics topics on the Kafka engine.
func (c *Cluster) seedTopics(seeds []seedTopics) error {
	if len(seeds) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(c.adminOpts()...)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range seeds {
		resp, err := adm.CreateTopics(ctx, s.partitions, -1, nil, s.topics...)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("devcluster: creating seed topics %v: %w", s.topics, err)
		}
	}
	return nil
}

// Engine returns what runs the cluster.
func (c *Cluster) Engine() EngineKind {
	if c.kafka != nil {
		return Kafka
	}
	return Embedded
}

// KafkaVersion returns the Apache Kafka release of a Kafka-engine cluster,
// "" for the embedded engine.
func (c *Cluster) KafkaVersion() string {
	if c.kafka == nil {
		return ""
	}
	return c.kafka.version
}

// TransactionVersion returns the cluster's finalized transaction.version
// feature level (ApiVersions), or -1 when its brokers do not have the
// feature (3.x, and the embedded engine).
func (c *Cluster) TransactionVersion(ctx context.Context) (int16, error) {
	opts := c.adminOpts()
	if c.kafka == nil {
		opts = append([]kgo.Opt{kgo.SeedBrokers(c.bootstrap...)}, c.tlsOpt()...)
		if c.auth != nil {
			opts = append(opts, c.auth.opt())
		}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kmirror-devcluster", "1"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("devcluster: ApiVersions: %w", err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel, nil
		}
	}
	return -1, nil
}

// KillBroker ends broker node (1-based) at once with SIGKILL, as a machine
// loss does. Kafka engine only.
func (c *Cluster) KillBroker(node int) error {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	n.stop(true, 0)
	return nil
}

// RestartBroker starts a broker KillBroker ended, with its logs, and waits
// until it is registered again. Kafka engine only.
func (c *Cluster) RestartBroker(node int) error {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	// A broker started by an earlier call that gave up waiting is left
	// running: waiting for it again is what a retry means.
	if !n.running() {
		if err := c.kafka.startNode(n, config{}); err != nil {
			return err
		}
	}
	return c.waitKafkaReady()
}

// MoveBroker starts a broker KillBroker ended on another client port, as a
// pod restarted with a new address comes back: its old address refuses
// connections, and clients learn the new one only from metadata. port 0
// picks a free port. It waits until the broker is registered again at the
// new address and returns the port. Kafka engine only.
func (c *Cluster) MoveBroker(node, port int) (int, error) {
	n, err := c.node(node)
	if err != nil {
		return 0, err
	}
	if n.running() {
		return 0, fmt.Errorf("devcluster: broker %d is running; KillBroker it before moving it", node)
	}
	if port == 0 {
		ln, err := listenQuietPort()
		if err != nil {
			return 0, fmt.Errorf("devcluster: picking a port: %w", err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	} else if err := portFree(port); err != nil {
		return 0, err
	}
	e := c.kafka
	old := n.port
	if n.proxy != nil {
		ln, err := listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return 0, fmt.Errorf("devcluster: the shaping proxy of broker %d: %w", n.id, err)
		}
		n.proxy.Close()
		n.proxy = e.link.Proxy(ln, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.listen)))
	} else {
		n.listen = port
	}
	n.port = port
	b, err := os.ReadFile(n.props)
	if err != nil {
		return 0, fmt.Errorf("devcluster: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "listeners="):
			lines[i] = fmt.Sprintf("listeners=EXTERNAL://127.0.0.1:%d,INTERNAL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.listen, n.internal, n.controller)
		case strings.HasPrefix(l, "advertised.listeners="):
			lines[i] = fmt.Sprintf("advertised.listeners=EXTERNAL://127.0.0.1:%d,INTERNAL://127.0.0.1:%d", n.port, n.internal)
		}
	}
	if err := os.WriteFile(n.props, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		return 0, fmt.Errorf("devcluster: %w", err)
	}
	if err := e.writePorts(); err != nil {
		return 0, err
	}
	if err := e.startNode(n, config{}); err != nil {
		return 0, err
	}
	if err := c.waitKafkaReady(); err != nil {
		return 0, fmt.Errorf("devcluster: broker %d moved from port %d to %d: %w", node, old, port, err)
	}
	return port, nil
}

// BrokerPort is the client port of broker node (1-based). Kafka engine
// only.
func (c *Cluster) BrokerPort(node int) (int, error) {
	n, err := c.node(node)
	if err != nil {
		return 0, err
	}
	return n.port, nil
}

func (c *Cluster) node(node int) (*kafkaNode, error) {
	if c.kafka == nil {
		return nil, errors.New("devcluster: broker processes exist only on the Kafka engine; use Kfake().RemoveNode on the embedded one")
	}
	if node < 1 || node > len(c.kafka.nodes) {
		return nil, fmt.Errorf("devcluster: broker %d does not exist (1..%d)", node, len(c.kafka.nodes))
	}
	return c.kafka.nodes[node-1], nil
}

// BrokerPIDs returns the process id of every running broker, in node
// order: their CPU time is what a benchmark charges the cluster with. Kafka
// engine only; nil otherwise.
func (c *Cluster) BrokerPIDs() []int {
	if c.kafka == nil {
		return nil
	}
	var pids []int
	for _, n := range c.kafka.nodes {
		n.mu.Lock()
		if n.cmd != nil && n.cmd.Process != nil {
			pids = append(pids, n.cmd.Process.Pid)
		}
		n.mu.Unlock()
	}
	return pids
}

// BrokerLog returns the end of broker node's log (1-based), for a failing
// test's message. Kafka engine only; "" otherwise.
func (c *Cluster) BrokerLog(node int) string {
	n, err := c.node(node)
	if err != nil {
		return ""
	}
	return n.logTail()
}

// closeKafka stops every broker. Brokers of a DataDir cluster shut down
// cleanly (their logs are kept for the next start); a throwaway cluster is
// killed and its directory removed.
func (e *kafkaEngine) close() {
	e.stopped.Do(func() {
		var wg sync.WaitGroup
		for _, n := range e.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.stop(e.tempRoot, 20*time.Second)
			}()
		}
		wg.Wait()
		e.stopProxies()
		if e.tempRoot {
			_ = os.RemoveAll(e.root)
		}
	})
}

// pemPair is a broker certificate and its PKCS#8 key, as Kafka's PEM
// keystore wants them.
type pemPair struct{ cert, key []byte }

// kafkaTLS makes (or converts) the brokers' certificate for a PEM keystore,
// and the client config the helpers connect with.
func (c *config) kafkaTLS() (*pemPair, *tls.Config, []byte, error) {
	var (
		cert     tls.Certificate
		clientTC *tls.Config
		caPEM    []byte
	)
	if c.tlsCert != nil {
		cert = *c.tlsCert
		clientTC = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // own cluster on loopback
	} else {
		ca, err := certs.NewCA("kmirror dev-cluster " + c.name)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("devcluster: %w", err)
		}
		pair, err := ca.Server()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("devcluster: %w", err)
		}
		if cert, err = pair.TLS(); err != nil {
			return nil, nil, nil, fmt.Errorf("devcluster: %w", err)
		}
		clientTC = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		caPEM = ca.CertPEM()
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcluster: converting the TLS key for Kafka's PEM keystore: %w", err)
	}
	var chain []byte
	for _, c := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	return &pemPair{cert: chain, key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}, clientTC, caPEM, nil
}

// loadInternalAuth returns the internal user's password, kept in root so
// that a DataDir cluster started again (whose SCRAM credentials were
// formatted with it) keeps it.
func loadInternalAuth(root string) (*internalAuth, error) {
	f := filepath.Join(root, "internal-password")
	if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
		return &internalAuth{pass: strings.TrimSpace(string(b))}, nil
	}
	ia, err := newInternalAuth()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(f, []byte(ia.pass+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	return ia, nil
}
