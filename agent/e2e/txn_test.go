package e2e

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/javaclient"
	"github.com/kmirror/kmirror/internal/kcat"
	"github.com/kmirror/kmirror/internal/rdkafka"
	"github.com/kmirror/kmirror/internal/verify"
	"github.com/kmirror/kmirror/internal/workload"
)

// TestTransactions mirrors a topic written by transactional producers (every
// fifth transaction aborted) interleaved with plain producers: committed
// records must be visible at both isolation levels, aborted ones only to
// read_uncommitted consumers, and every marker offset invisible, on the
// destination exactly as on the source.
func TestTransactions(t *testing.T) {
	forTxnEngines(t, testTransactions)
}

func testTransactions(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{srcBrokers: 3, topic: "payments", partitions: 3})
	topic := p.topic
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	specs := []workload.Spec{
		{Topic: topic, Partitions: 3, Records: 6000, Seed: 1, Codecs: workload.AllCodecs, ChunkRecords: 200,
			TransactionalID: p.name("app-a"), AbortEvery: 5, Headers: true, NullKeyEvery: 7},
		{Topic: topic, Partitions: 3, Records: 4000, Seed: 2, Codecs: []string{workload.CodecZstd, workload.CodecNone}, ChunkRecords: 150,
			TransactionalID: p.name("app-b"), AbortEvery: 3},
		{Topic: topic, Partitions: 3, Records: 3000, Seed: 3, Codecs: []string{workload.CodecLz4}, ChunkRecords: 100},
	}
	// Half of the data is written before the agent starts, half while it
	// runs, so both the backlog and the live path see transactions.
	var mu sync.Mutex
	var records, aborted int64
	produce := func(half int) {
		var wg sync.WaitGroup
		for _, s := range specs {
			s.Records /= 2
			s.Seed += int64(half) * 100
			if s.TransactionalID != "" {
				s.TransactionalID += "-" + strconv.Itoa(half)
			}
			wg.Go(func() {
				st, err := workload.Produce(ctx, p.srcOpts(), s)
				if err != nil {
					t.Errorf("producing %+v: %v", s, err)
					return
				}
				mu.Lock()
				records += st.Records
				aborted += st.Aborted
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	produce(0)
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topic))})
	produce(1)
	if t.Failed() {
		t.FailNow()
	}
	if aborted == 0 || aborted >= records {
		t.Fatalf("the workload acknowledged %d records, %d of them aborted: the test needs both kinds", records, aborted)
	}
	p.waitMirrored(t, a, topic, 2*time.Minute)
	p.assertIdentical(t, topic, identityOpts{
		kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted},
		wantRecords:    records,
	})

	// What consumers of the destination see, against what the producers
	// had acknowledged: all records read_uncommitted, all but the aborted
	// ones read_committed.
	got := kcatCounts(ctx, t, p.dst.BootstrapString(), topic, 3)
	if got[kcat.ReadUncommitted] != records || got[kcat.ReadCommitted] != records-aborted {
		t.Fatalf("destination consumers see %d records read_uncommitted and %d read_committed; the producers acknowledged %d, %d of them in aborted transactions",
			got[kcat.ReadUncommitted], got[kcat.ReadCommitted], records, aborted)
	}
	t.Logf("destination: %d records read_uncommitted, %d read_committed (%d aborted)", records, records-aborted, aborted)
}

// kcatCounts reads every partition of topic with kcat at both isolation
// levels and returns how many records each level sees.
func kcatCounts(ctx context.Context, t *testing.T, bootstrap, topic string, partitions int32) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, iso := range []string{kcat.ReadUncommitted, kcat.ReadCommitted} {
		for _, recs := range kcatReadAll(ctx, t, bootstrap, topic, partitions, iso) {
			out[iso] += int64(len(recs))
		}
	}
	return out
}

