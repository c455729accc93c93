package mirror

import (
	"testing"

	"github.com/kmirror/kmirror/agent/metasync"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestSyncRunsEveryKind: the sync loops are keyed by every kind of
// mirrorapi's table, so a kind added there is given a loop here or said to
// be recorded elsewhere; only partition growth is (by syncTopics).
func TestSyncRunsEveryKind(t *testing.T) {
	runs := (&Runner{}).syncRuns(nil, nil, nil)
	for _, k := range mirrorapi.SyncKinds() {
		run, ok := runs[k]
		switch {
		case !ok:
			t.Errorf("kind %s has no entry in syncRuns", k)
		case k == metasync.KindPartitions && run != nil:
			t.Errorf("partitions has a sync loop; syncTopics records it")
		case k != metasync.KindPartitions && run == nil:
			t.Errorf("kind %s has no sync loop", k)
		}
	}
	if len(runs) != len(mirrorapi.SyncKinds()) {
		t.Errorf("syncRuns has %d kinds, the table %d", len(runs), len(mirrorapi.SyncKinds()))
	}
}
