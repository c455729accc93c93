package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

const (
	// Short, for quick tests, and long enough that a renewal (a write and
	// its read-back) fits in the time a loaded machine may take.
	testDuration = time.Second
	testTimeout  = 300 * time.Millisecond
)

func openLease(t *testing.T, dst *devcluster.Cluster, id string) *Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Open(ctx, Config{
		Destination: []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)},
		Topic:       "__kmirror_state", AgentID: id, Duration: testDuration, RequestTimeout: testTimeout,
		Logger: hclog.New(&hclog.LoggerOptions{Name: id, Output: devclustertest.Writer(t), Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatalf("opening the lease of %s: %v", id, err)
	}
	t.Cleanup(l.Close)
	return l
}

// startHolder starts a destination on which agent-a holds the lease, and
// returns a context of 30s at most that ends with the test, the
// destination, and agent-a's lease and term.
func startHolder(t *testing.T) (context.Context, *devcluster.Cluster, *Lease, *Term) {
	t.Helper()
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	a := openLease(t, dst, "agent-a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ta, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, dst, a, ta
}

// writers samples both contenders' Check until stop and fails the test when
// both may write at the same moment.
func writers(t *testing.T, stop <-chan struct{}, terms func() []*Term) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var ok []int64
			for _, tm := range terms() {
				if tm != nil && tm.active.Load() && tm.Check() == nil {
					ok = append(ok, tm.Epoch())
				}
			}
			if len(ok) > 1 {
				t.Errorf("two agents may write at once: epochs %v", ok)
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	return &wg
}

// TestClaimRace starts several contenders at once against an empty state
// topic: exactly one wins epoch 1, every other sees it as the holder, and
// none of them holds a term.
func TestClaimRace(t *testing.T) {
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	const n = 4
	ls := make([]*Lease, n)
	for i := range ls {
		ls[i] = openLease(t, dst, fmt.Sprintf("agent-%d", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type won struct {
		i    int
		term *Term
	}
	wins := make(chan won, n)
	actx, stopAcquiring := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tm, err := l.Acquire(actx)
			if err == nil {
				wins <- won{i, tm}
			}
		}()
	}
	close(start)
	var first won
	select {
	case first = <-wins:
	case <-ctx.Done():
		t.Fatal("no contender acquired the lease")
	}
	if first.term.Epoch() != 1 {
		t.Errorf("the first term has epoch %d, want 1", first.term.Epoch())
	}
	// The others keep waiting while the winner renews: for three lease
	// durations nobody else may win.
	select {
	case w := <-wins:
		t.Fatalf("agent-%d acquired epoch %d while agent-%d holds the lease", w.i, w.term.Epoch(), first.i)
	case <-time.After(3 * testDuration):
	}
	if err := first.term.Check(); err != nil {
		t.Fatalf("the winner lost its lease while renewing: %v", err)
	}
	for i, l := range ls {
		st := l.Status()
		want := RoleStandby
		if i == first.i {
			want = RoleActive
		}
		if st.Holder != fmt.Sprintf("agent-%d", first.i) || st.Epoch != 1 || st.Role != want {
			t.Errorf("agent-%d sees holder %q epoch %d role %s; want agent-%d, 1, %s", i, st.Holder, st.Epoch, st.Role, first.i, want)
		}
	}
	stopAcquiring()
	wg.Wait()
}

// TestFrozenHolderSelfFences imitates a frozen holder (SIGSTOP): its
// renewals stop and it reads no lease record, so only its own clock can
// tell it that its lease ran out. It must stop writing before the standby
// takes over, the standby must wait the takeover time
// after its claim, and the old holder resumed must find its lease lost and
// stay fenced. Two agents are sampled throughout: never both may write.
func TestFrozenHolderSelfFences(t *testing.T) {
	ctx, dst, a, ta := startHolder(t)
	b := openLease(t, dst, "agent-b")
	var tb atomic.Pointer[Term]
	stop := make(chan struct{})
	wg := writers(t, stop, func() []*Term { return []*Term{ta, tb.Load()} })
	defer func() { close(stop); wg.Wait() }()

	bDone := make(chan error, 1)
	go func() {
		tm, err := b.Acquire(ctx)
		if err == nil {
			tb.Store(tm)
		}
		bDone <- err
	}()
	// A renews: B stays standby.
	time.Sleep(3 * testDuration)
	if tb.Load() != nil {
		t.Fatal("agent-b acquired the lease while agent-a renewed it")
	}
	// Freeze A's renewals.
	frozenAt := time.Now()
	ta.l.freeze.Store(true)
	if err := <-bDone; err != nil {
		t.Fatalf("agent-b did not take over: %v", err)
	}
	took := time.Since(frozenAt)
	// B needs at least A's duration without renewals before its claim,
	// then the duration and the request timeout after it.
	if minTook := 2*testDuration + testTimeout - testDuration/3; took < minTook {
		t.Errorf("agent-b took over %v after agent-a stopped renewing, sooner than the %v the protocol waits", took, minTook)
	}
	// A has not read B's claim (frozen): its own clock fenced it.
	if st := a.Status(); st.Holder != "agent-a" || st.Epoch != ta.Epoch() {
		t.Fatalf("the frozen agent-a read the lease records: holder %q epoch %d", st.Holder, st.Epoch)
	}
	if err := ta.Check(); !errors.Is(err, ErrNotActive) {
		t.Fatalf("agent-a may still write after agent-b took over: Check = %v", err)
	}
	select {
	case <-ta.Context().Done():
	default:
		t.Error("agent-a's term context did not end when it lost the lease")
	}
	if tb.Load().Epoch() != ta.Epoch()+1 {
		t.Errorf("agent-b holds epoch %d, want %d", tb.Load().Epoch(), ta.Epoch()+1)
	}
	// A resumes: its next renewal carries the old epoch and changes nothing.
	ta.l.freeze.Store(false)
	if err := a.write(ctx, record{Kind: "renew", Agent: "agent-a", Instance: a.instance, Epoch: ta.Epoch(), DurationMs: testDuration.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * testDuration)
	if err := ta.Check(); err == nil {
		t.Error("agent-a writes again after resuming")
	}
	if err := tb.Load().Check(); err != nil {
		t.Errorf("agent-b lost its lease to a stale renewal: %v", err)
	}
	if st := a.Status(); st.Role != RoleStandby || st.Holder != "agent-b" {
		t.Errorf("agent-a sees itself as %s with holder %q; want standby, agent-b", st.Role, st.Holder)
	}
	t.Logf("takeover %v after the holder froze (lease %v, request timeout %v)", took.Round(time.Millisecond), testDuration, testTimeout)
}

// TestReleaseHandsOverAtOnce: a holder that releases lets the standby write
// without the takeover wait.
func TestReleaseHandsOverAtOnce(t *testing.T) {
	ctx, dst, a, ta := startHolder(t)
	b := openLease(t, dst, "agent-b")
	got := make(chan *Term, 1)
	go func() {
		tm, err := b.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- tm
	}()
	time.Sleep(testDuration)
	released := time.Now()
	if err := ta.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ta.Check() == nil {
		t.Fatal("agent-a may write after releasing")
	}
	tb := <-got
	if took := time.Since(released); took >= testDuration {
		t.Errorf("agent-b took %v to take over a released lease; want less than the lease duration %v", took, testDuration)
	}
	if tb == nil || tb.Epoch() != 2 {
		t.Fatalf("agent-b's term: %v", tb)
	}
	// A acquires again once B releases: the role comes back.
	if err := tb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ta2, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ta2.Epoch() != 3 || a.Status().Role != RoleActive {
		t.Errorf("agent-a after re-acquiring: epoch %d role %s", ta2.Epoch(), a.Status().Role)
	}
}

// TestTakeoverRace: when the holder stops renewing, two standbys claim the
// next epoch at about the same moment; the order of their claims in the
// state topic decides, exactly one of them writes, and never together with
// the old holder.
func TestTakeoverRace(t *testing.T) {
	ctx, dst, _, ta := startHolder(t)
	standbys := []*Lease{openLease(t, dst, "agent-b"), openLease(t, dst, "agent-c")}
	var terms [2]atomic.Pointer[Term]
	stop := make(chan struct{})
	wg := writers(t, stop, func() []*Term { return []*Term{ta, terms[0].Load(), terms[1].Load()} })
	defer func() { close(stop); wg.Wait() }()
	won := make(chan int, 2)
	actx, stopAcquiring := context.WithCancel(ctx)
	defer stopAcquiring()
	for i, l := range standbys {
		go func() {
			if tm, err := l.Acquire(actx); err == nil {
				terms[i].Store(tm)
				won <- i
			}
		}()
	}
	time.Sleep(testDuration)
	ta.l.freeze.Store(true)
	var w int
	select {
	case w = <-won:
	case <-ctx.Done():
		t.Fatal("no standby took over")
	}
	if got := terms[w].Load().Epoch(); got != 2 {
		t.Errorf("the new holder has epoch %d, want 2", got)
	}
	select {
	case o := <-won:
		t.Fatalf("both standbys hold the lease: %d and %d", w, o)
	case <-time.After(3 * testDuration):
	}
	loser := standbys[1-w]
	if st := loser.Status(); st.Role != RoleStandby || st.Holder != standbys[w].AgentID() || st.Epoch != 2 {
		t.Errorf("the other standby sees role %s, holder %q, epoch %d", st.Role, st.Holder, st.Epoch)
	}
	if ta.Check() == nil {
		t.Error("the old holder may still write")
	}
}
