package e2e

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/kcat"
)

// TestTopicRegex: a mirror with topic_regex picks up a source topic created
// after it started and mirrors it at identical offsets; topics whose whole
// name does not match, and internal topics even when the expression matches
// them, stay unmirrored.
func TestTopicRegex(t *testing.T) {
	forEngines(t, testTopicRegex)
}

func testTopicRegex(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: "orders.eu", partitions: 2})
	// On a shared cluster every name ends in the test's suffix, and so
	// does the expression: it matches this test's topics only.
	eu, us := p.topic, p.name("orders.us")
	spec := p.spec()
	spec.TopicRegex = []string{`(__)?orders\..*` + regexp.QuoteMeta(p.name(""))}
	a := p.startAgent(t, agentOpts{apply: &spec, refreshInterval: 200 * time.Millisecond})
	src := p.producer(t)
	produceN(t, src, eu, 0, 20, "eu", false)
	p.waitMirrored(t, a, eu, failWait)

	// The topics that must stay unmirrored come first: once orders.us,
	// created after them, is discovered, a refresh has listed them all.
	unmatched := []string{p.name("xorders.us"), p.name("orders-us"), p.name("__orders.audit")}
	for _, topic := range append(slices.Clone(unmatched), us) {
		createTopic(t, p.srcCl, topic, 3, nil)
		produceN(t, src, topic, 1, 5, "early", false)
	}
	txn := p.txnProducer(t, p.name("regex-txn"))
	beginTxn(t, txn, us, 2, 4, "aborted")
	endTxn(t, testCtx(t), txn, false)
	for part := range int32(3) {
		produceN(t, src, us, part, 15, "us", false)
	}
	p.waitMirrored(t, a, us, failWait)
	// 5 early records, 4 aborted ones (visible at read_uncommitted), 45.
	p.assertIdentical(t, us, identityOpts{wantRecords: 5 + 4 + 45, kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted}})

	specs := a.co.Mirrors()
	if len(specs) != 1 || !slices.Equal(specs[0].Topics, []string{eu, us}) {
		t.Fatalf("mirror topics after discovery: %+v", specs)
	}
	tds, err := p.dstAdm.ListTopics(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range unmatched {
		if tds.Has(topic) || slices.Contains(specs[0].Topics, topic) {
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
