package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/reason"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// kafkaIncrementSequence is Kafka's DefaultRecordBatch.incrementSequence.
func kafkaIncrementSequence(sequence, increment int32) int32 {
	if sequence > math.MaxInt32-increment {
		return increment - (math.MaxInt32 - sequence) - 1
	}
	return sequence + increment
}

// TestAddSeqMatchesKafka: addSeq wraps at 2^31 exactly as Kafka does.
func TestAddSeqMatchesKafka(t *testing.T) {
	vals := []int32{0, 1, 2, 4, 5, 1000, math.MaxInt32/2 - 1, math.MaxInt32 / 2, math.MaxInt32 - 5, math.MaxInt32 - 1, math.MaxInt32}
	for _, seq := range vals {
		for _, n := range vals {
			if got, want := addSeq(seq, n), kafkaIncrementSequence(seq, n); got != want {
				t.Errorf("addSeq(%d, %d) = %d, Kafka's incrementSequence gives %d", seq, n, got, want)
			}
		}
	}
}

// TestNextSeq: the sequence after a producer's last batch in the destination
// tail comes from BaseSequence + LastOffsetDelta, whatever the cleaner left
// of the batch's records.
func TestNextSeq(t *testing.T) {
	for _, tc := range []struct {
		name            string
		base            int32
		numRecords      int32
		lastOffsetDelta int32
		want            int32
	}{
		{"dense batch", 100, 5, 4, 105},
		{"single record", 7, 1, 0, 8},
		{"empty header kept by the cleaner", 100, 0, 9, 110},
		{"empty header of one offset", 41, 0, 0, 42},
		{"compacted batch", 100, 2, 9, 110},
		{"compacted to its last record", 0, 1, 499, 500},
		{"crossing the 2^31 wrap", math.MaxInt32 - 2, 10, 9, 7},
		{"compacted, crossing the wrap", math.MaxInt32 - 2, 3, 9, 7},
		{"empty header crossing the wrap", math.MaxInt32, 0, 4, 4},
		{"ending at 2^31-1", math.MaxInt32 - 4, 5, 4, 0},
		{"starting at 0 after the wrap", 0, 3, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := recordbatch.Header{BaseOffset: 1000, ProducerID: 7, BaseSequence: tc.base, NumRecords: tc.numRecords, LastOffsetDelta: tc.lastOffsetDelta}
			if got := nextSeq(h); got != tc.want {
				t.Errorf("nextSeq(base %d, %d records, last offset delta %d) = %d, want %d", tc.base, tc.numRecords, tc.lastOffsetDelta, got, tc.want)
			}
			// Kafka: lastSequence = incrementSequence(base, lastOffsetDelta),
			// and the next batch must start one after it.
			if want := kafkaIncrementSequence(kafkaIncrementSequence(tc.base, tc.lastOffsetDelta), 1); tc.want != want {
				t.Errorf("test case: want %d, Kafka gives %d", tc.want, want)
			}
		})
	}
}

// TestNextSeqOfParsedHeaders builds, as bytes, the batches a destination
// cleaner leaves of a producer's batch of offsets 0 to 9 (its records
// thinned out, or only its header, with the original last offset delta as
// Kafka's MemoryRecords.filterTo keeps it) and recovers the sequence from
// what ParseHeader reads of them.
func TestNextSeqOfParsedHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep []int64 // offsets the cleaner left; none: the empty header
		base int32
		want int32
	}{
		{"dense", []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 20, 30},
		{"compacted, last record kept", []int64{3, 9}, 20, 30},
		{"compacted, last record removed", []int64{0, 4}, 20, 30},
		{"empty header", nil, 20, 30},
		{"compacted across the wrap", []int64{1}, math.MaxInt32 - 1, 8},
		{"empty header across the wrap", nil, math.MaxInt32 - 5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := cleanedBatch(t, tc.keep, 10, tc.base)
			h, err := recordbatch.ParseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.LastOffsetDelta != 9 || h.NumRecords != int32(len(tc.keep)) {
				t.Fatalf("last offset delta %d, %d records; want 9, %d", h.LastOffsetDelta, h.NumRecords, len(tc.keep))
			}
			if got := nextSeq(h); got != tc.want {
				t.Errorf("nextSeq = %d, want %d (NumRecords would give %d)", got, tc.want, addSeq(tc.base, h.NumRecords))
			}
		})
	}
}

