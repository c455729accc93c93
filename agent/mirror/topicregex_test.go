package mirror

import (
	"slices"
	"testing"
)

// TestMatchTopics: topic_regex matches whole names, never internal topics,
// and an entry that does not compile matches nothing.
func TestMatchTopics(t *testing.T) {
	names := []string{"orders", "orders-eu", "myorders", "__consumer_offsets", "__orders", "payments"}
	for _, tc := range []struct {
		res  []string
		want []string
	}{
		{[]string{"orders"}, []string{"orders"}},
		{[]string{"orders.*"}, []string{"orders", "orders-eu"}},
		{[]string{".*"}, []string{"myorders", "orders", "orders-eu", "payments"}},
		{[]string{"pay.*", "my.*"}, []string{"myorders", "payments"}},
		{[]string{"(", "payments"}, []string{"payments"}},
		{nil, nil},
	} {
		if got := matchTopics(tc.res, names); !slices.Equal(got, tc.want) {
			t.Errorf("matchTopics(%q) = %q, want %q", tc.res, got, tc.want)
		}
	}
}
