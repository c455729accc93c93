package mirrorspec

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
)

// ValidateTopicRegex says what is wrong with each of a mirror's topic
// regular expressions (topic_regex, KIP-1279's mirror.topics.include),
// naming the field.
func ValidateTopicRegex(res []string) []string {
	var errs []string
	seen := map[string]bool{}
	for _, re := range res {
		switch {
		case re == "":
			errs = append(errs, "topic_regex: an empty regular expression; give one that matches whole topic names, such as orders\\..*")
		case seen[re]:
			errs = append(errs, fmt.Sprintf("topic_regex: %q is listed twice", re))
		default:
			if _, err := CompileTopicRegex(re); err != nil {
				errs = append(errs, fmt.Sprintf("topic_regex: %q is not a valid regular expression (Go RE2 syntax): %v", re, err))
			}
		}
		seen[re] = true
	}
	return errs
}

// CompileTopicRegex compiles re anchored at both ends, so that it matches
// whole topic names as Kafka's include lists do.
func CompileTopicRegex(re string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(re); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + re + `)$`)
}

// GroupFilter selects consumer groups by mirror.groups.include and
// mirror.groups.exclude: whole-id regular expressions, exclude winning.
type GroupFilter struct {
	include, exclude []*regexp.Regexp
}

// NewGroupFilter compiles include (nil means DefaultGroupsInclude, empty
// matches nothing) and exclude. The error names the field and the pattern.
func NewGroupFilter(include, exclude []string) (*GroupFilter, error) {
	if include == nil {
		include = defaultGroupsInclude
	}
	f := &GroupFilter{}
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
func (f *GroupFilter) Match(group string) bool {
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
			return nil, fmt.Errorf("%s: %q is not a valid regular expression: %v; use a Go (RE2) regular expression matching whole group ids", field, p, regexpReason(err))
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

// Kafka's names of ACL resource types, operations and permissions, as
// Kafka's AdminClient and kafka-acls.sh write them (ANY and UNKNOWN left
// out: a rule says "*" for any).
var (
	ACLResourceTypes = []string{"TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"}
	ACLOperations    = []string{"ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
		"DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS"}
	ACLPermissions = []string{"ALLOW", "DENY"}
)

// aclName normalizes a name as Kafka's clients parse them (case, '.', '_'
// and '-' ignored), so that describe_configs matches DESCRIBE_CONFIGS.
func aclName(s string) string {
	return strings.ToLower(strings.NewReplacer(".", "", "_", "", "-", "").Replace(strings.TrimSpace(s)))
}

// canonical returns the name of names that s spells, or "".
func canonical(names []string, s string) string {
	n := aclName(s)
	for _, c := range names {
		if aclName(c) == n {
			return c
		}
	}
	return ""
}

// ACLRule is one mirror.acl.include rule:
// RESOURCE-TYPE;RESOURCE-NAME;OPERATION;PERMISSION;PRINCIPAL. Its fields
// are Kafka's names ("" for any).
type ACLRule struct {
	ResourceType string         // one of ACLResourceTypes, "" any
	Name         *regexp.Regexp // nil any
	Operation    string         // one of ACLOperations, "" any
	Permission   string         // one of ACLPermissions, "" any
	Principal    string         // such as User:alice, "" any
	text         string
}

func (r ACLRule) String() string { return r.text }

// ParseACLRule parses a rule. "*" in a field matches anything; trailing
// fields may be left out; RESOURCE-NAME is a regular expression matching
// the whole resource name (as written in the ACL, whatever its pattern
// type); the other fields are Kafka's names (TOPIC, GROUP, CLUSTER,
// TRANSACTIONAL_ID, ...; READ, WRITE, ALL, ...; ALLOW, DENY) in any case,
// and a principal such as User:alice.
func ParseACLRule(s string) (ACLRule, error) {
	r := ACLRule{text: s}
	fields := strings.Split(s, ";")
	if len(fields) > 5 {
		return r, fmt.Errorf("%q has %d fields; a rule is RESOURCE-TYPE;RESOURCE-NAME;OPERATION;PERMISSION;PRINCIPAL", s, len(fields))
	}
	field := func(i int) (string, bool) {
		if i >= len(fields) {
			return "", true
		}
		f := strings.TrimSpace(fields[i])
		return f, f == "*"
	}
	if f, ok := field(0); !ok {
		if r.ResourceType = canonical(ACLResourceTypes, f); r.ResourceType == "" {
			return r, fmt.Errorf("%q: resource type %q is not one of TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER or *", s, f)
		}
	}
	if f, ok := field(1); !ok {
		re, err := compileWhole(f)
		if err != nil {
			return r, fmt.Errorf("%q: resource name %q is not a valid regular expression: %v", s, f, regexpReason(err))
		}
		r.Name = re
	}
	if f, ok := field(2); !ok {
		if r.Operation = canonical(ACLOperations, f); r.Operation == "" {
			return r, fmt.Errorf("%q: operation %q is not one of %s or *", s, f, strings.Join(ACLOperations, ", "))
		}
	}
	if f, ok := field(3); !ok {
		if r.Permission = canonical(ACLPermissions, f); r.Permission == "" {
			return r, fmt.Errorf("%q: permission %q is not ALLOW, DENY or *", s, f)
		}
	}
	if f, ok := field(4); !ok {
		if !strings.Contains(f, ":") {
			return r, fmt.Errorf("%q: principal %q is not TYPE:NAME (such as User:alice) or *", s, f)
		}
		r.Principal = f
	}
	return r, nil
}

// ParseACLRules parses mirror.acl.include (nil means DefaultACLInclude);
// the error names field.
func ParseACLRules(field string, rules []string) ([]ACLRule, error) {
	if rules == nil {
		rules = defaultACLInclude
	}
	out := make([]ACLRule, 0, len(rules))
	for _, s := range rules {
		r, err := ParseACLRule(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Match reports whether the rule selects the ACL binding given by Kafka's
// names of its resource type, operation and permission.
func (r ACLRule) Match(resourceType, resourceName, operation, permission, principal string) bool {
	same := func(want, got string) bool { return want == "" || aclName(want) == aclName(got) }
	return same(r.ResourceType, resourceType) &&
		(r.Name == nil || r.Name.MatchString(resourceName)) &&
		same(r.Operation, operation) && same(r.Permission, permission) &&
		(r.Principal == "" || r.Principal == principal)
}
