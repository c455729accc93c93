package e2e

// Failback drills (DESIGN §4): a topic mirrored P → D and stopped is mirrored
// back D → P by a second agent whose destination is the old primary P.
// Clean: P ends at the last mirrored offset, mirroring back resumes there
// and copies nothing twice. Divergent: P took records after it; the failback
// is refused, and with recreate those records land in a side topic, record
// by record, and P becomes identical to D.

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
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/verify"
)

// reversed is the pair seen by the failback mirror: D is its source, P its
// destination.
func (p *pair) reversed() *pair {
	return &pair{src: p.dst, dst: p.src, srcCl: p.dstCl, dstCl: p.srcCl, srcAdm: p.dstAdm, dstAdm: p.srcAdm,
		eng: p.eng, topic: p.topic, suffix: p.suffix, stateTopic: p.stateTopic}
}

// startBackAgent runs a second agent whose destination is p's source (the
// old primary) and whose mirror mirrorName, without topics yet, reads p's
// destination. With auth it authenticates as the agent, a super user on
// both clusters, and fences with ACLs. Its state topic has the name of the
// first agent's (p.stateTopic, this test's own on a shared cluster): the
// failback reads the last mirrored offsets from the state topic of that
// name on its source.
func (p *pair) startBackAgent(t *testing.T, auth bool) *agent {
	t.Helper()
	spec := mirrorspec.Spec{Name: mirrorName, Source: mirrorspec.Source{BootstrapServers: p.dst.Bootstrap()}}
	return p.runBackAgent(t, auth, &spec)
}

// runBackAgent runs the failback agent with spec applied, or, with nil,
// from its state topic (a restart).
func (p *pair) runBackAgent(t *testing.T, auth bool, spec *mirrorspec.Spec) *agent {
	t.Helper()
	opts := func(seeds []string) []kgo.Opt {
		o := []kgo.Opt{kgo.SeedBrokers(seeds...)}
		if auth {
			o = append(o, saslPlain(agentUser, agentPass))
		}
		return o
	}
	cfg := coordinator.Config{
		Destination:     opts(p.src.Bootstrap()),
		SourceOpts:      func(s mirrorspec.Source) []kgo.Opt { return opts(s.BootstrapServers) },
		StateTopic:      p.stateTopic,
		RefreshInterval: 200 * time.Millisecond,
		StopTimeout:     10 * time.Second,
		PromoteTimeout:  time.Minute,
		Logger:          testLogger(t, "back"),
	}
	if auth {
		cfg.SourceFence = coordinator.ACLSourceFence{}
	}
	var specs []mirrorspec.Spec
	if spec != nil {
		specs = append(specs, *spec)
	}
	run := coordinatortest.Start(t, cfg, specs...)
	return &agent{co: run.Coordinator, run: run}
}

