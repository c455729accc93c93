package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// TestChooseFillers resolves the fillers setting against a destination with
// the StandardAuthorizer (ACLs), on both engines, as a super user and as a
// user without cluster rights, before and after ALTER on the cluster is
// granted; what it says about markers is then checked by writing one.
func TestChooseFillers(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) { testChooseFillers(t, engine) })
	}
}

func testChooseFillers(t *testing.T, engine devcluster.EngineKind) {
	c := devclustertest.Start(t, devcluster.Engine(engine), devcluster.Name("fillers-"+string(engine)), devcluster.ACLs(),
		devcluster.SASLUser("boss", "boss-pass"), devcluster.SuperUser("boss"), devcluster.SASLUser("agent", "agent-pass"),
		devcluster.SeedTopics(1, "marked"))
	as := func(user, pass string) []kgo.Opt {
		return []kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())}
	}
	boss, agent := as("boss", "boss-pass"), as("agent", "agent-pass")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	check := func(setting string, opts []kgo.Opt, bounded bool, want partition.FillerMethod, why string) {
		t.Helper()
		got, err := chooseFillers(ctx, setting, opts, bounded)
		if err != nil || got.method != want || !strings.Contains(got.why, why) {
			t.Errorf("fillers %q (in a group %v): %s (%q), %v; want %s saying %q", setting, bounded, got.method, got.why, err, want, why)
		}
	}
	refused := func(opts []kgo.Opt) {
		t.Helper()
		if got, err := chooseFillers(ctx, config.FillersMarkers, opts, true); err == nil || !strings.Contains(err.Error(), "kafka-acls.sh") {
			t.Errorf("fillers \"markers\" without the right: %s, %v; want an error with the kafka-acls command", got.method, err)
		}
	}
	bcl, err := kgo.NewClient(boss...)
	if err != nil {
		t.Fatal(err)
	}
	defer bcl.Close()
	grant := func(what string, acl *kadm.ACLBuilder) {
		t.Helper()
		if rs, err := kadm.NewClient(bcl).CreateACLs(ctx, acl); err != nil || rs[0].Err != nil {
			t.Fatalf("granting %s: %v %v", what, err, rs)
		}
	}
	// The agent sees the topic (metadata), whatever it may do on the
	// cluster.
	grant("DESCRIBE on the topic", kadm.NewACLs().Allow("User:agent").AllowHosts().ResourcePatternType(kadm.ACLPatternLiteral).
		Topics("marked").Operations(kadm.OpDescribe))

	check(config.FillersCoordinator, agent, true, partition.FillCoordinator, `fillers = "coordinator"`)
	check(config.FillersAuto, boss, true, partition.FillMarkers, "authorizes WriteTxnMarkers")
	check(config.FillersAuto, boss, false, partition.FillCoordinator, "the agent runs alone (coordination = \"single\")")
	check(config.FillersAuto, agent, true, partition.FillCoordinator, `fillers = "auto"`)
	refused(agent)
	eventually(t, func() bool { return writeMarker(ctx, agent) != nil }, "WriteTxnMarkers refused to the agent without cluster rights")

	// ALTER (and DESCRIBE, which Kafka wants before it lists authorized
	// operations) on the cluster for the agent.
	ops := []kadm.ACLOperation{kadm.OpAlter, kadm.OpDescribe}
	if engine == devcluster.Embedded {
		// kfake authorizes WriteTxnMarkers with CLUSTER_ACTION only, as
		// Kafka did before 3.8; the Kafka run shows ALTER suffices.
		ops = append(ops, kadm.OpClusterAction)
	}
	grant("ALTER on the cluster", kadm.NewACLs().Allow("User:agent").AllowHosts().ResourcePatternType(kadm.ACLPatternLiteral).Clusters().
		Operations(ops...))
	deadline := time.Now().Add(30 * time.Second) // a KRaft broker applies an ACL a moment later
	for {
		got, err := chooseFillers(ctx, config.FillersAuto, agent, true)
		if err == nil && got.method == partition.FillMarkers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after granting ALTER: %s (%q), %v; want markers", got.method, got.why, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	check(config.FillersMarkers, agent, true, partition.FillMarkers, `fillers = "markers"`)
	check(config.FillersMarkers, agent, false, partition.FillMarkers, "without the agents' group (coordination = \"single\")")
	eventually(t, func() bool { return writeMarker(ctx, agent) == nil }, "WriteTxnMarkers taken from the agent with ALTER on the cluster")
}

// writeMarker writes one filler marker to topic marked as the client of
// opts.
func writeMarker(ctx context.Context, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(writer.ClientOpts(opts)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return writer.New(cl, leaders.New(cl)).WriteMarkers(ctx, writer.Producer{ID: 1 << 62}, "marked", 0, 1)
}

// eventually polls cond for up to 30 s (a KRaft broker applies an ACL a
// moment after CreateACLs answers).
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not seen within 30s: %s", what)
		}
	}
}