// kcatReadAll reads every partition of topic with kcat at iso.
func kcatReadAll(ctx context.Context, t *testing.T, bootstrap, topic string, partitions int32, iso string) map[int32][]verify.Record {
	t.Helper()
	out := map[int32][]verify.Record{}
	for part := range partitions {
		recs, err := kcat.Read(ctx, bootstrap, topic, part, iso, -1, -1)
		if err != nil {
			t.Fatalf("kcat %s p%d %s: %v", topic, part, iso, err)
		}
		out[part] = recs
	}
	return out
}

// txnClient is an independent client that writes transactions.
type txnClient struct {
	name string
	java bool // the Java client, whose protocol follows the cluster's transaction.version
	run  func(context.Context, clientop.Op) (clientop.Result, error)
}

// txnClients are the Java client of e's Kafka release (the newest on the
// embedded engine) and librdkafka.
func txnClients(e engine) []txnClient {
	v := e.version
	if v == "" {
		v = javaclient.DefaultKafkaVersion
	}
	return []txnClient{
		{name: "java-" + v, java: true, run: javaclient.Client{KafkaVersion: v}.Run},
		{name: "librdkafka", run: rdkafka.Client{}.Run},
	}
}

// clientTxns is what one transactional id of an independent client wrote,
// over one or more runs of the same clientop.ProduceTxn.
type clientTxns struct {
	op   clientop.ProduceTxn
	runs int
	sum  clientop.Result
}

// produce runs c's op once more and adds what it reports.
func (ct *clientTxns) produce(ctx context.Context, c txnClient) error {
	res, err := c.run(ctx, ct.op)
	if err != nil {
		return err
	}
	ct.runs++
	ct.sum.CommittedRecords += res.CommittedRecords
	ct.sum.AbortedRecords += res.AbortedRecords
	ct.sum.CommittedTxns += res.CommittedTxns
	ct.sum.AbortedTxns += res.AbortedTxns
	return nil
}

// check compares what the client reported with what it must have reported
// (every AbortEvery-th transaction aborted, the others committed) and with
// what destination consumers see, at each isolation level, in all
// partitions of the topic: every record of transaction i (of each run) read
// uncommitted, and read committed exactly when transaction i committed.
func (ct *clientTxns) check(ctx context.Context, t *testing.T, bootstrap string, partitions int32) {
	t.Helper()
	op := ct.op
	var wantCommittedTxns, wantAbortedTxns int
	for i := range op.Transactions {
		if clientop.Aborted(i, op.AbortEvery) {
			wantAbortedTxns++
		} else {
			wantCommittedTxns++
		}
	}
	wantCommittedTxns *= ct.runs
	wantAbortedTxns *= ct.runs
	s := ct.sum
	if s.CommittedTxns != wantCommittedTxns || s.AbortedTxns != wantAbortedTxns ||
		s.CommittedRecords != wantCommittedTxns*op.RecordsPerTxn || s.AbortedRecords != wantAbortedTxns*op.RecordsPerTxn {
		t.Fatalf("%s: the client reported %+v over %d runs, want %d committed and %d aborted transactions of %d records",
			op.Topic, s, ct.runs, wantCommittedTxns, wantAbortedTxns, op.RecordsPerTxn)
	}
	if s.CommittedTxns == 0 || s.AbortedTxns == 0 {
		t.Fatalf("%s: the client committed %d and aborted %d transactions: the test needs both", op.Topic, s.CommittedTxns, s.AbortedTxns)
	}
	for _, iso := range []string{kcat.ReadUncommitted, kcat.ReadCommitted} {
		perTxn := map[int]int{}
		var total int
		for part, recs := range kcatReadAll(ctx, t, bootstrap, op.Topic, partitions, iso) {
			for _, r := range recs {
				i := -1
				for _, h := range r.Headers {
					if h.Key == clientop.TxnHeader {
						i, _ = strconv.Atoi(string(h.Value))
					}
				}
				if i < 0 || i >= op.Transactions {
					t.Fatalf("%s p%d %s: the record at offset %d (%s) has no valid %s header", op.Topic, part, iso, r.Offset, r, clientop.TxnHeader)
				}
				perTxn[i]++
				total++
			}
		}
		want := s.CommittedRecords + s.AbortedRecords
		if iso == kcat.ReadCommitted {
			want = s.CommittedRecords
		}
		if total != want {
			t.Fatalf("%s: destination consumers read %d records %s; the client reported %d committed and %d aborted records",
				op.Topic, total, iso, s.CommittedRecords, s.AbortedRecords)
		}
		for i := range op.Transactions {
			n := ct.runs * op.RecordsPerTxn
			if iso == kcat.ReadCommitted && clientop.Aborted(i, op.AbortEvery) {
				n = 0
			}
			if perTxn[i] != n {
				t.Fatalf("%s %s: the destination shows %d records of transaction %d (aborted: %v), want %d",
					op.Topic, iso, perTxn[i], i, clientop.Aborted(i, op.AbortEvery), n)
			}
		}
	}
	t.Logf("%s: %d committed transactions (%d records) and %d aborted (%d records), as the client reported, at both isolation levels of the destination",
		op.Topic, s.CommittedTxns, s.CommittedRecords, s.AbortedTxns, s.AbortedRecords)
}

