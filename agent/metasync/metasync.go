// Package metasync keeps a mirror's metadata on the destination in step with
// the source (DESIGN §5, KIP-1279 §6), so that applications find after a
// failover what they had before it:
//
//   - Configs: every non-default source topic config except
//     mirror.topic.properties.exclude and the configs the offset invariant
//     sets itself (topics.Managed); source changes and removals follow, and a
//     destination-side change to a synced key is reverted and reported as
//     drift.
//   - Groups: committed offsets of the consumer groups matching
//     mirror.groups.include and not mirror.groups.exclude that have no active
//     members on the destination, clamped to the destination log
//     (ClampOffset), never moved backwards, committed with leader epoch -1
//     and the source's metadata. Offsets are identical on both sides, so
//     nothing is translated.
//   - ACLs: the source ACLs matching mirror.acl.include rules are created on
//     the destination and deleted when they go from the source; ACLs the
//     agent did not create are never touched.
//
// Partition growth is done by topics.Manager.Ensure at each topic sync; its
// outcome is recorded here too (KindPartitions), so that describe shows every
// kind the same way. Each kind runs and fails on its own: a Tracker keeps,
// per kind, the last success, the items in sync, the last error and an error
// count (KIP-1279's *SyncError metrics).
package metasync

import (
	"slices"
	"sync"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// Kind is one kind of metadata sync; mirrorapi.SyncKinds lists them all.
type Kind = mirrorapi.SyncKind

// The kinds of metadata sync, as this package names them.
const (
	KindConfigs    = mirrorapi.SyncConfigs
	KindPartitions = mirrorapi.SyncPartitions
	KindGroups     = mirrorapi.SyncGroups
	KindACLs       = mirrorapi.SyncACLs
)

// Result is what one sync of a kind did.
type Result struct {
	// Items is how many items (topics, partitions, groups, ACLs) are in
	// sync on the destination after it.
	Items int
	// Drift says what destination-side changes it reverted.
	Drift []string
}

// Tracker keeps the status of each kind of a mirror's sync. It is safe for
// concurrent use.
type Tracker struct {
	mu sync.Mutex
	st mirrorapi.MetadataSync
}

// NewTracker returns a tracker with no sync recorded.
func NewTracker() *Tracker {
	return &Tracker{}
}

// Record records the outcome of a sync of kind that ended at now. It
// reports whether the kind's error changed, so that callers log a failure
// once rather than at every interval.
func (t *Tracker) Record(kind Kind, res Result, err error, now time.Time) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.st[kind]
	prev := s.LastError
	if err != nil {
		s.LastError = err.Error()
		s.Errors++
	} else {
		s.LastError = ""
		s.LastSuccess = now.UTC().Format(time.RFC3339)
		s.Items = res.Items
	}
	if len(res.Drift) > 0 {
		s.Drift = slices.Clone(res.Drift)
	}
	return prev != s.LastError
}

// Status returns every kind's status.
func (t *Tracker) Status() mirrorapi.MetadataSync {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.st
	for i := range st {
		st[i].Drift = slices.Clone(st[i].Drift)
	}
	return st
}
