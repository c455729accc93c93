package mirror

import (
	"slices"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestThrottle: the partitions a throttle holds back, what a promote
// waiting on one of them says, and what describe shows (a copy, with a
// warning for a partition of a topic the mirror does not have).
func TestThrottle(t *testing.T) {
	orders0, orders1 := fetcher.TP{Topic: "orders", Partition: 0}, fetcher.TP{Topic: "orders", Partition: 1}
	for _, tc := range []struct {
		name     string
		spec     *mirrorapi.Throttle
		held     []fetcher.TP // held back
		free     []fetcher.TP // not
		warnings []string     // substrings, one per warning
	}{
		{"none", nil, nil, []fetcher.TP{orders0, orders1}, nil},
		{"every partition, by default", &mirrorapi.Throttle{RateBytesPerSecond: 1000}, []fetcher.TP{orders0, orders1}, nil, nil},
		{"every partition", &mirrorapi.Throttle{RateBytesPerSecond: 1000, Partitions: []string{"*"}}, []fetcher.TP{orders0, orders1}, nil, nil},
		{"some partitions", &mirrorapi.Throttle{RateBytesPerSecond: 1000, Partitions: []string{"orders:0", "ghost:1"}},
			[]fetcher.TP{orders0, {Topic: "ghost", Partition: 1}}, []fetcher.TP{orders1}, []string{`the mirror has no topic "ghost"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := newThrottle()
			th.set(&mirrorapi.Throttle{RateBytesPerSecond: 5, Partitions: []string{"orders:1"}}) // replaced below
			var in *mirrorapi.Throttle
			if tc.spec != nil {
				cp := *tc.spec
				cp.Partitions = slices.Clone(cp.Partitions)
				in = &cp
			}
			th.set(in)
			for _, tp := range tc.held {
				if note := th.note(tp); !strings.Contains(note, "throttle (1000 bytes/s) holds this partition") {
					t.Errorf("%s: note %q, want it held back at 1000 bytes/s", tp, note)
				}
			}
			for _, tp := range tc.free {
				if note := th.note(tp); note != "" {
					t.Errorf("%s: note %q, want none", tp, note)
				}
			}
			if in != nil && len(in.Partitions) > 0 {
				in.Partitions[0] = "changed:9" // describe shows what was set
			}
			var st mirrorapi.Mirror
			th.statusInto(&st, []string{"orders"})
			switch {
			case tc.spec == nil && st.Throttle != nil:
				t.Errorf("describe shows throttle %+v, want none", st.Throttle)
			case tc.spec != nil && (st.Throttle == nil || strings.Join(st.Throttle.Partitions, ",") != strings.Join(tc.spec.Partitions, ",")):
				t.Errorf("describe shows throttle %+v, want %+v", st.Throttle, tc.spec)
			}
			if len(st.Warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", st.Warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.Contains(st.Warnings[i], w) {
					t.Errorf("warning %q, want it to say %q", st.Warnings[i], w)
				}
			}
		})
	}
}
