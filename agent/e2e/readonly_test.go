package e2e

// Read-only mirror topics and the source fence of a promote (DESIGN §4):
// destinations with an authorizer where the agent is a super user and an
// application user "app" has ALLOW WRITE on the topic. On a Kafka engine the
// authorizer is the StandardAuthorizer, whose ACLs reach each broker through
// the metadata log: a check right after an ACL change polls until the
// broker shows it (waitTopicACLs).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorspec"
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

// authSides says which clusters of a pair are secured as securedOpts has
// them (SASL users agent, a super user, and app; an authorizer).
type authSides struct{ src, dst bool }

// authPairOn is a pair on engine e whose source and destination are secured
// as sides says, with topic (partitions partitions) on the source under
// p.topic; the pair's clients authenticate as the agent on a secured side.
// On the embedded engine the clusters are the test's own, started with
// securedOpts; on a Kafka engine they are the shared plain and secured
// clusters, so that a mixed pair costs no cluster of its own. Every ACL on
// p.topic is deleted on both sides when the test ends, whoever created it
// (the test, the agent's ACL sync, its read-only DENY or a promote's
// fence): a shared cluster keeps no ACL of a finished test.
func authPairOn(t *testing.T, e engine, topic string, partitions int32, sides authSides) *pair {
	t.Helper()
	auth := func(on bool) []kgo.Opt {
		if on {
			return []kgo.Opt{saslPlain(agentUser, agentPass)}
		}
		return nil
	}
	p := &pair{eng: e}
	if e.kind == devcluster.Embedded {
		srcOpts, dstOpts := []devcluster.Option{devcluster.Name("src")}, []devcluster.Option{devcluster.Name("dst")}
		if sides.src {
			srcOpts = securedOpts("src")
		}
		if sides.dst {
			dstOpts = securedOpts("dst")
		}
		srcOpts = append(srcOpts, devcluster.KfakeOptions(kfake.SeedTopics(partitions, topic)))
		p.src, p.dst = devclustertest.Start(t, srcOpts...), devclustertest.Start(t, dstOpts...)
		p.topic = topic
	} else {
		p.src = sharedCluster(t, e, sharedKey{engine: e.name, role: "src", brokers: 1, secured: sides.src})
		p.dst = sharedCluster(t, e, sharedKey{engine: e.name, role: "dst", brokers: 1, secured: sides.dst})
		var b [4]byte
		_, _ = rand.Read(b[:])
		p.suffix = hex.EncodeToString(b[:])
		p.stateTopic = "__kmirror_state-" + p.suffix
	}
	p.srcCl = failClient(t, append(p.srcAgentOpts(false), auth(sides.src)...)...)
	p.dstCl = failClient(t, append([]kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.MetadataMinAge(100 * time.Millisecond)}, auth(sides.dst)...)...)
	p.srcAdm, p.dstAdm = kadm.NewClient(p.srcCl), kadm.NewClient(p.dstCl)
	if e.kind != devcluster.Embedded {
		p.topic = p.name(topic)
		createTopic(t, p.srcCl, p.topic, partitions, nil)
	}
	name := p.topic
	if sides.src {
		dropACLsAtEnd(t, p.srcCl, topicFilter(name))
	}
	if sides.dst {
		dropACLsAtEnd(t, p.dstCl, topicFilter(name))
	}
	return p
}

