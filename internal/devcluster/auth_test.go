package devcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	saslplain "github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func asPlain(user, pass string) kgo.Opt {
	return kgo.SASL(saslplain.Auth{User: user, Pass: pass}.AsMechanism())
}

func as256(user, pass string) kgo.Opt {
	return kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism())
}

func as512(user, pass string) kgo.Opt {
	return kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())
}

// secured starts a cluster with SASL and ACLs on: admin is a super user,
// alice and bob are not.
func secured(t *testing.T, opts ...Option) *Cluster {
	t.Helper()
	return startT(t, append([]Option{
		SASLUser("admin", "admin-secret"),
		SASLUser("alice", "alice-secret"),
		SASLUser("bob", "bob:secret"),
		SuperUser("admin"),
		ACLs(),
	}, opts...)...)
}

func allowWrite(t *testing.T, c *Cluster, principal, topic string) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, c, asPlain("admin", "admin-secret")))
	b := kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Allow(principal).AllowHosts("*").Operations(kadm.OpWrite, kadm.OpDescribe)
	rs, err := adm.CreateACLs(testCtx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating %s %s on %s: %v", r.Principal, r.Operation, r.Name, r.Err)
		}
	}
}

func produceOne(t *testing.T, cl *kgo.Client, topic string) error {
	t.Helper()
	return cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr()
}

// TestACLsRefuseUsersWithoutACLs: with ACLs on, a SASL user with no ACLs is
// refused writes with TOPIC_AUTHORIZATION_FAILED whatever mechanism it
// authenticated with, a super user may do anything, and an ALLOW lets a
// user write.
func TestACLsRefuseUsersWithoutACLs(t *testing.T) {
	c := secured(t)
	if err := c.Kfake().CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]kgo.Opt{
		"PLAIN":         asPlain("alice", "alice-secret"),
		"SCRAM-SHA-256": as256("alice", "alice-secret"),
		"SCRAM-SHA-512": as512("alice", "alice-secret"),
	} {
		cl := newClient(t, c, opt, kgo.RecordRetries(1))
		if err := produceOne(t, cl, "t"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("alice (%s) without ACLs: produce error %v, want TOPIC_AUTHORIZATION_FAILED", name, err)
		}
	}

	// The super user, through each mechanism: produce, create topics
	// and ACLs, with no ACL of its own.
	for name, opt := range map[string]kgo.Opt{
		"PLAIN":         asPlain("admin", "admin-secret"),
		"SCRAM-SHA-256": as256("admin", "admin-secret"),
		"SCRAM-SHA-512": as512("admin", "admin-secret"),
	} {
		cl := newClient(t, c, opt)
		if err := produceOne(t, cl, "t"); err != nil {
			t.Fatalf("admin (%s): produce: %v", name, err)
		}
		adm := kadm.NewClient(cl)
		topic := "made-by-" + strings.ToLower(name)
		if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, topic); err != nil {
			t.Fatalf("admin (%s): create topic: %v", name, err)
		}
		if _, err := adm.DescribeACLs(testCtx(t), kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).
			Allow().Deny().AllowHosts().DenyHosts().Operations()); err != nil {
			t.Fatalf("admin (%s): describe ACLs: %v", name, err)
		}
	}

	allowWrite(t, c, "User:bob", "t")
	if err := produceOne(t, newClient(t, c, as512("bob", "bob:secret")), "t"); err != nil {
		t.Fatalf("bob with ALLOW WRITE: %v", err)
	}
	alice := kadm.NewClient(newClient(t, c, asPlain("alice", "alice-secret")))
	if _, err := alice.CreateACLs(testCtx(t), kadm.NewACLs().Topics("t").Allow("User:alice").AllowHosts("*").Operations(kadm.OpWrite)); err == nil {
		// kadm reports per-ACL errors in the results
		rs, _ := alice.CreateACLs(testCtx(t), kadm.NewACLs().Topics("t").Allow("User:alice").AllowHosts("*").Operations(kadm.OpWrite))
		if len(rs) != 1 || !errors.Is(rs[0].Err, kerr.ClusterAuthorizationFailed) {
			t.Fatalf("alice creating an ACL: %+v, want CLUSTER_AUTHORIZATION_FAILED", rs)
		}
	}
}

