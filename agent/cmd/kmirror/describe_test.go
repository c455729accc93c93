package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestDescribeSyncEveryKind: describe prints a line for each kind of
// mirrorapi's table that has run, in the table's order, and none for a kind
// that has not.
func TestDescribeSyncEveryKind(t *testing.T) {
	kinds := mirrorapi.SyncKinds()
	m := mirrorapi.Mirror{Name: "dr", StateCounts: map[mirrorapi.State]int{}}
	for _, k := range kinds[1:] {
		m.Sync[k] = mirrorapi.SyncStatus{LastSuccess: "2026-11-30T12:00:00Z", Items: 10 + int(k)}
	}
	var b bytes.Buffer
	if err := writeTable(&b, []mirrorapi.Mirror{m}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, "mirror dr sync ") {
			got = append(got, strings.TrimSpace(line))
		}
	}
	var want []string
	for _, k := range kinds[1:] {
		want = append(want, fmt.Sprintf("mirror dr sync %s: %d in sync at 2026-11-30T12:00:00Z, 0 error(s)", k, 10+int(k)))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sync lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