// securedPairOn is securedPair on engine e: a destination with an
// authorizer, a source with one when srcACLs, and app allowed to write
// p.topic on each side with an authorizer.
func securedPairOn(t *testing.T, e engine, topic string, partitions int32, srcACLs bool) *pair {
	t.Helper()
	p := authPairOn(t, e, topic, partitions, authSides{src: srcACLs, dst: true})
	allowApp(t, p.dstAdm, p.topic)
	if srcACLs {
		allowApp(t, p.srcAdm, p.topic)
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

// srcProducer is p.producer, authenticated as the agent when auth.
func (p *pair) srcProducer(t *testing.T, auth bool) *kgo.Client {
	return failClient(t, append(p.srcAgentOpts(auth), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
}

// allowApp lets app write and describe topic (it need not exist yet), and
// waits until the broker adm reaches shows the ACLs.
func allowApp(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	b := kadm.NewACLs().Topics(topic).Allow("User:"+appUser).AllowHosts("*").Operations(kadm.OpWrite, kadm.OpDescribe)
	rs, err := adm.CreateACLs(testCtx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating app's ACL: %v", r.Err)
		}
	}
	if ok, why := poll(failWait, func() (bool, string) {
		d, err := adm.DescribeACLs(testCtx(t), b)
		n := 0
		for _, r := range d {
			err = errors.Join(err, r.Err)
			n += len(r.Described)
		}
		return err == nil && n == 2, fmt.Sprintf("%d of app's 2 ACLs on %s visible (%v)", n, topic, err)
	}); !ok {
		t.Fatalf("app's ACLs: %s", why)
	}
}

// describeTopicACLs lists the ACLs on the literal or prefixed resource
// topic (a TOPIC named exactly so) as the broker cl reaches has them, one
// string each ("ALLOW WRITE TOPIC:orders User:app"), sorted.
func describeTopicACLs(ctx context.Context, cl kmsg.Requestor, topic string) ([]string, error) {
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourceName, req.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.StringPtr(topic), kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return nil, fmt.Errorf("describing the ACLs of %s: %w", topic, err)
	}
	var out []string
	for _, r := range resp.Resources {
		for _, a := range r.ACLs {
			out = append(out, fmt.Sprintf("%s %s %s:%s %s", a.PermissionType, a.Operation, r.ResourceType, r.ResourceName, a.Principal))
		}
	}
	slices.Sort(out)
	return out, nil
}

// denyACL is the read-only ACL of topic (readonly.Enforcer's, also a
// promote's source fence), as describeTopicACLs shows it.
func denyACL(topic string) string { return "DENY WRITE TOPIC:" + topic + " " + readonly.Principal }

// waitDeny polls until the broker cl reaches shows topic's read-only DENY
// (present) or no longer shows it: a real broker applies an ACL change once
// it reads it from the metadata log, after CreateACLs or DeleteACLs has
// returned. (The agent waits so itself before it reports a topic read-only
// or STOPPED, or a promote's fence in place.)
func waitDeny(t *testing.T, cl *kgo.Client, topic string, present bool) {
	t.Helper()
	if ok, why := poll(failWait, func() (bool, string) {
		got, err := describeTopicACLs(testCtx(t), cl, topic)
		return err == nil && slices.Contains(got, denyACL(topic)) == present, fmt.Sprintf("ACLs on %s: %q (%v)", topic, got, err)
	}); !ok {
		t.Fatalf("the DENY WRITE on %s: want present=%v: %s", topic, present, why)
	}
}

// topicFilter matches every ACL on the resource TOPIC:name (literal or
// prefixed), whoever its principal.
func topicFilter(name string) kmsg.DeleteACLsRequestFilter {
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourceName, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.StringPtr(name), kmsg.ACLResourcePatternTypeAny
	f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	return f
}

// principalFilter matches every ACL of principal, on any resource.
func principalFilter(principal string) kmsg.DeleteACLsRequestFilter {
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	f.Principal = kmsg.StringPtr(principal)
	f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	return f
}

// dropACLsAtEnd deletes, when the test ends, the ACLs the filters match on
// the cluster cl reaches (which must have an authorizer). Cleanups run last
// in first out: the agents started after this call are stopped before it
// runs, and cl is closed after.
func dropACLsAtEnd(t *testing.T, cl *kgo.Client, filters ...kmsg.DeleteACLsRequestFilter) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		defer cancel()
		req := kmsg.NewPtrDeleteACLsRequest()
		req.Filters = filters
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			for _, r := range resp.Results {
				err = errors.Join(err, kerr.ErrorForCode(r.ErrorCode))
			}
		}
		if err != nil {
			t.Errorf("deleting the test's ACLs: %v", err)
		}
	})
}

