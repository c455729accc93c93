package mirror

// Failback (DESIGN §4; KIP-1279 §5.3 as an agent outside the brokers can do
// it, reference/kip1279.md §12.4): after a stop made the old mirror's
// destination D the primary, a mirror in the other direction, D → P, mirrors
// the topic back into the old primary P. The agent of the original mirror
// kept each STOPPED partition's last mirrored offset (LMO) in its state topic
// on D, which is this mirror's source, so the failback reads it from there.
// Per partition, with P's log end E and M = LMO+1 (the first offset D has
// that P did not give it):
//
//   - E == M: P holds exactly what was mirrored; mirroring resumes at E and
//     copies nothing twice (the records below E are P's own, the same as
//     D's at the same offsets, so the partition mirror does not take them
//     for foreign writes: partition.Config.Base).
//   - E < M: P lost records after the failover; mirroring resumes at E.
//   - E > M: P took records after the last mirrored offset (an unplanned
//     failover). No client API removes a log's suffix, so those records
//     would stay at offsets D uses for other records. The failback is
//     refused unless recreate is asked; then the divergent tail of every
//     such partition is first copied, as a consumer at read_committed sees
//     it (keys, values, headers, timestamps), to a side topic on P named
//     TOPIC.kmirror-divergent-UNIX, the topic is deleted, and the mirror
//     creates it again and mirrors it from D's log start (alignment pads
//     when D's log does not start at 0). Describe reports the side topic
//     and how many records it got.
//
// The promote that made D primary fenced P's topic with a DENY WRITE ACL for
// User:* (ACLSourceFence). That is the very ACL that makes a mirror topic
// read-only: when this agent is a super user of P it writes through it, and
// the fence simply becomes the failback topic's read-only ACL, released when
// the failback topic is stopped in turn. When P has an authorizer but this
// agent is not a super user there, the fence would refuse the agent's own
// writes, so the failback removes it (and the topic is not read-only, as any
// mirror topic on such a destination).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/statestore"
	"github.com/kmirror/kmirror/agent/writegate"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
	"github.com/kmirror/kmirror/internal/verify"
)

// ErrFailbackRefused is wrapped by the errors of a failback that cannot go
// on as asked; the message says why and what to do.
var ErrFailbackRefused = errors.New("failback refused")

// failbackRecord is what the agent keeps of a failback topic, under
// failback/MIRROR/TOPIC.
type failbackRecord struct {
	// SourceMirror is the mirror, on the agent whose destination is this
	// mirror's source, whose stopped topic this one mirrors back.
	SourceMirror string                      `json:"source_mirror"`
	Partitions   map[int32]failbackPartition `json:"partitions"`
	// Recreated: the destination topic was deleted, to be created again
	// and mirrored from the source's log start.
	Recreated        bool      `json:"recreated,omitempty"`
	DivergentTopic   string    `json:"divergent_topic,omitempty"`
	DivergentRecords int64     `json:"divergent_records,omitempty"`
	At               time.Time `json:"at"`
}

// failbackPartition is one partition of a failbackRecord.
type failbackPartition struct {
	// LastMirrored is the LMO the source mirror kept, -1 for none.
	LastMirrored int64 `json:"last_mirrored_offset"`
	// End is the destination's log end when the failback was added.
	End int64 `json:"destination_end"`
	// Base is partition.Config.Base: where this mirror took the
	// destination log over (0 after a recreate).
	Base int64 `json:"base"`
	// DivergentFrom is the first offset where the destination holds what
	// the source does not: LastMirrored+1, or below it when the records
	// there differ. Diverged when End > DivergentFrom.
	DivergentFrom int64 `json:"divergent_from"`
	// Divergent counts the records copied to the side topic.
	Divergent int64 `json:"divergent_records,omitempty"`
}

func failbackKey(m, t string) string { return "failback/" + m + "/" + t }

// divergentTopic names the side topic of a failback's divergent records.
func divergentTopic(topic string, at time.Time) string {
	return topic + ".kmirror-divergent-" + strconv.FormatInt(at.Unix(), 10)
}

// failbackRefused is a refusal naming the topic.
func failbackRefused(topic, format string, a ...any) error {
	return fmt.Errorf("failback of topic %q: %s: %w", topic, fmt.Sprintf(format, a...), ErrFailbackRefused)
}

