// Package readonly makes destination mirror topics read-only for everyone but
// the agent (DESIGN §4 "Read-only mirror topics"; design-review §1.7).
//
// Enforce adds one ACL per mirror topic, DENY WRITE for principal User:* from
// host * on the LITERAL topic name, and Release removes exactly that ACL. A
// DENY overrides every ALLOW, so the agent itself keeps writing only because
// Kafka's authorizers (StandardAuthorizer in KRaft, AclAuthorizer on ZK)
// check super.users before any ACL: the agent must run as a super user of the
// destination. Check finds out whether it does.
//
// Where the destination has no authorizer, ACL requests fail with
// SECURITY_DISABLED: Enforce then reports enforced=false and no error, so
// that describe can say read_only_enforced=false. Managed services without
// super users (MSK IAM, Confluent Cloud) end up there too, through Check.
package readonly

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/writegate"
)

// Principal and Host are the principal and host of the ACL Enforce creates.
const (
	Principal = "User:*"
	Host      = "*"
)

// ProbeTopicPrefix starts the name of the short-lived topic Check creates.
const ProbeTopicPrefix = "__kmirror_readonly_probe_"

// ErrNotSuperUser is returned (wrapped) by Enforce when Check found that the
// agent is not a super user: its DENY would refuse the agent's own writes,
// so none is created.
var ErrNotSuperUser = errors.New("the agent is not a super user of the destination")

// Option configures New.
type Option func(*Enforcer)

// WithClient gives Check the agent's own client (the one it writes mirror
// topics with, or one with the same credentials) to produce through the
// probe's DENY. Without it Check cannot tell whether the agent is a super
// user.
func WithClient(cl *kgo.Client) Option { return func(e *Enforcer) { e.cl = cl } }

// Enforcer creates and removes the read-only ACLs of mirror topics. It is
// safe for concurrent use.
type Enforcer struct {
	adm *kadm.Client
	cl  *kgo.Client

	mu      sync.Mutex
	checked *Status // the last Check's result, nil before
}

// New returns an Enforcer that manages ACLs through adm, which must
// authenticate as the agent's principal.
func New(adm *kadm.Client, opts ...Option) *Enforcer {
	e := &Enforcer{adm: adm}
	for _, o := range opts {
		o(e)
	}
	return e
}

// denyWrite is the one ACL Enforce creates and Release deletes. As a delete
// filter every field is exact (LITERAL pattern, principal, host, operation,
// permission), so it matches that ACL and nothing else: not a PREFIXED or
// wildcard ACL on the name, not another principal's or host's.
func denyWrite(topic string) *kadm.ACLBuilder {
	return kadm.NewACLs().
		Topics(topic).
		ResourcePatternType(kadm.ACLPatternLiteral).
		Deny(Principal).
		DenyHosts(Host).
		Operations(kadm.OpWrite)
}

