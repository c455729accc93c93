// Package mirrorapi holds the agent API's types and a Go client for it, shared
// by the agent, the kmirror CLI and the Terraform provider so that all three
// read and write the same JSON.
package mirrorapi

// State is a mirror partition's lifecycle state (KIP-1279's, plus PAUSED).
type State string

// The states a mirror partition moves through.
const (
	StateInitializing State = "INITIALIZING"
	StatePreparing    State = "PREPARING" // aligning the destination's log start
	StateMirroring    State = "MIRRORING"
	StatePaused       State = "PAUSED"
	StateStopping     State = "STOPPING"
	StateStopped      State = "STOPPED"
	StateFailed       State = "FAILED"
)

// Source is how a mirror reaches its source cluster.
type Source struct {
	BootstrapServers []string `json:"bootstrap_servers"`
}

// DescribeResponse is the body of GET /v1/mirrors.
type DescribeResponse struct {
	Mirrors []Mirror `json:"mirrors"`
}

// Mirror is one mirror as describe shows it.
type Mirror struct {
	Name   string  `json:"name"`
	Source Source  `json:"source"`
	Topics []Topic `json:"topics"`
	// Error is why the mirror is not running (for example a preflight
	// refusal or an unreachable source), empty when it runs.
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	MaxLag   int64    `json:"max_lag"`
	// StateCounts counts partitions per state.
	StateCounts map[State]int `json:"state_counts"`
	// BufferedBytes is what the fetchers hold, not yet written.
	BufferedBytes int64 `json:"buffered_bytes"`
}

// Topic is one mirror topic.
type Topic struct {
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
	// ReadOnlyEnforced is whether the destination topic is read-only for
	// everyone but the agent (a DENY WRITE ACL for User:*, DESIGN §4):
	// false without an authorizer, when the agent is not a super user of
	// the destination, and once the topic is STOPPED. Foreign writes are
	// detected either way (the partition fails).
	ReadOnlyEnforced bool `json:"read_only_enforced"`
	// ReadOnlyReason says why a mirror topic is not read-only; empty when
	// it is, and for a STOPPED topic.
	ReadOnlyReason string      `json:"read_only_reason,omitempty"`
	Partitions     []Partition `json:"partitions"`
}

