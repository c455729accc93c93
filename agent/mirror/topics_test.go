package mirror

import (
	"testing"
)

// TestCheckTopicIDs: what a topic sync does about the topic ids the
// brokers report, against those it mirrored so far, and the record it
// keeps.
func TestCheckTopicIDs(t *testing.T) {
	id := func(b byte) topicID { return topicID{b} }
	var none topicID
	rec := func(src, dst topicID) topicRecord { return topicRecord{SourceTopicID: src, DestinationTopicID: dst} }
	for _, tc := range []struct {
		name       string
		tr         topicRecord
		src, dst   topicID
		recovering bool
		want       idCheck
		next       topicRecord
	}{
		{"same ids", rec(id(1), id(2)), id(1), id(2), false, idsMatch, rec(id(1), id(2))},
		{"brokers report no ids", rec(id(1), id(2)), none, none, false, idsMatch, rec(id(1), id(2))},
		{"record from before destination ids", rec(id(1), none), id(1), id(2), false, idsRecordDestination, rec(id(1), id(2))},
		{"source recreated", rec(id(1), id(2)), id(3), id(2), false, idsSourceRecreated, rec(id(1), id(2))},
		{"source recreated, on recover", rec(id(1), id(2)), id(3), id(2), true, idsSourceRecreatedRealign, rec(id(1), id(2))},
		{"destination recreated", rec(id(1), id(2)), id(1), id(4), false, idsDestinationRecreated, rec(id(1), id(2))},
		{"destination recreated, on recover", rec(id(1), id(2)), id(1), id(4), true, idsAdoptDestination, rec(id(1), id(4))},
		{"both recreated, on recover", rec(id(1), id(2)), id(3), id(4), true, idsSourceRecreatedRealign, rec(id(1), id(2))},
		{"record from before destination ids, on recover", rec(id(1), none), id(1), id(2), true, idsRecordDestination, rec(id(1), id(2))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := checkTopicIDs(tc.tr, tc.src, tc.dst, tc.recovering)
			if got != tc.want || next != tc.next {
				t.Errorf("checkTopicIDs = %d, %+v; want %d, %+v", got, next, tc.want, tc.next)
			}
		})
	}
}
