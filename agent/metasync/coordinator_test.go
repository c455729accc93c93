package metasync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// pendingSource answers FetchManyOffsets with err for each group until it
// was asked pending times for it.
type pendingSource struct {
	pending int
	err     error
	asked   map[string]int
}

func (s *pendingSource) ListGroups(context.Context, ...string) (kadm.ListedGroups, error) {
	return nil, nil
}

func (s *pendingSource) FetchManyOffsets(_ context.Context, groups ...string) kadm.FetchOffsetsResponses {
	out := kadm.FetchOffsetsResponses{}
	for _, g := range groups {
		s.asked[g]++
		r := kadm.FetchOffsetsResponse{Group: g}
		if s.asked[g] <= s.pending {
			r.Err = s.err
		}
		out[g] = r
	}
	return out
}

func TestFetchOffsetsAwaitsCoordinator(t *testing.T) {
	defer func(b time.Duration) { coordinatorBackoff = b }(coordinatorBackoff)
	coordinatorBackoff = time.Millisecond
	for _, tc := range []struct {
		name    string
		pending int
		err     error
		wantErr error
		asked   int
	}{
		{"ready at once", 0, nil, nil, 1},
		{"offsets topic being created", 3, kerr.CoordinatorNotAvailable, nil, 4},
		{"coordinator loading", 2, kerr.CoordinatorLoadInProgress, nil, 3},
		{"coordinator moved", 1, kerr.NotCoordinator, nil, 2},
		{"never comes up: bounded", 1000, kerr.CoordinatorNotAvailable, kerr.CoordinatorNotAvailable, coordinatorTries},
		{"other errors are not retried", 1000, kerr.GroupAuthorizationFailed, kerr.GroupAuthorizationFailed, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &pendingSource{pending: tc.pending, err: tc.err, asked: map[string]int{}}
			got := fetchOffsets(context.Background(), src, []string{"a", "b"})
			for _, g := range []string{"a", "b"} {
				if !errors.Is(got[g].Err, tc.wantErr) && got[g].Err != tc.wantErr {
					t.Errorf("group %s: error %v, want %v", g, got[g].Err, tc.wantErr)
				}
				if src.asked[g] != tc.asked {
					t.Errorf("group %s asked %d times, want %d", g, src.asked[g], tc.asked)
				}
			}
		})
	}
}
