package partition

// State is a mirror partition's lifecycle state (KIP-1279's, plus PAUSED).
type State string

// The states a mirror partition moves through.
const (
	Initializing State = "INITIALIZING"
	Preparing    State = "PREPARING" // aligning the destination's log start
	Mirroring    State = "MIRRORING"
	Paused       State = "PAUSED"
	Stopping     State = "STOPPING"
	Stopped      State = "STOPPED"
	Failed       State = "FAILED"
)