// cleanedBatch is a batch of producer id 7 for offsets 0 to n-1 with base
// sequence base as a log cleaner leaves it with the records at keep only: it
// keeps the last offset delta n-1 and, with no record left, the header.
func cleanedBatch(t *testing.T, keep []int64, n int, base int32) []byte {
	t.Helper()
	const (
		offLength          = 8
		offLastOffsetDelta = 23
		offNumRecords      = 57
	)
	var b []byte
	if len(keep) == 0 {
		full, err := recordbatch.Build(recordbatch.CodecNone, 0, 0, 1, 7, 0, base, []recordbatch.Record{{Offset: 0, Timestamp: 1}})
		if err != nil {
			t.Fatal(err)
		}
		b = full[:recordbatch.HeaderSize]
		binary.BigEndian.PutUint32(b[offLength:], uint32(recordbatch.HeaderSize-12))
		binary.BigEndian.PutUint32(b[offNumRecords:], 0)
	} else {
		recs := make([]recordbatch.Record, len(keep))
		for i, o := range keep {
			recs[i] = recordbatch.Record{Offset: o, Key: []byte(fmt.Sprint(o)), Value: []byte("v"), Timestamp: 1}
		}
		var err error
		if b, err = recordbatch.Build(recordbatch.CodecNone, 0, 0, 1, 7, 0, base, recs); err != nil {
			t.Fatal(err)
		}
	}
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(n-1))
	return b
}

func seqErr(offset int64, code *kerr.Error) *seqError {
	return &seqError{err: code, code: code.Message, offset: offset, p: writer.Producer{ID: 4000, Epoch: 2}, seq: 77}
}

// TestLastingRetry: sequence and producer errors at one offset fail the
// partition at the lastingErrors-th in a row; a write past the offset, or an
// error at another offset, starts the count again.
func TestLastingRetry(t *testing.T) {
	oos, unknown := kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID
	type step struct {
		err  *seqError // nil: a write lands past the offset (clear)
		n    int       // the count after the step
		fail bool
	}
	lasting := func(offset int64, code *kerr.Error, k int) []step {
		var out []step
		for i := 1; i <= k; i++ {
			out = append(out, step{err: seqErr(offset, code), n: i, fail: i >= lastingErrors})
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	var alternating []step
	for i := 1; i <= lastingErrors; i++ {
		code := oos
		if i%2 == 0 {
			code = unknown
		}
		alternating = append(alternating, step{err: seqErr(100, code), n: i, fail: i == lastingErrors})
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"lasting error fails", lasting(100, oos, lastingErrors)},
		{"transient error heals", cat(lasting(100, oos, 3), []step{{n: 0}}, lasting(105, oos, lastingErrors))},
		{"heals just before the limit", cat(lasting(100, oos, lastingErrors-1), []step{{n: 0}}, lasting(100, oos, 2))},
		{"another offset counts anew", cat(lasting(100, oos, lastingErrors-1), lasting(200, oos, lastingErrors))},
		{"kinds alternating at one offset still fail", alternating},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lastingRetry
			for i, s := range tc.steps {
				var fail bool
				if s.err == nil {
					l.clear()
				} else {
					fail = l.note(s.err)
				}
				if l.n != s.n || fail != s.fail {
					t.Fatalf("step %d: count %d, exhausted %v; want %d, %v", i, l.n, fail, s.n, s.fail)
				}
				if s.err != nil && !strings.Contains(l.reason, fmt.Sprintf("offset %d, which the destination refused with %s (%d of %d tries", s.err.offset, s.err.code, s.n, lastingErrors)) {
					t.Fatalf("step %d: reason %q does not say what is retried", i, l.reason)
				}
			}
		})
	}
}

