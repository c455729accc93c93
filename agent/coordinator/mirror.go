package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/topics"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// MirrorStatus is one mirror as describe shows it.
type MirrorStatus = mirrorapi.Mirror

// TopicStatus is one mirror topic.
type TopicStatus = mirrorapi.Topic

// runningPartition is a partition mirror and how to stop it.
type runningPartition struct {
	pm   *partition.Mirror
	stop context.CancelFunc // nil when it does not run (restored FAILED)
}

type mirror struct {
	c   *Coordinator
	log hclog.Logger
	rec mirrorRecord

	mu        sync.Mutex
	spec      MirrorSpec
	err       string
	warnings  []string
	topicErrs map[string]string
	parts     map[fetcher.TP]*runningPartition
	fetch     *fetcher.Fetcher
	refresh   chan struct{}
	wg        sync.WaitGroup
	done      chan struct{}
	cancel    context.CancelFunc // ends run; set by startLocked
}

func newMirror(c *Coordinator, rec mirrorRecord) *mirror {
	return &mirror{
		c: c, log: c.log.Named("mirror").With("mirror", rec.Spec.Name), rec: rec, spec: rec.Spec,
		topicErrs: map[string]string{}, parts: map[fetcher.TP]*runningPartition{},
		refresh: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

func (m *mirror) setSpec(s MirrorSpec) {
	m.mu.Lock()
	m.spec = s
	m.mu.Unlock()
	select {
	case m.refresh <- struct{}{}:
	default:
	}
}

func (m *mirror) setErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.err = ""
		return
	}
	if m.err != err.Error() {
		m.log.Error("mirror not running", "error", err)
	}
	m.err = err.Error()
}

func (m *mirror) wait() { <-m.done }

// run connects to the source and keeps the mirror's topics and partitions
// running until ctx ends, retrying the connection with backoff.
func (m *mirror) run(ctx context.Context) {
	defer close(m.done)
	defer m.wg.Wait()
	backoff := time.Second
	for ctx.Err() == nil {
		err := m.runConnected(ctx)
		if ctx.Err() != nil {
			return
		}
		m.setErr(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (m *mirror) runConnected(ctx context.Context) error {
	m.mu.Lock()
	spec := m.spec // Apply changes m.spec under m.mu
	m.mu.Unlock()
	src, err := kgo.NewClient(m.c.cfg.SourceOpts(spec.Source)...)
	if err != nil {
		return fmt.Errorf("connecting to source %s: %w", strings.Join(spec.Source.BootstrapServers, ","), err)
	}
	defer src.Close()
	if err := src.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to source %s: %w", strings.Join(spec.Source.BootstrapServers, ","), err)
	}
	srcAdm := kadm.NewClient(src)
	findings, err := topics.Preflight(ctx, m.c.dstAdm, srcAdm, spec.Topics...)
	if err != nil {
		return fmt.Errorf("preflight check of the destination: %w", err)
	}
	if err := findings.Refusal(); err != nil {
		return err
	}
	m.mu.Lock()
	m.warnings = nil
	for _, f := range findings {
		m.warnings = append(m.warnings, f.String())
	}
	m.mu.Unlock()
	for _, f := range findings {
		m.log.Warn("preflight", "finding", f.String())
	}
	m.setErr(nil)

	srcMeta := leaders.New(src)
	f := fetcher.New(src, srcMeta, fetcher.Options{Budget: m.c.budget, Logger: m.log.Named("fetcher")})
	m.mu.Lock()
	m.fetch = f
	m.mu.Unlock()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = f.Run(fctx) }()
	mgr := topics.NewManager(m.c.dstAdm, srcAdm, topics.WithExclude(spec.TopicConfigExclude), topics.WithLogger(m.log.Named("topics")))

	// Partition mirrors live as long as this connection: they end with fctx.
	defer func() {
		cancel()
		m.wg.Wait()
		m.mu.Lock()
		m.parts = map[fetcher.TP]*runningPartition{}
		m.fetch = nil
		m.mu.Unlock()
	}()
	t := time.NewTicker(m.c.cfg.RefreshInterval)
	defer t.Stop()
	for {
		m.syncTopics(fctx, mgr, sourceReader{src, srcMeta}, f)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.refresh:
		}
	}
}

