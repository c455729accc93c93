package metasync

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
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

func TestFilter(t *testing.T) {
	for _, c := range []struct {
		name             string
		include, exclude []string
		match, skip      []string
	}{
		{"default includes every group", nil, nil, []string{"a", "console-consumer-1", ""}, nil},
		{"empty include matches none", []string{}, nil, nil, []string{"a"}},
		{"whole ids only", []string{"app"}, nil, []string{"app"}, []string{"app-1", "my-app"}},
		{"exclude wins", []string{"app-.*"}, []string{"app-test.*"}, []string{"app-1"}, []string{"app-test-2", "other"}},
		{"several includes", []string{"a", "b.*"}, nil, []string{"a", "bc"}, []string{"c"}},
	} {
		f, err := NewFilter(c.include, c.exclude)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkMatch(t, c.name, f.Match, c.match, c.skip)
	}
}

// checkMatch fails the test for each of match that m does not match and
// each of skip that it does; what names m.
func checkMatch[T any](t *testing.T, what string, m func(T) bool, match, skip []T) {
	t.Helper()
	for _, v := range match {
		if !m(v) {
			t.Errorf("%s does not match %q", what, any(v))
		}
	}
	for _, v := range skip {
		if m(v) {
			t.Errorf("%s matches %q", what, any(v))
		}
	}
}

func TestFilterErrors(t *testing.T) {
	for _, c := range []struct {
		include, exclude []string
		want             string
	}{
		{[]string{"app-("}, nil, `groups_include: "app-(" is not a valid regular expression: missing closing )`},
		{nil, []string{"*"}, `groups_exclude: "*" is not a valid regular expression: missing argument to repetition operator`},
		{[]string{" "}, nil, `groups_include: " " is not a valid regular expression: empty pattern`},
	} {
		_, err := NewFilter(c.include, c.exclude)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewFilter(%q, %q) = %v, want an error containing %q", c.include, c.exclude, err, c.want)
		}
	}
}

func TestACLRules(t *testing.T) {
	acl := func(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType, principal string) ACL {
		return ACL{ResourceType: rt, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral, Principal: principal, Host: "*", Operation: op, Permission: perm}
	}
	allowReadOrders := acl(kmsg.ACLResourceTypeTopic, "orders-eu", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow, "User:alice")
	denyWriteGroup := acl(kmsg.ACLResourceTypeGroup, "app", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeDeny, "User:bob")
	for _, c := range []struct {
		rule        string
		match, skip []ACL
	}{
		{"*", []ACL{allowReadOrders, denyWriteGroup}, nil},
		{"TOPIC", []ACL{allowReadOrders}, []ACL{denyWriteGroup}},
		{"topic;orders-.*", []ACL{allowReadOrders}, []ACL{denyWriteGroup}},
		{"TOPIC;orders", nil, []ACL{allowReadOrders}}, // the whole name
		{"*;*;READ;ALLOW", []ACL{allowReadOrders}, []ACL{denyWriteGroup}},
		{"GROUP;*;*;DENY", []ACL{denyWriteGroup}, []ACL{allowReadOrders}},
		{"*;*;*;*;User:bob", []ACL{denyWriteGroup}, []ACL{allowReadOrders}},
		{"TRANSACTIONAL_ID", nil, []ACL{allowReadOrders, denyWriteGroup}},
	} {
		r, err := ParseACLRule(c.rule)
		if err != nil {
			t.Fatalf("%q: %v", c.rule, err)
		}
		checkMatch(t, fmt.Sprintf("rule %q", c.rule), r.Match, c.match, c.skip)
	}
}

func TestACLRuleErrors(t *testing.T) {
	for _, c := range []struct{ rule, want string }{
		{"TOPIC;a;READ;ALLOW;User:x;extra", "has 6 fields"},
		{"TABLE", `resource type "TABLE" is not one of`},
		{"ANY", `resource type "ANY" is not one of`},
		{"TOPIC;orders(", `resource name "orders(" is not a valid regular expression`},
		{"TOPIC;*;FLY", `operation "FLY" is not one of`},
		{"TOPIC;*;READ;MAYBE", `permission "MAYBE" is not ALLOW, DENY or *`},
		{"TOPIC;*;READ;ALLOW;alice", `principal "alice" is not TYPE:NAME`},
	} {
		_, err := ParseACLRules("acl_include", []string{"*", c.rule})
		if err == nil || !strings.HasPrefix(err.Error(), "acl_include: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rule %q: %v, want an error naming acl_include and saying %q", c.rule, err, c.want)
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
	if s.Groups.Items != 3 || s.Groups.LastSuccess != "2026-11-30T12:00:00Z" || s.Groups.Errors != 0 {
		t.Errorf("groups %+v", s.Groups)
	}
	if s.ACLs.Errors != 2 || s.ACLs.LastError != "no authorizer" || s.ACLs.LastSuccess != "" {
		t.Errorf("acls %+v", s.ACLs)
	}
	if len(s.Configs.Drift) != 1 || s.Configs.LastSuccess != "2026-11-30T12:00:01Z" {
		t.Errorf("configs %+v: the last drift should stay until a newer one", s.Configs)
	}
	if changed := tr.Record(KindACLs, Result{Items: 1}, nil, at.Add(2*time.Second)); !changed {
		t.Error("recovery not reported as a change")
	}
}
