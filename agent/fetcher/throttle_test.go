package fetcher

import (
	"testing"
	"time"
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
