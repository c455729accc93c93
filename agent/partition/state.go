package partition

import "github.com/kmirror/kmirror/internal/mirrorapi"

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
