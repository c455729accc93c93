package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/partition"
)

// TestRecoverRecreate: a topic FAILED because its source topic was
// recreated cannot be re-aligned by a plain recover; recover with recreate
// deletes and recreates the destination topic, keeping a config set on it,
// and mirrors the new source topic at identical offsets. Recreate is
// refused on a topic that is not FAILED, saying what is allowed, and
// changes nothing there.
func TestRecoverRecreate(t *testing.T) {
	forEngines(t, testRecoverRecreate)
}

func testRecoverRecreate(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "srcgone", partitions: 2})
	topic, other := p.topic, p.name("kept")
	createTopic(t, p.srcCl, other, 1, nil)
	src := p.producer(t)
	for part := range int32(2) {
		produceN(t, src, topic, part, 10, "before", true)
	}
	produceN(t, src, other, 0, 10, "before", true)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic, other)), refreshInterval: 300 * time.Millisecond})
	p.waitMirrored(t, a, topic, failWait)
	p.waitMirrored(t, a, other, failWait)
	ctx := testCtx(t)
	// A config the operator set on the destination topic itself (one that
	// config sync leaves local: it is in the KIP default exclude list). 1,
	// not more: the Kafka destination has one broker, and acks=all writes
	// to a topic asking 2 in-sync replicas fail there. It is the broker's
	// default too, so the check below looks at where the value comes from.
	if _, err := p.dstAdm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: new("1")}}, topic); err != nil {
		t.Fatal(err)
	}
	// Kafka answers AlterConfigs before the broker describing the topic
	// has the change: read until it does.
	waitUntil(t, failWait, "min.insync.replicas set on the destination topic", func() (bool, string) {
		v, src := topicOverride(t, p.dstAdm, topic, "min.insync.replicas")
		return v == "1" && src == kmsg.ConfigSourceDynamicTopicConfig, fmt.Sprintf("%q from %v", v, src)
	})
	oldID := topicIDOf(t, p.dstAdm, topic)

	// The source topic is recreated: a new producer writes it (the old one
	// holds the old topic id), and every partition goes FAILED.
	p.replaceTopic(t, p.srcAdm, topic, 2)
	src = p.producer(t)
	produceN(t, src, topic, 0, 3, "new", true)
	for part := range int32(2) {
		waitFailed(t, a, topic, part, fmt.Sprintf(`^source topic %q was recreated \(topic id `, topic))
	}
	if err := a.co.RecoverTopics(ctx, mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	st := waitFailed(t, a, topic, 0, `a recover cannot re-align it`)
	if !strings.Contains(st.Reason, "recover with recreate") {
		t.Errorf("reason after a plain recover does not point to recover with recreate: %s", st.Reason)
	}

	otherEnds := ends(t, p.dstAdm, other)
	err := a.co.RecoverTopicsWith(ctx, mirrorName, []string{other}, true)
	var te *partition.TransitionError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), fmt.Sprintf("topic %s is MIRRORING: recover with recreate deletes and recreates the whole destination topic", other)) ||
		!strings.HasSuffix(err.Error(), "(allowed from MIRRORING: pause, stop (failover), stop (promote))") {
		t.Errorf("recover with recreate of a mirroring topic: %v", err)
	}

	if err := a.co.RecoverTopicsWith(ctx, mirrorName, []string{topic}, true); err != nil {
		t.Fatal(err)
	}
	produceN(t, src, topic, 1, 4, "after", true)
	p.waitMirrored(t, a, topic, failWait)
	p.assertSame(t, topic)
	if newID := topicIDOf(t, p.dstAdm, topic); newID == oldID {
		t.Errorf("the destination topic was not recreated (topic id %s)", newID)
	}
	if v, src := topicOverride(t, p.dstAdm, topic, "min.insync.replicas"); v != "1" || src != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("min.insync.replicas of the recreated topic: %q from %v, want the 1 set on the topic before", v, src)
	}
	if got := ends(t, p.dstAdm, other); fmt.Sprint(got) != fmt.Sprint(otherEnds) {
		t.Errorf("the refused recreate changed %s: %v, then %v", other, otherEnds, got)
	}
}

// topicOverride returns the value of topic's config key and where it comes
// from.
func topicOverride(t *testing.T, adm *kadm.Client, topic, key string) (string, kmsg.ConfigSource) {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c.MaybeValue(), c.Source
		}
	}
	return "", kmsg.ConfigSourceUnknown
}

func topicIDOf(t *testing.T, adm *kadm.Client, topic string) kadm.TopicID {
	t.Helper()
	tds, err := adm.ListTopics(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	return tds[topic].ID
}
