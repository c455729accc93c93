package statestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// Two agents' stores on one state topic: each learns what the other writes
// (Follow, Changed, Sync), and a store never goes back to an older value of
// a key it wrote since. On each engine.
func TestFollow(t *testing.T) {
	for _, engine := range []devcluster.EngineKind{devcluster.Embedded, devcluster.Kafka} {
		t.Run(string(engine), func(t *testing.T) { testFollow(t, engine) })
	}
}

func testFollow(t *testing.T, engine devcluster.EngineKind) {
	c := devclustertest.Start(t, devcluster.Engine(engine), devcluster.Name("state-"+string(engine)))
	opts := []kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() *Store {
		s, err := Open(ctx, opts, "state")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a := open()
	if err := a.Put(ctx, "mirror/one", []byte("1")); err != nil {
		t.Fatal(err)
	}
	b := open() // reads mirror/one at Open
	if v, _ := b.Get("mirror/one"); string(v) != "1" {
		t.Fatalf("b opened with mirror/one = %q, want 1", v)
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, s := range []*Store{a, b} {
		go func() { _ = s.Follow(fctx) }()
	}

	changed := b.Changed()
	if err := a.Put(ctx, "mirror/two", []byte("2")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("b's Changed was not closed after a wrote mirror/two")
	}
	if v, ok := b.Get("mirror/two"); !ok || string(v) != "2" {
		t.Fatalf("b has mirror/two = %q, %v after Changed, want 2", v, ok)
	}
	if got, want := b.Keys("mirror/"), []string{"mirror/one", "mirror/two"}; !slices.Equal(got, want) {
		t.Fatalf("b's mirror keys %v, want %v", got, want)
	}

	// a writes one key many times while following its own writes: each
	// Get returns what it wrote last, never an older value read back.
	for i := range 50 {
		want := []byte{byte('a' + i%26)}
		if err := a.Put(ctx, "partition/x", want); err != nil {
			t.Fatal(err)
		}
		if v, _ := a.Get("partition/x"); string(v) != string(want) {
			t.Fatalf("a's partition/x = %q right after writing %q", v, want)
		}
	}
	// b deletes it; after Sync both agree.
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := b.Get("partition/x"); string(v) != string([]byte{byte('a' + 49%26)}) {
		t.Fatalf("b's partition/x = %q after Sync, want a's last write", v)
	}
	if err := b.Put(ctx, "partition/x", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Get("partition/x"); ok {
		t.Fatal("a still has partition/x after b deleted it and a synced")
	}
	// Sync without a follower waits for it, and says what it waited for.
	lone := open()
	if err := a.Put(ctx, "mirror/three", []byte("3")); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if err := lone.Sync(sctx); err == nil {
		t.Fatal("Sync of a store that does not follow returned before reading a's write")
	} else {
		t.Log(err)
	}
}
