package lease

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// TestFold: the records of the lease agents fold to the holder those agents
// agreed on: the first claim of the next epoch wins, renewals and releases
// count only from the current holder's process.
func TestFold(t *testing.T) {
	claim := func(epoch int64, agent, instance string) record {
		return record{Kind: "claim", Agent: agent, Instance: instance, Epoch: epoch, DurationMs: 15000}
	}
	renew := func(epoch int64, agent, instance string) record {
		return record{Kind: "renew", Agent: agent, Instance: instance, Epoch: epoch, DurationMs: 20000}
	}
	release := func(epoch int64, agent, instance string) record {
		return record{Kind: "release", Agent: agent, Instance: instance, Epoch: epoch}
	}
	for _, tc := range []struct {
		name     string
		records  []record
		holder   string
		epoch    int64
		duration time.Duration
		released bool
	}{
		{name: "never claimed"},
		{name: "claimed", records: []record{claim(1, "a", "i1")}, holder: "a", epoch: 1, duration: 15 * time.Second},
		{name: "the first claim of an epoch wins", records: []record{claim(1, "a", "i1"), claim(1, "b", "i2")}, holder: "a", epoch: 1, duration: 15 * time.Second},
		{name: "a claim skipping an epoch is stale", records: []record{claim(1, "a", "i1"), claim(3, "b", "i2")}, holder: "a", epoch: 1, duration: 15 * time.Second},
		{name: "takeover", records: []record{claim(1, "a", "i1"), claim(2, "b", "i2")}, holder: "b", epoch: 2, duration: 15 * time.Second},
		{name: "a renewal takes the holder's duration", records: []record{claim(1, "a", "i1"), renew(1, "a", "i1")}, holder: "a", epoch: 1, duration: 20 * time.Second},
		{name: "a renewal of another process does not count", records: []record{claim(1, "a", "i1"), renew(1, "a", "i9")}, holder: "a", epoch: 1, duration: 15 * time.Second},
		{name: "released", records: []record{claim(1, "a", "i1"), release(1, "a", "i1")}, epoch: 1, duration: 15 * time.Second, released: true},
		{name: "a release of an old epoch does not count", records: []record{claim(1, "a", "i1"), claim(2, "b", "i2"), release(1, "a", "i1")}, holder: "b", epoch: 2, duration: 15 * time.Second},
		{name: "claimed after a release", records: []record{claim(1, "a", "i1"), release(1, "a", "i1"), claim(2, "b", "i2")}, holder: "b", epoch: 2, duration: 15 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v view
			for _, r := range tc.records {
				v.apply(r, time.Now())
			}
			if v.holder != tc.holder || v.epoch != tc.epoch || v.duration != tc.duration || v.released != tc.released {
				t.Errorf("holder %q epoch %d duration %v released %v; want %q %d %v %v", v.holder, v.epoch, v.duration, v.released, tc.holder, tc.epoch, tc.duration, tc.released)
			}
		})
	}
}

// TestReader reads lease records from a state topic as the lease agents
// wrote them: Open returns having read those already there, and the reader
// follows those written later, skipping records it cannot read and the
// state topic's other records.
func TestReader(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "__kmirror_state"
	opts := []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}
	if err := statestore.EnsureTopic(ctx, opts, topic); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	write := func(key string, value []byte) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	imitate := func(kind string) {
		t.Helper()
		if err := Imitate(ctx, opts, topic, kind, "old-agent", 1, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	imitate(KindClaim)
	write("mirror/dr", []byte(`{"name":"dr"}`))
	write(keyPrefix+"renew", []byte("not json"))

	r, err := Open(ctx, Config{Destination: opts, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st := r.Status(); st.Holder != "old-agent" || st.Epoch != 1 || st.Duration != 15*time.Second || st.SinceRenewal > 10*time.Second {
		t.Fatalf("after Open: %+v; want old-agent holding epoch 1 (15s), renewed just now", st)
	}
	changed := r.Changed()
	imitate(KindRelease)
	for r.Status().Holder != "" {
		select {
		case <-ctx.Done():
			t.Fatalf("the release was not read: %+v", r.Status())
		case <-changed:
			changed = r.Changed()
		}
	}
	if st := r.Status(); st.Epoch != 1 {
		t.Errorf("after the release: %+v; want epoch 1, no holder", st)
	}
}
