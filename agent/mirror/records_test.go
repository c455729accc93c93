package mirror

import (
	"encoding/json"
	"testing"

	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// TestPartitionRecordLegacyReason: a record written before reason codes
// were kept gets the code a decision branches on (mirror.go's recreated
// source check); records with a code, or of another state, keep theirs.
func TestPartitionRecordLegacyReason(t *testing.T) {
	legacy := `source topic "orders" was recreated (topic id b, mirrored a): a recover cannot re-align it, as the destination holds the old topic's records`
	for _, tc := range []struct {
		name string
		rec  partitionRecord
		want reason.Code
	}{
		{"legacy realign failure", partitionRecord{State: partition.Failed, Reason: legacy}, reason.SourceTopicRecreatedRealignFailed},
		{"legacy other failure", partitionRecord{State: partition.Failed, Reason: "something else"}, ""},
		{"coded record", partitionRecord{State: partition.Failed, Reason: legacy, ReasonCode: reason.ForeignWrite}, reason.ForeignWrite},
		{"not failed", partitionRecord{State: partition.Mirroring, Reason: legacy}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			var got partitionRecord
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.ReasonCode != tc.want || got.Reason != tc.rec.Reason || got.State != tc.rec.State {
				t.Errorf("read back %+v, want code %q and the rest as written", got, tc.want)
			}
		})
	}
}
