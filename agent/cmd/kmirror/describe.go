package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

func init() {
	register("describe", "show mirrors, their partitions, offsets, lag and state", runDescribe)
}

// agentFlags adds the flags every API command shares: where the agent is,
// and how to authenticate to it (the TLS ones are read by newClient).
func agentFlags(fs *flag.FlagSet) (addr, token *string) {
	addr = fs.String("agent", envOr("KMIRROR_ADDR", "http://127.0.0.1:8080"), "agent API URL (env KMIRROR_ADDR)")
	token = fs.String("token", os.Getenv("KMIRROR_TOKEN"), "agent API bearer token (env KMIRROR_TOKEN)")
	fs.StringVar(&agentTLS.caCert, "ca-cert", os.Getenv("KMIRROR_CA_CERT"), "PEM file of the CA that signed an https agent's certificate (env KMIRROR_CA_CERT)")
	fs.StringVar(&agentTLS.clientCert, "client-cert", os.Getenv("KMIRROR_CLIENT_CERT"), "PEM client certificate for an agent started with client_ca_file (env KMIRROR_CLIENT_CERT)")
	fs.StringVar(&agentTLS.clientKey, "client-key", os.Getenv("KMIRROR_CLIENT_KEY"), "PEM private key of --client-cert (env KMIRROR_CLIENT_KEY)")
	return addr, token
}

// agentTLS holds the TLS flags of the command being run (one a process).
var agentTLS struct{ caCert, clientCert, clientKey string }

// newClient returns the API client for addr and token with the TLS flags
// applied. A TLS flag that cannot be used makes every call fail with a
// message naming it.
func newClient(addr, token string) *mirrorapi.Client {
	cl := mirrorapi.NewClient(addr, token)
	if err := applyAgentTLS(cl); err != nil {
		cl.HTTP = &http.Client{Transport: failingTransport{err}}
		cl.Retries = -1
	}
	return cl
}

func applyAgentTLS(cl *mirrorapi.Client) error {
	a := agentTLS
	if a.caCert == "" && a.clientCert == "" && a.clientKey == "" {
		return nil
	}
	var t mirrorapi.ClientTLS
	var err error
	if a.caCert != "" {
		if t.CAPEM, err = os.ReadFile(a.caCert); err != nil {
			return fmt.Errorf("--ca-cert: %w", err)
		}
	}
	if (a.clientCert == "") != (a.clientKey == "") {
		return errors.New("--client-cert and --client-key: give both, or neither")
	}
	if a.clientCert != "" {
		if t.CertPEM, err = os.ReadFile(a.clientCert); err != nil {
			return fmt.Errorf("--client-cert: %w", err)
		}
		if t.KeyPEM, err = os.ReadFile(a.clientKey); err != nil {
			return fmt.Errorf("--client-key: %w", err)
		}
	}
	if err := cl.SetTLS(t); err != nil {
		if errors.Is(err, mirrorapi.ErrNoCACert) {
			return fmt.Errorf("--ca-cert %s: %w", a.caCert, err)
		}
		return fmt.Errorf("--client-cert %s and --client-key: %w", a.clientCert, err)
	}
	return nil
}

// failingTransport fails every request with err.
type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runDescribe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror describe", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "only this mirror")
	output := fs.String("output", "table", "table or json")
	watch := fs.Duration("watch", 0, "refresh every interval until interrupted (table output), such as 2s")
	count := fs.Int("count", 0, "with --watch: stop after this many refreshes (0 = until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("--output %q: use table or json", *output)
	}
	cl := newClient(*addr, *token)
	for i := 1; ; i++ {
		var ms []mirrorapi.Mirror
		var err error
		if *mirror != "" {
			// One mirror: in a group, the other agents are asked for
			// its partitions only.
			var m mirrorapi.Mirror
			m, err = cl.Mirror(ctx, *mirror)
			if mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
				return fmt.Errorf("--mirror %q: %s: no such mirror on the agent at %s (kmirror list shows its mirrors)", *mirror, mirrorapi.CodeMirrorNotFound, *addr)
			}
			ms = []mirrorapi.Mirror{m}
		} else {
			ms, err = cl.Describe(ctx)
		}
		if err != nil {
			return err
		}
		if *output == "json" {
			return printJSON(mirrorapi.DescribeResponse{Mirrors: ms})
		}
		if *watch > 0 {
			fmt.Fprintf(stdout, "\n%s\n", time.Now().Format("15:04:05"))
		}
		if err := writeTable(stdout, ms); err != nil {
			return err
		}
		if *watch <= 0 || (*count > 0 && i >= *count) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

