package mirror

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestRecreates: a topic is being recreated from begin to end.
func TestRecreates(t *testing.T) {
	var r recreates
	end := r.begin("orders")
	if !r.underway("orders") || r.underway("payments") {
		t.Fatal("begin marks the wrong topics")
	}
	end()
	if r.underway("orders") {
		t.Error("still underway after end")
	}
}

// TestRecreateTopic recreates a destination topic: the same partition
// count and configs under a new topic id, what the agent knew of the old
// topic forgotten (alignments, ids, where a failback resumed), and every
// partition of the topic restarting from the source's log start; nothing
// of another topic changes.
func TestRecreateTopic(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := testCtx(t)
	retention := "1234"
	if resp, err := e.dstAdm.CreateTopic(ctx, 3, -1, map[string]*string{"retention.ms": &retention}, "orders"); err != nil || resp.Err != nil {
		t.Fatalf("creating orders: %v, %v", err, resp.Err)
	}
	oldID := topicIDOf(t, e, "orders")
	store := e.cfg.Store
	tp := func(topic string, p int32) fetcher.TP { return fetcher.TP{Topic: topic, Partition: p} }
	for key, v := range map[string]any{
		alignmentKey("dr", tp("orders", 1)):   partition.Alignment{Offset: 3},
		alignmentKey("dr", tp("payments", 0)): partition.Alignment{Offset: 3},
		topicKey("dr", "orders"):              topicRecord{},
		failbackKey("dr", "orders"):           failbackRecord{SourceMirror: "old", Partitions: map[int32]failbackPartition{0: {Base: 7}}},
	} {
		if err := WriteRecord(ctx, store, key, v); err != nil {
			t.Fatal(err)
		}
	}
	m := New(e.cfg, e.record("dr", "orders", "payments"))
	targets := []target{
		{tp("orders", 0), partition.Failed, partition.Initializing},
		{tp("orders", 1), partition.Mirroring, partition.Initializing},
		{tp("orders", 2), partition.Paused, partition.Initializing},
		{tp("payments", 0), partition.Failed, partition.Initializing}, // another topic's
	}
	if err := m.recreateTopic(ctx, "orders", targets); err != nil {
		t.Fatal(err)
	}
	if m.recreates.underway("orders") {
		t.Error("still being recreated")
	}

	// A new client: the agent's caches metadata for a few seconds.
	adm := kadm.NewClient(e.client(e.dst))
	for {
		tds, err := adm.ListTopics(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		td := tds["orders"]
		if td.Err == nil {
			if len(td.Partitions) != 3 || td.ID == oldID {
				t.Errorf("orders after the recreate: %+v (old id %v), want 3 partitions under a new id", td, oldID)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("orders after the recreate: %v", td.Err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			found = c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil && *c.Value == retention
		}
	}
	if !found {
		t.Errorf("retention.ms=%s not set on the new topic: %+v", retention, rc.Configs)
	}

	if _, ok := store.Get(alignmentKey("dr", tp("orders", 1))); ok {
		t.Error("the old topic's alignment is kept")
	}
	if _, ok := store.Get(alignmentKey("dr", tp("payments", 0))); !ok {
		t.Error("another topic's alignment is gone")
	}
	if _, ok := store.Get(topicKey("dr", "orders")); ok {
		t.Error("the old topic's ids are kept")
	}
	if fb, ok := failbackOf(store, "dr", "orders"); !ok || !fb.Recreated || fb.Partitions[0].Base != 0 {
		t.Errorf("failback record %+v, want recreated, resuming nowhere", fb)
	}
	for p := range int32(3) {
		var pr partitionRecord
		if !ReadRecord(store, PartitionKey("dr", tp("orders", p)), &pr) || pr.State != partition.Initializing || pr.LastMirroredOffset != -1 || pr.ReasonCode != reason.Recovering {
			t.Errorf("orders/%d persisted as %+v, want INITIALIZING from the source's log start", p, pr)
		}
	}
	if _, ok := store.Get(PartitionKey("dr", tp("payments", 0))); ok {
		t.Error("another topic's partition was restarted")
	}
}

// topicIDOf is topic's id on the destination.
func topicIDOf(t *testing.T, e *testEnv, topic string) [16]byte {
	t.Helper()
	tds, err := e.dstAdm.ListTopics(testCtx(t), topic)
	if err != nil || tds[topic].Err != nil {
		t.Fatalf("listing %s: %v, %v", topic, err, tds[topic].Err)
	}
	return tds[topic].ID
}
