package e2e

// Metadata sync (DESIGN §5, KIP-1279 §6) between two dev clusters: consumer
// groups resume on the destination after a failover, active and filtered
// groups are left alone, topic configs follow the source and drift is
// reverted, ACLs follow the source without touching foreign ones, and a
// failing kind does not stop the others.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/metasync"
	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/workload"
)

// syncInterval is the metadata refresh interval of these tests.
const syncInterval = 300 * time.Millisecond

// waitFor polls cond until it holds, failing with its last answer and
// Describe after timeout.
func waitFor(t *testing.T, a *agent, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	if ok, why := poll(timeout, cond); !ok {
		t.Fatalf("%s: not within %v: %s\nDescribe:\n%s", what, timeout, why, a.describe())
	}
}

// poll calls cond every pollEvery until it holds or timeout passes, and
// returns its last answer.
func poll(timeout time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok || time.Now().After(deadline) {
			return ok, why
		}
		time.Sleep(pollEvery)
	}
}

// commitOffsets commits offsets of group on topic as an admin does (no
// member, generation -1).
func commitOffsets(t *testing.T, adm *kadm.Client, group, topic string, offsets map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, o := range offsets {
		os.AddOffset(topic, p, o, -1)
	}
	resp, err := adm.CommitOffsets(testCtx(t), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("committing %v for group %s: %v", offsets, group, err)
	}
}

// groupOffsets returns group's committed offsets on topic; nil when the
// cluster does not know the group.
func groupOffsets(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	resp, err := adm.FetchOffsets(testCtx(t), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("fetching the offsets of group %s: %v", group, err)
	}
	var out map[int32]int64
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			if out == nil {
				out = map[int32]int64{}
			}
			out[o.Partition] = o.At
		}
	})
	return out
}

