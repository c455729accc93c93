// Package coordinatortest runs a coordinator inside a test process, the way
// net/http/httptest runs a server: started, running and stopped with the
// test. The API, provider, metrics, end-to-end tests and benchmarks share it.
package coordinatortest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// Agent is a coordinator running in the test process.
type Agent struct {
	*coordinator.Coordinator
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start creates a coordinator from cfg, applies specs, runs it until Stop or
// the end of the test, and returns once it is running (its state loaded).
func Start(tb testing.TB, cfg coordinator.Config, specs ...mirrorspec.Spec) *Agent {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	co, err := coordinator.New(ctx, cfg)
	if err != nil {
		tb.Fatalf("starting the coordinator: %v", err)
	}
	for _, s := range specs {
		if err := co.Apply(ctx, s); err != nil {
			co.Close()
			tb.Fatalf("applying mirror %q: %v", s.Name, err)
		}
	}
	rctx, rcancel := context.WithCancel(context.Background())
	a := &Agent{Coordinator: co, cancel: rcancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		_ = co.Run(rctx)
	}()
	tb.Cleanup(a.Stop)
	for !co.Running() {
		if ctx.Err() != nil {
			tb.Fatalf("the coordinator did not start running: %v", ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return a
}

// Stop ends Run, waits for it and closes the coordinator. It may be called
// more than once.
func (a *Agent) Stop() {
	a.once.Do(func() {
		a.cancel()
		<-a.done
		a.Close()
	})
}
