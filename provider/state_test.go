package provider

import (
	"maps"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

func TestTopicState(t *testing.T) {
	p := func(s mirrorapi.State, mode string) mirrorapi.Partition {
		return mirrorapi.Partition{State: s, StopMode: mode}
	}
	const (
		fo = mirrorapi.StopModeFailover
		pr = mirrorapi.StopModePromote
	)
	for _, c := range []struct {
		name  string
		parts []mirrorapi.Partition
		want  string
		mixed string // part of the mixed note, "" for none
	}{
		{"no partitions yet", nil, topicMirroring, ""},
		{"starting", []mirrorapi.Partition{p(mirrorapi.StateInitializing, ""), p(mirrorapi.StatePreparing, ""), p(mirrorapi.StateMirroring, "")}, topicMirroring, ""},
		{"paused", []mirrorapi.Partition{p(mirrorapi.StatePaused, ""), p(mirrorapi.StatePaused, "")}, topicPaused, ""},
		{"failover", []mirrorapi.Partition{p(mirrorapi.StateStopped, fo), p(mirrorapi.StateStopped, fo)}, topicStopped, ""},
		{"stopped before the agent kept the mode", []mirrorapi.Partition{p(mirrorapi.StateStopped, "")}, topicStopped, ""},
		{"promoted", []mirrorapi.Partition{p(mirrorapi.StateStopped, pr), p(mirrorapi.StateStopped, pr)}, topicPromoted, ""},
		{"promote then failover", []mirrorapi.Partition{p(mirrorapi.StateStopped, pr), p(mirrorapi.StateStopped, fo)}, topicStopped, ""},
		{"stopping", []mirrorapi.Partition{p(mirrorapi.StateStopping, pr), p(mirrorapi.StateStopped, pr)}, topicStopping, "1 stopping"},
		{"one failed", []mirrorapi.Partition{p(mirrorapi.StateFailed, ""), p(mirrorapi.StateMirroring, "")}, topicFailed, "1 failed, 1 mirroring"},
		{"all failed", []mirrorapi.Partition{p(mirrorapi.StateFailed, "")}, topicFailed, ""},
		{"half paused", []mirrorapi.Partition{p(mirrorapi.StatePaused, ""), p(mirrorapi.StateMirroring, "")}, topicMixed, "1 mirroring, 1 paused"},
	} {
		got, mixed := topicState(mirrorapi.Topic{Partitions: c.parts})
		if got != c.want || (c.mixed == "") != (mixed == "") || !strings.Contains(mixed, c.mixed) {
			t.Errorf("%s: topicState = %q, %q; want %q, %q", c.name, got, mixed, c.want, c.mixed)
		}
	}
}

// TestCheckTransition is the plan-time rule: nothing leaves stopped or
// promoted, and the message says to fail back instead.
func TestCheckTransition(t *testing.T) {
	all := append([]string{topicStopping, topicFailed, topicMixed}, configurableTopicStates...)
	for _, from := range all {
		for _, to := range configurableTopicStates {
			summary, detail := checkTransition(from, to)
			refused := summary != ""
			wantRefused := from != to && (terminal(from) || (from == topicStopping && !terminal(to)))
			if refused != wantRefused {
				t.Errorf("%s -> %s: refused %v (%q), want %v", from, to, refused, summary, wantRefused)
			}
			if refused && !terminal(to) && (!strings.Contains(detail, "fail back") && !strings.Contains(detail, "failback") || !strings.Contains(detail, "other direction")) {
				t.Errorf("%s -> %s: %q does not say to fail back with a mirror in the other direction", from, to, detail)
			}
			if refused && terminal(from) && !strings.Contains(detail, "writable") && !terminal(to) {
				t.Errorf("%s -> %s: %q does not say the topic is writable", from, to, detail)
			}
		}
	}
}

// TestFailbackPlan: the plan-time message for a stopped topic points to a
// kafka_mirror_topic with failback = true; recreate without failback is
// accepted (it is for a later recovery).
func TestFailbackPlan(t *testing.T) {
	for _, from := range []string{topicStopped, topicPromoted} {
		_, detail := checkTransition(from, topicMirroring)
		if !strings.Contains(detail, "kafka_mirror_topic for the topic with failback = true") || !strings.Contains(detail, "recreate = true") {
			t.Errorf("%s -> mirroring: %q does not say how to fail back from Terraform", from, detail)
		}
	}
	s := server(t)
	sch := resourceSchema(t, s, "kafka_mirror_topic")
	typ := sch.ValueType()
	prior, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, nil))
	if err != nil {
		t.Fatal(err)
	}
	boolean := func(b bool) tftypes.Value { return tftypes.NewValue(tftypes.Bool, b) }
	for _, c := range []struct {
		name string
		vals map[string]tftypes.Value
		want string
	}{
		{"failback", map[string]tftypes.Value{"failback": boolean(true)}, ""},
		{"failback with recreate", map[string]tftypes.Value{"failback": boolean(true), "recreate": boolean(true)}, ""},
		{"recreate alone", map[string]tftypes.Value{"recreate": boolean(true)}, ""},
		{"recreate, failback false", map[string]tftypes.Value{"failback": boolean(false), "recreate": boolean(true)}, ""},
	} {
		vals := map[string]tftypes.Value{"mirror": str("back"), "topic": str("orders"), "state": str(topicMirroring)}
		for k, v := range c.vals {
			vals[k] = v
		}
		got := planDiagnostics(t, s, "kafka_mirror_topic", &prior, config(t, sch, vals))
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: plan diagnostics %q, want %q", c.name, got, c.want)
		}
	}
}

// TestRecoveryPlan: a plan that recovers a failed topic warns that
// recreate = true deletes the destination topic, and that a plain recover
// of a failure only recreate can clear will fail again; a failure a plain
// recover clears gets no warning.
func TestRecoveryPlan(t *testing.T) {
	s := server(t)
	sch := resourceSchema(t, s, "kafka_mirror_topic")
	boolean := func(b bool) tftypes.Value { return tftypes.NewValue(tftypes.Bool, b) }
	for _, c := range []struct {
		name     string
		code     reason.Code
		recreate bool
		want     string
	}{
		{"recreate", reason.ForeignWrite, true, "Recovering topic \"orders\" deletes its destination topic"},
		{"plain recover of a foreign write", reason.ForeignWrite, false, "A plain recover of topic \"orders\" will fail again (FOREIGN_WRITE)"},
		{"plain recover of a lasting sequence error", reason.SequenceLasting, false, ""},
	} {
		base := map[string]tftypes.Value{"mirror": str("dr"), "topic": str("orders"), "id": str("dr/orders")}
		with := func(extra map[string]tftypes.Value) map[string]tftypes.Value {
			out := maps.Clone(base)
			maps.Copy(out, extra)
			return out
		}
		prior := config(t, sch, with(map[string]tftypes.Value{"state": str(topicFailed), "recreate": boolean(false),
			"reason_code": str(string(c.code)), "reason": str("partition 0: something went wrong")}))
		cfg := config(t, sch, with(map[string]tftypes.Value{"state": str(topicMirroring), "recreate": boolean(c.recreate)}))
		got := planDiagnostics(t, s, "kafka_mirror_topic", prior, cfg)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: plan diagnostics %q, want %q", c.name, got, c.want)
		}
	}
}
