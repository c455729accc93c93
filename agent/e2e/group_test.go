package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/internal/kmirrorbin"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestAgentGroup: `kmirror agent` processes with coordination = "group"
// divide four mirrors of two partitions among themselves under a steady
// load: each mirror's home and each partition run by exactly one agent, the
// partitions spread over all of them. Any agent answers for every mirror
// (calls forwarded to the home, lists gathered and merged). One is killed
// with SIGKILL: what it ran runs on the others once its session ran out. A
// fourth joins and takes partitions on. One is frozen past its session and
// resumes. All restart in turn. After all of it, every topic is
// offset-identical to its source, every partition MIRRORING, and no
// partition had two writers: the wire watch saw no batch leave an agent
// after another agent's batch of that partition had landed.
func TestAgentGroup(t *testing.T) {
	forEngines(t, testAgentGroup)
}

func testAgentGroup(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const mirrors = 4
	var specs []workload.Spec
	var ms []agentMirror
	for i := range mirrors {
		topic := p.name(fmt.Sprintf("group%d", i))
		createTopic(t, p.srcCl, topic, 2, nil)
		spec := workload.Spec{Topic: topic, Partitions: 2, Seed: int64(i + 1), Codecs: []string{workload.CodecZstd, workload.CodecNone}, Headers: true}
		if i == 3 {
			spec.TransactionalID, spec.AbortEvery = p.name("group-txn"), 3
		}
		specs = append(specs, spec)
		ms = append(ms, agentMirror{Name: fmt.Sprintf("m%d", i), Source: p.src, Topics: []string{topic}})
	}
	stopProducing := runProducers(ctx, t, p.src, specs, 200, 50)

	const session = groupSession
	agents := map[string]*agentProcess{}
	// Every agent reaches the destination through the wire watch, which
	// sees which agent sent each batch: at the end, no partition had two
	// writers through the kill, the join, the freeze and the restarts.
	w := newWireWatch(t)
	start := func(id string) *agentProcess {
		a := startAgentProcess(t, writeAgentConfigTo(t, w.bootstrap(id, p.dst.Bootstrap()), p.stateTopicHCL()+groupHCL(id), ms...), id)
		agents[id] = a
		return a
	}
	// The first creates the mirrors; the others find them in the state
	// topic.
	first := start("a0")
	for {
		code, body, err := first.Ready(5 * time.Second)
		if err == nil && code == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a0 not ready: %d %s %v", code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start("a1")
	start("a2")

	// spread waits until the members of the group as alive[0] reports it
	// are exactly alive, each runs the homes the agent's own list says,
	// every mirror's home runs on one, every partition is given to one,
	// and, with each, every member has a partition; it returns mirror →
	// agent and the partitions each agent was given.
	var given map[string][]string
	spread := func(stage string, each bool, alive ...string) map[string]string {
		t.Helper()
		var last string
		for ctx.Err() == nil {
			st, err := agents[alive[0]].api.Agent(ctx)
			if err != nil {
				last = err.Error()
				time.Sleep(100 * time.Millisecond)
				continue
			}
			owner := map[string]string{}
			given = map[string][]string{}
			var members []string
			ok, parts := true, 0
			for _, m := range st.GroupMembers {
				members = append(members, m.AgentID)
				for _, name := range m.Mirrors {
					ok = ok && owner[name] == ""
					owner[name] = m.AgentID
				}
				given[m.AgentID] = m.Partitions
				parts += len(m.Partitions)
				ok = ok && (!each || len(m.Partitions) > 0)
			}
			slices.Sort(members)
			if ok && len(owner) == mirrors && parts == 2*mirrors && slices.Equal(members, slices.Sorted(slices.Values(alive))) && running(ctx, agents, owner) {
				t.Logf("%s: generation %d: homes %v, partitions %v", stage, st.GroupGeneration, owner, given)
				return owner
			}
			last = fmt.Sprintf("generation %d, members %v, homes %v, partitions %v", st.GroupGeneration, members, owner, given)
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: the group did not settle: %s", stage, last)
		return nil
	}
	// The partitions start with their mirrors' homes, and spread.
	owner := spread("three agents", true, "a0", "a1", "a2")
	count := map[string]int{}
	for a, ps := range given {
		count[a] = len(ps)
	}

	// Every agent answers for every mirror.
	for id, a := range agents {
		list, err := a.api.Describe(ctx)
		if err != nil {
			t.Fatalf("list through %s: %v", id, err)
		}
		if len(list) != mirrors {
			t.Errorf("list through %s: %d mirrors, want %d", id, len(list), mirrors)
		}
		for _, m := range list {
			if m.Agent != owner[m.Name] {
				t.Errorf("list through %s: %s runs on %q, want %s", id, m.Name, m.Agent, owner[m.Name])
			}
		}
		for name, o := range owner {
			// Its partitions, wherever they run, each naming its agent:
			// a partition just given to an agent shows once that agent
			// started it.
			var m mirrorapi.Mirror
			var ps []mirrorapi.Partition
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				m, err = a.api.Mirror(ctx, name)
				if err != nil || m.Name != name || m.Agent != o {
					t.Errorf("describe %s through %s (run by %s): runs on %q, %v", name, id, o, m.Agent, err)
				}
				if ps = describedPartitions([]mirrorapi.Mirror{m}); len(ps) == 2 || time.Now().After(deadline) {
					break
				}
			}
			if len(ps) != 2 {
				t.Errorf("describe %s through %s: %d partitions, want 2: %+v", name, id, len(ps), ps)
			}
			for _, p := range ps {
				if p.Agent == "" {
					t.Errorf("describe %s through %s: partition %d names no agent", name, id, p.Partition)
				}
			}
		}
	}

	// SIGKILL the agent with the most partitions.
	victim := "a0"
	for id, n := range count {
		if n > count[victim] {
			victim = id
		}
	}
	killed := time.Now()
	agents[victim].Kill()
	delete(agents, victim)
	var alive []string
	for id := range agents {
		alive = append(alive, id)
	}
	slices.Sort(alive)
	spread("after SIGKILL of "+victim, false, alive...)
	took := time.Since(killed)
	// Its session: it stopped writing half of it before (its last
	// writes' grace), so its mirrors start elsewhere at once.
	t.Logf("SIGKILL of %s: its mirrors run elsewhere %v later", victim, took.Round(time.Millisecond))
	if took < session-2*time.Second {
		t.Errorf("the mirrors of %s moved %v after SIGKILL, before its session (%v) could have run out", victim, took, session)
	}

	// A fourth joins: what it runs the others handed on, each handoff
	// counted in their metrics.
	handoffs := func() (sum float64) {
		for _, id := range alive {
			sum += groupHandoffs(ctx, t, agents[id])
		}
		return sum
	}
	before := handoffs()
	start("a3")
	spread("a3 joined", true, append(alive, "a3")...)
	if moved, handed := len(given["a3"]), handoffs()-before; handed < float64(moved) {
		t.Errorf("a3 joined and was given %d partitions, but the others count %v handoffs (kmirror_group_handoffs_total)", moved, handed)
	} else {
		t.Logf("a3 joined: given %d partitions; the others count %v handoffs", moved, handed)
	}
	alive = append(alive, "a3")

	// Freeze one for 30 s, well past its session, then let it resume.
	const frozenFor = 30 * time.Second
	frozen := alive[0]
	agents[frozen].Freeze()
	time.Sleep(frozenFor)
	agents[frozen].Thaw()
	spread(frozen+" frozen for "+frozenFor.String()+" and resumed", false, alive...)

	// A rolling restart: each agent in turn stops (SIGTERM: its mirrors
	// are handed on as it leaves) and starts again with its agent id.
	for _, id := range slices.Clone(alive) {
		agents[id].Stop()
		delete(agents, id)
		start(id)
		spread("rolling restart: "+id+" back", false, alive...)
	}

	// kmirror status, through any agent, lists the group: each agent, and
	// under it the partitions and lag of each mirror whose home it runs,
	// and of the partitions it runs. A mirror the
	// restarts moved may still be starting: status is asked again until
	// every one shows its partitions MIRRORING.
	var out []byte
	var missing []string
	for deadline := time.Now().Add(time.Minute); ; {
		var err error
		out, err = exec.CommandContext(ctx, kmirrorBin(t), "status", "--agent", agents[alive[0]].api.BaseURL).CombinedOutput()
		if err != nil {
			t.Fatalf("kmirror status: %v\n%s", err, out)
		}
		missing = nil
		for i := range mirrors {
			if !strings.Contains(string(out), fmt.Sprintf("\n    m%d\t2 partition(s) MIRRORING=2, max lag ", i)) {
				missing = append(missing, fmt.Sprintf("m%d", i))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("kmirror status does not show 2 partitions MIRRORING for %v within a minute:\n%s", missing, out)
	}
	for _, id := range alive {
		if !strings.Contains(string(out), "\n  "+id+"\t") {
			t.Errorf("kmirror status does not list %s:\n%s", id, out)
		}
	}
	t.Logf("kmirror status:\n%s", out)

	// A mirror created through one agent: the group places it, and the
	// creation answers with its describe, from whichever agent runs it.
	apiTopic := p.name("groupapi")
	createTopic(t, p.srcCl, apiTopic, 2, nil)
	apiStats, err := workload.Produce(ctx, p.srcOpts(), workload.Spec{Topic: apiTopic, Partitions: 2, Records: 500, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	// The creation waits for the placement; nobody ever wrote the new
	// mirror, so its owner starts it at once.
	cl := mirrorapi.NewClient(agents[alive[0]].api.BaseURL, "")
	cl.HTTP = &http.Client{Timeout: time.Minute}
	placing := time.Now()
	created, err := cl.Create(ctx, mirrorapi.MirrorSpec{Name: "m4", Source: mirrorapi.Source{BootstrapServers: p.src.Bootstrap()}, Topics: []string{apiTopic}})
	if err != nil || created.Name != "m4" || len(created.Topics) != 1 {
		t.Fatalf("create m4 through %s: %+v, %v", alive[0], created, err)
	}
	t.Logf("m4 created through %s and described by its owner after %v", alive[0], time.Since(placing).Round(time.Millisecond))
	waitCaughtUp(ctx, t, p.srcCl, p.dstCl, apiTopic, agents[alive[1]], time.Minute)
	p.assertIdentical(t, apiTopic, identityOpts{wantRecords: apiStats.Records})

	stats := stopProducing()
	var produced int64
	for _, s := range stats {
		produced += s.Records
	}
	for i, s := range specs {
		// Through any agent: the list is gathered from all.
		waitCaughtUp(ctx, t, p.srcCl, p.dstCl, s.Topic, agents[alive[len(alive)-1]], time.Minute)
		p.assertIdentical(t, s.Topic, identityOpts{wantRecords: stats[i].Records})
	}
	for id, a := range agents {
		list, err := a.api.Describe(ctx)
		if err != nil {
			t.Fatalf("list through %s: %v", id, err)
		}
		for _, part := range describedPartitions(list) {
			if part.State != mirrorapi.StateMirroring {
				t.Errorf("through %s: %s/%d is %s: %s", id, part.Topic, part.Partition, part.State, part.Reason)
			}
		}
	}
	t.Logf("%d records produced to %d topics, identical on the destination", produced, mirrors)
	w.check(t)
}

// running says whether each agent runs what owner gives it: its own list
// (GET /v1/mirrors as another agent forwards it, which lists the mirrors
// that agent runs).
func running(ctx context.Context, agents map[string]*agentProcess, owner map[string]string) bool {
	for id, a := range agents {
		var want []string
		for name, o := range owner {
			if o == id {
				want = append(want, name)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.api.BaseURL+"/v1/mirrors", nil)
		if err != nil {
			return false
		}
		req.Header.Set(api.ForwardedHeader, "test")
		resp, err := a.api.HTTP.Do(req)
		if err != nil {
			return false
		}
		var dr mirrorapi.DescribeResponse
		err = json.NewDecoder(resp.Body).Decode(&dr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		var got []string
		for _, m := range dr.Mirrors {
			if m.Share == "" { // the homes it runs, not its shares of others
				got = append(got, m.Name)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return false
		}
	}
	return true
}

// TestUpgradeFromTheWriterLease: the move of running mirrors from agents of
// the writer lease (kmirror at leaseRelease, built from this repository's
// history) to this release's group, under load. This release refuses the
// lease's config, saying what to set. Group agents started while a lease
// agent renews the lease wait, without joining the group, and say so on
// /readyz and /v1/agent (both would write otherwise); a lease agent refuses
// to start while the group has members. The lease agent stops (releasing
// the lease), the waiting agents join and take its mirrors on, every topic
// is offset-identical to its source at the end, and the wire watch saw no
// partition written by two agents, of either release.
func TestUpgradeFromTheWriterLease(t *testing.T) {
	forEngines(t, testUpgradeFromTheWriterLease)
}

func testUpgradeFromTheWriterLease(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var specs []workload.Spec
	var ms []agentMirror
	for i := range 2 {
		topic := p.name(fmt.Sprintf("mix%d", i))
		createTopic(t, p.srcCl, topic, 2, nil)
		spec := workload.Spec{Topic: topic, Partitions: 2, Seed: int64(i + 11), Codecs: []string{workload.CodecZstd}, Headers: true}
		if i == 1 {
			spec.TransactionalID, spec.AbortEvery = p.name("mix-txn"), 4
		}
		specs = append(specs, spec)
		ms = append(ms, agentMirror{Name: fmt.Sprintf("mix%d", i), Source: p.src, Topics: []string{topic}})
	}
	state := p.stateTopicHCL()
	// Every agent, of either release, reaches the destination through
	// the wire watch: no partition has two writers across the move.
	w := newWireWatch(t)
	leaseCfg := writeAgentConfigTo(t, w.bootstrap("l", p.dst.Bootstrap()), state+fmt.Sprintf("agent_id = \"l\"\nlease_duration = %q\nlease_request_timeout = %q\n", e2eLease, e2eLeaseTimeout), ms...)
	leaseCfg.Bin = kmirrorbin.AtCommit(t, leaseRelease)
	groupCfg := func(id string) agentSetup {
		return writeAgentConfigTo(t, w.bootstrap(id, p.dst.Bootstrap()), state+groupHCL(id), ms...)
	}
	refused := func(setup agentSetup, want string) {
		t.Helper()
		bin := setup.Bin
		if bin == "" {
			bin = kmirrorBin(t)
		}
		out, err := exec.CommandContext(ctx, bin, "agent", "--config", setup.Path).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("the agent did not refuse to start (%v), or not saying %q:\n%s", err, want, out)
		}
		t.Logf("refused: %s", lastLine(string(out)))
	}

	// This release refuses the lease agent's config.
	refused(agentSetup{Path: leaseCfg.Path}, "lease_duration: the writer lease was removed; remove it, and the agents form a group")

	stopProducing := runProducers(ctx, t, p.src, specs, 200, 50)
	l := startAgentProcess(t, leaseCfg, "lease")
	waitActive(ctx, t, map[string]*agentProcess{"l": l}, "", 30*time.Second)
	// The lease agent mirrors before the migration.
	for _, s := range specs {
		for p.destinationEnds(ctx, s.Topic) < 20 {
			if ctx.Err() != nil {
				t.Fatalf("the lease agent mirrored nothing of %s", s.Topic)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The migration: the group agents start and wait...
	agents := map[string]*agentProcess{}
	for _, id := range []string{"g0", "g1", "g2"} {
		g := startAgentProcess(t, groupCfg(id), id)
		agents[id] = g
		for {
			code, body, err := g.Ready(5 * time.Second)
			if err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "waits for the agents of the writer lease") {
				t.Logf("%s: %s", id, strings.TrimSpace(body))
				break
			}
			if err == nil && code == http.StatusOK {
				t.Fatalf("group agent %s is ready while lease agent l renews the lease", id)
			}
			if ctx.Err() != nil {
				t.Fatalf("group agent %s does not say that it waits for the lease agents: %d %q %v", id, code, body, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		st, err := g.api.Agent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Role != mirrorapi.RoleStandby || st.LeaseHolder != "l" || st.Coordination != "group" {
			t.Fatalf("group agent %s waiting: /v1/agent %+v, want a group standby naming lease holder l", id, st)
		}
	}
	// A waiting agent stops cleanly.
	agents["g2"].Stop()
	if err := agents["g2"].waitErr; err != nil {
		t.Fatalf("group agent g2, stopped while it waited: %v", err)
	}
	delete(agents, "g2")
	groups, err := kadm.NewClient(p.dstCl).DescribeGroups(ctx, "kmirror-agents."+p.stateTopicName())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if len(g.Members) > 0 {
			t.Fatalf("group %s has %d member(s) while the lease agent runs: the waiting agents joined", g.Group, len(g.Members))
		}
	}
	// ...until the lease agent stops.
	stopped := time.Now()
	l.Stop() // releases the lease
	var owner map[string]string
	for ctx.Err() == nil {
		owner = map[string]string{}
		if st, err := agents["g0"].api.Agent(ctx); err == nil && len(st.GroupMembers) == 2 {
			for _, m := range st.GroupMembers {
				for _, name := range m.Mirrors {
					owner[name] = m.AgentID
				}
			}
		}
		if len(owner) == len(ms) && running(ctx, agents, owner) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatalf("the group did not take the lease agent's mirrors on: %v", owner)
	}
	t.Logf("lease agent stopped; the group runs its mirrors %v later: %v", time.Since(stopped).Round(time.Millisecond), owner)
	refused(leaseCfg, `agent(s) with coordination = "group"`)

	stats := stopProducing()
	for i, s := range specs {
		waitCaughtUp(ctx, t, p.srcCl, p.dstCl, s.Topic, agents["g1"], time.Minute)
		p.assertIdentical(t, s.Topic, identityOpts{wantRecords: stats[i].Records})
	}
	list, err := agents["g1"].api.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range describedPartitions(list) {
		if part.State != mirrorapi.StateMirroring {
			t.Errorf("%s/%d is %s: %s", part.Topic, part.Partition, part.State, part.Reason)
		}
	}
	w.check(t)
}

// waitActive polls the agents' /readyz until one other than old answers 200,
// and returns its id and how long that took.
func waitActive(ctx context.Context, t *testing.T, agents map[string]*agentProcess, old string, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	began := time.Now()
	deadline := time.After(timeout)
	var last []string
	for {
		last = last[:0]
		for id, a := range agents {
			if id == old {
				continue // killed, or frozen: it would not answer
			}
			code, body, err := a.Ready(time.Second)
			if err == nil && code == http.StatusOK {
				return id, time.Since(began)
			}
			last = append(last, fmt.Sprintf("agent %s: %d %q %v", id, code, body, err))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for an active agent: %v (%s)", ctx.Err(), strings.Join(last, "; "))
		case <-deadline:
			t.Fatalf("no agent became active within %v: %s", timeout, strings.Join(last, "; "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// leaseRelease is the last commit of kmirror with the writer lease: its
// agents stand for a deployment of an earlier release in the tests of the
// move to this one.
const leaseRelease = "6d1917177e599b6cbde1ecc0c69764de4d35db4a"

// The lease settings of leaseRelease's agents in these tests: short, so
// that a test does not wait long for a lease to run out, and long enough
// for a loaded machine to renew in time.
const (
	e2eLease        = 1500 * time.Millisecond
	e2eLeaseTimeout = 500 * time.Millisecond
)

// groupSession is the group agents' session in these tests: the least a
// broker accepts by default (group.min.session.timeout.ms).
const groupSession = 6 * time.Second

// groupHCL is the config of group agent id (HCL lines).
func groupHCL(id string) string {
	return fmt.Sprintf("agent_id = %q\ncoordination = \"group\"\ngroup_session_timeout = %q\n", id, groupSession)
}

// stateTopicName is the agents' state topic on the pair's destination.
func (p *pair) stateTopicName() string {
	if p.stateTopic == "" {
		return "__kmirror_state"
	}
	return p.stateTopic
}

// stateTopicHCL names the pair's own state topic where its destination is
// shared with other tests (HCL lines; none otherwise).
func (p *pair) stateTopicHCL() string {
	if p.stateTopic == "" {
		return ""
	}
	return fmt.Sprintf("state_topic = %q\n", p.stateTopic)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestAgentGroupLoneRestart: a lone group agent killed (SIGKILL) and started
// again with its agent id writes again one session after it rejoined (its
// previous process may still have been inside its session then), and its
// mirror is offset-identical afterwards.
func TestAgentGroupLoneRestart(t *testing.T) {
	forEngines(t, testAgentGroupLoneRestart)
}

func testAgentGroupLoneRestart(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := p.name("lone")
	createTopic(t, p.srcCl, topic, 2, nil)
	spec := workload.Spec{Topic: topic, Partitions: 2, Seed: 21, Codecs: []string{workload.CodecZstd}, Headers: true}
	stopProducing := runProducers(ctx, t, p.src, []workload.Spec{spec}, 200, 50)
	const session = groupSession
	setup := writeAgentConfigWith(t, p.dst, p.stateTopicHCL()+groupHCL("lone"), agentMirror{Name: "lone", Source: p.src, Topics: []string{topic}})
	// writing waits until the agent runs its mirror and the destination
	// grows past from.
	writing := func(a *agentProcess, from int64) {
		t.Helper()
		for ctx.Err() == nil {
			if list, err := a.api.Describe(ctx); err == nil && len(list) == 1 && p.destinationEnds(ctx, topic) > from {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the agent did not write %s again", topic)
	}
	a := startAgentProcess(t, setup, "lone")
	writing(a, 0)
	a.Kill()
	restarted := time.Now()
	before := p.destinationEnds(ctx, topic)
	a = startAgentProcess(t, setup, "lone-again")
	writing(a, before)
	took := time.Since(restarted)
	t.Logf("SIGKILL and restart of a lone agent: it writes again %v after its start (session %v)", took.Round(time.Millisecond), session)
	if took < session-time.Second {
		t.Errorf("the restarted agent wrote %v after its start, before its previous process's session (%v) could have run out", took, session)
	}
	stats := stopProducing()
	waitCaughtUp(ctx, t, p.srcCl, p.dstCl, topic, a, time.Minute)
	p.assertIdentical(t, topic, identityOpts{wantRecords: stats[0].Records})
}

// groupHandoffs is what agent a's kmirror_group_handoffs_total says.
func groupHandoffs(ctx context.Context, t *testing.T, a *agentProcess) float64 {
	t.Helper()
	v, ok, err := a.api.Metric(ctx, "kmirror_group_handoffs_total")
	if err != nil || !ok {
		t.Fatalf("kmirror_group_handoffs_total of %s: served %v, %v", a.name, ok, err)
	}
	return v
}
