package config

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseSettings: lease settings parse to durations, default when unset,
// and bad values are refused naming the setting.
func TestLeaseSettings(t *testing.T) {
	for _, tc := range []struct {
		name, hcl   string
		duration    time.Duration
		reqTimeout  time.Duration
		errContains string
	}{
		{name: "defaults", duration: 15 * time.Second, reqTimeout: 30 * time.Second},
		{name: "set", hcl: "lease_duration = \"2s\"\nlease_request_timeout = \"500ms\"\nagent_id = \"dr-1\"", duration: 2 * time.Second, reqTimeout: 500 * time.Millisecond},
		{name: "off", hcl: `lease_duration = "0s"`, duration: 0, reqTimeout: 30 * time.Second},
		{name: "too short", hcl: `lease_duration = "100ms"`, errContains: "lease_duration \"100ms\": use a duration of at least 300ms"},
		{name: "not a duration", hcl: `lease_duration = "soon"`, errContains: "lease_duration \"soon\""},
		{name: "bad request timeout", hcl: `lease_request_timeout = "-1s"`, errContains: "lease_request_timeout \"-1s\": use a positive duration"},
		{name: "bad agent id", hcl: `agent_id = "a b"`, errContains: "agent_id \"a b\": use 1 to 200 letters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("agent.hcl", []byte(tc.hcl))
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) {
					t.Fatalf("error %v, want one containing %q", err, tc.errContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d, rt := f.Lease()
			if d != tc.duration || rt != tc.reqTimeout {
				t.Errorf("Lease() = %v, %v; want %v, %v", d, rt, tc.duration, tc.reqTimeout)
			}
		})
	}
}
