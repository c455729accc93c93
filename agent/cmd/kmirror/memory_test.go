package main

import (
	"runtime/debug"
	"testing"
)

// TestLimitMemory: the agent's soft memory limit is buffer_bytes plus the
// headroom, the default buffer's when none is set, and GOMEMLIMIT wins.
func TestLimitMemory(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	for _, tc := range []struct {
		name      string
		env       string
		buffer    int64
		wantLimit int64
	}{
		{"buffer_bytes set", "", 64 << 20, 64<<20 + memoryHeadroom},
		{"default buffer", "", 0, 256<<20 + memoryHeadroom},
		{"GOMEMLIMIT set", "1GiB", 64 << 20, 7 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.env)
			debug.SetMemoryLimit(7 << 30) // what GOMEMLIMIT would have set
			limitMemory(tc.buffer)
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Fatalf("memory limit %d, want %d", got, tc.wantLimit)
			}
		})
	}
}