// scramUser creates the SCRAM-SHA-256 user name on the cluster adm reaches
// (a secured cluster: its users are not fixed at start) and returns a
// client option authenticating as it, once the broker accepts it. The user
// and every ACL of its principal go when the test ends.
func scramUser(t *testing.T, c *devcluster.Cluster, cl *kgo.Client, name string) kgo.Opt {
	t.Helper()
	var b [12]byte
	_, _ = rand.Read(b[:])
	pass := hex.EncodeToString(b[:])
	adm := kadm.NewClient(cl)
	rs, err := adm.AlterUserSCRAMs(testCtx(t), nil, []kadm.UpsertSCRAM{{User: name, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: pass}})
	if err == nil {
		for _, r := range rs {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatalf("creating the SCRAM user %s: %v", name, err)
	}
	dropACLsAtEnd(t, cl, principalFilter("User:"+name))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failWait)
		defer cancel()
		if _, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: name, Mechanism: kadm.ScramSha256}}, nil); err != nil {
			t.Errorf("deleting the SCRAM user %s: %v", name, err)
		}
	})
	opt := kgo.SASL(scram.Auth{User: name, Pass: pass}.AsSha256Mechanism())
	// The credential reaches the broker through the metadata log.
	if ok, why := poll(failWait, func() (bool, string) {
		ucl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), opt)
		if err != nil {
			return false, err.Error()
		}
		defer ucl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = ucl.Ping(ctx)
		return err == nil, fmt.Sprintf("authenticating as %s: %v", name, err)
	}); !ok {
		t.Fatalf("the SCRAM user %s: %s", name, why)
	}
	return opt
}

// securedAgent runs the coordinator as the agent (SASL PLAIN, a super user)
// with the ACL source fence. Its ACL sync selects the ACLs on topic only: on
// shared clusters the source holds other tests' ACLs too.
func (p *pair) securedAgent(t *testing.T, topic string, srcACLs bool) *agent {
	t.Helper()
	spec := p.spec(topic)
	spec.ACLInclude = []string{"*;" + regexp.QuoteMeta(topic)}
	return p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.Destination = []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass)}
		c.SourceOpts = func(s mirrorspec.Source) []kgo.Opt {
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
// partition it names, that gives up at once. It is not idempotent, so that
// a refusal is the Produce's own (see assertRefused).
func appClient(t *testing.T, c *devcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	return failClient(t, append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), saslPlain(appUser, appPass),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.DisableIdempotentWrite()}, opts...)...)
}

// appWrite writes one record to topic/part as app.
func appWrite(t *testing.T, cl *kgo.Client, topic string, part int32, value string) (*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Value: []byte(value)}).First()
}

// assertRefused checks that app cannot write any partition of topic: a
// plain producer's Produce is refused with TOPIC_AUTHORIZATION_FAILED. An
// idempotent producer (the default of the Java client and franz-go) is
// refused too; a real broker refuses it earlier, at InitProducerId, with
// CLUSTER_AUTHORIZATION_FAILED: since KIP-679, IDEMPOTENT_WRITE is implied
// by WRITE on some topic, and the DENY leaves app none.
func assertRefused(t *testing.T, c *devcluster.Cluster, topic string, parts int32, when string) {
	t.Helper()
	cl := appClient(t, c)
	for part := range parts {
		if _, err := appWrite(t, cl, topic, part, "foreign "+when); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("%s: app writing %s/%d: %v, want TOPIC_AUTHORIZATION_FAILED", when, topic, part, err)
		}
	}
	idem := failClient(t, kgo.SeedBrokers(c.Bootstrap()...), saslPlain(appUser, appPass),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2), kgo.MetadataMinAge(100*time.Millisecond))
	for part := range parts {
		_, err := appWrite(t, idem, topic, part, "foreign idempotent "+when)
		refused := errors.Is(err, kerr.TopicAuthorizationFailed) ||
			(c.Engine() == devcluster.Kafka && errors.Is(err, kerr.ClusterAuthorizationFailed))
		if !refused {
			t.Errorf("%s: app writing %s/%d with an idempotent producer: %v, want a refusal", when, topic, part, err)
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
	forEngines(t, testReadOnlyMirrorTopic)
}

func testReadOnlyMirrorTopic(t *testing.T, e engine) {
	const parts = 3
	p := securedPairOn(t, e, lifecycleTopic, parts, false)
	topic := p.topic
	a := p.securedAgent(t, topic, false)
	src := p.producer(t)
	for part := range int32(parts) {
		produceN(t, src, topic, part, 50, "before", false)
	}
	p.waitMirrored(t, a, topic, failWait)
	ts := waitReadOnly(t, a, topic, true)
	if ts.ReadOnlyReason != "" {
		t.Errorf("read-only topic with a reason: %q", ts.ReadOnlyReason)
	}
	// read_only_enforced: the broker refuses app already (the agent
	// waits until every broker has applied its DENY).
	assertRefused(t, p.dst, topic, parts, "mirroring")

	// The refused writes left nothing: the mirror goes on.
	for part := range int32(parts) {
		produceN(t, src, topic, part, 20, "more", false)
	}
	p.waitMirrored(t, a, topic, failWait)

	if err := a.co.PauseTopics(testCtx(t), mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, topic, parts, partition.Paused, failWait)
	if !a.topicStatus(topic).ReadOnlyEnforced {
		t.Errorf("paused: read_only_enforced false:\n%s", a.describe())
	}
	assertRefused(t, p.dst, topic, parts, "paused")

	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, topic, parts, partition.Stopped, failWait)
	ts = waitReadOnly(t, a, topic, false)
	if ts.ReadOnlyReason != "" {
		t.Errorf("stopped topic with a read-only reason: %q", ts.ReadOnlyReason)
	}
	p.assertStoppedIdentical(t, topic, ps)
	p.assertWritesAfterMirrored(t, appClient(t, p.dst), topic, ps, "after failover")
}

