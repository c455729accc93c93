package api_test

// The test environment: two dev clusters, a coordinator running against the
// destination, and the API in an httptest server in front of it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

const token = "s3cret-token"

type env struct {
	src, dst *devcluster.Cluster
	co       *coordinator.Coordinator
	srv      *httptest.Server
	cl       *mirrorapi.Client
	dstAdm   *kadm.Client
	srcCl    *kgo.Client
}

// newEnv starts the clusters, the coordinator and the API. The source has
// topics orders (2 partitions), events, audit and logs (1 each); the source
// cluster has two brokers, so its bootstrap can change.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		src: devclustertest.Start(t, devcluster.Name("src"), devcluster.Brokers(2),
			devcluster.KfakeOptions(kfake.SeedTopics(2, "orders"), kfake.SeedTopics(1, "events", "audit", "logs"))),
		dst: devclustertest.Start(t, devcluster.Name("dst")),
	}
	e.co = coordinatortest.Start(t, coordinator.Config{
		Destination:     []kgo.Opt{kgo.SeedBrokers(e.dst.Bootstrap()...)},
		RefreshInterval: 200 * time.Millisecond,
	}).Coordinator
	e.srv = httptest.NewServer(api.Handler(e.co, api.Options{Tokens: []string{"old-token", token}}))
	t.Cleanup(e.srv.Close)
	e.cl = mirrorapi.NewClient(e.srv.URL, token)
	e.cl.Backoff = 10 * time.Millisecond
	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.dst.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dcl.Close)
	e.dstAdm = kadm.NewClient(dcl)
	if e.srcCl, err = kgo.NewClient(kgo.SeedBrokers(e.src.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srcCl.Close)
	return e
}

// produce writes n records to topic's partition on the source.
func (e *env) produce(t *testing.T, topic string, partition int32, n int) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := e.srcCl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// call makes one request with tok (none when empty) and returns the status
// and body.
func (e *env) call(t *testing.T, tok, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// waitOffsets polls the offsets route until want holds (topic/partition →
// last mirrored offset), with a deadline.
func (e *env) waitOffsets(t *testing.T, mirror string, want map[string]int64) mirrorapi.OffsetsResponse {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := e.cl.Offsets(context.Background(), mirror, "")
		got := map[string]int64{}
		if err == nil {
			for _, tp := range out.Topics {
				for _, p := range tp.Partitions {
					got[fmt.Sprintf("%s/%d", tp.Name, p.Partition)] = p.LastMirroredOffset
				}
			}
		}
		ok := err == nil
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			return out
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(e.co.Describe(), "", "  ")
			t.Fatalf("offsets of %s: got %v (err %v), want %v\n%s", mirror, got, err, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshot is what a refused request must leave unchanged: the persisted
// specs and each mirror's name, source and topics as describe shows them.
func (e *env) snapshot(t *testing.T) string {
	t.Helper()
	type view struct {
		Name   string
		Source []string
		Topics []string
	}
	var vs []view
	for _, m := range e.co.Describe() {
		v := view{Name: m.Name, Source: m.Source.BootstrapServers}
		for _, tp := range m.Topics {
			v.Topics = append(v.Topics, tp.Name)
		}
		vs = append(vs, v)
	}
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(e.co.Mirrors())
	_ = json.NewEncoder(&b).Encode(vs)
	return b.String()
}

// states lists every partition's state and stop mode, MIRROR/TOPIC/PARTITION
// STATE MODE per line, in describe's order.
func (e *env) states() string {
	var b strings.Builder
	for _, m := range e.co.Describe() {
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				fmt.Fprintf(&b, "%s/%s/%d %s %s\n", m.Name, tp.Name, p.Partition, p.State, p.StopMode)
			}
		}
	}
	return b.String()
}

// waitStates waits until every MIRROR/TOPIC/PARTITION in want is in its
// state.
func (e *env) waitStates(t *testing.T, want map[string]mirrorapi.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]mirrorapi.State{}
		for _, m := range e.co.Describe() {
			for _, tp := range m.Topics {
				for _, p := range tp.Partitions {
					got[fmt.Sprintf("%s/%s/%d", m.Name, tp.Name, p.Partition)] = p.State
				}
			}
		}
		ok := true
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition states %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
