package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/verify"
)

// groupAgent is one agent of a group mode test: its membership and its
// coordinator, in the test process.
type groupAgent struct {
	id     string
	member *membership.Member
	co     *coordinatortest.Agent
	owner  *countingOwner
}

// countingOwner counts the partitions its agent hands on.
type countingOwner struct {
	*membership.Member
	handed atomic.Int64
}

func (o *countingOwner) Released(items ...string) {
	for _, k := range items {
		if strings.HasPrefix(k, "partition/") {
			o.handed.Add(1)
		}
	}
	o.Member.Released(items...)
}

func startGroupAgent(t *testing.T, dst []kgo.Opt, group, id string) *groupAgent {
	t.Helper()
	log := hclog.New(&hclog.LoggerOptions{Name: id, Output: devclustertest.Writer(t), Level: hclog.Info})
	var co sync.Mutex
	var items func() []membership.Item
	m, err := membership.Join(membership.Config{
		Destination: dst, Group: group, AgentID: id,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, WriteGrace: 500 * time.Millisecond,
		Items: func() []membership.Item {
			co.Lock()
			defer co.Unlock()
			if items == nil {
				return nil
			}
			return items()
		},
		Logger: log.Named("membership"),
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &groupAgent{id: id, member: m, owner: &countingOwner{Member: m}}
	a.co = coordinatortest.Start(t, coordinator.Config{
		Destination: dst, RefreshInterval: 200 * time.Millisecond, Owner: a.owner, Logger: log,
	})
	co.Lock()
	items = a.co.Items
	co.Unlock()
	m.Refresh()
	t.Cleanup(a.stop)
	return a
}

// stop stops the coordinator (every write returned), then leaves the group.
func (a *groupAgent) stop() {
	a.co.Stop()
	a.member.Close()
}

// running returns the agents that run each mirror's home (its name) and
// each of its partitions ("NAME/TOPIC/P").
func running(agents []*groupAgent) map[string][]string {
	out := map[string][]string{}
	for _, a := range agents {
		for _, m := range a.co.Describe() {
			if m.Share == "" {
				out[m.Name] = append(out[m.Name], a.id)
			}
			for _, t := range m.Topics {
				for _, p := range t.Partitions {
					if p.ReasonCode == reason.AwaitingPlacement {
						continue // held back by its home, run nowhere yet
					}
					k := fmt.Sprintf("%s/%s/%d", m.Name, t.Name, p.Partition)
					out[k] = append(out[k], a.id)
				}
			}
		}
	}
	return out
}

// onlyOne watches, until stop, that no partition runs on two agents at once
// (in the describe of each agent watched), and reports any that did: a
// write of two agents with the mirror's one producer id and the same
// sequences would pass verify, so only this sees it.
type onlyOne struct {
	mu      sync.Mutex
	agents  []*groupAgent
	twice   []string
	samples int
	done    chan struct{}
	once    sync.Once
	stopped chan struct{}
}

func watchOnlyOne(agents ...*groupAgent) *onlyOne {
	o := &onlyOne{agents: agents, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(o.stopped)
		for {
			select {
			case <-o.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			o.mu.Lock()
			watched := slices.Clone(o.agents)
			o.mu.Unlock()
			var twice []string
			for k, who := range running(watched) {
				if strings.Contains(k, "/") && len(who) > 1 {
					twice = append(twice, fmt.Sprintf("%s on %v at %s", k, who, time.Now().Format("15:04:05.000")))
				}
			}
			o.mu.Lock()
			o.samples++
			o.twice = append(o.twice, twice...)
			o.mu.Unlock()
		}
	}()
	return o
}

// set changes the agents watched: one that stops is left out before it
// stops (a stopped coordinator still describes what it ran).
func (o *onlyOne) set(agents ...*groupAgent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.agents = agents
}

// end ends the watch.
func (o *onlyOne) end() {
	o.once.Do(func() { close(o.done) })
	<-o.stopped
}

// stop ends the watch and fails t if a partition ran on two agents.
func (o *onlyOne) stop(t *testing.T) {
	t.Helper()
	o.end()
	if len(o.twice) > 0 {
		t.Errorf("partitions ran on two agents at once (%d of %d samples): %v", len(o.twice), o.samples, o.twice[:min(len(o.twice), 5)])
	} else {
		t.Logf("no partition ran on two agents at once in %d samples", o.samples)
	}
}

// TestGroupMode: three agents share four mirrors of two partitions each:
// each home and each partition run by exactly one agent, the partitions
// spread over all three; one agent stops, the others take its share on,
// and every destination topic is identical to its source, record for
// record and offset for offset.
func TestGroupMode(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) { testGroupMode(t, engine) })
	}
}

