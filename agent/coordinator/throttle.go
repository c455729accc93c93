package coordinator

// Mirror throttles (KIP-1279's mirror.replication.throttled.rate and
// .replicas): a byte-rate ceiling over some or all partitions of a mirror,
// enforced by its fetchers (fetcher.Throttle) and changed live. A throttle
// is kept in the state topic under its own key, throttle/MIRROR, so that
// updates of the mirror's spec leave it alone and a restarted agent applies
// it again. With source_quota it also sets consumer_byte_rate on the source
// for the mirror's client id (under the source's SASL user when it has one),
// the KIP's source-throttle example.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/mirror"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// ErrThrottleNotFound is returned for a mirror without a throttle.
var ErrThrottleNotFound = errors.New("mirror has no throttle")

func throttleKey(m string) string { return "throttle/" + m }

// sourceQuotaKey is the quota a source quota sets.
const sourceQuotaKey = "consumer_byte_rate"

// sourceQuotaTimeout bounds a change of the source quota.
const sourceQuotaTimeout = 15 * time.Second

// Throttle returns mirror name's throttle; ErrMirrorNotFound or
// ErrThrottleNotFound when there is none.
func (c *Coordinator) Throttle(name string) (mirrorapi.Throttle, error) {
	if _, err := c.existing(name); err != nil {
		return mirrorapi.Throttle{}, err
	}
	var t mirrorapi.Throttle
	if !mirror.ReadRecord(c.store, throttleKey(name), &t) {
		return mirrorapi.Throttle{}, fmt.Errorf("mirror %q: %w", name, ErrThrottleNotFound)
	}
	return t, nil
}

// SetThrottle sets or replaces mirror name's throttle. It takes effect at
// the mirror's next fetch. The source quota is changed first and the
// throttle persisted last, so that a failure leaves everything as it was.
func (c *Coordinator) SetThrottle(ctx context.Context, name string, t mirrorapi.Throttle) error {
	if err := t.Validate(); err != nil {
		return &InvalidSpecError{Err: err}
	}
	// In group mode every partition of a throttled mirror runs on its
	// home's agent, whose fetchers enforce the throttle.
	if err := c.gather(ctx, name); err != nil {
		return err
	}
	defer c.ungather(ctx, name) // its throttle record keeps it gathered
	adminMu.Lock()
	defer adminMu.Unlock()
	if err := t.Validate(); err != nil {
		return &InvalidSpecError{Err: err}
	}
	t = t.Normalized()
	rec, err := c.existing(name)
	if err != nil {
		return err
	}
	if err := c.ownerError(name); err != nil {
		return err // the runner that applies it is on another agent
	}
	ctx = c.ownerCtx(ctx, name)
	var old mirrorapi.Throttle
	hadQuota := mirror.ReadRecord(c.store, throttleKey(name), &old) && old.SourceQuota
	entity := quotaEntityOf(rec.Spec)
	oldEntity := storedQuotaEntity(name, old)
	t.SourceQuotaEntity = ""
	switch {
	case t.SourceQuota:
		t.SourceQuotaEntity = entity.String()
		if !hadQuota || old.RateBytesPerSecond != t.RateBytesPerSecond || oldEntity != entity {
			if err := c.setSourceQuota(ctx, rec.Spec, entity, t.RateBytesPerSecond); err != nil {
				return err
			}
		}
		// The SASL user changed since the quota was set: the old
		// entity's quota would otherwise stay behind.
		if hadQuota && oldEntity != entity {
			if err := c.setSourceQuota(ctx, rec.Spec, oldEntity, 0); err != nil {
				return err
			}
		}
	case hadQuota:
		if err := c.setSourceQuota(ctx, rec.Spec, oldEntity, 0); err != nil {
			return err
		}
	}
	if err := mirror.WriteRecord(ctx, c.store, throttleKey(name), t); err != nil {
		return fmt.Errorf("saving the throttle of mirror %q: %w", name, err)
	}
	c.applyThrottle(name, &t)
	c.log.Info("mirror throttle set", "mirror", name, "rate_bytes_per_second", t.RateBytesPerSecond, "partitions", t.Partitions, "source_quota", t.SourceQuota, "source_quota_entity", t.SourceQuotaEntity)
	return nil
}

// RemoveThrottle lifts mirror name's throttle and its source quota; a
// mirror without a throttle is left as it is.
func (c *Coordinator) RemoveThrottle(ctx context.Context, name string) error {
	adminMu.Lock()
	defer adminMu.Unlock()
	rec, err := c.existing(name)
	if err != nil {
		return err
	}
	if err := c.ownerError(name); err != nil {
		return err // the runner that applies it is on another agent
	}
	ctx = c.ownerCtx(ctx, name)
	var old mirrorapi.Throttle
	if !mirror.ReadRecord(c.store, throttleKey(name), &old) {
		return nil
	}
	if old.SourceQuota {
		if err := c.setSourceQuota(ctx, rec.Spec, storedQuotaEntity(name, old), 0); err != nil {
			return err
		}
	}
	if err := c.store.Put(ctx, throttleKey(name), nil); err != nil {
		return fmt.Errorf("removing the throttle of mirror %q: %w", name, err)
	}
	c.applyThrottle(name, nil)
	c.log.Info("mirror throttle removed", "mirror", name)
	return nil
}

