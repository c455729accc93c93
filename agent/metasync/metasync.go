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
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// Kind is one kind of metadata sync.
type Kind string

// The kinds of metadata sync.
const (
	KindConfigs    Kind = "configs"
	KindPartitions Kind = "partitions"
	KindGroups     Kind = "groups"
	KindACLs       Kind = "acls"
)

// Kinds lists every kind, in describe's order.
var Kinds = []Kind{KindConfigs, KindPartitions, KindGroups, KindACLs}

// DefaultGroupsInclude and DefaultACLInclude are KIP-1279's defaults of
// mirror.groups.include and mirror.acl.include.
var (
	DefaultGroupsInclude = []string{".*"}
	DefaultACLInclude    = []string{"*"}
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
	st map[Kind]*mirrorapi.SyncStatus
}

// NewTracker returns a tracker with no sync recorded.
func NewTracker() *Tracker {
	t := &Tracker{st: map[Kind]*mirrorapi.SyncStatus{}}
	for _, k := range Kinds {
		t.st[k] = &mirrorapi.SyncStatus{}
	}
	return t
}

// Record records the outcome of a sync of kind that ended at now. It
// reports whether the kind's error changed, so that callers log a failure
// once rather than at every interval.
func (t *Tracker) Record(kind Kind, res Result, err error, now time.Time) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.st[kind]
	if s == nil {
		s = &mirrorapi.SyncStatus{}
		t.st[kind] = s
	}
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
	get := func(k Kind) mirrorapi.SyncStatus {
		s := *t.st[k]
		s.Drift = slices.Clone(s.Drift)
		return s
	}
	return mirrorapi.MetadataSync{Configs: get(KindConfigs), Partitions: get(KindPartitions), Groups: get(KindGroups), ACLs: get(KindACLs)}
}

// Filter selects consumer groups by mirror.groups.include and
// mirror.groups.exclude: whole-id regular expressions, exclude winning.
type Filter struct {
	include, exclude []*regexp.Regexp
}

// NewFilter compiles include (nil means DefaultGroupsInclude, empty
// matches nothing) and exclude. The error names the field and the pattern.
func NewFilter(include, exclude []string) (*Filter, error) {
	if include == nil {
		include = DefaultGroupsInclude
	}
	f := &Filter{}
	var err error
	if f.include, err = compileAll("groups_include", include); err != nil {
		return nil, err
	}
	if f.exclude, err = compileAll("groups_exclude", exclude); err != nil {
		return nil, err
	}
	return f, nil
}

// Match reports whether group's offsets are synced.
func (f *Filter) Match(group string) bool {
	match := func(rs []*regexp.Regexp) bool {
		return slices.ContainsFunc(rs, func(r *regexp.Regexp) bool { return r.MatchString(group) })
	}
	return match(f.include) && !match(f.exclude)
}

// compileAll compiles each pattern anchored at both ends, as Java's
// Pattern.matches (which KIP-1279 and MirrorMaker 2 use) matches whole ids.
func compileAll(field string, patterns []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, 0, len(patterns))
	for _, p := range patterns {
		r, err := compileWhole(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a valid regular expression: %v", field, p, regexpReason(err))
		}
		out = append(out, r)
	}
	return out, nil
}

func compileWhole(p string) (*regexp.Regexp, error) {
	if strings.TrimSpace(p) == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	return regexp.Compile("^(?:" + p + ")$")
}

// regexpReason is a regexp error without the pattern, which the caller
// names already (and which compileWhole wrapped).
func regexpReason(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%s: %q", se.Code, se.Expr)
	}
	return err.Error()
}
