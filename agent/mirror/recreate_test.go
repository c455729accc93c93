package mirror

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestRecreates: a topic is being recreated from begin to end, and the
// topic sync skips it meanwhile; a recreate waits for a sync of its topic
// already under way (the sync would create the deleted topic from the
// source's configs), and gives up when its context ends.
func TestRecreates(t *testing.T) {
	ctx := testCtx(t)
	var r recreates
	end, err := r.begin(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !r.underway("orders") || r.underway("payments") {
		t.Fatal("begin marks the wrong topics")
	}
	if _, ok := r.sync("orders"); ok {
		t.Error("orders synced while it is being recreated")
	}
	done, ok := r.sync("payments")
	if !ok {
		t.Fatal("payments not synced while orders is being recreated")
	}
	done()
	end()
	if r.underway("orders") {
		t.Error("still underway after end")
	}

	done, ok = r.sync("orders")
	if !ok {
		t.Fatal("orders not synced after its recreate ended")
	}
	began := make(chan error, 1)
	go func() {
		end, err := r.begin(ctx, "orders")
		if err == nil {
			defer end()
		}
		began <- err
	}()
	select {
	case err := <-began:
		t.Fatalf("begin returned (%v) while a sync of the topic was under way", err)
	case <-time.After(100 * time.Millisecond):
	}
	done()
	select {
	case err := <-began:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("begin still waits after the sync ended")
	}

	done, _ = r.sync("orders")
	defer done()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.begin(cctx, "orders"); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `waiting for the topic sync of "orders" to end`) {
		t.Errorf("begin with its context ended during a sync: %v", err)
	}
	if r.underway("orders") {
		t.Error("a recreate that gave up still marks the topic")
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

// TestSetOverrides: what a recreate sets on a topic that another client
// created after the deletion: the deleted topic's configs, the topic's
// other configs untouched.
func TestSetOverrides(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := testCtx(t)
	cleanup := "compact"
	if resp, err := e.dstAdm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &cleanup}, "orders"); err != nil || resp.Err != nil {
		t.Fatalf("creating orders: %v, %v", err, resp.Err)
	}
	retention, segment := "1234", "567890"
	configs := map[string]*string{"retention.ms": &retention, "segment.bytes": &segment}
	if got := formatConfigs(configs); got != "retention.ms=1234,segment.bytes=567890" {
		t.Errorf("formatConfigs: %s", got)
	}
	if err := setOverrides(ctx, e.dstAdm, "orders", configs); err != nil {
		t.Fatal(err)
	}
	got, err := topicOverrides(ctx, e.dstAdm, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if s := formatConfigs(got); s != "cleanup.policy=compact,retention.ms=1234,segment.bytes=567890" {
		t.Errorf("configs set on orders: %s", s)
	}
	if err := setOverrides(ctx, e.dstAdm, "missing", configs); err == nil {
		t.Error("no error setting configs on a topic that does not exist")
	}
}

// underway says whether topic is being recreated.
func (r *recreates) underway(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[topic]
}