// followSourceUser moves the source quota of mirror name to the entity of
// its source as it is now, after an update changed the source's SASL user.
// A failure is logged, not returned, as the update itself is done: the
// quota stays on the entity describe shows, and setting the throttle again
// moves it.
func (c *Coordinator) followSourceUser(ctx context.Context, name string) {
	var t mirrorapi.Throttle
	rec, ok, err := c.record(name)
	if err != nil || !ok || !mirror.ReadRecord(c.store, throttleKey(name), &t) || !t.SourceQuota {
		return
	}
	old, now := storedQuotaEntity(name, t), quotaEntityOf(rec.Spec)
	if old == now {
		return
	}
	fail := func(err error) {
		c.log.Warn("the source's SASL user changed but the source quota could not follow; set the throttle again", "mirror", name, "source_quota_entity", old.String(), "error", err)
	}
	if err := c.setSourceQuota(ctx, rec.Spec, now, t.RateBytesPerSecond); err != nil {
		fail(err)
		return
	}
	if err := c.setSourceQuota(ctx, rec.Spec, old, 0); err != nil {
		fail(err)
		return
	}
	t.SourceQuotaEntity = now.String()
	if err := mirror.WriteRecord(ctx, c.store, throttleKey(name), t); err != nil {
		fail(err)
		return
	}
	c.applyThrottle(name, &t)
	c.log.Info("source quota moved to the source's SASL user", "mirror", name, "from", old.String(), "to", now.String())
}

// applyThrottle makes mirror name's fetchers follow t (nil: no throttle).
func (c *Coordinator) applyThrottle(name string, t *mirrorapi.Throttle) {
	if m := c.running(name); m != nil {
		m.SetThrottle(t)
	}
}

// sourceQuotaEntity is the entity a mirror's source quota is set on: the
// mirror's client id, under the source's SASL user when it has one. Kafka
// applies the most specific quota of a connection (user + client id, then
// user, then client id), so a client-id quota alone would not hold for a
// SASL user that has a user quota of its own.
type sourceQuotaEntity struct{ user, clientID string }

// quotaEntityOf is the source quota entity of spec's mirror as it is now.
// OAUTHBEARER has no username in the spec (the user comes from the token):
// its quota names the client id only.
func quotaEntityOf(spec mirrorspec.Spec) sourceQuotaEntity {
	e := sourceQuotaEntity{clientID: mirrorapi.SourceQuotaClientID(spec.Name)}
	if s := spec.Source.SASL; s != nil {
		e.user = s.Username
	}
	return e
}

// storedQuotaEntity is the entity the persisted throttle t of mirror name
// set its quota on. Throttles saved before the entity was recorded set it
// on the client id only.
func storedQuotaEntity(name string, t mirrorapi.Throttle) sourceQuotaEntity {
	e := sourceQuotaEntity{clientID: mirrorapi.SourceQuotaClientID(name)}
	// The client id is known, so the user is whatever stands between
	// "user=" and ",client-id=ID", whichever characters it holds.
	if u, ok := strings.CutPrefix(t.SourceQuotaEntity, "user="); ok {
		e.user = strings.TrimSuffix(u, ",client-id="+e.clientID)
	}
	return e
}

// String is the entity as describe shows it, in the entity types of
// kafka-configs: "user=alice,client-id=kmirror-dr" or "client-id=kmirror-dr".
func (e sourceQuotaEntity) String() string {
	if e.user == "" {
		return "client-id=" + e.clientID
	}
	return "user=" + e.user + ",client-id=" + e.clientID
}

func (e sourceQuotaEntity) components() []kadm.ClientQuotaEntityComponent {
	var cs []kadm.ClientQuotaEntityComponent
	if e.user != "" {
		cs = append(cs, kadm.ClientQuotaEntityComponent{Type: "user", Name: &e.user})
	}
	return append(cs, kadm.ClientQuotaEntityComponent{Type: "client-id", Name: &e.clientID})
}

// setSourceQuota sets consumer_byte_rate for entity on the mirror's source
// to rate, or removes it when rate is 0, through a client of its own: the
// mirror may not be connected (or running) when this is called.
func (c *Coordinator) setSourceQuota(ctx context.Context, spec mirrorspec.Spec, entity sourceQuotaEntity, rate int64) error {
	ctx, cancel := context.WithTimeout(ctx, sourceQuotaTimeout)
	defer cancel()
	what := "setting"
	if rate == 0 {
		what = "removing"
	}
	fail := func(err error) error {
		return fmt.Errorf("source_quota: %s %s for %s on the source: %w", what, sourceQuotaKey, entity, err)
	}
	opts, err := c.sourceOpts(spec)
	if err != nil {
		return fail(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fail(err)
	}
	defer cl.Close()
	op := kadm.AlterClientQuotaOp{Key: sourceQuotaKey, Value: float64(rate), Remove: rate == 0}
	resp, err := kadm.NewClient(cl).AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: entity.components(),
		Ops:    []kadm.AlterClientQuotaOp{op},
	}})
	if err != nil {
		return fail(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			if r.ErrMessage != "" {
				return fail(fmt.Errorf("%w: %s", r.Err, r.ErrMessage))
			}
			return fail(r.Err)
		}
	}
	return nil
}
