package mirror

// The topic sync: at every metadata refresh, each destination topic is
// created or grown to its source's partitions, its topic ids checked
// against those mirrored so far, and a partition mirror started for every
// source partition not yet running (or restored from its persisted state).

import (
	"context"
	"errors"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/topics"
	"github.com/kmirror/kmirror/agent/writegate"
	"github.com/kmirror/kmirror/internal/reason"
)

// syncTopics creates or grows each destination topic and starts a partition
// mirror for every source partition not yet running.
func (m *Runner) syncTopics(ctx context.Context, mgr *topics.Manager, source sourceReader, f *fetcher.Fetcher) {
	m.mu.Lock()
	names := append([]string(nil), m.spec.Topics...)
	m.mu.Unlock()
	for _, topic := range names {
		done, ok := m.recreates.sync(topic)
		if !ok {
			continue // recreateTopic restarts its partitions
		}
		err := m.syncTopic(ctx, mgr, source, f, topic)
		done()
		m.mu.Lock()
		if err != nil {
			if m.topicErrs[topic] != err.Error() {
				m.log.Error("topic not mirrored", "topic", topic, "error", err)
			}
			m.topicErrs[topic] = err.Error()
			m.topicErrCodes[topic] = topicErrCode(err)
		} else {
			delete(m.topicErrs, topic)
			delete(m.topicErrCodes, topic)
		}
		m.mu.Unlock()
	}
	m.recordPartitionSync(names)
}

// topicErrCode is the code of a topic's error, "" when it has none.
func topicErrCode(err error) reason.Code {
	switch {
	case errors.Is(err, topics.ErrSourceTopicNotFound):
		return reason.SourceTopicMissing
	case errors.Is(err, topics.ErrDestinationHasMorePartitions):
		return reason.DestinationHasMorePartitions
	}
	return reason.CodeOf(err)
}

func (m *Runner) syncTopic(ctx context.Context, mgr *topics.Manager, source sourceReader, f *fetcher.Fetcher, topic string) error {
	if !m.Home() {
		// The home keeps the topic; this runner reads the source
		// topic and runs the partitions given to its agent.
		info, err := mgr.Source(ctx, topic)
		if err != nil {
			return err
		}
		m.startPartitions(ctx, source, f, topic, info)
		return nil
	}
	name := m.rec.Spec.Name
	if m.restoreStoppedTopic(topic) {
		// A stopped topic is an ordinary destination topic now: neither
		// its configs nor its partitions follow the source any more,
		// and it is writable (its ACL is removed, again after a
		// restart in case the stop could not).
		m.fences.release(ctx, topic)
		return nil
	}
	// Ensure may create the topic, add partitions and set configs:
	// writes, so the writer lease is checked first.
	if err := writegate.Check(ctx); err != nil {
		return err
	}
	info, err := mgr.Ensure(ctx, topic)
	if err != nil {
		return err
	}
	// Read-only before any partition mirror starts writing it.
	m.enforceReadOnly(ctx, topic)
	srcID, dstID := topicID(info.SourceTopicID), topicID(info.DestinationTopicID)
	recovering := m.life.takeRecoveringTopic(topic)
	var tr topicRecord
	if !ReadRecord(m.cfg.Store, topicKey(name, topic), &tr) {
		if err := WriteRecord(ctx, m.cfg.Store, topicKey(name, topic), topicRecord{SourceTopicID: srcID, DestinationTopicID: dstID}); err != nil {
			return err
		}
	} else {
		check, next := checkTopicIDs(tr, srcID, dstID, recovering)
		var r reason.Error
		switch check {
		case idsSourceRecreatedRealign:
			r = reason.New(reason.SourceTopicRecreatedRealignFailed, "source topic %q was recreated (topic id %s, mirrored %s): a recover cannot re-align it, as the destination holds the old topic's records at the offsets the new one reuses; the destination topic must be recreated to mirror the new source topic: recover with recreate (kmirror recover --recreate) does it, and the destination's records are lost",
				topic, info.SourceTopicID, tr.SourceTopicID)
		case idsSourceRecreated:
			r = reason.New(reason.SourceTopicRecreated, "source topic %q was recreated (topic id %s, mirrored %s): its offsets no longer match the destination's; recover the topic to mirror it again",
				topic, info.SourceTopicID, tr.SourceTopicID)
			for _, pr := range persistedPartitions(m.cfg.Store, name, topic) {
				if pr.State == partition.Failed && pr.ReasonCode == reason.SourceTopicRecreatedRealignFailed {
					r = pr.why() // a recover said so already
					break
				}
			}
		case idsDestinationRecreated:
			r = reason.New(reason.DestinationTopicRecreated, "destination topic %q was recreated (topic id %s, mirrored into %s): the records mirrored there are lost; recover the topic to mirror it again",
				topic, dstID, tr.DestinationTopicID)
		case idsAdoptDestination:
			m.log.Warn("recover: mirroring into the recreated destination topic", "topic", topic, "topic_id", dstID)
		}
		if r.Code != "" {
			m.failTopic(ctx, topic, info.SourcePartitions, r)
			return &r
		}
		if next != tr {
			if err := WriteRecord(ctx, m.cfg.Store, topicKey(name, topic), next); err != nil {
				return err
			}
		}
	}
	if info.PartitionsAdded > 0 {
		m.log.Info("destination partitions added", "topic", topic, "added", info.PartitionsAdded)
		m.cfg.Writer.Meta().Invalidate(topic)
		source.meta.Invalidate(topic)
	}
	m.startPartitions(ctx, source, f, topic, info)
	return nil
}

