package metasync

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

func TestClampOffset(t *testing.T) {
	for _, c := range []struct {
		name                        string
		committed, start, end, want int64
	}{
		{"inside the log", 40, 0, 100, 40},
		{"at the end", 100, 0, 100, 100},
		{"past the destination end (lag)", 150, 0, 100, 100},
		{"before the destination log start", 5, 20, 100, 20},
		{"empty destination log", 7, 0, 0, 0},
		{"empty log after retention", 7, 50, 50, 50},
	} {
		if got := ClampOffset(c.committed, c.start, c.end); got != c.want {
			t.Errorf("%s: ClampOffset(%d, %d, %d) = %d, want %d", c.name, c.committed, c.start, c.end, got, c.want)
		}
	}
}

func TestACLRules(t *testing.T) {
	acl := func(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType, principal string) ACL {
		return ACL{ResourceType: rt, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral, Principal: principal, Host: "*", Operation: op, Permission: perm}
	}
	allowReadOrders := acl(kmsg.ACLResourceTypeTopic, "orders-eu", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow, "User:alice")
	denyWriteGroup := acl(kmsg.ACLResourceTypeGroup, "app", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeDeny, "User:bob")
	a, d := allowReadOrders, denyWriteGroup
	for _, c := range []struct {
		rule string
		acl  ACL
		want bool
	}{
		{"*", a, true}, {"*", d, true},
		{"TOPIC", a, true}, {"TOPIC", d, false},
		{"topic;orders-.*", a, true}, {"topic;orders-.*", d, false},
		{"TOPIC;orders", a, false}, // the whole name
		{"*;*;READ;ALLOW", a, true}, {"*;*;READ;ALLOW", d, false},
		{"GROUP;*;*;DENY", d, true}, {"GROUP;*;*;DENY", a, false},
		{"*;*;*;*;User:bob", d, true}, {"*;*;*;*;User:bob", a, false},
		{"TRANSACTIONAL_ID", a, false}, {"TRANSACTIONAL_ID", d, false},
		{"transactional-id;*;idempotent_write", a, false},
	} {
		r, err := mirrorspec.ParseACLRule(c.rule)
		if err != nil {
			t.Fatalf("%q: %v", c.rule, err)
		}
		if got := match(r, c.acl); got != c.want {
			t.Errorf("rule %q on %s: %v, want %v", c.rule, c.acl, got, c.want)
		}
	}
}

// TestACLNamesMatchKafka: the names rules may use are exactly the names of
// Kafka's enums, less ANY, so that every ACL binding a broker returns can be
// selected and no rule names what a broker cannot have.
func TestACLNamesMatchKafka(t *testing.T) {
	for _, c := range []struct {
		what  string
		spec  []string
		kafka []string
		parse func(string) error
	}{
		{"resource types", mirrorspec.ACLResourceTypes, kmsg.ACLResourceTypeStrings(), func(s string) error { _, err := kmsg.ParseACLResourceType(s); return err }},
		{"operations", mirrorspec.ACLOperations, kmsg.ACLOperationStrings(), func(s string) error { _, err := kmsg.ParseACLOperation(s); return err }},
		{"permissions", mirrorspec.ACLPermissions, kmsg.ACLPermissionTypeStrings(), func(s string) error { _, err := kmsg.ParseACLPermissionType(s); return err }},
	} {
		kafka := slices.DeleteFunc(slices.Clone(c.kafka), func(s string) bool { return s == "ANY" || s == "UNKNOWN" })
		if spec := slices.Sorted(slices.Values(c.spec)); !slices.Equal(spec, slices.Sorted(slices.Values(kafka))) {
			t.Errorf("%s: mirrorspec has %q, kmsg %q", c.what, c.spec, kafka)
		}
		for _, s := range c.spec {
			if err := c.parse(s); err != nil {
				t.Errorf("%s: kmsg cannot parse %q: %v", c.what, s, err)
			}
		}
	}
}

// The agent's own read-only ACL is never synced, whatever the rules.
func TestReadOnlyACLNotSynced(t *testing.T) {
	marker := ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "orders", PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:*", Host: "*", Operation: kmsg.ACLOperationWrite, Permission: kmsg.ACLPermissionTypeDeny}
	if !readOnlyACL(marker) {
		t.Fatal("the read-only marker is not recognized")
	}
	other := marker
	other.Principal = "User:mallory"
	if readOnlyACL(other) {
		t.Error("a DENY WRITE of one principal taken for the read-only marker")
	}
}

func TestTracker(t *testing.T) {
	tr := NewTracker()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if changed := tr.Record(KindGroups, Result{Items: 3}, nil, at); changed {
		t.Error("a first success (no error before or after) reported as a change")
	}
	if changed := tr.Record(KindACLs, Result{}, errors.New("no authorizer"), at); !changed {
		t.Error("a first ACL failure not reported as a change")
	}
	if changed := tr.Record(KindACLs, Result{}, errors.New("no authorizer"), at.Add(time.Second)); changed {
		t.Error("the same ACL failure again reported as a change")
	}
	tr.Record(KindConfigs, Result{Items: 2, Drift: []string{"topic a: x"}}, nil, at)
	tr.Record(KindConfigs, Result{Items: 2}, nil, at.Add(time.Second))
	s := tr.Status()
	if g := s[KindGroups]; g.Items != 3 || g.LastSuccess != "2026-11-30T12:00:00Z" || g.Errors != 0 {
		t.Errorf("groups %+v", g)
	}
	if a := s[KindACLs]; a.Errors != 2 || a.LastError != "no authorizer" || a.LastSuccess != "" {
		t.Errorf("acls %+v", a)
	}
	if c := s[KindConfigs]; len(c.Drift) != 1 || c.LastSuccess != "2026-11-30T12:00:01Z" {
		t.Errorf("configs %+v: the last drift should stay until a newer one", c)
	}
	s[KindConfigs].Drift[0] = "changed by the caller"
	if d := tr.Status()[KindConfigs].Drift[0]; d != "topic a: x" {
		t.Errorf("a caller's change to Status's drift reached the tracker: %q", d)
	}
	if changed := tr.Record(KindACLs, Result{Items: 1}, nil, at.Add(2*time.Second)); !changed {
		t.Error("recovery not reported as a change")
	}
}

// TestTrackerEveryKind: the tracker keeps a status of its own for each kind
// of the table, and Status reports it under that kind.
func TestTrackerEveryKind(t *testing.T) {
	tr := NewTracker()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	kinds := mirrorapi.SyncKinds()
	for i, k := range kinds {
		tr.Record(k, Result{Items: i + 1}, nil, at)
		for range i {
			tr.Record(k, Result{}, fmt.Errorf("%s failed", k), at)
		}
	}
	s := tr.Status()
	for i, k := range kinds {
		if st := s[k]; st.Items != i+1 || st.Errors != int64(i) || st.LastSuccess == "" {
			t.Errorf("kind %s: %+v, want %d items and %d errors", k, st, i+1, i)
		}
	}
}
