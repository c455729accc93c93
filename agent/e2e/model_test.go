package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/verify"
)

// TestModel mirrors randomly generated source workloads: several
// transactional producers whose transactions span partitions and topics,
// commit or abort at random and sometimes stay open for a while, interleaved
// with plain producers, all while the agent mirrors. Each seed is a model;
// the check is the invariant itself, at both isolation levels, read by
// franz-go (verify) and librdkafka (kcat).
func TestModel(t *testing.T) {
	forEngines(t, func(t *testing.T, e engine) {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { testModel(t, e, seed) })
		}
	})
}

func testModel(t *testing.T, e engine, seed uint64) {
	p := newPairOn(t, e, pairOpts{srcBrokers: 3})
	topics := []string{p.name("ledger"), p.name("events")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, topic := range topics {
		createTopic(t, p.srcCl, topic, 3, nil)
	}
	spec := p.spec(topics...)
	a := p.startAgent(t, agentOpts{apply: &spec})

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := txnModelProducer(ctx, p.srcOpts(), topics, seed*10+uint64(i), p.name(fmt.Sprintf("model-%d-%d", seed, i))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := plainModelProducer(ctx, p.srcOpts(), topics, seed*10+9); err != nil {
			errs <- err
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, topic := range topics {
		p.waitMirrored(t, a, topic, 2*time.Minute)
		reports := p.assertIdentical(t, topic, identityOpts{})
		for part := range reports {
			for _, iso := range []string{kcat.ReadCommitted, kcat.ReadUncommitted} {
				src, err := kcat.Read(ctx, p.src.BootstrapString(), topic, part, iso, -1, -1)
				if err != nil {
					t.Fatal(err)
				}
				dst, err := kcat.Read(ctx, p.dst.BootstrapString(), topic, part, iso, -1, -1)
				if err != nil {
					t.Fatal(err)
				}
				if !sameRecords(src, dst) {
					t.Fatalf("kcat %s %s/%d: %d source records, %d destination records, or a record differs", iso, topic, part, len(src), len(dst))
				}
			}
		}
	}
}

func sameRecords(a, b []verify.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// txnModelProducer runs random transactions: 1 to 40 records each over random
// partitions of both topics, about a quarter aborted, one in eight held open
// for a while before it is decided.
func txnModelProducer(ctx context.Context, opts []kgo.Opt, topics []string, seed uint64, txnID string) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.TransactionalID(txnID),
		kgo.ProducerBatchCompression(codecs[rng.IntN(len(codecs))]),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for txn := range 40 {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("%s: begin: %w", txnID, err)
		}
		n := 1 + rng.IntN(40)
		for i := range n {
			r := &kgo.Record{
				Topic:     topics[rng.IntN(len(topics))],
				Partition: int32(rng.IntN(3)),
				Key:       []byte(strconv.Itoa(rng.IntN(100))),
				Value:     fmt.Appendf(nil, "%s txn %d record %d", txnID, txn, i),
			}
			if rng.IntN(10) == 0 {
				r.Key = nil
			}
			cl.Produce(ctx, r, nil)
		}
		if rng.IntN(8) == 0 {
			// Held open: other producers' data piles up behind it
			// (it holds the source's last stable offset).
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond):
			}
		}
		commit := kgo.TransactionEndTry(rng.IntN(4) != 0)
		if err := cl.Flush(ctx); err != nil {
			return fmt.Errorf("%s: flush: %w", txnID, err)
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			return fmt.Errorf("%s: end: %w", txnID, err)
		}
	}
	return nil
}

// plainModelProducer writes non-transactional records in small bursts.
func plainModelProducer(ctx context.Context, opts []kgo.Opt, topics []string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed))
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)], kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for burst := range 60 {
		for i := range 1 + rng.IntN(20) {
			cl.Produce(ctx, &kgo.Record{Topic: topics[rng.IntN(len(topics))], Partition: int32(rng.IntN(3)),
				Value: fmt.Appendf(nil, "plain %d %d", burst, i)}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rng.IntN(20)) * time.Millisecond):
		}
	}
	return nil
}
