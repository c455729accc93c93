package devcluster

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchCut: a read_committed Fetch whose MaxBytes runs out inside its
// second partition gets, for that partition, the batches that fit and the
// aborted transaction among them, as from Apache Kafka; the first partition
// whole; nothing beyond MaxBytes. Over TLS too (compatConn sits above it).
// The lenient cluster, plain kfake, shows what the cut mends: the aborted
// transaction is left out. When that case fails, kfake mended it itself.
func TestFetchCut(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        []Option
		wantAborted bool
	}{
		{"strict", nil, true},
		{"strict over TLS", []Option{TLS()}, true},
		{"lenient (kfake alone)", []Option{Lenient()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startT(t, append(tc.opts, Brokers(1), KfakeOptions(kfake.SeedTopics(2, "t")))...)
			tlsOpts := c.tlsOpt()
			// Each partition: an aborted transaction, then a committed
			// one, then an aborted and a committed one again.
			txn := newClient(t, c, append(tlsOpts, kgo.TransactionalID("cut"), kgo.DefaultProduceTopic("t"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
			ctx := testCtx(t)
			for i, commit := range []bool{false, true, false, true} {
				if err := txn.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for p := range int32(2) {
					for range 10 {
						txn.Produce(ctx, &kgo.Record{Partition: p, Value: []byte(strings.Repeat("v", 1000))}, nil)
					}
				}
				if err := txn.Flush(ctx); err != nil {
					t.Fatalf("transaction %d: %v", i, err)
				}
				if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
					t.Fatalf("ending transaction %d: %v", i, err)
				}
			}
			cl := newClient(t, c, tlsOpts...)
			td, err := kadm.NewClient(cl).ListTopics(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			id := td["t"].ID
			fetch := func(maxBytes int32) *kmsg.FetchResponse {
				t.Helper()
				req := kmsg.NewPtrFetchRequest()
				req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.IsolationLevel, req.SessionEpoch = -1, 0, maxBytes, 1, -1
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic, rt.TopicID = "t", id
				for p := range int32(2) {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, 0, 1<<20, -1, -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Topics) != 1 {
					t.Fatalf("fetch answered %d topics", len(resp.Topics))
				}
				return resp
			}
			whole := fetch(math.MaxInt32 - 1)
			p0, p1 := whole.Topics[0].Partitions[0].RecordBatches, whole.Topics[0].Partitions[1].RecordBatches
			first := batchSizes(p1)[0]
			if len(whole.Topics[0].Partitions[1].AbortedTransactions) != 2 {
				t.Fatalf("uncut fetch: partition 1 lists %d aborted transactions, want 2", len(whole.Topics[0].Partitions[1].AbortedTransactions))
			}

			// MaxBytes ends one byte into partition 1's second batch
			// (the abort marker of its first transaction).
			maxBytes := int32(len(p0) + first + 1)
			cut := fetch(maxBytes).Topics[0].Partitions
			if len(cut) != 2 {
				t.Fatalf("cut fetch answered %d partitions, want 2", len(cut))
			}
			if got := len(cut[0].RecordBatches); got != len(p0) {
				t.Errorf("partition 0: %d bytes, want all %d", got, len(p0))
			}
			if got := len(cut[1].RecordBatches); got != first {
				t.Errorf("partition 1: %d bytes, want its first batch (%d): MaxBytes %d", got, first, maxBytes)
			}
			ats := cut[1].AbortedTransactions
			if tc.wantAborted && (len(ats) != 1 || ats[0].FirstOffset != 0) {
				t.Errorf("partition 1 lists aborted transactions %+v, want the one at offset 0 (its first batch is aborted)", ats)
			}
			if !tc.wantAborted && len(ats) != 0 {
				t.Errorf("kfake alone lists the aborted transaction of a partition the MaxBytes cut (%+v): it mended the difference; fetchcut.go can go", ats)
			}
		})
	}
}

// batchSizes are the sizes of the whole batches in b.
func batchSizes(b []byte) []int {
	var out []int
	for len(b) >= 12 {
		n := 12 + int(binary.BigEndian.Uint32(b[8:]))
		out = append(out, n)
		b = b[n:]
	}
	return out
}
