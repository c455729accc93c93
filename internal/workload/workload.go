// Package workload produces deterministic record streams for tests, the
// demo and benchmarks.
//
// Record i of a Spec is a pure function of the spec and i (Spec.Record), so
// a test can say what any offset must hold without keeping the records. The
// records are produced in chunks; each chunk goes through the client of the
// next codec in Spec.Codecs, so a topic holds batches of every codec, and a
// chunk is acknowledged before the next one starts, so that record i lands
// on partition i % Partitions at offset i / Partitions (counted from the
// partition's end when producing started, without transactions) whatever
// the number of clients.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Codec names, as Kafka's compression.type spells them.
const (
	CodecNone   = "none"
	CodecGzip   = "gzip"
	CodecSnappy = "snappy"
	CodecLz4    = "lz4"
	CodecZstd   = "zstd"
)

// AllCodecs lists every codec, for a topic that holds them all.
var AllCodecs = []string{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd}

// Defaults filled in by Spec.WithDefaults.
const (
	DefaultValueSize    = 100
	DefaultChunkRecords = 1000
)

// timestampWindow is the span explicit timestamps cycle through, and
// timestampAge how far before the start of production the window begins:
// timestamps stay within the last hour (brokers refuse records too far from
// their clock with the 1 hour message.timestamp.*.max.ms some set) for
// twenty minutes of production.
const (
	timestampWindow = 30 * time.Minute
	timestampAge    = 40 * time.Minute
)

// stopGrace is how long a cancelled run waits for the chunk in progress to
// be acknowledged.
const stopGrace = 30 * time.Second

// Spec describes a workload. The zero value of every field but Topic is
// usable.
type Spec struct {
	Topic string
	// Partitions: record i goes to partition i % Partitions. 0 means 1.
	Partitions int32
	// Records to produce. For a Producer, 0 means until cancelled.
	Records int
	// Seed makes values and key choices reproducible.
	Seed int64
	// Keys is the number of distinct keys; record keys are then drawn
	// from them pseudo-randomly, so a compacted topic has something to
	// remove. 0 gives every record its own key.
	Keys int
	// ValueSize is the length of non-null, non-empty values; 0 means
	// DefaultValueSize. Values are binary (NUL, newline, 0xff, quotes) but
	// compressible, so that every codec really compresses.
	ValueSize int
	// Codecs rotate across chunks, one client per codec; nil means none
	// only.
	Codecs []string
	// ChunkRecords is how many records go through one client (and one
	// transaction) before the next; 0 means DefaultChunkRecords.
	ChunkRecords int
	// Every Nth record (i % N == N-1) gets a null key, an empty key, a
	// null value or an empty value; 0 disables. Null wins over empty when
	// both apply.
	NullKeyEvery, EmptyKeyEvery, NullValueEvery, EmptyValueEvery int
	// Headers gives record i i%3 headers: none; "seq"; "seq" and a header
	// with a null value (odd i) or an empty one (even i).
	Headers bool
	// ExplicitTimestamps sets record i's timestamp to TimestampBase plus
	// i modulo 30 minutes, in milliseconds. Otherwise the client stamps
	// records when producing them and Record leaves Timestamp zero.
	ExplicitTimestamps bool
	// TimestampBase is the timestamp of record 0 with ExplicitTimestamps;
	// zero means 40 minutes before WithDefaults is called.
	TimestampBase time.Time
	// TransactionalID, if set, makes every chunk a transaction of the
	// producer TransactionalID-<codec>. Each chunk then ends with one
	// marker in every partition it wrote to, which takes an offset.
	TransactionalID string
	// AbortEvery aborts every Nth transaction (chunk k with k % N ==
	// N-1); 0 commits them all. Requires TransactionalID.
	AbortEvery int
}

// WithDefaults returns s with defaults filled in, including a timestamp base
// taken from the clock. Produce and Producer run it; call it first to know
// the base, which Record needs to reproduce timestamps.
func (s Spec) WithDefaults() Spec {
	if s.Partitions == 0 {
		s.Partitions = 1
	}
	if s.ValueSize == 0 {
		s.ValueSize = DefaultValueSize
	}
	if s.Codecs == nil {
		s.Codecs = []string{CodecNone}
	}
	if s.ChunkRecords == 0 {
		s.ChunkRecords = DefaultChunkRecords
	}
	if s.ExplicitTimestamps && s.TimestampBase.IsZero() {
		s.TimestampBase = time.Now().Add(-timestampAge).Truncate(time.Millisecond)
	}
	return s
}

