package metasync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// ACL is one ACL binding. Its enums marshal as Kafka's names (TOPIC,
// LITERAL, WRITE, ALLOW).
type ACL struct {
	ResourceType kmsg.ACLResourceType        `json:"resource_type"`
	ResourceName string                      `json:"resource_name"`
	PatternType  kmsg.ACLResourcePatternType `json:"pattern_type"`
	Principal    string                      `json:"principal"`
	Host         string                      `json:"host"`
	Operation    kmsg.ACLOperation           `json:"operation"`
	Permission   kmsg.ACLPermissionType      `json:"permission"`
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s %s:%s %s %s from %s", a.Permission, a.Operation, a.ResourceType, a.ResourceName, a.PatternType, a.Principal, a.Host)
}

// Key identifies the ACL among others, for a store keyed by strings.
func (a ACL) Key() string {
	return fmt.Sprintf("%s;%q;%s;%q;%q;%s;%s", a.ResourceType, a.ResourceName, a.PatternType, a.Principal, a.Host, a.Operation, a.Permission)
}

// readOnlyACL reports whether a is the shape of the agent's own read-only
// ACL (readonly.Enforcer: DENY WRITE User:* from * on a literal topic).
// Such ACLs are never synced: on the source it is a promote's fence or
// another mirror's read-only marker, and on the destination the agent
// manages it per mirror topic.
func readOnlyACL(a ACL) bool {
	return a.ResourceType == kmsg.ACLResourceTypeTopic && a.PatternType == kmsg.ACLResourcePatternTypeLiteral &&
		a.Principal == readonly.Principal && a.Host == readonly.Host &&
		a.Operation == kmsg.ACLOperationWrite && a.Permission == kmsg.ACLPermissionTypeDeny
}

// match reports whether rule selects a.
func match(rule mirrorspec.ACLRule, a ACL) bool {
	return rule.Match(a.ResourceType.String(), a.ResourceName, a.Operation.String(), a.Permission.String(), a.Principal)
}

// ACLStore remembers which destination ACLs the agent created, so that it
// deletes only those, also after a restart (the coordinator keeps them in
// the state topic).
type ACLStore interface {
	Owned() []ACL
	Own(ctx context.Context, a ACL) error
	Disown(ctx context.Context, a ACL) error
}

// ACLs syncs ACLs from a source to a destination. src and dst issue
// requests to their cluster (a *kgo.Client).
type ACLs struct {
	src, dst kmsg.Requestor
	store    ACLStore
	log      hclog.Logger
}

// NewACLs returns an ACL sync from src to dst that records what it creates
// in store; log may be nil.
func NewACLs(src, dst kmsg.Requestor, store ACLStore, log hclog.Logger) *ACLs {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &ACLs{src: src, dst: dst, store: store, log: log}
}

// errSecurityDisabled is a cluster without an authorizer.
var errSecurityDisabled = errors.New("no authorizer")

// Sync creates on the destination every source ACL that a rule selects
// and the destination lacks, recording it as the agent's, and deletes the
// ACLs the agent created that the source no longer has (or no rule
// selects any more). An ACL the destination has already, created by
// someone else, is counted in sync but never recorded, so never deleted.
// Items is the number of selected source ACLs present on the destination.
// A source without an authorizer has no ACLs to sync: nothing changes. A
// destination without one is an error when there is anything to create or
// delete.
func (s *ACLs) Sync(ctx context.Context, rules []mirrorspec.ACLRule) (Result, error) {
	srcACLs, err := describeACLs(ctx, s.src)
	if errors.Is(err, errSecurityDisabled) {
		return Result{}, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("reading the source's ACLs: %w%s", err, authHint(err, "DESCRIBE"))
	}
	want := map[ACL]bool{}
	for _, a := range srcACLs {
		if !readOnlyACL(a) && slices.ContainsFunc(rules, func(r mirrorspec.ACLRule) bool { return match(r, a) }) {
			want[a] = true
		}
	}
	owned := map[ACL]bool{}
	for _, a := range s.store.Owned() {
		owned[a] = true
	}
	var create, remove []ACL
	dstACLs, err := describeACLs(ctx, s.dst)
	switch {
	case errors.Is(err, errSecurityDisabled):
		if len(want) > 0 || len(owned) > 0 {
			return Result{}, fmt.Errorf("the destination has no authorizer (ACL requests answer SECURITY_DISABLED): the %d source ACL(s) acl_include selects cannot be synced, and applications lose them at failover; enable an authorizer on the destination, or set acl_include to [] to sync none", len(want))
		}
		return Result{}, nil
	case err != nil:
		return Result{}, fmt.Errorf("reading the destination's ACLs: %w%s", err, authHint(err, "ALTER"))
	}
	have := map[ACL]bool{}
	for _, a := range dstACLs {
		have[a] = true
	}
	var res Result
	for a := range want {
		if have[a] {
			res.Items++
		} else {
			create = append(create, a)
		}
	}
	for a := range owned {
		if !want[a] {
			remove = append(remove, a)
		}
	}
	sortACLs(create)
	sortACLs(remove)

	var errs []error
	for _, a := range create {
		// Recorded first: an ACL created by an agent that dies before
		// recording it would otherwise never be deleted.
		if err := s.store.Own(ctx, a); err != nil {
			errs = append(errs, fmt.Errorf("recording ACL %s: %w", a, err))
			continue
		}
		if err := createACL(ctx, s.dst, a); err != nil {
			errs = append(errs, fmt.Errorf("creating ACL %s on the destination: %w%s", a, err, authHint(err, "ALTER")))
			if derr := s.store.Disown(ctx, a); derr != nil {
				errs = append(errs, fmt.Errorf("forgetting ACL %s: %w", a, derr))
			}
			continue
		}
		res.Items++
		s.log.Info("synced ACL: created on the destination", "acl", a.String())
	}
	for _, a := range remove {
		if have[a] {
			if err := deleteACL(ctx, s.dst, a); err != nil {
				errs = append(errs, fmt.Errorf("deleting ACL %s on the destination: %w", a, err))
				continue
			}
			s.log.Info("synced ACL: deleted on the destination, as it is gone from the source or no longer selected", "acl", a.String())
		}
		if err := s.store.Disown(ctx, a); err != nil {
			errs = append(errs, fmt.Errorf("forgetting ACL %s: %w", a, err))
		}
	}
	return res, errors.Join(errs...)
}

