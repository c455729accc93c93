package main

// The verbs that list: list (mirrors) and offsets (last mirrored offsets).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// stdout is where commands print their results (a test swaps it).
var stdout io.Writer = os.Stdout

func init() {
	register("list", "list the agent's mirrors", runList)
	register("offsets", "show a mirror's last mirrored offsets", runOffsets)
}

// listEntry is one mirror in `kmirror list --output json`.
type listEntry struct {
	Name        string                  `json:"name"`
	Source      mirrorapi.Source        `json:"source"`
	Topics      []string                `json:"topics"`
	Partitions  int                     `json:"partitions"`
	MaxLag      int64                   `json:"max_lag"`
	StateCounts map[mirrorapi.State]int `json:"state_counts"`
	Error       string                  `json:"error,omitempty"`
}

func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("output", "table", "table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageError("--output %q: use table or json", o)
	}
	return nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runList(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror list", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	output := outputFlag(fs)
	if err := parse(fs, args, nil); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	ms, err := newClient(*addr, *token).Describe(ctx)
	if err != nil {
		return err
	}
	entries := make([]listEntry, 0, len(ms))
	for _, m := range ms {
		e := listEntry{Name: m.Name, Source: m.Source, Topics: []string{}, MaxLag: m.MaxLag, StateCounts: m.StateCounts, Error: m.Error}
		for _, t := range m.Topics {
			e.Topics = append(e.Topics, t.Name)
			e.Partitions += len(t.Partitions)
		}
		if e.StateCounts == nil {
			e.StateCounts = map[mirrorapi.State]int{}
		}
		entries = append(entries, e)
	}
	if *output == "json" {
		return printJSON(struct {
			Mirrors []listEntry `json:"mirrors"`
		}{entries})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MIRROR\tSOURCE\tTOPICS\tPARTITIONS\tMAX-LAG\tSTATES")
	var notes []string
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", e.Name, strings.Join(e.Source.BootstrapServers, ","), len(e.Topics), e.Partitions, e.MaxLag, states(e.StateCounts))
		if e.Error != "" {
			notes = append(notes, fmt.Sprintf("mirror %s: %s", e.Name, e.Error))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, n)
	}
	return nil
}

// states renders partition counts per state, such as MIRRORING=3,FAILED=1,
// in lifecycle order; "-" when there are none.
func states(c map[mirrorapi.State]int) string {
	order := []mirrorapi.State{mirrorapi.StateInitializing, mirrorapi.StatePreparing, mirrorapi.StateMirroring, mirrorapi.StatePaused,
		mirrorapi.StateStopping, mirrorapi.StateStopped, mirrorapi.StateFailed}
	var out []string
	for _, s := range order {
		if c[s] > 0 {
			out = append(out, fmt.Sprintf("%s=%d", s, c[s]))
		}
	}
	var other []string
	for s, n := range c {
		if n > 0 && !slices.Contains(order, s) {
			other = append(other, fmt.Sprintf("%s=%d", s, n))
		}
	}
	slices.Sort(other)
	out = append(out, other...)
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func runOffsets(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror offsets", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the mirror")
	topic := fs.String("topic", "", "only this topic")
	output := outputFlag(fs)
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	out, err := newClient(*addr, *token).Offsets(ctx, *mirror, *topic)
	if err != nil {
		return err
	}
	if *output == "json" {
		return printJSON(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MIRROR\tTOPIC\tPARTITION\tLAST-MIRRORED-OFFSET\tSTATE")
	for _, t := range out.Topics {
		for _, p := range t.Partitions {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", out.Mirror, t.Name, p.Partition, p.LastMirroredOffset, p.State)
		}
	}
	return tw.Flush()
}