func (s Spec) validate() error {
	switch {
	case s.Topic == "":
		return errors.New("workload: a topic is required")
	case s.Partitions < 1:
		return fmt.Errorf("workload: %d partitions", s.Partitions)
	case s.Records < 0 || s.Keys < 0 || s.ValueSize < 0 || s.ChunkRecords < 1 ||
		s.NullKeyEvery < 0 || s.EmptyKeyEvery < 0 || s.NullValueEvery < 0 || s.EmptyValueEvery < 0 || s.AbortEvery < 0:
		return errors.New("workload: counts must not be negative")
	case s.AbortEvery > 0 && s.TransactionalID == "":
		return errors.New("workload: AbortEvery needs a TransactionalID")
	case len(s.Codecs) == 0:
		return errors.New("workload: no codec")
	}
	for _, c := range s.Codecs {
		if _, err := codec(c); err != nil {
			return err
		}
	}
	return nil
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case CodecNone:
		return kgo.NoCompression(), nil
	case CodecGzip:
		return kgo.GzipCompression(), nil
	case CodecSnappy:
		return kgo.SnappyCompression(), nil
	case CodecLz4:
		return kgo.Lz4Compression(), nil
	case CodecZstd:
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("workload: unknown codec %q (want one of %v)", name, AllCodecs)
}

// wireCodec names the compression attribute of a produced batch.
func wireCodec(attr uint8) string {
	if int(attr) < len(AllCodecs) {
		return AllCodecs[attr]
	}
	return "codec-" + strconv.Itoa(int(attr))
}

// Aborted reports whether record i belongs to a transaction the workload
// aborts. A transaction whose commit failed ends otherwise: see
// Stats.Aborted and Stats.Unsettled.
func (s Spec) Aborted(i int) bool {
	if s.AbortEvery <= 0 || s.TransactionalID == "" {
		return false
	}
	chunk := s.chunkRecords()
	return (i/chunk)%s.AbortEvery == s.AbortEvery-1
}

func (s Spec) chunkRecords() int {
	if s.ChunkRecords > 0 {
		return s.ChunkRecords
	}
	return DefaultChunkRecords
}

// valueAlphabet has 16 symbols (4 bits of entropy a byte, so values
// compress about 2:1) and includes the bytes that break naive readers.
const valueAlphabet = "\x00\n\xff\"\\,=%abcdefgh"

// Record returns record i of the workload, with Topic and Partition set and
// Offset left zero. Call it on a spec that went through WithDefaults.
func (s Spec) Record(i int) *kgo.Record {
	parts := max(s.Partitions, 1)
	r := &kgo.Record{Topic: s.Topic, Partition: int32(i % int(parts))}
	rng := rand.New(rand.NewPCG(uint64(s.Seed), uint64(i)))

	switch {
	case every(i, s.NullKeyEvery):
	case every(i, s.EmptyKeyEvery):
		r.Key = []byte{}
	case s.Keys > 0:
		r.Key = fmt.Appendf(nil, "key-%d", rng.IntN(s.Keys))
	default:
		r.Key = fmt.Appendf(nil, "key-%d", i)
	}

	switch {
	case every(i, s.NullValueEvery):
	case every(i, s.EmptyValueEvery):
		r.Value = []byte{}
	default:
		size := s.ValueSize
		if size == 0 {
			size = DefaultValueSize
		}
		// A readable prefix to recognise records in dumps, then
		// reproducible noise.
		v := fmt.Appendf(make([]byte, 0, size), "%d:%d:", s.Seed, i)
		for len(v) < size {
			n := rng.Uint64()
			for b := 0; b < 16 && len(v) < size; b++ {
				v = append(v, valueAlphabet[n&0xf])
				n >>= 4
			}
		}
		r.Value = v[:size]
	}

	if s.Headers {
		switch i % 3 {
		case 1:
			r.Headers = []kgo.RecordHeader{{Key: "seq", Value: strconv.AppendInt(nil, int64(i), 10)}}
		case 2:
			last := kgo.RecordHeader{Key: "empty", Value: []byte{}}
			if i%2 == 1 {
				last = kgo.RecordHeader{Key: "null"}
			}
			r.Headers = []kgo.RecordHeader{{Key: "seq", Value: strconv.AppendInt(nil, int64(i), 10)}, last}
		}
	}

	if s.ExplicitTimestamps {
		window := timestampWindow.Milliseconds()
		r.Timestamp = s.TimestampBase.Add(time.Duration(int64(i)%window) * time.Millisecond)
	}
	return r
}