// authHint says what to grant when err is a refusal to manage ACLs.
func authHint(err error, op string) string {
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return ""
	}
	return fmt.Sprintf("; give the agent's principal %s on that cluster, or set acl_include to [] to sync no ACLs", op)
}

func sortACLs(as []ACL) {
	slices.SortFunc(as, func(a, b ACL) int { return strings.Compare(a.Key(), b.Key()) })
}

// describeACLs reads every ACL of a cluster; errSecurityDisabled when it
// has no authorizer.
func describeACLs(ctx context.Context, cl kmsg.Requestor) ([]ACL, error) {
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType = kmsg.ACLResourceTypeAny
	req.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
	req.Operation = kmsg.ACLOperationAny
	req.PermissionType = kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		if errors.Is(err, kerr.SecurityDisabled) {
			return nil, errSecurityDisabled
		}
		return nil, fmt.Errorf("%w%s", err, message(resp.ErrorMessage))
	}
	var out []ACL
	for _, r := range resp.Resources {
		for _, a := range r.ACLs {
			out = append(out, ACL{
				ResourceType: r.ResourceType, ResourceName: r.ResourceName, PatternType: r.ResourcePatternType,
				Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.PermissionType,
			})
		}
	}
	return out, nil
}

func createACL(ctx context.Context, cl kmsg.Requestor, a ACL) error {
	req := kmsg.NewPtrCreateACLsRequest()
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
	c.Principal, c.Host, c.Operation, c.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
	req.Creations = append(req.Creations, c)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Results) != 1 {
		return fmt.Errorf("%d results, want 1", len(resp.Results))
	}
	if err := kerr.ErrorForCode(resp.Results[0].ErrorCode); err != nil {
		return fmt.Errorf("%w%s", err, message(resp.Results[0].ErrorMessage))
	}
	return nil
}

// deleteACL deletes exactly a: every field of the filter is exact, so no
// other ACL matches it.
func deleteACL(ctx context.Context, cl kmsg.Requestor, a ACL) error {
	req := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourceName, f.ResourcePatternType = a.ResourceType, kmsg.StringPtr(a.ResourceName), a.PatternType
	f.Principal, f.Host, f.Operation, f.PermissionType = kmsg.StringPtr(a.Principal), kmsg.StringPtr(a.Host), a.Operation, a.Permission
	req.Filters = append(req.Filters, f)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Results) != 1 {
		return fmt.Errorf("%d results, want 1", len(resp.Results))
	}
	r := resp.Results[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return fmt.Errorf("%w%s", err, message(r.ErrorMessage))
	}
	for _, m := range r.MatchingACLs {
		if err := kerr.ErrorForCode(m.ErrorCode); err != nil {
			return fmt.Errorf("%w%s", err, message(m.ErrorMessage))
		}
	}
	return nil
}

func message(m *string) string {
	if m == nil || *m == "" {
		return ""
	}
	return " (" + *m + ")"
}