func listGroups(t *testing.T, adm *kadm.Client) map[string]string {
	t.Helper()
	gs, err := adm.ListGroups(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, g := range gs {
		out[name] = g.State
	}
	return out
}

// syncStatus returns the mirror's sync status.
func (a *agent) syncStatus() mirrorapi.MetadataSync {
	m, _ := a.status()
	return m.Sync
}

// drCopy is what a consumer read: the offsets per partition, each as many
// times as it was read.
type drCopy map[int32]map[int64]int

func (c drCopy) add(r *kgo.Record) {
	if c[r.Partition] == nil {
		c[r.Partition] = map[int64]int{}
	}
	c[r.Partition][r.Offset]++
}

// TestMetaSyncDRDrill: a consumer group consumes on the source, committing
// once per refresh interval, and dies without a last commit; the topic fails
// over; the same group on the destination resumes at the offsets it last
// committed on the source: no destination record is skipped, and the only
// duplicates are what it read after its last commit. With the source gone
// at the failover, the last periodic sync is what the group resumes from.
func TestMetaSyncDRDrill(t *testing.T) {
	for _, sourceGone := range []bool{false, true} {
		name := "source up"
		if sourceGone {
			name = "source gone"
		}
		t.Run(name, func(t *testing.T) { drDrill(t, sourceGone) })
	}
}

func drDrill(t *testing.T, sourceGone bool) {
	const parts, group = 3, "billing"
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: parts})
	spec := p.spec(lifecycleTopic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) { c.StopTimeout = 10 * time.Second })
	// Plain records only: every destination offset is one a consumer
	// reads, so that a skipped offset is a skipped record.
	prod := workload.NewProducer(p.srcOpts(), workload.Spec{Topic: lifecycleTopic, Partitions: parts, Seed: 5}, 1500)
	stopProducing := runProducer(t, prod)

	// The application: consumes on the source and commits every
	// syncInterval, recording what it read and what it committed.
	cons := failClient(t, kgo.SeedBrokers(p.src.Bootstrap()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(lifecycleTopic),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	read := drCopy{}
	var committed map[int32]int64
	var history []map[int32]int64 // every successful commit
	var mu sync.Mutex
	stopApp := make(chan struct{})
	appDone := make(chan struct{})
	var perInterval []int
	var noCommit atomic.Bool
	go func() {
		defer close(appDone)
		lastCommit, sinceCommit := time.Now(), 0
		for {
			select {
			case <-stopApp:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			fs := cons.PollFetches(ctx)
			cancel()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { read.add(r); sinceCommit++ })
			mu.Unlock()
			if time.Since(lastCommit) < syncInterval || noCommit.Load() {
				continue
			}
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			err := cons.CommitUncommittedOffsets(ctx)
			cancel()
			if err != nil {
				continue
			}
			c := map[int32]int64{}
			for p, o := range cons.CommittedOffsets()[lifecycleTopic] {
				c[p] = o.Offset
			}
			mu.Lock()
			committed = c
			history = append(history, c)
			perInterval = append(perInterval, sinceCommit)
			mu.Unlock()
			lastCommit, sinceCommit = time.Now(), 0
		}
	}()
	p.waitProgress(t, a, lifecycleTopic, map[int32]int64{0: 300, 1: 300, 2: 300}, failWait)
	waitFor(t, a, "the application's commits synced", failWait, func() (bool, string) {
		mu.Lock()
		n := len(history)
		mu.Unlock()
		got := groupOffsets(t, p.dstAdm, group, lifecycleTopic)
		return n >= 5 && len(got) == parts, fmt.Sprintf("%d commits on the source, destination offsets %v", n, got)
	})

	// The disaster: the application stops committing, reads on for a
	// while, and dies; the producers stop.
	noCommit.Store(true)
	time.Sleep(syncInterval * 2 / 3)
	stopProducing()
	time.Sleep(100 * time.Millisecond)
	close(stopApp)
	<-appDone
	cons.Close()
	if sourceGone {
		time.Sleep(2 * syncInterval) // the periodic sync has seen the last commit, or not: either is fine
		p.src.Close()
	}
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, lifecycleTopic, parts, partition.Stopped, failWait)
	dstB, err := listBounds(testCtx(t), p.dstAdm, lifecycleTopic)
	if err != nil {
		t.Fatal(err)
	}
	synced := groupOffsets(t, p.dstAdm, group, lifecycleTopic)
	mu.Lock()
	last := committed
	mu.Unlock()
	for part := range int32(parts) {
		want := metasync.ClampOffset(last[part], dstB[part][0], dstB[part][1])
		if !sourceGone && synced[part] != want {
			t.Errorf("partition %d: the group resumes on the destination at %d; its last commit on the source was %d (destination log [%d, %d)): want %d",
				part, synced[part], last[part], dstB[part][0], dstB[part][1], want)
		}
		if sourceGone {
			// The last periodic sync: one of the source's commits.
			ok := false
			for _, h := range history {
				ok = ok || metasync.ClampOffset(h[part], dstB[part][0], dstB[part][1]) == synced[part]
			}
			if !ok || synced[part] > want {
				t.Errorf("partition %d: the group resumes on the destination at %d, which is no commit of the source (last %d)", part, synced[part], last[part])
			}
		}
		if ps[part].LastMirrored != dstB[part][1]-1 {
			t.Errorf("partition %d: last mirrored offset %d, destination end %d", part, ps[part].LastMirrored, dstB[part][1])
		}
	}

	// The application moves to the destination with the same group.
	dcons := failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(lifecycleTopic),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.DisableAutoCommit())
	again := drCopy{}
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	reached := func() bool {
		for part := range int32(parts) {
			if synced[part] < dstB[part][1] && again[part][dstB[part][1]-1] == 0 {
				return false
			}
		}
		return true
	}
	for !reached() {
		fs := dcons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the group on the destination did not reach the destination ends %v: read %d records", dstB, len(again))
		}
		fs.EachRecord(again.add)
	}

	var dups, total int
	for part := range int32(parts) {
		first := int64(-1)
		for o := range again[part] {
			if first < 0 || o < first {
				first = o
			}
		}
		if first >= 0 && first != synced[part] {
			t.Errorf("partition %d: the destination consumer started at %d, the synced offset is %d", part, first, synced[part])
		}
		for o := dstB[part][0]; o < dstB[part][1]; o++ {
			n := read[part][o] + again[part][o]
			if n == 0 {
				t.Errorf("partition %d: offset %d was skipped: read neither on the source nor on the destination", part, o)
				break
			}
			if read[part][o] > 0 && again[part][o] > 0 {
				dups++
			}
		}
		total += int(dstB[part][1] - dstB[part][0])
	}
	after := 0 // read on the source after the last commit, and mirrored
	for part := range int32(parts) {
		for o := range read[part] {
			if o >= last[part] && o < dstB[part][1] {
				after++
			}
		}
	}
	steady := perInterval[len(perInterval)-1] // the first intervals read the backlog
	t.Logf("DR drill (%s): %d destination records, none skipped; %d duplicates after the failover; the group read %d records after its last commit on the source, and about %d per refresh interval (%v)",
		map[bool]string{false: "source up", true: "source gone"}[sourceGone], total, dups, after, steady, syncInterval)
	if !sourceGone {
		// Exactly what was read after the last commit.
		if dups != after || dups == 0 {
			t.Errorf("%d duplicates, but the application read %d records after its last commit (want as many, and some)", dups, after)
		}
	}
}

