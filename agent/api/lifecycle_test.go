package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestTopicLifecycle drives pause, resume, stop and recover through the API
// against a real coordinator: accepted operations reach their state, and
// refused ones answer with the code and message the OpenAPI document
// promises and leave every state as it was.
func TestTopicLifecycle(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	ctx := context.Background()
	call := func(path, body string, want int, code, msg string) {
		t.Helper()
		status, b := e.call(t, token, "POST", "/v1/mirrors/dr/topics/"+path, body)
		if status != want {
			t.Fatalf("POST %s %s: %d, want %d: %s", path, body, status, want, b)
		}
		checkResponse(t, d, "POST", "/v1/mirrors/{name}/topics/"+path, status, b)
		if code != "" {
			var er mirrorapi.Error
			if err := json.Unmarshal(b, &er); err != nil || er.Code != code || !strings.Contains(er.Message, msg) {
				t.Fatalf("POST %s %s: %s, want code %s and a message with %q", path, body, b, code, msg)
			}
		}
	}
	states := func(topic string) map[int32]mirrorapi.State {
		m, err := e.cl.Mirror(ctx, "dr")
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]mirrorapi.State{}
		for _, tp := range m.Topics {
			if tp.Name == topic {
				for _, p := range tp.Partitions {
					out[p.Partition] = p.State
				}
			}
		}
		return out
	}
	waitState := func(topic string, n int, want mirrorapi.State) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := states(topic)
			ok := len(got) == n
			for _, s := range got {
				ok = ok && s == want
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("topic %s: states %v, want %d partitions %s", topic, got, n, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	if _, err := e.cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: e.src.Bootstrap()}, Topics: []string{"orders", "events"}}); err != nil {
		t.Fatal(err)
	}
	e.produce(t, "orders", 0, 5)
	e.produce(t, "orders", 1, 3)
	e.produce(t, "events", 0, 4)
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 4, "orders/1": 2, "events/0": 3})

	// Refused requests.
	call("pause", `{"topics":[]}`, 400, mirrorapi.CodeInvalidRequest, "topics:")
	call("pause", `{}`, 400, mirrorapi.CodeInvalidRequest, "topics:")
	call("pause", `{"topics":["orders"],"mode":"failover"}`, 400, mirrorapi.CodeInvalidRequest, "mode")
	call("stop", `{"topics":["orders"]}`, 400, mirrorapi.CodeInvalidRequest, "mode:")
	call("stop", `{"topics":["orders"],"mode":"now"}`, 400, mirrorapi.CodeInvalidRequest, "mode:")
	call("pause", `{"topics":["nope"]}`, 404, mirrorapi.CodeUnknownTopic, `"nope"`)
	if status, b := e.call(t, token, "POST", "/v1/mirrors/nope/topics/pause", `{"topics":["orders"]}`); status != 404 || !strings.Contains(string(b), mirrorapi.CodeMirrorNotFound) {
		t.Fatalf("pause on an unknown mirror: %d %s", status, b)
	}
	call("recover", `{"topics":["orders"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic orders is MIRRORING: recover applies to FAILED partitions only")
	call("resume", `{"topics":["orders"]}`, 202, "", "") // already mirroring: nothing to do
	waitState("orders", 2, mirrorapi.StateMirroring)

	// Pause: nothing is mirrored while paused; resume catches up.
	call("pause", `{"topics":["orders"]}`, 202, "", "")
	waitState("orders", 2, mirrorapi.StatePaused)
	e.produce(t, "orders", 0, 5)
	time.Sleep(500 * time.Millisecond)
	if o := e.waitOffsets(t, "dr", map[string]int64{"orders/0": 4}); o.Mirror != "dr" {
		t.Fatal(o)
	}
	waitState("orders", 2, mirrorapi.StatePaused)
	call("pause", `{"topics":["orders"]}`, 202, "", "") // repeated
	call("recover", `{"topics":["orders"]}`, 409, mirrorapi.CodeInvalidStateTransition, "PAUSED")
	waitState("orders", 2, mirrorapi.StatePaused)
	call("resume", `{"topics":["orders"]}`, 202, "", "")
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 9, "orders/1": 2})
	waitState("orders", 2, mirrorapi.StateMirroring)

	// Stop (failover): STOPPED for good, and the destination is writable.
	if err := e.cl.StopTopics(ctx, "dr", []string{"events"}, mirrorapi.StopModeFailover); err != nil {
		t.Fatal(err)
	}
	waitState("events", 1, mirrorapi.StateStopped)
	o := e.waitOffsets(t, "dr", map[string]int64{"events/0": 3})
	_ = o
	for _, op := range []string{"resume", "pause", "recover"} {
		call(op, `{"topics":["events"]}`, 409, mirrorapi.CodeInvalidStateTransition,
			"topic events is STOPPED: a stopped topic is writable on the destination and cannot mirror again; to mirror it back, add it with failback to a mirror in the other direction (kmirror add --failback)")
	}
	call("stop", `{"topics":["events"],"mode":"promote"}`, 202, "", "") // already stopped
	// An operation on two topics where one refuses changes neither.
	call("pause", `{"topics":["orders","events"]}`, 409, mirrorapi.CodeInvalidStateTransition, "topic events is STOPPED")
	waitState("orders", 2, mirrorapi.StateMirroring)
	waitState("events", 1, mirrorapi.StateStopped)
	e.produce(t, "events", 0, 2)
	time.Sleep(300 * time.Millisecond)
	e.waitOffsets(t, "dr", map[string]int64{"events/0": 3})

	// The client methods.
	if err := e.cl.PauseTopics(ctx, "dr", []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	waitState("orders", 2, mirrorapi.StatePaused)
	if err := e.cl.ResumeTopics(ctx, "dr", []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	waitState("orders", 2, mirrorapi.StateMirroring)
	if err := e.cl.RecoverTopics(ctx, "dr", []string{"orders"}); !mirrorapi.IsCode(err, mirrorapi.CodeInvalidStateTransition) {
		t.Fatalf("recover of a mirroring topic: %v", err)
	}
	if err := e.cl.StopTopics(ctx, "dr", []string{"orders"}, mirrorapi.StopModePromote); err != nil {
		t.Fatal(err)
	}
	waitState("orders", 2, mirrorapi.StateStopped)
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 9, "orders/1": 2})
}