// Partition is one mirror partition's figures.
type Partition struct {
	Mirror    string `json:"mirror"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	State     State  `json:"state"`
	Reason    string `json:"reason,omitempty"`
	// StopMode is how a STOPPING or STOPPED partition was stopped
	// (StopModeFailover or StopModePromote); empty otherwise, and for
	// partitions stopped before the agent kept it.
	StopMode string `json:"stop_mode,omitempty"`
	// SourceOffset is the source high watermark last seen.
	SourceOffset     int64 `json:"source_offset"`
	SourceLastStable int64 `json:"source_last_stable"`
	SourceLogStart   int64 `json:"source_log_start"`
	// DestinationOffset is the next offset to write on the destination:
	// every offset below it is mirrored.
	DestinationOffset int64 `json:"destination_offset"`
	Lag               int64 `json:"lag"`
	// LagMillis approximates how old the oldest unmirrored record is: the
	// time since the partition last had no lag.
	LagMillis int64 `json:"lag_ms"`
	Bytes     int64 `json:"bytes_mirrored"`
	Records   int64 `json:"records_mirrored"`
	// LostRecords counts source records that retention removed before
	// they were mirrored.
	LostRecords  int64 `json:"lost_records"`
	Retries      int   `json:"retries"`
	PadRemaining int64 `json:"pad_remaining,omitempty"`
	LastMirrored int64 `json:"last_mirrored_offset"`
}

// Error is the body of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// MirrorSpec is a mirror as a user declares it: the body of POST
// /v1/mirrors, and of PUT /v1/mirrors/{name}, where a field left out keeps
// its value (name, when given, must match the path).
type MirrorSpec struct {
	Name   string   `json:"name"`
	Source Source   `json:"source"`
	Topics []string `json:"topics"`
	// TopicConfigExclude is mirror.topic.properties.exclude; left out, the
	// KIP's default list.
	TopicConfigExclude []string `json:"topic_config_exclude,omitempty"`
}

// AddTopicsRequest is the body of POST /v1/mirrors/{name}/topics.
type AddTopicsRequest struct {
	Topics []string `json:"topics"`
}

// TopicsRequest is the body of POST /v1/mirrors/{name}/topics/pause,
// /resume and /recover.
type TopicsRequest struct {
	Topics []string `json:"topics"`
}

// StopTopicsRequest is the body of POST /v1/mirrors/{name}/topics/stop.
type StopTopicsRequest struct {
	Topics []string `json:"topics"`
	// Mode is StopModeFailover or StopModePromote.
	Mode string `json:"mode"`
}

// The stop modes.
const (
	// StopModeFailover stops at once, the source reachable or not.
	StopModeFailover = "failover"
	// StopModePromote waits until the destination has everything the
	// source acknowledged (RPO 0), then stops.
	StopModePromote = "promote"
)

// OffsetsResponse is the body of GET /v1/mirrors/{name}/offsets: the last
// mirrored offset of every partition (KIP-1279's LastMirroredOffsets).
type OffsetsResponse struct {
	Mirror string         `json:"mirror"`
	Topics []TopicOffsets `json:"topics"`
}

// TopicOffsets is one topic of an OffsetsResponse.
type TopicOffsets struct {
	Name       string             `json:"name"`
	Partitions []PartitionOffsets `json:"partitions"`
}

// PartitionOffsets is one partition of an OffsetsResponse.
type PartitionOffsets struct {
	Partition int32 `json:"partition"`
	// LastMirroredOffset is the last offset mirrored, -1 when none is.
	LastMirroredOffset int64 `json:"last_mirrored_offset"`
	SourceOffset       int64 `json:"source_offset"`
	DestinationOffset  int64 `json:"destination_offset"`
	Lag                int64 `json:"lag"`
	State              State `json:"state"`
}

// The codes of error responses, stable across releases; Kafka's error names
// where one fits.
const (
	CodeUnauthorized         = "UNAUTHORIZED"
	CodeInvalidRequest       = "INVALID_REQUEST" // malformed JSON, unknown fields, wrong types, bad parameters
	CodeInvalidConfig        = "INVALID_CONFIG"  // a well-formed spec with a value the agent refuses
	CodeMirrorNotFound       = "MIRROR_NOT_FOUND"
	CodeMirrorAlreadyExists  = "MIRROR_ALREADY_EXISTS"
	CodeMirrorHasTopics      = "MIRROR_HAS_TOPICS"
	CodeTopicAlreadyMirrored = "TOPIC_ALREADY_MIRRORED"
	CodeUnknownTopic         = "UNKNOWN_TOPIC_OR_PARTITION"
	// CodeInvalidStateTransition: the operation does not apply to a
	// partition's state; the message says what does.
	CodeInvalidStateTransition = "INVALID_STATE_TRANSITION"
	CodeNotReady               = "COORDINATOR_LOAD_IN_PROGRESS" // the agent is still loading its state
	CodeNotFound               = "NOT_FOUND"                    // no such route
	CodeInternal               = "UNKNOWN_SERVER_ERROR"
	// CodeNotActive: the agent is a standby of the writer lease; the
	// message names the active agent, to which the call should go.
	CodeNotActive = "NOT_ACTIVE"
)

// AgentStatus is the body of GET /v1/agent: this agent and the writer
// lease as it sees it. Every agent answers it, standbys too.
type AgentStatus struct {
	// AgentID names the agent (agent_id, default HOSTNAME-PID).
	AgentID string `json:"agent_id"`
	// Role is active (it writes to the destination), standby, or
	// taking_over (it holds the lease and waits out the previous
	// holder's writes before it starts).
	Role AgentRole `json:"role"`
	// LeaseHolder is the agent holding the writer lease, empty when none
	// does; LeaseEpoch grows by one at every takeover. Both are empty
	// and 0 when the agent runs without a lease (lease_duration 0s).
	LeaseHolder     string `json:"lease_holder,omitempty"`
	LeaseEpoch      int64  `json:"lease_epoch"`
	LeaseDurationMs int64  `json:"lease_duration_ms"`
}

// AgentRole is an agent's part in the writer lease.
type AgentRole string

// The roles of AgentStatus.
const (
	RoleActive     AgentRole = "active"
	RoleStandby    AgentRole = "standby"
	RoleTakingOver AgentRole = "taking_over"
)