// PermissionError reports that the agent may not manage ACLs on the
// destination (CLUSTER_AUTHORIZATION_FAILED).
type PermissionError struct {
	Action string // "creating" or "deleting"
	Topic  string
	Err    error // kerr.ClusterAuthorizationFailed
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("readonly: %s the DENY WRITE %s ACL on topic %q: %v: the agent's principal may not manage ACLs; "+
		"it must be a super user of the destination (super.users, on every broker and controller), "+
		"or at least have ALTER on the cluster (with ALTER alone the DENY would refuse the agent's own writes too)",
		e.Action, Principal, e.Topic, e.Err)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// Enforce makes topic read-only for every principal but super users. It is
// idempotent: the ACL is a set member, and creating it again is a no-op.
// enforced is false, with a nil error, when the destination has no
// authorizer (SECURITY_DISABLED): nothing is enforced and the caller should
// report read_only_enforced=false. A *PermissionError means the agent may
// not create ACLs. After a Check that found the agent is not a super user,
// Enforce creates nothing and returns an error wrapping ErrNotSuperUser.
// With WithClient, enforced=true means every broker shows the ACL, so
// refuses writes (waitApplied).
func (e *Enforcer) Enforce(ctx context.Context, topic string) (enforced bool, err error) {
	if topic == "" {
		return false, errors.New("readonly: Enforce: empty topic name")
	}
	e.mu.Lock()
	st := e.checked
	e.mu.Unlock()
	if st != nil && st.Authorizer && !st.SuperUser {
		return false, fmt.Errorf("readonly: not denying writes to %q: %w (%s)", topic, ErrNotSuperUser, st.Reason)
	}
	return e.create(ctx, topic)
}

// create creates the DENY; see Enforce.
func (e *Enforcer) create(ctx context.Context, topic string) (bool, error) {
	if err := writegate.Check(ctx); err != nil {
		return false, fmt.Errorf("readonly: creating the DENY WRITE %s ACL on topic %q: %w", Principal, topic, err)
	}
	rs, err := e.adm.CreateACLs(ctx, denyWrite(topic))
	if err != nil {
		return false, fmt.Errorf("readonly: creating the DENY WRITE %s ACL on topic %q: %w", Principal, topic, err)
	}
	if len(rs) != 1 {
		return false, fmt.Errorf("readonly: creating the DENY WRITE %s ACL on topic %q: %d results, want 1", Principal, topic, len(rs))
	}
	switch err := rs[0].Err; {
	case err == nil:
		if err := e.waitApplied(ctx, topic, true); err != nil {
			return false, err
		}
		return true, nil
	case errors.Is(err, kerr.SecurityDisabled):
		return false, nil
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return false, &PermissionError{Action: "creating", Topic: topic, Err: err}
	default:
		return false, fmt.Errorf("readonly: creating the DENY WRITE %s ACL on topic %q: %w%s", Principal, topic, err, msgSuffix(rs[0].ErrMessage))
	}
}

// Release removes the ACL Enforce created on topic, and only that one: the
// delete filter matches every field exactly. An ACL identical in every field
// that someone else created is indistinguishable from it and goes too (ACLs
// are a set). Releasing a topic that has no such ACL, or on a destination
// without an authorizer, succeeds. With WithClient, it returns once no
// broker shows the ACL any more (waitApplied).
func (e *Enforcer) Release(ctx context.Context, topic string) error {
	if topic == "" {
		return errors.New("readonly: Release: empty topic name")
	}
	if err := writegate.Check(ctx); err != nil {
		return fmt.Errorf("readonly: deleting the DENY WRITE %s ACL on topic %q: %w", Principal, topic, err)
	}
	rs, err := e.adm.DeleteACLs(ctx, denyWrite(topic))
	if err != nil {
		return fmt.Errorf("readonly: deleting the DENY WRITE %s ACL on topic %q: %w", Principal, topic, err)
	}
	if len(rs) != 1 {
		return fmt.Errorf("readonly: deleting the DENY WRITE %s ACL on topic %q: %d results, want 1", Principal, topic, len(rs))
	}
	switch err := rs[0].Err; {
	case err == nil, errors.Is(err, kerr.SecurityDisabled):
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return &PermissionError{Action: "deleting", Topic: topic, Err: err}
	default:
		return fmt.Errorf("readonly: deleting the DENY WRITE %s ACL on topic %q: %w%s", Principal, topic, err, msgSuffix(rs[0].ErrMessage))
	}
	for _, d := range rs[0].Deleted {
		if d.Err != nil {
			return fmt.Errorf("readonly: deleting the DENY WRITE %s ACL on topic %q: %w%s", Principal, topic, d.Err, msgSuffix(d.ErrMessage))
		}
	}
	if errors.Is(rs[0].Err, kerr.SecurityDisabled) {
		return nil
	}
	return e.waitApplied(ctx, topic, false)
}

// appliedEvery is how often waitApplied asks the brokers again, and
// appliedTimeout bounds it.
const (
	appliedEvery   = 20 * time.Millisecond
	appliedTimeout = 30 * time.Second
)

// waitApplied waits until every broker that answers shows topic's DENY
// (present) or no longer shows it. CreateACLs and DeleteACLs return once
// the controller has committed the change; a KRaft broker applies it when
// it reads it from the metadata log, a little later, and authorizes with
// what it has applied: a Produce sent right after CreateACLs returned may
// still pass (a few in a hundred on one broker). A broker that does not
// answer is skipped: it authorizes nothing, and a restarted broker serves
// only once it has caught up with the metadata log. So is one that refuses
// to describe ACLs (an agent without DESCRIBE on the cluster, releasing an
// ACL an earlier agent created). Without the agent's client (WithClient)
// brokers cannot be asked one by one, and waitApplied returns at once.
func (e *Enforcer) waitApplied(ctx context.Context, topic string, present bool) error {
	if e.cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, appliedTimeout)
	defer cancel()
	for {
		pending, err := e.notApplied(ctx, topic, present)
		if err == nil && len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			what := "created"
			if !present {
				what = "deleted"
			}
			return fmt.Errorf("readonly: the DENY WRITE %s ACL on topic %q was %s, but brokers %v do not show it so yet (last error: %v): %w",
				Principal, topic, what, pending, err, ctx.Err())
		case <-time.After(appliedEvery):
		}
	}
}