// startPartitions starts a partition mirror for every partition of topic
// this runner runs (its share) that does not run yet, or restores it from
// its persisted state.
func (m *Runner) startPartitions(ctx context.Context, source sourceReader, f *fetcher.Fetcher, topic string, info topics.Info) {
	name := m.rec.Spec.Name
	keyed := info.SourceCompacted()
	for p := int32(0); p < info.SourcePartitions; p++ {
		tp := fetcher.TP{Topic: topic, Partition: p}
		m.mu.Lock()
		rp, running := m.parts[tp]
		if running && rp.placeholder {
			running = false
		}
		mine := m.runs(tp)
		m.mu.Unlock()
		if running || !mine || m.holdBack(ctx, tp) {
			continue
		}
		recovering := m.life.takeRecovering(tp)
		cfg := partition.Config{
			Mirror: name, TP: tp, ProducerID: m.rec.ProducerID, Epoch: m.rec.Epoch, KeyedPad: keyed,
			Fetcher: f, Source: source, Writer: m.cfg.Writer, Checkpoints: checkpoints{m.cfg.Store, name}, Producers: ownedProducers{m.cfg.Store, m.cfg.Logger}, Fillers: m.cfg.Fillers,
			HangingAfter: m.cfg.HangingTxnAfter, AbortSpan: m.cfg.AbortSpan, Recovering: recovering, Base: m.failbackBase(tp), TxnTimeout: m.conn.txnTimeoutNow(),
			OnChange: func(st partition.Status) { m.persistPartition(ctx, tp, st) },
			OnClose:  func(at int64) { m.noteClosed(ctx, tp, at) },
			Logger:   m.log.Named("partition"),
		}
		var pr partitionRecord
		persisted := ReadRecord(m.cfg.Store, PartitionKey(name, tp), &pr)
		if persisted && m.restorePartition(tp, cfg, pr) {
			// Failed, paused and stopped partitions stay so across
			// restarts until an operation moves them; a failover stop
			// that was under way is finished.
			continue
		}
		pm := partition.New(cfg)
		pctx, stop := context.WithCancel(writegate.With(ctx, m.gateOf(tp)))
		done := make(chan struct{})
		m.mu.Lock()
		if !m.runs(tp) || m.parts[tp] != rp || (rp != nil && !rp.placeholder) {
			// Its share changed meanwhile (SetParts), or a lifecycle
			// operation took it (a pause of a partition given to this
			// agent a moment ago): the next look starts it as the
			// share and its state say, if at all.
			m.mu.Unlock()
			stop()
			continue
		}
		m.parts[tp] = &runningPartition{pm: pm, stop: stop, done: done}
		m.mu.Unlock()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer close(done)
			defer f.Remove(tp)
			defer stop()
			pm.Run(pctx)
		}()
		if persisted && pr.State == partition.Stopping && pr.StopMode == StopPromote {
			// A promote that was under way fences the source again
			// (idempotent) and waits for lag 0 again.
			if !m.fences.fenceOf(topic).done {
				if err := m.fenceSource(ctx, []string{topic}); err != nil {
					m.log.Error("promote resumed after a restart: fencing the source failed; the promote waits for producers to stop", "topic", topic, "error", err)
					m.fences.tried([]string{topic}, err.Error())
				}
			}
			m.startPromote(tp, pm)
		}
	}
}