// assertSame compares the whole topic on both clusters of p with verify, at
// both isolation levels.
func (p *pair) assertSame(t *testing.T, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := verify.Compare(ctx, p.srcCl, p.dstCl, verify.Options{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	var compared int64
	for _, pr := range rep.Partitions {
		compared += pr.Compared
	}
	if !rep.OK() || compared == 0 {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("%s differs (%d records compared):\n%s", topic, compared, b.String())
	}
}

// TestFailbackClean: P → D is promoted (source writes fenced), D takes new
// writes, and a failback D → P resumes at each partition's last mirrored
// offset: P's own records stay as they are, D's new records arrive at the
// same offsets, verify passes, the fence serves as the read-only ACL while
// mirroring back, and P is writable again once the failback is promoted.
// A failback while the topic still mirrors into D is refused.
func TestFailbackClean(t *testing.T) {
	forEngines(t, testFailbackClean)
}

func testFailbackClean(t *testing.T, e engine) {
	const parts = 3
	p := securedPairOn(t, e, lifecycleTopic, parts, true)
	topic := p.topic
	a := p.securedAgent(t, topic, true)
	src := failClient(t, append(p.srcAgentOpts(true), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	txn := failClient(t, append(p.srcAgentOpts(true), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(p.name("app-failback")))...)
	ctx := testCtx(t)
	for part := range int32(parts) {
		produceN(t, src, topic, part, 40, "before", false)
	}
	beginTxn(t, txn, topic, 0, 5, "committed")
	endTxn(t, ctx, txn, true)
	beginTxn(t, txn, topic, 1, 4, "aborted")
	endTxn(t, ctx, txn, false)
	produceN(t, src, topic, 1, 10, "after-txn", false)
	p.waitMirrored(t, a, topic, failWait)

	b := p.startBackAgent(t, true)
	back := p.reversed()
	err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true})
	if !errors.Is(err, coordinator.ErrFailbackRefused) || !strings.Contains(err.Error(), `is MIRRORING in mirror "dr" on the source cluster: stop the topic there first`) {
		t.Fatalf("failback while the topic mirrors into its source: %v", err)
	}

	if err := a.co.StopTopics(ctx, mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	stopped := waitStates(t, a, topic, parts, partition.Stopped, failWait)
	waitDeny(t, p.srcCl, topic, true)
	assertRefused(t, p.src, topic, parts, "after the promote")
	oldEnds := ends(t, p.srcAdm, topic)
	for part, st := range stopped {
		if oldEnds[part] != st.LastMirrored+1 {
			t.Fatalf("partition %d: P ends at %d, last mirrored offset %d: not a clean failback", part, oldEnds[part], st.LastMirrored)
		}
	}
	// D is the primary now.
	app := appClient(t, p.dst)
	for part := range int32(parts) {
		produceN(t, app, topic, part, 30, "on D", false)
	}

	if err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true}); err != nil {
		t.Fatalf("clean failback: %v", err)
	}
	back.waitMirrored(t, b, topic, failWait)
	back.assertSame(t, topic)
	ts := b.topicStatus(topic)
	fb := ts.Failback
	if fb == nil || fb.SourceMirror != mirrorName || fb.Recreated || fb.DivergentTopic != "" || fb.DivergentRecords != 0 || len(fb.Partitions) != parts {
		t.Fatalf("failback in describe: %+v", fb)
	}
	for _, fp := range fb.Partitions {
		if fp.ResumedAt != oldEnds[fp.Partition] || fp.DestinationEnd != oldEnds[fp.Partition] || fp.LastMirroredOffset != stopped[fp.Partition].LastMirrored {
			t.Errorf("partition %d: %+v; want it resumed at P's end %d, the last mirrored offset %d", fp.Partition, fp, oldEnds[fp.Partition], stopped[fp.Partition].LastMirrored)
		}
	}
	// Nothing below the resume point was written again: P still ends
	// where D does (waitMirrored), so D's new records were the only ones
	// copied.
	// The promote's fence is the read-only ACL of the failback topic.
	if !ts.ReadOnlyEnforced {
		t.Errorf("failback topic not read-only: %q", ts.ReadOnlyReason)
	}
	assertRefused(t, p.src, topic, parts, "while failing back")

	// New writes on D arrive on P at the same offsets, across a restart
	// of the failback agent too.
	b.stop()
	for part := range int32(parts) {
		produceN(t, app, topic, part, 20, "more on D", false)
	}
	b = p.runBackAgent(t, true, nil)
	back.waitMirrored(t, b, topic, failWait)
	back.assertSame(t, topic)

	// The failback ends like any mirror: promoted, P is writable again,
	// right after what was mirrored back.
	if err := b.co.StopTopics(ctx, mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	final := waitStates(t, b, topic, parts, partition.Stopped, failWait)
	waitReadOnly(t, b, topic, false)
	waitDeny(t, p.srcCl, topic, false)
	back.assertWritesAfterMirrored(t, appClient(t, p.src), topic, final, "P is primary again")
}

// sideRecord is what the side topic must hold of one divergent record.
type sideRecord struct {
	key, value []byte
	headers    []kgo.RecordHeader
	ts         time.Time
}

func (r sideRecord) String() string {
	return fmt.Sprintf("key %q value %q headers %v timestamp %d", r.key, r.value, r.headers, r.ts.UnixMilli())
}

// readVisible reads n records of topic/part from offset at read_committed
// with a plain consumer.
func readVisible(t *testing.T, seeds []string, topic string, part int32, from int64, n int) []sideRecord {
	t.Helper()
	cl := failClient(t, kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(from)}}))
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	var out []sideRecord
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/%d from %d: %d of %d records: %v", topic, part, from, len(out), n, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("reading %s/%d: %v", topic, part, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, sideRecord{key: r.Key, value: r.Value, headers: r.Headers, ts: r.Timestamp})
		})
	}
	return out
}