// syncTopics creates or grows each destination topic and starts a partition
// mirror for every source partition not yet running.
func (m *mirror) syncTopics(ctx context.Context, mgr *topics.Manager, source sourceReader, f *fetcher.Fetcher) {
	m.mu.Lock()
	names := append([]string(nil), m.spec.Topics...)
	m.mu.Unlock()
	for _, topic := range names {
		err := m.syncTopic(ctx, mgr, source, f, topic)
		m.mu.Lock()
		if err != nil {
			if m.topicErrs[topic] != err.Error() {
				m.log.Error("topic not mirrored", "topic", topic, "error", err)
			}
			m.topicErrs[topic] = err.Error()
		} else {
			delete(m.topicErrs, topic)
		}
		m.mu.Unlock()
	}
}

func (m *mirror) syncTopic(ctx context.Context, mgr *topics.Manager, source sourceReader, f *fetcher.Fetcher, topic string) error {
	name := m.rec.Spec.Name
	info, err := mgr.Ensure(ctx, topic)
	if err != nil {
		return err
	}
	var tr topicRecord
	srcID, dstID := topicID(info.SourceTopicID), topicID(info.DestinationTopicID)
	if m.c.getJSON(topicKey(name, topic), &tr) {
		if tr.SourceTopicID != srcID && srcID != (topicID{}) {
			err := fmt.Errorf("source topic %q was recreated (topic id %s, mirrored %s): its offsets no longer match the destination's; recover the topic to mirror it again",
				topic, info.SourceTopicID, tr.SourceTopicID)
			m.failTopic(ctx, topic, info.SourcePartitions, err.Error())
			return err
		}
		switch {
		case dstID == (topicID{}) || tr.DestinationTopicID == dstID:
		case tr.DestinationTopicID != (topicID{}):
			err := fmt.Errorf("destination topic %q was recreated (topic id %s, mirrored into %s): the records mirrored there are lost; recover the topic to mirror it again",
				topic, dstID, tr.DestinationTopicID)
			m.failTopic(ctx, topic, info.SourcePartitions, err.Error())
			return err
		default:
			// A record from before destination ids were kept.
			tr.DestinationTopicID = dstID
			if err := m.c.putJSON(ctx, topicKey(name, topic), tr); err != nil {
				return err
			}
		}
	} else if err := m.c.putJSON(ctx, topicKey(name, topic), topicRecord{SourceTopicID: srcID, DestinationTopicID: dstID}); err != nil {
		return err
	}
	if info.PartitionsAdded > 0 {
		m.log.Info("destination partitions added", "topic", topic, "added", info.PartitionsAdded)
		m.c.writer.Meta().Invalidate(topic)
		source.meta.Invalidate(topic)
	}
	keyed := info.SourceCompacted()
	for p := int32(0); p < info.SourcePartitions; p++ {
		tp := fetcher.TP{Topic: topic, Partition: p}
		m.mu.Lock()
		_, running := m.parts[tp]
		m.mu.Unlock()
		if running {
			continue
		}
		var pr partitionRecord
		if m.c.getJSON(partitionKey(name, tp), &pr) && pr.State == partition.Failed {
			// A failed partition stays failed across restarts until it
			// is recovered explicitly.
			pm := partition.New(partition.Config{Mirror: name, TP: tp})
			pm.Restore(pr.State, pr.Reason)
			m.mu.Lock()
			m.parts[tp] = &runningPartition{pm: pm}
			m.mu.Unlock()
			continue
		}
		pm := partition.New(partition.Config{
			Mirror: name, TP: tp, ProducerID: m.rec.ProducerID, Epoch: m.rec.Epoch, KeyedPad: keyed,
			Fetcher: f, Source: source, Writer: m.c.writer, Checkpoints: checkpoints{m.c, name}, Fillers: m.c.cfg.Fillers,
			HangingAfter: m.c.cfg.HangingTxnAfter,
			OnChange:     func(st partition.Status) { m.persistPartition(ctx, tp, st) },
			Logger:       m.log.Named("partition"),
		})
		pctx, stop := context.WithCancel(ctx)
		m.mu.Lock()
		m.parts[tp] = &runningPartition{pm: pm, stop: stop}
		m.mu.Unlock()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer f.Remove(tp)
			defer stop()
			pm.Run(pctx)
		}()
	}
	return nil
}

