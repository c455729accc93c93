package mirror

// The records a runner keeps in the state topic, and the record of the
// mirror itself, which the coordinator writes and a runner starts from. A
// mirror's records are keyed KIND/MIRROR/..., such as partition/MIRROR/TOPIC/N
// (mirror and topic names cannot hold '/'); values are JSON.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/reason"
)

// ReadRecord decodes the record under key into v; false when there is none
// or it does not decode.
func ReadRecord(s Store, key string, v any) bool {
	b, ok := s.Get(key)
	return ok && json.Unmarshal(b, v) == nil
}

// WriteRecord persists v as the record under key.
func WriteRecord(ctx context.Context, s Store, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Put(ctx, key, b)
}

// Record is a mirror as the state topic keeps it.
type Record struct {
	Spec mirrorspec.Spec `json:"spec"`
	// ProducerID and Epoch are the idempotent writer of every partition of
	// the mirror: fixed for its life so that sequences stay deterministic.
	ProducerID int64     `json:"producer_id"`
	Epoch      int16     `json:"producer_epoch"`
	Created    time.Time `json:"created"`
}

// partitionRecord is a partition's persisted state.
type partitionRecord struct {
	State  partition.State `json:"state"`
	Reason string          `json:"reason,omitempty"`
	// ReasonCode is Reason's code (package reason); empty in records
	// written before codes were kept.
	ReasonCode mirrorapi.ReasonCode `json:"reason_code,omitempty"`
	// LastMirroredOffset is the last offset mirrored: the destination end
	// minus one when the partition paused or stopped (KIP-1279's LMO),
	// the figure last reported otherwise (0 in records written before it
	// was kept).
	LastMirroredOffset int64 `json:"last_mirrored_offset"`
	// ClosedAt is the destination end before the abort marker of the
	// transaction of aborted records that a FAILED partition, or one
	// STOPPING for a failover, closed (partition.Config.OnClose): a stop
	// finished after a restart reports the offset before it as last
	// mirrored. 0: none; other records drop it (keepsClosedAt).
	ClosedAt int64 `json:"closed_at,omitempty"`
	// StopMode is how a STOPPING partition stops, to finish the stop
	// after a restart, and how a STOPPED one stopped (describe shows it).
	StopMode StopMode `json:"stop_mode,omitempty"`
	// Unplaced says no write was ever made for the partition: its home
	// holds it back until the agents' group gives it to an agent, which
	// may then be any (see Runner.holdBack). Its first state change
	// clears it.
	Unplaced bool `json:"unplaced,omitempty"`
}

// legacyRealignFailed is how a record written before reason codes were kept
// says SourceTopicRecreatedRealignFailed.
const legacyRealignFailed = "a recover cannot re-align it"

// UnmarshalJSON reads a record. One written before reason codes were kept
// gets the code that a decision branches on from the message it kept: the
// one place a message is read for its meaning, and only for old records.
func (pr *partitionRecord) UnmarshalJSON(b []byte) error {
	type plain partitionRecord
	if err := json.Unmarshal(b, (*plain)(pr)); err != nil {
		return err
	}
	if pr.ReasonCode == "" && pr.State == partition.Failed && strings.Contains(pr.Reason, legacyRealignFailed) {
		pr.ReasonCode = reason.SourceTopicRecreatedRealignFailed
	}
	return nil
}

// stateRecord is a partition record of state s with reason r.
func stateRecord(s partition.State, r reason.Error) partitionRecord {
	return partitionRecord{State: s, Reason: r.Message, ReasonCode: r.Code}
}

// why is the record's reason.
func (pr partitionRecord) why() reason.Error {
	return reason.Error{Code: pr.ReasonCode, Message: pr.Reason}
}

// topicRecord is what the agent remembers of a mirror topic.
type topicRecord struct {
	SourceTopicID topicID `json:"source_topic_id"`
	// DestinationTopicID is the mirror topic's id on the destination (zero
	// in records written before it was kept, or when the broker reports
	// none): a new id means the topic was deleted and recreated there.
	DestinationTopicID topicID `json:"destination_topic_id"`
}

// topicID is a topic id as the state topic keeps it, in kadm's JSON form
// (base64), which kadm.TopicID writes but cannot read back.
type topicID kadm.TopicID

func (t topicID) String() string               { return kadm.TopicID(t).String() }
func (t topicID) MarshalJSON() ([]byte, error) { return kadm.TopicID(t).MarshalJSON() }

func (t *topicID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("topic id %q: %w", s, err)
	}
	if len(raw) != len(t) {
		return fmt.Errorf("topic id %q: %d bytes, want %d", s, len(raw), len(t))
	}
	copy(t[:], raw)
	return nil
}

func topicKey(m, t string) string { return "topic/" + m + "/" + t }

// PartitionKey is the key of the record of mirror m's partition tp, which
// is also the partition's item in the agents' group.
func PartitionKey(m string, tp fetcher.TP) string {
	return fmt.Sprintf("partition/%s/%s/%d", m, tp.Topic, tp.Partition)
}

// ParsePartitionKey splits a PartitionKey; ok is false for any other key.
func ParsePartitionKey(k string) (m string, tp fetcher.TP, ok bool) {
	rest, ok := strings.CutPrefix(k, "partition/")
	if !ok {
		return "", tp, false
	}
	f := strings.Split(rest, "/")
	if len(f) != 3 {
		return "", tp, false
	}
	p, err := strconv.ParseInt(f[2], 10, 32)
	if err != nil || f[0] == "" || f[1] == "" {
		return "", tp, false
	}
	return f[0], fetcher.TP{Topic: f[1], Partition: int32(p)}, true
}

// Placement is what a partition's record v says of where the partition
// may run. spreads: on another agent than its mirror's home, while it
// mirrors; the other states (paused, stopping, stopped, failed) change only
// through lifecycle operations, which the home carries out. unplaced: on
// any agent at once, as no write was ever made for it (its home held it
// back for the group to place).
func Placement(v []byte) (spreads, unplaced bool) {
	var pr partitionRecord
	if json.Unmarshal(v, &pr) != nil {
		return false, false
	}
	switch pr.State {
	case "", partition.Initializing, partition.Mirroring:
		return true, pr.Unplaced
	}
	return false, false
}

func alignmentKey(m string, tp fetcher.TP) string {
	return fmt.Sprintf("alignment/%s/%s/%d", m, tp.Topic, tp.Partition)
}

// persistedPartitions returns the partition records of mirror's topic in
// store, by number.
func persistedPartitions(store Store, mirror, topic string) map[int32]partitionRecord {
	prefix := "partition/" + mirror + "/" + topic + "/"
	out := map[int32]partitionRecord{}
	for k := range store.All() {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		p, err := strconv.ParseInt(rest, 10, 32)
		if err != nil {
			continue
		}
		var pr partitionRecord
		if ReadRecord(store, k, &pr) {
			out[int32(p)] = pr
		}
	}
	return out
}

// checkpoints keeps partition alignments in the state topic.
type checkpoints struct {
	store  Store
	mirror string
}

func (k checkpoints) Alignment(tp fetcher.TP) (partition.Alignment, bool) {
	var a partition.Alignment
	ok := ReadRecord(k.store, alignmentKey(k.mirror, tp), &a)
	return a, ok
}

func (k checkpoints) SaveAlignment(ctx context.Context, tp fetcher.TP, a partition.Alignment) error {
	return WriteRecord(ctx, k.store, alignmentKey(k.mirror, tp), a)
}
