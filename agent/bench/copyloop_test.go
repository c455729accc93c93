package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// The copy loop is the floor the agent is measured against: the least a
// batch-forwarding mirror must do. Per source leader, one goroutine fetches
// raw batches (no fetch session, no budget, no leader tracking) for every
// partition that has room; per partition, one goroutine takes the fetched
// batches in order, rewrites each minimally so that the broker takes it
// (base offset 0, no producer id, CRC recomputed: recordbatch.Rewrite with
// producer id -1), and produces it alone in one request, waiting for the
// acknowledgement before the next: one request in flight per partition, as
// the agent. It keeps no state beyond fetch positions, checks nothing but
// error codes, and stops at the end offsets it is given.
//
// Flow control is the agent's own (fetcher.Options defaults): a partition
// is left out of a fetch while it has 8 undelivered chunks or 2 MiB of them,
// each partition may return up to 1 MiB per fetch, a fetch up to 32 MiB.
const (
	copyQueue        = 8
	copyPartMaxBytes = 1 << 20
	copyMaxBytes     = 32 << 20
)

type copyLane struct {
	p      int32
	leader int32 // source leader
	next   int64 // fetch position, owned by the fetch goroutine
	end    int64
	ch     chan []byte
	queued atomic.Int32
	held   atomic.Int64
}

