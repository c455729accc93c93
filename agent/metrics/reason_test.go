package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestCollectorReasonCode: a partition whose reason has a code has one
// kmirror_partition_reason series with that code, FAILED or not; one
// without a reason, or with an uncoded one, has none.
func TestCollectorReasonCode(t *testing.T) {
	c := metrics.NewCollector()
	c.SetSource(fakeSource{{
		Name: "dr", StateCounts: map[mirrorapi.State]int{},
		Topics: []mirrorapi.Topic{{Name: "orders", Partitions: []mirrorapi.Partition{
			{Partition: 0, State: mirrorapi.StateMirroring},
			{Partition: 1, State: mirrorapi.StateFailed, Reason: "the destination has a record at offset 7 that the agent did not write", ReasonCode: reason.ForeignWrite},
			{Partition: 2, State: mirrorapi.StateMirroring, Reason: "promote timed out after 5m0s", ReasonCode: reason.PromoteTimedOut},
			{Partition: 3, State: mirrorapi.StateMirroring, Reason: "a reason from an agent that kept no codes"},
		}}},
	}})
	want := `
# HELP kmirror_partition_reason 1 for a partition whose reason has a stable code (describe's reason_code: why it failed, or what it waits for); absent without one.
# TYPE kmirror_partition_reason gauge
kmirror_partition_reason{mirror="dr",partition="1",reason_code="FOREIGN_WRITE",topic="orders"} 1
kmirror_partition_reason{mirror="dr",partition="2",reason_code="PROMOTE_TIMED_OUT",topic="orders"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kmirror_partition_reason"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c, "kmirror_partition_reason")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