// TestFailbackDivergent: P → D fails over while P still takes writes, so P
// ends after the last mirrored offset (plain records with headers, a
// committed and an aborted transaction). The failback is refused, naming
// the partition and offsets and saying recreate, and changes nothing; with
// recreate the records a consumer saw after the last mirrored offset are in
// the side topic record by record, describe reports it, and P becomes
// identical to D.
func TestFailbackDivergent(t *testing.T) {
	forEngines(t, testFailbackDivergent)
}

func testFailbackDivergent(t *testing.T, e engine) {
	const parts = 2
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: parts})
	topic := p.topic
	a := lifecycleAgent(t, p, true)
	src := p.producer(t)
	for part := range int32(parts) {
		produceN(t, src, topic, part, 30, "before", false)
	}
	p.waitMirrored(t, a, topic, failWait)
	ctx := testCtx(t)
	if err := a.co.StopTopics(ctx, mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	stopped := waitStates(t, a, topic, parts, partition.Stopped, failWait)
	lmo0 := stopped[0].LastMirrored

	// P was not fenced: partition 0 takes records after the failover.
	tail := make([]*kgo.Record, 7)
	for i := range tail {
		tail[i] = &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "late %d", i),
			Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("P")}}, Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))}
	}
	if err := src.ProduceSync(ctx, tail...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn := p.txnProducer(t, p.name("late-txn"))
	beginTxn(t, txn, topic, 0, 3, "late committed")
	endTxn(t, ctx, txn, true)
	beginTxn(t, txn, topic, 0, 2, "late aborted")
	endTxn(t, ctx, txn, false)
	// On Kafka EndTxn returns before the coordinator has written the
	// marker: P's end is the one after it.
	waitMarkersWritten(t, p.srcAdm, topic)
	pEnds := ends(t, p.srcAdm, topic)
	want := readVisible(t, p.src.Bootstrap(), topic, 0, lmo0+1, 10)

	// D is the primary.
	dst := p.dstProducer(t)
	for part := range int32(parts) {
		produceN(t, dst, topic, part, 25, "on D", false)
	}

	b := p.startBackAgent(t, false)
	err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true})
	wantMsg := fmt.Sprintf("partition 0 ends at %d, its last mirrored offset is %d (%d offsets written after it)", pEnds[0], lmo0, pEnds[0]-lmo0-1)
	if !errors.Is(err, coordinator.ErrFailbackRefused) || !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), "recreate") ||
		strings.Contains(err.Error(), "partition 1 ") {
		t.Fatalf("failback into a diverged topic: %v; want a refusal saying %q and recreate", err, wantMsg)
	}
	if m, _ := b.status(); len(m.Topics) != 0 {
		t.Fatalf("the refused failback added topics: %+v", m.Topics)
	}
	if now := ends(t, p.srcAdm, topic); fmt.Sprint(now) != fmt.Sprint(pEnds) {
		t.Fatalf("the refused failback changed P: ends %v, before %v", now, pEnds)
	}
	if err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Recreate: true}); err == nil || !strings.Contains(err.Error(), "recreate: applies to a failback") {
		t.Fatalf("recreate without failback: %v", err)
	}

	if err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true, Recreate: true}); err != nil {
		t.Fatalf("failback with recreate: %v", err)
	}
	back := p.reversed()
	back.waitMirrored(t, b, topic, failWait)
	back.assertSame(t, topic)

	fb := b.topicStatus(topic).Failback
	if fb == nil || !fb.Recreated || !strings.HasPrefix(fb.DivergentTopic, topic+".kmirror-divergent-") || fb.DivergentRecords != int64(len(want)) {
		t.Fatalf("failback in describe: %+v; want recreated, %d records in the side topic", fb, len(want))
	}
	for _, fp := range fb.Partitions {
		wantN := int64(0)
		if fp.Partition == 0 {
			wantN = int64(len(want))
		}
		if fp.DivergentRecords != wantN || fp.ResumedAt != 0 || fp.DestinationEnd != pEnds[fp.Partition] {
			t.Errorf("partition %d: %+v; want %d divergent records, resumed at 0, destination end %d", fp.Partition, fp, wantN, pEnds[fp.Partition])
		}
	}
	got := readVisible(t, p.src.Bootstrap(), fb.DivergentTopic, 0, 0, len(want))
	for i := range want {
		w, g := want[i], got[i]
		if !bytes.Equal(w.key, g.key) || !bytes.Equal(w.value, g.value) || fmt.Sprint(w.headers) != fmt.Sprint(g.headers) || !w.ts.Equal(g.ts) {
			t.Errorf("side topic record %d: %s; want %s", i, g, w)
		}
	}
	if sideEnds := ends(t, p.srcAdm, fb.DivergentTopic); sideEnds[0] != int64(len(want)) || sideEnds[1] != 0 {
		t.Errorf("side topic ends %v; want %d records in partition 0 and none in 1", sideEnds, len(want))
	}
}

