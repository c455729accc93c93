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
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/metasync"
	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/javaclient"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/rdkafka"
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
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		return nil
	case errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.CoordinatorLoadInProgress), errors.Is(err, kerr.NotCoordinator):
		// A Kafka cluster creates __consumer_offsets at the first
		// group request: no offsets yet, and the polls ask again.
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

// waitSyncRun waits until a whole sync of kind has run after the call: a
// success recorded after now, then another. LastSuccess has whole seconds,
// and each kind runs one sync at a time, so the second began after the
// first ended, that is after the call. What a sync must leave alone (a
// filtered group, a foreign ACL, a stopped topic's configs) can only be
// shown so.
func (a *agent) waitSyncRun(t *testing.T, kind metasync.Kind) {
	t.Helper()
	status := func() mirrorapi.SyncStatus { return a.syncStatus()[kind] }
	since := time.Now().UTC().Truncate(time.Second)
	var first time.Time
	waitFor(t, a, fmt.Sprintf("a whole %s sync after now", kind), failWait, func() (bool, string) {
		s := status()
		last, err := time.Parse(time.RFC3339, s.LastSuccess)
		switch {
		case err != nil:
		case first.IsZero():
			if last.After(since) {
				first = last
			}
		case last.After(first):
			return true, ""
		}
		return false, fmt.Sprintf("%s sync status %+v", kind, s)
	})
}

// cutLink dials the source for the agent until cut, then refuses and closes
// what it dialed: the source gone as the agent sees it, while the test
// still reads it (a shared cluster cannot be closed).
type cutLink struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (l *cutLink) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		c.Close()
		return nil, fmt.Errorf("dialing %s: the test cut the agent off from the source", host)
	}
	l.conns = append(l.conns, c)
	return c, nil
}

// cutOff closes every connection dialed and refuses new ones.
func (l *cutLink) cutOff() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// TestMetaSyncDRDrill: a consumer group consumes on the source, committing
// once per refresh interval, and dies without a last commit; the topic fails
// over; the same group on the destination resumes at the offsets it last
// committed on the source: no destination record is skipped, and the only
// duplicates are what it read after its last commit. With the source gone
// at the failover, the last periodic sync is what the group resumes from.
// Clients other than franz-go resume there too: the Java client and
// librdkafka, joining the group on the destination, start each partition at
// the synced offset, with the record the source holds there.
func TestMetaSyncDRDrill(t *testing.T) {
	forEngines(t, func(t *testing.T, e engine) {
		for _, sourceGone := range []bool{false, true} {
			name := "source up"
			if sourceGone {
				name = "source gone"
			}
			t.Run(name, func(t *testing.T) { drDrill(t, e, sourceGone) })
		}
	})
}