// TestClientTransactions mirrors topics whose transactions, with aborts,
// were written by clients that share no code with franz-go: the Java client
// of the engine's Kafka release (on 4.x with transaction.version 2 it runs
// the KIP-890 protocol, a producer epoch bump at every transaction end; on
// 3.9 the classic one) and librdkafka. Each client runs once before the
// agent starts and once while it mirrors. The destination must be
// offset-identical at both isolation levels, and its read_committed and
// read_uncommitted consumers must see exactly the transactions the clients
// reported committed and aborted.
func TestClientTransactions(t *testing.T) {
	forTxnEngines(t, testClientTransactions)
}

func testClientTransactions(t *testing.T, e engine) {
	const partitions = 3
	clients := txnClients(e)
	p := newPairOn(t, e, pairOpts{srcBrokers: 3, topic: clients[0].name + "-txn", partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tv, err := p.src.TransactionVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	txns := map[string]*clientTxns{}
	var topics []string
	for i, c := range clients {
		topic := p.topic
		if i > 0 {
			topic = p.name(c.name + "-txn")
			createTopic(t, p.srcCl, topic, partitions, nil)
		}
		topics = append(topics, topic)
		txns[c.name] = &clientTxns{op: clientop.ProduceTxn{
			Conn:  clientop.Conn{Bootstrap: p.src.BootstrapString()},
			Topic: topic, TransactionalID: p.name(c.name),
			Transactions: 30, RecordsPerTxn: 6, AbortEvery: 3,
			Compression: []string{workload.CodecZstd, workload.CodecLz4}[i%2],
		}}
	}
	produce := func() {
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				if err := txns[c.name].produce(ctx, c); err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	produce()
	a := p.startAgent(t, agentOpts{apply: new(p.spec(topics...))})
	produce()

	for _, c := range clients {
		ct := txns[c.name]
		topic := ct.op.Topic
		// The protocol the client ran, as the source log shows it:
		// under transaction.version 2 the producer epoch is bumped at
		// every commit and abort, so the source holds more epochs than
		// runs (each run's InitProducerId bumps it once); under the
		// classic protocol, one epoch per run at most.
		epochs := sourceEpochs(ctx, t, p, topic, partitions)
		t.Logf("%s on %s (transaction.version %d): %d producer ids, %d producer epochs in the source log", c.name, e.name, tv, len(epochs), countEpochs(epochs))
		if c.java {
			if tv >= 2 && countEpochs(epochs) <= ct.runs {
				t.Fatalf("%s: transaction.version %d, but the source log holds %d producer epochs for %d runs: the client did not run the KIP-890 protocol (epochs %v)", c.name, tv, countEpochs(epochs), ct.runs, epochs)
			}
			if tv < 2 && countEpochs(epochs) > ct.runs {
				t.Fatalf("%s: transaction.version %d, but the source log holds %d producer epochs for %d runs (epochs %v)", c.name, tv, countEpochs(epochs), ct.runs, epochs)
			}
		}
		p.waitMirrored(t, a, topic, 2*time.Minute)
		p.assertIdentical(t, topic, identityOpts{
			kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted},
			wantRecords:    int64(ct.sum.CommittedRecords + ct.sum.AbortedRecords),
		})
		ct.check(ctx, t, p.dst.BootstrapString(), partitions)
	}
}

// sourceEpochs returns, per producer id, the producer epochs of the data
// batches of topic on the source.
func sourceEpochs(ctx context.Context, t *testing.T, p *pair, topic string, partitions int32) map[int64][]int16 {
	t.Helper()
	sets := map[int64]map[int16]bool{}
	for part := range partitions {
		for _, h := range readBatchHeaders(ctx, t, p.srcCl, topic, part) {
			if h.IsControl() || h.ProducerID < 0 {
				continue
			}
			if sets[h.ProducerID] == nil {
				sets[h.ProducerID] = map[int16]bool{}
			}
			sets[h.ProducerID][h.ProducerEpoch] = true
		}
	}
	out := map[int64][]int16{}
	for id, s := range sets {
		out[id] = slices.Sorted(maps.Keys(s))
	}
	return out
}

func countEpochs(m map[int64][]int16) int {
	var n int
	for _, es := range m {
		n += len(es)
	}
	return n
}

// TestAbortedTransactionsShareDestinationTransactions mirrors a backlog of
// transactions, every other one aborted, with markers fillers: the aborted
// records of a fetch go through one destination transaction, so the agent
// ends fewer destination transactions than the source aborted (each of
// which wrote to every partition it reached), and consumers of the
// destination see what they see on the source at both isolation levels.
func TestAbortedTransactionsShareDestinationTransactions(t *testing.T) {
	forTxnEngines(t, func(t *testing.T, e engine) {
		p := newPairOn(t, e, pairOpts{topic: "ledger", partitions: 3})
		ctx := testCtx(t)
		spec := workload.Spec{Topic: p.topic, Partitions: 3, Records: 3000, Seed: 11, Codecs: []string{workload.CodecZstd, workload.CodecNone},
			ChunkRecords: 50, TransactionalID: p.name("ledger-app"), AbortEvery: 2}
		st, err := workload.Produce(ctx, p.srcOpts(), spec)
		if err != nil {
			t.Fatalf("producing the source: %v", err)
		}
		aborted := st.Aborted / int64(spec.ChunkRecords)
		if aborted < 10 {
			t.Fatalf("the workload aborted %d transactions (%d records): the test needs many", aborted, st.Aborted)
		}
		before := writer.ReadStats().Transactions
		ms := p.spec(p.topic)
		// A span no slow machine runs out of: the count below depends
		// on the fetches only (each ends its transactions at its last
		// marker at the latest).
		a := p.startAgentWith(t, agentOpts{apply: &ms}, func(c *coordinator.Config) {
			c.Fillers, c.AbortSpan = partition.FillMarkers, time.Minute
		})
		p.waitMirrored(t, a, p.topic, 2*time.Minute)
		ended := writer.ReadStats().Transactions - before
		p.assertIdentical(t, p.topic, identityOpts{
			kcatIsolations: []string{kcat.ReadUncommitted, kcat.ReadCommitted},
			wantRecords:    st.Records,
		})
		got := kcatCounts(ctx, t, p.dst.BootstrapString(), p.topic, 3)
		if got[kcat.ReadUncommitted] != st.Records || got[kcat.ReadCommitted] != st.Records-st.Aborted {
			t.Errorf("destination consumers see %d records read_uncommitted and %d read_committed; the producer acknowledged %d, %d of them in aborted transactions",
				got[kcat.ReadUncommitted], got[kcat.ReadCommitted], st.Records, st.Aborted)
		}
		if ended == 0 || ended >= aborted {
			t.Errorf("the agent ended %d destination transactions for %d aborted source transactions over 3 partitions; want at least one, and fewer than the source's", ended, aborted)
		}
		t.Logf("%d aborted source transactions over 3 partitions, %d destination transactions", aborted, ended)
	})
}