// notApplied lists the brokers that answer DescribeACLs for topic's DENY
// with the wrong answer.
func (e *Enforcer) notApplied(ctx context.Context, topic string, present bool) ([]int32, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{} // brokers only
	mresp, err := mreq.RequestWith(ctx, e.cl)
	if err != nil {
		return nil, err
	}
	var pending []int32
	for _, b := range mresp.Brokers {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourceName, req.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.StringPtr(topic), kmsg.ACLResourcePatternTypeLiteral
		req.Principal, req.Host = kmsg.StringPtr(Principal), kmsg.StringPtr(Host)
		req.Operation, req.PermissionType = kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeDeny
		resp, err := req.RequestWith(ctx, e.cl.Broker(int(b.NodeID)))
		if err != nil || resp.ErrorCode != 0 {
			continue // unreachable, or it cannot tell (an agent without DESCRIBE on the cluster)
		}
		has := false
		for _, r := range resp.Resources {
			has = has || len(r.ACLs) > 0
		}
		if has != present {
			pending = append(pending, b.NodeID)
		}
	}
	return pending, nil
}

// Status is what Check found.
type Status struct {
	// Authorizer is whether the destination enforces ACLs (it does not
	// answer ACL requests with SECURITY_DISABLED).
	Authorizer bool
	// SuperUser is whether the agent produced through a DENY WRITE
	// User:*, which only super users can. Meaningful when Authorizer.
	SuperUser bool
	// Reason says why read-only mirror topics cannot be enforced; empty
	// when they can.
	Reason string
	// Leftover names what the probe could not clean up (a probe topic or
	// its ACL), empty when nothing is left.
	Leftover string
}

// Enforceable reports whether Enforce will make mirror topics read-only
// while the agent keeps writing them.
func (s Status) Enforceable() bool { return s.Authorizer && s.SuperUser }

// Check finds out whether the destination has an authorizer and whether the
// agent is a super user there, and remembers the answer for Enforce.
//
// How (a few cheap requests, once at start):
//  1. DescribeACLs on the probe's name: SECURITY_DISABLED means no
//     authorizer, and Check stops. CLUSTER_AUTHORIZATION_FAILED means the
//     agent lacks DESCRIBE on the cluster, which no super user lacks.
//  2. Create a probe topic of one partition, named ProbeTopicPrefix plus a
//     random suffix, so that concurrent checks never share one.
//  3. Create DENY WRITE User:* on it, and wait until every broker shows it
//     (waitApplied): a broker that has not applied it yet would let the
//     produce below through, and a non-super user would pass for one.
//  4. Produce to it, as the agent, a partition entry with an empty records
//     field. Kafka authorizes WRITE before it looks at the records, so the
//     answer is TOPIC_AUTHORIZATION_FAILED for any principal but a super
//     user, and otherwise INVALID_RECORD (or CORRUPT_MESSAGE): nothing is
//     appended either way. The topic must exist because Produce v13 names
//     topics by id.
//  5. Delete the ACL and the topic.
//
// Any refusal on the way (creating the topic or the ACL) also means the
// agent is not a super user, as super users are refused nothing. The error
// is for a check that could not conclude.
func (e *Enforcer) Check(ctx context.Context) (Status, error) {
	st, err := e.check(ctx)
	if err == nil {
		e.mu.Lock()
		e.checked = &st
		e.mu.Unlock()
	}
	return st, err
}

