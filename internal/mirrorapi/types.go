// Package mirrorapi holds the agent API's types and a Go client for it, shared
// by the agent, the kmirror CLI and the Terraform provider so that all three
// read and write the same JSON.
package mirrorapi

import (
	"time"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

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

// Source, SourceSASL, SourceTLS and MirrorSpec are the mirror spec's
// types (package mirrorspec, which validates them) under the API's names.
type (
	Source     = mirrorspec.Source
	SourceSASL = mirrorspec.SASL
	SourceTLS  = mirrorspec.TLS
	MirrorSpec = mirrorspec.Spec
)

// Redacted stands for a literal secret in every response of the agent.
const Redacted = mirrorspec.Redacted

// DescribeResponse is the body of GET /v1/mirrors.
type DescribeResponse struct {
	Mirrors []Mirror `json:"mirrors"`
}

// Mirror is one mirror as describe shows it.
type Mirror struct {
	Name   string  `json:"name"`
	Source Source  `json:"source"`
	Topics []Topic `json:"topics"`
	// TopicRegex are the mirror's topic regular expressions: source
	// topics that match are added to Topics as they appear.
	TopicRegex []string `json:"topic_regex,omitempty"`
	// Error is why the mirror is not running (for example a preflight
	// refusal or an unreachable source), empty when it runs.
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	MaxLag   int64    `json:"max_lag"`
	// StateCounts counts partitions per state.
	StateCounts map[State]int `json:"state_counts"`
	// BufferedBytes is what the fetchers hold, not yet written.
	BufferedBytes int64 `json:"buffered_bytes"`
	// Throttle is the mirror's replication throttle, nil when it has none.
	Throttle *Throttle `json:"throttle,omitempty"`
	// Fetch are the mirror's fetch figures.
	Fetch FetchStats `json:"fetch"`
	// Sync is the metadata sync of the mirror (DESIGN §5), per kind.
	Sync MetadataSync `json:"sync"`
	// SourceClusterID is the source cluster's id, from its metadata when
	// the agent last connected to it; empty until it has.
	SourceClusterID string `json:"source_cluster_id,omitempty"`
	// Agent is the agent_id of the agent of the group that runs the
	// mirror and described it (coordination = "group"); empty with
	// coordination = "single", where the one agent runs every mirror.
	Agent string `json:"agent,omitempty"`
	// Share is set only between the agents of a group: "partitions" when
	// the agent describing the mirror runs some of its partitions, and
	// another agent runs the mirror itself (its mirror-level fields are
	// that agent's to tell).
	Share string `json:"share,omitempty"`

	// The mirror's settings (MirrorSpec) with the defaults they stand for
	// resolved: what the agent uses.
	TopicConfigExclude []string `json:"topic_config_exclude"`
	GroupsInclude      []string `json:"groups_include"`
	GroupsExclude      []string `json:"groups_exclude"`
	ACLInclude         []string `json:"acl_include"`
	// MetadataRefreshIntervalMs is the spec's interval, or the agent's
	// default when the spec has none.
	MetadataRefreshIntervalMs int64 `json:"metadata_refresh_interval_ms"`

	// TxnTimeoutMs is the timeout of the agent's destination transactions
	// (those of aborted source records, and fillers): the destination's
	// transaction.max.timeout.ms as the last preflight read it; 0 before
	// the first. TxnTimeoutFrom says where it came from.
	TxnTimeoutMs   int64  `json:"txn_timeout_ms,omitempty"`
	TxnTimeoutFrom string `json:"txn_timeout_from,omitempty"`
}

// SharePartitions is Mirror.Share of an agent that runs some of a mirror's
// partitions only.
const SharePartitions = "partitions"

// Topic is one mirror topic.
type Topic struct {
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
	// ErrorCode is Error's stable code (ReasonCode), empty when there is
	// no error or it has no code.
	ErrorCode ReasonCode `json:"error_code,omitempty"`
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
	// Failback is set on a topic added with failback: where each
	// partition resumed, and where the records the destination took after
	// the last mirrored offset went when it was recreated.
	Failback *Failback `json:"failback,omitempty"`
}

// Failback is what a failback did to a topic (AddTopicsRequest.Failback).
type Failback struct {
	// SourceMirror is the stopped mirror, on the agent whose destination
	// is this mirror's source, whose last mirrored offsets it resumed from.
	SourceMirror string              `json:"source_mirror"`
	Partitions   []FailbackPartition `json:"partitions"`
	// Recreated: the destination topic was deleted and created again
	// (AddTopicsRequest.Recreate), and is mirrored from the source's log
	// start.
	Recreated bool `json:"recreated"`
	// DivergentTopic is the side topic, on the destination, that holds
	// the records the destination took after the last mirrored offset,
	// DivergentRecords of them; empty when there were none.
	DivergentTopic   string `json:"divergent_topic,omitempty"`
	DivergentRecords int64  `json:"divergent_records"`
}

// FailbackPartition is one partition of a Failback.
type FailbackPartition struct {
	Partition int32 `json:"partition"`
	// LastMirroredOffset is the source mirror's last mirrored offset, -1
	// for none.
	LastMirroredOffset int64 `json:"last_mirrored_offset"`
	// DestinationEnd is the destination log end when the failback was
	// added.
	DestinationEnd int64 `json:"destination_end"`
	// ResumedAt is the offset mirroring back started at (0 after a
	// recreate: the source's log start).
	ResumedAt        int64 `json:"resumed_at"`
	DivergentRecords int64 `json:"divergent_records"`
}

// Partition is one mirror partition's figures.
type Partition struct {
	Mirror    string `json:"mirror"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	State     State  `json:"state"`
	Reason    string `json:"reason,omitempty"`
	// ReasonCode is Reason's stable code (ReasonCode), empty when there
	// is no reason.
	ReasonCode ReasonCode `json:"reason_code,omitempty"`
	// StopMode is how a STOPPING or STOPPED partition was stopped
	// (StopModeFailover or StopModePromote); empty otherwise, and for
	// partitions stopped before the agent kept it.
	StopMode string `json:"stop_mode,omitempty"`
	// Agent is the agent of the group that runs the partition
	// (coordination = "group"); empty with coordination = "single".
	Agent string `json:"agent,omitempty"`
	// SourceOffset is the source high watermark last seen, at
	// SourceOffsetAt.
	SourceOffset     int64 `json:"source_offset"`
	SourceLastStable int64 `json:"source_last_stable"`
	SourceLogStart   int64 `json:"source_log_start"`
	// SourceOffsetAt is when the source figures were read (from a fetch
	// response, or ListOffsets for a partition not being fetched); zero
	// (omitted) when they have not been read since the agent started.
	SourceOffsetAt time.Time `json:"source_offset_at,omitzero"`
	// DestinationOffset is the next offset to write on the destination:
	// every offset below it is mirrored.
	DestinationOffset int64 `json:"destination_offset"`
	// Lag is SourceOffset minus DestinationOffset, both from one snapshot,
	// in every state; LagUnknown (-1) when the source figures have not
	// been read. SourceOffsetAt says how old it is.
	Lag int64 `json:"lag"`
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

// LagUnknown is Partition.Lag when the source's end has not been read.
const LagUnknown = -1

// Error is the body of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// AddTopicsRequest is the body of POST /v1/mirrors/{name}/topics.
type AddTopicsRequest struct {
	Topics []string `json:"topics"`
	// TopicRegex adds regular expressions (Go RE2, matching whole topic
	// names, like Kafka's mirror.topics.include) to the mirror's spec:
	// source topics that match, now or created later, are mirrored
	// (internal topics, starting with "__", never).
	TopicRegex []string `json:"topic_regex,omitempty"`
	// Failback mirrors Topics back into the destination they were mirrored
	// from: it resumes after the last mirrored offset kept by the stopped
	// mirror on the source cluster, and refuses when the destination took
	// records after it, unless Recreate.
	Failback bool `json:"failback,omitempty"`
	// Recreate, with Failback, copies the records the destination took
	// after the last mirrored offset to a side topic, deletes the topic
	// and mirrors it again from the source's log start.
	Recreate bool `json:"recreate,omitempty"`
}

// TopicsRequest is the body of POST /v1/mirrors/{name}/topics/pause,
// /resume and /recover.
type TopicsRequest struct {
	Topics []string `json:"topics"`
	// Recreate (recover only) deletes and recreates the destination
	// topics, with their configs, and mirrors them again from the source's
	// log start: for FAILED topics whose destination cannot be re-aligned.
	Recreate bool `json:"recreate,omitempty"`
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
	// SourceOffsetAt is when SourceOffset was read (Partition's).
	SourceOffsetAt    time.Time `json:"source_offset_at,omitzero"`
	DestinationOffset int64     `json:"destination_offset"`
	// Lag is LagUnknown when the source's end has not been read.
	Lag   int64 `json:"lag"`
	State State `json:"state"`
}

// The codes of error responses, stable across releases; Kafka's error names
// where one fits.
const (
	CodeUnauthorized         = "UNAUTHORIZED"
	CodeInvalidRequest       = "INVALID_REQUEST" // malformed JSON, unknown fields, wrong types, bad parameters
	CodeInvalidConfig        = "INVALID_CONFIG"  // a well-formed spec with a value the agent refuses
	CodeMirrorNotFound       = "MIRROR_NOT_FOUND"
	CodeThrottleNotFound     = "THROTTLE_NOT_FOUND" // the mirror has no throttle
	CodeMirrorAlreadyExists  = "MIRROR_ALREADY_EXISTS"
	CodeMirrorHasTopics      = "MIRROR_HAS_TOPICS"
	CodeTopicAlreadyMirrored = "TOPIC_ALREADY_MIRRORED"
	CodeUnknownTopic         = "UNKNOWN_TOPIC_OR_PARTITION"
	// CodeInvalidStateTransition: the operation does not apply to a
	// partition's state; the message says what does.
	CodeInvalidStateTransition = "INVALID_STATE_TRANSITION"
	// CodeFailbackRefused: a failback cannot go on as asked (the
	// destination diverged and recreate was not given, the topic still
	// mirrors on the source cluster, ...); the message says what to do.
	CodeFailbackRefused = "FAILBACK_REFUSED"
	CodeNotReady        = "COORDINATOR_LOAD_IN_PROGRESS" // the agent is still loading its state
	CodeNotFound        = "NOT_FOUND"                    // no such route
	CodeInternal        = "UNKNOWN_SERVER_ERROR"
	// CodeNotActive: the agent waits for the writer lease's agents (an
	// earlier release) to stop; the message names the lease's holder, which
	// runs the mirrors meanwhile.
	CodeNotActive = "NOT_ACTIVE"
)

// AgentStatus is the body of GET /v1/agent: this agent and its group as it
// sees them. Every agent answers it, also while it waits.
type AgentStatus struct {
	// AgentID names the agent (agent_id, default HOSTNAME-PID).
	AgentID string `json:"agent_id"`
	// Role is active (it runs mirrors, or may once the group gives it
	// some) or standby (it waits for the writer lease's agents, of an
	// earlier release, to stop before it starts).
	Role AgentRole `json:"role"`
	// LeaseHolder is, while the agent waits, the agent of an earlier
	// release that holds the writer lease of the state topic, with the
	// lease's epoch and duration; empty and 0 otherwise.
	LeaseHolder     string `json:"lease_holder,omitempty"`
	LeaseEpoch      int64  `json:"lease_epoch"`
	LeaseDurationMs int64  `json:"lease_duration_ms"`
	// Fillers is how the agent writes invisible destination offsets,
	// coordinator or markers (the fillers setting resolved), and
	// FillersReason why; empty before the agent first became active.
	Fillers       string `json:"fillers,omitempty"`
	FillersReason string `json:"fillers_reason,omitempty"`
	// Coordination is "group" when the agents of the destination divide
	// its mirrors, or "single" when this agent runs them alone; in a
	// group, GroupGeneration is the group's generation as this agent last
	// joined it and GroupMembers its agents and the mirrors each runs.
	Coordination    string        `json:"coordination,omitempty"`
	GroupGeneration int32         `json:"group_generation,omitempty"`
	GroupMembers    []GroupMember `json:"group_members,omitempty"`
}

// GroupMember is one agent of the destination's group.
type GroupMember struct {
	AgentID string `json:"agent_id"`
	// API is where its API answers, as it told the group.
	API string `json:"api,omitempty"`
	// Mirrors are the mirrors whose home it runs (each mirror's own work,
	// and its partitions not yet given out), by name.
	Mirrors []string `json:"mirrors"`
	// Partitions are the partitions the group gave it, as
	// MIRROR/TOPIC/PARTITION.
	Partitions []string `json:"partitions,omitempty"`
	// Weight is its share of the work when the group last divided it:
	// the byte rates (bytes per second) of its mirrors as their agents
	// measured them, 1 for a mirror not measured yet.
	Weight int64 `json:"weight"`
}

// AgentRole is whether an agent runs or waits.
type AgentRole string

// The roles of AgentStatus.
const (
	RoleActive  AgentRole = "active"
	RoleStandby AgentRole = "standby"
)

// Throttle is a mirror's replication throttle: the body of PUT
// /v1/mirrors/{name}/throttle and the answer of GET (KIP-1279's
// mirror.replication.throttled.rate and mirror.replication.throttled.replicas,
// plus the source-side consumer_byte_rate quota of its source-throttle
// example).
type Throttle struct {
	// RateBytesPerSecond is the ceiling on the bytes the agent fetches
	// for the throttled partitions, together.
	RateBytesPerSecond int64 `json:"rate_bytes_per_second"`
	// Partitions lists the throttled partitions as "topic:partition", or
	// is ["*"] for every partition of the mirror; empty means ["*"].
	Partitions []string `json:"partitions"`
	// SourceQuota also sets consumer_byte_rate = RateBytesPerSecond on the
	// source cluster for the agent's client id of this mirror
	// (SourceQuotaClientID), removed with the throttle.
	SourceQuota bool `json:"source_quota"`
	// SourceQuotaEntity is the quota entity the agent set the source
	// quota on (set by the agent, ignored in requests):
	// "user=USER,client-id=kmirror-MIRROR" when the source authenticates
	// with a SASL username, as Kafka applies a user's quotas before
	// client-id quotas; "client-id=kmirror-MIRROR" otherwise.
	SourceQuotaEntity string `json:"source_quota_entity,omitempty"`
}

// SourceQuotaClientID is the client id the agent's source clients of mirror
// use, which a source quota names.
func SourceQuotaClientID(mirror string) string { return "kmirror-" + mirror }

// FetchStats are a mirror's fetch figures since the agent started.
type FetchStats struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// Bytes is the record batch bytes fetched from the source.
	Bytes int64 `json:"bytes"`
	// DeadFetchers counts the source broker fetch loops whose last fetch
	// failed (they retry with backoff).
	DeadFetchers int64 `json:"dead_fetchers"`
	// ThrottledMillis is how long the mirror's throttle held its
	// throttled partitions back.
	ThrottledMillis int64 `json:"throttled_ms"`
}
