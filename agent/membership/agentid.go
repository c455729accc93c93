package membership

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

var agentIDRule = regexp.MustCompile(`^[a-zA-Z0-9._:-]{1,200}$`)

// DefaultAgentID returns HOSTNAME-PID: unique on the machine, but not kept
// across restarts, so a restarted agent joins as a new member (agent_id
// keeps it).
func DefaultAgentID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "agent"
	}
	h = strings.Map(func(r rune) rune {
		if r < 128 && agentIDRule.MatchString(string(r)) {
			return r
		}
		return '_'
	}, h)
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// CheckAgentID says what is wrong with an agent id.
func CheckAgentID(id string) error {
	if !agentIDRule.MatchString(id) {
		return fmt.Errorf("agent_id %q: use 1 to 200 letters, digits, '.', '_', ':' or '-'", id)
	}
	return nil
}
