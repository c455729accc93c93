package partition

import (
	"fmt"

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
)

// TransitionError is a refused lifecycle operation; its message says what
// the state allows instead.
type TransitionError struct {
	// Subject names what was refused, such as `topic "orders" partition 3`;
	// empty means "the partition".
	Subject string
	From    State
	Op      Op
	Msg     string
}

func (e *TransitionError) Error() string {
	s := e.Subject
	if s == "" {
		s = "the partition"
	}
	return fmt.Sprintf("%s is %s: %s", s, e.From, e.Msg)
}

// stoppedMsg is why nothing but a (repeated) stop applies to a stopped
// partition.
const stoppedMsg = "a stopped topic is writable on the destination and cannot mirror again; to mirror back, create a mirror in the other direction (failback)"

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
func Transition(from State, op Op) (State, error) {
	refuse := func(msg string) (State, error) {
		return from, &TransitionError{From: from, Op: op, Msg: msg}
	}
	switch op {
	case OpPause, OpResume, OpStopFailover, OpStopPromote, OpRecover:
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
			return refuse("it is being stopped and becomes writable; recover applies to failed partitions only")
		default:
			return refuse("recover applies to FAILED partitions only; this one has no failure to clear")
		}
	}
	return refuse("no such transition")
}