// TestMetaSyncGroupFilters: only groups matching the include list and not
// the exclude list appear on the destination; a group with an active member
// there keeps its own offsets until the member leaves; a synced offset never
// moves backwards and never passes the destination's log end.
func TestMetaSyncGroupFilters(t *testing.T) {
	const parts = 2
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: parts})
	src := p.producer(t)
	for part := range int32(parts) {
		produceN(t, src, lifecycleTopic, part, 100, "g", false)
	}
	spec := p.spec(lifecycleTopic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	spec.GroupsInclude = []string{"app-.*"}
	spec.GroupsExclude = []string{"app-excluded"}
	a := p.startAgent(t, agentOpts{apply: &spec})
	p.waitMirrored(t, a, lifecycleTopic, failWait)

	// app-active has a member on the destination, which committed 5, 5.
	member := failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.ConsumerGroup("app-active"), kgo.ConsumeTopics(lifecycleTopic),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	waitFor(t, a, "app-active joined on the destination", failWait, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		member.PollFetches(ctx)
		cancel()
		st := listGroups(t, p.dstAdm)["app-active"]
		return st == "Stable", "state " + st
	})
	var commitErr error
	member.CommitOffsetsSync(testCtx(t), map[string]map[int32]kgo.EpochOffset{
		lifecycleTopic: {0: {Epoch: -1, Offset: 5}, 1: {Epoch: -1, Offset: 5}},
	}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		commitErr = err
		if err == nil {
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					commitErr = errors.Join(commitErr, kerr.ErrorForCode(rp.ErrorCode))
				}
			}
		}
	})
	if commitErr != nil {
		t.Fatalf("the destination member's commit: %v", commitErr)
	}
	// Keep the member alive (heartbeats run in the background).

	commitOffsets(t, p.srcAdm, "app-1", lifecycleTopic, map[int32]int64{0: 40, 1: 60})
	commitOffsets(t, p.srcAdm, "app-excluded", lifecycleTopic, map[int32]int64{0: 10})
	commitOffsets(t, p.srcAdm, "other", lifecycleTopic, map[int32]int64{0: 20})
	commitOffsets(t, p.srcAdm, "app-active", lifecycleTopic, map[int32]int64{0: 70, 1: 70})

	waitFor(t, a, "app-1 synced", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, "app-1", lifecycleTopic)
		return got[0] == 40 && got[1] == 60, fmt.Sprint(got)
	})
	settle := func() { time.Sleep(5 * syncInterval) } // absence can only be shown by waiting several syncs
	settle()
	gs := listGroups(t, p.dstAdm)
	for _, g := range []string{"app-excluded", "other"} {
		if _, ok := gs[g]; ok {
			t.Errorf("group %s, outside the filters, is on the destination: %v", g, gs)
		}
	}
	if got := groupOffsets(t, p.dstAdm, "app-active", lifecycleTopic); got[0] != 5 || got[1] != 5 {
		t.Errorf("app-active, active on the destination, was overwritten: %v", got)
	}
	if s := a.syncStatus().Groups; s.LastError != "" || s.Items != 1 || s.LastSuccess == "" {
		t.Errorf("groups sync status %+v, want 1 group in sync and no error", s)
	}

	// Never backwards: the source moves p0 back and p1 on.
	commitOffsets(t, p.srcAdm, "app-1", lifecycleTopic, map[int32]int64{0: 10, 1: 80})
	waitFor(t, a, "app-1 p1 synced forward", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, "app-1", lifecycleTopic)
		return got[1] == 80, fmt.Sprint(got)
	})
	settle()
	if got := groupOffsets(t, p.dstAdm, "app-1", lifecycleTopic); got[0] != 40 {
		t.Errorf("app-1 p0 moved backwards on the destination: %v", got)
	}

	// Clamped to the destination's end: paused, the source goes on.
	if err := a.co.PauseTopics(testCtx(t), mirrorName, []string{lifecycleTopic}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, lifecycleTopic, parts, partition.Paused, failWait)
	produceN(t, src, lifecycleTopic, 0, 50, "ahead", false)
	commitOffsets(t, p.srcAdm, "app-1", lifecycleTopic, map[int32]int64{0: 150, 1: 80})
	waitFor(t, a, "app-1 p0 synced up to the destination end", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, "app-1", lifecycleTopic)
		return got[0] == 100, fmt.Sprint(got)
	})
	settle()
	if got := groupOffsets(t, p.dstAdm, "app-1", lifecycleTopic); got[0] != 100 {
		t.Errorf("app-1 p0 on the destination %d, want 100 (the destination end; the source committed 150)", got[0])
	}

	// The member leaves: app-active is synced.
	member.Close()
	waitFor(t, a, "app-active synced once inactive", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, "app-active", lifecycleTopic)
		return got[0] == 70 && got[1] == 70, fmt.Sprint(got)
	})
}

