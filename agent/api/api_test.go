package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestLifecycle drives every route through a mirror's life against a real
// coordinator and two dev clusters, validating each answer against the
// OpenAPI document.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	ctx := context.Background()
	check := func(method, pattern, path, body string, want int) []byte {
		t.Helper()
		status, b := e.call(t, token, method, path, body)
		if status != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, status, want, b)
		}
		checkResponse(t, d, method, pattern, status, b)
		return b
	}

	for _, p := range []string{"/healthz", "/readyz"} {
		if status, b := e.call(t, "", "GET", p, ""); status != 200 {
			t.Fatalf("GET %s without a token: %d %s", p, status, b)
		}
	}
	b := check("GET", "/v1/openapi.json", "/v1/openapi.json", "", 200)
	if string(b) != string(api.OpenAPI()) {
		t.Error("GET /v1/openapi.json does not serve the embedded document")
	}
	check("GET", "/v1/mirrors", "/v1/mirrors", "", 200)

	// Create, with the source's first broker only.
	src := e.src.Bootstrap()
	b = check("POST", "/v1/mirrors", "/v1/mirrors",
		`{"name":"dr","source":{"bootstrap_servers":["`+src[0]+`"]},"topics":["orders"]}`, 201)
	var m mirrorapi.Mirror
	if err := json.Unmarshal(b, &m); err != nil || m.Name != "dr" || len(m.Topics) != 1 || m.Topics[0].Name != "orders" {
		t.Fatalf("create answered %s (%v)", b, err)
	}
	e.produce(t, "orders", 0, 5)
	e.produce(t, "orders", 1, 3)
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 4, "orders/1": 2})
	check("GET", "/v1/mirrors", "/v1/mirrors", "", 200)
	check("GET", "/v1/mirrors/{name}", "/v1/mirrors/dr", "", 200)
	b = check("GET", "/v1/mirrors/{name}/offsets", "/v1/mirrors/dr/offsets?topic=orders", "", 200)
	var offs mirrorapi.OffsetsResponse
	if err := json.Unmarshal(b, &offs); err != nil || offs.Mirror != "dr" || len(offs.Topics) != 1 || len(offs.Topics[0].Partitions) != 2 {
		t.Fatalf("offsets answered %s (%v)", b, err)
	}
	if p := offs.Topics[0].Partitions[0]; p.LastMirroredOffset != 4 || p.DestinationOffset != 5 || p.SourceOffset != 5 || p.Lag != 0 || p.State != mirrorapi.StateMirroring {
		t.Errorf("orders/0 offsets: %+v", p)
	}

	// Add topics, through the route and through the client.
	check("POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":["events"]}`, 200)
	if _, err := e.cl.AddTopics(ctx, "dr", []string{"audit"}); err != nil {
		t.Fatal(err)
	}
	e.produce(t, "events", 0, 2)
	e.produce(t, "audit", 0, 1)
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 4, "events/0": 1, "audit/0": 0})

	// Update: a new source bootstrap (the second broker) and one more
	// topic; left-out fields keep their value.
	b = check("PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr",
		`{"source":{"bootstrap_servers":["`+src[1]+`"]},"topics":["orders","events","audit","logs"]}`, 200)
	if err := json.Unmarshal(b, &m); err != nil || !slices.Equal(m.Source.BootstrapServers, []string{src[1]}) || len(m.Topics) != 4 {
		t.Fatalf("update answered %s (%v)", b, err)
	}
	e.produce(t, "orders", 0, 2)
	e.produce(t, "logs", 0, 3)
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 6, "orders/1": 2, "events/0": 1, "audit/0": 0, "logs/0": 2})
	if got := e.co.Mirrors(); len(got) != 1 || got[0].TopicConfigExclude != nil || len(got[0].Topics) != 4 {
		t.Errorf("persisted spec after update: %+v", got)
	}
	if _, err := e.cl.Update(ctx, "dr", mirrorapi.MirrorSpec{Source: mirrorapi.Source{BootstrapServers: src}}); err != nil {
		t.Fatal(err)
	}

	// Delete: refused while the mirror has topics, then forced.
	status, b := e.call(t, token, "DELETE", "/v1/mirrors/dr", "")
	if status != 409 || !strings.Contains(string(b), mirrorapi.CodeMirrorHasTopics) {
		t.Fatalf("DELETE without force: %d %s", status, b)
	}
	checkResponse(t, d, "DELETE", "/v1/mirrors/{name}", status, b)
	check("DELETE", "/v1/mirrors/{name}", "/v1/mirrors/dr?force=true", "", 204)
	if ms := e.co.Describe(); len(ms) != 0 {
		t.Errorf("describe after delete: %+v", ms)
	}
	if specs := e.co.Mirrors(); len(specs) != 0 {
		t.Errorf("state after delete: %+v", specs)
	}
	if _, err := e.cl.Mirror(ctx, "dr"); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		t.Errorf("GET after delete: %v", err)
	}
	// The destination topics and their data stay.
	ends, err := e.dstAdm.ListEndOffsets(ctx, "orders", "logs")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("orders", 0); o.Offset != 7 {
		t.Errorf("destination orders/0 ends at %d after delete, want 7", o.Offset)
	}
	if o, _ := ends.Lookup("logs", 0); o.Offset != 3 {
		t.Errorf("destination logs/0 ends at %d after delete, want 3", o.Offset)
	}

	// The state topic holds none of the mirror's records, and the name
	// can be created again.
	for k := range stateKeys(t, e) {
		if k == "mirror/dr" || strings.Contains(k, "/dr/") {
			t.Errorf("state topic still holds %s after delete", k)
		}
	}
	check("POST", "/v1/mirrors", "/v1/mirrors", `{"name":"dr","source":{"bootstrap_servers":["`+src[0]+`"]}}`, 201)
	check("DELETE", "/v1/mirrors/{name}", "/v1/mirrors/dr", "", 204)
}

// stateKeys reads the state topic and returns its live keys.
func stateKeys(t *testing.T, e *env) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := e.dstAdm.ListEndOffsets(ctx, "__kmirror_state")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("__kmirror_state", 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"__kmirror_state": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := map[string]bool{}
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			keys[string(r.Key)] = r.Value != nil
			next = r.Offset + 1
		})
	}
	for k, live := range keys {
		if !live {
			delete(keys, k)
		}
	}
	return keys
}

// TestAuth: every route but /healthz and /readyz needs one of the tokens,
// compared exactly; a 401 does not say what the token is.
func TestAuth(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	if _, err := e.cl.Create(context.Background(), mirrorapi.MirrorSpec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: e.src.Bootstrap()}, Topics: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot(t)
	paths := map[string]string{
		"GET /v1/openapi.json":                   "/v1/openapi.json",
		"GET /v1/agent":                          "/v1/agent",
		"GET /v1/mirrors":                        "/v1/mirrors",
		"POST /v1/mirrors":                       "/v1/mirrors",
		"GET /v1/mirrors/{name}":                 "/v1/mirrors/dr",
		"PUT /v1/mirrors/{name}":                 "/v1/mirrors/dr",
		"DELETE /v1/mirrors/{name}":              "/v1/mirrors/dr?force=true",
		"POST /v1/mirrors/{name}/topics":         "/v1/mirrors/dr/topics",
		"GET /v1/mirrors/{name}/offsets":         "/v1/mirrors/dr/offsets",
		"POST /v1/mirrors/{name}/topics/pause":   "/v1/mirrors/dr/topics/pause",
		"POST /v1/mirrors/{name}/topics/resume":  "/v1/mirrors/dr/topics/resume",
		"POST /v1/mirrors/{name}/topics/stop":    "/v1/mirrors/dr/topics/stop",
		"POST /v1/mirrors/{name}/topics/recover": "/v1/mirrors/dr/topics/recover",
		"GET /v1/mirrors/{name}/throttle":        "/v1/mirrors/dr/throttle",
		"PUT /v1/mirrors/{name}/throttle":        "/v1/mirrors/dr/throttle",
		"DELETE /v1/mirrors/{name}/throttle":     "/v1/mirrors/dr/throttle",
	}
	bodies := map[string]string{
		"POST /v1/mirrors":                       `{"name":"x","source":{"bootstrap_servers":["h:1"]}}`,
		"PUT /v1/mirrors/{name}":                 `{"topics":["orders","events"]}`,
		"POST /v1/mirrors/{name}/topics":         `{"topics":["events"]}`,
		"POST /v1/mirrors/{name}/topics/pause":   `{"topics":["orders"]}`,
		"POST /v1/mirrors/{name}/topics/resume":  `{"topics":["orders"]}`,
		"POST /v1/mirrors/{name}/topics/stop":    `{"topics":["orders"],"mode":"failover"}`,
		"POST /v1/mirrors/{name}/topics/recover": `{"topics":["orders"]}`,
		"PUT /v1/mirrors/{name}/throttle":        `{"rate_bytes_per_second":1000}`,
	}
	for _, r := range api.Routes() {
		method, pattern, _ := strings.Cut(r, " ")
		if pattern == "/healthz" || pattern == "/readyz" {
			if status, b := e.call(t, "", method, pattern, ""); status != 200 {
				t.Errorf("%s without a token: %d %s", r, status, b)
			}
			continue
		}
		path, ok := paths[r]
		if !ok {
			t.Fatalf("no test path for route %s", r)
		}
		for _, tok := range []string{"", "wrong", token + "x", strings.ToUpper(token), "old-token " + token} {
			status, b := e.call(t, tok, method, path, bodies[r])
			var er mirrorapi.Error
			if status != 401 || json.Unmarshal(b, &er) != nil || er.Code != mirrorapi.CodeUnauthorized || er.Message == "" {
				t.Errorf("%s with token %q: %d %s, want 401 UNAUTHORIZED", r, tok, status, b)
			}
			if strings.Contains(string(b), token) || strings.Contains(string(b), "old-token") {
				t.Errorf("%s: the 401 reveals a token: %s", r, b)
			}
			checkResponse(t, d, method, pattern, status, b)
		}
	}
	// Another scheme, and the token in a query, do not count.
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/mirrors?token="+token, nil)
	req.SetBasicAuth("kmirror", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("basic auth: %d %v", resp.StatusCode, resp.Header)
	}
	// An unknown route answers 401 too, not 404: nothing is revealed.
	if status, _ := e.call(t, "", "GET", "/v1/secret", ""); status != 401 {
		t.Errorf("unknown route without a token: %d", status)
	}
	if after := e.snapshot(t); after != before {
		t.Errorf("unauthorized requests changed the mirrors:\nbefore %s\nafter  %s", before, after)
	}
	// Both tokens of the file work (rotation).
	if status, b := e.call(t, "old-token", "GET", "/v1/mirrors/dr", ""); status != 200 {
		t.Errorf("the other token: %d %s", status, b)
	}
}

// TestBadInput: each refused request answers its status and code with a
// message naming the field, and changes nothing.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	ctx := context.Background()
	src := e.src.Bootstrap()
	for _, s := range []mirrorapi.MirrorSpec{
		{Name: "dr", Source: mirrorapi.Source{BootstrapServers: src}, Topics: []string{"orders", "logs"}},
		{Name: "other", Source: mirrorapi.Source{BootstrapServers: src}, Topics: []string{"events"}},
	} {
		if _, err := e.cl.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// dr/logs is stopped (failed over): the transitions out of STOPPED are
	// refused. Every partition settles first, so that a refused request
	// leaving a state as it was can be told from one changing it.
	e.waitStates(t, map[string]mirrorapi.State{"dr/logs/0": mirrorapi.StateMirroring})
	if err := e.cl.StopTopics(ctx, "dr", []string{"logs"}, mirrorapi.StopModeFailover); err != nil {
		t.Fatal(err)
	}
	e.waitStates(t, map[string]mirrorapi.State{"dr/orders/0": mirrorapi.StateMirroring, "dr/orders/1": mirrorapi.StateMirroring,
		"dr/logs/0": mirrorapi.StateStopped, "other/events/0": mirrorapi.StateMirroring})
	b0 := `"source":{"bootstrap_servers":["` + src[0] + `"]}`
	cases := []struct {
		name, method, pattern, path, body string
		status                            int
		code, field                       string
	}{
		{"unknown mirror get", "GET", "/v1/mirrors/{name}", "/v1/mirrors/nope", "", 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"unknown mirror put", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/nope", `{"topics":["x"]}`, 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"unknown mirror delete", "DELETE", "/v1/mirrors/{name}", "/v1/mirrors/nope?force=true", "", 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"unknown mirror add", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/nope/topics", `{"topics":["audit"]}`, 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"unknown mirror offsets", "GET", "/v1/mirrors/{name}/offsets", "/v1/mirrors/nope/offsets", "", 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"unknown topic offsets", "GET", "/v1/mirrors/{name}/offsets", "/v1/mirrors/dr/offsets?topic=nope", "", 404, mirrorapi.CodeUnknownTopic, "topic"},
		{"bad name", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"has space",` + b0 + `}`, 400, mirrorapi.CodeInvalidConfig, "name"},
		{"empty name", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"",` + b0 + `}`, 400, mirrorapi.CodeInvalidConfig, "name"},
		{"long name", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"` + strings.Repeat("n", 201) + `",` + b0 + `}`, 400, mirrorapi.CodeInvalidConfig, "name"},
		{"no source", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x"}`, 400, mirrorapi.CodeInvalidConfig, "source.bootstrap_servers"},
		{"bad bootstrap", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x","source":{"bootstrap_servers":["nohostport"]}}`, 400, mirrorapi.CodeInvalidConfig, "source.bootstrap_servers"},
		{"bootstrap not a list", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x","source":{"bootstrap_servers":"h:1"}}`, 400, mirrorapi.CodeInvalidRequest, "source.bootstrap_servers"},
		{"name a number", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":7,` + b0 + `}`, 400, mirrorapi.CodeInvalidRequest, "name"},
		{"topics a string", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":"audit"}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"topic a number", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":[1]}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"unknown field", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"tpoics":["audit"]}`, 400, mirrorapi.CodeInvalidRequest, "tpoics"},
		{"unknown nested field", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x","source":{"bootstrap":"h:1"}}`, 400, mirrorapi.CodeInvalidRequest, "bootstrap"},
		{"duplicate topic", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":["audit","audit"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"internal topic", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":["__consumer_offsets"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"invalid topic name", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":["a b"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"bad group regex", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"groups_include":["app-("]}`, 400, mirrorapi.CodeInvalidConfig, "groups_include"},
		{"bad group exclude", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"groups_exclude":["*"]}`, 400, mirrorapi.CodeInvalidConfig, "groups_exclude"},
		{"bad ACL rule", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"acl_include":["TOPIC;orders;FLY"]}`, 400, mirrorapi.CodeInvalidConfig, "acl_include"},
		{"refresh interval too short", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"metadata_refresh_interval_ms":5}`, 400, mirrorapi.CodeInvalidConfig, "metadata_refresh_interval_ms"},
		{"update with a bad ACL rule", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"acl_include":["TABLE"]}`, 400, mirrorapi.CodeInvalidConfig, "acl_include"},
		{"topic of another mirror", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":["events"]}`, 409, mirrorapi.CodeTopicAlreadyMirrored, "topics"},
		{"empty body", "POST", "/v1/mirrors", "/v1/mirrors", ``, 400, mirrorapi.CodeInvalidRequest, "body"},
		{"malformed JSON", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":`, 400, mirrorapi.CodeInvalidRequest, "body"},
		{"syntax error", "POST", "/v1/mirrors", "/v1/mirrors", `{"name" "x"}`, 400, mirrorapi.CodeInvalidRequest, "body"},
		{"array body", "POST", "/v1/mirrors", "/v1/mirrors", `[]`, 400, mirrorapi.CodeInvalidRequest, "body"},
		{"two objects", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `} {}`, 400, mirrorapi.CodeInvalidRequest, "body"},
		{"huge body", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, 413, mirrorapi.CodeInvalidRequest, "body"},
		{"create twice", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"dr",` + b0 + `}`, 409, mirrorapi.CodeMirrorAlreadyExists, "name"},
		{"delete with topics", "DELETE", "/v1/mirrors/{name}", "/v1/mirrors/dr", "", 409, mirrorapi.CodeMirrorHasTopics, "force"},
		{"bad force", "DELETE", "/v1/mirrors/{name}", "/v1/mirrors/dr?force=maybe", "", 400, mirrorapi.CodeInvalidRequest, "force"},
		{"add no topics", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":[]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"add topic already there", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":["orders"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"add topic of another mirror", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":["events"]}`, 409, mirrorapi.CodeTopicAlreadyMirrored, "topics"},
		{"add internal topic", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":["audit","__transaction_state"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"add unknown field", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topic":["audit"]}`, 400, mirrorapi.CodeInvalidRequest, "topic"},
		{"invalid topic regex", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topic_regex":["orders(["]}`, 400, mirrorapi.CodeInvalidConfig, "topic_regex"},
		{"add invalid topic regex", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topic_regex":["a**"]}`, 400, mirrorapi.CodeInvalidConfig, "topic_regex"},
		{"add empty topic regex", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topic_regex":[""]}`, 400, mirrorapi.CodeInvalidConfig, "topic_regex"},
		{"add recreate without failback", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":["audit"],"recreate":true}`, 400, mirrorapi.CodeInvalidConfig, "recreate"},
		{"add failback by regex", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topic_regex":["a.*"],"failback":true}`, 400, mirrorapi.CodeInvalidConfig, "topic_regex"},
		{"failback without a stopped mirror", "POST", "/v1/mirrors/{name}/topics", "/v1/mirrors/dr/topics", `{"topics":["audit"],"failback":true}`, 409, mirrorapi.CodeFailbackRefused, "failback"},
		{"pause with recreate", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":["orders"],"recreate":true}`, 400, mirrorapi.CodeInvalidConfig, "recreate"},
		{"update removes a topic", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"topics":["audit"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"update renames", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"name":"other"}`, 400, mirrorapi.CodeInvalidRequest, "name"},
		{"update bad bootstrap", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"source":{"bootstrap_servers":[":9092"]}}`, 400, mirrorapi.CodeInvalidConfig, "source.bootstrap_servers"},
		{"update empty bootstrap", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"source":{"bootstrap_servers":[]}}`, 400, mirrorapi.CodeInvalidConfig, "source.bootstrap_servers"},
		{"update wrong type", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"topic_config_exclude":true}`, 400, mirrorapi.CodeInvalidRequest, "topic_config_exclude"},
		{"update unknown field", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"topics":["orders","logs"],"force":true}`, 400, mirrorapi.CodeInvalidRequest, "force"},
		{"update takes a topic of another mirror", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"topics":["orders","logs","events"]}`, 409, mirrorapi.CodeTopicAlreadyMirrored, "topics"},
		{"update invalid topic", "PUT", "/v1/mirrors/{name}", "/v1/mirrors/dr", `{"topics":["orders","logs","a/b"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"name with a slash", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"a/b",` + b0 + `}`, 400, mirrorapi.CodeInvalidConfig, "name"},
		{"topic named dot", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":["."]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"topic name too long", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topics":["` + strings.Repeat("t", 250) + `"]}`, 400, mirrorapi.CodeInvalidConfig, "topics"},
		{"bootstrap without port", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x","source":{"bootstrap_servers":["h:"]}}`, 400, mirrorapi.CodeInvalidConfig, "source.bootstrap_servers"},
		{"exclude of numbers", "POST", "/v1/mirrors", "/v1/mirrors", `{"name":"x",` + b0 + `,"topic_config_exclude":[1]}`, 400, mirrorapi.CodeInvalidRequest, "topic_config_exclude"},
		{"offsets of another mirror's topic", "GET", "/v1/mirrors/{name}/offsets", "/v1/mirrors/dr/offsets?topic=events", "", 404, mirrorapi.CodeUnknownTopic, "topic"},

		// Lifecycle routes: pause, resume, stop, recover.
		{"pause unknown mirror", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/nope/topics/pause", `{"topics":["orders"]}`, 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"resume unknown mirror", "POST", "/v1/mirrors/{name}/topics/resume", "/v1/mirrors/nope/topics/resume", `{"topics":["orders"]}`, 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"stop unknown mirror", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/nope/topics/stop", `{"topics":["orders"],"mode":"failover"}`, 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"recover unknown mirror", "POST", "/v1/mirrors/{name}/topics/recover", "/v1/mirrors/nope/topics/recover", `{"topics":["orders"]}`, 404, mirrorapi.CodeMirrorNotFound, "name"},
		{"pause unknown topic", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":["nope"]}`, 404, mirrorapi.CodeUnknownTopic, "topics"},
		{"stop another mirror's topic", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/dr/topics/stop", `{"topics":["events"],"mode":"failover"}`, 404, mirrorapi.CodeUnknownTopic, "topics"},
		{"recover unknown topic", "POST", "/v1/mirrors/{name}/topics/recover", "/v1/mirrors/dr/topics/recover", `{"topics":["nope"]}`, 404, mirrorapi.CodeUnknownTopic, "topics"},
		{"pause no topics", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":[]}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"resume without topics", "POST", "/v1/mirrors/{name}/topics/resume", "/v1/mirrors/dr/topics/resume", `{}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"pause empty topic name", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":[""]}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"pause with a mode", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":["orders"],"mode":"failover"}`, 400, mirrorapi.CodeInvalidRequest, "mode"},
		{"recover topics a string", "POST", "/v1/mirrors/{name}/topics/recover", "/v1/mirrors/dr/topics/recover", `{"topics":"orders"}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"stop without mode", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/dr/topics/stop", `{"topics":["orders"]}`, 400, mirrorapi.CodeInvalidRequest, "mode"},
		{"stop unknown mode", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/dr/topics/stop", `{"topics":["orders"],"mode":"now"}`, 400, mirrorapi.CodeInvalidRequest, "mode"},
		{"stop mode a number", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/dr/topics/stop", `{"topics":["orders"],"mode":1}`, 400, mirrorapi.CodeInvalidRequest, "mode"},
		{"stop without topics", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/dr/topics/stop", `{"mode":"promote"}`, 400, mirrorapi.CodeInvalidRequest, "topics"},
		{"stop empty body", "POST", "/v1/mirrors/{name}/topics/stop", "/v1/mirrors/dr/topics/stop", ``, 400, mirrorapi.CodeInvalidRequest, "body"},
		{"recover a mirroring topic", "POST", "/v1/mirrors/{name}/topics/recover", "/v1/mirrors/dr/topics/recover", `{"topics":["orders"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic orders is MIRRORING"},
		{"resume a stopped topic", "POST", "/v1/mirrors/{name}/topics/resume", "/v1/mirrors/dr/topics/resume", `{"topics":["logs"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic logs is STOPPED"},
		{"pause a stopped topic", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":["logs"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic logs is STOPPED"},
		{"recover a stopped topic", "POST", "/v1/mirrors/{name}/topics/recover", "/v1/mirrors/dr/topics/recover", `{"topics":["logs"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic logs is STOPPED"},
		{"pause two topics, one stopped", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":["orders","logs"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic logs is STOPPED"},
		{"pause two topics, one unknown", "POST", "/v1/mirrors/{name}/topics/pause", "/v1/mirrors/dr/topics/pause", `{"topics":["orders","nope"]}`, 404, mirrorapi.CodeUnknownTopic, "topics"},
	}
	before, statesBefore := e.snapshot(t), e.states()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, b := e.call(t, token, c.method, c.path, c.body)
			var er mirrorapi.Error
			if err := json.Unmarshal(b, &er); err != nil {
				t.Fatalf("%d, not a JSON error: %v: %s", status, err, b)
			}
			t.Logf("%d %s: %s", status, er.Code, er.Message)
			if status != c.status || er.Code != c.code {
				t.Errorf("%d %s, want %d %s: %s", status, er.Code, c.status, c.code, er.Message)
			}
			if !strings.Contains(er.Message, c.field) {
				t.Errorf("message %q does not name %s", er.Message, c.field)
			}
			checkResponse(t, d, c.method, c.pattern, status, b)
			if after := e.snapshot(t); after != before {
				t.Errorf("the refused request changed the mirrors:\nbefore %s\nafter  %s", before, after)
			}
			if after := e.states(); after != statesBefore {
				t.Errorf("the refused request changed partition states:\nbefore %s\nafter  %s", statesBefore, after)
			}
		})
	}
	// A refused operation must not have started anything that shows later.
	time.Sleep(300 * time.Millisecond)
	if after := e.states(); after != statesBefore {
		t.Errorf("partition states changed after the refused requests:\nbefore %s\nafter  %s", statesBefore, after)
	}
	if len(cases) < 30 {
		t.Errorf("%d bad inputs, want at least 30", len(cases))
	}
	if status, b := e.call(t, token, "GET", "/v1/nope", ""); status != 404 || !strings.Contains(string(b), mirrorapi.CodeNotFound) {
		t.Errorf("unknown route: %d %s", status, b)
	}
}

// fakeBackend is a Backend that is not running yet.
type fakeBackend struct {
	api.Backend
	running atomic.Bool
}

func (f *fakeBackend) Running() bool                        { return f.running.Load() }
func (f *fakeBackend) Describe() []coordinator.MirrorStatus { return nil }

// TestReadiness: until the backend is set and runs, /healthz answers,
// /readyz and every other route answer 503.
func TestReadiness(t *testing.T) {
	s := api.New(api.Options{})
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(p string) (int, string) {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var er mirrorapi.Error
		_ = json.NewDecoder(resp.Body).Decode(&er)
		return resp.StatusCode, er.Code
	}
	check := func(p string, want int, code string) {
		t.Helper()
		if st, c := get(p); st != want || c != code {
			t.Errorf("GET %s: %d %s, want %d %s", p, st, c, want, code)
		}
	}
	check("/healthz", 200, "")
	check("/readyz", 503, "")
	check("/v1/mirrors", 503, mirrorapi.CodeNotReady)
	f := &fakeBackend{}
	s.SetBackend(f)
	check("/readyz", 503, "")
	check("/v1/mirrors", 503, mirrorapi.CodeNotReady)
	f.running.Store(true)
	check("/readyz", 200, "")
	check("/v1/mirrors", 200, "")

	// The client retries a GET through the 503s of a starting agent.
	f.running.Store(false)
	cl := mirrorapi.NewClient(srv.URL, "")
	cl.Backoff = 20 * time.Millisecond
	go func() {
		time.Sleep(100 * time.Millisecond)
		f.running.Store(true)
	}()
	if _, err := cl.Describe(context.Background()); err != nil {
		t.Errorf("describe through a starting agent: %v", err)
	}
}

// TestClientRetries: GET, PUT and DELETE are retried on 502/503/504 and
// on refused or reset connections; POST never is.
func TestClientRetries(t *testing.T) {
	var calls atomic.Int32
	failures := int32(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n <= failures {
			if n == 1 && r.Method != "POST" {
				// A reset connection.
				c, _, _ := w.(http.Hijacker).Hijack()
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				c.Close()
				return
			}
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("bad gateway"))
			return
		}
		switch r.Method {
		case "DELETE":
			w.WriteHeader(204)
		case "GET":
			_, _ = w.Write([]byte(`{"mirrors":[]}`))
		default:
			_, _ = w.Write([]byte(`{"name":"dr"}`))
		}
	}))
	defer srv.Close()
	cl := mirrorapi.NewClient(srv.URL, token)
	cl.Backoff = time.Millisecond
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"GET":    func() error { _, err := cl.Describe(ctx); return err },
		"PUT":    func() error { _, err := cl.Update(ctx, "dr", mirrorapi.MirrorSpec{}); return err },
		"DELETE": func() error { return cl.Delete(ctx, "dr", true) },
	} {
		calls.Store(0)
		if err := call(); err != nil || calls.Load() != 3 {
			t.Errorf("%s: %v after %d calls, want success after 3", name, err, calls.Load())
		}
	}
	calls.Store(0)
	_, err := cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr"})
	var ae *mirrorapi.APIError
	if !errors.As(err, &ae) || ae.Status != 502 || calls.Load() != 1 {
		t.Errorf("POST: %v after %d calls, want one 502", err, calls.Load())
	}
	// A 4xx is final.
	failures = 0
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"code":"MIRROR_NOT_FOUND","message":"name: no mirror named \"dr\""}`))
	})
	calls.Store(0)
	if _, err := cl.Mirror(ctx, "dr"); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) || calls.Load() != 1 {
		t.Errorf("404: %v after %d calls", err, calls.Load())
	}
	// Refused connections are retried, then reported.
	srv.Close()
	cl.Retries = 2
	start := time.Now()
	if _, err := cl.Describe(ctx); err == nil || time.Since(start) < 3*time.Millisecond {
		t.Errorf("closed agent: %v after %v", err, time.Since(start))
	}
}
