package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func init() {
	register("status", "show whether the agent is the active writer or a standby (writer lease)", runStatus)
}

func runStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror status", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	output := outputFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	// newClient applies the --ca-cert and --client-* flags agentFlags
	// registered.
	st, err := newClient(*addr, *token).Agent(ctx)
	if err != nil {
		return err
	}
	if *output == "json" {
		return printJSON(st)
	}
	fmt.Fprintln(stdout, statusLine(st))
	if st.Fillers != "" {
		fmt.Fprintf(stdout, "fillers: %s (%s)\n", st.Fillers, st.FillersReason)
	}
	return nil
}

// statusLine says in one line what an agent is to the writer lease.
func statusLine(st mirrorapi.AgentStatus) string {
	lease := time.Duration(st.LeaseDurationMs) * time.Millisecond
	switch {
	case st.LeaseEpoch == 0 && st.LeaseHolder == "" && st.Role == mirrorapi.RoleActive:
		return fmt.Sprintf("agent %s: active, without a writer lease", st.AgentID)
	case st.LeaseHolder == "":
		return fmt.Sprintf("agent %s: %s; nobody holds the writer lease (epoch %d)", st.AgentID, st.Role, st.LeaseEpoch)
	default:
		return fmt.Sprintf("agent %s: %s; writer lease epoch %d held by %s (lease %v)", st.AgentID, st.Role, st.LeaseEpoch, st.LeaseHolder, lease)
	}
}
