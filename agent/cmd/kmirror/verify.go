package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/kafkaconn"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/verify"
)

func init() {
	register("verify", "compare a topic on two clusters offset by offset (exit 1 on any mismatch)", runVerify)
}

func runVerify(ctx context.Context, args []string) error {
	return verifyCommand(ctx, args, os.Stdout, os.Stderr)
}

// clusterFlags are the flags that say how to reach one cluster, so that the
// source and destination get them alike and opts is the one place that turns
// them into client options (through kafkaconn, as the agent does).
type clusterFlags struct {
	prefix    string // "source" or "destination"
	bootstrap string
	security  securityFlags
}

func (f *clusterFlags) register(fs *flag.FlagSet, prefix string) {
	f.prefix = prefix
	fs.StringVar(&f.bootstrap, prefix+"-bootstrap", "", prefix+" cluster HOST:PORT,... (required)")
	f.security = clusterSecurityFlags(fs, prefix, "kmirror verify")
}

// opts checks the flags and returns the client options for the cluster.
func (f *clusterFlags) opts() ([]kgo.Opt, error) {
	name := "--" + f.prefix + "-bootstrap"
	if strings.TrimSpace(f.bootstrap) == "" {
		return nil, fmt.Errorf("%s is required", name)
	}
	var seeds []string
	for s := range strings.SplitSeq(f.bootstrap, ",") {
		s = strings.TrimSpace(s)
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%s %q: %q is not HOST:PORT", name, f.bootstrap, s)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%s %q: %q has no valid port", name, f.bootstrap, s)
		}
		seeds = append(seeds, s)
	}
	src := mirrorapi.Source{BootstrapServers: seeds}
	if err := f.security.apply(&src); err != nil {
		return nil, err
	}
	opts, err := kafkaconn.Options(f.prefix, src, nil)
	if err != nil {
		return nil, err
	}
	return append(opts, kgo.ClientID("kmirror-verify")), nil
}

// partitionList is a repeatable --partition flag that also takes comma
// lists: --partition 0 --partition 2,3.
type partitionList []int32

func (p *partitionList) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, v := range *p {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}

func (p *partitionList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a partition number", s)
		}
		if !slices.Contains(*p, int32(n)) {
			*p = append(*p, int32(n))
		}
	}
	return nil
}

// usageError marks a bad command line: exit status 2.
func usageError(format string, args ...any) error {
	return &exitStatus{Code: 2, Err: fmt.Errorf(format, args...)}
}

func verifyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kmirror verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var src, dst clusterFlags
	src.register(fs, "source")
	dst.register(fs, "destination")
	topic := fs.String("topic", "", "topic to compare, under the same name on both clusters (required)")
	var parts partitionList
	fs.Var(&parts, "partition", "partition to compare; repeat or give a comma list (default: every partition of either side)")
	from := fs.Int64("from", 0, "first offset to compare")
	to := fs.Int64("to", 0, "compare offsets below this one (0 = up to the end of the shorter log)")
	isolation := fs.String("isolation", "both", "both, read_committed or read_uncommitted")
	keyAware := fs.Bool("key-aware", false, "compacted topics: a record on one side only is fine if a later record with its key is on both")
	allowLag := fs.Bool("allow-lag", false, "accept a destination that ends before the source (a mirror catching up)")
	maxMismatches := fs.Int("max-mismatches", verify.DefaultMaxMismatches, "mismatches to print (0 = all); all are counted")
	output := fs.String("output", "text", "text or json")
	toLMO := fs.String("to-last-mirrored", "", "MIRROR: compare each partition of the stopped topic up to its last mirrored offset in MIRROR, read from the agent (--agent); what either side took after the failover is left out")
	addr, token := agentFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitStatus{Code: 2} // the flag package already printed the error and the usage
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q: verify takes only flags", fs.Arg(0))
	}

	srcOpts, err := src.opts()
	if err != nil {
		return usageError("%v", err)
	}
	dstOpts, err := dst.opts()
	if err != nil {
		return usageError("%v", err)
	}
	opts := verify.Options{
		Topic:    strings.TrimSpace(*topic),
		From:     *from,
		To:       *to,
		KeyAware: *keyAware,
		AllowLag: *allowLag,
	}
	switch {
	case opts.Topic == "":
		return usageError("--topic is required")
	case *from < 0:
		return usageError("--from %d: offsets start at 0", *from)
	case *to < 0:
		return usageError("--to %d: use an offset above --from, or 0 for no bound", *to)
	case *to > 0 && *to <= *from:
		return usageError("--to %d must be above --from %d", *to, *from)
	case *to > 0 && *toLMO != "":
		return usageError("--to and --to-last-mirrored both bound the range: give one")
	case *maxMismatches < 0:
		return usageError("--max-mismatches %d: use 0 (all) or more", *maxMismatches)
	case *output != "text" && *output != "json":
		return usageError("--output %q: use text or json", *output)
	}
	if len(parts) > 0 { // nil: every partition of either side
		opts.Partitions = slices.Sorted(slices.Values(parts))
	}
	switch *isolation {
	case "both":
	case string(verify.ReadCommitted), string(verify.ReadUncommitted):
		opts.Isolation = []verify.Isolation{verify.Isolation(*isolation)}
	default:
		return usageError("--isolation %q: use both, read_committed or read_uncommitted", *isolation)
	}
	opts.MaxMismatches = *maxMismatches
	if opts.MaxMismatches == 0 {
		opts.MaxMismatches = -1 // verify: negative keeps all
	}
	if *toLMO != "" {
		if err := boundToLastMirrored(ctx, newClient(*addr, *token), *toLMO, &opts); err != nil {
			return err
		}
	}

	srcCl, err := kgo.NewClient(srcOpts...)
	if err != nil {
		return fmt.Errorf("--source-bootstrap: %w", err)
	}
	defer srcCl.Close()
	dstCl, err := kgo.NewClient(dstOpts...)
	if err != nil {
		return fmt.Errorf("--destination-bootstrap: %w", err)
	}
	defer dstCl.Close()

	rep, err := verify.Compare(ctx, srcCl, dstCl, opts)
	if err != nil {
		// Compare's errors name the side and the topic; what was compared
		// before the error is not a verdict, so it is not printed.
		return err
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(jsonReport(rep))
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if !rep.OK() {
		return &exitStatus{Code: 1} // the report says what differs
	}
	return nil
}

