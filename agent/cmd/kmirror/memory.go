package main

import (
	"os"
	"runtime/debug"
)

// memoryHeadroom is what the agent's memory limit allows beyond
// buffer_bytes: the process's own heap (clients, state, API) and a
// collection's slack.
const memoryHeadroom = 128 << 20

// limitMemory sets Go's soft memory limit to buffer_bytes (default 256 MiB)
// plus memoryHeadroom, unless GOMEMLIMIT sets one. Without it the collector
// lets the heap grow to twice what is live before collecting, so with
// buffer_bytes full the agent's RSS reached twice it: 491 MiB with 256 MiB,
// mirroring 483 MB on Kafka 4.4.0. The limit is soft: a heap live beyond it
// costs collections, never an error.
func limitMemory(bufferBytes int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if bufferBytes <= 0 {
		bufferBytes = 256 << 20
	}
	debug.SetMemoryLimit(bufferBytes + memoryHeadroom)
}
