package e2e

// Read-only mirror topics and the source fence of a promote (DESIGN §4):
// destinations with an authorizer where the agent is a super user and an
// application user "app" has ALLOW WRITE on the topic.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
)

const (
	agentUser, agentPass = "agent", "agent-pass"
	appUser, appPass     = "app", "app-pass"
)

func saslPlain(user, pass string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())
}

// securedOpts are the options of a cluster with an authorizer where agent
// is a super user and app an ordinary user.
func securedOpts(name string) []devcluster.Option {
	return []devcluster.Option{
		devcluster.Name(name), devcluster.ACLs(),
		devcluster.SASLUser(agentUser, agentPass), devcluster.SuperUser(agentUser),
		devcluster.SASLUser(appUser, appPass),
	}
}

// securedPair starts a source (with an authorizer when srcACLs) seeded with
// topic, and a destination with an authorizer. The pair's clients
// authenticate as the agent (a super user on both sides); app may write
// topic on both (ALLOW WRITE and DESCRIBE).
func securedPair(t *testing.T, topic string, partitions int32, srcACLs bool) *pair {
	t.Helper()
	srcOpts := []devcluster.Option{devcluster.Name("src")}
	if srcACLs {
		srcOpts = securedOpts("src")
	}
	srcOpts = append(srcOpts, devcluster.KfakeOptions(kfake.SeedTopics(partitions, topic)))
	p := &pair{src: devcluster.StartT(t, srcOpts...), dst: devcluster.StartT(t, securedOpts("dst")...)}
	p.srcCl = failClient(t, p.srcAgentOpts(srcACLs)...)
	p.dstCl = failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass), kgo.MetadataMinAge(100*time.Millisecond))
	p.srcAdm, p.dstAdm = kadm.NewClient(p.srcCl), kadm.NewClient(p.dstCl)
	allowApp(t, p.dstAdm, topic)
	if srcACLs {
		allowApp(t, p.srcAdm, topic)
	}
	return p
}

func (p *pair) srcAgentOpts(auth bool) []kgo.Opt {
	o := []kgo.Opt{kgo.SeedBrokers(p.src.Bootstrap()...), kgo.MetadataMinAge(100 * time.Millisecond)}
	if auth {
		o = append(o, saslPlain(agentUser, agentPass))
	}
	return o
}

// allowApp lets app write and describe topic (it need not exist yet).
func allowApp(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	rs, err := adm.CreateACLs(testCtx(t), kadm.NewACLs().Topics(topic).Allow("User:"+appUser).AllowHosts("*").
		Operations(kadm.OpWrite, kadm.OpDescribe))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating app's ACL: %v", r.Err)
		}
	}
}

// securedAgent runs the coordinator as the agent (SASL PLAIN, a super user)
// with the ACL source fence.
func (p *pair) securedAgent(t *testing.T, topic string, srcACLs bool) *agent {
	t.Helper()
	spec := p.spec(topic)
	return p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.Destination = []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass)}
		c.SourceOpts = func(s coordinator.Source) []kgo.Opt {
			o := []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...)}
			if srcACLs {
				o = append(o, saslPlain(agentUser, agentPass))
			}
			return o
		}
		c.SourceFence = coordinator.ACLSourceFence{}
		c.StopTimeout = 10 * time.Second
		c.PromoteTimeout = time.Minute
	})
}

// appClient is a producer authenticated as app, writing each record to the
// partition it names, that gives up at once.
func appClient(t *testing.T, c *devcluster.Cluster) *kgo.Client {
	return failClient(t, kgo.SeedBrokers(c.Bootstrap()...), saslPlain(appUser, appPass),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2), kgo.MetadataMinAge(100*time.Millisecond))
}

// appWrite writes one record to topic/part as app.
func appWrite(t *testing.T, cl *kgo.Client, topic string, part int32, value string) (*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Value: []byte(value)}).First()
}

