package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// agentsMB is BenchmarkAgents' payload, over agentsTopics topics (one
// mirror each); KMIRROR_BENCH_AGENTS_MB changes it.
const (
	agentsMB     = 2400
	agentsTopics = 6
)

// BenchmarkAgents measures what scaling out buys: 1, 2 and 3 `kmirror
// agent` processes with coordination = "group", each limited to one core
// (GOMAXPROCS=1), copy the same six sources between the same two Kafka
// 4.4.0 clusters, in one run: as six mirrors (one topic each), and as one
// mirror of the six topics, whose partitions the group spreads as it does
// mirrors. The agents join first; then the mirrors are created through
// one of them and the group spreads them.
// MB/s over the window from a tenth of the copy to its end and the agents'
// CPU per GB, as ratios to one agent. On this 2-core machine the brokers
// share the cores with the agents, so the ratios bound what more agents
// buy here from below.
func BenchmarkAgents(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pe := startPeerEnv(b, devcluster.Kafka)
	mb := agentsMB
	if v, err := strconv.Atoi(os.Getenv("KMIRROR_BENCH_AGENTS_MB")); err == nil && v > 0 {
		mb = v
	}
	var srcs []source
	var total, stored int64
	for i := range agentsTopics {
		s := produceSource(ctx, b, pe.env, fmt.Sprintf("agents-%d", i), mb/agentsTopics)
		srcs = append(srcs, s)
		total += s.total
		stored += s.stored
	}
	figure("agents: %d sources of %d partitions, %.0f MB of batches", agentsTopics, partitions, float64(stored)/MB)
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "mirrors\tagents\tMB/s\tratio to 1\tCPU-s/GB\tratio to 1\t\n")
	for _, one := range []bool{false, true} {
		layout := fmt.Sprintf("%d mirrors", agentsTopics)
		if one {
			layout = "1 mirror"
		}
		var runs []result
		for n := 1; n <= 3; n++ {
			r := runAgents(ctx, b, pe, srcs, n, one, total, stored)
			runs = append(runs, r)
			figure("  %s, %d agent(s): %.1f MB/s over %.1fs, %.2f CPU-s/GB", layout, n, r.mbps(), r.elapsed.Seconds(), r.cpu.Seconds()/(r.bytes/1e9))
		}
		for i, r := range runs {
			fmt.Fprintf(w, "%s\t%d\t%.1f\t%.3g\t%.2f\t%.3g\t\n", layout, i+1, r.mbps(), r.mbps()/runs[0].mbps(),
				r.cpu.Seconds()/(r.bytes/1e9), (r.cpu.Seconds()/r.bytes)/(runs[0].cpu.Seconds()/runs[0].bytes))
			unit := "mirrors"
			if one {
				unit = "mirror"
			}
			b.ReportMetric(r.mbps()/runs[0].mbps(), fmt.Sprintf("x_%d_agents_1_%s", i+1, unit))
		}
	}
	w.Flush()
	figure("group mode on Kafka 4.4.0, each agent GOMAXPROCS=1 (MB/s of source batches and CPU over the window from a tenth of the copy to its end):\n%s",
		strings.TrimRight(sb.String(), "\n"))
}

// runAgents copies srcs with n group agents of a state topic of their own,
// into fresh destination topics: a mirror per source, or one mirror of them
// all.
func runAgents(ctx context.Context, b *testing.B, pe *peerEnv, srcs []source, n int, one bool, total, stored int64) result {
	b.Helper()
	for _, s := range srcs {
		if err := deleteTopic(ctx, pe.dstAdm, s.topic); err != nil {
			b.Fatal(err)
		}
		waitTopicGone(ctx, b, pe.env, s.topic)
	}
	state := fmt.Sprintf("__kmirror_state_agents%d_%d", n, agentProcs.Add(1))
	var procs []*proc
	var apis []*mirrorapi.Client
	for i := range n {
		p, api := groupAgentProc(b, pe.dstBoot, state, fmt.Sprintf("agent-%d", i))
		defer p.stop()
		procs = append(procs, p)
		apis = append(apis, mirrorapi.NewClient(api, ""))
	}
	// Every agent in the group before the mirrors exist.
	if err := waitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		st, err := apis[0].Agent(ctx)
		return err == nil && len(st.GroupMembers) == n, nil
	}); err != nil {
		b.Fatalf("%d agents did not form a group: %v", n, err)
	}
	// All at once: the group places them in one rebalance.
	var specs []mirrorapi.MirrorSpec
	for _, s := range srcs {
		if one {
			if specs == nil {
				specs = append(specs, mirrorapi.MirrorSpec{Name: "all", Source: mirrorapi.Source{BootstrapServers: pe.srcBoot}})
			}
			specs[0].Topics = append(specs[0].Topics, s.topic)
			continue
		}
		specs = append(specs, mirrorapi.MirrorSpec{Name: s.topic, Source: mirrorapi.Source{BootstrapServers: pe.srcBoot}, Topics: []string{s.topic}})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(specs))
	for _, spec := range specs {
		wg.Go(func() {
			if _, err := apis[0].Create(ctx, spec); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	done := make(chan error, n)
	for _, p := range procs {
		go func() {
			<-p.done
			done <- fmt.Errorf("an agent exited: %s", p.stderr.String())
		}()
	}
	r, err := watch{name: fmt.Sprintf("%d agents", n), total: total, stored: stored, done: done, every: peerPoll,
		progress: func() (int64, error) {
			var sum int64
			for _, s := range srcs {
				ends, err := pe.dstAdm.ListEndOffsets(ctx, s.topic)
				if err != nil {
					return sum, nil // not created yet
				}
				ends.Each(func(o kadm.ListedOffset) {
					if o.Err == nil {
						sum += o.Offset
					}
				})
			}
			return sum, nil
		},
		cpu: func() (time.Duration, error) {
			var sum time.Duration
			for _, p := range procs {
				c, err := treeCPU(p.pid())
				if err != nil {
					return 0, err
				}
				sum += c
			}
			return sum, nil
		}}.measure(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st, err := apis[0].Agent(ctx); err == nil {
		for _, m := range st.GroupMembers {
			figure("    %s ran the homes %v and %d partitions", m.AgentID, m.Mirrors, len(m.Partitions))
		}
	}
	// Handoffs during the copy stop partitions until their writes
	// returned.
	var handed float64
	for _, api := range apis {
		v, _, err := api.Metric(ctx, "kmirror_group_handoffs_total")
		if err != nil {
			b.Fatal(err)
		}
		handed += v
	}
	figure("    handoffs during the copy: %v", handed)
	return r
}

// groupAgentProc starts `kmirror agent` with coordination = "group" on
// state topic state, limited to one core, and returns it with its API URL.
func groupAgentProc(b *testing.B, dst []string, state, id string) (*proc, string) {
	b.Helper()
	addr := devclustertest.FreeAddr(b)
	cfg := agentHCL(dst, addr, state, fmt.Sprintf("agent_id     = %q\ncoordination = \"group\"\n", id))
	return startAgentProc(b, cfg, "GOMAXPROCS=1"), "http://" + addr
}
