package partition

import (
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestStatusLag: lag is the source end minus the destination end of one
// snapshot in every state, unknown until the source's end is read, and
// source figures older than those held are ignored.
func TestStatusLag(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		state   State
		lastMir int64 // restored last mirrored offset; -1: none
		sets    []leaders.Bounds
		at      []time.Time
		wantLag int64
		wantSrc int64
	}{
		{name: "not read", state: Paused, lastMir: 9, wantLag: mirrorapi.LagUnknown},
		{name: "paused, source moved on", state: Paused, lastMir: 9, sets: []leaders.Bounds{{HighWatermark: 25}}, at: []time.Time{t0}, wantLag: 15, wantSrc: 25},
		{name: "failed", state: Failed, lastMir: 49, sets: []leaders.Bounds{{HighWatermark: 50}}, at: []time.Time{t0}, wantLag: 0, wantSrc: 50},
		{name: "stopped, source took more", state: Stopped, lastMir: 2844, sets: []leaders.Bounds{{HighWatermark: 2900}}, at: []time.Time{t0}, wantLag: 55, wantSrc: 2900},
		{name: "nothing mirrored", state: Paused, lastMir: -1, sets: []leaders.Bounds{{HighWatermark: 7}}, at: []time.Time{t0}, wantLag: 7, wantSrc: 7},
		{name: "older figures ignored", state: Paused, lastMir: 9, sets: []leaders.Bounds{{HighWatermark: 30}, {HighWatermark: 20}},
			at: []time.Time{t0.Add(time.Second), t0}, wantLag: 20, wantSrc: 30},
		{name: "newer figures win", state: Paused, lastMir: 9, sets: []leaders.Bounds{{HighWatermark: 20}, {HighWatermark: 30}},
			at: []time.Time{t0, t0.Add(time.Second)}, wantLag: 20, wantSrc: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Config{Mirror: "dr", TP: fetcher.TP{Topic: "t", Partition: 0}})
			m.Restore(tc.state, reason.Error{})
			m.RestoreOffsets(tc.lastMir)
			for i, b := range tc.sets {
				m.SetSourceBounds(b, tc.at[i])
			}
			st := m.Status()
			if st.Lag != tc.wantLag || (tc.wantLag != mirrorapi.LagUnknown && st.SourceOffset != tc.wantSrc) {
				t.Fatalf("lag %d, source %d; want %d, %d", st.Lag, st.SourceOffset, tc.wantLag, tc.wantSrc)
			}
			if (tc.wantLag == mirrorapi.LagUnknown) != st.SourceOffsetAt.IsZero() {
				t.Fatalf("source_offset_at %v with lag %d", st.SourceOffsetAt, st.Lag)
			}
		})
	}
}