func (e *Enforcer) check(ctx context.Context) (Status, error) {
	if err := writegate.Check(ctx); err != nil {
		return Status{}, fmt.Errorf("readonly: checking the destination: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Status{}, err
	}
	probe := ProbeTopicPrefix + hex.EncodeToString(b[:])

	ds, err := e.adm.DescribeACLs(ctx, denyWrite(probe))
	if err != nil {
		var ke *kerr.Error
		if !errors.As(err, &ke) {
			return Status{}, fmt.Errorf("readonly: describing ACLs: %w", err)
		}
		ds = kadm.DescribeACLsResults{{Err: err}}
	}
	if len(ds) != 1 {
		return Status{}, fmt.Errorf("readonly: describing ACLs: %d results, want 1", len(ds))
	}
	switch err := ds[0].Err; {
	case err == nil:
	case errors.Is(err, kerr.SecurityDisabled):
		return Status{Reason: "the destination has no authorizer (ACL requests answer SECURITY_DISABLED): mirror topics stay writable"}, nil
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return notSuper("describing ACLs was refused (CLUSTER_AUTHORIZATION_FAILED)"), nil
	default:
		return Status{}, fmt.Errorf("readonly: describing ACLs: %w%s", err, msgSuffix(ds[0].ErrMessage))
	}
	if e.cl == nil {
		return Status{Authorizer: true}, errors.New("readonly: Check needs the agent's client (readonly.WithClient) to produce through the probe's DENY")
	}

	ct, err := e.adm.CreateTopic(ctx, 1, -1, nil, probe)
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return notSuper(fmt.Sprintf("creating the probe topic %q was refused (%v)", probe, err)), nil
	case err != nil:
		return Status{Authorizer: true}, fmt.Errorf("readonly: creating the probe topic %q: %w", probe, err)
	}
	var leftovers []string
	cleanup := func(st Status, withACL bool) Status {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if withACL {
			if err := e.Release(cctx, probe); err != nil {
				leftovers = append(leftovers, fmt.Sprintf("the DENY WRITE %s ACL on %q (%v)", Principal, probe, err))
			}
		}
		if _, err := e.adm.DeleteTopic(cctx, probe); err != nil {
			leftovers = append(leftovers, fmt.Sprintf("the topic %q (%v)", probe, err))
		}
		if len(leftovers) > 0 {
			st.Leftover = fmt.Sprint(leftovers)
		}
		return st
	}

	enforced, err := e.create(ctx, probe)
	switch {
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return cleanup(notSuper("creating an ACL was refused (CLUSTER_AUTHORIZATION_FAILED)"), false), nil
	case err != nil:
		return cleanup(Status{Authorizer: true}, true), err
	case !enforced:
		// Describe worked, create said SECURITY_DISABLED: not a
		// broker anyone should run, but there is nothing to enforce.
		return cleanup(Status{Reason: "creating an ACL answered SECURITY_DISABLED: mirror topics stay writable"}, false), nil
	}

	code, err := e.produceProbe(ctx, probe, ct.ID)
	switch {
	case err != nil:
		return cleanup(Status{Authorizer: true}, true), fmt.Errorf("readonly: producing to the probe topic %q: %w", probe, err)
	case code == kerr.TopicAuthorizationFailed.Code:
		return cleanup(notSuper(fmt.Sprintf("producing through a DENY WRITE %s was refused (TOPIC_AUTHORIZATION_FAILED)", Principal)), true), nil
	}
	return cleanup(Status{Authorizer: true, SuperUser: true}, true), nil
}

func notSuper(what string) Status {
	return Status{Authorizer: true, Reason: what + ": the agent is not a super user of the destination " +
		"(add its principal to super.users on every broker and controller); mirror topics stay writable"}
}

// produceProbe sends one produce request with an empty records field and
// returns the partition's error code. It retries while the new topic is
// not yet known to the broker it reached.
func (e *Enforcer) produceProbe(ctx context.Context, topic string, id kadm.TopicID) (int16, error) {
	for attempt := 0; ; attempt++ {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = 1
		req.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rt.TopicID = id
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = 0
		rp.Records = []byte{} // no batch: refused after authorization, never appended
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, e.cl)
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("answer has %d topics, want 1 with 1 partition", len(resp.Topics))
		}
		code := resp.Topics[0].Partitions[0].ErrorCode
		switch code {
		case kerr.UnknownTopicID.Code, kerr.UnknownTopicOrPartition.Code:
			if attempt >= 20 {
				return code, fmt.Errorf("the probe topic stayed unknown: %v", kerr.ErrorForCode(code))
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		return code, nil
	}
}

func msgSuffix(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}