// TestSequenceErrorsRetriedThenFailed follows a Mirror through what Run does
// with sequence errors: the reason says what is retried while the state
// stays MIRRORING, a write landing past the offset heals it, and
// lastingErrors in a row give a FAILED reason naming the error, the offset,
// what the agent sent and what the destination says.
func TestSequenceErrorsRetriedThenFailed(t *testing.T) {
	ctx := context.Background()
	var changes []Status
	m := New(Config{Mirror: "dr", TP: fetcher.TP{Topic: "orders", Partition: 3}, ProducerID: 4000, Epoch: 2,
		OnChange: func(s Status) { changes = append(changes, s) }})
	m.setState(Mirroring, reason.Error{})
	m.next, m.seq = 100, 77

	produceErr := &writer.ProduceError{Topic: "orders", Partition: 3, Err: kerr.OutOfOrderSequenceNumber}
	run := func() (failed error) {
		t.Helper()
		err := m.classifyProduce(produceErr, writer.Producer{ID: m.cfg.ProducerID, Epoch: m.cfg.Epoch}, m.seq, m.next)
		var se *seqError
		if !errors.As(err, &se) {
			t.Fatalf("classifyProduce(%v) = %v, want a sequence error", produceErr, err)
		}
		if m.lasting.note(se) {
			return m.lastingFailure(ctx, se)
		}
		m.noteRetrying(m.lasting.status())
		return nil
	}

	// Transient: two errors, then the batch lands.
	for range 2 {
		if err := run(); err != nil {
			t.Fatalf("failed after %d errors: %v", m.lasting.n, err)
		}
	}
	st := m.Status()
	if st.State != Mirroring || st.ReasonCode != reason.SequenceRetrying || !strings.Contains(st.Reason, "retrying the batch for destination offset 100, which the destination refused with OUT_OF_ORDER_SEQUENCE_NUMBER (2 of") {
		t.Fatalf("while retrying: state %s, reason %s %q", st.State, st.ReasonCode, st.Reason)
	}
	// The batch lands where it was meant to and is counted (pipeline.go).
	if err := m.checkLanded(ctx, 100, m.next); err != nil {
		t.Fatal(err)
	}
	m.next, m.seq = m.next+5, addSeq(m.seq, 5)
	m.acked(m.next, 0, 5)
	if st := m.Status(); st.State != Mirroring || st.Reason != "" || st.ReasonCode != "" || m.lasting.n != 0 || m.seq != 82 || m.next != 105 {
		t.Fatalf("after the batch landed: state %s, reason %q, count %d, seq %d, next %d", st.State, st.Reason, m.lasting.n, m.seq, m.next)
	}

	// Lasting: lastingErrors in a row at offset 105.
	var failed error
	for i := 1; i <= lastingErrors; i++ {
		failed = run()
		if (failed != nil) != (i == lastingErrors) {
			t.Fatalf("error %d of %d: failure %v", i, lastingErrors, failed)
		}
	}
	var f *failure
	if !errors.As(failed, &f) {
		t.Fatalf("%v is not a failure", failed)
	}
	if c := reason.CodeOf(failed); c != reason.SequenceLasting || f.code != c {
		t.Errorf("failure code %s (reason.CodeOf %s), want %s", f.code, c, reason.SequenceLasting)
	}
	for _, want := range []string{
		"the destination refused the batch for offset 105 with OUT_OF_ORDER_SEQUENCE_NUMBER 10 times in a row",
		"producer id 4000, epoch 2, sequence 82",
		"no destination writer", // what the destination's tail says, here that it could not be read
		"recover the partition",
		"kmirror recover --recreate",
	} {
		if !strings.Contains(f.reason, want) {
			t.Errorf("failure reason %q does not say %q", f.reason, want)
		}
	}
	if strings.Contains(f.reason, recoverHint) {
		t.Errorf("failure reason %q ends with %q, which a recover replaces with %q", f.reason, recoverHint, cannotAlign)
	}
	if len(changes) == 0 || !strings.Contains(changes[len(changes)-1].Reason, fmt.Sprintf("(%d of %d tries", lastingErrors-1, lastingErrors)) {
		t.Errorf("OnChange did not hear the last retry reason: %+v", changes)
	}
}

// TestClassifyProduce: sequence and producer errors become bounded retries,
// other retriable errors plain retries, the rest failures.
func TestClassifyProduce(t *testing.T) {
	m := New(Config{TP: fetcher.TP{Topic: "orders"}})
	m.next = 42
	p := writer.Producer{ID: 9, Epoch: 1}
	for _, tc := range []struct {
		err  error
		want string // "seq", "retry" or "fail"
	}{
		{kerr.OutOfOrderSequenceNumber, "seq"},
		{kerr.DuplicateSequenceNumber, "seq"},
		{kerr.UnknownProducerID, "seq"},
		{kerr.InvalidProducerEpoch, "seq"},
		{kerr.NotLeaderForPartition, "retry"},
		{kerr.RequestTimedOut, "retry"},
		{errors.New("connection reset"), "retry"},
		{kerr.InvalidRecord, "fail"},
		{kerr.TopicAuthorizationFailed, "fail"},
	} {
		err := m.classifyProduce(&writer.ProduceError{Topic: "orders", Err: tc.err}, p, 5, m.next)
		var (
			se *seqError
			f  *failure
		)
		got := "retry"
		switch {
		case errors.As(err, &se):
			got = "seq"
			if se.offset != 42 || se.p != p || se.seq != 5 || se.code == "" || !errors.Is(err, tc.err) {
				t.Errorf("%v: %+v", tc.err, se)
			}
		case errors.As(err, &f):
			got = "fail"
		}
		if got != tc.want {
			t.Errorf("classifyProduce(%v) = %v (%s), want %s", tc.err, err, got, tc.want)
		}
	}
}

// TestDescribeTail words what the failure reason says of the tail.
func TestDescribeTail(t *testing.T) {
	h := recordbatch.Header{BaseOffset: 90, LastOffsetDelta: 9, ProducerEpoch: 2, BaseSequence: 60, NumRecords: 0}
	want := "the destination's last batch of that producer id (log end 105) holds offsets 90 to 99 with epoch 2 and sequences 60 to 69 (0 records left), so the sequence after it is 70"
	if got := describeTail(105, h, true, nil); got != want {
		t.Errorf("describeTail = %q, want %q", got, want)
	}
	if got := describeTail(105, recordbatch.Header{}, false, nil); !strings.Contains(got, "has no batch of that producer id in its last 1024 offsets") {
		t.Errorf("describeTail without a batch = %q", got)
	}
}