// TestSASLRefusesUnauthenticated: with a SASL user, a client that does not
// authenticate gets nothing; with a wrong password kfake closes the
// connection.
func TestSASLRefusesUnauthenticated(t *testing.T) {
	c := startT(t, SASLUser("alice", "alice-secret")) // SASL without ACLs
	if err := c.Kfake().CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := produceOne(t, newClient(t, c, asPlain("alice", "alice-secret")), "t"); err != nil {
		t.Fatalf("alice, no authorizer: %v", err)
	}
	ctx := testCtx(t)
	for name, cl := range map[string]*kgo.Client{
		"no SASL":        newClient(t, c, kgo.RequestRetries(0)),
		"wrong password": newClient(t, c, asPlain("alice", "nope"), kgo.RequestRetries(0)),
	} {
		if _, err := kadm.NewClient(cl).ListTopics(ctx); err == nil {
			t.Fatalf("%s: listing topics worked", name)
		}
	}
}

// TestACLsWithoutSASL: every client is User:ANONYMOUS and is refused; the
// helpers still work as the internal super user.
func TestACLsWithoutSASL(t *testing.T) {
	c := startT(t, ACLs())
	if err := c.Kfake().CreateTopic("t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := produceOne(t, newClient(t, c, kgo.RecordRetries(1)), "t"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("anonymous produce: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// The helper's DescribeTransactions reaches kfake as a super user:
	// the answer is about the id, not about authorization.
	if _, err := c.TimeoutAbort(testCtx(t), "nobody"); !errors.Is(err, kerr.TransactionalIDNotFound) {
		t.Fatalf("TimeoutAbort as the internal user: %v, want TRANSACTIONAL_ID_NOT_FOUND", err)
	}
}

// TestStrictUnderSASLAndACLs: the strict layer refuses a bad batch from a
// super user and from an authorized user, lets good ones through, and an
// unauthorized user is refused for authorization first, as Kafka does; the
// fault helpers work through their internal super user.
func TestStrictUnderSASLAndACLs(t *testing.T) {
	c := secured(t)
	if err := c.Kfake().CreateTopic("s", 1, nil); err != nil {
		t.Fatal(err)
	}
	allowWrite(t, c, "User:bob", "s")
	bad := func() testBatch { b := plain(3); b.baseOffset = 5; return b }().encode(t)
	good := plain(2).encode(t)

	admin := newClient(t, c, as256("admin", "admin-secret"))
	bob := newClient(t, c, asPlain("bob", "bob:secret"))
	alice := newClient(t, c, asPlain("alice", "alice-secret"))
	for _, tc := range []struct {
		who     string
		cl      *kgo.Client
		records []byte
		want    *kerr.Error
	}{
		{"admin", admin, bad, kerr.InvalidRecord},
		{"bob", bob, bad, kerr.InvalidRecord},
		{"alice", alice, bad, kerr.TopicAuthorizationFailed},
		{"alice", alice, good, kerr.TopicAuthorizationFailed},
		{"admin", admin, good, nil},
		{"bob", bob, good, nil},
	} {
		codes := produceRaw(t, c, tc.cl, nil, partBatch{"s", 0, tc.records})
		got := kerr.ErrorForCode(codes[tpKey("s", 0)])
		if (tc.want == nil && got != nil) || (tc.want != nil && !errors.Is(got, tc.want)) {
			t.Fatalf("%s: produce answered %v, want %v", tc.who, got, tc.want)
		}
	}
	if hw := highWatermark(t, c, "s", 0); hw != 4 {
		t.Fatalf("high watermark %d, want 4 (two good batches of two)", hw)
	}

	// A fault helper that issues its own requests (DescribeTransactions,
	// EndTxn) on an open transaction of the super user.
	p := newClient(t, c, as512("admin", "admin-secret"), kgo.TransactionalID("s-txn"), kgo.DefaultProduceTopic("s"))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	res, err := c.TimeoutAbort(testCtx(t), "s-txn")
	if err != nil {
		t.Fatalf("TimeoutAbort under SASL and ACLs: %v", err)
	}
	if len(res.Partitions["s"]) != 1 {
		t.Fatalf("aborted partitions %v, want s/0", res.Partitions)
	}
}

// TestSecurityDisabledWithoutACLs: without ACLs the strict layer answers ACL
// requests as a Kafka broker without an authorizer does; Lenient keeps
// kfake's behaviour of accepting them.
func TestSecurityDisabledWithoutACLs(t *testing.T) {
	b := kadm.NewACLs().Topics("t").ResourcePatternType(kadm.ACLPatternLiteral).
		Deny("User:*").DenyHosts("*").Operations(kadm.OpWrite)

	adm := kadm.NewClient(newClient(t, startT(t)))
	if _, err := adm.DescribeACLs(testCtx(t), b); !errors.Is(err, kerr.SecurityDisabled) {
		rs, _ := adm.DescribeACLs(testCtx(t), b)
		if len(rs) != 1 || !errors.Is(rs[0].Err, kerr.SecurityDisabled) {
			t.Fatalf("describe: %v %+v, want SECURITY_DISABLED", err, rs)
		}
	}
	rs, err := adm.CreateACLs(testCtx(t), b)
	if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, kerr.SecurityDisabled) {
		t.Fatalf("create: %v %+v, want SECURITY_DISABLED", err, rs)
	}
	ds, err := adm.DeleteACLs(testCtx(t), b)
	if err != nil || len(ds) != 1 || !errors.Is(ds[0].Err, kerr.SecurityDisabled) {
		t.Fatalf("delete: %v %+v, want SECURITY_DISABLED", err, ds)
	}

	lenient := kadm.NewClient(newClient(t, startT(t, Lenient())))
	if rs, err := lenient.CreateACLs(testCtx(t), b); err != nil || rs[0].Err != nil {
		t.Fatalf("lenient create: %v %+v, want kfake's success", err, rs)
	}
}