// idCheck is what a topic sync does about the ids of a topic the agent
// has a record of (checkTopicIDs).
type idCheck int

const (
	idsMatch             idCheck = iota // mirror on
	idsAdoptDestination                 // a recover mirrors into the recreated destination topic, from its end
	idsRecordDestination                // a record from before destination ids were kept gets the id
	// The topic fails: the source topic was recreated, so its offsets no
	// longer match the destination's; the same, found by a recover,
	// which cannot re-align it; the destination topic was recreated, so
	// the records mirrored there are lost.
	idsSourceRecreated
	idsSourceRecreatedRealign
	idsDestinationRecreated
)

// checkTopicIDs is what a topic sync does about the topic ids the brokers
// report now, src and dst (zero where a broker reports none), given the
// record tr of the ids mirrored so far, and the record to keep; recovering
// says that a recover cleared a partition of the topic since its last sync.
func checkTopicIDs(tr topicRecord, src, dst topicID, recovering bool) (idCheck, topicRecord) {
	var none topicID
	srcRecreated := tr.SourceTopicID != src && src != none
	switch {
	case srcRecreated && recovering:
		return idsSourceRecreatedRealign, tr
	case tr.DestinationTopicID != dst && tr.DestinationTopicID != none && dst != none && recovering:
		// The records mirrored into the old destination topic are
		// gone: mirror into the new one from its end.
		tr.DestinationTopicID = dst
		return idsAdoptDestination, tr
	case srcRecreated:
		return idsSourceRecreated, tr
	case dst == none || tr.DestinationTopicID == dst:
		return idsMatch, tr
	case tr.DestinationTopicID != none:
		return idsDestinationRecreated, tr
	}
	tr.DestinationTopicID = dst
	return idsRecordDestination, tr
}

// failTopic stops every partition of topic and marks it FAILED with r,
// persisted, so that a restart does not resume it either.
func (m *Runner) failTopic(ctx context.Context, topic string, partitions int32, r reason.Error) {
	for p := int32(0); p < partitions; p++ {
		tp := fetcher.TP{Topic: topic, Partition: p}
		m.mu.Lock()
		rp, ok := m.parts[tp]
		if !ok {
			rp = &runningPartition{pm: m.idlePartition(tp), done: closedDone()}
			m.parts[tp] = rp
		}
		if s := rp.pm.Status().State; s == partition.Stopped || s == partition.Stopping {
			// Stopped is final, and a stop under way finishes.
			m.mu.Unlock()
			continue
		}
		stop := rp.stop
		rp.stop, rp.placeholder = nil, false
		m.mu.Unlock()
		if stop != nil {
			stop()
		}
		if st := rp.pm.Status(); st.State == partition.Failed && st.Reason == r.Message && st.ReasonCode == r.Code {
			continue
		}
		rp.pm.Restore(partition.Failed, r)
		m.persistPartition(ctx, tp, rp.pm.Status())
	}
}