// FailbackPlan is what PlanFailback found for one topic, and what
// ApplyFailback does with it.
type FailbackPlan struct {
	topic string
	rec   failbackRecord
	// exists: the destination has the topic; partitions is its partition
	// count; diverged: some partition took records the source does not
	// have, which recreate moves aside.
	exists     bool
	partitions int32
	diverged   bool
}

// PlanFailback checks that topic can be mirrored back from spec's source
// into the destination, and works out the failback record that the
// partition mirrors start from. It changes nothing: the coordinator plans
// every topic of a failback before it applies any (ApplyFailback), so that
// a refusal changes nothing.
func PlanFailback(ctx context.Context, cfg *Config, spec mirrorspec.Spec, topic string, recreate bool) (FailbackPlan, error) {
	var none FailbackPlan
	srcOpts, err := cfg.SourceOpts(spec)
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: connecting to the source: %w", topic, err)
	}
	state, err := statestore.Read(ctx, srcOpts, cfg.Store.Topic())
	if errors.Is(err, statestore.ErrNoStateTopic) {
		return none, failbackRefused(topic, "the source cluster has no state topic %q, so no agent mirrored topics into it: a failback mirrors back a topic that was mirrored into the source cluster and stopped there; to mirror into an existing topic from scratch, delete it on the destination first", cfg.Store.Topic())
	}
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: reading the last mirrored offsets from the source: %w", topic, err)
	}
	srcMirror, lmos, err := stoppedOnSource(state, topic)
	if err != nil {
		return none, err
	}
	srcCl, err := kgo.NewClient(srcOpts...)
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: connecting to the source: %w", topic, err)
	}
	defer srcCl.Close()
	srcTopics, err := kadm.NewClient(srcCl).ListTopics(ctx, topic)
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: reading the source topic: %w", topic, err)
	}
	std, ok := srcTopics[topic]
	if !ok || std.Err != nil {
		return none, failbackRefused(topic, "the source cluster has no topic %q (its mirror %q stopped it, but it is gone)", topic, srcMirror)
	}
	srcParts := int32(len(std.Partitions))

	rec := failbackRecord{SourceMirror: srcMirror, Partitions: map[int32]failbackPartition{}, At: time.Now().UTC()}
	dtds, err := cfg.Admin.ListTopics(ctx, topic)
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: reading the destination topic: %w", topic, err)
	}
	dtd, exists := dtds[topic]
	if exists && errors.Is(dtd.Err, kerr.UnknownTopicOrPartition) {
		exists = false
	} else if exists && dtd.Err != nil {
		return none, fmt.Errorf("failback of topic %q: reading the destination topic: %w", topic, dtd.Err)
	}
	if !exists {
		// Nothing to resume: the mirror creates the topic and mirrors
		// it whole, like any new mirror topic.
		return FailbackPlan{topic: topic, rec: rec}, nil
	}
	if n := int32(len(dtd.Partitions)); n > srcParts {
		return none, failbackRefused(topic, "the destination topic has %d partitions, the source topic %d; a mirror topic cannot have more partitions than its source", n, srcParts)
	}
	ends, err := cfg.Admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: reading the destination log ends: %w", topic, err)
	}
	stables, err := cfg.Admin.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stables.Error()
	}
	if err != nil {
		return none, fmt.Errorf("failback of topic %q: reading the destination last stable offsets: %w", topic, err)
	}
	var diverged []string
	for p := range dtd.Partitions {
		end, _ := ends.Lookup(topic, p)
		lmo, ok := lmos[p]
		if !ok {
			lmo = -1 // a partition the source mirror never mirrored
		}
		fp := failbackPartition{LastMirrored: lmo, End: end.Offset, Base: end.Offset, DivergentFrom: lmo + 1}
		if end.Offset > lmo+1 {
			diverged = append(diverged, fmt.Sprintf("partition %d ends at %d, its last mirrored offset is %d (%d offsets written after it)", p, end.Offset, lmo, end.Offset-lmo-1))
		} else if end.Offset > 0 {
			// Resuming takes the records below the end for the
			// source's: check the last of them.
			at, why, err := firstDifference(ctx, cfg, srcCl, topic, p, end.Offset)
			if err != nil {
				return none, fmt.Errorf("failback of topic %q: comparing partition %d's records before offset %d with the source: %w", topic, p, end.Offset, err)
			}
			if at >= 0 {
				fp.DivergentFrom = at
				diverged = append(diverged, fmt.Sprintf("partition %d ends at %d, at or before its last mirrored offset %d, but its records differ from the source's from offset %d (%s)", p, end.Offset, lmo, at, why))
			}
		}
		rec.Partitions[p] = fp
	}
	slices.Sort(diverged)
	if len(diverged) > 0 && !recreate {
		return none, failbackRefused(topic, "the destination (the old primary) holds records the source does not have at the same offsets: %s. Those records cannot be removed from the log and would sit where the source has other records. Add the topic again with recreate (kmirror add --failback --recreate) to copy them to a side topic %s.kmirror-divergent-<unix time>, recreate the topic and mirror it from the source",
			strings.Join(diverged, "; "), topic)
	}
	if len(diverged) > 0 {
		for p, fp := range rec.Partitions {
			if fp.End <= fp.DivergentFrom {
				continue
			}
			ls, _ := stables.Lookup(topic, p)
			if ls.Offset < fp.End {
				return none, failbackRefused(topic, "partition %d has a transaction open at offset %d in the records written after the last mirrored offset; add the failback again once it is decided", p, ls.Offset)
			}
		}
	}
	return FailbackPlan{topic: topic, rec: rec, exists: true, partitions: int32(len(dtd.Partitions)), diverged: len(diverged) > 0}, nil
}

