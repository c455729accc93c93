package partition

import (
	"errors"
	"strings"
	"testing"
)

// TestTransition is the whole lifecycle table: every state against every
// operation, the target or the refusal and what its message says.
func TestTransition(t *testing.T) {
	const ok = ""
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
	}
	for op, row := range want {
		for _, from := range all {
			w, okRow := row[from]
			if !okRow {
				t.Fatalf("table misses %s from %s", op, from)
			}
			to, err := Transition(from, op)
			if msg, refused := strings.CutPrefix(w, "!"); refused {
				var te *TransitionError
				if !errors.As(err, &te) || to != from || te.From != from || te.Op != op {
					t.Errorf("%s from %s: got %s, %v; want a refusal", op, from, to, err)
					continue
				}
				if !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "is "+string(from)+": ") {
					t.Errorf("%s from %s: message %q, want it to contain %q", op, from, err, msg)
				}
				continue
			}
			if err != nil || string(to) != w {
				t.Errorf("%s from %s: got %s, %v; want %s%s", op, from, to, err, w, ok)
			}
		}
	}
	te := &TransitionError{Subject: "topic orders", From: Stopped, Op: OpResume, Msg: stoppedMsg}
	if got := te.Error(); got != "topic orders is STOPPED: a stopped topic is writable on the destination and cannot mirror again; to mirror back, create a mirror in the other direction (failback)" {
		t.Errorf("message: %s", got)
	}
	if _, err := Transition(Mirroring, Op("explode")); err == nil {
		t.Error("unknown op accepted")
	}
	if _, err := Transition(State("WEIRD"), OpPause); err == nil {
		t.Error("unknown state accepted")
	}
}
