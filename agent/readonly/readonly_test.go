package readonly

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, c *devcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.RecordRetries(2)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func asUser(name, pass string) kgo.Opt {
	return kgo.SASL(scram.Auth{User: name, Pass: pass}.AsSha512Mechanism())
}

// secured is a destination with SASL and ACLs on. "agent" is a super user
// unless agentIsSuper is false; "admin" always is; "alice" is an ordinary
// user.
func secured(t *testing.T, agentIsSuper bool) *devcluster.Cluster {
	t.Helper()
	opts := []devcluster.Option{
		devcluster.SASLUser("agent", "agent-pass"),
		devcluster.SASLUser("admin", "admin-pass"),
		devcluster.SASLUser("alice", "alice-pass"),
		devcluster.SuperUser("admin"),
		devcluster.ACLs(),
	}
	if agentIsSuper {
		opts = append(opts, devcluster.SuperUser("agent"))
	}
	return devclustertest.Start(t, opts...)
}

func produce(t *testing.T, cl *kgo.Client, topic string) error {
	t.Helper()
	return cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr()
}

func mustCreateACLs(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) {
	t.Helper()
	rs, err := adm.CreateACLs(testCtx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating ACL %+v: %v", r, r.Err)
		}
	}
}

// allACLs lists every ACL on the cluster as comparable values.
func allACLs(t *testing.T, adm *kadm.Client) map[kadm.DescribedACL]bool {
	t.Helper()
	rs, err := adm.DescribeACLs(testCtx(t), kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).
		Allow().Deny().AllowHosts().DenyHosts().Operations())
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[kadm.DescribedACL]bool)
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, d := range r.Described {
			got[d] = true
		}
	}
	return got
}

func ourACL(topic string) kadm.DescribedACL {
	return kadm.DescribedACL{
		Principal: Principal, Host: Host, Type: kmsg.ACLResourceTypeTopic, Name: topic,
		Pattern: kadm.ACLPatternLiteral, Operation: kadm.OpWrite, Permission: kmsg.ACLPermissionTypeDeny,
	}
}