// ApplyFailback does what plan asks (with recreate, the side topic and the
// delete) and persists its failback record for mirror.
func ApplyFailback(ctx context.Context, cfg *Config, mirror string, plan FailbackPlan) error {
	topic, rec := plan.topic, plan.rec
	if !plan.exists {
		cfg.Logger.Info("failback: the destination has no such topic; mirroring it whole", "topic", topic, "source_mirror", rec.SourceMirror)
		return putFailback(ctx, cfg, mirror, topic, rec)
	}
	if plan.diverged {
		if err := moveDivergent(ctx, cfg, topic, plan.partitions, &rec); err != nil {
			return err
		}
	}
	if st := cfg.ReadOnly.Last(); st != nil && st.Authorizer && !st.SuperUser {
		// The promote's fence (or any DENY WRITE User:* on the topic)
		// would refuse the agent's own writes.
		if err := cfg.ReadOnly.Release(ctx, topic); err != nil {
			return fmt.Errorf("failback of topic %q: removing the source fence of the promote (DENY WRITE User:*), which would refuse the agent's writes as it is not a super user of the destination: %w", topic, err)
		}
		cfg.Logger.Warn("failback: removed the DENY WRITE ACL on the topic (the promote's source fence): the agent is not a super user of the destination and could not write through it", "topic", topic)
	}
	cfg.Logger.Info("failback prepared", "topic", topic, "source_mirror", rec.SourceMirror, "recreated", rec.Recreated, "divergent_topic", rec.DivergentTopic, "divergent_records", rec.DivergentRecords)
	return putFailback(ctx, cfg, mirror, topic, rec)
}

// putFailback persists rec; a side topic of an earlier attempt that got as
// far as recreating the topic stays reported.
func putFailback(ctx context.Context, cfg *Config, mirror, topic string, rec failbackRecord) error {
	if prev, ok := failbackOf(cfg.Store, mirror, topic); ok && prev.DivergentTopic != "" && rec.DivergentTopic == "" {
		rec.DivergentTopic, rec.DivergentRecords, rec.Recreated = prev.DivergentTopic, prev.DivergentRecords, prev.Recreated
	}
	return WriteRecord(ctx, cfg.Store, failbackKey(mirror, topic), rec)
}

// resumeCheckWindow is how many offsets below the resume point a failback
// compares with the source before it takes them for the source's.
const resumeCheckWindow = 1024

