package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/workload"
)

// The engines the end-to-end tests run on. Real Apache Kafka brokers are
// the reference for every guarantee; the embedded engine (kfake with the
// strict layer) is fast and is where faults kfake can imitate are tested.
//
// A test that holds on both calls forEngines; each engine is a subtest. On
// a Kafka engine the clusters are shared by every test of the package (a
// JVM takes seconds to start and hundreds of MiB to run): they start once,
// at the first test that needs them, and each test gets topics, a state
// topic and group names of its own (pair.name), so that tests cannot see
// each other's data. TestMain stops them.

// engine is one cluster setup the tests run on.
type engine struct {
	name       string
	kind       devcluster.EngineKind
	version    string // Kafka release; "" on the embedded engine
	txnVersion int    // transaction.version the cluster is formatted with; 0: the release's default
}

// realEngines are the Kafka setups `make test` runs: the newest 4.x with
// transaction protocol v2 (its default) for every test, and with classic
// the newest 3.9, which has only the classic protocol (v1), for the tests
// whose subject is the transaction protocol (forTxnEngines). `make
// test-matrix` sets KMIRROR_E2E_KAFKA to every release Maven Central serves,
// and then every test runs on each of them.
func realEngines(classic bool) []engine {
	spec := os.Getenv("KMIRROR_E2E_KAFKA")
	if spec == "" {
		spec = devcluster.DefaultKafkaVersion
		if classic {
			spec += ",3.9.2"
		}
	}
	var out []engine
	for _, v := range strings.Split(spec, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		e := engine{name: "kafka-" + v, kind: devcluster.Kafka, version: v}
		if base, ok := strings.CutSuffix(v, "-tv1"); ok {
			e.version, e.txnVersion = base, 1
		}
		out = append(out, e)
	}
	return out
}

var embedded = engine{name: "embedded", kind: devcluster.Embedded}

// testEngines are the embedded engine and realEngines(classic), narrowed by
// KMIRROR_E2E_ENGINES (a comma-separated list of names, such as "embedded"
// or "kafka-4.4.0") for a quick local run.
func testEngines(classic bool) []engine {
	all := append([]engine{embedded}, realEngines(classic)...)
	only := os.Getenv("KMIRROR_E2E_ENGINES")
	if only == "" {
		return all
	}
	var out []engine
	for _, e := range all {
		if slices.Contains(strings.Split(only, ","), e.name) {
			out = append(out, e)
		}
	}
	return out
}

// kafkaEngines are the Kafka engines among testEngines(classic).
func kafkaEngines(classic bool) []engine {
	var out []engine
	for _, e := range testEngines(classic) {
		if e.kind == devcluster.Kafka {
			out = append(out, e)
		}
	}
	return out
}

// forEngines runs fn as a subtest on the embedded engine and on the newest
// Kafka release.
func forEngines(t *testing.T, fn func(t *testing.T, e engine)) {
	t.Helper()
	run(t, testEngines(false), fn)
}

// forTxnEngines is forEngines with the classic transaction protocol's
// cluster too (Kafka 3.9).
func forTxnEngines(t *testing.T, fn func(t *testing.T, e engine)) {
	t.Helper()
	run(t, testEngines(true), fn)
}

// forKafkaEngines runs fn on the Kafka engines only, with the classic
// protocol's cluster when classic: for what only a real broker does (the
// log cleaner, expiry of producer state and transactional ids, static
// broker limits, broker processes to kill).
func forKafkaEngines(t *testing.T, classic bool, fn func(t *testing.T, e engine)) {
	t.Helper()
	run(t, kafkaEngines(classic), fn)
}

func run(t *testing.T, engines []engine, fn func(t *testing.T, e engine)) {
	t.Helper()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { fn(t, e) })
	}
}

// sharedKey names one shared cluster.
type sharedKey struct {
	engine  string
	role    string // "src" or "dst"
	brokers int
	secured bool
	configs string // broker configs, as canonical k=v lines
}

var (
	sharedMu       sync.Mutex
	sharedClusters = map[sharedKey]*devcluster.Cluster{}
)

