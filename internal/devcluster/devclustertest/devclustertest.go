// Package devclustertest starts dev clusters (package devcluster) for tests:
// Start fails the test when a cluster does not start and closes it at the
// end, and Writer sends logs to the test's log. It is apart from devcluster
// so that the kmirror binary, which runs dev clusters, does not link the
// testing package.
package devclustertest

import (
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/internal/devcluster"
)

// Start starts a cluster for a test: it fails the test if the cluster does
// not start, closes it in Cleanup, and, unless a Logger option is given, logs
// through t so that strict rejections show up next to a failing test.
func Start(t testing.TB, opts ...devcluster.Option) *devcluster.Cluster {
	t.Helper()
	if !devcluster.HasLogger(opts) {
		opts = append([]devcluster.Option{devcluster.Logger(hclog.New(&hclog.LoggerOptions{
			Name:   "devcluster",
			Level:  hclog.Info,
			Output: Writer(t),
		}))}, opts...)
	}
	c, err := devcluster.Start(opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	// Cleanups run last-in first-out: the cluster closes before the
	// writer stops.
	t.Cleanup(c.Close)
	return c
}

// FreeAddr returns 127.0.0.1:PORT with a port that was free a moment ago
// (devcluster.FreeAddr), for a process the test starts later.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := devcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Writer returns a writer that sends each line to tb.Log until the test
// ends: goroutines (kfake's, an agent's) can still log after it, when t.Log
// panics. Loggers of other test harnesses use it too.
func Writer(tb testing.TB) io.Writer {
	w := &testWriter{t: tb}
	tb.Cleanup(w.stop)
	return w
}

// testWriter sends log lines to t.Log until stop: kfake goroutines can still
// log after the test ends, and t.Log then panics.
type testWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

var _ io.Writer = (*testWriter)(nil)
