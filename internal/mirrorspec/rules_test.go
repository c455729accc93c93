package mirrorspec

import (
	"strings"
	"testing"
)

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
		f, err := NewGroupFilter(c.include, c.exclude)
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
		_, err := NewGroupFilter(c.include, c.exclude)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewGroupFilter(%q, %q) = %v, want an error containing %q", c.include, c.exclude, err, c.want)
		}
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
