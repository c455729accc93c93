package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/coordinator"
)

// TestTopicRegex: a mirror with topic_regex picks up a source topic created
// after it started and mirrors it at identical offsets; topics whose whole
// name does not match, and internal topics even when the expression matches
// them, stay unmirrored.
func TestTopicRegex(t *testing.T) {
	p := newPair(t, pairOpts{topic: "orders.eu", partitions: 2})
	spec := p.spec()
	spec.TopicRegex = []string{`(__)?orders\..*`}
	a := p.startAgent(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond})
	src := p.producer(t)
	produceN(t, src, "orders.eu", 0, 20, "eu", false)
	p.waitMirrored(t, a, "orders.eu", failWait)

	for _, topic := range []string{"orders.us", "xorders.us", "orders-us", "__orders.audit"} {
		createTopic(t, p.srcAdm, topic, 3, nil)
		produceN(t, src, topic, 1, 5, "early", false)
	}
	txn := p.txnProducer(t, "regex-txn")
	beginTxn(t, txn, "orders.us", 2, 4, "aborted")
	endTxn(t, testCtx(t), txn, false)
	for part := range int32(3) {
		produceN(t, src, "orders.us", part, 15, "us", false)
	}
	p.waitMirrored(t, a, "orders.us", failWait)
	p.assertSame(t, "orders.us")

	specs := a.co.Mirrors()
	if len(specs) != 1 || !slices.Equal(specs[0].Topics, []string{"orders.eu", "orders.us"}) {
		t.Fatalf("mirror topics after discovery: %+v", specs)
	}
	time.Sleep(time.Second) // several refreshes
	tds, err := p.dstAdm.ListTopics(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"xorders.us", "orders-us", "__orders.audit"} {
		if tds.Has(topic) {
			t.Errorf("%s was mirrored, but %q does not match its whole name or it is internal", topic, spec.TopicRegex[0])
		}
	}

	// An invalid expression is refused, naming the field.
	err = a.co.AddTopicsWith(testCtx(t), mirrorName, coordinator.AddRequest{TopicRegex: []string{"orders.("}})
	var inv *coordinator.InvalidSpecError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), `topic_regex: "orders.(" is not a valid regular expression`) {
		t.Errorf("invalid topic_regex: %v", err)
	}
}