// boundToLastMirrored bounds each partition of opts.Topic to its last
// mirrored offset + 1 in mirror, as the agent reports it, and limits the
// comparison to the partitions the mirror has (of those asked for). Every
// one must be STOPPED: a topic still mirroring has no fixed last offset.
func boundToLastMirrored(ctx context.Context, cl *mirrorapi.Client, mirror string, opts *verify.Options) error {
	offs, err := cl.Offsets(ctx, mirror, opts.Topic)
	if err != nil {
		return fmt.Errorf("--to-last-mirrored %s: reading the last mirrored offsets from the agent: %w", mirror, err)
	}
	var parts []mirrorapi.PartitionOffsets
	for _, t := range offs.Topics {
		if t.Name == opts.Topic {
			parts = t.Partitions
		}
	}
	if len(parts) == 0 {
		return usageError("--to-last-mirrored %s: the mirror has no topic %q (kmirror offsets --mirror %s lists its topics)", mirror, opts.Topic, mirror)
	}
	bounds := map[int32]int64{}
	for _, p := range parts {
		if opts.Partitions != nil && !slices.Contains(opts.Partitions, p.Partition) {
			continue
		}
		if p.State != mirrorapi.StateStopped {
			return usageError("--to-last-mirrored %s: partition %d of %s is %s, and only a stopped partition's last mirrored offset is final: "+
				"stop the topic first (kmirror stop), or compare a topic still mirroring with --allow-lag", mirror, p.Partition, opts.Topic, p.State)
		}
		bounds[p.Partition] = p.LastMirroredOffset + 1
	}
	for _, p := range opts.Partitions {
		if _, ok := bounds[p]; !ok {
			return usageError("--partition %d: mirror %s has no partition %d of %s", p, mirror, p, opts.Topic)
		}
	}
	opts.PartitionTo = bounds
	opts.Partitions = slices.Sorted(maps.Keys(bounds))
	return nil
}

// The JSON report: verify.Report with stable snake_case names.
type (
	verifyJSON struct {
		Topic           string                `json:"topic"`
		OK              bool                  `json:"ok"`
		TotalMismatches int64                 `json:"total_mismatches"`
		Partitions      []verifyPartitionJSON `json:"partitions"`
		Mismatches      []verifyMismatchJSON  `json:"mismatches"`
	}
	verifyPartitionJSON struct {
		Partition          int32             `json:"partition"`
		Isolation          verify.Isolation  `json:"isolation"`
		From               int64             `json:"from"`
		To                 int64             `json:"to"`
		Compared           int64             `json:"compared"`
		SourceVisible      int64             `json:"source_visible"`
		DestinationVisible int64             `json:"destination_visible"`
		Mismatches         int64             `json:"mismatches"`
		Superseded         int64             `json:"superseded"`
		Source             verifyOffsetsJSON `json:"source"`
		Destination        verifyOffsetsJSON `json:"destination"`
	}
	verifyOffsetsJSON struct {
		LogStart      int64 `json:"log_start"`
		HighWatermark int64 `json:"high_watermark"`
		LastStable    int64 `json:"last_stable"`
	}
	verifyMismatchJSON struct {
		Partition   int32            `json:"partition"`
		Offset      int64            `json:"offset"`
		Isolation   verify.Isolation `json:"isolation,omitempty"`
		Kind        verify.Kind      `json:"kind"`
		Source      string           `json:"source"`
		Destination string           `json:"destination"`
	}
)

func jsonReport(r verify.Report) verifyJSON {
	out := verifyJSON{
		Topic:           r.Topic,
		OK:              r.OK(),
		TotalMismatches: r.TotalMismatches,
		Partitions:      make([]verifyPartitionJSON, 0, len(r.Partitions)),
		Mismatches:      make([]verifyMismatchJSON, 0, len(r.Mismatches)),
	}
	offsets := func(o verify.Offsets) verifyOffsetsJSON {
		return verifyOffsetsJSON{LogStart: o.LogStart, HighWatermark: o.HighWatermark, LastStable: o.LastStable}
	}
	for _, p := range r.Partitions {
		out.Partitions = append(out.Partitions, verifyPartitionJSON{
			Partition: p.Partition, Isolation: p.Isolation, From: p.From, To: p.To,
			Compared: p.Compared, SourceVisible: p.SourceVisible, DestinationVisible: p.DestinationVisible,
			Mismatches: p.Mismatches, Superseded: p.Superseded,
			Source: offsets(p.Source), Destination: offsets(p.Destination),
		})
	}
	for _, m := range r.Mismatches {
		out.Mismatches = append(out.Mismatches, verifyMismatchJSON{
			Partition: m.Partition, Offset: m.Offset, Isolation: m.Isolation, Kind: m.Kind,
			Source: m.Source, Destination: m.Destination,
		})
	}
	return out
}
