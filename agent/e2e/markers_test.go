package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestMarkersRefused: the destination refuses the agent's filler markers.
// The agent, no super user, mirrors a transactional source with fillers =
// markers and is denied ALTER and CLUSTER_ACTION on the cluster
// (WriteTxnMarkers needs either) while it runs. Two outcomes, each with its
// proof:
//
//   - The batch the agent wrote right behind the markers on the same
//     connection was on its way: the broker answers the markers, then reads
//     and appends that batch at their offsets (Kafka, where the answer
//     takes longer than the next write). The partition must fail with
//     MARKERS_REFUSED rather than go on shifted; verify must find the shift;
//     and once the right is back, a recover with recreate copies it again,
//     offset-identical.
//   - Nothing was behind them (kfake, which answers before the next write
//     leaves): the partition fails with DESTINATION_REFUSED saying which
//     right to grant, rather than retrying unseen while its lag grows; once
//     the right is back, a plain recover resumes, offset-identical.
func TestMarkersRefused(t *testing.T) {
	forEngines(t, testMarkersRefused)
}

func testMarkersRefused(t *testing.T, e engine) {
	p := authPairOn(t, e, "markersrefused", 1, authSides{dst: true})
	topic := p.topic
	user := p.name("markers")
	auth := scramUser(t, p.dst, p.dstCl, user)
	principal := "User:" + user
	allow := kadm.NewACLs().Allow(principal).AllowHosts("*").
		Topics("*").Groups("*").TransactionalIDs("*").Clusters().Operations(kadm.OpAll)
	deny := kadm.NewACLs().Deny(principal).DenyHosts("*").Clusters().Operations(kadm.OpAlter, kadm.OpClusterAction)
	setACLs(t, p.dstAdm, allow, true, 4)

	prod := workload.NewProducer(p.srcOpts(), workload.Spec{
		Topic: topic, Partitions: 1, Seed: 7,
		Codecs: []string{workload.CodecZstd, workload.CodecNone}, ChunkRecords: 10,
		TransactionalID: p.name("markersapp"), AbortEvery: 4, Headers: true,
	}, 1000)
	stop := runProducer(t, prod)
	spec := p.spec(topic)
	a := p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.Destination = []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), auth}
		c.Fillers = partition.FillMarkers
	})
	ctx := testCtx(t)
	if err := prod.WaitAcked(ctx, 300); err != nil {
		t.Fatal(err)
	}
	p.waitProgress(t, a, topic, map[int32]int64{0: 300}, failWait)

	setACLs(t, p.dstAdm, deny, true, 2)
	st := waitStatus(t, a, topic, 0, "FAILED", func(s partition.Status) bool { return s.State == partition.Failed })
	t.Logf("denied ALTER and CLUSTER_ACTION: %s: %s", st.ReasonCode, st.Reason)
	switch st.ReasonCode {
	case mirrorapi.ReasonCode(reason.MarkersRefused):
		// No false alarm: the batch is in the destination log where the
		// markers belong.
		rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() {
			var buf bytes.Buffer
			_ = rep.WriteText(&buf)
			t.Fatalf("the partition failed with %s, but the destination is identical to the source:\n%s", st.ReasonCode, buf.String())
		}
		setACLs(t, p.dstAdm, deny, false, 0)
		if err := a.co.RecoverTopicsWith(ctx, mirrorName, []string{topic}, true); err != nil {
			t.Fatalf("recover with recreate: %v", err)
		}
	case mirrorapi.ReasonCode(reason.DestinationRefused):
		if !strings.Contains(st.Reason, "filler markers") || !strings.Contains(st.Reason, "ALTER") {
			t.Errorf("the reason does not say the markers need ALTER on the cluster: %s", st.Reason)
		}
		// Nothing shifted: a plain recover resumes on the destination
		// log as it is (the verify below fails if it was shifted).
		setACLs(t, p.dstAdm, deny, false, 0)
		if err := a.co.RecoverTopics(ctx, mirrorName, []string{topic}); err != nil {
			t.Fatalf("recover: %v", err)
		}
	default:
		t.Fatalf("partition 0 failed with %s: %s; want %s or %s", st.ReasonCode, st.Reason, reason.MarkersRefused, reason.DestinationRefused)
	}
	if err := prod.WaitAcked(ctx, totalAcked(prod)+300); err != nil {
		t.Fatal(err)
	}
	stats := stop()
	p.waitMirrored(t, a, topic, failWait)
	rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_ = rep.WriteText(&buf)
	if !rep.OK() {
		t.Fatalf("after the recover:\n%s", buf.String())
	}
	var compared int64
	for _, pr := range rep.Partitions {
		if pr.Isolation == verify.ReadUncommitted {
			compared += pr.Compared
		}
	}
	if compared != stats.Records {
		t.Fatalf("verify compared %d records, the producer wrote %d (%d aborted):\n%s", compared, stats.Records, stats.Aborted, buf.String())
	}
	t.Logf("after the recover: %d records (%d aborted) identical at both isolation levels", stats.Records, stats.Aborted)
}

// setACLs creates (or deletes) the ACLs b describes on the cluster adm
// reaches, and waits until it describes want of them: the authorizer learns
// them through the metadata log.
func setACLs(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder, create bool, want int) {
	t.Helper()
	ctx := testCtx(t)
	var err error
	if create {
		var rs kadm.CreateACLsResults
		rs, err = adm.CreateACLs(ctx, b)
		for _, r := range rs {
			err = errors.Join(err, r.Err)
		}
	} else {
		var rs kadm.DeleteACLsResults
		rs, err = adm.DeleteACLs(ctx, b)
		for _, r := range rs {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatalf("changing ACLs (create %v): %v", create, err)
	}
	waitUntil(t, failWait, fmt.Sprintf("%d ACLs described", want), func() (bool, string) {
		d, err := adm.DescribeACLs(context.Background(), b)
		n := 0
		for _, r := range d {
			err = errors.Join(err, r.Err)
			n += len(r.Described)
		}
		return err == nil && n == want, fmt.Sprintf("%d described (%v)", n, err)
	})
}