func every(i, n int) bool { return n > 0 && i%n == n-1 }

// Stats says what a run produced.
type Stats struct {
	// Spec is the spec as run, defaults included: Spec.Record reproduces
	// what was written.
	Spec Spec
	// Records counts acknowledged records, PerPartition per partition.
	// Records of aborted transactions are included: they take offsets.
	Records      int64
	PerPartition map[int32]int64
	// Aborted counts the acknowledged records of aborted transactions,
	// including those of a commit the client refused to attempt.
	Aborted int64
	// Unsettled counts the acknowledged records of transactions whose
	// commit was sent but never answered (its coordinator went away with
	// it): committed or aborted, the producer cannot tell. They are in
	// the log either way, and counted in Records.
	Unsettled int64
	// Bytes counts acknowledged key and value bytes.
	Bytes int64
	// Batches counts produced batches by the codec they carry on the wire.
	// kgo sends a batch uncompressed when compressing does not shrink it,
	// so this is what the topic really holds.
	Batches map[string]int
	Elapsed time.Duration
}

// Produce writes spec.Records records and returns once all are
// acknowledged. clientOpts reach the cluster (seed brokers, TLS, SASL);
// Produce adds its own producer options and builds one client per codec.
func Produce(ctx context.Context, clientOpts []kgo.Opt, spec Spec) (Stats, error) {
	spec = spec.WithDefaults()
	if err := spec.validate(); err != nil {
		return Stats{Spec: spec}, err
	}
	if spec.Records == 0 {
		// For a run, 0 means "until cancelled"; here it means nothing.
		return Stats{Spec: spec, PerPartition: map[int32]int64{}, Batches: map[string]int{}}, nil
	}
	return newRun(clientOpts, spec, 0).run(ctx)
}

// Producer produces a workload continuously at a target rate, until its
// context is cancelled or spec.Records records (if set) are written. It is
// for mirroring-while-producing tests and the demo.
type Producer struct {
	r *run
}

// NewProducer prepares a producer of spec at perSecond records a second (0:
// as fast as possible).
func NewProducer(clientOpts []kgo.Opt, spec Spec, perSecond int) *Producer {
	spec = spec.WithDefaults()
	if perSecond > 0 {
		// Chunks of about 50 ms of records keep the rate smooth. The
		// spec carries the size so that Spec().Aborted stays right.
		spec.ChunkRecords = max(1, min(spec.ChunkRecords, perSecond/20))
	}
	return &Producer{r: newRun(clientOpts, spec, perSecond)}
}

// Spec returns the spec being produced, defaults included.
func (p *Producer) Spec() Spec { return p.r.spec }

// Run produces until ctx is done or the records are all written. On
// cancellation it finishes the chunk in progress (and its transaction)
// before returning, so every record handed to Kafka is acknowledged or
// failed, never in doubt, and the counts match the topic; cancellation is
// not an error. Run may be called once.
func (p *Producer) Run(ctx context.Context) (Stats, error) {
	return p.r.run(ctx)
}

// Acked returns the records acknowledged so far per partition. It is safe to
// call while Run is running; counts grow a chunk at a time.
func (p *Producer) Acked() map[int32]int64 {
	return p.r.acked()
}

