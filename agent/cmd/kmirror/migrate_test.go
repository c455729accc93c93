package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/agent/lease"
	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// TestLeaseClaimedSince: a group agent that joined looks for a claim of the
// writer lease (by an agent of an earlier release) made after it stopped
// waiting for the lease agents, before it writes. A claim at another epoch
// than the one it waited out sends it back to waiting; none, or the dead
// holder's epoch, lets it go on. (The lease agent's half, a look for group
// members after its claim, TestAgentGroupAndLeaseDoNotMix sees refuse.)
func TestLeaseClaimedSince(t *testing.T) {
	c := devclustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst := []kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}
	cfg := &config.File{StateTopic: "__kmirror_state", GroupSessionTimeout: "6s"}
	r := &agentRun{cfg: cfg, dstOpts: dst, log: hclog.NewNullLogger(), srv: api.New(api.Options{})}
	m, err := membership.Join(membership.Config{Destination: dst, Group: groupID(cfg.StateTopic), AgentID: "g", SessionTimeout: cfg.SessionTimeout()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	if err := r.leaseClaimedSince(ctx, 0, m); err != nil {
		t.Fatalf("no lease agent: %v", err)
	}
	if m.View().Generation <= 0 {
		t.Fatal("the check ran before the agent's first generation")
	}

	if err := lease.Imitate(ctx, dst, cfg.StateTopic, lease.KindClaim, "l", 1, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	err = r.leaseClaimedSince(ctx, 0, m)
	if err == nil || !strings.Contains(err.Error(), "agent l claimed the writer lease") {
		t.Fatalf("a lease agent claimed the lease meanwhile: %v, want it named", err)
	}
	if err := r.leaseClaimedSince(ctx, 1, m); err != nil {
		t.Fatalf("the epoch waited out (its holder died): %v", err)
	}
	if err := lease.Imitate(ctx, dst, cfg.StateTopic, lease.KindRelease, "l", 1, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.leaseClaimedSince(ctx, 0, m); err != nil {
		t.Fatalf("the lease released: %v", err)
	}
}