func drDrill(t *testing.T, e engine, sourceGone bool) {
	const parts = 3
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: parts})
	topic, group := p.topic, p.name("billing")
	spec := p.spec(topic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	spec.GroupsInclude = []string{regexp.QuoteMeta(group)}
	link := &cutLink{}
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) {
		c.StopTimeout = 10 * time.Second
		c.SourceOpts = func(s mirrorspec.Source) []kgo.Opt {
			return []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...), kgo.Dialer(link.dial)}
		}
	})
	// Plain records only: every destination offset is one a consumer
	// reads, so that a skipped offset is a skipped record.
	prod := workload.NewProducer(p.srcOpts(), workload.Spec{Topic: topic, Partitions: parts, Seed: 5}, 1500)
	stopProducing := runProducer(t, prod)

	// The application: consumes on the source and commits every
	// syncInterval, recording what it read and what it committed.
	cons := failClient(t, kgo.SeedBrokers(p.src.Bootstrap()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
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
			for p, o := range cons.CommittedOffsets()[topic] {
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
	p.waitProgress(t, a, topic, map[int32]int64{0: 300, 1: 300, 2: 300}, failWait)
	waitFor(t, a, "the application's commits synced", failWait, func() (bool, string) {
		mu.Lock()
		n := len(history)
		mu.Unlock()
		got := groupOffsets(t, p.dstAdm, group, topic)
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
		link.cutOff()
	}
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, topic, parts, partition.Stopped, failWait)
	dstB, err := listBounds(testCtx(t), p.dstAdm, topic)
	if err != nil {
		t.Fatal(err)
	}
	synced := groupOffsets(t, p.dstAdm, group, topic)
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
		p.stoppedEnd(t, topic, part, ps[part].LastMirrored)
	}

	// The application moves to the destination with the same group.
	dcons := failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
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
	dcons.Close() // leaves the group, which commits nothing

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
	p.assertIndependentResume(t, group, topic, synced, dstB)
}

// assertIndependentResume has the Java client and then librdkafka join
// group on the destination and read topic from the group's committed
// offsets to the destination end, committing nothing: each must start
// every partition at at[partition], where its first record is the one the
// source holds at that offset, and read every record from there on; the
// group's offsets stay as they were.
func (p *pair) assertIndependentResume(t *testing.T, group, topic string, at map[int32]int64, dstB bounds) {
	t.Helper()
	first := map[int32]*kgo.Record{}
	total := 0
	for part, b := range dstB {
		if at[part] < b[1] {
			first[part] = recordAt(t, p.srcOpts(), topic, part, at[part])
			total += int(b[1] - at[part])
		}
	}
	if total == 0 {
		t.Fatalf("no record after the synced offsets %v (destination %v): nothing for the independent clients to resume", at, dstB)
	}
	op := clientop.ConsumeGroup{Conn: clientop.Conn{Bootstrap: p.dst.BootstrapString()}, Topic: topic, Group: group,
		MaxRecords: total, Timeout: time.Minute}
	jc := javaclient.Client{KafkaVersion: p.eng.version}
	clients := []struct {
		name string
		run  func(context.Context, clientop.Op) (clientop.Result, error)
	}{
		{"the Java client", jc.Run},
		{"librdkafka", rdkafka.Client{}.Run},
	}
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := c.run(ctx, op)
		cancel()
		if err != nil {
			t.Fatalf("%s consuming group %s on the destination: %v", c.name, group, err)
		}
		if res.Records != total {
			t.Errorf("%s read %d records from the synced offsets %v, want %d (to the destination ends %v)", c.name, res.Records, at, total, dstB)
		}
		for part, b := range dstB {
			got, ok := res.Partition(part)
			switch {
			case at[part] >= b[1]:
				if ok {
					t.Errorf("%s read p%d from %d, but the group's offset there is the destination end %d", c.name, part, got.FirstOffset, b[1])
				}
				continue
			case !ok:
				t.Errorf("%s read nothing of p%d; the group's offset there is %d, the destination end %d", c.name, part, at[part], b[1])
				continue
			}
			want := first[part]
			if got.FirstOffset != at[part] || got.Records != int(b[1]-at[part]) {
				t.Errorf("%s read p%d from %d, %d records; want from the synced offset %d, %d records", c.name, part, got.FirstOffset, got.Records, at[part], b[1]-at[part])
			}
			if !sameText(got.FirstKey, want.Key) || !sameText(got.FirstValue, want.Value) {
				t.Errorf("%s: the first record of p%d at %d has key %s, value %s; the source has key %q, value %q there",
					c.name, part, got.FirstOffset, quoted(got.FirstKey), quoted(got.FirstValue), want.Key, want.Value)
			}
		}
		t.Logf("%s resumed group %s on the destination at %v: %d records", c.name, group, at, res.Records)
	}
	if got := groupOffsets(t, p.dstAdm, group, topic); !maps.Equal(got, at) {
		t.Errorf("group %s on the destination at %v after the independent clients, want %v (they commit nothing)", group, got, at)
	}
}

// recordAt reads the record at offset off of topic/part through a client
// made of opts.
func recordAt(t *testing.T, opts []kgo.Opt, topic string, part int32, off int64) *kgo.Record {
	t.Helper()
	cl := failClient(t, append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(off)}}),
		kgo.FetchMaxWait(100*time.Millisecond))...)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), failWait)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/%d at %d: %v", topic, part, off, ctx.Err())
		}
		for _, r := range fs.Records() {
			if r.Offset == off {
				return r
			}
			t.Fatalf("reading %s/%d at %d: the first record is at %d", topic, part, off, r.Offset)
		}
	}
}

// sameText says whether s is b as the independent clients print it: UTF-8,
// each byte that is not part of a valid sequence replaced by U+FFFD; nil
// for null.
func sameText(s *string, b []byte) bool {
	if s == nil || b == nil {
		return s == nil && b == nil
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		sb.WriteRune(r) // utf8.RuneError, one byte, for an invalid byte
		b = b[n:]
	}
	return *s == sb.String()
}

