package mirror

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestStoppedOnSource: a failback resumes from the last mirrored offsets of
// the one mirror that stopped the topic on the source cluster's agent, and
// is refused when none did, several did, or one partition still mirrors.
func TestStoppedOnSource(t *testing.T) {
	rec := func(state partition.State, lmo int64) []byte {
		b, err := json.Marshal(partitionRecord{State: state, LastMirroredOffset: lmo})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	stopped := map[string][]byte{
		"partition/dr/orders/0":   rec(partition.Stopped, 41),
		"partition/dr/orders/1":   rec(partition.Stopped, -1),
		"partition/dr/payments/0": rec(partition.Mirroring, 7), // another topic
		"partition/dr/orders/x":   rec(partition.Mirroring, 7), // not a partition
		"topic/dr/orders":         []byte(`{}`),
	}
	name, lmos, err := stoppedOnSource(stopped, "orders")
	if err != nil || name != "dr" || !reflect.DeepEqual(lmos, map[int32]int64{0: 41, 1: -1}) {
		t.Errorf("stoppedOnSource = %q, %v, %v; want dr's offsets", name, lmos, err)
	}
	for _, tc := range []struct {
		name  string
		state map[string][]byte
		want  string
	}{
		{"never mirrored there", map[string][]byte{"partition/dr/payments/0": rec(partition.Stopped, 1)}, "no mirror on the source cluster's agent mirrors this topic"},
		{"two mirrors", map[string][]byte{"partition/a/orders/0": rec(partition.Stopped, 1), "partition/b/orders/0": rec(partition.Stopped, 1)}, `mirrors ["a" "b"]`},
		{"still mirroring", map[string][]byte{"partition/dr/orders/0": rec(partition.Stopped, 1), "partition/dr/orders/1": rec(partition.Mirroring, 1)}, "partition 1 is MIRRORING in mirror \"dr\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := stoppedOnSource(tc.state, "orders")
			if !errors.Is(err, ErrFailbackRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("stoppedOnSource: %v; want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// TestFailbackRecord: describe lists a failback's partitions in order, and
// a recreated topic resumes nowhere.
func TestFailbackRecord(t *testing.T) {
	rec := failbackRecord{SourceMirror: "dr", Partitions: map[int32]failbackPartition{
		2: {LastMirrored: 9, End: 10, Base: 10, DivergentFrom: 10},
		0: {LastMirrored: 4, End: 7, Base: 7, DivergentFrom: 5, Divergent: 2},
	}}
	got := rec.status()
	want := []mirrorapi.FailbackPartition{
		{Partition: 0, LastMirroredOffset: 4, DestinationEnd: 7, ResumedAt: 7, DivergentRecords: 2},
		{Partition: 2, LastMirroredOffset: 9, DestinationEnd: 10, ResumedAt: 10},
	}
	if got.SourceMirror != "dr" || got.Recreated || !reflect.DeepEqual(got.Partitions, want) {
		t.Errorf("status = %+v, want partitions %+v", got, want)
	}
	rec.recreated()
	for _, p := range rec.status().Partitions {
		if p.ResumedAt != 0 {
			t.Errorf("partition %d resumes at %d after a recreate", p.Partition, p.ResumedAt)
		}
	}
	if !rec.Recreated {
		t.Error("not marked recreated")
	}
}

// TestPlanFailback plans the failback of a topic stopped on the source
// cluster's agent into the old primary: refused when the source has no
// state topic; resuming at the log end when the old primary holds exactly
// what was mirrored; refused when it took records after the last mirrored
// offset, unless recreate is asked.
func TestPlanFailback(t *testing.T) {
	orders := []devcluster.Option{devcluster.KfakeOptions(kfake.SeedTopics(1, "orders"))}
	e := newEnv(t, orders, orders)
	ctx := testCtx(t)
	spec := e.record("back", "orders").Spec
	if _, err := PlanFailback(ctx, e.cfg, spec, "orders", false); !errors.Is(err, ErrFailbackRefused) || !strings.Contains(err.Error(), "has no state topic") {
		t.Fatalf("without a state topic on the source: %v, want refused", err)
	}

	// The source (the old destination) mirrored offsets 0-4 of orders and
	// stopped it; the old primary holds the same five records.
	srcState, err := statestore.Open(ctx, []kgo.Opt{kgo.SeedBrokers(e.src.Bootstrap()...)}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer srcState.Close()
	if err := WriteRecord(ctx, srcState, PartitionKey("dr", fetcher.TP{Topic: "orders"}), partitionRecord{State: partition.Stopped, LastMirroredOffset: 4}); err != nil {
		t.Fatal(err)
	}
	dstCl := e.client(e.dst)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for i := range 5 {
		for _, cl := range []*kgo.Client{e.srcCl, dstCl} {
			r := &kgo.Record{Topic: "orders", Key: []byte{byte(i)}, Value: []byte("v"), Timestamp: at.Add(time.Duration(i) * time.Millisecond)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan, err := PlanFailback(ctx, e.cfg, spec, "orders", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := (failbackPartition{LastMirrored: 4, End: 5, Base: 5, DivergentFrom: 5}); !plan.exists || plan.diverged || plan.rec.SourceMirror != "dr" || plan.rec.Partitions[0] != want {
		t.Errorf("plan %+v, want resuming orders/0 as %+v from mirror dr", plan, want)
	}

	// The old primary took two records after the failover.
	for range 2 {
		if err := dstCl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("late")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := PlanFailback(ctx, e.cfg, spec, "orders", false); !errors.Is(err, ErrFailbackRefused) || !strings.Contains(err.Error(), "partition 0 ends at 7, its last mirrored offset is 4 (2 offsets written after it)") {
		t.Errorf("diverged: %v, want refused saying what diverged", err)
	}
	plan, err = PlanFailback(ctx, e.cfg, spec, "orders", true)
	if err != nil || !plan.diverged || plan.rec.Partitions[0].DivergentFrom != 5 {
		t.Errorf("diverged, with recreate: %+v, %v; want the divergent records from 5 planned to move aside", plan, err)
	}
}