// topicConfigs returns the configs set on topic itself.
func topicConfigs(t *testing.T, adm *kadm.Client, topic string) map[string]string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range rc.Configs {
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			out[c.Key] = c.MaybeValue()
		}
	}
	return out
}

func alterConfigs(t *testing.T, adm *kadm.Client, topic string, set map[string]string, del ...string) {
	t.Helper()
	var alter []kadm.AlterConfig
	for _, k := range slices.Sorted(maps.Keys(set)) {
		alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(set[k])})
	}
	for _, k := range del {
		alter = append(alter, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
	}
	resp, err := adm.AlterTopicConfigs(testCtx(t), alter, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = resp.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("altering the configs of %s: %v", topic, err)
	}
}

// TestMetaSyncConfigs: source configs set, changed and deleted follow on the
// destination; excluded keys stay as the destination has them; the
// invariant's keys are never synced; a destination-side change to a synced
// key is reverted and reported as drift; a stopped topic's configs are the
// destination's own.
func TestMetaSyncConfigs(t *testing.T) {
	p := newPair(t, pairOpts{topic: lifecycleTopic, partitions: 1})
	alterConfigs(t, p.srcAdm, lifecycleTopic, map[string]string{"retention.ms": "3600000", "segment.bytes": "1048576", "min.insync.replicas": "2"})
	produceN(t, p.producer(t), lifecycleTopic, 0, 20, "c", false)
	spec := p.spec(lifecycleTopic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) { c.StopTimeout = 10 * time.Second })
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	want := func(what string, ok func(map[string]string) bool) map[string]string {
		t.Helper()
		var got map[string]string
		waitFor(t, a, what, failWait, func() (bool, string) {
			got = topicConfigs(t, p.dstAdm, lifecycleTopic)
			return ok(got), fmt.Sprint(got)
		})
		return got
	}
	got := want("source configs on the destination", func(c map[string]string) bool {
		return c["retention.ms"] == "3600000" && c["segment.bytes"] == "1048576"
	})
	if v, ok := got["min.insync.replicas"]; ok {
		t.Errorf("min.insync.replicas (excluded) copied to the destination: %q", v)
	}

	// The destination sets an excluded key of its own; the source
	// changes, adds and deletes keys, and tries an invariant key.
	alterConfigs(t, p.dstAdm, lifecycleTopic, map[string]string{"min.insync.replicas": "1"})
	alterConfigs(t, p.srcAdm, lifecycleTopic, map[string]string{"retention.ms": "7200000", "retention.bytes": "1000000", "compression.type": "gzip", "min.insync.replicas": "3"}, "segment.bytes")
	got = want("source changes on the destination", func(c map[string]string) bool {
		_, seg := c["segment.bytes"]
		return c["retention.ms"] == "7200000" && c["retention.bytes"] == "1000000" && !seg
	})
	if got["min.insync.replicas"] != "1" || got["compression.type"] != "producer" {
		t.Errorf("destination min.insync.replicas %q (want its own 1), compression.type %q (want the invariant's producer)", got["min.insync.replicas"], got["compression.type"])
	}
	if s := a.syncStatus().Configs; s.LastError != "" || s.Items != 1 || len(s.Drift) != 0 {
		t.Errorf("configs sync status %+v, want 1 topic in sync, no error, no drift", s)
	}

	// Drift: the destination changes a synced key and sets one the source
	// does not have.
	alterConfigs(t, p.dstAdm, lifecycleTopic, map[string]string{"retention.ms": "1000", "segment.ms": "5000"})
	want("drift reverted", func(c map[string]string) bool {
		_, segms := c["segment.ms"]
		return c["retention.ms"] == "7200000" && !segms && c["min.insync.replicas"] == "1"
	})
	// (The status is recorded right after the destination changed.)
	waitFor(t, a, "drift reported", failWait, func() (bool, string) {
		drift := strings.Join(a.syncStatus().Configs.Drift, "\n")
		for _, d := range []string{`retention.ms was "1000" on the destination, set back to "7200000"`, `segment.ms was "5000" on the destination, set back to (not set`} {
			if !strings.Contains(drift, d) {
				return false, fmt.Sprintf("drift reported: %q, want it to say %q", drift, d)
			}
		}
		return true, ""
	})

	// Stopped, the topic's configs are the destination's.
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, lifecycleTopic, 1, partition.Stopped, failWait)
	alterConfigs(t, p.dstAdm, lifecycleTopic, map[string]string{"retention.ms": "1234"})
	time.Sleep(5 * syncInterval)
	if got := topicConfigs(t, p.dstAdm, lifecycleTopic); got["retention.ms"] != "1234" {
		t.Errorf("retention.ms of a stopped topic changed by the sync: %q", got["retention.ms"])
	}
}

