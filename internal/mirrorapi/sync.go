package mirrorapi

import (
	"encoding/json"
	"fmt"
	"iter"
)

// SyncKind is one kind of metadata sync (DESIGN §5). It indexes
// MetadataSync.
type SyncKind int

// The kinds of metadata sync, in describe's order.
const (
	SyncConfigs SyncKind = iota
	SyncPartitions
	SyncGroups
	SyncACLs
)

// syncKindNames is the one table of sync kinds: a kind added here (with its
// constant) has a status in the agent's tracker, a key in the API's JSON,
// series in the metrics and a line in describe, all of which range over it;
// the tests of the coordinator and of openapi.json fail until those two
// know it. The name is the JSON key, the metrics' kind label and the word
// describe prints.
var syncKindNames = [...]string{
	SyncConfigs:    "configs",
	SyncPartitions: "partitions",
	SyncGroups:     "groups",
	SyncACLs:       "acls",
}

// SyncKinds returns every kind, in describe's order.
func SyncKinds() []SyncKind {
	ks := make([]SyncKind, len(syncKindNames))
	for i := range ks {
		ks[i] = SyncKind(i)
	}
	return ks
}

// String returns the kind's name.
func (k SyncKind) String() string {
	if k < 0 || int(k) >= len(syncKindNames) {
		return fmt.Sprintf("SyncKind(%d)", int(k))
	}
	return syncKindNames[k]
}

// MarshalText returns the kind's name, so that logs and JSON show it.
func (k SyncKind) MarshalText() ([]byte, error) {
	return []byte(k.String()), nil
}

// MetadataSync is the state of each kind of metadata sync of a mirror,
// indexed by kind. In JSON it is an object keyed by the kinds' names, in
// describe's order, each kind present.
type MetadataSync [len(syncKindNames)]SyncStatus

// All yields each kind and its status, in describe's order.
func (m MetadataSync) All() iter.Seq2[SyncKind, SyncStatus] {
	return func(yield func(SyncKind, SyncStatus) bool) {
		for i, s := range m {
			if !yield(SyncKind(i), s) {
				return
			}
		}
	}
}

// MarshalJSON implements json.Marshaler.
func (m MetadataSync) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for k, s := range m.All() {
		if k > 0 {
			b = append(b, ',')
		}
		name, _ := json.Marshal(k.String())
		v, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("sync %s: %w", k, err)
		}
		b = append(append(append(b, name...), ':'), v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON implements json.Unmarshaler. Kinds absent are left as they
// are and names it does not know (a newer agent's kinds) are ignored, as
// for a struct.
func (m *MetadataSync) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	for i := range m {
		k := SyncKind(i)
		if v, ok := obj[k.String()]; ok {
			if err := json.Unmarshal(v, &m[i]); err != nil {
				return fmt.Errorf("sync %s: %w", k, err)
			}
		}
	}
	return nil
}

// SyncStatus is one kind of metadata sync as describe shows it.
type SyncStatus struct {
	// LastSuccess is when a sync of this kind last completed without
	// error (RFC 3339), empty before the first.
	LastSuccess string `json:"last_success,omitempty"`
	// Items is what the last sync found in sync on the destination:
	// topics (configs), partitions, consumer groups, ACLs.
	Items int `json:"items"`
	// LastError is the error of the last sync, empty when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Errors counts failed syncs since the agent started (KIP-1279's
	// TopicConfigMetadataSyncError, ConsumerGroupOffsetSyncError,
	// AclSyncError).
	Errors int64 `json:"errors"`
	// Drift lists what the last sync that found destination-side changes
	// to synced items reverted (configs only).
	Drift []string `json:"drift,omitempty"`
}