// failTopic stops every partition of topic and marks it FAILED with reason,
// persisted, so that a restart does not resume it either.
func (m *mirror) failTopic(ctx context.Context, topic string, partitions int32, reason string) {
	for p := int32(0); p < partitions; p++ {
		tp := fetcher.TP{Topic: topic, Partition: p}
		m.mu.Lock()
		rp, ok := m.parts[tp]
		if !ok {
			rp = &runningPartition{pm: partition.New(partition.Config{Mirror: m.rec.Spec.Name, TP: tp})}
			m.parts[tp] = rp
		}
		stop := rp.stop
		rp.stop = nil
		m.mu.Unlock()
		if stop != nil {
			stop()
		}
		if st := rp.pm.Status(); st.State == partition.Failed && st.Reason == reason {
			continue
		}
		rp.pm.Restore(partition.Failed, reason)
		m.persistPartition(ctx, tp, rp.pm.Status())
	}
}

func (m *mirror) persistPartition(ctx context.Context, tp fetcher.TP, st partition.Status) {
	if err := m.c.putJSON(ctx, partitionKey(m.rec.Spec.Name, tp), partitionRecord{State: st.State, Reason: st.Reason}); err != nil && !errors.Is(err, context.Canceled) {
		m.log.Error("persisting partition state", "partition", tp.String(), "error", err)
	}
}

func (m *mirror) status() MirrorStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := MirrorStatus{Name: m.spec.Name, Source: m.spec.Source, Error: m.err, Warnings: m.warnings, StateCounts: map[partition.State]int{}}
	if m.fetch != nil {
		st.BufferedBytes = m.fetch.Buffered()
	}
	byTopic := map[string]*TopicStatus{}
	for _, t := range m.spec.Topics {
		byTopic[t] = &TopicStatus{Name: t, Error: m.topicErrs[t]}
	}
	for tp, rp := range m.parts {
		ts, ok := byTopic[tp.Topic]
		if !ok {
			continue
		}
		ps := rp.pm.Status()
		ts.Partitions = append(ts.Partitions, ps)
		st.StateCounts[ps.State]++
		st.MaxLag = max(st.MaxLag, ps.Lag)
	}
	for _, t := range m.spec.Topics {
		ts := byTopic[t]
		sort.Slice(ts.Partitions, func(i, j int) bool { return ts.Partitions[i].Partition < ts.Partitions[j].Partition })
		st.Topics = append(st.Topics, *ts)
	}
	return st
}

// checkpoints keeps partition alignments in the state topic.
type checkpoints struct {
	c      *Coordinator
	mirror string
}

func (k checkpoints) Alignment(tp fetcher.TP) (partition.Alignment, bool) {
	var a partition.Alignment
	ok := k.c.getJSON(alignmentKey(k.mirror, tp), &a)
	return a, ok
}

func (k checkpoints) SaveAlignment(ctx context.Context, tp fetcher.TP, a partition.Alignment) error {
	return k.c.putJSON(ctx, alignmentKey(k.mirror, tp), a)
}

// sourceReader is what a partition mirror reads of its source cluster.
type sourceReader struct {
	cl   *kgo.Client
	meta *leaders.Cache
}

func (s sourceReader) Bounds(ctx context.Context, topic string, partition int32) (leaders.Bounds, error) {
	return s.meta.Bounds(ctx, topic, partition)
}

func (s sourceReader) ReadAt(ctx context.Context, tp fetcher.TP, offset int64, maxBytes int32) (fetcher.Chunk, error) {
	return fetcher.ReadAt(ctx, s.cl, s.meta, tp, offset, maxBytes)
}