// aclStrings lists a cluster's ACLs, one string each.
func aclStrings(t *testing.T, cl *kgo.Client) []string {
	t.Helper()
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(testCtx(t), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("describing ACLs: %v", err)
	}
	var out []string
	for _, r := range resp.Resources {
		for _, a := range r.ACLs {
			out = append(out, fmt.Sprintf("%s %s %s:%s %s", a.PermissionType, a.Operation, r.ResourceType, r.ResourceName, a.Principal))
		}
	}
	slices.Sort(out)
	return out
}

func changeACL(t *testing.T, adm *kadm.Client, create bool, principal string, ops ...kadm.ACLOperation) {
	t.Helper()
	b := kadm.NewACLs().Topics(lifecycleTopic).ResourcePatternType(kadm.ACLPatternLiteral).Allow(principal).AllowHosts("*").Operations(ops...)
	var err error
	if create {
		var rs kadm.CreateACLsResults
		if rs, err = adm.CreateACLs(testCtx(t), b); err == nil {
			for _, r := range rs {
				err = errors.Join(err, r.Err)
			}
		}
	} else {
		var rs kadm.DeleteACLsResults
		if rs, err = adm.DeleteACLs(testCtx(t), b); err == nil {
			for _, r := range rs {
				err = errors.Join(err, r.Err)
			}
		}
	}
	if err != nil {
		t.Fatalf("ACL change (create %v) for %s %v: %v", create, principal, ops, err)
	}
}