// firstDifference compares the last resumeCheckWindow offsets below end of
// the destination partition with the source, with verify at both isolation
// levels, and returns the first offset where they differ and how, or -1.
func firstDifference(ctx context.Context, cfg *Config, srcCl *kgo.Client, topic string, p int32, end int64) (int64, string, error) {
	from := max(0, end-resumeCheckWindow)
	for _, adm := range []*kadm.Client{cfg.Admin, kadm.NewClient(srcCl)} {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return -1, "", err
		}
		if s, ok := starts.Lookup(topic, p); ok {
			from = max(from, s.Offset)
		}
	}
	if from >= end {
		return -1, "", nil
	}
	rep, err := verify.Compare(ctx, srcCl, cfg.Destination, verify.Options{Topic: topic, Partitions: []int32{p}, From: from, To: end, KeyAware: true, AllowLag: false, MaxMismatches: -1})
	if err != nil {
		return -1, "", err
	}
	if rep.OK() {
		return -1, "", nil
	}
	first := rep.Mismatches[0]
	for _, mm := range rep.Mismatches[1:] {
		if mm.Offset < first.Offset {
			first = mm
		}
	}
	return first.Offset, fmt.Sprintf("%s: source %s, destination %s", first.Kind, first.Source, first.Destination), nil
}

// stoppedOnSource finds, in the state topic of the agent whose destination
// is the failback's source, the mirror whose topic is being mirrored back,
// and its partitions' last mirrored offsets. Every partition must be
// STOPPED: a topic still mirroring into the source would be mirrored in
// both directions.
func stoppedOnSource(state map[string][]byte, topic string) (string, map[int32]int64, error) {
	byMirror := map[string]map[int32]partitionRecord{}
	for k, v := range state {
		parts := strings.Split(k, "/")
		if len(parts) != 4 || parts[0] != "partition" || parts[2] != topic {
			continue
		}
		p, err := strconv.ParseInt(parts[3], 10, 32)
		if err != nil {
			continue
		}
		var pr partitionRecord
		if json.Unmarshal(v, &pr) != nil {
			continue
		}
		if byMirror[parts[1]] == nil {
			byMirror[parts[1]] = map[int32]partitionRecord{}
		}
		byMirror[parts[1]][int32(p)] = pr
	}
	if len(byMirror) == 0 {
		return "", nil, failbackRefused(topic, "no mirror on the source cluster's agent mirrors this topic (its state topic has no partition of it), so there is no last mirrored offset to resume from; to mirror into the existing topic from scratch, delete it on the destination first")
	}
	names := slices.Sorted(maps.Keys(byMirror))
	if len(names) > 1 {
		return "", nil, failbackRefused(topic, "mirrors %q on the source cluster's agent all have this topic; delete the ones that no longer mirror it", names)
	}
	name := names[0]
	lmos := map[int32]int64{}
	for p, pr := range byMirror[name] {
		if pr.State != partition.Stopped {
			return "", nil, failbackRefused(topic, "partition %d is %s in mirror %q on the source cluster: stop the topic there first (kmirror stop --mirror %s --topic %s --mode promote, or failover), so that nothing mirrors in both directions",
				p, pr.State, name, name, topic)
		}
		lmos[p] = pr.LastMirroredOffset
	}
	return name, lmos, nil
}

