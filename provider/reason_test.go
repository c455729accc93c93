package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestTopicReasonCode: reason_code is the topic error's code, else the
// first failed partition's, else the first partition's with one.
func TestTopicReasonCode(t *testing.T) {
	p := func(n int32, s mirrorapi.State, code mirrorapi.ReasonCode) mirrorapi.Partition {
		return mirrorapi.Partition{Partition: n, State: s, ReasonCode: code, Reason: "why " + string(code)}
	}
	for _, c := range []struct {
		name  string
		topic mirrorapi.Topic
		want  mirrorapi.ReasonCode
	}{
		{"nothing to say", mirrorapi.Topic{Partitions: []mirrorapi.Partition{p(0, mirrorapi.StateMirroring, "")}}, ""},
		{"topic error first", mirrorapi.Topic{Error: "source topic not found", ErrorCode: reason.SourceTopicMissing,
			Partitions: []mirrorapi.Partition{p(0, mirrorapi.StateFailed, reason.ForeignWrite)}}, reason.SourceTopicMissing},
		{"a failed partition before an earlier one that mirrors", mirrorapi.Topic{Partitions: []mirrorapi.Partition{
			p(0, mirrorapi.StateMirroring, reason.RetentionLoss), p(1, mirrorapi.StateMirroring, ""), p(2, mirrorapi.StateFailed, reason.DuplicateMarker), p(3, mirrorapi.StateFailed, reason.ForeignWrite),
		}}, reason.DuplicateMarker},
		{"out of order from the agent", mirrorapi.Topic{Partitions: []mirrorapi.Partition{
			p(3, mirrorapi.StateFailed, reason.ForeignWrite), p(1, mirrorapi.StateFailed, reason.DestinationAhead),
		}}, reason.DestinationAhead},
		{"no failure", mirrorapi.Topic{Partitions: []mirrorapi.Partition{
			p(0, mirrorapi.StateMirroring, ""), p(1, mirrorapi.StateMirroring, reason.PromoteTimedOut), p(2, mirrorapi.StateMirroring, reason.HangingTransaction),
		}}, reason.PromoteTimedOut},
		{"an uncoded topic error", mirrorapi.Topic{Error: "setting invariant configs", Partitions: []mirrorapi.Partition{p(0, mirrorapi.StateMirroring, reason.Aligning)}}, reason.Aligning},
	} {
		f, diags := flattenTopic(c.topic)
		if diags.HasError() {
			t.Fatalf("%s: %v", c.name, diags)
		}
		if got := f.ReasonCode.ValueString(); got != string(c.want) {
			t.Errorf("%s: reason_code %q, want %q (reason %q)", c.name, got, c.want, f.Reason.ValueString())
		}
	}
}

// TestStuckComparesCodes: a promote that timed out is told by its code,
// whatever its message says.
func TestStuckComparesCodes(t *testing.T) {
	timedOut := mirrorapi.Topic{Partitions: []mirrorapi.Partition{
		{Partition: 0, State: mirrorapi.StateStopped, StopMode: mirrorapi.StopModePromote},
		{Partition: 1, State: mirrorapi.StateMirroring, ReasonCode: reason.PromoteTimedOut, Reason: "the promote gave up"},
	}}
	if msg := stuck(timedOut, topicPromoted); !strings.Contains(msg, "Partition 1: the promote gave up") || !strings.Contains(msg, "retry the promote") {
		t.Errorf("stuck with PROMOTE_TIMED_OUT = %q", msg)
	}
	waiting := mirrorapi.Topic{Partitions: []mirrorapi.Partition{
		{Partition: 0, State: mirrorapi.StateMirroring, ReasonCode: reason.HangingTransaction, Reason: "promote timed out, says the prose"},
	}}
	if msg := stuck(waiting, topicPromoted); msg != "" {
		t.Errorf("stuck with %s = %q, want nothing (only the code counts)", reason.HangingTransaction, msg)
	}
}

// TestSchemaReasonCode: kafka_mirror_topic, resource and data source, has
// a computed reason_code described next to reason.
func TestSchemaReasonCode(t *testing.T) {
	resp, err := server(t).GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for kind, s := range map[string]*tfprotov6.Schema{
		"resource": resp.ResourceSchemas["kafka_mirror_topic"], "data source": resp.DataSourceSchemas["kafka_mirror_topic"],
	} {
		a := attribute(s, "reason_code")
		if a == nil || !a.Computed || a.Optional || a.Required {
			t.Errorf("%s kafka_mirror_topic reason_code: %+v, want computed only", kind, a)
			continue
		}
		if !strings.Contains(a.Description, "`reason`") || !strings.Contains(a.Description, "troubleshooting guide") {
			t.Errorf("%s kafka_mirror_topic reason_code description %q does not say what it codes and where codes are listed", kind, a.Description)
		}
	}
}
