package coordinator

import (
	"testing"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// TestSourceQuotaEntity: the entity a source quota is set on, as describe
// shows it, reads back as the same entity from a persisted throttle,
// whatever the user name holds; a throttle saved before entities were kept
// set its quota on the client id.
func TestSourceQuotaEntity(t *testing.T) {
	for _, tc := range []struct {
		user, want string
	}{
		{"", "client-id=kmirror-dr"},
		{"alice", "user=alice,client-id=kmirror-dr"},
		{"a,client-id=b", "user=a,client-id=b,client-id=kmirror-dr"},
	} {
		spec := mirrorspec.Spec{Name: "dr"}
		if tc.user != "" {
			spec.Source.SASL = &mirrorspec.SASL{Username: tc.user}
		}
		e := quotaEntityOf(spec)
		if e.String() != tc.want {
			t.Errorf("user %q: entity %q, want %q", tc.user, e.String(), tc.want)
		}
		var th mirrorapi.Throttle
		th.SourceQuotaEntity = e.String()
		if got := storedQuotaEntity("dr", th); got != e {
			t.Errorf("user %q: read back as %+v, want %+v", tc.user, got, e)
		}
	}
	if got := storedQuotaEntity("dr", mirrorapi.Throttle{SourceQuota: true}); got != (sourceQuotaEntity{clientID: "kmirror-dr"}) {
		t.Errorf("a throttle saved without its entity: %+v, want the client id only", got)
	}
}