// TestSASLUsersWinOverDataDir: a restart with other SASL users serves those,
// not the ones kfake saved, and the helpers get a working password.
func TestSASLUsersWinOverDataDir(t *testing.T) {
	dir := t.TempDir()
	c, err := Start(DataDir(dir), SASLUser("alice", "one"), ACLs(), SuperUser("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kfake().CreateTopic("d", 1, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := os.Stat(filepath.Join(dir, "sasl.json")); err != nil {
		t.Fatalf("kfake saved no SASL users (the reset would be moot): %v", err)
	}

	c = startT(t, DataDir(dir), SASLUser("alice", "two"), ACLs(), SuperUser("alice"))
	if err := produceOne(t, newClient(t, c, as256("alice", "two")), "d"); err != nil {
		t.Fatalf("alice with the new password: %v", err)
	}
	if _, err := c.TimeoutAbort(testCtx(t), "nobody"); !errors.Is(err, kerr.TransactionalIDNotFound) {
		t.Fatalf("TimeoutAbort after a restart: %v, want TRANSACTIONAL_ID_NOT_FOUND", err)
	}
}

func TestAuthOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{SuperUser("root")}, `SuperUser "root" is not a SASLUser`},
		{[]Option{SASLUser("a", "x"), SASLUser("a", "y")}, `SASLUser "a" given twice`},
		{[]Option{SASLUser("", "x")}, "name must not be empty"},
		{[]Option{SASLUser("a", "")}, "password must not be empty"},
		{[]Option{SASLUser(InternalUser, "x")}, "reserved"},
	} {
		c, err := Start(tc.opts...)
		if err == nil {
			c.Close()
			t.Fatalf("want an error containing %q, got none", tc.want)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("error %q, want it to contain %q", err, tc.want)
		}
	}
}
