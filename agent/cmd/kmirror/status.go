package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func init() {
	register("status", "show the agents of the agent's group and their mirrors, or that it runs alone (coordination = single), or what it waits for", runStatus)
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
	cl := newClient(*addr, *token)
	st, err := cl.Agent(ctx)
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
	if len(st.GroupMembers) == 0 {
		return nil
	}
	// Each mirror's partitions and lag, as the agent that runs it
	// describes it: the list the agent gathers from the whole group.
	described := map[string]mirrorapi.Mirror{}
	ms, err := cl.Describe(ctx)
	for _, m := range ms {
		described[m.Name] = m
	}
	for _, m := range st.GroupMembers {
		fmt.Fprintf(stdout, "  %s\t%s\t%d mirror(s) %v\tload %d B/s\n", m.AgentID, cmp.Or(m.API, "(no API)"), len(m.Mirrors), m.Mirrors, m.Weight)
		for _, name := range m.Mirrors {
			if d, ok := described[name]; ok {
				fmt.Fprintf(stdout, "    %s\t%s\n", name, partitionsLine(d))
			}
		}
		if here := runBy(ms, m.AgentID); len(here.StateCounts) > 0 {
			fmt.Fprintf(stdout, "    (runs)\t%s\n", partitionsLine(here))
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "partitions and lag unknown: %v\n", err)
	}
	return nil
}

// runBy sums up, as one mirror, the partitions of ms that agent runs,
// whichever mirror's they are.
func runBy(ms []mirrorapi.Mirror, agent string) mirrorapi.Mirror {
	out := mirrorapi.Mirror{StateCounts: map[mirrorapi.State]int{}}
	for _, m := range ms {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if p.Agent == agent {
					out.StateCounts[p.State]++
					out.MaxLag = max(out.MaxLag, p.Lag)
				}
			}
		}
	}
	return out
}

// partitionsLine sums up a mirror's partitions: how many, by state (as
// kmirror list shows them), and the largest lag.
func partitionsLine(m mirrorapi.Mirror) string {
	var n int
	for _, c := range m.StateCounts {
		n += c
	}
	line := fmt.Sprintf("%d partition(s) %s, max lag %d", n, states(m.StateCounts), m.MaxLag)
	if m.Error != "" {
		line += "; error: " + m.Error
	}
	return line
}

// statusLine says in one line what an agent is to the others of its
// destination.
func statusLine(st mirrorapi.AgentStatus) string {
	switch {
	case st.LeaseHolder != "":
		// Waiting for the agents of an earlier release to stop.
		return fmt.Sprintf("agent %s (coordination = %q): waits for the writer lease's agents (an earlier release) to stop; epoch %d held by %s (lease %v)",
			st.AgentID, st.Coordination, st.LeaseEpoch, st.LeaseHolder, time.Duration(st.LeaseDurationMs)*time.Millisecond)
	case st.Coordination == config.CoordinationSingle:
		return fmt.Sprintf("agent %s: runs every mirror alone (coordination = \"single\")", st.AgentID)
	default:
		return fmt.Sprintf("agent %s: one of %d agents of the group (generation %d) that divide the mirrors:", st.AgentID, len(st.GroupMembers), st.GroupGeneration)
	}
}
