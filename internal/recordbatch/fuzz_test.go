package recordbatch

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// maxFuzzInput keeps each fuzz input's work small; with maxUncompressed
// lowered to fuzzUncompressed, no input decompresses to more than 1 MiB.
const (
	maxFuzzInput     = 16 << 10
	fuzzUncompressed = 1 << 20
)

// fuzzSetup lowers the decompression bound for the fuzz run. The zstd
// decoder reads it when first used, which under -fuzz is after this.
func fuzzSetup(f *testing.F) {
	old := maxUncompressed
	maxUncompressed = fuzzUncompressed
	f.Cleanup(func() { maxUncompressed = old })
}

// fuzzSeeds are small valid batches of every shape the agent meets.
func fuzzSeeds(f *testing.F) [][]byte {
	small := sampleRecords(10, false)[:6]
	holes := sampleRecords(10, true)[:6]
	var seeds [][]byte
	for _, c := range allCodecs {
		seeds = append(seeds,
			mustBuild(f, c, 0, 10, 1_700_000_000_000, 5, 1, 0, small),
			mustBuild(f, c, AttrTransactional, 10, 0, 5, 1, 100, holes),
			mustBuild(f, c, AttrLogAppendTime, 10, 0, -1, -1, -1, holes),
		)
	}
	ctl, err := BuildControl(true, 99, 5, 5, 1, 3)
	if err != nil {
		f.Fatal(err)
	}
	empty := patched(seeds[0][:HeaderSize], func(b []byte) {
		binary.BigEndian.PutUint32(b[offLength:], HeaderSize-12)
		binary.BigEndian.PutUint32(b[offNumRecords:], 0)
	})
	return append(seeds, ctl, empty)
}

// fuzzInput optionally repairs the length field and CRC so that the fuzzer
// reaches the record decoder instead of stopping at the checksum.
func fuzzInput(data []byte, fix bool) ([]byte, bool) {
	if len(data) > maxFuzzInput {
		return nil, false
	}
	data = bytes.Clone(data)
	if fix && len(data) >= HeaderSize {
		binary.BigEndian.PutUint32(data[offLength:], uint32(len(data)-12))
		fixCRC(data)
	}
	return data, true
}

func FuzzRecords(f *testing.F) {
	fuzzSetup(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
		f.Add(append(bytes.Clone(s), s[:30]...), true) // a partial batch behind
	}
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		data, ok := fuzzInput(data, fix)
		if !ok {
			return
		}
		for rest := data; ; {
			batch, r, _ := Next(rest) // an old-format message comes with its bytes
			if batch == nil {
				break
			}
			rest = r
		}
		CRCValid(data)
		_, _ = IsDense(data)
		_, _ = ControlRecord(data)
		recs, err := Records(data)
		if err != nil || len(recs) == 0 {
			return
		}
		// What decodes re-encodes to the same records.
		h := mustHeader(t, data)
		const keep = AttrLogAppendTime | AttrTransactional | AttrControl | AttrDeleteHorizon
		b, err := Build(h.Codec(), h.Attributes&keep, h.BaseOffset, h.FirstTimestamp, h.ProducerID, h.ProducerEpoch, h.BaseSequence, recs)
		if err != nil {
			t.Fatalf("Build of decoded records: %v", err)
		}
		got, err := Records(b)
		if err != nil {
			t.Fatalf("Records of rebuilt batch: %v", err)
		}
		if d := diffRecords(recs, got); d != "" {
			t.Fatalf("rebuilt batch: %s", d)
		}
	})
}

func FuzzRewrite(f *testing.F) {
	fuzzSetup(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false, int64(7), int16(1), int32(0), false)
		f.Add(s, true, int64(-1), int16(-1), int32(-1), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fix bool, pid int64, epoch int16, seq int32, txn bool) {
		data, ok := fuzzInput(data, fix)
		if !ok {
			return
		}
		orig := bytes.Clone(data)
		before, errBefore := Records(data)
		if err := Rewrite(data, pid, epoch, seq, txn); err != nil {
			if !bytes.Equal(orig, data) {
				t.Fatalf("failed Rewrite (%v) changed the batch", err)
			}
			return
		}
		if !CRCValid(data) {
			t.Fatal("CRC invalid after Rewrite")
		}
		src, h := mustHeader(t, orig), mustHeader(t, data)
		if h.BaseOffset != 0 || h.PartitionLeaderEpoch != -1 || h.ProducerID != pid || h.ProducerEpoch != epoch ||
			h.BaseSequence != seq || h.IsTransactional() != txn || h.HasDeleteHorizon() ||
			h.Codec() != src.Codec() || h.IsControl() != src.IsControl() || h.NumRecords != src.NumRecords ||
			h.LastOffsetDelta != src.LastOffsetDelta || !bytes.Equal(data[HeaderSize:], orig[HeaderSize:]) {
			t.Fatalf("header after Rewrite %+v, before %+v", h, src)
		}
		after, errAfter := Records(data)
		if (errBefore == nil) != (errAfter == nil) {
			t.Fatalf("Records before Rewrite: %v, after: %v", errBefore, errAfter)
		}
		if errBefore == nil {
			if d := diffRecords(shifted(before, -src.BaseOffset), after); d != "" {
				t.Fatalf("Rewrite changed the records: %s", d)
			}
		}
	})
}

func FuzzSplitDense(f *testing.F) {
	fuzzSetup(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		data, ok := fuzzInput(data, fix)
		if !ok {
			return
		}
		parts, err := SplitDense(data)
		if err != nil {
			return
		}
		h := mustHeader(t, data)
		want, errRecs := Records(data)
		valid := CRCValid(data)
		var got []Record
		next := h.BaseOffset
		for i, p := range parts {
			if p.FirstOffset < next || p.LastOffset < p.FirstOffset || p.LastOffset > h.LastOffset() {
				t.Fatalf("part %d covers %d-%d; next free offset %d, batch last offset %d", i, p.FirstOffset, p.LastOffset, next, h.LastOffset())
			}
			next = p.LastOffset + 1
			ph := mustHeader(t, p.Batch)
			if dense, err := IsDense(p.Batch); !dense || err != nil || ph.BaseOffset != p.FirstOffset || ph.LastOffset() != p.LastOffset {
				t.Fatalf("part %d (%d-%d): dense %v (%v), header %+v", i, p.FirstOffset, p.LastOffset, dense, err, ph)
			}
			if valid && !CRCValid(p.Batch) {
				t.Fatalf("part %d: CRC invalid", i)
			}
			if errRecs == nil {
				recs, err := Records(p.Batch)
				if err != nil {
					t.Fatalf("part %d: %v", i, err)
				}
				got = append(got, recs...)
			}
		}
		if errRecs == nil {
			if d := diffRecords(want, got); d != "" {
				t.Fatalf("parts' records: %s", d)
			}
		}
	})
}