func testGroupMode(t *testing.T, engine devcluster.EngineKind) {
	src := devclustertest.Start(t, devcluster.Engine(engine), devcluster.Name("group-src"))
	dst := devclustertest.Start(t, devcluster.Engine(engine), devcluster.Name("group-dst"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srcCl, err := kgo.NewClient(kgo.SeedBrokers(src.Bootstrap()...), kgo.DefaultProduceTopic("unused"))
	if err != nil {
		t.Fatal(err)
	}
	defer srcCl.Close()
	dstCl, err := kgo.NewClient(kgo.SeedBrokers(dst.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dstCl.Close()
	const mirrors = 4
	var topics []string
	for i := range mirrors {
		topics = append(topics, fmt.Sprintf("orders-%d", i))
	}
	if _, err := kadm.NewClient(srcCl).CreateTopics(ctx, 2, -1, nil, topics...); err != nil {
		t.Fatal(err)
	}
	produce := func(round, n int) {
		t.Helper()
		var rs []*kgo.Record
		for _, tp := range topics {
			for i := range n {
				rs = append(rs, &kgo.Record{Topic: tp, Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "%s round %d record %d", tp, round, i)})
			}
		}
		if err := srcCl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 300)

	dstOpts := []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}
	group := "kmirror-agents-" + string(engine)
	var agents []*groupAgent
	for i := range 3 {
		agents = append(agents, startGroupAgent(t, dstOpts, group, fmt.Sprintf("agent-%d", i)))
	}
	// The mirrors come to a group of three, whose home agents hold new
	// partitions back for the group to place.
	for _, a := range agents {
		for len(a.member.View().Members) != 3 {
			if ctx.Err() != nil {
				t.Fatalf("%s does not see the three agents: %+v", a.id, a.member.View().Members)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	watch := watchOnlyOne(agents...)
	t.Cleanup(watch.end)
	created := time.Now()
	for i, tp := range topics {
		spec := mirrorspec.Spec{Name: fmt.Sprintf("m%d", i), Source: mirrorspec.Source{BootstrapServers: src.Bootstrap()}, Topics: []string{tp}}
		// Any agent creates a mirror; the group decides who runs it.
		if err := agents[i%3].co.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}

	// waitRunning waits until every mirror's home and every partition
	// runs on exactly one agent of alive, and returns who runs what.
	waitRunning := func(alive []*groupAgent) map[string][]string {
		t.Helper()
		var got map[string][]string
		for ctx.Err() == nil {
			got = running(alive)
			ok := len(got) == mirrors*3
			for _, who := range got {
				ok = ok && len(who) == 1
			}
			if ok {
				return got
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("mirror homes and partitions not each run by one agent: %v", got)
		return nil
	}
	// partitionsOf counts the partitions each agent runs in who.
	partitionsOf := func(who map[string][]string) map[string]int {
		out := map[string]int{}
		for k, agents := range who {
			if strings.Contains(k, "/") {
				out[agents[0]]++
			}
		}
		return out
	}
	// identical waits until every destination topic has caught up with
	// its source, then compares them.
	identical := func(stage string) {
		t.Helper()
		for _, tp := range topics {
			for {
				se, _ := kadm.NewClient(srcCl).ListEndOffsets(ctx, tp)
				de, _ := kadm.NewClient(dstCl).ListEndOffsets(ctx, tp)
				same := se.Error() == nil && de.Error() == nil
				se.Each(func(o kadm.ListedOffset) {
					d, ok := de.Lookup(tp, o.Partition)
					same = same && ok && d.Offset == o.Offset
				})
				if same {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s: %s did not catch up: source %v, destination %v", stage, tp, se.Offsets(), de.Offsets())
				}
				time.Sleep(50 * time.Millisecond)
			}
			rep, err := verify.Compare(ctx, srcCl, dstCl, verify.Options{Topic: tp})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Fatalf("%s: %s differs: %+v", stage, tp, rep.Mismatches)
			}
		}
	}

	// The partitions are placed where they run before they first write:
	// the twelve homes and partitions balanced over the three agents, four
	// each, without a partition handed on (placed with their homes, they
	// would be balanced by moving them).
	var owners map[string][]string
	var per map[string]int
	for ctx.Err() == nil {
		owners = waitRunning(agents)
		per = map[string]int{}
		for _, who := range owners {
			per[who[0]]++
		}
		if len(per) == 3 && per["agent-0"] == 4 && per["agent-1"] == 4 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatalf("homes and partitions run %v per agent, want 4 each", per)
	}
	if parts := partitionsOf(owners); len(parts) != 3 {
		t.Errorf("partitions run by %v, want every agent to run at least one", parts)
	}
	t.Logf("homes and partitions: %v, %v after the first create", owners, time.Since(created).Round(time.Millisecond))
	identical("three agents")
	for _, a := range agents {
		if n := a.owner.handed.Load(); n != 0 {
			t.Errorf("%s handed on %d partitions during the first copy, want 0: new partitions are placed where they run", a.id, n)
		}
	}

	// Two agents that created m0 at the same time, each with a producer
	// of its own: the later record, here written by an agent that does
	// not run m0, is the one the state topic keeps, and m0's owner
	// restarts it with that producer.
	var m0Owner, other *groupAgent
	for _, a := range agents {
		if a.id == owners["m0"][0] {
			m0Owner = a
		} else {
			other = a
		}
	}
	produce(10, 100)
	rewritten := time.Now()
	pid, epoch, err := other.co.RecreateRecord(ctx, "m0")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if id, e, ok := m0Owner.co.RunningProducer("m0"); ok && id == pid && e == epoch {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("m0's owner %s did not restart m0 with the producer of its latest record (%d)", m0Owner.id, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("m0's record rewritten with producer %d by %s: %s runs m0 with it %v later", pid, other.id, m0Owner.id, time.Since(rewritten).Round(time.Millisecond))
	produce(11, 100)
	identical("m0 restarted with another agent's producer")

	// Stop the agent with the most partitions while records keep coming.
	owners = waitRunning(agents)
	per = partitionsOf(owners)
	victim := slices.MaxFunc(agents, func(a, b *groupAgent) int { return per[a.id] - per[b.id] })
	var moved []string
	for name, who := range owners {
		if who[0] == victim.id {
			moved = append(moved, name)
		}
	}
	slices.Sort(moved)
	produce(1, 200)
	var alive []*groupAgent
	for _, a := range agents {
		if a != victim {
			alive = append(alive, a)
		}
	}
	watch.set(alive...)
	stopped := time.Now()
	victim.stop()
	produce(2, 200)
	after := waitRunning(alive)
	took := time.Since(stopped)
	for _, name := range moved {
		if after[name][0] == victim.id {
			t.Errorf("mirror %s still on the stopped agent", name)
		}
	}
	t.Logf("%s stopped; its homes and partitions %v run on %v within %v", victim.id, moved, after, took.Round(time.Millisecond))
	identical("after " + victim.id + " stopped")
	for _, a := range alive {
		for _, m := range a.co.Describe() {
			for _, tp := range m.Topics {
				for _, p := range tp.Partitions {
					if p.State != mirrorapi.StateMirroring {
						t.Errorf("%s on %s: %s/%d is %s (%s)", m.Name, a.id, tp.Name, p.Partition, p.State, p.Reason)
					}
				}
			}
		}
	}
	// A mirror whose home is on another agent refuses lifecycle calls
	// here, naming why.
	refused := false
	for name, who := range after {
		if strings.Contains(name, "/") {
			continue
		}
		for _, a := range alive {
			if a.id == who[0] || refused {
				continue
			}
			refused = true
			err := a.co.PauseTopics(ctx, name, nil)
			if err == nil || !strings.Contains(err.Error(), "another agent of the group runs it") {
				t.Errorf("pause of %s on %s (run by %s): %v, want the refusal naming the group", name, a.id, who[0], err)
			}
		}
	}

	// Crash one of the two left (no LeaveGroup, as SIGKILL): the group
	// hands its mirrors on only once its session ran out at the group
	// coordinator (6 s after its last heartbeat); it stopped writing the
	// write grace before that.
	crashed := alive[0]
	survivor := alive[1]
	produce(3, 200)
	watch.set(survivor)
	crashedAt := time.Now()
	crashed.co.Stop()
	crashed.member.Abandon()
	produce(4, 200)
	all := waitRunning([]*groupAgent{survivor})
	took = time.Since(crashedAt)
	t.Logf("%s crashed; %s runs %d homes and partitions %v later", crashed.id, survivor.id, len(all), took.Round(time.Millisecond))
	if took < 5*time.Second {
		t.Errorf("the mirrors of the crashed agent moved after %v, before its session (6s) could have run out", took)
	}
	identical("after " + crashed.id + " crashed")

	// A new agent joins: partitions move to it, handed on (no wait), and
	// the survivor keeps the rest running. The homes stay: each has its
	// partitions' records, so only partitions move (8 partitions and 4
	// homes of weight 1: 6 partitions go, 2 stay beside the homes).
	joined := startGroupAgent(t, dstOpts, group, "agent-3")
	watch.set(survivor, joined)
	joinedAt := time.Now()
	produce(5, 200)
	var split map[string][]string
	for ctx.Err() == nil {
		split = waitRunning([]*groupAgent{survivor, joined})
		if partitionsOf(split)[joined.id] == 6 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := partitionsOf(split)[joined.id]; n != 6 {
		t.Errorf("%s runs %d partitions, want 6: %v", joined.id, n, split)
	}
	t.Logf("%s joined; homes and partitions %v within %v", joined.id, split, time.Since(joinedAt).Round(time.Millisecond))
	produce(6, 200)
	identical("after " + joined.id + " joined")

	// Lifecycle operations on a mirror whose partitions run elsewhere
	// than its home: the home gathers them first, and carries the
	// operation out as a lone agent does.
	pair := []*groupAgent{survivor, joined}
	byID := map[string]*groupAgent{survivor.id: survivor, joined.id: joined}
	// spread is a mirror, not one of except, that runs a partition on
	// another agent than its home in who.
	spread := func(who map[string][]string, except ...string) (string, bool) {
		for i := range mirrors {
			name := fmt.Sprintf("m%d", i)
			if slices.Contains(except, name) {
				continue
			}
			for p := range 2 {
				if who[fmt.Sprintf("%s/%s/%d", name, topics[i], p)][0] != who[name][0] {
					return name, true
				}
			}
		}
		return "", false
	}
	spreadOne := func(who map[string][]string, except ...string) string {
		t.Helper()
		name, ok := spread(who, except...)
		if !ok {
			t.Fatalf("no mirror but %v runs a partition away from its home: %v", except, who)
		}
		return name
	}
	spreadName := spreadOne(split)
	home := byID[split[spreadName][0]]
	topic := topics[spreadName[1]-'0']
	states := func(name string) map[string]string {
		out := map[string]string{}
		for _, a := range pair {
			for _, m := range a.co.Describe() {
				if m.Name != name {
					continue
				}
				for _, tp := range m.Topics {
					for _, p := range tp.Partitions {
						out[fmt.Sprintf("%d", p.Partition)] = fmt.Sprintf("%s@%s", p.State, a.id)
					}
				}
			}
		}
		return out
	}
	waitStates := func(name, want string, at *groupAgent) {
		t.Helper()
		for ctx.Err() == nil {
			st := states(name)
			ok := len(st) == 2
			for _, v := range st {
				ok = ok && strings.HasPrefix(v, want+"@") && (at == nil || v == want+"@"+at.id)
			}
			if ok {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: partitions %v, want both %s (on %v)", name, states(name), want, at)
	}
	pausing := time.Now()
	if err := home.co.PauseTopics(ctx, spreadName, []string{topic}); err != nil {
		t.Fatalf("pausing %s on its home %s, its partitions on %v: %v", spreadName, home.id, split, err)
	}
	waitStates(spreadName, string(mirrorapi.StatePaused), home)
	t.Logf("%s paused on its home %s within %v, its partitions gathered there", spreadName, home.id, time.Since(pausing).Round(time.Millisecond))
	produce(7, 100)
	if err := home.co.ResumeTopics(ctx, spreadName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	waitStates(spreadName, string(mirrorapi.StateMirroring), nil)
	identical("paused and resumed " + spreadName)

	// A throttle on another spread mirror: it is gathered on its home,
	// whose fetchers enforce the throttle, and stays there while
	// throttled.
	after = waitRunning(pair)
	throttled := spreadOne(after, spreadName)
	home = byID[after[throttled][0]]
	throttling := time.Now()
	if err := home.co.SetThrottle(ctx, throttled, mirrorapi.Throttle{RateBytesPerSecond: 50 << 20}); err != nil {
		t.Fatalf("throttling %s on its home %s, its partitions on %v: %v", throttled, home.id, after, err)
	}
	waitStates(throttled, string(mirrorapi.StateMirroring), home)
	t.Logf("%s throttled on its home %s within %v, its partitions gathered there", throttled, home.id, time.Since(throttling).Round(time.Millisecond))
	produce(8, 100)
	identical("throttled " + throttled)
	if st := states(throttled); st["0"] != string(mirrorapi.StateMirroring)+"@"+home.id || st["1"] != st["0"] {
		t.Errorf("%s throttled: partitions %v, want both MIRRORING on its home %s", throttled, st, home.id)
	}
	if err := home.co.RemoveThrottle(ctx, throttled); err != nil {
		t.Fatal(err)
	}

	// A promote of a spread mirror: every partition stops at the source's
	// end (nothing is produced now) and is STOPPED on the home.
	after = waitRunning(pair)
	promoted := spreadOne(after)
	home = byID[after[promoted][0]]
	if err := home.co.StopTopics(ctx, promoted, []string{topics[promoted[1]-'0']}, coordinator.StopPromote); err != nil {
		t.Fatalf("promoting %s on its home %s, its partitions on %v: %v", promoted, home.id, after, err)
	}
	waitStates(promoted, string(mirrorapi.StateStopped), home)
	identical("promoted " + promoted)
	t.Logf("%s, its partitions on %v, promoted on its home %s", promoted, after, home.id)

	// A delete (forced: the mirror has topics) of a mirror, spread where
	// one is: its partitions stop wherever they run, and no agent runs or
	// describes it any more; its destination topic stays.
	after = waitRunning(pair)
	deleted, wasSpread := spread(after, promoted)
	if !wasSpread {
		deleted = slices.DeleteFunc([]string{"m0", "m1", "m2", "m3"}, func(n string) bool { return n == promoted })[0]
	}
	home = byID[after[deleted][0]]
	if err := home.co.Delete(ctx, deleted, true); err != nil {
		t.Fatalf("deleting %s on its home %s, its partitions on %v: %v", deleted, home.id, after, err)
	}
	for ctx.Err() == nil {
		left := []string{}
		for k := range running(pair) {
			if k == deleted || strings.HasPrefix(k, deleted+"/") {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, a := range pair {
		for _, m := range a.co.Describe() {
			if m.Name == deleted {
				t.Errorf("%s deleted, still described by %s", deleted, a.id)
			}
		}
	}
	if ends, err := kadm.NewClient(dstCl).ListEndOffsets(ctx, topics[deleted[1]-'0']); err != nil || ends.Error() != nil {
		t.Errorf("the destination topic of deleted %s: %v %v", deleted, err, ends.Error())
	}
	t.Logf("%s deleted on its home %s (its partitions spread over two agents: %v)", deleted, home.id, wasSpread)
	watch.stop(t)
}