// waitMarkersWritten waits until no transaction is open on any partition of
// topic (the last stable offset is the high watermark): the markers of the
// transactions ended so far are in the log. EndTxn returns once the
// coordinator has decided; Kafka writes the markers after that.
func waitMarkersWritten(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	for {
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hw.Error()
		}
		var lso kadm.ListedOffsets
		if err == nil {
			lso, err = adm.ListCommittedOffsets(ctx, topic)
		}
		if err == nil {
			err = lso.Error()
		}
		if err == nil {
			open := false
			hw.Each(func(o kadm.ListedOffset) {
				if l, _ := lso.Lookup(topic, o.Partition); l.Offset != o.Offset {
					open = true
				}
			})
			if !open {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: a transaction still open (last stable offsets %v, high watermarks %v): %v", topic, lso, hw, err)
		case <-time.After(pollEvery):
		}
	}
}

// TestFailbackDiffersBeforeLMO: P ends exactly at the last mirrored offset,
// but its records are not the ones mirrored (the topic was recreated there
// and refilled). Resuming would take them for D's: the failback compares
// the records below the resume point with D's and refuses, naming the first
// differing offset; with recreate they all go to the side topic.
func TestFailbackDiffersBeforeLMO(t *testing.T) {
	forEngines(t, testFailbackDiffersBeforeLMO)
}

func testFailbackDiffersBeforeLMO(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 1})
	topic := p.topic
	a := lifecycleAgent(t, p, true)
	produceN(t, p.producer(t), topic, 0, 20, "before", false)
	p.waitMirrored(t, a, topic, failWait)
	ctx := testCtx(t)
	if err := a.co.StopTopics(ctx, mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	lmo := waitStates(t, a, topic, 1, partition.Stopped, failWait)[0].LastMirrored
	p.replaceTopic(t, p.srcAdm, topic, 1)
	produceN(t, p.producer(t), topic, 0, int(lmo+1), "imposter", false)

	b := p.startBackAgent(t, false)
	err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true})
	wantMsg := fmt.Sprintf("partition 0 ends at %d, at or before its last mirrored offset %d, but its records differ from the source's from offset 0", lmo+1, lmo)
	if !errors.Is(err, coordinator.ErrFailbackRefused) || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("failback into a topic with other records: %v; want a refusal saying %q", err, wantMsg)
	}
	if err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true, Recreate: true}); err != nil {
		t.Fatal(err)
	}
	back := p.reversed()
	back.waitMirrored(t, b, topic, failWait)
	back.assertSame(t, topic)
	fb := b.topicStatus(topic).Failback
	if fb == nil || !fb.Recreated || fb.DivergentRecords != lmo+1 {
		t.Fatalf("failback in describe: %+v; want recreated with %d records in the side topic", fb, lmo+1)
	}
	got := readVisible(t, p.src.Bootstrap(), fb.DivergentTopic, 0, 0, int(lmo+1))
	for i, r := range got {
		if want := fmt.Sprintf("imposter %d", i); string(r.value) != want {
			t.Errorf("side topic record %d: %s, want value %q", i, r, want)
		}
	}
}