// writeTable prints KIP-1279's describe table, one line per partition, and
// each mirror's or topic's error below it, then one line per mirror and kind
// of metadata sync once any sync ran, then each mirror's source and settings.
func writeTable(w io.Writer, ms []mirrorapi.Mirror) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A group names the agent of each partition (coordination = "group").
	grouped := slices.ContainsFunc(ms, func(m mirrorapi.Mirror) bool {
		return slices.ContainsFunc(m.Topics, func(t mirrorapi.Topic) bool {
			return slices.ContainsFunc(t.Partitions, func(p mirrorapi.Partition) bool { return p.Agent != "" })
		})
	})
	header := "MIRROR\tTOPIC\tPARTITION\tSOURCE-OFFSET\tDESTINATION-OFFSET\tLAG\tSTATE"
	if grouped {
		header += "\tAGENT"
	}
	fmt.Fprintln(tw, header)
	var notes []string
	for _, m := range ms {
		if m.Error != "" {
			notes = append(notes, fmt.Sprintf("mirror %s: %s", m.Name, m.Error))
		}
		if t := m.Throttle; t != nil {
			note := fmt.Sprintf("mirror %s: %s", m.Name, throttleSummary(*t))
			if t.SourceQuota && t.SourceQuotaEntity != "" {
				note += "; source quota on " + t.SourceQuotaEntity
			}
			notes = append(notes, note)
		}
		if n := staleNote(m, clock()); n != "" {
			notes = append(notes, n)
		}
		for _, t := range m.Topics {
			if t.Error != "" {
				notes = append(notes, fmt.Sprintf("mirror %s topic %s: %s", m.Name, t.Name, withCode(t.ErrorCode, t.Error)))
			}
			for _, p := range t.Partitions {
				src, lag := strconv.FormatInt(p.SourceOffset, 10), strconv.FormatInt(p.Lag, 10)
				if p.SourceOffsetAt.IsZero() {
					src, lag = "?", "?"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s", m.Name, t.Name, p.Partition, src, p.DestinationOffset, lag, p.State)
				if grouped {
					fmt.Fprintf(tw, "\t%s", cmp.Or(p.Agent, "-"))
				}
				fmt.Fprintln(tw)
				if p.Reason != "" {
					notes = append(notes, fmt.Sprintf("mirror %s %s/%d %s: %s", m.Name, t.Name, p.Partition, p.State, withCode(p.ReasonCode, p.Reason)))
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	for _, m := range ms {
		for kind, s := range m.Sync.All() {
			if line := syncLine(s); line != "" {
				fmt.Fprintf(w, "mirror %s sync %s: %s\n", m.Name, kind, line)
			}
		}
	}
	for _, m := range ms {
		if m.Agent != "" {
			fmt.Fprintf(w, "mirror %s runs on agent %s of the group (its topics, metadata sync and lifecycle operations; AGENT runs each partition)\n", m.Name, m.Agent)
		}
		fmt.Fprintf(w, "mirror %s source: %s\n", m.Name, sourceLine(m))
		fmt.Fprintf(w, "mirror %s settings: %s\n", m.Name, settingsLine(m))
		fmt.Fprintf(w, "mirror %s destination transaction timeout: %s\n", m.Name, txnTimeoutLine(m))
	}
	return nil
}

// clock is the time describe compares the agent's timestamps with (a
// fixed instant in the golden tests).
var clock = time.Now

// staleNote says when the lag of some of m's partitions is unknown or read
// from old source figures, "" when every figure is recent. Old means older
// than three metadata refresh intervals (at least 15 s): the agent reads
// the source ends of partitions it does not fetch once per interval.
func staleNote(m mirrorapi.Mirror, now time.Time) string {
	limit := max(3*time.Duration(m.MetadataRefreshIntervalMs)*time.Millisecond, 15*time.Second)
	var unknown, stale int
	var oldest time.Duration
	for _, t := range m.Topics {
		for _, p := range t.Partitions {
			switch age := now.Sub(p.SourceOffsetAt); {
			case p.SourceOffsetAt.IsZero():
				unknown++
			case age > limit:
				stale++
				oldest = max(oldest, age)
			}
		}
	}
	var parts []string
	if unknown > 0 {
		parts = append(parts, fmt.Sprintf("lag of %d partition(s) unknown (?): the source's end has not been read since the agent started (is the source reachable?)", unknown))
	}
	if stale > 0 {
		parts = append(parts, fmt.Sprintf("source figures of %d partition(s) are up to %s old: their lag may be out of date", stale, oldest.Round(time.Second)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("mirror %s: %s", m.Name, strings.Join(parts, "; "))
}

// withCode puts a reason's code, when it has one, in brackets before its
// message: the troubleshooting guide has a section per code.
func withCode(code mirrorapi.ReasonCode, msg string) string {
	if code == "" {
		return msg
	}
	return "[" + string(code) + "] " + msg
}

// sourceLine summarizes how the mirror reaches its source: the cluster id
// it found there, the security protocol and the SASL mechanism and user.
// Secrets are not in mirrorapi.Mirror's Source fields it reads.
func sourceLine(m mirrorapi.Mirror) string {
	id := m.SourceClusterID
	if id == "" {
		id = "unknown (not connected yet)"
	}
	line := "cluster " + id + ", " + mirrorspec.Protocol(m.Source)
	if s := m.Source.SASL; s != nil {
		line += " " + s.Mechanism
		if s.Username != "" {
			line += " as user " + s.Username
		}
	}
	return line
}

// settingsLine prints the mirror's settings (the defaults resolved) as the
// spec's field names with their values, lists comma-separated.
func settingsLine(m mirrorapi.Mirror) string {
	return strings.Join([]string{
		"metadata_refresh_interval=" + (time.Duration(m.MetadataRefreshIntervalMs) * time.Millisecond).String(),
		"topic_regex=" + listValue(m.TopicRegex),
		"groups_include=" + listValue(m.GroupsInclude),
		"groups_exclude=" + listValue(m.GroupsExclude),
		"acl_include=" + listValue(m.ACLInclude),
		"topic_config_exclude=" + listValue(m.TopicConfigExclude),
	}, " ")
}

// txnTimeoutLine says the timeout of the agent's destination transactions
// and where the preflight took it from.
func txnTimeoutLine(m mirrorapi.Mirror) string {
	if m.TxnTimeoutMs <= 0 {
		return "not known yet (the preflight has not run)"
	}
	line := (time.Duration(m.TxnTimeoutMs) * time.Millisecond).String()
	if m.TxnTimeoutFrom != "" {
		line += ", from " + m.TxnTimeoutFrom
	}
	return line
}

// listValue joins xs with commas, quoting an item that holds a comma, a
// space or a quote or is empty, so that the list reads back unambiguously;
// "(none)" for an empty list.
func listValue(xs []string) string {
	if len(xs) == 0 {
		return "(none)"
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		if x == "" || strings.ContainsAny(x, ", \"") {
			x = strconv.Quote(x)
		}
		out[i] = x
	}
	return strings.Join(out, ",")
}

// syncLine summarizes one kind of metadata sync, "" before any ran.
func syncLine(s mirrorapi.SyncStatus) string {
	if s.LastSuccess == "" && s.LastError == "" {
		return ""
	}
	last := "never succeeded"
	if s.LastSuccess != "" {
		last = fmt.Sprintf("%d in sync at %s", s.Items, s.LastSuccess)
	}
	line := fmt.Sprintf("%s, %d error(s)", last, s.Errors)
	if s.LastError != "" {
		line += "; last error: " + s.LastError
	}
	if len(s.Drift) > 0 {
		line += "; drift reverted: " + strings.Join(s.Drift, "; ")
	}
	return line
}