// assertWritesAfterMirrored has app write value to each partition of the
// stopped topic through cl, and checks that each write lands at the
// destination end, right after the partition's last mirrored offset
// (stoppedEnd).
func (p *pair) assertWritesAfterMirrored(t *testing.T, cl *kgo.Client, topic string, stopped map[int32]partition.Status, value string) {
	t.Helper()
	for part, st := range stopped {
		want := p.stoppedEnd(t, topic, part, st.LastMirrored)
		r, err := appWrite(t, cl, topic, part, value)
		if err != nil {
			t.Fatalf("app writing %q to %s/%d: %v", value, topic, part, err)
		}
		if r.Offset != want {
			t.Errorf("partition %d: app's write landed at %d, want %d (the destination end after the last mirrored offset %d)", part, r.Offset, want, st.LastMirrored)
		}
	}
}

// TestReadOnlyNoAuthorizer: without an authorizer describe says
// read_only_enforced=false and why; a promote with the ACL fence goes on
// but says that source writes were not fenced.
func TestReadOnlyNoAuthorizer(t *testing.T) {
	forEngines(t, testReadOnlyNoAuthorizer)
}

func testReadOnlyNoAuthorizer(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 1})
	topic := p.topic
	spec := p.spec(topic)
	a := p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.SourceFence = coordinator.ACLSourceFence{}
		c.PromoteTimeout = time.Minute
	})
	produceN(t, p.producer(t), topic, 0, 30, "plain", false)
	p.waitMirrored(t, a, topic, failWait)
	ts := a.topicStatus(topic)
	if ts.ReadOnlyEnforced || !strings.Contains(ts.ReadOnlyReason, "no authorizer") {
		t.Errorf("without an authorizer: read_only_enforced %v, reason %q", ts.ReadOnlyEnforced, ts.ReadOnlyReason)
	}

	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatalf("a promote with a source without authorizer: %v", err)
	}
	ps := waitStates(t, a, topic, 1, partition.Stopped, failWait)
	if r := ps[0].Reason; !strings.Contains(r, "NOT fenced") || !strings.Contains(r, "no authorizer") {
		t.Errorf("STOPPED reason %q does not say that source writes were not fenced", r)
	}
	m, _ := a.status()
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "NOT fenced") {
		t.Errorf("mirror warnings %q do not say that source writes were not fenced", m.Warnings)
	}
	if src, dst := ends(t, p.srcAdm, topic), ends(t, p.dstAdm, topic); src[0] != dst[0] || src[0] != 30 {
		t.Errorf("source end %d, destination end %d, want both 30", src[0], dst[0])
	}
}