// assertRefused checks that app cannot write any partition of topic.
func assertRefused(t *testing.T, c *devcluster.Cluster, topic string, parts int32, when string) {
	t.Helper()
	cl := appClient(t, c)
	for part := range parts {
		if _, err := appWrite(t, cl, topic, part, "foreign "+when); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("%s: app writing %s/%d: %v, want TOPIC_AUTHORIZATION_FAILED", when, topic, part, err)
		}
	}
}

// topicStatus returns the Describe entry of topic.
func (a *agent) topicStatus(topic string) coordinator.TopicStatus {
	m, _ := a.status()
	for _, ts := range m.Topics {
		if ts.Name == topic {
			return ts
		}
	}
	return coordinator.TopicStatus{}
}

// waitReadOnly polls Describe until topic's read_only_enforced is want.
func waitReadOnly(t *testing.T, a *agent, topic string, want bool) coordinator.TopicStatus {
	t.Helper()
	deadline := time.Now().Add(failWait)
	for {
		ts := a.topicStatus(topic)
		if ts.Name == topic && ts.ReadOnlyEnforced == want {
			return ts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: read_only_enforced not %v within %v:\n%s", topic, want, failWait, a.describe())
		}
		time.Sleep(pollEvery)
	}
}

// TestReadOnlyMirrorTopic: while mirroring and while paused, app's writes to
// the destination mirror topic are refused (TOPIC_AUTHORIZATION_FAILED),
// the mirror goes on undisturbed and describe says read_only_enforced; after
// a failover stop app writes, right after the last mirrored offset.
func TestReadOnlyMirrorTopic(t *testing.T) {
	const parts = 3
	p := securedPair(t, lifecycleTopic, parts, false)
	a := p.securedAgent(t, lifecycleTopic, false)
	src := p.producer(t)
	for part := range int32(parts) {
		produceN(t, src, lifecycleTopic, part, 50, "before", false)
	}
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	ts := waitReadOnly(t, a, lifecycleTopic, true)
	if ts.ReadOnlyReason != "" {
		t.Errorf("read-only topic with a reason: %q", ts.ReadOnlyReason)
	}
	assertRefused(t, p.dst, lifecycleTopic, parts, "mirroring")

	// The refused writes left nothing: the mirror goes on.
	for part := range int32(parts) {
		produceN(t, src, lifecycleTopic, part, 20, "more", false)
	}
	p.waitMirrored(t, a, lifecycleTopic, failWait)

	if err := a.co.PauseTopics(testCtx(t), mirrorName, []string{lifecycleTopic}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, lifecycleTopic, parts, partition.Paused, failWait)
	if !a.topicStatus(lifecycleTopic).ReadOnlyEnforced {
		t.Errorf("paused: read_only_enforced false:\n%s", a.describe())
	}
	assertRefused(t, p.dst, lifecycleTopic, parts, "paused")

	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, lifecycleTopic, parts, partition.Stopped, failWait)
	ts = waitReadOnly(t, a, lifecycleTopic, false)
	if ts.ReadOnlyReason != "" {
		t.Errorf("stopped topic with a read-only reason: %q", ts.ReadOnlyReason)
	}
	p.assertMirroredUpTo(t, ps)
	assertWritesAfterMirrored(t, appClient(t, p.dst), lifecycleTopic, ps, "after failover")
}

// assertWritesAfterMirrored has app write value to each partition of the
// stopped topic through cl, and checks that each write lands right after
// the partition's last mirrored offset.
func assertWritesAfterMirrored(t *testing.T, cl *kgo.Client, topic string, stopped map[int32]partition.Status, value string) {
	t.Helper()
	for part, st := range stopped {
		r, err := appWrite(t, cl, topic, part, value)
		if err != nil {
			t.Fatalf("app writing %q to %s/%d: %v", value, topic, part, err)
		}
		if r.Offset != st.LastMirrored+1 {
			t.Errorf("partition %d: app's write landed at %d, want %d (right after the last mirrored offset)", part, r.Offset, st.LastMirrored+1)
		}
	}
}

