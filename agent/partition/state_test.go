package partition

import (
	"errors"
	"strings"
	"testing"
)

// TestTransition is the whole lifecycle table: every state against every
// operation, the target or the refusal, what the refusal says, and that
// every refusal lists exactly the operations the table allows from that
// state.
func TestTransition(t *testing.T) {
	all := []State{Initializing, Preparing, Mirroring, Paused, Stopping, Stopped, Failed}
	// want[op][from] is the target state, or "!" plus a piece of the
	// refusal message.
	want := map[Op]map[State]string{
		OpPause: {
			Initializing: "PAUSED", Preparing: "PAUSED", Mirroring: "PAUSED", Paused: "PAUSED",
			Stopping: "!being stopped", Stopped: "!" + stoppedMsg, Failed: "!recover it to mirror again",
		},
		OpResume: {
			Initializing: "MIRRORING", Preparing: "MIRRORING", Mirroring: "MIRRORING", Paused: "MIRRORING",
			Stopping: "!cannot mirror again", Stopped: "!" + stoppedMsg, Failed: "!recover a failed one",
		},
		OpStopFailover: {
			Initializing: "STOPPED", Preparing: "STOPPED", Mirroring: "STOPPED", Paused: "STOPPED",
			Stopping: "STOPPED", Stopped: "STOPPED", Failed: "STOPPED",
		},
		OpStopPromote: {
			Initializing: "STOPPED", Preparing: "STOPPED", Mirroring: "STOPPED", Paused: "STOPPED",
			Stopping: "!stop with mode failover", Stopped: "STOPPED", Failed: "!recover it first, or stop it with mode failover",
		},
		OpRecover: {
			Failed: "INITIALIZING", Initializing: "!FAILED partitions only", Preparing: "!FAILED partitions only",
			Mirroring: "!FAILED partitions only", Paused: "!FAILED partitions only",
			Stopping: "!failed partitions only", Stopped: "!" + stoppedMsg,
		},
		OpRecoverRecreate: {
			Failed: "INITIALIZING", Initializing: "!a topic with a FAILED partition", Preparing: "!a topic with a FAILED partition",
			Mirroring: "!a topic with a FAILED partition", Paused: "!a topic with a FAILED partition",
			Stopping: "!topics with a FAILED partition", Stopped: "!" + stoppedMsg,
		},
	}
	if len(want) != len(Ops) {
		t.Fatalf("the table has %d operations, Ops %d", len(want), len(Ops))
	}
	// allowed[from] is what every refusal from that state must list: the
	// operations the table moves elsewhere, in Ops order.
	allowed := map[State][]string{}
	for _, op := range Ops {
		for _, from := range all {
			if w := want[op][from]; !strings.HasPrefix(w, "!") && w != string(from) {
				allowed[from] = append(allowed[from], string(op))
			}
		}
	}
	for _, op := range Ops {
		row := want[op]
		for _, from := range all {
			w, okRow := row[from]
			if !okRow {
				t.Fatalf("table misses %s from %s", op, from)
			}
			to, err := Transition(from, op)
			msg, refused := strings.CutPrefix(w, "!")
			if !refused {
				if err != nil || string(to) != w {
					t.Errorf("%s from %s: got %s, %v; want %s", op, from, to, err, w)
				}
				continue
			}
			var te *TransitionError
			if !errors.As(err, &te) || to != from || te.From != from || te.Op != op {
				t.Errorf("%s from %s: got %s, %v; want a refusal", op, from, to, err)
				continue
			}
			if !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "is "+string(from)+": ") {
				t.Errorf("%s from %s: message %q, want it to contain %q", op, from, err, msg)
			}
			wantAllowed := "(nothing else applies to it; stopping it again does nothing)"
			if a := allowed[from]; len(a) > 0 {
				wantAllowed = "(allowed from " + string(from) + ": " + strings.Join(a, ", ") + ")"
			}
			if !strings.HasSuffix(err.Error(), wantAllowed) {
				t.Errorf("%s from %s: message %q does not end with what is allowed, %q", op, from, err, wantAllowed)
			}
		}
	}
	te := &TransitionError{Subject: "topic orders", From: Stopped, Op: OpResume, Msg: stoppedMsg}
	if got := te.Error(); got != "topic orders is STOPPED: a stopped topic is writable on the destination and cannot mirror again; to mirror it back, add it with failback to a mirror in the other direction (kmirror add --failback) (nothing else applies to it; stopping it again does nothing)" {
		t.Errorf("message: %s", got)
	}
	if _, err := Transition(Mirroring, Op("explode")); err == nil {
		t.Error("unknown op accepted")
	}
	if _, err := Transition(State("WEIRD"), OpPause); err == nil {
		t.Error("unknown state accepted")
	}
}
