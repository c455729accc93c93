package mirror

// Source fences (DESIGN §4): a promote stops writes to its source topics
// first, so that the source high watermark it waits for stops moving.
// SourceFence plugs a way of fencing in; ACLSourceFence fences with the
// read-only ACL of mirror topics. The runner tries the fence once per run
// of the mirror and topic, and describe says when writes are not fenced.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// FenceRequest is what SourceFence.Fence fences.
type FenceRequest struct {
	Mirror string
	Source mirrorspec.Source
	Topics []string
	// Admin reaches the source as the mirror does: the mirror's own
	// source client, or one made from the same options when the mirror is
	// not connected.
	Admin *kadm.Client
	// Client is the client Admin was made from.
	Client *kgo.Client
}

// SourceFence stops writes to the source topics of a promote, so that the
// source high watermark the promote waits for stops moving: ACLSourceFence
// adds a DENY WRITE ACL for User:* on each source topic (KIP-1279's
// read-only enforcement, applied to the old primary). It plugs in as
// Config.SourceFence; StopTopics calls Fence once, before any state
// changes, when a promote is issued, and again when a promote interrupted
// by an agent restart resumes. An error refuses the promote; a result with
// Fenced false lets it go on, and its reason is shown in describe (the
// partitions' reasons and the mirror's warnings): the promote is not
// silently taken for fenced. Fence must be idempotent. Without a fence
// (NoSourceFence, the default) a promote waits until producers stop on
// their own, and a record acknowledged by the source between the agent's
// last look and the stop sends the partition back to mirroring rather than
// being lost.
type SourceFence interface {
	Fence(ctx context.Context, req FenceRequest) (FenceResult, error)
}

// NoSourceFence fences nothing, and says so.
type NoSourceFence struct{}

// Fence does nothing.
func (NoSourceFence) Fence(_ context.Context, req FenceRequest) (FenceResult, error) {
	return FenceResult{Reason: fmt.Sprintf("source writes to %q were NOT fenced: the agent has no source fence configured; RPO 0 depends on producers having stopped writing to the source", req.Topics)}, nil
}

// FenceResult is what SourceFence.Fence did.
type FenceResult struct {
	// Fenced is whether writes to every source topic are refused now.
	Fenced bool
	// Reason says why not, when Fenced is false; describe shows it.
	Reason string
}

// ACLSourceFence fences a promote's source topics with the read-only ACL
// of mirror topics: DENY WRITE for User:* on each source topic, created
// through the mirror's source admin client (FenceRequest.Admin). It stays
// after the promote, so that producers left on the old primary are refused
// rather than writing records the destination never gets.
//
// When the source has no authorizer (SECURITY_DISABLED) nothing can be
// fenced: Fence reports Fenced=false with a reason saying that RPO 0 then
// depends on producers having stopped, and the promote goes on. When the
// agent may not create ACLs on the source, Fence fails and the promote is
// refused: give the agent's source principal ALTER on the source cluster,
// or stop with mode failover.
type ACLSourceFence struct{}

// Fence implements SourceFence.
func (ACLSourceFence) Fence(ctx context.Context, req FenceRequest) (FenceResult, error) {
	if req.Admin == nil {
		return FenceResult{}, errors.New("no source admin client")
	}
	var opts []readonly.Option
	if req.Client != nil {
		// Enforce then waits until every source broker has the
		// fence: until then a broker may still accept writes.
		opts = append(opts, readonly.WithClient(req.Client))
	}
	e := readonly.New(req.Admin, opts...)
	var unfenced []string
	for _, t := range req.Topics {
		enforced, err := e.Enforce(ctx, t)
		if err != nil {
			var pe *readonly.PermissionError
			if errors.As(err, &pe) {
				return FenceResult{}, fmt.Errorf("the agent may not create ACLs on the source (%v): give its source principal ALTER on the source cluster, or stop with mode failover (RPO 0 then depends on producers having stopped)", pe.Err)
			}
			return FenceResult{}, err
		}
		if !enforced {
			unfenced = append(unfenced, t)
		}
	}
	if len(unfenced) > 0 {
		return FenceResult{Reason: fmt.Sprintf("source writes to %q were NOT fenced: the source has no authorizer (ACL requests answer SECURITY_DISABLED); RPO 0 depends on producers having stopped writing to the source", unfenced)}, nil
	}
	return FenceResult{Fenced: true}, nil
}

// fenceSource fences writes on the source topics of a promote (see
// SourceFence) through the mirror's source client, or one made from the same
// options when the mirror is not connected, and records whether it did for
// describe. An error refuses the promote.
func (m *Runner) fenceSource(ctx context.Context, topics []string) error {
	src := m.conn.sourceNow()
	m.mu.Lock()
	spec := m.spec
	m.mu.Unlock()
	var admCl *kgo.Client
	if src != nil {
		admCl = src.cl
	} else {
		opts, err := m.cfg.SourceOpts(spec)
		if err != nil {
			return fmt.Errorf("promote: connecting to the source to fence writes on %q: %w", topics, err)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("promote: connecting to the source to fence writes on %q: %w", topics, err)
		}
		defer cl.Close()
		admCl = cl
	}
	adm := kadm.NewClient(admCl)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := m.cfg.SourceFence.Fence(fctx, FenceRequest{Mirror: spec.Name, Source: spec.Source, Topics: topics, Admin: adm, Client: admCl})
	if err != nil {
		return fmt.Errorf("promote: fencing writes on the source topics %q: %w", topics, err)
	}
	why := unfencedReason(res, topics)
	if why != "" {
		m.log.Warn("promote: source writes not fenced", "topics", topics, "reason", why)
	} else {
		m.log.Info("promote: source writes fenced", "topics", topics)
	}
	m.fences.tried(topics, why)
	return nil
}

// unfencedReason is why res leaves writes to topics unfenced, "" when it
// fences them.
func unfencedReason(res FenceResult, topics []string) string {
	switch {
	case res.Fenced:
		return ""
	case res.Reason != "":
		return res.Reason
	}
	return fmt.Sprintf("source writes to %q were NOT fenced; RPO 0 depends on producers having stopped writing to the source", topics)
}

// fenceState is what the source fence of a topic's promote did.
type fenceState struct {
	done   bool   // fenced or tried, in this run of the mirror
	reason string // why source writes are not fenced; empty when they are
}

// tried records that the source fence of topics was tried in this run of
// the mirror, with why writes are not fenced ("" when they are).
func (f *fences) tried(topics []string, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range topics {
		f.fenced[t] = fenceState{done: true, reason: why}
	}
}

// fenceOf is what the source fence of topic's promote did.
func (f *fences) fenceOf(topic string) fenceState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fenced[topic]
}

// note is what a promote of topic adds to its partitions' reasons: ""
// when source writes are fenced, else why not.
func (f *fences) note(topic string) string {
	if r := f.fenceOf(topic).reason; r != "" {
		return "; " + r
	}
	return ""
}
