package fetcher

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/leaders"
)

func TestThrottleBucket(t *testing.T) {
	var none *Throttle
	if ok, _, _ := none.ready(); !ok || none.Applies(TP{"a", 0}) || none.Rate() != 0 {
		t.Fatal("a nil throttle throttles")
	}
	none.take(100) // no panic

	th := NewThrottle()
	if th.Applies(TP{"a", 0}) {
		t.Fatal("a throttle that was never set applies")
	}
	th.Set(1<<20, false, []TP{{"a", 0}})
	if !th.Applies(TP{"a", 0}) || th.Applies(TP{"a", 1}) || th.Applies(TP{"b", 0}) {
		t.Fatal("Applies does not follow the listed partitions")
	}
	if ok, _, _ := th.ready(); !ok {
		t.Fatal("a new throttle starts with an empty bucket")
	}
	if c := th.Chunk(); c != 1<<20/10 {
		t.Errorf("chunk %d, want a tenth of a second at the ceiling", c)
	}
	// Half a second of debt beyond the burst.
	th.take(int64(th.Chunk()) + 1<<19)
	ok, wait, changed := th.ready()
	if ok || wait < 450*time.Millisecond || wait > 520*time.Millisecond {
		t.Fatalf("in debt of half a second: ready %v, wait %v", ok, wait)
	}
	// Set wakes waiters, and a raised ceiling keeps the debt, a removed
	// one forgets it.
	th.Set(2<<20, true, nil)
	select {
	case <-changed:
	default:
		t.Fatal("Set did not close the changed channel")
	}
	if !th.Applies(TP{"z", 9}) {
		t.Fatal("all does not apply to every partition")
	}
	if ok, wait, _ := th.ready(); ok || wait > 270*time.Millisecond {
		t.Fatalf("at twice the rate: ready %v, wait %v", ok, wait)
	}
	time.Sleep(300 * time.Millisecond)
	if ok, _, _ := th.ready(); !ok {
		t.Fatal("the debt was not paid back at the rate")
	}
	if d := th.ThrottledTime(); d < 200*time.Millisecond || d > 400*time.Millisecond {
		t.Errorf("throttled time %v, want the quarter of a second of debt", d)
	}
	th.take(10 << 20)
	th.Set(0, false, nil)
	if ok, _, _ := th.ready(); !ok || th.Applies(TP{"a", 0}) || th.Rate() != 0 {
		t.Fatal("a removed throttle still holds back")
	}
}

// TestDeadFetchers: a source broker whose fetches fail counts as one dead
// fetcher while they fail, however often its loop restarts, and no longer
// once a fetch there succeeds again.
func TestDeadFetchers(t *testing.T) {
	c, cl := testCluster(t, 1, "t")
	var failing atomic.Bool
	failing.Store(true)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if failing.Load() {
			return nil, errors.New("injected fetch failure"), true
		}
		return nil, nil, false
	})
	counters := &Counters{}
	f := New(cl, leaders.New(cl), Options{Counters: counters, MaxWait: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	f.Assign(TP{"t", 0}, 0)

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: requests %d, errors %d, dead fetchers %d", what, counters.Requests.Load(), counters.Errors.Load(), counters.Failing.Load())
			}
		}
	}
	waitFor("three failed fetches", func() bool { return counters.Errors.Load() >= 3 })
	// Sampled over retries: never more than the one broker, and one
	// while its fetches fail.
	for range 50 {
		if n := counters.Failing.Load(); n != 1 {
			t.Fatalf("dead fetchers %d while the only broker's fetches fail", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	failing.Store(false)
	errs := counters.Errors.Load()
	waitFor("a good fetch", func() bool { return counters.Failing.Load() == 0 && counters.Requests.Load() > errs+2 })
	cancel()
	<-done
	if n := counters.Failing.Load(); n != 0 {
		t.Errorf("dead fetchers %d after Run returned", n)
	}
}