func quoted(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

// TestMetaSyncGroupFilters: only groups matching the include list and not
// the exclude list appear on the destination; a group with an active member
// there keeps its own offsets until the member leaves; a synced offset never
// moves backwards and never passes the destination's log end.
func TestMetaSyncGroupFilters(t *testing.T) {
	forEngines(t, testMetaSyncGroupFilters)
}

func testMetaSyncGroupFilters(t *testing.T, e engine) {
	const parts = 2
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: parts})
	topic := p.topic
	app1, excluded, other, active := p.name("app-1"), p.name("app-excluded"), p.name("other"), p.name("app-active")
	src := p.producer(t)
	for part := range int32(parts) {
		produceN(t, src, topic, part, 100, "g", false)
	}
	spec := p.spec(topic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	spec.GroupsInclude = []string{p.name("app-.*")}
	spec.GroupsExclude = []string{regexp.QuoteMeta(excluded)}
	a := p.startAgent(t, agentOpts{apply: &spec})
	p.waitMirrored(t, a, topic, failWait)

	// app-active has a member on the destination, which committed 5, 5.
	member := failClient(t, kgo.SeedBrokers(p.dst.Bootstrap()...), kgo.ConsumerGroup(active), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	waitFor(t, a, active+" joined on the destination", failWait, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		member.PollFetches(ctx)
		cancel()
		st := listGroups(t, p.dstAdm)[active]
		return st == "Stable", "state " + st
	})
	var commitErr error
	member.CommitOffsetsSync(testCtx(t), map[string]map[int32]kgo.EpochOffset{
		topic: {0: {Epoch: -1, Offset: 5}, 1: {Epoch: -1, Offset: 5}},
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

	commitOffsets(t, p.srcAdm, app1, topic, map[int32]int64{0: 40, 1: 60})
	commitOffsets(t, p.srcAdm, excluded, topic, map[int32]int64{0: 10})
	commitOffsets(t, p.srcAdm, other, topic, map[int32]int64{0: 20})
	commitOffsets(t, p.srcAdm, active, topic, map[int32]int64{0: 70, 1: 70})

	waitFor(t, a, app1+" synced", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, app1, topic)
		return got[0] == 40 && got[1] == 60, fmt.Sprint(got)
	})
	a.waitSyncRun(t, metasync.KindGroups)
	gs := listGroups(t, p.dstAdm)
	for _, g := range []string{excluded, other} {
		if _, ok := gs[g]; ok {
			t.Errorf("group %s, outside the filters, is on the destination", g)
		}
	}
	if got := groupOffsets(t, p.dstAdm, active, topic); got[0] != 5 || got[1] != 5 {
		t.Errorf("%s, active on the destination, was overwritten: %v", active, got)
	}
	if s := a.syncStatus()[metasync.KindGroups]; s.LastError != "" || s.Items != 1 || s.LastSuccess == "" {
		t.Errorf("groups sync status %+v, want 1 group in sync and no error", s)
	}

	// Never backwards: the source moves p0 back and p1 on.
	commitOffsets(t, p.srcAdm, app1, topic, map[int32]int64{0: 10, 1: 80})
	waitFor(t, a, app1+" p1 synced forward", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, app1, topic)
		return got[1] == 80, fmt.Sprint(got)
	})
	a.waitSyncRun(t, metasync.KindGroups)
	if got := groupOffsets(t, p.dstAdm, app1, topic); got[0] != 40 {
		t.Errorf("%s p0 moved backwards on the destination: %v", app1, got)
	}

	// Clamped to the destination's end: paused, the source goes on.
	if err := a.co.PauseTopics(testCtx(t), mirrorName, []string{topic}); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, topic, parts, partition.Paused, failWait)
	produceN(t, src, topic, 0, 50, "ahead", false)
	commitOffsets(t, p.srcAdm, app1, topic, map[int32]int64{0: 150, 1: 80})
	waitFor(t, a, app1+" p0 synced up to the destination end", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, app1, topic)
		return got[0] == 100, fmt.Sprint(got)
	})
	a.waitSyncRun(t, metasync.KindGroups)
	if got := groupOffsets(t, p.dstAdm, app1, topic); got[0] != 100 {
		t.Errorf("%s p0 on the destination %d, want 100 (the destination end; the source committed 150)", app1, got[0])
	}

	// The member leaves: app-active is synced.
	member.Close()
	waitFor(t, a, active+" synced once inactive", failWait, func() (bool, string) {
		got := groupOffsets(t, p.dstAdm, active, topic)
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
	forEngines(t, testMetaSyncConfigs)
}

func testMetaSyncConfigs(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{topic: lifecycleTopic, partitions: 1})
	topic := p.topic
	// Records first: with min.insync.replicas above the replication factor
	// (a real single-broker source refuses acks=all writes then).
	produceN(t, p.producer(t), topic, 0, 20, "c", false)
	alterConfigs(t, p.srcAdm, topic, map[string]string{"retention.ms": "3600000", "segment.bytes": "1048576", "min.insync.replicas": "2"})
	spec := p.spec(topic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) { c.StopTimeout = 10 * time.Second })
	p.waitMirrored(t, a, topic, failWait)
	want := func(what string, ok func(map[string]string) bool) map[string]string {
		t.Helper()
		var got map[string]string
		waitFor(t, a, what, failWait, func() (bool, string) {
			got = topicConfigs(t, p.dstAdm, topic)
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
	alterConfigs(t, p.dstAdm, topic, map[string]string{"min.insync.replicas": "1"})
	alterConfigs(t, p.srcAdm, topic, map[string]string{"retention.ms": "7200000", "retention.bytes": "1000000", "compression.type": "gzip", "min.insync.replicas": "3"}, "segment.bytes")
	got = want("source changes on the destination", func(c map[string]string) bool {
		_, seg := c["segment.bytes"]
		return c["retention.ms"] == "7200000" && c["retention.bytes"] == "1000000" && !seg
	})
	if got["min.insync.replicas"] != "1" || got["compression.type"] != "producer" {
		t.Errorf("destination min.insync.replicas %q (want its own 1), compression.type %q (want the invariant's producer)", got["min.insync.replicas"], got["compression.type"])
	}
	// A pass records its status after it wrote the configs seen above:
	// wait for the pass to end.
	waitFor(t, a, "configs sync status: 1 topic in sync, no error, no drift", failWait, func() (bool, string) {
		s := a.syncStatus()[metasync.KindConfigs]
		return s.LastError == "" && s.Items == 1 && len(s.Drift) == 0, fmt.Sprintf("%+v", s)
	})

	// Drift: the destination changes a synced key and sets one the source
	// does not have.
	alterConfigs(t, p.dstAdm, topic, map[string]string{"retention.ms": "1000", "segment.ms": "5000"})
	want("drift reverted", func(c map[string]string) bool {
		_, segms := c["segment.ms"]
		return c["retention.ms"] == "7200000" && !segms && c["min.insync.replicas"] == "1"
	})
	// (The status is recorded right after the destination changed.)
	waitFor(t, a, "drift reported", failWait, func() (bool, string) {
		drift := strings.Join(a.syncStatus()[metasync.KindConfigs].Drift, "\n")
		for _, d := range []string{`retention.ms was "1000" on the destination, set back to "7200000"`, `segment.ms was "5000" on the destination, set back to (not set`} {
			if !strings.Contains(drift, d) {
				return false, fmt.Sprintf("drift reported: %q, want it to say %q", drift, d)
			}
		}
		return true, ""
	})

	// Stopped, the topic's configs are the destination's.
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	waitStates(t, a, topic, 1, partition.Stopped, failWait)
	alterConfigs(t, p.dstAdm, topic, map[string]string{"retention.ms": "1234"})
	a.waitSyncRun(t, metasync.KindConfigs)
	if got := topicConfigs(t, p.dstAdm, topic); got["retention.ms"] != "1234" {
		t.Errorf("retention.ms of a stopped topic changed by the sync: %q", got["retention.ms"])
	}
}

// changeACL creates or deletes ALLOW ops for principal on the literal
// topic, and waits until the broker cl reaches shows the change (a real
// broker applies it from the metadata log).
func changeACL(t *testing.T, cl *kgo.Client, topic string, create bool, principal string, ops ...kadm.ACLOperation) {
	t.Helper()
	adm := kadm.NewClient(cl)
	b := kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).Allow(principal).AllowHosts("*").Operations(ops...)
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
	if ok, why := poll(failWait, func() (bool, string) {
		got, err := describeTopicACLs(testCtx(t), cl, topic)
		if err != nil {
			return false, err.Error()
		}
		for _, op := range ops {
			if slices.Contains(got, fmt.Sprintf("ALLOW %s TOPIC:%s %s", op, topic, principal)) != create {
				return false, fmt.Sprintf("ACLs on %s: %q", topic, got)
			}
		}
		return true, ""
	}); !ok {
		t.Fatalf("ACL change (create %v) for %s %v not visible: %s", create, principal, ops, why)
	}
}

// TestMetaSyncACLs: ACLs selected by the include rules follow the source's
// creates and deletes, also across an agent restart; others never reach the
// destination; ACLs the agent did not create stay. The application's synced
// WRITE takes effect at the failover: refused before (the read-only DENY
// wins), accepted after.
func TestMetaSyncACLs(t *testing.T) {
	forEngines(t, testMetaSyncACLs)
}

func testMetaSyncACLs(t *testing.T, e engine) {
	const app = "User:" + appUser
	p := authPairOn(t, e, lifecycleTopic, 1, authSides{src: true, dst: true})
	topic := p.topic

	changeACL(t, p.srcCl, topic, true, app, kadm.OpWrite, kadm.OpDescribe, kadm.OpRead, kadm.OpAlterConfigs)
	changeACL(t, p.srcCl, topic, true, "User:bob", kadm.OpRead)
	// The destination has ACLs of its own: one the source has too, one
	// it does not.
	changeACL(t, p.dstCl, topic, true, app, kadm.OpAlterConfigs, kadm.OpDescribeConfigs)
	produceN(t, p.srcProducer(t, true), topic, 0, 20, "acl", false)

	// The rule's name is a regular expression: orde.s and the test's
	// suffix, if any.
	rule := "TOPIC;orde.s" + regexp.QuoteMeta(strings.TrimPrefix(topic, lifecycleTopic)) + ";*;ALLOW;" + app
	start := func() *agent {
		spec := p.spec(topic)
		spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
		spec.ACLInclude = []string{rule}
		return p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) {
			c.Destination = []kgo.Opt{kgo.SeedBrokers(p.dst.Bootstrap()...), saslPlain(agentUser, agentPass)}
			c.SourceOpts = func(s mirrorspec.Source) []kgo.Opt {
				return []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...), saslPlain(agentUser, agentPass)}
			}
			c.StopTimeout = 10 * time.Second
		})
	}
	a := start()
	p.waitMirrored(t, a, topic, failWait)
	waitReadOnly(t, a, topic, true)
	acl := func(op string) string { return "ALLOW " + op + " TOPIC:" + topic + " " + app }
	deny := denyACL(topic)
	wantACLs := func(what string, want ...string) {
		t.Helper()
		slices.Sort(want)
		waitFor(t, a, what, failWait, func() (bool, string) {
			got, err := describeTopicACLs(testCtx(t), p.dstCl, topic)
			return err == nil && slices.Equal(got, want), fmt.Sprintf("destination ACLs on %s %q (%v), want %q", topic, got, err, want)
		})
	}
	wantACLs("app's ACLs synced", acl("WRITE"), acl("DESCRIBE"), acl("READ"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)
	waitFor(t, a, "ACL sync status", failWait, func() (bool, string) {
		s := a.syncStatus()[metasync.KindACLs]
		return s.LastError == "" && s.Items == 4, fmt.Sprintf("ACL sync status %+v, want the 4 selected source ACLs in sync", s)
	})
	assertRefused(t, p.dst, topic, 1, "mirroring, with app's WRITE synced")

	// Deletes follow, but not for the ACL the destination had already.
	changeACL(t, p.srcCl, topic, false, app, kadm.OpRead, kadm.OpAlterConfigs)
	wantACLs("app's READ deleted", acl("WRITE"), acl("DESCRIBE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)
	a.waitSyncRun(t, metasync.KindACLs)
	wantACLs("foreign ACLs kept", acl("WRITE"), acl("DESCRIBE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)

	// A restarted agent still knows what it created.
	changeACL(t, p.srcCl, topic, true, app, kadm.OpCreate)
	wantACLs("app's CREATE synced", acl("WRITE"), acl("DESCRIBE"), acl("CREATE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)
	a.stop()
	changeACL(t, p.srcCl, topic, false, app, kadm.OpCreate)
	a = start()
	wantACLs("app's CREATE deleted by a restarted agent", acl("WRITE"), acl("DESCRIBE"), acl("ALTER_CONFIGS"), acl("DESCRIBE_CONFIGS"), deny)

	// The failover releases the DENY: app's synced WRITE takes effect.
	if err := a.co.StopTopics(testCtx(t), mirrorName, []string{topic}, coordinator.StopFailover); err != nil {
		t.Fatal(err)
	}
	ps := waitStates(t, a, topic, 1, partition.Stopped, failWait)
	waitReadOnly(t, a, topic, false)
	want := p.stoppedEnd(t, topic, 0, ps[0].LastMirrored)
	r, err := appWrite(t, appClient(t, p.dst), topic, 0, "after failover")
	if err != nil || r.Offset != want {
		t.Fatalf("app writing the failed-over topic with its synced ACLs: %v (%v), want offset %d", err, r, want)
	}
	if got, err := describeTopicACLs(testCtx(t), p.dstCl, topic); err != nil || slices.Contains(got, "ALLOW READ TOPIC:"+topic+" User:bob") {
		t.Errorf("bob's ACL, outside the rules, is on the destination: %q (%v)", got, err)
	}
}

// TestMetaSyncACLFailureIsolated: with a destination without authorizer the
// ACL sync fails, says why in describe and counts in the metrics, while
// config and group sync go on.
func TestMetaSyncACLFailureIsolated(t *testing.T) {
	forEngines(t, testMetaSyncACLFailureIsolated)
}

func testMetaSyncACLFailureIsolated(t *testing.T, e engine) {
	p := authPairOn(t, e, lifecycleTopic, 1, authSides{src: true, dst: false})
	topic, group := p.topic, p.name("app-1")
	allowApp(t, p.srcAdm, topic)
	alterConfigs(t, p.srcAdm, topic, map[string]string{"retention.ms": "3600000"})
	produceN(t, p.srcProducer(t, true), topic, 0, 30, "f", false)

	spec := p.spec(topic)
	spec.MetadataRefreshIntervalMs = syncInterval.Milliseconds()
	spec.GroupsInclude = []string{regexp.QuoteMeta(group)}
	spec.ACLInclude = []string{"TOPIC;" + regexp.QuoteMeta(topic)} // app's two ACLs
	a := p.startAgentWith(t, agentOpts{apply: &spec}, func(c *coordinator.Config) {
		c.SourceOpts = func(s mirrorspec.Source) []kgo.Opt {
			return []kgo.Opt{kgo.SeedBrokers(s.BootstrapServers...), saslPlain(agentUser, agentPass)}
		}
	})
	p.waitMirrored(t, a, topic, failWait)
	commitOffsets(t, p.srcAdm, group, topic, map[int32]int64{0: 25})

	waitFor(t, a, "configs and groups synced while ACL sync fails", failWait, func() (bool, string) {
		s := a.syncStatus()
		got := groupOffsets(t, p.dstAdm, group, topic)
		cfg := topicConfigs(t, p.dstAdm, topic)
		return s[metasync.KindACLs].Errors >= 2 && got[0] == 25 && cfg["retention.ms"] == "3600000" && s[metasync.KindConfigs].LastError == "" && s[metasync.KindGroups].LastError == "",
			fmt.Sprintf("sync %+v, group offsets %v, retention.ms %q", s, got, cfg["retention.ms"])
	})
	s := a.syncStatus()
	if !strings.Contains(s[metasync.KindACLs].LastError, "no authorizer") || s[metasync.KindACLs].LastSuccess != "" {
		t.Errorf("ACL sync status %+v, want an error saying the destination has no authorizer", s[metasync.KindACLs])
	}
	if s[metasync.KindConfigs].LastSuccess == "" || s[metasync.KindGroups].LastSuccess == "" || s[metasync.KindConfigs].Errors != 0 || s[metasync.KindGroups].Errors != 0 {
		t.Errorf("configs %+v and groups %+v should have synced without errors", s[metasync.KindConfigs], s[metasync.KindGroups])
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
	t.Logf("ACL sync: %s; kmirror_sync_errors_total %v", s[metasync.KindACLs].LastError, errs)
}
