// Package clientoptest holds what the tests of the clientop clients
// (packages javaclient and rdkafka) share: a real Apache Kafka broker to run
// them against, and the checks every client must pass.
package clientoptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kmirror/kmirror/internal/clientop"
)

// The SASL PLAIN user the broker's SASL listener knows.
const (
	SASLUser     = "kmirror-client"
	SASLPassword = "kmirror-client-secret"
)

// Broker is a single-node KRaft Apache Kafka broker (broker and controller
// in one process) listening on 127.0.0.1.
//
// TODO: replace with devcluster's kafka engine
// (devcluster.Start(devcluster.Engine(devcluster.EngineKafka), ...)) once it
// lands; this is the simplest broker that lets the client packages test
// against real Kafka meanwhile.
type Broker struct {
	// Version is the Kafka release it runs.
	Version string
	// Libs is the directory of that release's jars.
	Libs string
	// Bootstrap is its PLAINTEXT listener.
	Bootstrap string
	// SASLBootstrap is its SASL_PLAINTEXT listener (PLAIN, user SASLUser
	// with SASLPassword; no authorizer).
	SASLBootstrap string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartBroker formats a fresh log directory and starts a broker of Kafka
// release version (its jars fetched by tools/install-kafka.sh), waiting
// until it answers metadata requests.
func StartBroker(ctx context.Context, version string) (*Broker, error) {
	libs, err := clientop.RunTool(ctx, "install-kafka.sh", version)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kmirror-kafka-"+version+"-")
	if err != nil {
		return nil, err
	}
	b := &Broker{Version: version, Libs: libs, dir: dir, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			b.Stop()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	plainAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	saslAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	ctrlAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	props := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.voters=1@" + ctrlAddr,
		"listeners=PLAINTEXT://" + plainAddr + ",SASL_PLAINTEXT://" + saslAddr + ",CONTROLLER://" + ctrlAddr,
		"advertised.listeners=PLAINTEXT://" + plainAddr + ",SASL_PLAINTEXT://" + saslAddr,
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"sasl.enabled.mechanisms=PLAIN",
		`listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_` +
			SASLUser + `="` + SASLPassword + `";`,
		"log.dirs=" + filepath.Join(dir, "data"),
		"num.partitions=1",
		"auto.create.topics.enable=false",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=3",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=3",
		"group.initial.rebalance.delay.ms=0",
		"",
	}, "\n")
	conf := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(conf, []byte(props), 0o644); err != nil {
		return nil, err
	}
	cp := filepath.Join(libs, "*")
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	format := exec.CommandContext(ctx, "java", "-cp", cp, "kafka.tools.StorageTool", "format",
		"-t", base64.RawURLEncoding.EncodeToString(id), "-c", conf)
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("formatting the Kafka %s log dir: %w\n%s", version, err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "broker.log"))
	if err != nil {
		return nil, err
	}
	b.cmd = exec.Command("java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp, "kafka.Kafka", conf)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = b.cmd.Wait(); logf.Close(); close(b.done) }()
	b.Bootstrap, b.SASLBootstrap = plainAddr, saslAddr
	if err := b.waitReady(ctx, 90*time.Second); err != nil {
		return nil, fmt.Errorf("Kafka %s broker: %w; log tail:\n%s", version, err, b.LogTail())
	}
	ok = true
	return b, nil
}

func (b *Broker) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-b.done:
			return fmt.Errorf("exited early")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		last = b.ping(ctx, b.Bootstrap, nil)
		if last == nil {
			last = b.ping(ctx, b.SASLBootstrap, []kgo.Opt{kgo.SASL(plain.Auth{User: SASLUser, Pass: SASLPassword}.AsMechanism())})
		}
		if last == nil {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", limit, last)
}

func (b *Broker) ping(ctx context.Context, addr string, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cl.Ping(pctx)
}

// LogTail returns the end of the broker's log.
func (b *Broker) LogTail() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "broker.log"))
	if len(out) > 4096 {
		out = out[len(out)-4096:]
	}
	return string(bytes.TrimSpace(out))
}

// Stop kills the broker and removes its log directory.
func (b *Broker) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	_ = os.RemoveAll(b.dir)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Brokers starts brokers on demand, one per Kafka release, shared by the
// tests of one package; its zero value is ready, and TestMain calls StopAll
// after the tests.
type Brokers struct {
	mu sync.Mutex
	m  map[string]*brokerOnce
}

type brokerOnce struct {
	once sync.Once
	b    *Broker
	err  error
}

// Get returns the package's broker of Kafka release version, starting it on
// first use; it fails t if the broker cannot start.
func (bs *Brokers) Get(t testing.TB, version string) *Broker {
	t.Helper()
	bs.mu.Lock()
	if bs.m == nil {
		bs.m = map[string]*brokerOnce{}
	}
	o := bs.m[version]
	if o == nil {
		o = &brokerOnce{}
		bs.m[version] = o
	}
	bs.mu.Unlock()
	o.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		o.b, o.err = StartBroker(ctx, version)
		if o.err == nil {
			t.Logf("Kafka %s broker at %s (SASL at %s) ready in %v", version, o.b.Bootstrap, o.b.SASLBootstrap, time.Since(start).Round(time.Millisecond))
		}
	})
	if o.err != nil {
		t.Fatalf("starting a Kafka %s broker: %v", version, o.err)
	}
	return o.b
}

// StopAll stops every broker started.
func (bs *Brokers) StopAll() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, o := range bs.m {
		if o.b != nil {
			o.b.Stop()
		}
	}
}
