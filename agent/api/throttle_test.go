package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// sourceQuota returns the consumer_byte_rate the source holds for the
// mirror's client id, and whether it holds one.
func sourceQuota(t *testing.T, e *env, mirror string) (float64, bool) {
	t.Helper()
	id := mirrorapi.SourceQuotaClientID(mirror)
	qs, err := kadm.NewClient(e.srcCl).DescribeClientQuotas(context.Background(), false,
		[]kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &id}})
	if err != nil {
		t.Fatalf("describing source quotas: %v", err)
	}
	for _, q := range qs {
		for _, v := range q.Values {
			if v.Key == "consumer_byte_rate" {
				return v.Value, true
			}
		}
	}
	return 0, false
}

// TestThrottleRoutes drives the throttle routes of a mirror: refusals naming
// the field, set with a source quota, describe, an update in place, a spec
// update that leaves the throttle alone, removal (twice), and a mirror
// delete that takes throttle and quota with it.
func TestThrottleRoutes(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	ctx := context.Background()
	const pattern = "/v1/mirrors/{name}/throttle"
	call := func(method, path, body string, want int, code string) []byte {
		t.Helper()
		status, b := e.call(t, token, method, path, body)
		if status != want {
			t.Fatalf("%s %s %s: %d, want %d: %s", method, path, body, status, want, b)
		}
		if code != "" && !strings.Contains(string(b), `"`+code+`"`) {
			t.Errorf("%s %s %s: want code %s: %s", method, path, body, code, b)
		}
		checkResponse(t, d, method, pattern, status, b)
		return b
	}
	if _, err := e.cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: e.src.Bootstrap()}, Topics: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}

	call("GET", "/v1/mirrors/dr/throttle", "", 404, mirrorapi.CodeThrottleNotFound)
	call("GET", "/v1/mirrors/nope/throttle", "", 404, mirrorapi.CodeMirrorNotFound)
	call("PUT", "/v1/mirrors/nope/throttle", `{"rate_bytes_per_second":1000}`, 404, mirrorapi.CodeMirrorNotFound)
	call("DELETE", "/v1/mirrors/nope/throttle", "", 404, mirrorapi.CodeMirrorNotFound)
	for _, c := range []struct{ body, code, names string }{
		{`{"rate_bytes_per_second":0}`, mirrorapi.CodeInvalidConfig, "rate_bytes_per_second"},
		{`{"rate_bytes_per_second":-5}`, mirrorapi.CodeInvalidConfig, "rate_bytes_per_second"},
		{`{"rate_bytes_per_second":1000,"partitions":["orders"]}`, mirrorapi.CodeInvalidConfig, `partitions[0]: \"orders\": use TOPIC:PARTITION`},
		{`{"rate_bytes_per_second":1000,"partitions":["orders:0","orders:x"]}`, mirrorapi.CodeInvalidConfig, `partitions[1]: \"orders:x\"`},
		{`{"rate_bytes_per_second":1000,"partitions":["orders:-1"]}`, mirrorapi.CodeInvalidConfig, `partitions[0]`},
		{`{"rate_bytes_per_second":1000,"partitions":["*","orders:0"]}`, mirrorapi.CodeInvalidConfig, `list it alone`},
		{`{"rate_bytes_per_second":1000,"partitions":["a b:0"]}`, mirrorapi.CodeInvalidConfig, `not a valid Kafka topic name`},
		{`{"rate_bytes_per_second":"1MB"}`, mirrorapi.CodeInvalidRequest, "rate_bytes_per_second"},
		{`{"rate":1000}`, mirrorapi.CodeInvalidRequest, `\"rate\": unknown field`},
	} {
		b := call("PUT", "/v1/mirrors/dr/throttle", c.body, 400, c.code)
		if !strings.Contains(string(b), c.names) {
			t.Errorf("PUT %s: the message does not say %q: %s", c.body, c.names, b)
		}
	}
	if _, ok := sourceQuota(t, e, "dr"); ok {
		t.Fatal("a refused throttle set a source quota")
	}

	// Set, with a source quota.
	b := call("PUT", "/v1/mirrors/dr/throttle", `{"rate_bytes_per_second":1048576,"source_quota":true}`, 200, "")
	var got mirrorapi.Throttle
	if err := json.Unmarshal(b, &got); err != nil || got.RateBytesPerSecond != 1<<20 || !slices.Equal(got.Partitions, []string{"*"}) || !got.SourceQuota ||
		got.SourceQuotaEntity != "client-id=kmirror-dr" {
		t.Fatalf("PUT answered %s (%v)", b, err)
	}
	if q, ok := sourceQuota(t, e, "dr"); !ok || q != 1<<20 {
		t.Errorf("source consumer_byte_rate for kmirror-dr: %v %v, want 1048576", q, ok)
	}
	call("GET", "/v1/mirrors/dr/throttle", "", 200, "")
	m, err := e.cl.Mirror(ctx, "dr")
	if err != nil || m.Throttle == nil || m.Throttle.RateBytesPerSecond != 1<<20 {
		t.Errorf("describe shows throttle %+v (%v)", m.Throttle, err)
	}
	if !stateKeys(t, e)["throttle/dr"] {
		t.Error("the state topic has no throttle/dr")
	}

	// Update in place through the client: a new rate and partitions; the
	// quota follows the rate.
	if _, err := e.cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 2000000, Partitions: []string{"orders:1", "orders:0"}, SourceQuota: true}); err != nil {
		t.Fatal(err)
	}
	if q, _ := sourceQuota(t, e, "dr"); q != 2000000 {
		t.Errorf("source quota after the rate changed: %v, want 2000000", q)
	}
	// A spec update leaves the throttle alone.
	if _, err := e.cl.Update(ctx, "dr", mirrorapi.MirrorSpec{Topics: []string{"orders", "events"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.cl.Throttle(ctx, "dr"); err != nil || got.RateBytesPerSecond != 2000000 || !slices.Equal(got.Partitions, []string{"orders:1", "orders:0"}) {
		t.Errorf("throttle after a mirror update: %+v (%v)", got, err)
	}
	// A partition of a topic the mirror lacks is allowed (it may be
	// added later), and describe warns about it.
	if _, err := e.cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 2000000, Partitions: []string{"orders:0", "ordrs:1"}, SourceQuota: true}); err != nil {
		t.Fatal(err)
	}
	if m, err := e.cl.Mirror(ctx, "dr"); err != nil || !slices.ContainsFunc(m.Warnings, func(w string) bool {
		return strings.Contains(w, `throttle: partition ordrs:1: the mirror has no topic "ordrs"`)
	}) {
		t.Errorf("describe warnings %q (%v), want one about ordrs:1", m.Warnings, err)
	}
	// Turning the quota off removes it and keeps the throttle.
	if _, err := e.cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 2000000}); err != nil {
		t.Fatal(err)
	}
	if q, ok := sourceQuota(t, e, "dr"); ok {
		t.Errorf("source quota still %v after source_quota was turned off", q)
	}

	// Remove, twice: the second is harmless.
	if _, err := e.cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 5000, SourceQuota: true}); err != nil {
		t.Fatal(err)
	}
	call("DELETE", "/v1/mirrors/dr/throttle", "", 204, "")
	call("DELETE", "/v1/mirrors/dr/throttle", "", 204, "")
	if _, err := e.cl.Throttle(ctx, "dr"); !mirrorapi.IsCode(err, mirrorapi.CodeThrottleNotFound) {
		t.Errorf("GET after DELETE: %v", err)
	}
	if q, ok := sourceQuota(t, e, "dr"); ok {
		t.Errorf("source quota still %v after the throttle was removed", q)
	}
	if m, _ := e.cl.Mirror(ctx, "dr"); m.Throttle != nil {
		t.Errorf("describe still shows throttle %+v", m.Throttle)
	}

	// Deleting the mirror takes its throttle and quota with it.
	if _, err := e.cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 7000, SourceQuota: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Delete(ctx, "dr", true); err != nil {
		t.Fatal(err)
	}
	if stateKeys(t, e)["throttle/dr"] {
		t.Error("the state topic still has throttle/dr after the mirror was deleted")
	}
	if q, ok := sourceQuota(t, e, "dr"); ok {
		t.Errorf("source quota still %v after the mirror was deleted", q)
	}
}