// TestReadOnlyNoAuthorizer: without an authorizer describe says
// read_only_enforced=false and why; a promote with the ACL fence goes on
// but says that source writes were not fenced.
func TestReadOnlyNoAuthorizer(t *testing.T) {
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 1})
	spec := p.spec(lifecycleTopic)
	a := p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.SourceFence = coordinator.ACLSourceFence{}
		c.PromoteTimeout = time.Minute
	})
	produceN(t, p.producer(t), lifecycleTopic, 0, 30, "plain", false)
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	ts := a.topicStatus(lifecycleTopic)
	if ts.ReadOnlyEnforced || !strings.Contains(ts.ReadOnlyReason, "no authorizer") {
		t.Errorf("without an authorizer: read_only_enforced %v, reason %q", ts.ReadOnlyEnforced, ts.ReadOnlyReason)
	}

	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopPromote); err != nil {
		t.Fatalf("a promote with a source without authorizer: %v", err)
	}
	ps := waitStates(t, a, lifecycleTopic, 1, partition.Stopped, failWait)
	if r := ps[0].Reason; !strings.Contains(r, "NOT fenced") || !strings.Contains(r, "no authorizer") {
		t.Errorf("STOPPED reason %q does not say that source writes were not fenced", r)
	}
	m, _ := a.status()
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "NOT fenced") {
		t.Errorf("mirror warnings %q do not say that source writes were not fenced", m.Warnings)
	}
	if src, dst := ends(t, p.srcAdm, lifecycleTopic), ends(t, p.dstAdm, lifecycleTopic); src[0] != dst[0] {
		t.Errorf("source end %d, destination end %d", src[0], dst[0])
	}
}

// TestPromoteFencesSource: app writes to the source through a promote; once
// the promote has started its writes are refused, and every record the
// source acknowledged is on the destination: the destination is identical
// to the source up to the source end.
func TestPromoteFencesSource(t *testing.T) {
	const parts = 3
	p := securedPair(t, lifecycleTopic, parts, true)
	a := p.securedAgent(t, lifecycleTopic, true)

	// app produces to the source round-robin until it is refused.
	app := appClient(t, p.src)
	var (
		mu       sync.Mutex
		acked    = map[int32]int64{} // highest acknowledged offset + 1
		firstErr error
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			part := int32(i % parts)
			r, err := appWrite(t, app, lifecycleTopic, part, fmt.Sprintf("app %d", i))
			mu.Lock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				continue
			}
			acked[part] = max(acked[part], r.Offset+1)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	p.waitProgress(t, a, lifecycleTopic, map[int32]int64{0: 50, 1: 50, 2: 50}, failWait)
	waitReadOnly(t, a, lifecycleTopic, true)

	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	// From here on the source refuses app.
	assertRefused(t, p.src, lifecycleTopic, parts, "after the promote started")
	ps := waitStates(t, a, lifecycleTopic, parts, partition.Stopped, failWait)
	close(stop)
	<-done
	mu.Lock()
	if firstErr != nil && !errors.Is(firstErr, kerr.TopicAuthorizationFailed) {
		t.Errorf("app's first refusal: %v, want TOPIC_AUTHORIZATION_FAILED", firstErr)
	}
	ackedNow := acked
	mu.Unlock()

	src, dst := ends(t, p.srcAdm, lifecycleTopic), ends(t, p.dstAdm, lifecycleTopic)
	var records int64
	for part := range int32(parts) {
		st := ps[part]
		if strings.Contains(st.Reason, "NOT fenced") {
			t.Errorf("partition %d: %q, but the source has an authorizer", part, st.Reason)
		}
		if dst[part] != src[part] || st.LastMirrored != src[part]-1 {
			t.Errorf("partition %d: source end %d, destination end %d, last mirrored %d", part, src[part], dst[part], st.LastMirrored)
		}
		if ackedNow[part] > dst[part] || ackedNow[part] == 0 {
			t.Errorf("partition %d: app's acknowledged records reach %d, the destination ends at %d", part, ackedNow[part], dst[part])
		}
		records += src[part]
	}
	t.Logf("acknowledged up to %v; source ends %v", ackedNow, src)
	p.assertIdenticalParts(t, lifecycleTopic, []int32{0, 1, 2}, records)
	// The promoted topic is writable on the destination.
	waitReadOnly(t, a, lifecycleTopic, false)
	dapp := appClient(t, p.dst)
	for part := range int32(parts) {
		if r, err := appWrite(t, dapp, lifecycleTopic, part, "after promote"); err != nil || r.Offset != dst[part] {
			t.Errorf("partition %d: app writing the promoted topic: %v (offset %v), want offset %d", part, err, r, dst[part])
		}
	}
}