// TestPromoteFencesSource: app writes to the source through a promote; once
// the promote has started its writes are refused, and every record the
// source acknowledged is on the destination: the destination is identical
// to the source up to the source end.
func TestPromoteFencesSource(t *testing.T) {
	forEngines(t, testPromoteFencesSource)
}

func testPromoteFencesSource(t *testing.T, e engine) {
	const parts = 3
	p := securedPairOn(t, e, lifecycleTopic, parts, true)
	topic := p.topic
	a := p.securedAgent(t, topic, true)

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
			r, err := appWrite(t, app, topic, part, fmt.Sprintf("app %d", i))
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
	p.waitProgress(t, a, topic, map[int32]int64{0: 50, 1: 50, 2: 50}, failWait)
	waitReadOnly(t, a, topic, true)

	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopPromote); err != nil {
		t.Fatal(err)
	}
	// From here on the source refuses app: the fence is in place on every
	// source broker before StopTopics returns.
	assertRefused(t, p.src, topic, parts, "after the promote started")
	ps := waitStates(t, a, topic, parts, partition.Stopped, failWait)
	close(stop)
	<-done
	mu.Lock()
	if firstErr != nil && !errors.Is(firstErr, kerr.TopicAuthorizationFailed) {
		t.Errorf("app's first refusal: %v, want TOPIC_AUTHORIZATION_FAILED", firstErr)
	}
	ackedNow := acked
	mu.Unlock()

	src, dst := ends(t, p.srcAdm, topic), ends(t, p.dstAdm, topic)
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
	p.assertIdenticalParts(t, topic, []int32{0, 1, 2}, records)
	// The promoted topic is writable on the destination.
	waitReadOnly(t, a, topic, false)
	dapp := appClient(t, p.dst)
	for part := range int32(parts) {
		if r, err := appWrite(t, dapp, topic, part, "after promote"); err != nil || r.Offset != dst[part] {
			t.Errorf("partition %d: app writing the promoted topic: %v (offset %v), want offset %d", part, err, r, dst[part])
		}
	}
}

// TestReadOnlyNotSuperUser: an agent that may do everything through ACLs
// but is no super user mirrors on, with read_only_enforced=false and a
// warning that says why: a DENY WRITE User:* would refuse its own writes.
// The agent's user is a SCRAM user of the test's own, with ALLOW ALL on
// every topic, group and transactional id and on the cluster.
func TestReadOnlyNotSuperUser(t *testing.T) {
	forEngines(t, testReadOnlyNotSuperUser)
}

func testReadOnlyNotSuperUser(t *testing.T, e engine) {
	p := authPairOn(t, e, lifecycleTopic, 1, authSides{src: false, dst: true})
	topic := p.topic
	user := p.name("nosuper")
	auth := scramUser(t, p.dst, p.dstCl, user)
	rs, err := p.dstAdm.CreateACLs(testCtx(t), kadm.NewACLs().Allow("User:"+user).AllowHosts("*").
		Topics("*").Groups("*").TransactionalIDs("*").Clusters().Operations(kadm.OpAll))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("creating the agent's ACLs: %v", r.Err)
		}
	}
	// The ACLs reach the broker through the metadata log: wait until it
	// shows all four.
	if ok, why := poll(failWait, func() (bool, string) {
		d, err := p.dstAdm.DescribeACLs(testCtx(t), kadm.NewACLs().Allow("User:"+user).AllowHosts("*").
			Topics("*").Groups("*").TransactionalIDs("*").Clusters().Operations(kadm.OpAll))
		n := 0
		for _, r := range d {
			err = errors.Join(err, r.Err)
			n += len(r.Described)
		}
		return err == nil && n == 4, fmt.Sprintf("%d of the agent's 4 ACLs visible (%v)", n, err)
	}); !ok {
		t.Fatal(why)
	}

	spec := p.spec(topic)
	a := p.startAgentWith(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond}, func(c *coordinator.Config) {
		c.Destination = []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), auth}
		c.SourceFence = coordinator.ACLSourceFence{}
		c.StopTimeout = 10 * time.Second
	})
	produceN(t, p.producer(t), topic, 0, 30, "plain", false)
	p.waitMirrored(t, a, topic, failWait)
	ts := a.topicStatus(topic)
	if ts.ReadOnlyEnforced || !strings.Contains(ts.ReadOnlyReason, "not a super user") {
		t.Errorf("agent not a super user: read_only_enforced %v, reason %q", ts.ReadOnlyEnforced, ts.ReadOnlyReason)
	}
	m, _ := a.status()
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "not a super user") {
		t.Errorf("mirror warnings %q do not say that the agent is not a super user", m.Warnings)
	}
	if got, err := describeTopicACLs(testCtx(t), p.dstCl, topic); err != nil || slices.Contains(got, denyACL(topic)) {
		t.Errorf("ACLs on %s: %q (%v): the agent, no super user, must not deny writes", topic, got, err)
	}
}

