package api_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestOpenAPIReasonCodes: the document's ReasonCode enum is exactly the
// codes the agent reports, in package reason's order.
func TestOpenAPIReasonCodes(t *testing.T) {
	d := loadDoc(t)
	enum, _ := d.Components.Schemas["ReasonCode"]["enum"].([]any)
	var got []string
	for _, v := range enum {
		s, _ := v.(string)
		got = append(got, s)
	}
	var want []string
	for _, c := range reason.Known() {
		want = append(want, string(c))
	}
	if !slices.Equal(got, want) {
		t.Errorf("openapi.json ReasonCode enum\n\t%v\nwant reason.Known()\n\t%v", got, want)
	}
	for schema, field := range map[string]string{"Partition": "reason_code", "Topic": "error_code"} {
		props, _ := d.Components.Schemas[schema]["properties"].(map[string]any)
		f, _ := props[field].(map[string]any)
		if f["$ref"] != "#/components/schemas/ReasonCode" {
			t.Errorf("%s.%s is %v, want a $ref to ReasonCode", schema, field, f)
		}
	}
}

// TestReasonCodesReachTheAPI: a foreign write to a mirror topic fails the
// partition with reason_code FOREIGN_WRITE, and a topic missing on the
// source has error_code SOURCE_TOPIC_MISSING, in GET /v1/mirrors/{name}
// as the OpenAPI document describes it.
func TestReasonCodesReachTheAPI(t *testing.T) {
	e := newEnv(t)
	d := loadDoc(t)
	ctx := context.Background()
	if _, err := e.cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: e.src.Bootstrap()}, Topics: []string{"orders", "nope"}}); err != nil {
		t.Fatal(err)
	}
	e.produce(t, "orders", 0, 3)
	e.waitOffsets(t, "dr", map[string]int64{"orders/0": 2})

	// Something else writes to the mirror topic; the next mirrored batch
	// finds its offset taken.
	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	if err := dcl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("foreign")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce(t, "orders", 0, 2)

	deadline := time.Now().Add(30 * time.Second)
	for {
		status, b := e.call(t, token, "GET", "/v1/mirrors/dr", "")
		if status != 200 {
			t.Fatalf("GET /v1/mirrors/dr: %d %s", status, b)
		}
		var m mirrorapi.Mirror
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var p0 mirrorapi.Partition
		var nope mirrorapi.Topic
		for _, tp := range m.Topics {
			switch tp.Name {
			case "orders":
				for _, p := range tp.Partitions {
					if p.Partition == 0 {
						p0 = p
					}
				}
			case "nope":
				nope = tp
			}
		}
		if p0.State == mirrorapi.StateFailed && nope.ErrorCode != "" {
			checkResponse(t, d, "GET", "/v1/mirrors/{name}", status, b)
			if p0.ReasonCode != reason.ForeignWrite || p0.Reason == "" {
				t.Errorf("orders/0 FAILED with %s %q, want %s", p0.ReasonCode, p0.Reason, reason.ForeignWrite)
			}
			if nope.ErrorCode != reason.SourceTopicMissing || nope.Error == "" {
				t.Errorf("topic nope: error %s %q, want %s", nope.ErrorCode, nope.Error, reason.SourceTopicMissing)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders/0 is %s (%s %q), topic nope's error %s %q: want FAILED and a coded error\n%s",
				p0.State, p0.ReasonCode, p0.Reason, nope.ErrorCode, nope.Error, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
