package mirror

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestReadOnlyState: a topic's read-only enforcement from the destination's
// check, and that the ACL is created only when the check allows it.
func TestReadOnlyState(t *testing.T) {
	enforceable := readonly.Status{Authorizer: true, SuperUser: true}
	for _, tc := range []struct {
		name    string
		st      readonly.Status
		ok      bool
		enforce func() (bool, error) // nil: must not be called
		want    roState
	}{
		{"check not concluded", readonly.Status{}, false, nil, roState{reason: "not concluded"}},
		{"no authorizer", readonly.Status{Reason: "no authorizer"}, true, nil, roState{reason: "no authorizer"}},
		{"not a super user", readonly.Status{Authorizer: true, Reason: "not super"}, true, nil, roState{reason: "not super"}},
		{"enforced", enforceable, true, func() (bool, error) { return true, nil }, roState{enforced: true}},
		{"SECURITY_DISABLED after all", enforceable, true, func() (bool, error) { return false, nil },
			roState{reason: "the destination answered SECURITY_DISABLED (no authorizer): the topic stays writable"}},
		{"creating the ACL failed", enforceable, true, func() (bool, error) { return false, errors.New("timeout") },
			roState{reason: "creating the DENY WRITE ACL failed (retrying): timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			got := readOnlyState(tc.st, tc.ok, "not concluded", func() (bool, error) {
				called = true
				if tc.enforce == nil {
					t.Error("the ACL is created although the check does not allow it")
					return false, nil
				}
				return tc.enforce()
			})
			if got != tc.want {
				t.Errorf("readOnlyState = %+v, want %+v", got, tc.want)
			}
			if tc.enforce != nil && !called {
				t.Error("the ACL is not created although the check allows it")
			}
		})
	}
}

// securedDestination is a destination with an authorizer, where "admin" is
// a super user and "agent" is one when agentIsSuper; it returns the
// fences of a runner there, the agent's client and an admin client.
func securedDestination(t *testing.T, agentIsSuper bool) (f *fences, agent *kgo.Client, admin *kadm.Client) {
	t.Helper()
	opts := []devcluster.Option{
		devcluster.SASLUser("agent", "agent-pass"), devcluster.SASLUser("admin", "admin-pass"),
		devcluster.SuperUser("admin"), devcluster.ACLs(),
	}
	if agentIsSuper {
		opts = append(opts, devcluster.SuperUser("agent"))
	}
	dst := devclustertest.Start(t, opts...)
	as := func(user string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Bootstrap()...), kgo.SASL(scram.Auth{User: user, Pass: user + "-pass"}.AsSha512Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	agent = as("agent")
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: devclustertest.Writer(t)})
	ro := NewReadOnly(readonly.New(kadm.NewClient(agent), readonly.WithClient(agent)), log)
	ro.Check(testCtx(t))
	return newFences(ro, log), agent, kadm.NewClient(as("admin"))
}

// hasDeny says whether topic has the read-only ACL, DENY WRITE for User:*.
func hasDeny(t *testing.T, adm *kadm.Client, topic string) bool {
	t.Helper()
	rs, err := adm.DescribeACLs(testCtx(t), kadm.NewACLs().Topics(topic).Deny("User:*").DenyHosts("*").Operations(kadm.OpWrite))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Described) > 0 {
			return true
		}
	}
	return false
}

// TestFencesReadOnly: on a destination where the agent is a super user, a
// mirror topic gets its DENY WRITE ACL, release removes it once per run of
// the mirror (an ACL created again by hand stays), and enforcing again
// makes release work again.
func TestFencesReadOnly(t *testing.T) {
	f, _, admin := securedDestination(t, true)
	ctx := testCtx(t)
	f.enforce(ctx, "orders")
	if got := f.readOnlyOf("orders"); !got.enforced || !hasDeny(t, admin, "orders") {
		t.Fatalf("after enforce: %+v, ACL there: %v; want enforced", got, hasDeny(t, admin, "orders"))
	}
	f.release(ctx, "orders")
	if got := f.readOnlyOf("orders"); got != (roState{}) || hasDeny(t, admin, "orders") {
		t.Fatalf("after release: %+v, ACL there: %v; want neither", got, hasDeny(t, admin, "orders"))
	}
	if _, err := admin.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Deny("User:*").DenyHosts("*").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	f.release(ctx, "orders")
	if !hasDeny(t, admin, "orders") {
		t.Error("a second release in the same run removed an ACL")
	}
	f.enforce(ctx, "orders")
	f.release(ctx, "orders")
	if hasDeny(t, admin, "orders") {
		t.Error("release after enforcing again left the ACL")
	}
}

// TestFencesReadOnlyNotSuperUser: where the agent is not a super user, a
// DENY would lock it out of its own topic: none is created, and describe
// says why.
func TestFencesReadOnlyNotSuperUser(t *testing.T) {
	f, _, admin := securedDestination(t, false)
	f.enforce(testCtx(t), "orders")
	got := f.readOnlyOf("orders")
	if got.enforced || !strings.Contains(got.reason, "super user") || hasDeny(t, admin, "orders") {
		t.Errorf("enforce: %+v, ACL there: %v; want not enforced, saying the agent is not a super user", got, hasDeny(t, admin, "orders"))
	}
}

// TestEnforceReadOnlyNotAfterStop: a topic sync does not make a topic
// read-only again once a partition of it stops (its last stop removes the
// ACL, and a sync that read the topic as mirroring before comes after), and
// does make a mirroring one read-only.
func TestEnforceReadOnlyNotAfterStop(t *testing.T) {
	f, _, admin := securedDestination(t, true)
	m := New(&Config{Store: testStore(t), Logger: hclog.NewNullLogger()}, Record{Spec: mirrorspec.Spec{Name: "dr"}})
	m.fences = f
	ctx := testCtx(t)
	for _, tc := range []struct {
		topic string
		state partition.State
		want  bool
	}{
		{"mirroring", partition.Mirroring, true},
		{"stopping", partition.Stopping, false},
		{"stopped", partition.Stopped, false},
	} {
		rp, _ := m.take(fetcher.TP{Topic: tc.topic, Partition: 0})
		rp.pm.Restore(tc.state, reason.Error{})
		m.enforceReadOnly(ctx, tc.topic)
		if got := hasDeny(t, admin, tc.topic); got != tc.want {
			t.Errorf("a topic sync of a %s topic: ACL there %v, want %v", tc.state, got, tc.want)
		}
	}
}