// TestFailbackRemovesFence: the failback agent is not a super user of the
// old primary P (it has ALLOW ALL there, which the promote's DENY WRITE
// overrides). The failback removes the fence, mirrors back at identical
// offsets, and describe says the topic is not read-only and why. P needs a
// user the shared clusters lack, with rights over the whole cluster: on
// Kafka it is a secured cluster of this test's own (D is the shared
// secured destination).
func TestFailbackRemovesFence(t *testing.T) {
	forEngines(t, testFailbackRemovesFence)
}

func testFailbackRemovesFence(t *testing.T, e engine) {
	const parts = 2
	const backUser, backPass = "back", "back-pass"
	p := newPairWithSource(t, e, startOwnSource(t, e, append(securedOpts("src"), devcluster.SASLUser(backUser, backPass))...),
		pairOpts{secured: true, topic: lifecycleTopic, partitions: parts})
	topic := p.topic
	allowApp(t, p.dstAdm, topic)
	ctx := testCtx(t)
	// back may do anything on P, but is no super user.
	allowAll := kadm.NewACLs().Allow("User:" + backUser).AllowHosts("*").Operations(kadm.OpAll).
		Clusters().Topics("*").Groups("*").TransactionalIDs("*").ResourcePatternType(kadm.ACLPatternLiteral)
	if rs, err := p.srcAdm.CreateACLs(ctx, allowAll); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range rs {
			if r.Err != nil {
				t.Fatalf("creating back's ACLs: %v", r.Err)
			}
		}
	}

	a := p.securedAgent(t, topic, true)
	src := failClient(t, append(p.srcAgentOpts(true), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	for part := range int32(parts) {
		produceN(t, src, topic, part, 25, "before", false)
	}
	p.waitMirrored(t, a, topic, failWait)
	if err := a.co.StopTopics(ctx, mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, topic, parts, partition.Stopped, failWait)
	waitDeny(t, p.srcCl, topic, true)
	assertRefused(t, p.src, topic, parts, "after the promote")
	app := appClient(t, p.dst)
	for part := range int32(parts) {
		produceN(t, app, topic, part, 15, "on D", false)
	}

	cfg := coordinator.Config{
		Destination: []kgo.Opt{kgo.SeedBrokers(p.src.Bootstrap()...), saslPlain(backUser, backPass)},
		SourceOpts: func(s mirrorspec.Source) []kgo.Opt {
			return []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...), saslPlain(agentUser, agentPass)}
		},
		// The failback reads the first agent's state topic, of this name,
		// on D.
		StateTopic:      p.stateTopic,
		RefreshInterval: 200 * time.Millisecond,
		Logger:          testLogger(t, "back"),
	}
	run := coordinatortest.Start(t, cfg, mirrorspec.Spec{Name: mirrorName, Source: mirrorspec.Source{BootstrapServers: p.dst.Bootstrap()}})
	b := &agent{co: run.Coordinator, run: run}
	if err := b.co.AddTopicsWith(ctx, mirrorName, coordinator.AddRequest{Topics: []string{topic}, Failback: true}); err != nil {
		t.Fatalf("failback by an agent that is not a super user of P: %v", err)
	}
	back := p.reversed()
	back.waitMirrored(t, b, topic, failWait)
	back.assertSame(t, topic)
	ts := b.topicStatus(topic)
	if ts.ReadOnlyEnforced || !strings.Contains(ts.ReadOnlyReason, "super user") {
		t.Errorf("read-only %v (%q); want false, saying the agent is not a super user", ts.ReadOnlyEnforced, ts.ReadOnlyReason)
	}
	// The promote's DENY WRITE on P is gone (back's writes went through
	// it already, so the broker has applied the delete).
	waitDeny(t, p.srcCl, topic, false)
}