// quotaRates returns every consumer_byte_rate the source holds, by entity
// ("user=U,client-id=C", "client-id=C").
func quotaRates(t *testing.T, adm *kadm.Client) map[string]float64 {
	t.Helper()
	qs, err := adm.DescribeClientQuotas(context.Background(), false, nil)
	if err != nil {
		t.Fatalf("describing source quotas: %v", err)
	}
	rates := map[string]float64{}
	for _, q := range qs {
		var names []string
		for _, c := range q.Entity {
			name := "<default>"
			if c.Name != nil {
				name = *c.Name
			}
			names = append(names, c.Type+"="+name)
		}
		slices.Sort(names) // client-id sorts before user
		slices.Reverse(names)
		for _, v := range q.Values {
			if v.Key == "consumer_byte_rate" {
				rates[strings.Join(names, ",")] = v.Value
			}
		}
	}
	return rates
}

// TestThrottleSourceQuotaSASLUser: with a SASL source, the source quota is
// set on the user and client id together (Kafka applies a user's quotas
// before client-id quotas), describe names that entity, an update of the
// source's user moves the quota, and removal leaves no quota behind.
func TestThrottleSourceQuotaSASLUser(t *testing.T) {
	ctx := context.Background()
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.SASLUser("admin", "admin-pass"),
		devcluster.SASLUser("mirror-a", "pass-a"), devcluster.SASLUser("mirror-b", "pass-b"),
		devcluster.KfakeOptions(kfake.SeedTopics(1, "orders")))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	co := coordinatortest.Start(t, coordinator.Config{Destination: []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}, RefreshInterval: 200 * time.Millisecond}).Coordinator
	srv := httptest.NewServer(api.Handler(co, api.Options{}))
	t.Cleanup(srv.Close)
	cl := mirrorapi.NewClient(srv.URL, "")
	scl, err := kgo.NewClient(kgo.SeedBrokers(src.Bootstrap()...), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pass"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(scl.Close)
	adm := kadm.NewClient(scl)

	t.Setenv("KMIRROR_TEST_PASS_A", "pass-a")
	t.Setenv("KMIRROR_TEST_PASS_B", "pass-b")
	source := func(user, passEnv string) mirrorapi.Source {
		return mirrorapi.Source{BootstrapServers: src.Bootstrap(),
			SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-512", Username: user, Password: "${env:" + passEnv + "}"}}
	}
	if _, err := cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr", Source: source("mirror-a", "KMIRROR_TEST_PASS_A"), Topics: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	got, err := cl.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 4096, SourceQuota: true, SourceQuotaEntity: "client-id=ignored"})
	if err != nil {
		t.Fatal(err)
	}
	const entityA, entityB = "user=mirror-a,client-id=kmirror-dr", "user=mirror-b,client-id=kmirror-dr"
	if got.SourceQuotaEntity != entityA {
		t.Errorf("PUT answered source_quota_entity %q, want %q", got.SourceQuotaEntity, entityA)
	}
	if rates := quotaRates(t, adm); len(rates) != 1 || rates[entityA] != 4096 {
		t.Errorf("source quotas %v, want only %s = 4096", rates, entityA)
	}
	if m, err := cl.Mirror(ctx, "dr"); err != nil || m.Throttle == nil || m.Throttle.SourceQuotaEntity != entityA {
		t.Errorf("describe shows throttle %+v (%v), want source_quota_entity %q", m.Throttle, err, entityA)
	}

	// The source authenticates as another user now: the quota follows.
	if _, err := cl.Update(ctx, "dr", mirrorapi.MirrorSpec{Source: source("mirror-b", "KMIRROR_TEST_PASS_B"), Topics: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	if rates := quotaRates(t, adm); len(rates) != 1 || rates[entityB] != 4096 {
		t.Errorf("source quotas after the user changed: %v, want only %s = 4096", rates, entityB)
	}
	if got, err := cl.Throttle(ctx, "dr"); err != nil || got.SourceQuotaEntity != entityB {
		t.Errorf("throttle after the user changed: %+v (%v), want source_quota_entity %q", got, err, entityB)
	}

	if err := cl.RemoveThrottle(ctx, "dr"); err != nil {
		t.Fatal(err)
	}
	if rates := quotaRates(t, adm); len(rates) != 0 {
		t.Errorf("source quotas after the throttle was removed: %v, want none", rates)
	}
}
