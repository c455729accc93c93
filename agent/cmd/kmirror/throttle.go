package main

// kmirror throttle: a mirror's replication throttle through the agent's API
// (KIP-1279's mirror.replication.throttled.rate and .replicas, and its
// source-side consumer_byte_rate example). With --rate it sets or replaces
// the throttle, with --remove it lifts it, with neither it shows it.

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func init() {
	register("throttle", "set (--rate), show or remove (--remove) a mirror's replication byte-rate throttle", runThrottle)
}

// rateUnits are the suffixes --rate takes: Kafka's byte rates are decimal
// or binary multiples of bytes per second.
var rateUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1}, {"", 1},
}

// parseRate reads a byte rate such as 1048576, 1MiB, 1.5MB or 500KiB/s.
func parseRate(s string) (int64, error) {
	v := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "/s"))
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil {
			break
		}
		b := math.Round(n * u.mult)
		if b < 1 || b > math.MaxInt64/2 {
			return 0, fmt.Errorf("--rate %q: give a rate of at least 1 byte per second", s)
		}
		return int64(b), nil
	}
	return 0, fmt.Errorf("--rate %q: give bytes per second, such as 1048576, 1MiB, 500KiB or 2MB", s)
}

// humanRate renders bytes per second with a binary unit.
func humanRate(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB/s", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB/s", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB/s", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B/s", b)
}

func runThrottle(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror throttle", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the mirror")
	rate := fs.String("rate", "", "set the ceiling in bytes per second: 1048576, 1MiB, 500KiB, 2MB")
	var parts listFlag
	fs.Var(&parts, "partition", `a throttled partition TOPIC:PARTITION (repeatable, or comma-separated), or "*" for all (the default)`)
	sourceQuota := fs.Bool("source-quota", false, "also set consumer_byte_rate on the source for the agent's client id of the mirror (kmirror-MIRROR), under the source's SASL user when it has one")
	remove := fs.Bool("remove", false, "lift the throttle (and its source quota)")
	output := outputFlag(fs)
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	cl := newClient(*addr, *token)
	switch {
	case *remove && (*rate != "" || len(parts) > 0 || *sourceQuota):
		return usageError("--remove lifts the throttle: give it without --rate, --partition or --source-quota")
	case *remove:
		if err := cl.RemoveThrottle(ctx, *mirror); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Removed the throttle of mirror %s\n", *mirror)
		return nil
	case *rate == "" && (len(parts) > 0 || *sourceQuota):
		return usageError("--rate is required to set a throttle (--partition and --source-quota go with it)")
	case *rate == "":
		t, err := cl.Throttle(ctx, *mirror)
		if mirrorapi.IsCode(err, mirrorapi.CodeThrottleNotFound) {
			if *output == "json" {
				return printJSON(nil)
			}
			fmt.Fprintf(stdout, "Mirror %s has no throttle\n", *mirror)
			return nil
		}
		if err != nil {
			return err
		}
		return printThrottle(*mirror, t, *output)
	}
	n, err := parseRate(*rate)
	if err != nil {
		return usageError("%v", err)
	}
	t := mirrorapi.Throttle{RateBytesPerSecond: n, Partitions: parts, SourceQuota: *sourceQuota}
	if err := t.Validate(); err != nil {
		return usageError("%s", strings.ReplaceAll(err.Error(), "partitions", "--partition"))
	}
	if t, err = cl.SetThrottle(ctx, *mirror, t); err != nil {
		return err
	}
	return printThrottle(*mirror, t, *output)
}

func printThrottle(mirror string, t mirrorapi.Throttle, output string) error {
	if output == "json" {
		return printJSON(t)
	}
	fmt.Fprintf(stdout, "Mirror %s %s\n", mirror, throttleSummary(t))
	if t.SourceQuota {
		entity := t.SourceQuotaEntity
		if entity == "" { // an agent from before the entity was recorded
			entity = "client-id=" + mirrorapi.SourceQuotaClientID(mirror)
		}
		fmt.Fprintf(stdout, "Source quota: consumer_byte_rate=%d for %s\n", t.RateBytesPerSecond, entity)
	}
	return nil
}

// throttleSummary is a throttle's rate and partitions, as throttle and
// describe print them.
func throttleSummary(t mirrorapi.Throttle) string {
	return fmt.Sprintf("throttled to %d bytes/s (%s) on %s", t.RateBytesPerSecond, humanRate(t.RateBytesPerSecond), strings.Join(t.Partitions, " "))
}
