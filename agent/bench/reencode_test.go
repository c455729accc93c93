package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// reencode is the MirrorMaker-style contender: a franz-go consumer reads
// every record of from (decompressing and decoding the batches), and a
// franz-go producer writes each to the same partition of to, re-encoding
// and recompressing them with zstd, idempotent with acks=all (kgo's
// defaults: 10 ms linger, 1 MB batches, up to 5 requests in flight per
// broker). Records are handed over without copying their bytes, which
// MirrorMaker cannot do, so this contender is if anything flattered.
func reencode(ctx context.Context, e *env, from, to string, ends map[int32]int64) (func() (int64, error), <-chan error, error) {
	offsets := map[int32]kgo.Offset{}
	var total int64
	for p, end := range ends {
		offsets[p] = kgo.NewOffset().AtStart()
		total += end
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.srcBoot...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{from: offsets}))
	if err != nil {
		return nil, nil, err
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(e.dstBoot...),
		kgo.DefaultProduceTopic(to),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		cons.Close()
		return nil, nil, err
	}
	var (
		acked    atomic.Int64
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		defer func() {
			cancel()
			cons.Close()
			prod.Close()
			done <- firstErr
		}()
		var consumed int64
		for consumed < total && lctx.Err() == nil {
			fs := cons.PollFetches(lctx)
			if errs := fs.Errors(); len(errs) > 0 && lctx.Err() == nil {
				fail(fmt.Errorf("re-encode: consuming %s: %v", from, errs[0].Err))
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				consumed++
				out := &kgo.Record{Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
				prod.Produce(lctx, out, func(_ *kgo.Record, err error) {
					if err != nil {
						fail(fmt.Errorf("re-encode: producing to %s: %w", to, err))
						cancel()
						return
					}
					acked.Add(1)
				})
			})
		}
		if err := prod.Flush(lctx); err != nil {
			fail(err)
		}
	}()
	progress := func() (int64, error) { return acked.Load(), nil }
	return progress, done, nil
}