// sharedCluster returns the shared cluster for key, starting it at first
// use. A cluster that failed to start is not retried: every test after it
// fails fast with the same error.
func sharedCluster(t *testing.T, e engine, key sharedKey) *devcluster.Cluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := sharedClusters[key]; ok {
		if c == nil {
			t.Fatalf("the shared %s cluster %+v failed to start earlier", e.name, key)
		}
		return c
	}
	opts := []devcluster.Option{
		devcluster.Engine(e.kind), devcluster.KafkaVersion(e.version), devcluster.Name(key.role),
		devcluster.Brokers(key.brokers),
		devcluster.Logger(testLogger(t, "devcluster-"+key.role)),
	}
	if e.txnVersion != 0 {
		opts = append(opts, devcluster.TransactionVersion(e.txnVersion))
	}
	if key.configs != "" {
		cfgs := map[string]string{}
		for _, kv := range strings.Split(key.configs, "\n") {
			k, v, _ := strings.Cut(kv, "=")
			cfgs[k] = v
		}
		opts = append(opts, devcluster.BrokerConfigs(cfgs))
	}
	if key.secured {
		// The users of securedOpts: agent a super user, app not.
		opts = append(opts, devcluster.SASLUser(agentUser, agentPass), devcluster.SASLUser(appUser, appPass),
			devcluster.SuperUser(agentUser), devcluster.ACLs())
	}
	start := time.Now()
	c, err := devcluster.Start(opts...)
	sharedClusters[key] = c
	if err != nil {
		t.Fatalf("starting the shared %s cluster %+v: %v", e.name, key, err)
	}
	t.Logf("started the shared %s %s cluster (%d brokers) in %v: %s", e.name, key.role, key.brokers, time.Since(start).Round(time.Millisecond), c.BootstrapString())
	return c
}

// closeShared stops every shared cluster; TestMain calls it.
func closeShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for k, c := range sharedClusters {
		if c != nil {
			c.Close()
		}
		delete(sharedClusters, k)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeShared()
	os.Exit(code)
}

// newPairOn is newPair on engine e. On the embedded engine it is newPair;
// on a Kafka engine the clusters are the shared ones, o.topic is created
// under a name of this test's own (p.topic), and the agent's state topic is
// this test's too.
func newPairOn(t *testing.T, e engine, o pairOpts) *pair {
	t.Helper()
	if e.kind == devcluster.Embedded {
		p := newPair(t, o)
		p.eng, p.topic = e, o.topic
		return p
	}
	p := &pair{
		eng: e,
		src: sharedCluster(t, e, sharedKey{engine: e.name, role: "src", brokers: max(o.srcBrokers, 1), secured: o.secured, configs: canonical(o.srcConfigs)}),
		dst: sharedCluster(t, e, sharedKey{engine: e.name, role: "dst", brokers: max(o.dstBrokers, 1), secured: o.secured, configs: canonical(o.dstConfigs)}),
	}
	p.ownNames()
	p.setUp(t, o)
	return p
}

// ownNames gives a pair on shared clusters names of this test's own: a
// suffix for its topics and groups (name), and its state topic.
func (p *pair) ownNames() {
	var b [4]byte
	_, _ = rand.Read(b[:])
	p.suffix = hex.EncodeToString(b[:])
	p.stateTopic = "__kmirror_state-" + p.suffix
}

// setUp connects p's clients (as the agent when o.secured) and creates
// o.topic on the source, under the test's own name (p.topic).
func (p *pair) setUp(t *testing.T, o pairOpts) {
	t.Helper()
	var auth []kgo.Opt
	if o.secured {
		auth = []kgo.Opt{saslPlain(agentUser, agentPass)}
	}
	p.connect(t, auth...)
	if o.topic != "" {
		p.topic = p.name(o.topic)
		createTopic(t, p.srcCl, p.topic, o.partitions, nil)
	}
}

// canonical is cfgs as sorted k=v lines, the form a sharedKey holds.
func canonical(cfgs map[string]string) string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(cfgs)) {
		lines = append(lines, k+"="+cfgs[k])
	}
	return strings.Join(lines, "\n")
}

// name returns base made this test's own on a shared cluster (base with a
// suffix of the test's); on the embedded engine, where every test has
// clusters of its own, base itself.
func (p *pair) name(base string) string {
	if p.suffix == "" {
		return base
	}
	return base + "-" + p.suffix
}

// createTopic creates topic with partitions partitions (and configs) through
// adm, waiting until its metadata reaches every broker.
// createTopic creates topic and waits until every broker knows it with a
// leader for each partition (workload.CreateTopic): a producer asking a
// broker that has not caught up would fail its records.
func createTopic(t *testing.T, cl *kgo.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, err := workload.CreateTopic(ctx, cl, topic, partitions, configs)
	if err != nil {
		t.Fatal(err)
	}
	if got != partitions {
		t.Fatalf("topic %s: %d partitions, want %d (a leftover of an earlier test?)", topic, got, partitions)
	}
}

func allLeaders(d kadm.TopicDetail) bool {
	for _, p := range d.Partitions {
		if p.Leader < 0 || p.Err != nil {
			return false
		}
	}
	return true
}

// String names the engine in messages.
func (e engine) String() string { return fmt.Sprintf("%s (%s)", e.name, e.kind) }