// WaitAcked blocks until at least n records are acknowledged, the producer
// stops, or ctx is done. Tests use it to act at a known point of
// production instead of sleeping.
func (p *Producer) WaitAcked(ctx context.Context, n int64) error {
	for {
		total, changed, stopped := p.r.progress()
		if total >= n {
			return nil
		}
		if stopped {
			return fmt.Errorf("workload: producer stopped after %d records, before %d", total, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// run is one production: Produce's and Producer's common engine.
type run struct {
	clientOpts []kgo.Opt
	spec       Spec
	rate       int

	perPart   []atomic.Int64 // acknowledged records per partition
	aborted   atomic.Int64
	unsettled atomic.Int64
	bytes     atomic.Int64
	firstMu   sync.Mutex
	first     error // first produce error

	batchMu sync.Mutex
	batches map[string]int

	progMu  sync.Mutex
	total   int64
	changed chan struct{} // closed and replaced at every chunk
	stopped bool
}

func newRun(clientOpts []kgo.Opt, spec Spec, rate int) *run {
	return &run{
		clientOpts: clientOpts,
		spec:       spec,
		rate:       rate,
		perPart:    make([]atomic.Int64, max(spec.Partitions, 1)),
		batches:    make(map[string]int),
		changed:    make(chan struct{}),
	}
}

// batchHook counts produced batches by wire codec.
type batchHook struct{ r *run }

func (h batchHook) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.r.batchMu.Lock()
	h.r.batches[wireCodec(m.CompressionType)]++
	h.r.batchMu.Unlock()
}

var _ kgo.HookProduceBatchWritten = batchHook{}

func (r *run) run(ctx context.Context) (st Stats, err error) {
	start := time.Now()
	defer func() {
		r.progMu.Lock()
		r.stopped = true
		close(r.changed)
		r.changed = make(chan struct{})
		r.progMu.Unlock()
		st = r.stats(time.Since(start))
	}()
	if err := r.spec.validate(); err != nil {
		return Stats{}, err
	}

	clients := make([]*kgo.Client, len(r.spec.Codecs))
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i, name := range r.spec.Codecs {
		c, _ := codec(name) // validated
		opts := append(append([]kgo.Opt(nil), r.clientOpts...),
			kgo.ProducerBatchCompression(c),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.WithHooks(batchHook{r}),
		)
		if r.spec.TransactionalID != "" {
			opts = append(opts, kgo.TransactionalID(r.spec.TransactionalID+"-"+name))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return Stats{}, fmt.Errorf("workload: %s client: %w", name, err)
		}
		clients[i] = cl
	}

	chunk := r.spec.ChunkRecords
	// Finishing a chunk must not be cut short by the caller's
	// cancellation: records already handed to the client must end
	// acknowledged or failed, never in doubt. Only a cluster that stops
	// answering for stopGrace after the cancellation cuts it short.
	finishCtx, stopFinish := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopFinish(nil)
	defer context.AfterFunc(ctx, func() {
		time.AfterFunc(stopGrace, func() {
			stopFinish(fmt.Errorf("workload: records still unacknowledged %v after cancellation", stopGrace))
		})
	})()

	for k, i := 0, 0; r.spec.Records == 0 || i < r.spec.Records; k++ {
		if ctx.Err() != nil {
			break
		}
		if r.rate > 0 {
			// Pace: record i is due at start + i/rate.
			due := start.Add(time.Duration(float64(i) / float64(r.rate) * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				if ctx.Err() != nil {
					break
				}
			}
		}
		end := i + chunk
		if r.spec.Records > 0 {
			end = min(end, r.spec.Records)
		}
		cl := clients[k%len(clients)]
		if err := r.chunk(finishCtx, cl, k, i, end); err != nil {
			return Stats{}, err
		}
		i = end
	}
	return Stats{}, nil
}

// chunk produces records [from, to) through cl, in a transaction if the
// spec has one, and waits for all of them.
func (r *run) chunk(ctx context.Context, cl *kgo.Client, k, from, to int) error {
	txn := r.spec.TransactionalID != ""
	abort := txn && r.spec.AbortEvery > 0 && k%r.spec.AbortEvery == r.spec.AbortEvery-1
	if txn {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("workload: begin transaction for chunk %d: %w", k, err)
		}
	}
	var wg sync.WaitGroup
	var pending []*kgo.Record
	var acked atomic.Int64
	for i := from; i < to; i++ {
		rec := r.spec.Record(i)
		pending = append(pending, rec)
		wg.Add(1)
		cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				r.fail(fmt.Errorf("workload: producing record to %s[%d]: %w", rec.Topic, rec.Partition, err))
				return
			}
			acked.Add(1)
		})
	}
	// Flush returns once every record has its promise called.
	if err := cl.Flush(ctx); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		r.fail(fmt.Errorf("workload: flushing chunk %d: %w", k, err))
	}
	wg.Wait()
	if err := r.err(); err != nil {
		if txn {
			_ = cl.AbortBufferedRecords(ctx)
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
		}
		return err
	}
	end := committed
	if txn {
		var err error
		if end, err = endTransaction(ctx, cl, !abort); err != nil {
			return fmt.Errorf("workload: ending transaction of chunk %d: %w", k, err)
		}
	}

	// Count only once the chunk is settled, so that counts never include
	// records of a transaction still open.
	for _, rec := range pending {
		r.perPart[rec.Partition].Add(1)
		r.bytes.Add(int64(len(rec.Key) + len(rec.Value)))
	}
	switch end {
	case aborted:
		r.aborted.Add(int64(len(pending)))
	case unsettled:
		r.unsettled.Add(int64(len(pending)))
	}
	r.progMu.Lock()
	r.total += int64(len(pending))
	close(r.changed)
	r.changed = make(chan struct{})
	r.progMu.Unlock()
	return nil
}

