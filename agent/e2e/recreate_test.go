package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/partition"
)

// TestRecoverRecreate: a topic FAILED because its source topic was
// recreated cannot be re-aligned by a plain recover; recover with recreate
// deletes and recreates the destination topic, keeping a config set on it,
// and mirrors the new source topic at identical offsets. Recreate is
// refused on a topic that is not FAILED, saying what is allowed, and
// changes nothing there.
func TestRecoverRecreate(t *testing.T) {
	const topic, other = "srcgone", "kept"
	p, _, a, _ := mirrorTwoTopics(t, topic, other)
	ctx := testCtx(t)
	// A config the operator set on the destination topic itself (one that
	// config sync leaves local: it is in the KIP default exclude list).
	if _, err := p.dstAdm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: new("2")}}, topic); err != nil {
		t.Fatal(err)
	}
	oldID := topicIDOf(t, p.dstAdm, topic)

	src, _ := recreateSourceTopic(t, p, a, topic)
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
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "topic kept is MIRRORING: recover with recreate deletes and recreates the whole destination topic") ||
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
	rcs, err := p.dstAdm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	seg := ""
	for _, c := range rc.Configs {
		if c.Key == "min.insync.replicas" {
			seg = c.MaybeValue()
		}
	}
	if seg != "2" {
		t.Errorf("min.insync.replicas of the recreated topic: %q, want the 2 set before", seg)
	}
	if got := ends(t, p.dstAdm, other); fmt.Sprint(got) != fmt.Sprint(otherEnds) {
		t.Errorf("the refused recreate changed %s: %v, then %v", other, otherEnds, got)
	}
}

func topicIDOf(t *testing.T, adm *kadm.Client, topic string) kadm.TopicID {
	t.Helper()
	tds, err := adm.ListTopics(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	return tds[topic].ID
}