// TestReadOnlyReleasedByDelete: a mirror deleted with force leaves its
// topics as ordinary, writable topics.
func TestReadOnlyReleasedByDelete(t *testing.T) {
	forEngines(t, testReadOnlyReleasedByDelete)
}

func testReadOnlyReleasedByDelete(t *testing.T, e engine) {
	p := securedPairOn(t, e, lifecycleTopic, 1, false)
	topic := p.topic
	a := p.securedAgent(t, topic, false)
	produceN(t, p.producer(t), topic, 0, 20, "plain", false)
	p.waitMirrored(t, a, topic, failWait)
	waitReadOnly(t, a, topic, true)
	assertRefused(t, p.dst, topic, 1, "mirroring")
	if err := a.co.Delete(testCtx(t), mirrorName, true); err != nil {
		t.Fatal(err)
	}
	r, err := appWrite(t, appClient(t, p.dst), topic, 0, "after delete")
	if err != nil || r.Offset != 20 {
		t.Fatalf("app writing the topic of a deleted mirror: %v (%v), want offset 20", err, r)
	}
}

// TestReadOnlyEnforceApplied: once readonly.Enforcer.Enforce returns, the
// destination refuses app's writes, and once Release returns it accepts
// them again, round after round. A real broker applies an ACL when it reads
// it from the metadata log, after CreateACLs or DeleteACLs has returned (a
// Produce sent at once still passed authorization a few times in a hundred
// on one broker), so the Enforcer waits until every broker shows the
// change. read_only_enforced, a STOPPED topic being writable, a promote's
// source fence and the super-user probe of Check rely on it.
func TestReadOnlyEnforceApplied(t *testing.T) {
	forEngines(t, testReadOnlyEnforceApplied)
}

func testReadOnlyEnforceApplied(t *testing.T, e engine) {
	const rounds = 40
	p := authPairOn(t, e, "applied", 1, authSides{src: false, dst: true})
	topic := p.topic // on the destination too: app writes it there
	createTopic(t, p.dstCl, topic, 1, nil)
	allowApp(t, p.dstAdm, topic)
	app := appClient(t, p.dst)
	if _, err := appWrite(t, app, topic, 0, "before"); err != nil {
		t.Fatalf("app writing %s before any DENY: %v", topic, err)
	}
	enf := readonly.New(p.dstAdm, readonly.WithClient(p.dstCl))
	var passed, refused int
	for i := range rounds {
		enforced, err := enf.Enforce(testCtx(t), topic)
		if err != nil || !enforced {
			t.Fatalf("round %d: Enforce: %v (enforced %v)", i, err, enforced)
		}
		if _, err := appWrite(t, app, topic, 0, fmt.Sprintf("denied %d", i)); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			passed++
			t.Errorf("round %d: app writing right after Enforce returned: %v, want TOPIC_AUTHORIZATION_FAILED", i, err)
		}
		if err := enf.Release(testCtx(t), topic); err != nil {
			t.Fatalf("round %d: Release: %v", i, err)
		}
		if _, err := appWrite(t, app, topic, 0, fmt.Sprintf("allowed %d", i)); err != nil {
			refused++
			t.Errorf("round %d: app writing right after Release returned: %v", i, err)
		}
	}
	if end := ends(t, p.dstAdm, topic)[0]; end != 1+rounds-int64(refused) {
		t.Errorf("%s ends at %d after %d accepted writes", topic, end, 1+rounds-refused)
	}
	t.Logf("%d rounds: %d writes passed a DENY that Enforce had reported, %d were refused after Release", rounds, passed, refused)
}
