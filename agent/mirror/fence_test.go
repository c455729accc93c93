package mirror

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// TestUnfencedReason: a promote's fence note says why writes are not
// fenced, in the fence's words when it gave some.
func TestUnfencedReason(t *testing.T) {
	topics := []string{"orders"}
	for _, tc := range []struct {
		res  FenceResult
		want string
	}{
		{FenceResult{Fenced: true, Reason: "ignored"}, ""},
		{FenceResult{Reason: "no authorizer"}, "no authorizer"},
		{FenceResult{}, `source writes to ["orders"] were NOT fenced; RPO 0 depends on producers having stopped writing to the source`},
	} {
		if got := unfencedReason(tc.res, topics); got != tc.want {
			t.Errorf("unfencedReason(%+v) = %q, want %q", tc.res, got, tc.want)
		}
	}
}

// TestFenceNote: what a promote adds to its partitions' reasons, per topic.
func TestFenceNote(t *testing.T) {
	f := newFences(nil, hclog.NewNullLogger())
	if f.fenceOf("orders").done || f.note("orders") != "" {
		t.Fatal("a fence is recorded before any was tried")
	}
	f.tried([]string{"orders"}, "")
	f.tried([]string{"payments"}, "no authorizer")
	if st := f.fenceOf("orders"); !st.done || f.note("orders") != "" {
		t.Errorf("fenced topic: %+v, note %q; want tried and no note", st, f.note("orders"))
	}
	if got := f.note("payments"); got != "; no authorizer" {
		t.Errorf("unfenced topic's note %q", got)
	}
}

// TestACLSourceFence fences a promote's source topic with a DENY WRITE ACL
// where the source has an authorizer and the agent is a super user there,
// reports not fenced (and goes on) where the source has no authorizer, and
// refuses the promote where the agent may not create ACLs.
func TestACLSourceFence(t *testing.T) {
	fence := func(t *testing.T, cl *kgo.Client) (FenceResult, error) {
		return ACLSourceFence{}.Fence(testCtx(t), FenceRequest{Mirror: "dr", Topics: []string{"orders"}, Admin: kadm.NewClient(cl), Client: cl})
	}
	t.Run("super user", func(t *testing.T) {
		_, agent, admin := securedDestination(t, true)
		res, err := fence(t, agent)
		if err != nil || !res.Fenced || !hasDeny(t, admin, "orders") {
			t.Errorf("Fence: %+v, %v, ACL there: %v; want fenced", res, err, hasDeny(t, admin, "orders"))
		}
	})
	t.Run("no authorizer", func(t *testing.T) {
		src := devclustertest.Start(t)
		cl, err := kgo.NewClient(kgo.SeedBrokers(src.Bootstrap()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		res, err := fence(t, cl)
		if err != nil || res.Fenced || !strings.Contains(res.Reason, "SECURITY_DISABLED") {
			t.Errorf("Fence: %+v, %v; want not fenced, saying there is no authorizer", res, err)
		}
	})
	t.Run("may not create ACLs", func(t *testing.T) {
		_, agent, admin := securedDestination(t, false)
		res, err := fence(t, agent)
		if err == nil || !strings.Contains(err.Error(), "may not create ACLs on the source") || hasDeny(t, admin, "orders") {
			t.Errorf("Fence: %+v, %v; want refused, saying the agent may not create ACLs", res, err)
		}
	})
}