// txnEnd is how a transaction ended, as far as its producer knows.
type txnEnd int

const (
	committed txnEnd = iota
	aborted
	unsettled // the commit's answer never came
)

// endTransaction ends cl's transaction, committing it if commit. Its
// records were all acknowledged, so they take offsets whatever the end;
// only an end that leaves the producer unusable is an error. A commit
// lost with its coordinator (a broker killed or moved) is settled as
// franz-go documents: TryAbort, whose producer id reload aborts the
// transaction if the commit never reached the coordinator. Production
// goes on, so that a test killing brokers keeps a live source.
func endTransaction(ctx context.Context, cl *kgo.Client, commit bool) (txnEnd, error) {
	end := aborted
	if commit {
		end = committed
	}
	err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	if err == nil {
		return end, nil
	}
	refused := errors.Is(err, kerr.OperationNotAttempted) || errors.Is(err, kerr.TransactionAbortable)
	if ke, ok := errors.AsType[*kerr.Error](err); ok && !refused && !ke.Retriable && !errors.Is(err, kerr.UnknownServerError) {
		return 0, err // fenced, or another definitive answer
	}
	if abortErr := cl.EndTransaction(ctx, kgo.TryAbort); abortErr != nil {
		return 0, fmt.Errorf("%w; then aborting: %w", err, abortErr)
	}
	if commit && !refused {
		return unsettled, nil
	}
	return aborted, nil
}

func (r *run) fail(err error) {
	r.firstMu.Lock()
	defer r.firstMu.Unlock()
	if r.first == nil {
		r.first = err
	}
}

func (r *run) err() error {
	r.firstMu.Lock()
	defer r.firstMu.Unlock()
	return r.first
}

func (r *run) acked() map[int32]int64 {
	out := make(map[int32]int64, len(r.perPart))
	for p := range r.perPart {
		out[int32(p)] = r.perPart[p].Load()
	}
	return out
}

func (r *run) progress() (total int64, changed <-chan struct{}, stopped bool) {
	r.progMu.Lock()
	defer r.progMu.Unlock()
	return r.total, r.changed, r.stopped
}

func (r *run) stats(elapsed time.Duration) Stats {
	st := Stats{
		Spec:         r.spec,
		PerPartition: r.acked(),
		Aborted:      r.aborted.Load(),
		Unsettled:    r.unsettled.Load(),
		Bytes:        r.bytes.Load(),
		Batches:      make(map[string]int),
		Elapsed:      elapsed,
	}
	for _, n := range st.PerPartition {
		st.Records += n
	}
	r.batchMu.Lock()
	for k, v := range r.batches {
		st.Batches[k] = v
	}
	r.batchMu.Unlock()
	return st
}