// TestMetaSyncACLs: ACLs selected by the include rules follow the source's
// creates and deletes, also across an agent restart; others never reach the
// destination; ACLs the agent did not create stay. The application's synced
// WRITE takes effect at the failover: refused before (the read-only DENY
// wins), accepted after.
func TestMetaSyncACLs(t *testing.T) {
	const app = "User:" + appUser
	p := &pair{
		src: devcluster.StartT(t, append(securedOpts("src"), devcluster.SASLUser("bob", "bob-pass"), devcluster.KfakeOptions(kfake.SeedTopics(1, lifecycleTopic)))...),
		dst: devcluster.StartT(t, securedOpts("dst")...),
	}
	p.srcCl = failClient(t, p.srcAgentOpts(true)...)
	p.dstCl = failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass), kgo.MetadataMinAge(100*time.Millisecond))
	p.srcAdm, p.dstAdm = kadm.NewClient(p.srcCl), kadm.NewClient(p.dstCl)

	changeACL(t, p.srcAdm, true, app, kadm.OpWrite, kadm.OpDescribe, kadm.OpRead, kadm.OpAlterConfigs)
	changeACL(t, p.srcAdm, true, "User:bob", kadm.OpRead)
	// The destination has ACLs of its own: one the source has too, one
	// it does not.
	changeACL(t, p.dstAdm, true, app, kadm.OpAlterConfigs, kadm.OpDescribeConfigs)
	produceN(t, failClient(t, append(p.srcAgentOpts(true), kgo.RecordPartitioner(kgo.ManualPartitioner()))...), lifecycleTopic, 0, 20, "acl", false)

	start := func() *agent {
		spec := p.spec(lifecycleTopic)
		spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
		spec.ACLInclude = []string{"TOPIC;orde.s;*;ALLOW;" + app}
		return p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) {
			c.Destination = []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass)}
			c.SourceOpts = func(s coordinator.Source) []kgo.Opt {
				return []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...), saslPlain(agentUser, agentPass)}
			}
			c.StopTimeout = 10 * time.Second
		})
	}
	a := start()
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	waitReadOnly(t, a, lifecycleTopic, true)
	acl := func(op string) string { return "ALLOW " + op + " TOPIC:orders " + app }
	deny := "DENY WRITE TOPIC:orders User:*"
	wantACLs := func(what string, want ...string) {
		t.Helper()
		slices.Sort(want)
		waitFor(t, a, what, failWait, func() (bool, string) {
			got := aclStrings(t, p.dstCl)
			return slices.Equal(got, want), fmt.Sprintf("destination ACLs %q, want %q", got, want)
		})
	}
	wantACLs("app's ACLs synced", acl("WRITE"), acl("DESCRIBE"), acl("READ"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)
	waitFor(t, a, "ACL sync status", failWait, func() (bool, string) {
		s := a.syncStatus().ACLs
		return s.LastError == "" && s.Items == 4, fmt.Sprintf("ACL sync status %+v, want the 4 selected source ACLs in sync", s)
	})
	assertRefused(t, p.dst, lifecycleTopic, 1, "mirroring, with app's WRITE synced")

	// Deletes follow, but not for the ACL the destination had already.
	changeACL(t, p.srcAdm, false, app, kadm.OpRead, kadm.OpAlterConfigs)
	wantACLs("app's READ deleted", acl("WRITE"), acl("DESCRIBE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)
	time.Sleep(5 * syncInterval)
	wantACLs("foreign ACLs kept", acl("WRITE"), acl("DESCRIBE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)

	// A restarted agent still knows what it created.
	changeACL(t, p.srcAdm, true, app, kadm.OpCreate)
	wantACLs("app's CREATE synced", acl("WRITE"), acl("DESCRIBE"), acl("CREATE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)
	a.stop()
	changeACL(t, p.srcAdm, false, app, kadm.OpCreate)
	a = start()
	wantACLs("app's CREATE deleted by a restarted agent", acl("WRITE"), acl("DESCRIBE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)

	// The failover releases the DENY: app's synced WRITE takes effect.
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{lifecycleTopic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, lifecycleTopic, 1, partition.Stopped, failWait)
	waitReadOnly(t, a, lifecycleTopic, false)
	r, err := appWrite(t, appClient(t, p.dst), lifecycleTopic, 0, "after failover")
	if err != nil || r.Offset != ps[0].LastMirrored+1 {
		t.Fatalf("app writing the failed-over topic with its synced ACLs: %v (%v), want offset %d", err, r, ps[0].LastMirrored+1)
	}
	if got := aclStrings(t, p.dstCl); slices.Contains(got, "ALLOW READ TOPIC:orders User:bob") {
		t.Errorf("bob's ACL, outside the rules, is on the destination: %q", got)
	}
}

// TestMetaSyncACLFailureIsolated: with a destination without authorizer the
// ACL sync fails, says why in describe and counts in the metrics, while
// config and group sync go on.
func TestMetaSyncACLFailureIsolated(t *testing.T) {
	p := &pair{
		src: devcluster.StartT(t, append(securedOpts("src"), devcluster.KfakeOptions(kfake.SeedTopics(1, lifecycleTopic)))...),
		dst: devcluster.StartT(t, devcluster.Name("dst")),
	}
	p.srcCl = failClient(t, p.srcAgentOpts(true)...)
	p.dstCl = failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.MetadataMinAge(100*time.Millisecond))
	p.srcAdm, p.dstAdm = kadm.NewClient(p.srcCl), kadm.NewClient(p.dstCl)
	allowApp(t, p.srcAdm, lifecycleTopic)
	alterConfigs(t, p.srcAdm, lifecycleTopic, map[string]string{"retention.ms": "3600000"})
	produceN(t, failClient(t, append(p.srcAgentOpts(true), kgo.RecordPartitioner(kgo.ManualPartitioner()))...), lifecycleTopic, 0, 30, "f", false)

	spec := p.spec(lifecycleTopic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) {
		c.SourceOpts = func(s coordinator.Source) []kgo.Opt {
			return []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...), saslPlain(agentUser, agentPass)}
		}
	})
	p.waitMirrored(t, a, lifecycleTopic, failWait)
	commitOffsets(t, p.srcAdm, "app-1", lifecycleTopic, map[int32]int64{0: 25})

	waitFor(t, a, "configs and groups synced while ACL sync fails", failWait, func() (bool, string) {
		s := a.syncStatus()
		got := groupOffsets(t, p.dstAdm, "app-1", lifecycleTopic)
		cfg := topicConfigs(t, p.dstAdm, lifecycleTopic)
		return s.ACLs.Errors >= 2 && got[0] == 25 && cfg["retention.ms"] == "3600000" && s.Configs.LastError == "" && s.Groups.LastError == "",
			fmt.Sprintf("sync %+v, group offsets %v, retention.ms %q", s, got, cfg["retention.ms"])
	})
	s := a.syncStatus()
	if !strings.Contains(s.ACLs.LastError, "no authorizer") || s.ACLs.LastSuccess != "" {
		t.Errorf("ACL sync status %+v, want an error saying the destination has no authorizer", s.ACLs)
	}
	if s.Configs.LastSuccess == "" || s.Groups.LastSuccess == "" || s.Configs.Errors != 0 || s.Groups.Errors != 0 {
		t.Errorf("configs %+v and groups %+v should have synced without errors", s.Configs, s.Groups)
	}

	c := metrics.NewCollector()
	c.SetSource(a.co)
	fams, err := metrics.Registry(c).Gather()
	if err != nil {
		t.Fatal(err)
	}
	errs := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "kmirror_sync_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					errs[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if errs["acls"] < 2 || errs["configs"] != 0 || errs["groups"] != 0 {
		t.Errorf("kmirror_sync_errors_total by kind %v, want acls >= 2 and no config or group errors", errs)
	}
	t.Logf("ACL sync: %s; kmirror_sync_errors_total %v", s.ACLs.LastError, errs)
}