// moveDivergent copies the records each partition of topic took after its
// last mirrored offset to a new side topic, as a read_committed consumer
// sees them, then deletes topic so that the mirror creates it again.
func moveDivergent(ctx context.Context, cfg *Config, topic string, partitions int32, rec *failbackRecord) error {
	side := divergentTopic(topic, rec.At)
	// Nothing in the side topic expires, and every timestamp is kept.
	configs := map[string]*string{
		"cleanup.policy":                  kadm.StringPtr("delete"),
		"retention.ms":                    kadm.StringPtr("-1"),
		"retention.bytes":                 kadm.StringPtr("-1"),
		"message.timestamp.type":          kadm.StringPtr("CreateTime"),
		"message.timestamp.before.max.ms": kadm.StringPtr("9223372036854775807"),
		"message.timestamp.after.max.ms":  kadm.StringPtr("9223372036854775807"),
	}
	// The side topic and its records are writes like any other: the
	// mirror's owner (writegate) is asked before each.
	if err := writegate.Check(ctx); err != nil {
		return fmt.Errorf("failback of topic %q: %w", topic, err)
	}
	resp, err := cfg.Admin.CreateTopic(ctx, partitions, -1, configs, side)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("failback of topic %q: creating the side topic %q for the divergent records: %w", topic, side, err)
	}
	prod, err := kgo.NewClient(append(slices.Clone(cfg.DestinationOpts),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)...)
	if err != nil {
		return fmt.Errorf("failback of topic %q: connecting to copy the divergent records: %w", topic, err)
	}
	defer prod.Close()
	var total int64
	for p := range partitions {
		fp := rec.Partitions[p]
		if fp.End <= fp.DivergentFrom {
			continue
		}
		var (
			mu         sync.Mutex
			produceErr error
		)
		n, err := verify.ReadRecords(ctx, cfg.Destination, topic, p, fp.DivergentFrom, fp.End, verify.ReadCommitted, func(r *kgo.Record) error {
			if err := writegate.Check(ctx); err != nil {
				return err
			}
			out := &kgo.Record{Topic: side, Partition: p, Key: r.Key, Value: r.Value, Headers: slices.Clone(r.Headers), Timestamp: r.Timestamp}
			prod.Produce(ctx, out, func(_ *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && produceErr == nil {
					produceErr = err
				}
			})
			return nil
		})
		if ferr := prod.Flush(ctx); err == nil {
			err = ferr
		}
		mu.Lock()
		if err == nil {
			err = produceErr
		}
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("failback of topic %q: copying partition %d's records [%d, %d) to the side topic %q (the topic is left as it was; the side topic may hold a partial copy): %w",
				topic, p, fp.DivergentFrom, fp.End, side, err)
		}
		fp.Divergent = n
		rec.Partitions[p] = fp
		total += n
	}
	rec.DivergentTopic, rec.DivergentRecords = side, total
	cfg.Logger.Warn("failback: divergent records copied to a side topic; deleting the topic to recreate it", "topic", topic, "side_topic", side, "records", total)
	if err := deleteDestinationTopic(ctx, cfg, topic); err != nil {
		return fmt.Errorf("failback of topic %q: the divergent records are in %q; %w", topic, side, err)
	}
	rec.recreated()
	return nil
}

// deleteDestinationTopic deletes topic on the destination and waits until
// metadata no longer shows it, so that creating it again makes a new topic.
func deleteDestinationTopic(ctx context.Context, cfg *Config, topic string) error {
	if err := writegate.Check(ctx); err != nil {
		return err
	}
	resp, err := cfg.Admin.DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("deleting destination topic %q: %w", topic, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		tds, err := cfg.Admin.ListTopics(ctx, topic)
		if err == nil {
			if td, ok := tds[topic]; !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("destination topic %q still listed after its deletion: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cfg.Writer.Meta().Invalidate(topic)
	return nil
}

// recreated records that the destination topic was deleted, to be created
// again and mirrored from the source's log start: no partition resumes
// where the failback found it.
func (rec *failbackRecord) recreated() {
	rec.Recreated = true
	for p, fp := range rec.Partitions {
		fp.Base = 0
		rec.Partitions[p] = fp
	}
}

// failbackOf is mirror's failback record of topic, false for an ordinary
// mirror topic.
func failbackOf(store Store, mirror, topic string) (failbackRecord, bool) {
	var rec failbackRecord
	ok := ReadRecord(store, failbackKey(mirror, topic), &rec)
	return rec, ok
}

// failbackBase is tp's partition.Config.Base: where a failback took the
// destination partition over, 0 for an ordinary mirror topic.
func (m *Runner) failbackBase(tp fetcher.TP) int64 {
	rec, _ := failbackOf(m.cfg.Store, m.rec.Spec.Name, tp.Topic)
	return rec.Partitions[tp.Partition].Base
}

// failbackStatus is describe's view of a failback topic, nil for others.
func (m *Runner) failbackStatus(topic string) *mirrorapi.Failback {
	rec, ok := failbackOf(m.cfg.Store, m.rec.Spec.Name, topic)
	if !ok {
		return nil
	}
	return rec.status()
}

// status is describe's view of rec.
func (rec failbackRecord) status() *mirrorapi.Failback {
	out := &mirrorapi.Failback{
		SourceMirror: rec.SourceMirror, Recreated: rec.Recreated,
		DivergentTopic: rec.DivergentTopic, DivergentRecords: rec.DivergentRecords,
		Partitions: []mirrorapi.FailbackPartition{},
	}
	for _, p := range slices.Sorted(maps.Keys(rec.Partitions)) {
		fp := rec.Partitions[p]
		out.Partitions = append(out.Partitions, mirrorapi.FailbackPartition{
			Partition: p, LastMirroredOffset: fp.LastMirrored, DestinationEnd: fp.End, ResumedAt: fp.Base, DivergentRecords: fp.Divergent,
		})
	}
	return out
}