// TestReadOnlyNotSuperUser: an agent that may do everything through ACLs
// but is no super user mirrors on, with read_only_enforced=false and a
// warning that says why: a DENY WRITE User:* would refuse its own writes.
func TestReadOnlyNotSuperUser(t *testing.T) {
	p := &pair{
		src: devcluster.StartT(t, devcluster.Name("src"), devcluster.KfakeOptions(kfake.SeedTopics(1, lifecycleTopic))),
		dst: devcluster.StartT(t, devcluster.Name("dst"), devcluster.ACLs(),
			devcluster.SASLUser("admin", "admin-pass"), devcluster.SuperUser("admin"),
			devcluster.SASLUser(agentUser, agentPass)),
	}
	p.srcCl = failClient(t, p.srcAgentOpts(false)...)
	p.dstCl = failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain("admin", "admin-pass"), kgo.MetadataMinAge(100*time.Millisecond))
	p.srcAdm, p.dstAdm = kadm.NewClient(p.srcCl), kadm.NewClient(p.dstCl)
	rs, err := p.dstAdm.CreateACLs(testCtx(t), kadm.NewACLs().Allow("User:"+agentUser).AllowHosts("*").
		Topics("*").Groups("*").TransactionalIDs("*").Clusters().Operations(kadm.OpAll))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating the agent's ACLs: %v", r.Err)
		}
	}
	a := p.securedAgent(t, lifecycleTopic, false)
	produceN(t, p.producer(t), lifecycleTopic, 0, 30, "plain", false)
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	ts := a.topicStatus(lifecycleTopic)
	if ts.ReadOnlyEnforced || !strings.Contains(ts.ReadOnlyReason, "not a super user") {
		t.Errorf("agent not a super user: read_only_enforced %v, reason %q", ts.ReadOnlyEnforced, ts.ReadOnlyReason)
	}
	m, _ := a.status()
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "not a super user") {
		t.Errorf("mirror warnings %q do not say that the agent is not a super user", m.Warnings)
	}
}

// TestReadOnlyReleasedByDelete: a mirror deleted with force leaves its
// topics as ordinary, writable topics.
func TestReadOnlyReleasedByDelete(t *testing.T) {
	p := securedPair(t, lifecycleTopic, 1, false)
	a := p.securedAgent(t, lifecycleTopic, false)
	produceN(t, p.producer(t), lifecycleTopic, 0, 20, "plain", false)
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	waitReadOnly(t, a, lifecycleTopic, true)
	assertRefused(t, p.dst, lifecycleTopic, 1, "mirroring")
	if err := a.co.Delete(testCtx(t), mirrorName, true); err != nil {
		t.Fatal(err)
	}
	r, err := appWrite(t, appClient(t, p.dst), lifecycleTopic, 0, "after delete")
	if err != nil || r.Offset != 20 {
		t.Fatalf("app writing the topic of a deleted mirror: %v (%v), want offset 20", err, r)
	}
}
