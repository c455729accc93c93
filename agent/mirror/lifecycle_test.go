package mirror

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestPlanTopic: which partitions of a topic an operation moves, and where
// to, from their states; and that a refusal names the topic, or the
// partition when the topic's partitions are in different states.
func TestPlanTopic(t *testing.T) {
	tp := func(p int32) fetcher.TP { return fetcher.TP{Topic: "orders", Partition: p} }
	in := func(states ...partition.State) []partitionState {
		out := make([]partitionState, len(states))
		for i, s := range states {
			out[i] = partitionState{tp: tp(int32(i)), state: s}
		}
		return out
	}
	promoting := in(partition.Stopping, partition.Mirroring)
	promoting[0].stopMode = StopPromote
	shifted := in(partition.Failed)
	shifted[0].code = reason.MarkersRefused
	failingOver := in(partition.Stopping)
	failingOver[0].stopMode = StopFailover
	for _, tc := range []struct {
		name    string
		op      partition.Op
		parts   []partitionState
		want    []target
		refused string // the start of the refusal, "" for none
	}{
		{"pause mirroring", partition.OpPause, in(partition.Mirroring, partition.Initializing),
			[]target{{tp(0), partition.Mirroring, partition.Paused}, {tp(1), partition.Initializing, partition.Paused}}, ""},
		{"plain recover clears the failed only", partition.OpRecover, in(partition.Mirroring, partition.Failed, partition.Paused),
			[]target{{tp(1), partition.Failed, partition.Initializing}}, ""},
		{"recover with recreate takes the topic whole", partition.OpRecoverRecreate, in(partition.Mirroring, partition.Failed),
			[]target{{tp(0), partition.Mirroring, partition.Initializing}, {tp(1), partition.Failed, partition.Initializing}}, ""},
		{"recover of a topic with nothing failed is refused", partition.OpRecover, in(partition.Mirroring, partition.Mirroring),
			nil, "topic orders is MIRRORING"},
		{"promote asked again goes on", partition.OpStopPromote, promoting,
			[]target{{tp(0), partition.Stopping, partition.Stopping}, {tp(1), partition.Mirroring, partition.Stopped}}, ""},
		{"promote during a failover stop is refused", partition.OpStopPromote, failingOver,
			nil, "topic orders is STOPPING"},
		{"failover of a failed partition", partition.OpStopFailover, in(partition.Failed),
			[]target{{tp(0), partition.Failed, partition.Stopped}}, ""},
		{"a refusal in a mixed topic names the partition", partition.OpPause, in(partition.Mirroring, partition.Stopped),
			nil, "topic orders partition 1 is STOPPED"},
		{"plain recover of a shifted partition is refused", partition.OpRecover, shifted,
			nil, "topic orders is FAILED"},
		{"recover with recreate of a shifted partition", partition.OpRecoverRecreate, shifted,
			[]target{{tp(0), partition.Failed, partition.Initializing}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planTopic(tc.op, "orders", tc.parts)
			if tc.refused != "" {
				var te *partition.TransitionError
				if !errors.As(err, &te) || !strings.HasPrefix(err.Error(), tc.refused) {
					t.Fatalf("planTopic: %v, %v; want a transition error starting %q", got, err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("targets %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("target %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestAlreadyThere: the targets Execute leaves as they are.
func TestAlreadyThere(t *testing.T) {
	tg := func(from, to partition.State) target { return target{from: from, to: to} }
	for _, tc := range []struct {
		op   partition.Op
		tg   target
		want bool
	}{
		{partition.OpPause, tg(partition.Mirroring, partition.Paused), false},
		{partition.OpPause, tg(partition.Paused, partition.Paused), true},
		{partition.OpStopFailover, tg(partition.Stopping, partition.Stopping), false}, // retries a stop that failed
		{partition.OpStopFailover, tg(partition.Stopped, partition.Stopped), true},
		{partition.OpStopPromote, tg(partition.Stopping, partition.Stopping), true}, // the promote under way goes on
		{partition.OpResume, tg(partition.Initializing, partition.Mirroring), true},
		{partition.OpResume, tg(partition.Paused, partition.Mirroring), false},
		{partition.OpRecover, tg(partition.Failed, partition.Initializing), false},
	} {
		if got := alreadyThere(tc.op, tc.tg); got != tc.want {
			t.Errorf("alreadyThere(%s, %s → %s) = %v, want %v", tc.op, tc.tg.from, tc.tg.to, got, tc.want)
		}
	}
}

// TestRestoreOf: what a restarted runner does with each persisted state.
func TestRestoreOf(t *testing.T) {
	for _, tc := range []struct {
		pr   partitionRecord
		want restore
	}{
		{partitionRecord{State: partition.Mirroring}, restoreRun},
		{partitionRecord{State: partition.Initializing}, restoreRun},
		{partitionRecord{State: partition.Preparing}, restoreRun},
		{partitionRecord{State: partition.Paused}, restoreHold},
		{partitionRecord{State: partition.Failed}, restoreHold},
		{partitionRecord{State: partition.Stopped, StopMode: StopPromote}, restoreHold},
		{partitionRecord{State: partition.Stopping, StopMode: StopFailover}, restoreFinish},
		{partitionRecord{State: partition.Stopping}, restoreFinish}, // a record from before stop modes were kept
		{partitionRecord{State: partition.Stopping, StopMode: StopPromote}, restoreRun},
	} {
		if got := restoreOf(tc.pr); got != tc.want {
			t.Errorf("restoreOf(%s, mode %q) = %d, want %d", tc.pr.State, tc.pr.StopMode, got, tc.want)
		}
	}
}

// TestPromoteWait: what a promote waits for, from the source's bounds and
// the destination end.
func TestPromoteWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    leaders.Bounds
		err    error
		dstEnd int64
		want   string
	}{
		{"caught up", leaders.Bounds{HighWatermark: 10, LastStable: 10}, nil, 10, ""},
		{"source silent", leaders.Bounds{}, errors.New("dial tcp: refused"), 10, "the source to answer (dial tcp: refused)"},
		{"open transaction", leaders.Bounds{HighWatermark: 10, LastStable: 7}, nil, 10, "the source's open transactions to be decided (last stable offset 7, high watermark 10)"},
		{"lag", leaders.Bounds{HighWatermark: 10, LastStable: 10}, nil, 4, "the destination end 4 to reach the source high watermark 10 (lag 6); throttled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := promoteWait(tc.src, tc.err, tc.dstEnd, "; throttled"); got != tc.want {
				t.Errorf("promoteWait = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestGrowingNote: a promote says the lag grows only after waiting
// growingAfter, and only when the lag is higher than at the first wait.
func TestGrowingNote(t *testing.T) {
	start := time.Now()
	first := lagSample{lag: 100, at: start}
	for _, tc := range []struct {
		name string
		now  lagSample
		want string
	}{
		{"too soon", lagSample{lag: 500, at: start.Add(growingAfter / 2)}, ""},
		{"draining", lagSample{lag: 40, at: start.Add(2 * growingAfter)}, ""},
		{"steady", lagSample{lag: 100, at: start.Add(2 * growingAfter)}, ""},
		{"growing", lagSample{lag: 900, at: start.Add(2 * growingAfter)}, "; the lag grew from 100 to 900 in 20s: the source takes records faster"},
	} {
		if got := growingNote(first, tc.now); (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestLifecycleState: a promote keeps the deadline it was asked with when
// its wait starts again (after a reconnect), and gets a new one once it
// ended; describe's stop mode follows the state; a recover is taken once.
func TestLifecycleState(t *testing.T) {
	l := newLifecycle()
	tp := fetcher.TP{Topic: "orders", Partition: 1}
	asked := time.Now().Add(time.Minute)
	l.newPromote(tp, asked)
	if got := l.promoteDeadline(tp, asked.Add(time.Hour)); !got.Equal(asked) {
		t.Errorf("deadline after a restart of the wait: %v, want the one asked, %v", got, asked)
	}
	if mode, ok := l.stopMode(tp); !ok || mode != StopPromote {
		t.Errorf("stop mode %q, %v; want promote under way", mode, ok)
	}
	if got := l.modeOf(tp, partition.Stopping); got != StopPromote {
		t.Errorf("describe's stop mode while STOPPING: %q", got)
	}
	l.endPromote(tp)
	if _, ok := l.stopMode(tp); ok {
		t.Error("a stop is under way after the promote ended")
	}
	later := asked.Add(time.Hour)
	if got := l.promoteDeadline(tp, later); !got.Equal(later) {
		t.Errorf("deadline of a new promote: %v, want %v", got, later)
	}
	l.stopped(tp, StopPromote)
	l.endStop(tp)
	if got := l.modeOf(tp, partition.Stopped); got != StopPromote {
		t.Errorf("describe's stop mode when STOPPED: %q", got)
	}
	if got := l.modeOf(tp, partition.Mirroring); got != "" {
		t.Errorf("describe's stop mode when MIRRORING: %q", got)
	}

	l.recovering(tp)
	if !l.takeRecoveringTopic("orders") || l.takeRecoveringTopic("orders") {
		t.Error("the topic of a recovered partition is not taken exactly once")
	}
	if !l.takeRecovering(tp) || l.takeRecovering(tp) {
		t.Error("a recovered partition is not taken exactly once")
	}
}

// TestRunnerLifecycle runs the lifecycle operations on a runner mirroring
// between embedded clusters: pause keeps the position and persists the last
// mirrored offset, resume mirrors on, a failover and a promote stop with
// their modes and last mirrored offsets persisted, a stopped topic refuses
// anything but a stop, and a new runner of the mirror shows its stopped
// partitions as they were.
func TestRunnerLifecycle(t *testing.T) {
	e := newEnv(t, []devcluster.Option{devcluster.KfakeOptions(kfake.SeedTopics(2, "orders"), kfake.SeedTopics(1, "payments"))}, nil)
	e.produce("orders", 0, 5)
	e.produce("orders", 1, 3)
	e.produce("payments", 0, 2)
	rec := e.record("dr", "orders", "payments")
	m := e.start(rec)
	ctx := testCtx(t)
	waitFor(t, m, "mirroring", func(st mirrorapi.Mirror) bool {
		return allIn(st, "orders", partition.Mirroring, 5, 3) && allIn(st, "payments", partition.Mirroring, 2)
	})

	do := func(op partition.Op, topics ...string) error {
		t.Helper()
		p, err := m.Plan(ctx, op, topics)
		if err != nil {
			return err
		}
		return m.Execute(ctx, p)
	}
	persisted := func(p int32) partitionRecord {
		t.Helper()
		var pr partitionRecord
		if !ReadRecord(e.cfg.Store, PartitionKey("dr", fetcher.TP{Topic: "orders", Partition: p}), &pr) {
			t.Fatalf("no record of orders/%d", p)
		}
		return pr
	}

	if err := do(partition.OpPause, "orders"); err != nil {
		t.Fatal(err)
	}
	st := m.Status() // pause returns once every partition has paused
	if !allIn(st, "orders", partition.Paused, 5, 3) {
		t.Fatalf("after pause: %+v", partitionsOfTopic(st, "orders"))
	}
	if pr := persisted(0); pr.State != partition.Paused || pr.LastMirroredOffset != 4 {
		t.Errorf("orders/0 persisted as %+v, want PAUSED at 4", pr)
	}
	e.produce("orders", 0, 2)
	if err := do(partition.OpResume, "orders"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "resumed", func(st mirrorapi.Mirror) bool { return allIn(st, "orders", partition.Mirroring, 7, 3) })

	if err := do(partition.OpStopFailover, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := do(partition.OpStopPromote, "payments"); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, m, "stopped", func(st mirrorapi.Mirror) bool {
		return allIn(st, "orders", partition.Stopped, 7, 3) && allIn(st, "payments", partition.Stopped, 2)
	})
	for _, p := range partitionsOfTopic(st, "orders") {
		if p.StopMode != string(StopFailover) {
			t.Errorf("orders/%d: stop mode %q, want failover", p.Partition, p.StopMode)
		}
	}
	pay := partitionsOfTopic(st, "payments")[0]
	if pay.StopMode != string(StopPromote) || pay.ReasonCode != reason.SourceNotFenced {
		t.Errorf("payments/0: stop mode %q, reason %s %q; want promote, and no source fence said", pay.StopMode, pay.ReasonCode, pay.Reason)
	}
	if pr := persisted(0); pr.State != partition.Stopped || pr.StopMode != StopFailover || pr.LastMirroredOffset != 6 {
		t.Errorf("orders/0 persisted as %+v, want STOPPED by failover at 6", pr)
	}

	var te *partition.TransitionError
	if err := do(partition.OpPause, "orders"); !errors.As(err, &te) || te.Subject != "topic orders" {
		t.Errorf("pause of a stopped topic: %v, want refused for the topic", err)
	}

	// Another run of the mirror (an agent restart) shows them as they
	// were, without running them.
	m.Stop()
	m2 := e.start(rec)
	st = waitFor(t, m2, "restored", func(st mirrorapi.Mirror) bool {
		return allIn(st, "orders", partition.Stopped, 7, 3) && allIn(st, "payments", partition.Stopped, 2)
	})
	for _, ts := range st.Topics {
		for _, p := range ts.Partitions {
			if want := map[string]string{"orders": "failover", "payments": "promote"}[ts.Name]; p.StopMode != want {
				t.Errorf("%s/%d after a restart: stop mode %q, want %q", ts.Name, p.Partition, p.StopMode, want)
			}
		}
	}
}

// TestStopFinishedAfterRestartKeepsClosedAt: an agent that closed the
// transaction of aborted records of a partition STOPPING for a failover,
// and died before it recorded STOPPED, left the abort marker at the
// destination end; the agent that finishes the stop reports the offset
// before the recorded close as last mirrored, not the marker.
func TestStopFinishedAfterRestartKeepsClosedAt(t *testing.T) {
	e := newEnv(t, []devcluster.Option{devcluster.KfakeOptions(kfake.SeedTopics(1, "orders"))}, nil)
	e.produce("orders", 0, 3)
	rec := e.record("dr", "orders")
	m := e.start(rec)
	waitFor(t, m, "mirroring", func(st mirrorapi.Mirror) bool { return allIn(st, "orders", partition.Mirroring, 3) })
	m.Stop()
	ctx := testCtx(t)
	tp := fetcher.TP{Topic: "orders", Partition: 0}
	// What the dead agent left: the record of the stop with the close,
	// and the abort marker after the mirrored records, at 3.
	if err := WriteRecord(ctx, e.cfg.Store, PartitionKey("dr", tp), partitionRecord{State: partition.Stopping, StopMode: StopFailover, LastMirroredOffset: 2, ClosedAt: 3}); err != nil {
		t.Fatal(err)
	}
	x, err := e.cfg.Writer.MarkersAsync(ctx, writer.Producer{ID: 1 << 62}, "orders", 0, 1)
	if err == nil {
		_, err = x.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("writing the abort marker: %v", err)
	}
	m2 := e.start(rec)
	waitFor(t, m2, "stopped", func(st mirrorapi.Mirror) bool { return allIn(st, "orders", partition.Stopped, 4) })
	var pr partitionRecord
	if !ReadRecord(e.cfg.Store, PartitionKey("dr", tp), &pr) || pr.State != partition.Stopped || pr.LastMirroredOffset != 2 {
		t.Errorf("orders/0 persisted as %+v, want STOPPED at 2 (the marker at 3 stands for no source offset)", pr)
	}
}

// TestRecoverShowsAtOnce: a recovered partition reads INITIALIZING with
// the recovering reason as soon as the recover returns, not FAILED until
// the mirror's next look starts it (terraform apply polls for it).
func TestRecoverShowsAtOnce(t *testing.T) {
	e := newEnv(t, nil, nil)
	m := New(e.cfg, e.record("dr", "orders"))
	tp := fetcher.TP{Topic: "orders", Partition: 0}
	rp, _ := m.take(tp)
	rp.pm.Restore(partition.Failed, reason.New(reason.ForeignWrite, "a foreign write"))
	m.recover(tp)
	if st := rp.pm.Status(); st.State != partition.Initializing || st.ReasonCode != reason.Recovering {
		t.Errorf("after recover: %s %s %q, want INITIALIZING recovering", st.State, st.ReasonCode, st.Reason)
	}
}

// TestClosedAtKept: where a partition closed its transaction of aborted
// records (noteClosed) stays in its record through the states that may
// still finish a failover stop without running again, FAILED and STOPPING
// for a failover, and goes with any other; a restored partition mirror
// gets it back (closedAt).
func TestClosedAtKept(t *testing.T) {
	ctx := testCtx(t)
	m := New(&Config{Store: testStore(t), Logger: hclog.NewNullLogger()}, Record{Spec: mirrorspec.Spec{Name: "closed"}})
	for i, tc := range []struct {
		then []partitionRecord // written after the close, in order
		want int64
	}{
		{nil, 42},
		{[]partitionRecord{{State: partition.Stopping, StopMode: StopFailover}}, 42},
		{[]partitionRecord{{State: partition.Stopping}, {State: partition.Stopping, Reason: "timed out"}}, 42},
		{[]partitionRecord{{State: partition.Stopping, StopMode: StopFailover}, {State: partition.Stopped, StopMode: StopFailover}}, 0},
		{[]partitionRecord{{State: partition.Initializing}, {State: partition.Failed}}, 0}, // a recover, then a new failure
		{[]partitionRecord{{State: partition.Stopping, StopMode: StopPromote}}, 0},         // a promote runs again
	} {
		tp := fetcher.TP{Topic: "t", Partition: int32(i)}
		m.persist(tp, partitionRecord{State: partition.Failed})
		m.noteClosed(ctx, tp, 42)
		for _, pr := range tc.then {
			m.persist(tp, pr)
		}
		if got := m.closedAt(tp); got != tc.want {
			t.Errorf("case %d: closed at %d after %v, want %d", i, got, tc.then, tc.want)
		}
	}
}

// testStore is a state store on a cluster of its own, for a runner put
// together by a test.
func testStore(t *testing.T) Store {
	t.Helper()
	dst := devclustertest.Start(t)
	store, err := statestore.Open(testCtx(t), []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}
