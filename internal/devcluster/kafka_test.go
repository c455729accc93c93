package devcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka engine's tests start real Apache Kafka brokers (the jars are
// fetched once into the user cache) and check each option the way a client
// sees it.

func startKafkaT(t *testing.T, opts ...Option) *Cluster {
	t.Helper()
	return startT(t, append([]Option{Engine(Kafka)}, opts...)...)
}

func consumeAll(t *testing.T, c *Cluster, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, c, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	ctx := testCtx(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(out), n, topic, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func TestKafkaEngine(t *testing.T) {
	c := startKafkaT(t, Name("src"), SeedTopics(3, "seeded"))
	if c.Engine() != Kafka || c.KafkaVersion() != DefaultKafkaVersion {
		t.Fatalf("Engine() %s, KafkaVersion() %q; want kafka %s", c.Engine(), c.KafkaVersion(), DefaultKafkaVersion)
	}
	if c.Kfake() != nil {
		t.Fatal("Kfake() is not nil on the Kafka engine")
	}
	adm := kadm.NewClient(newClient(t, c))
	md, err := adm.Metadata(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if md.Cluster != KafkaClusterID("src") || len(md.Brokers) != 1 {
		t.Fatalf("metadata: cluster %q with %d brokers, want %q with 1", md.Cluster, len(md.Brokers), KafkaClusterID("src"))
	}
	if d, ok := md.Topics["seeded"]; !ok || len(d.Partitions) != 3 {
		t.Fatalf("seed topic: %+v", md.Topics["seeded"])
	}
	cl := newClient(t, c, kgo.DefaultProduceTopic("seeded"))
	for i := range 10 {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Partition: int32(i % 3), Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	if got := consumeAll(t, c, "seeded", 10); len(got) != 10 {
		t.Fatalf("read back %d records, want 10", len(got))
	}
	// No broker auto-creates topics: a typo must not make one.
	if err := newClient(t, c, kgo.RecordRetries(1), kgo.RecordDeliveryTimeout(3*time.Second)).
		ProduceSync(testCtx(t), &kgo.Record{Topic: "no-such-topic", Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("producing to a missing topic succeeded: auto.create.topics.enable is on")
	}
	// ACL requests without an authorizer: SECURITY_DISABLED, as on the
	// embedded engine's strict layer.
	rs, err := adm.DescribeACLs(testCtx(t), kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).
		Allow().Deny().AllowHosts().DenyHosts().Operations())
	if err == nil && len(rs) > 0 {
		err = rs[0].Err
	}
	if !errors.Is(err, kerr.SecurityDisabled) {
		t.Fatalf("DescribeACLs without authorizer: %v, want SECURITY_DISABLED", err)
	}

	// Close leaves no JVM behind and removes the throwaway directory.
	root := c.kafka.root
	pid := c.kafka.nodes[0].cmd.Process.Pid
	c.Close()
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data directory %s is still there after Close: %v", root, err)
	}
	if out, _ := exec.Command("ps", "-o", "pid=", "-p", strconv.Itoa(pid)).Output(); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("broker JVM %d still runs after Close", pid)
	}
}

func TestKafkaEngineRefusesKfakeOnlyOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"lenient", []Option{Engine(Kafka), Lenient()}, "Lenient applies to the embedded engine only"},
		{"kfake options", []Option{Engine(Kafka), KfakeOptions()}, ""},
		{"bad version", []Option{Engine(Kafka), KafkaVersion("4.x")}, `kafka version "4.x" is not a release`},
		{"txn version on 3.9", []Option{Engine(Kafka), KafkaVersion("3.9.2"), TransactionVersion(2)}, "has no transaction.version feature"},
		{"kafka version on embedded", []Option{KafkaVersion("4.4.0")}, "apply to the Kafka engine only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(tc.opts...)
			if tc.want == "" {
				// KfakeOptions() with no options is empty: nothing
				// to refuse, and the cluster starts.
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("Start succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestKafkaEngineSecured: SASL users with PLAIN and both SCRAMs, the
// StandardAuthorizer, super users, and TLS on the same listener.
func TestKafkaEngineSecured(t *testing.T) {
	c := startKafkaT(t, SASLUser("admin", "admin-secret"), SASLUser("alice", "alice-secret"),
		SuperUser("admin"), ACLs(), TLS())
	tlsOpt := kgo.DialTLSConfig(c.ClientTLS())
	for name, opt := range map[string]kgo.Opt{
		"PLAIN":         asPlain("admin", "admin-secret"),
		"SCRAM-SHA-256": as256("admin", "admin-secret"),
		"SCRAM-SHA-512": as512("admin", "admin-secret"),
	} {
		adm := kadm.NewClient(newClient(t, c, opt, tlsOpt))
		topic := "made-by-" + strings.ToLower(name)
		if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, topic); err != nil {
			t.Fatalf("admin (%s): create topic: %v", name, err)
		}
	}
	alice := newClient(t, c, as512("alice", "alice-secret"), tlsOpt, kgo.RecordRetries(1))
	if err := produceOne(t, alice, "made-by-plain"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice without ACLs: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	adm := kadm.NewClient(newClient(t, c, asPlain("admin", "admin-secret"), tlsOpt))
	rs, err := adm.CreateACLs(testCtx(t), kadm.NewACLs().Topics("made-by-plain").ResourcePatternType(kadm.ACLPatternLiteral).
		Allow("User:alice").AllowHosts("*").Operations(kadm.OpWrite, kadm.OpDescribe))
	if err != nil || rs[0].Err != nil {
		t.Fatalf("creating an ACL: %v %+v", err, rs)
	}
	deadline := time.Now().Add(20 * time.Second) // ACLs reach the broker through the metadata log
	for {
		err := produceOne(t, alice, "made-by-plain")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice with ALLOW WRITE: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Without TLS or with a wrong password nothing gets through.
	wrong := newClient(t, c, asPlain("alice", "nope"), tlsOpt, kgo.RetryTimeout(2*time.Second))
	if err := wrong.Ping(testCtx(t)); err == nil {
		t.Fatal("a wrong password authenticated")
	}
	plain := newClient(t, c, asPlain("alice", "alice-secret"), kgo.DialTimeout(time.Second), kgo.RetryTimeout(2*time.Second))
	if err := plain.Ping(testCtx(t)); err == nil {
		t.Fatal("a plaintext client reached a TLS listener")
	}
	if c.CACertPEM() == nil {
		t.Fatal("no CA certificate for a TLS cluster")
	}
}

// TestKafkaEngineBrokerLoss: three brokers; a topic with three replicas
// stays writable with one broker killed, and the broker rejoins.
func TestKafkaEngineBrokerLoss(t *testing.T) {
	c := startKafkaT(t, Brokers(3), SeedTopics(3, "t"))
	md, err := kadm.NewClient(newClient(t, c)).Metadata(testCtx(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md.Topics["t"].Partitions {
		if len(p.Replicas) != 3 {
			t.Fatalf("partition %d has replicas %v, want 3", p.Partition, p.Replicas)
		}
	}
	if err := c.KillBroker(2); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c, kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(3) {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Partition: p, Value: []byte("after loss")}).FirstErr(); err != nil {
			t.Fatalf("produce to p%d with broker 2 down: %v", p, err)
		}
	}
	if err := c.RestartBroker(2); err != nil {
		t.Fatal(err)
	}
	if got := consumeAll(t, c, "t", 3); len(got) != 3 {
		t.Fatalf("read %d records", len(got))
	}
	if err := c.KillBroker(4); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("KillBroker(4): %v", err)
	}
}

// TestKafkaEngineDataDir: a cluster started again on its DataDir keeps its
// records and its ports.
func TestKafkaEngineDataDir(t *testing.T) {
	dir := t.TempDir()
	c := startKafkaT(t, DataDir(dir), SeedTopics(1, "kept"))
	boot := c.BootstrapString()
	if err := newClient(t, c).ProduceSync(testCtx(t), &kgo.Record{Topic: "kept", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := os.Stat(filepath.Join(dir, "broker-1", "data", "meta.properties")); err != nil {
		t.Fatalf("DataDir lost the broker's storage: %v", err)
	}
	c2 := startKafkaT(t, DataDir(dir))
	if c2.BootstrapString() != boot {
		t.Fatalf("restarted on %s, was %s", c2.BootstrapString(), boot)
	}
	if got := consumeAll(t, c2, "kept", 1); string(got[0].Value) != "v" {
		t.Fatalf("after restart: %q", got[0].Value)
	}
}

// TestKafkaEngineVersions: the 3.9 line (classic transactions only) and a
// 4.x cluster formatted with transaction.version=1 both start, and report
// the feature level they run.
func TestKafkaEngineVersions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want int16 // transaction.version finalized; -1: the feature does not exist
	}{
		{"4.x default", nil, 2},
		{"4.x tv1", []Option{TransactionVersion(1)}, 1},
		{"3.9", []Option{KafkaVersion("3.9.2")}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startKafkaT(t, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := c.TransactionVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("transaction.version %d, want %d", got, tc.want)
			}
		})
	}
}

// TestKafkaPortTakenBeforeBind takes a controller port the engine chose in
// the moment before its broker binds it, as another process on a busy
// machine did once (CI): the cluster starts on other ports.
func TestKafkaPortTakenBeforeBind(t *testing.T) {
	var taken net.Listener
	portsLaidOut = func(e *kafkaEngine, attempt int) {
		if attempt != 1 {
			return
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(e.nodes[0].controller)))
		if err != nil {
			t.Errorf("taking the chosen controller port: %v", err)
			return
		}
		taken = ln
	}
	t.Cleanup(func() {
		portsLaidOut = nil
		if taken != nil {
			taken.Close()
		}
	})
	c := startKafkaT(t, Name("clash"))
	if taken == nil {
		t.Fatal("the test did not take a port")
	}
	busy := taken.Addr().(*net.TCPAddr).Port
	for _, n := range c.kafka.nodes {
		if n.controller == busy || n.port == busy || n.internal == busy {
			t.Fatalf("a broker listens on port %d, which the test holds", busy)
		}
	}
	if _, err := c.registeredBrokers(); err != nil {
		t.Fatalf("the cluster started on other ports does not answer: %v", err)
	}
}

func TestQuietPorts(t *testing.T) {
	lo, hi := quietPortRange()
	for range 20 {
		ln, err := listenQuietPort()
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p < lo || p >= hi {
			t.Fatalf("port %d is outside [%d, %d), below the ephemeral range", p, lo, hi)
		}
	}
}
