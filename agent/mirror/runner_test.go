package mirror

// The harness of the runner's tests that need brokers: a source and a
// destination embedded cluster (kfake, strict), the Config runners share on
// them, and runners started and stopped with the test.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/readonly"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// testCtx is a context that ends with the test, or after a minute.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testEnv is a source and a destination cluster, a client of each, and the
// Config an agent's runners share on them.
type testEnv struct {
	t        *testing.T
	src, dst *devcluster.Cluster
	srcCl    *kgo.Client
	dstAdm   *kadm.Client
	cfg      *Config
}

// newEnv starts a source and a destination cluster with the options given
// and the Config of an agent on them: the read-only check already run, a
// metadata refresh interval short enough for a test to wait on, and a
// registry that adds matched topics to the runner it is given.
func newEnv(t *testing.T, srcOpts, dstOpts []devcluster.Option) *testEnv {
	t.Helper()
	ctx := testCtx(t)
	e := &testEnv{
		t:   t,
		src: devclustertest.Start(t, append([]devcluster.Option{devcluster.Name("src")}, srcOpts...)...),
		dst: devclustertest.Start(t, append([]devcluster.Option{devcluster.Name("dst")}, dstOpts...)...),
	}
	e.srcCl = e.client(e.src)
	dstOpts2 := []kgo.Opt{kgo.SeedBrokers(e.dst.Bootstrap()...)}
	dcl, err := kgo.NewClient(writer.ClientOpts(dstOpts2)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dcl.Close)
	store, err := statestore.Open(ctx, dstOpts2, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.dstAdm = kadm.NewClient(dcl)
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Debug, Output: devclustertest.Writer(t)})
	ro := NewReadOnly(readonly.New(e.dstAdm, readonly.WithClient(dcl)), log)
	ro.Check(ctx)
	e.cfg = &Config{
		Store: store, Destination: dcl, DestinationOpts: dstOpts2, Admin: e.dstAdm,
		Writer: writer.New(dcl, leaders.New(dcl)), Budget: fetcher.NewBudget(64 << 20), ReadOnly: ro,
		SourceOpts: func(s mirrorspec.Spec) ([]kgo.Opt, error) {
			return []kgo.Opt{kgo.SeedBrokers(s.Source.BootstrapServers...)}, nil
		},
		RefreshInterval: 100 * time.Millisecond, StopTimeout: 10 * time.Second, PromoteTimeout: 20 * time.Second,
		SourceFence: NoSourceFence{}, Logger: log,
	}
	return e
}

// client is a client of c, closed with the test.
func (e *testEnv) client(c *devcluster.Cluster) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// record is a new mirror of topics from the source, with its producer id.
func (e *testEnv) record(name string, topics ...string) Record {
	e.t.Helper()
	pid, epoch, err := e.cfg.Writer.InitProducerID(testCtx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return Record{Spec: mirrorspec.Spec{Name: name, Source: mirrorspec.Source{BootstrapServers: e.src.Bootstrap()}, Topics: topics}, ProducerID: pid, Epoch: epoch}
}

// start runs a runner of rec until the end of the test.
func (e *testEnv) start(rec Record) *Runner {
	m := New(e.cfg, rec)
	ctx, cancel := context.WithCancel(context.Background())
	m.Start(ctx)
	e.t.Cleanup(func() {
		cancel()
		m.Wait()
	})
	return m
}

// produce writes n records to the source partition topic/p.
func (e *testEnv) produce(topic string, p int32, n int) {
	e.t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprint(i)), Value: []byte("v")}
		if err := e.srcCl.ProduceSync(testCtx(e.t), r).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// waitFor polls m's describe until cond holds, and returns it; it fails
// the test after 30 seconds with what describe said last.
func waitFor(t *testing.T, m *Runner, what string, cond func(mirrorapi.Mirror) bool) mirrorapi.Mirror {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := m.Status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: describe: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// partitionsOfTopic are topic's partitions in st.
func partitionsOfTopic(st mirrorapi.Mirror, topic string) []mirrorapi.Partition {
	for _, ts := range st.Topics {
		if ts.Name == topic {
			return ts.Partitions
		}
	}
	return nil
}

// allIn says whether topic has n partitions in st, each in state with its
// destination end at ends[partition].
func allIn(st mirrorapi.Mirror, topic string, state mirrorapi.State, ends ...int64) bool {
	ps := partitionsOfTopic(st, topic)
	if len(ps) != len(ends) {
		return false
	}
	for _, p := range ps {
		if p.State != state || p.DestinationOffset != ends[p.Partition] {
			return false
		}
	}
	return true
}