// TestEnforceAndRelease: with the DENY, an ordinary user who has an ALLOW
// WRITE is refused with TOPIC_AUTHORIZATION_FAILED while the agent (a super
// user) still produces; Enforce is idempotent; after Release the user
// produces again.
func TestEnforceAndRelease(t *testing.T) {
	c := secured(t, true)
	agent := client(t, c, asUser("agent", "agent-pass"))
	adm := kadm.NewClient(agent)
	if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, "mirror"); err != nil {
		t.Fatal(err)
	}
	mustCreateACLs(t, adm, kadm.NewACLs().Topics("mirror").Allow("User:alice").AllowHosts("*").
		Operations(kadm.OpWrite, kadm.OpDescribe))
	alice := client(t, c, kgo.SASL(plain.Auth{User: "alice", Pass: "alice-pass"}.AsMechanism()))
	if err := produce(t, alice, "mirror"); err != nil {
		t.Fatalf("alice before Enforce: %v", err)
	}

	e := New(adm, WithClient(agent))
	for range 2 {
		enforced, err := e.Enforce(testCtx(t), "mirror")
		if err != nil || !enforced {
			t.Fatalf("Enforce: %v, %v; want true, nil", enforced, err)
		}
	}
	acls := allACLs(t, adm)
	if !acls[ourACL("mirror")] || len(acls) != 3 { // ours, alice's WRITE and DESCRIBE
		t.Fatalf("ACLs after Enforce twice: %v", acls)
	}

	if err := produce(t, alice, "mirror"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice on a read-only topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := produce(t, agent, "mirror"); err != nil {
		t.Fatalf("the agent (super user) on its read-only topic: %v", err)
	}

	if err := e.Release(testCtx(t), "mirror"); err != nil {
		t.Fatal(err)
	}
	if err := produce(t, alice, "mirror"); err != nil {
		t.Fatalf("alice after Release: %v", err)
	}
	if err := e.Release(testCtx(t), "mirror"); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

// TestReleaseLeavesOtherACLs: Release deletes exactly the ACL Enforce made,
// not ACLs that differ from it in any one field.
func TestReleaseLeavesOtherACLs(t *testing.T) {
	c := secured(t, true)
	agent := client(t, c, asUser("agent", "agent-pass"))
	adm := kadm.NewClient(agent)
	deny := func() *kadm.ACLBuilder { return kadm.NewACLs().DenyHosts("*").Operations(kadm.OpWrite) }
	others := []*kadm.ACLBuilder{
		deny().Topics("mirror").ResourcePatternType(kadm.ACLPatternPrefixed).Deny(Principal),           // pattern
		deny().Topics("mirror").Deny("User:alice"),                                                     // principal
		kadm.NewACLs().Topics("mirror").Deny(Principal).DenyHosts("10.0.0.1").Operations(kadm.OpWrite), // host
		kadm.NewACLs().Topics("mirror").Allow(Principal).AllowHosts("*").Operations(kadm.OpWrite),      // permission
		kadm.NewACLs().Topics("mirror").Deny(Principal).DenyHosts("*").Operations(kadm.OpRead),         // operation
		deny().Topics("other").Deny(Principal),                                                         // resource name
		kadm.NewACLs().Groups("mirror").Deny(Principal).DenyHosts("*").Operations(kadm.OpRead),         // resource type
		kadm.NewACLs().Topics("mirror").Allow("User:alice").AllowHosts("*").Operations(kadm.OpWrite),   // unrelated ALLOW
	}
	for _, b := range others {
		mustCreateACLs(t, adm, b)
	}
	before := allACLs(t, adm)
	if len(before) != len(others) {
		t.Fatalf("%d ACLs before, want %d: %v", len(before), len(others), before)
	}

	e := New(adm)
	if enforced, err := e.Enforce(testCtx(t), "mirror"); err != nil || !enforced {
		t.Fatalf("Enforce: %v, %v", enforced, err)
	}
	if err := e.Release(testCtx(t), "mirror"); err != nil {
		t.Fatal(err)
	}
	after := allACLs(t, adm)
	if len(after) != len(before) {
		t.Fatalf("after Release %d ACLs, want the %d others: %v", len(after), len(before), after)
	}
	for a := range before {
		if !after[a] {
			t.Errorf("Release deleted %+v", a)
		}
	}
}

// TestNoAuthorizer: without an authorizer (devcluster answers ACL requests
// SECURITY_DISABLED, as Kafka does) Enforce reports enforced=false without
// error, Release succeeds, and Check says so.
func TestNoAuthorizer(t *testing.T) {
	c := devclustertest.Start(t)
	cl := client(t, c)
	e := New(kadm.NewClient(cl), WithClient(cl))
	enforced, err := e.Enforce(testCtx(t), "mirror")
	if err != nil || enforced {
		t.Fatalf("Enforce without authorizer: %v, %v; want false, nil", enforced, err)
	}
	if err := e.Release(testCtx(t), "mirror"); err != nil {
		t.Fatalf("Release without authorizer: %v", err)
	}
	st, err := e.Check(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Authorizer || st.Enforceable() || !strings.Contains(st.Reason, "no authorizer") {
		t.Fatalf("Check: %+v", st)
	}
}

// TestEnforceWithoutRights: an agent that may not create ACLs gets a
// PermissionError naming super.users and ALTER on the cluster.
func TestEnforceWithoutRights(t *testing.T) {
	c := secured(t, false)
	e := New(kadm.NewClient(client(t, c, asUser("agent", "agent-pass"))))
	_, err := e.Enforce(testCtx(t), "mirror")
	var pe *PermissionError
	if !errors.As(err, &pe) || !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("Enforce as a plain user: %v, want a PermissionError (CLUSTER_AUTHORIZATION_FAILED)", err)
	}
	for _, want := range []string{"super user", "super.users", "ALTER on the cluster"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := e.Release(testCtx(t), "mirror"); !errors.As(err, &pe) {
		t.Fatalf("Release as a plain user: %v, want a PermissionError", err)
	}
}

// TestCheck: a super user agent passes and leaves nothing behind; an agent
// that may manage ACLs and topics but is no super user is found out by the
// produce probe, and Enforce then refuses to lock it out of its own topics;
// an agent without rights is found out at once.
func TestCheck(t *testing.T) {
	c := secured(t, false)
	admin := kadm.NewClient(client(t, c, asUser("admin", "admin-pass")))
	probeTopics := func() []string {
		t.Helper()
		ts, err := admin.ListTopics(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var ps []string
		for _, n := range ts.Names() {
			if strings.HasPrefix(n, ProbeTopicPrefix) {
				ps = append(ps, n)
			}
		}
		return ps
	}

	t.Run("super user", func(t *testing.T) {
		cl := client(t, c, asUser("admin", "admin-pass"))
		st, err := New(kadm.NewClient(cl), WithClient(cl)).Check(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Enforceable() || st.Reason != "" || st.Leftover != "" {
			t.Fatalf("Check as a super user: %+v", st)
		}
		if ps := probeTopics(); len(ps) != 0 {
			t.Fatalf("probe topics left: %v", ps)
		}
		if acls := allACLs(t, admin); len(acls) != 0 {
			t.Fatalf("ACLs left: %v", acls)
		}
	})

	t.Run("no rights", func(t *testing.T) {
		cl := client(t, c, asUser("alice", "alice-pass"))
		st, err := New(kadm.NewClient(cl), WithClient(cl)).Check(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Authorizer || st.SuperUser || !strings.Contains(st.Reason, "super.users") {
			t.Fatalf("Check as a user without rights: %+v", st)
		}
	})

	t.Run("ALTER but no super user", func(t *testing.T) {
		mustCreateACLs(t, admin, kadm.NewACLs().Clusters().Allow("User:agent").AllowHosts("*").Operations(kadm.OpAll))
		mustCreateACLs(t, admin, kadm.NewACLs().Topics(ProbeTopicPrefix, "mirror").ResourcePatternType(kadm.ACLPatternPrefixed).
			Allow("User:agent").AllowHosts("*").Operations(kadm.OpAll))
		before := allACLs(t, admin)
		cl := client(t, c, asUser("agent", "agent-pass"))
		adm := kadm.NewClient(cl)
		if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, "mirror"); err != nil {
			t.Fatal(err)
		}
		e := New(adm, WithClient(cl))
		st, err := e.Check(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Authorizer || st.SuperUser || st.Leftover != "" || !strings.Contains(st.Reason, "TOPIC_AUTHORIZATION_FAILED") {
			t.Fatalf("Check as a non-super user with ALTER: %+v", st)
		}
		if ps := probeTopics(); len(ps) != 0 {
			t.Fatalf("probe topics left: %v", ps)
		}
		if after := allACLs(t, admin); len(after) != len(before) {
			t.Fatalf("ACLs before the probe %v, after %v", before, after)
		}
		if _, err := e.Enforce(testCtx(t), "mirror"); !errors.Is(err, ErrNotSuperUser) {
			t.Fatalf("Enforce after a failed Check: %v, want ErrNotSuperUser", err)
		}
		if err := produce(t, cl, "mirror"); err != nil {
			t.Fatalf("the agent lost its own topic: %v", err)
		}
	})
}