// copyLoop copies from.p to to.p for every p in ends, up to ends[p]. It
// returns a progress function (offsets written so far) and a channel that
// delivers nil when done or the first error.
func copyLoop(ctx context.Context, e *env, from, to string, ends map[int32]int64) (func() (int64, error), <-chan error, error) {
	src, err := kgo.NewClient(kgo.SeedBrokers(e.srcBoot...))
	if err != nil {
		return nil, nil, err
	}
	// Produce at the agent's protocol versions and acks.
	dst, err := kgo.NewClient(writer.ClientOpts([]kgo.Opt{kgo.SeedBrokers(e.dstBoot...)})...)
	if err != nil {
		src.Close()
		return nil, nil, err
	}
	sm, err := e.srcAdm.Metadata(ctx, from)
	if err == nil {
		err = sm.Topics[from].Err
	}
	if err != nil {
		src.Close()
		dst.Close()
		return nil, nil, fmt.Errorf("source metadata: %w", err)
	}
	dm, err := e.dstAdm.Metadata(ctx, to)
	if err == nil {
		err = dm.Topics[to].Err
	}
	if err != nil {
		src.Close()
		dst.Close()
		return nil, nil, fmt.Errorf("destination metadata: %w", err)
	}
	srcID, dstID := sm.Topics[from].ID, dm.Topics[to].ID

	var acked atomic.Int64
	// wakes[leader] tells that leader's fetcher that a chunk was consumed.
	wakes := map[int32]chan struct{}{}
	for p := range ends {
		wakes[sm.Topics[from].Partitions[p].Leader] = make(chan struct{}, 1)
	}
	var (
		errOnce  sync.Once
		firstErr error
		failed   = make(chan struct{})
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; close(failed) })
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup

	byLeader := map[int32][]*copyLane{}
	for p, end := range ends {
		l := &copyLane{p: p, leader: sm.Topics[from].Partitions[p].Leader, end: end, ch: make(chan []byte, copyQueue)}
		byLeader[l.leader] = append(byLeader[l.leader], l)
		dstLeader := dm.Topics[to].Partitions[p].Leader
		wake := wakes[l.leader]
		wg.Add(1)
		go func() { // the partition's producer
			defer wg.Done()
			var written int64
			for written < l.end {
				var chunk []byte
				select {
				case <-lctx.Done():
					return
				case chunk = <-l.ch:
				}
				for rest := chunk; len(rest) > 0; {
					b, r, err := recordbatch.Next(rest)
					if err != nil || b == nil {
						fail(fmt.Errorf("copy loop: reading a batch of %s/%d: %v", from, l.p, err))
						return
					}
					rest = r
					h, err := recordbatch.ParseHeader(b)
					if err != nil {
						fail(err)
						return
					}
					if err := recordbatch.Rewrite(b, -1, -1, -1, false); err != nil {
						fail(err)
						return
					}
					req := kmsg.NewPtrProduceRequest()
					req.Acks = -1
					req.TimeoutMillis = 30000
					rt := kmsg.NewProduceRequestTopic()
					rt.Topic, rt.TopicID = to, dstID
					rp := kmsg.NewProduceRequestTopicPartition()
					rp.Partition = l.p
					rp.Records = b
					rt.Partitions = append(rt.Partitions, rp)
					req.Topics = append(req.Topics, rt)
					kresp, err := dst.Broker(int(dstLeader)).Request(lctx, req)
					if err != nil {
						fail(fmt.Errorf("copy loop: producing to %s/%d: %w", to, l.p, err))
						return
					}
					if err := kerr.ErrorForCode(kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode); err != nil {
						fail(fmt.Errorf("copy loop: producing to %s/%d: %w", to, l.p, err))
						return
					}
					written = h.LastOffset() + 1
					acked.Add(int64(h.NumRecords))
				}
				l.queued.Add(-1)
				l.held.Add(-int64(len(chunk)))
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
	}
	for leader, lanes := range byLeader {
		wg.Add(1)
		go func() { // the leader's fetcher
			defer wg.Done()
			wake := wakes[leader]
			byP := map[int32]*copyLane{}
			for _, l := range lanes {
				byP[l.p] = l
			}
			for lctx.Err() == nil {
				req := kmsg.NewPtrFetchRequest()
				req.ReplicaID = -1
				req.MaxWaitMillis = 250
				req.MinBytes = 1
				req.MaxBytes = copyMaxBytes
				req.SessionEpoch = -1
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic, rt.TopicID = from, srcID
				pending := false
				for _, l := range lanes {
					if l.next >= l.end {
						continue
					}
					pending = true
					if l.queued.Load() >= copyQueue || l.held.Load() >= 2*copyPartMaxBytes {
						continue
					}
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition = l.p
					rp.FetchOffset = l.next
					rp.CurrentLeaderEpoch = -1
					rp.LastFetchedEpoch = -1
					rp.LogStartOffset = -1
					rp.PartitionMaxBytes = copyPartMaxBytes
					rt.Partitions = append(rt.Partitions, rp)
				}
				if !pending {
					return
				}
				if len(rt.Partitions) == 0 {
					select {
					case <-lctx.Done():
						return
					case <-wake:
					}
					continue
				}
				req.Topics = append(req.Topics, rt)
				kresp, err := src.Broker(int(leader)).Request(lctx, req)
				if err != nil {
					fail(fmt.Errorf("copy loop: fetching from %s: %w", from, err))
					return
				}
				resp := kresp.(*kmsg.FetchResponse)
				if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
					fail(fmt.Errorf("copy loop: fetching from %s: %w", from, err))
					return
				}
				for _, t := range resp.Topics {
					for _, rp := range t.Partitions {
						l := byP[rp.Partition]
						if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
							fail(fmt.Errorf("copy loop: fetching %s/%d: %w", from, rp.Partition, err))
							return
						}
						whole, next := wholeBatches(rp.RecordBatches)
						if len(whole) == 0 {
							continue
						}
						l.next = next
						l.queued.Add(1)
						l.held.Add(int64(len(whole)))
						l.ch <- whole // never blocks: queued < capacity
					}
				}
			}
		}()
	}
	done := make(chan error, 1)
	go func() {
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		select {
		case <-all:
		case <-failed:
			cancel()
			<-all
		}
		cancel()
		src.Close()
		dst.Close()
		done <- firstErr
	}()
	progress := func() (int64, error) { return acked.Load(), nil }
	return progress, done, nil
}

// wholeBatches cuts a trailing partial batch off raw and returns the offset
// after the last whole batch.
func wholeBatches(raw []byte) ([]byte, int64) {
	var next int64
	rest := raw
	for len(rest) > 0 {
		b, r, err := recordbatch.Next(rest)
		if err != nil || b == nil {
			break
		}
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			break
		}
		next = h.LastOffset() + 1
		rest = r
	}
	return raw[:len(raw)-len(rest)], next
}
