package partition

import (
	"fmt"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// State is a mirror partition's lifecycle state; the API defines the values.
type State = mirrorapi.State

// The states a mirror partition moves through.
const (
	Initializing = mirrorapi.StateInitializing
	Preparing    = mirrorapi.StatePreparing // aligning the destination's log start
	Mirroring    = mirrorapi.StateMirroring
	Paused       = mirrorapi.StatePaused
	Stopping     = mirrorapi.StateStopping
	Stopped      = mirrorapi.StateStopped
	Failed       = mirrorapi.StateFailed
)

// Op is a lifecycle operation a user asks for on a mirror partition.
type Op string

// The lifecycle operations.
const (
	OpPause        Op = "pause"
	OpResume       Op = "resume"
	OpStopFailover Op = "stop (failover)"
	OpStopPromote  Op = "stop (promote)"
	OpRecover      Op = "recover"
	// OpRecoverRecreate is recover with recreate: the destination topic
	// is deleted and created again, and mirrored from the source's log
	// start. It deletes every partition, so every one must be FAILED.
	OpRecoverRecreate Op = "recover (recreate)"
)

// Ops lists every lifecycle operation, in the order messages name them.
var Ops = []Op{OpPause, OpResume, OpStopFailover, OpStopPromote, OpRecover, OpRecoverRecreate}

// TransitionError is a refused lifecycle operation; its message says what
// the state allows instead.
type TransitionError struct {
	// Subject names what was refused, such as `topic "orders" partition 3`;
	// empty means "the partition".
	Subject string
	From    State
	Op      Op
	Msg     string
	// Allowed are the operations that move From elsewhere (Allowed).
	Allowed []Op
}

func (e *TransitionError) Error() string {
	s := e.Subject
	if s == "" {
		s = "the partition"
	}
	allowed := "nothing else applies to it; stopping it again does nothing"
	if len(e.Allowed) > 0 {
		names := make([]string, len(e.Allowed))
		for i, op := range e.Allowed {
			names[i] = string(op)
		}
		allowed = "allowed from " + string(e.From) + ": " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s is %s: %s (%s)", s, e.From, e.Msg, allowed)
}

// Allowed lists the operations that move a partition in state from to
// another state (repeating one whose target is reached, such as pause when
// PAUSED, is allowed too but not listed).
func Allowed(from State) []Op {
	var out []Op
	for _, op := range Ops {
		if to, err := transition(from, op); err == nil && to != from {
			out = append(out, op)
		}
	}
	return out
}

// stoppedMsg is why nothing but a (repeated) stop applies to a stopped
// partition.
const stoppedMsg = "a stopped topic is writable on the destination and cannot mirror again; to mirror it back, add it with failback to a mirror in the other direction (kmirror add --failback)"

// Transition is the pure lifecycle rule: the state op leads to from state
// from, or why op is refused there. A repeated operation whose target is
// already reached (pause when PAUSED, resume when mirroring, stop when
// STOPPED) is allowed and leads to from itself.
//
//	pause:    INITIALIZING|PREPARING|MIRRORING → PAUSED
//	resume:   PAUSED → MIRRORING (resync from the destination end)
//	failover: INITIALIZING|PREPARING|MIRRORING|PAUSED|FAILED|STOPPING → STOPPED (via STOPPING)
//	promote:  INITIALIZING|PREPARING|MIRRORING|PAUSED → STOPPED (via STOPPING, at lag 0)
//	recover:  FAILED → INITIALIZING (clear the failure, resync, re-align)
//	recover (recreate): FAILED → INITIALIZING (recreate the destination topic,
//	          mirror from the source's log start); the coordinator moves the
//	          topic's other partitions that mirror along with a FAILED one
//
// Every refusal says which operations the state allows instead.
func Transition(from State, op Op) (State, error) {
	to, err := transition(from, op)
	if te, ok := err.(*TransitionError); ok {
		te.Allowed = Allowed(from)
	}
	return to, err
}

func transition(from State, op Op) (State, error) {
	refuse := func(msg string) (State, error) {
		return from, &TransitionError{From: from, Op: op, Msg: msg}
	}
	switch op {
	case OpPause, OpResume, OpStopFailover, OpStopPromote, OpRecover, OpRecoverRecreate:
	default:
		return from, fmt.Errorf("unknown operation %q", op)
	}
	switch from {
	case Initializing, Preparing, Mirroring, Paused, Stopping, Stopped, Failed:
	default:
		return from, fmt.Errorf("unknown state %q", from)
	}
	if from == Stopped {
		if op == OpStopFailover || op == OpStopPromote {
			return Stopped, nil
		}
		return refuse(stoppedMsg)
	}
	switch op {
	case OpPause:
		switch from {
		case Initializing, Preparing, Mirroring, Paused:
			return Paused, nil
		case Failed:
			return refuse("a failed partition does not mirror, so there is nothing to pause; recover it to mirror again, or stop it (mode failover) to make it writable")
		case Stopping:
			return refuse("it is being stopped and becomes writable; it cannot be paused")
		}
	case OpResume:
		switch from {
		case Paused, Initializing, Preparing, Mirroring:
			return Mirroring, nil
		case Failed:
			return refuse("resume applies to paused partitions; recover a failed one")
		case Stopping:
			return refuse("it is being stopped and becomes writable; it cannot mirror again")
		}
	case OpStopFailover:
		return Stopped, nil
	case OpStopPromote:
		switch from {
		case Initializing, Preparing, Mirroring, Paused:
			return Stopped, nil
		case Failed:
			return refuse("promote needs a mirroring partition to reach lag 0; recover it first, or stop it with mode failover (records not mirrored yet stay on the source only)")
		case Stopping:
			return refuse("a stop is already in progress; to stop at once without waiting for lag 0, stop with mode failover")
		}
	case OpRecover:
		switch from {
		case Failed:
			return Initializing, nil
		case Stopping:
			return refuse("it is being stopped and becomes writable; recover applies to failed partitions only; a stop in progress can only be repeated (mode failover)")
		case Paused:
			return refuse("recover applies to FAILED partitions only; this one has no failure to clear: resume it, or stop it")
		default:
			return refuse("recover applies to FAILED partitions only; this one has no failure to clear: pause or stop it")
		}
	case OpRecoverRecreate:
		switch from {
		case Failed:
			return Initializing, nil
		case Stopping:
			return refuse("it is being stopped and becomes writable; recover with recreate applies to topics with a FAILED partition; a stop in progress can only be repeated (mode failover)")
		case Paused:
			return refuse("recover with recreate deletes and recreates the whole destination topic, so it applies only to a topic with a FAILED partition (its other partitions are mirrored again with it); this one has no failure to clear: resume it, or stop it")
		default:
			return refuse("recover with recreate deletes and recreates the whole destination topic, so it applies only to a topic with a FAILED partition (its other partitions are mirrored again with it); this one has no failure to clear: pause or stop it")
		}
	}
	return refuse("no such transition")
}
