package mirror

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestHomeHoldsNewPartitionsBack: the home of a mirror in a group of
// several agents writes no record of a new partition but its unplaced
// one, and runs none of them, describing them as waiting for placement;
// a partition the group gives its agent starts, the others stay held; a
// partition with a record that is not unplaced (another agent runs it,
// given it by a generation this runner has not seen) is never started by
// the home; in a group of one, a new partition starts at once.
func TestHomeHoldsNewPartitionsBack(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := testCtx(t)
	for _, topic := range []string{"orders", "solo"} {
		if resp, err := kadm.NewClient(e.srcCl).CreateTopic(ctx, 3, -1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("creating source topic %s: %v, %v", topic, err, resp.Err)
		}
		for p := range int32(3) {
			e.produce(topic, p, 5)
		}
	}
	tp := func(p int32) fetcher.TP { return fetcher.TP{Topic: "orders", Partition: p} }

	// Partition 2 has a record another agent wrote: the group gave it to
	// that agent in a generation this one has not seen yet.
	if err := WriteRecord(ctx, e.cfg.Store, PartitionKey("dr", tp(2)), partitionRecord{State: partition.Mirroring, LastMirroredOffset: -1}); err != nil {
		t.Fatal(err)
	}
	given := map[fetcher.TP]func() error{}
	none := func(fetcher.TP) bool { return false }
	m := New(e.cfg, e.record("dr", "orders"))
	m.Share(true, nil)
	m.SetParts(given, none, true)
	ctx2, cancel := context.WithCancel(ctx)
	defer func() { cancel(); m.Wait() }()
	m.Start(ctx2)

	held := func(st mirrorapi.Mirror, p int32) bool {
		for _, ps := range partitionsOfTopic(st, "orders") {
			if ps.Partition == p {
				return ps.State == mirrorapi.StateInitializing && ps.ReasonCode == reason.AwaitingPlacement
			}
		}
		return false
	}
	waitFor(t, m, "partitions 0 and 1 held back", func(st mirrorapi.Mirror) bool { return held(st, 0) && held(st, 1) })
	for p := range int32(2) {
		v, ok := e.cfg.Store.Get(PartitionKey("dr", tp(p)))
		if spreads, unplaced := Placement(v); !ok || !spreads || !unplaced {
			t.Errorf("partition %d held back: record %s, want an unplaced one", p, v)
		}
	}
	if st := m.Status(); len(partitionsOfTopic(st, "orders")) != 2 {
		t.Errorf("describe shows %+v, want partitions 0 and 1 held back and 2 (run elsewhere) not at all", partitionsOfTopic(st, "orders"))
	}
	if m.holdBack(ctx, tp(2)) != true {
		t.Error("the home would start partition 2, whose record another agent wrote")
	}

	// The group gives partition 0 to this agent: it starts and mirrors.
	given = map[fetcher.TP]func() error{tp(0): func() error { return nil }}
	m.SetParts(given, func(x fetcher.TP) bool { return x == tp(0) }, true)
	st := waitFor(t, m, "partition 0 mirroring", func(st mirrorapi.Mirror) bool {
		for _, ps := range partitionsOfTopic(st, "orders") {
			if ps.Partition == 0 {
				return ps.State == mirrorapi.StateMirroring && ps.DestinationOffset == 5
			}
		}
		return false
	})
	if !held(st, 1) {
		t.Errorf("partition 1 is not held back any more: %+v", partitionsOfTopic(st, "orders"))
	}
	ends, err := e.dstAdm.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int32]int64{0: 5, 1: 0, 2: 0} {
		if o, _ := ends.Lookup("orders", p); o.Offset != want {
			t.Errorf("destination orders/%d ends at %d, want %d", p, o.Offset, want)
		}
	}

	// A group of one: no hold.
	solo := New(e.cfg, e.record("solo", "solo"))
	solo.Share(true, nil)
	solo.SetParts(map[fetcher.TP]func() error{}, none, false)
	ctx3, cancel3 := context.WithCancel(ctx)
	defer func() { cancel3(); solo.Wait() }()
	solo.Start(ctx3)
	waitFor(t, solo, "a lone agent's partitions mirroring", func(st mirrorapi.Mirror) bool { return allIn(st, "solo", mirrorapi.StateMirroring, 5, 5, 5) })
}
