package mirror

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/metasync"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestSyncRunsEveryKind: the sync loops are keyed by every kind of
// mirrorapi's table, so a kind added there is given a loop here or said to
// be recorded elsewhere; only partition growth is (by syncTopics).
func TestSyncRunsEveryKind(t *testing.T) {
	runs := (&Runner{}).syncRuns(nil, nil, nil)
	for _, k := range mirrorapi.SyncKinds() {
		run, ok := runs[k]
		switch {
		case !ok:
			t.Errorf("kind %s has no entry in syncRuns", k)
		case k == metasync.KindPartitions && run != nil:
			t.Errorf("partitions has a sync loop; syncTopics records it")
		case k != metasync.KindPartitions && run == nil:
			t.Errorf("kind %s has no sync loop", k)
		}
	}
	if len(runs) != len(mirrorapi.SyncKinds()) {
		t.Errorf("syncRuns has %d kinds, the table %d", len(runs), len(mirrorapi.SyncKinds()))
	}
}

// TestSyncedPartitions: which topics' configs follow the source, and which
// partitions' group offsets are synced, from the partitions' states.
func TestSyncedPartitions(t *testing.T) {
	tp := func(topic string, p int32) fetcher.TP { return fetcher.TP{Topic: topic, Partition: p} }
	states := map[fetcher.TP]partition.State{
		tp("mirroring", 0): partition.Mirroring, tp("mirroring", 1): partition.Paused,
		tp("stopping", 0): partition.Stopping, tp("stopping", 1): partition.Stopped,
		tp("failed", 0): partition.Failed, tp("failed", 1): partition.Stopped,
		tp("new", 0):  partition.Initializing,
		tp("gone", 0): partition.Mirroring, // not in the spec any more
	}
	topics := []string{"failed", "mirroring", "new", "stopping", "unknown"}
	if got, want := liveTopics(topics, states), []string{"failed", "mirroring", "new"}; !slices.Equal(got, want) {
		t.Errorf("liveTopics = %q, want %q", got, want)
	}
	got := groupPartitions(topics, states)
	slices.Sort(got["mirroring"])
	if want := map[string][]int32{"mirroring": {0, 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("groupPartitions = %v, want %v", got, want)
	}
}

// TestPartitionSync: a topic sync reports the partitions of the topics
// that synced, and what went wrong with the others.
func TestPartitionSync(t *testing.T) {
	parts := []fetcher.TP{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 1}, {Topic: "b", Partition: 0}, {Topic: "c", Partition: 0}}
	res, err := partitionSync([]string{"a", "b"}, map[string]string{"b": "source topic missing"}, parts)
	if res.Items != 2 || err == nil || err.Error() != `topic "b": source topic missing` {
		t.Errorf("partitionSync = %+v, %v; want 2 items and topic b's error", res, err)
	}
	if res, err := partitionSync([]string{"a", "c"}, nil, parts); res.Items != 3 || err != nil {
		t.Errorf("partitionSync = %+v, %v; want 3 items", res, err)
	}
}

// TestMetaSyncKick: a kick wakes every loop waiting on the kick it took,
// and only those.
func TestMetaSyncKick(t *testing.T) {
	s := newMetaSync(hclog.NewNullLogger())
	before := s.kicked()
	s.kickAll()
	after := s.kicked()
	select {
	case <-before:
	default:
		t.Error("the kick taken before kickAll is not closed")
	}
	select {
	case <-after:
		t.Error("the kick taken after kickAll is closed")
	default:
	}
}

// TestFinalSyncsBatch: stopping partitions share final group syncs: the
// first starts one; those stopping while it runs go together in the next;
// each waits until a sync that included it has run.
func TestFinalSyncsBatch(t *testing.T) {
	var f finalSyncs
	tp := func(p int32) fetcher.TP { return fetcher.TP{Topic: "orders", Partition: p} }
	release := make(chan struct{})
	var batches []string
	syncing := make(chan struct{}, 1)
	sync := func(parts map[string][]int32) {
		slices.Sort(parts["orders"])
		batches = append(batches, fmt.Sprint(parts))
		syncing <- struct{}{}
		<-release
	}
	done0, start := f.add(tp(0))
	if !start {
		t.Fatal("the first stop does not start the syncs")
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		f.runAll(sync)
	}()
	<-syncing // the first sync runs
	done2, start2 := f.add(tp(2))
	done1, start1 := f.add(tp(1))
	if start2 || start1 {
		t.Fatal("a stop during a sync starts another")
	}
	select {
	case <-done0:
		t.Fatal("done before its sync returned")
	default:
	}
	release <- struct{}{}
	<-done0
	<-syncing // the second sync runs
	release <- struct{}{}
	<-done1
	<-done2
	<-ran
	if want := []string{"map[orders:[0]]", "map[orders:[1 2]]"}; !slices.Equal(batches, want) {
		t.Errorf("syncs %q, want %q", batches, want)
	}
	if _, start := f.add(tp(3)); !start {
		t.Error("a stop after the syncs ended does not start one")
	}
}

// TestFinalGroupSync: a stop syncs the group offsets of its partitions
// once more, so that offsets committed on the source after the last
// periodic sync (an hour away here) reach the destination.
func TestFinalGroupSync(t *testing.T) {
	e := newEnv(t, []devcluster.Option{devcluster.KfakeOptions(kfake.SeedTopics(1, "orders"))}, nil)
	e.produce("orders", 0, 5)
	rec := e.record("dr", "orders")
	rec.Spec.MetadataRefreshIntervalMs = time.Hour.Milliseconds()
	m := e.start(rec)
	ctx := testCtx(t)
	waitFor(t, m, "mirroring", func(st mirrorapi.Mirror) bool { return allIn(st, "orders", partition.Mirroring, 5) })

	os := kadm.Offsets{}
	os.AddOffset("orders", 0, 3, -1)
	if resp, err := kadm.NewClient(e.srcCl).CommitOffsets(ctx, "app", os); err != nil || resp.Error() != nil {
		t.Fatalf("committing on the source: %v, %v", err, resp.Error())
	}
	if offs, err := e.dstAdm.FetchOffsets(ctx, "app"); err == nil && len(offs) > 0 {
		t.Fatalf("the destination has the group's offsets before the stop: %v", offs)
	}
	p, err := m.Plan(ctx, partition.OpStopFailover, []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Execute(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "stopped", func(st mirrorapi.Mirror) bool { return allIn(st, "orders", partition.Stopped, 5) })
	offs, err := e.dstAdm.FetchOffsets(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("orders", 0); !ok || o.At != 3 {
		t.Errorf("the destination's offset of group app on orders/0: %+v, %v; want 3", o, ok)
	}
}
