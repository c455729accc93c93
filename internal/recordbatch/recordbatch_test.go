package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestCodecString(t *testing.T) {
	for c, want := range map[Codec]string{
		CodecNone: "none", CodecGzip: "gzip", CodecSnappy: "snappy", CodecLZ4: "lz4", CodecZstd: "zstd", 6: "codec(6)",
	} {
		if got := c.String(); got != want {
			t.Errorf("Codec(%d).String() = %q, want %q", c, got, want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	big := make([]byte, 200<<10) // spans several xerial and lz4 blocks
	for i := range big {
		big[i] = byte(i*7 + i/1000)
	}
	many := make([]Record, 1000)
	for i := range many {
		many[i] = Record{Offset: 5000 + int64(i), Timestamp: int64(i) * 3, Key: fmt.Appendf(nil, "key-%d", i), Value: fmt.Appendf(nil, "value-%d", i%17)}
	}
	cases := []struct {
		name    string
		attrs   int16
		base    int64
		firstTS int64
		recs    []Record
	}{
		{name: "mixed", base: 100, firstTS: 1_700_000_000_000, recs: sampleRecords(100, false)},
		{name: "gaps", base: 100, firstTS: 0, recs: sampleRecords(100, true)},
		{name: "transactional", attrs: AttrTransactional, base: 0, firstTS: 5, recs: sampleRecords(0, false)},
		{name: "single empty record", base: 7, recs: []Record{{Offset: 7}}},
		{name: "extreme timestamps", base: math.MaxInt64 - 10, firstTS: math.MinInt64, recs: []Record{
			{Offset: math.MaxInt64 - 10, Timestamp: math.MaxInt64},
			{Offset: math.MaxInt64 - 1, Timestamp: math.MinInt64, Key: []byte("x")},
		}},
		{name: "large value", base: 1, firstTS: 9, recs: []Record{{Offset: 1, Timestamp: 9, Value: big}, {Offset: 2, Timestamp: 10, Key: big[:70000]}}},
		{name: "many records", base: 5000, recs: many},
	}
	for _, tc := range cases {
		for _, codec := range allCodecs {
			t.Run(tc.name+"/"+codec.String(), func(t *testing.T) {
				b := mustBuild(t, codec, tc.attrs, tc.base, tc.firstTS, 4242, 3, 17, tc.recs)
				h := mustHeader(t, b)
				wantMax := int64(math.MinInt64)
				for _, r := range tc.recs {
					wantMax = max(wantMax, r.Timestamp)
				}
				want := Header{
					BaseOffset: tc.base, Length: int32(len(b) - 12), PartitionLeaderEpoch: -1, Magic: 2, CRC: h.CRC,
					Attributes: tc.attrs | int16(codec), LastOffsetDelta: int32(tc.recs[len(tc.recs)-1].Offset - tc.base),
					FirstTimestamp: tc.firstTS, MaxTimestamp: wantMax, ProducerID: 4242, ProducerEpoch: 3, BaseSequence: 17,
					NumRecords: int32(len(tc.recs)),
				}
				if h != want {
					t.Fatalf("header\n got %+v\nwant %+v", h, want)
				}
				if !CRCValid(b) {
					t.Fatal("CRC invalid")
				}
				got, err := Records(b)
				if err != nil {
					t.Fatalf("Records: %v", err)
				}
				if d := diffRecords(tc.recs, got); d != "" {
					t.Fatal(d)
				}
				checkWithKmsg(t, b, tc.recs)
			})
		}
	}
}

// checkWithKmsg decodes b with franz-go's kmsg and default decompressor,
// independently of this package's decoder.
func checkWithKmsg(t *testing.T, b []byte, want []Record) {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatalf("kmsg.RecordBatch.ReadFrom: %v", err)
	}
	if int(rb.Length)+12 != len(b) || rb.Magic != 2 || int(rb.NumRecords) != len(want) {
		t.Fatalf("kmsg header: length %d magic %d records %d", rb.Length, rb.Magic, rb.NumRecords)
	}
	if crc := int32(crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))); crc != rb.CRC {
		t.Fatalf("kmsg CRC %x, computed %x", rb.CRC, crc)
	}
	raw, err := kgo.DefaultDecompressor().Decompress(rb.Records, kgo.CompressionCodecType(rb.Attributes&7))
	if err != nil {
		t.Fatalf("kgo decompress: %v", err)
	}
	got := make([]Record, 0, len(want))
	for len(raw) > 0 {
		length, n := binary.Varint(raw)
		var r kmsg.Record
		if err := r.ReadFrom(raw[:n+int(length)]); err != nil {
			t.Fatalf("kmsg.Record.ReadFrom: %v", err)
		}
		raw = raw[n+int(length):]
		rec := Record{Offset: rb.FirstOffset + int64(r.OffsetDelta), Timestamp: rb.FirstTimestamp + r.TimestampDelta64, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, RecordHeader{Key: h.Key, Value: h.Value})
		}
		got = append(got, rec)
	}
	if d := diffRecords(want, got); d != "" {
		t.Fatalf("kmsg decode: %s", d)
	}
}

func TestBuildErrors(t *testing.T) {
	ok := []Record{{Offset: 10}}
	cases := []struct {
		name  string
		codec Codec
		attrs int16
		base  int64
		recs  []Record
	}{
		{"unknown codec", 5, 0, 10, ok},
		{"codec in attrs", CodecNone, 0x03, 10, ok},
		{"unknown attribute", CodecNone, 0x80, 10, ok},
		{"no records", CodecNone, 0, 10, nil},
		{"offset below base", CodecNone, 0, 11, ok},
		{"offsets not rising", CodecNone, 0, 10, []Record{{Offset: 10}, {Offset: 12}, {Offset: 12}}},
		{"delta beyond int32", CodecNone, 0, 10, []Record{{Offset: 10 + math.MaxInt32 + 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Build(tc.codec, tc.attrs, tc.base, 0, -1, -1, -1, tc.recs); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Build error %v, want ErrInvalid", err)
			}
		})
	}
}

func TestHeaderMethods(t *testing.T) {
	h := Header{BaseOffset: 10, LastOffsetDelta: 4, Attributes: int16(CodecLZ4) | AttrTransactional | AttrControl | AttrLogAppendTime | AttrDeleteHorizon}
	if h.Codec() != CodecLZ4 || !h.IsTransactional() || !h.IsControl() || !h.LogAppendTime() || !h.HasDeleteHorizon() || h.LastOffset() != 14 {
		t.Fatalf("methods on %+v", h)
	}
	h.Attributes = int16(CodecZstd)
	if h.Codec() != CodecZstd || h.IsTransactional() || h.IsControl() || h.LogAppendTime() || h.HasDeleteHorizon() {
		t.Fatalf("methods on %+v", h)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	good := mustBuild(t, CodecNone, 0, 0, 0, -1, -1, -1, []Record{{Offset: 0, Value: []byte("v")}})
	v1 := make([]byte, 34) // a magic 1 message header, shorter than a v2 header
	binary.BigEndian.PutUint64(v1, 77)
	v1[16] = 1 // the rest of a v1 message does not matter here
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short", good[:40], ErrShort},
		{"magic 1", v1, ErrOldMagic},
		{"magic 0", patched(good, func(b []byte) { b[16] = 0 }), ErrOldMagic},
		{"magic 3", patched(good, func(b []byte) { b[16] = 3 }), ErrUnknownMagic},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrLength},
		{"cut short", good[:len(good)-1], ErrLength},
		{"negative length", patched(good, func(b []byte) { binary.BigEndian.PutUint32(b[8:], 0xFFFFFFF0) }), ErrLength},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHeader(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseHeader error %v, want %v", err, tc.want)
			}
			var oe *OldMagicError
			if errors.Is(err, ErrOldMagic) && (!errors.As(err, &oe) || oe.Offset != int64(binary.BigEndian.Uint64(tc.b))) {
				t.Fatalf("ParseHeader error %v does not carry the offset", err)
			}
		})
	}
}

func TestNext(t *testing.T) {
	a := mustBuild(t, CodecNone, 0, 0, 0, -1, -1, -1, sampleRecords(0, false))
	b := mustBuild(t, CodecZstd, 0, 7, 0, -1, -1, -1, sampleRecords(7, false))
	c := mustBuild(t, CodecGzip, 0, 14, 0, -1, -1, -1, sampleRecords(14, false))
	raw := append(append(append([]byte{}, a...), b...), c[:len(c)-9]...) // c cut short, as fetches end

	var got [][]byte
	rest := raw
	for {
		batch, r, err := Next(rest)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if batch == nil {
			if !bytes.Equal(r, c[:len(c)-9]) {
				t.Fatalf("rest %d bytes, want the %d-byte partial batch", len(r), len(c)-9)
			}
			break
		}
		if cap(batch) != len(batch) {
			t.Fatalf("batch capacity %d not clipped to %d", cap(batch), len(batch))
		}
		got = append(got, batch)
		rest = r
	}
	if len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("got %d batches", len(got))
	}

	for _, n := range []int{0, 5, 17, 60} {
		if batch, r, err := Next(a[:n]); batch != nil || err != nil || len(r) != n {
			t.Fatalf("Next(%d bytes) = %d, %d, %v; want nothing", n, len(batch), len(r), err)
		}
	}

	// An old-format message: the error carries the offset, and the
	// message is returned when complete so the walk can go on.
	v1 := make([]byte, 40)
	binary.BigEndian.PutUint64(v1, 1234)
	binary.BigEndian.PutUint32(v1[8:], 28)
	v1[16] = 1
	batch, r, err := Next(append(bytes.Clone(v1), a...))
	var oe *OldMagicError
	if !errors.Is(err, ErrOldMagic) || !errors.As(err, &oe) || oe.Offset != 1234 || oe.Magic != 1 {
		t.Fatalf("Next(magic 1) error %v", err)
	}
	if !bytes.Equal(batch, v1) || !bytes.Equal(r, a) {
		t.Fatalf("Next(magic 1) = %d, %d bytes", len(batch), len(r))
	}
	v1[16] = 0
	if batch, _, err := Next(v1[:30]); !errors.As(err, &oe) || oe.Magic != 0 || batch != nil {
		t.Fatalf("Next(partial magic 0) = %d bytes, %v", len(batch), err)
	}

	bad := []struct {
		name string
		b    []byte
		want error
	}{
		{"unknown magic", patched(a, func(b []byte) { b[16] = 9 }), ErrUnknownMagic},
		{"negative length", patched(a, func(b []byte) { binary.BigEndian.PutUint32(b[8:], 0x80000000) }), ErrLength},
		{"length below header", patched(a, func(b []byte) { binary.BigEndian.PutUint32(b[8:], 10) }), ErrLength},
	}
	for _, tc := range bad {
		if _, _, err := Next(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: Next error %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 40, 61, 1000, 65537} {
		a := make([]byte, 40)
		bb := make([]byte, n)
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range bb {
			bb[i] = byte(rng.Uint32())
		}
		want := crc32c(append(bytes.Clone(a), bb...))
		if got := multModP(x2nModP(uint64(n), 3), crc32c(a)) ^ crc32c(bb); got != want {
			t.Errorf("combine over %d bytes = %08x, want %08x", n, got, want)
		}
	}
}

func TestRewrite(t *testing.T) {
	// Small batches are checksummed twice, large ones once plus CRC
	// combination: cover both.
	noise := make([]byte, 3*combineMin)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	large := append(sampleRecords(1000, false), Record{Offset: 1007, Value: noise})
	for _, size := range []string{"small", "large"} {
		for _, codec := range allCodecs {
			for _, attrs := range []int16{0, AttrTransactional, AttrDeleteHorizon, AttrControl | AttrTransactional} {
				for _, txn := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%v/attrs%#x/txn=%v", size, codec, attrs, txn), func(t *testing.T) {
						recs := sampleRecords(1000, false)
						if size == "large" {
							recs = large
						}
						b := mustBuild(t, codec, attrs, 1000, 1_700_000_000_000, 77, 1, 500, recs)
						b = patched(b, func(b []byte) { binary.BigEndian.PutUint32(b[offLeaderEpoch:], 9) })
						before := mustHeader(t, b)
						if err := Rewrite(b, 31337, 4, math.MaxInt32-2, txn); err != nil {
							t.Fatalf("Rewrite: %v", err)
						}
						if !CRCValid(b) {
							t.Fatal("CRC invalid after Rewrite")
						}
						h := mustHeader(t, b)
						wantAttrs := (attrs | int16(codec)) &^ (AttrTransactional | AttrDeleteHorizon)
						if txn {
							wantAttrs |= AttrTransactional
						}
						want := before
						want.BaseOffset, want.PartitionLeaderEpoch, want.CRC, want.Attributes = 0, -1, h.CRC, wantAttrs
						want.ProducerID, want.ProducerEpoch, want.BaseSequence = 31337, 4, math.MaxInt32-2
						if h != want {
							t.Fatalf("header\n got %+v\nwant %+v", h, want)
						}
						got, err := Records(b)
						if err != nil {
							t.Fatalf("Records: %v", err)
						}
						if d := diffRecords(shifted(recs, -1000), got); d != "" {
							t.Fatal(d)
						}
						if size == "large" && len(b)-HeaderSize < combineMin {
							t.Fatalf("large batch has %d bytes of records", len(b)-HeaderSize)
						}
					})
				}
			}
		}
	}
}

func TestRewriteRefuses(t *testing.T) {
	good := mustBuild(t, CodecLZ4, 0, 0, 0, 1, 0, 0, sampleRecords(0, false))
	cases := []struct {
		name string
		b    []byte
		seq  int32
		want error
	}{
		{"bad crc", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }(), 0, ErrCRC},
		{"log append time", patched(good, func(b []byte) { b[offAttributes+1] |= byte(AttrLogAppendTime) }), 0, ErrLogAppendTime},
		{"holes", mustBuild(t, CodecNone, 0, 0, 0, 1, 0, 0, sampleRecords(0, true)), 0, ErrNotDense},
		{"empty", patched(good[:HeaderSize], func(b []byte) {
			binary.BigEndian.PutUint32(b[offLength:], HeaderSize-12)
			binary.BigEndian.PutUint32(b[offNumRecords:], 0)
		}), 0, ErrNotDense},
		{"negative sequence", bytes.Clone(good), -1, ErrInvalid},
		{"short", good[:50], 0, ErrShort},
		{"old magic", patched(good, func(b []byte) { b[16] = 1 }), 0, ErrOldMagic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := bytes.Clone(tc.b)
			err := Rewrite(tc.b, 5, 0, tc.seq, false)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Rewrite error %v, want %v", err, tc.want)
			}
			if !bytes.Equal(orig, tc.b) {
				t.Fatal("a refused Rewrite changed the batch")
			}
		})
	}
	// No producer id: any sequence goes, as for a plain producer.
	if err := Rewrite(bytes.Clone(good), -1, -1, -1, false); err != nil {
		t.Fatalf("Rewrite without producer id: %v", err)
	}
}

func TestRewriteAllocs(t *testing.T) {
	for _, recs := range [][]Record{sampleRecords(0, false), benchRecords(64, 1000)} {
		b := mustBuild(t, CodecNone, 0, 0, 0, 1, 0, 0, recs)
		if n := testing.AllocsPerRun(100, func() {
			if err := Rewrite(b, 9, 1, 3, true); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Fatalf("Rewrite of %d bytes allocates %v times", len(b), n)
		}
	}
}

func TestControlRecord(t *testing.T) {
	for _, commit := range []bool{false, true} {
		b, err := BuildControl(commit, 40, 1_700_000_000_000, 12, 3, 7)
		if err != nil {
			t.Fatal(err)
		}
		h := mustHeader(t, b)
		if !h.IsControl() || !h.IsTransactional() || h.BaseSequence != -1 || h.ProducerID != 12 || h.LastOffset() != 40 {
			t.Fatalf("control header %+v", h)
		}
		got, err := ControlRecord(b)
		if err != nil || got != commit {
			t.Fatalf("ControlRecord = %v, %v; want %v", got, err, commit)
		}
		recs, err := Records(b)
		if err != nil || len(recs) != 1 || !bytes.Equal(recs[0].Value, []byte{0, 0, 0, 0, 0, 7}) {
			t.Fatalf("control records %+v, %v", recs, err)
		}
	}
	plain := mustBuild(t, CodecNone, 0, 0, 0, -1, -1, -1, []Record{{Key: []byte{0, 0, 0, 1}}})
	leaderChange := mustBuild(t, CodecNone, AttrControl, 0, 0, -1, -1, -1, []Record{{Key: []byte{0, 0, 0, 3}}})
	badVersion := mustBuild(t, CodecNone, AttrControl, 0, 0, -1, -1, -1, []Record{{Key: []byte{0xFF, 0xFF, 0, 1}}})
	shortKey := mustBuild(t, CodecNone, AttrControl, 0, 0, -1, -1, -1, []Record{{Key: []byte{0, 0, 0}}})
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"not control": {plain, ErrInvalid}, "leader change": {leaderChange, ErrInvalid},
		"negative version": {badVersion, ErrCorrupt}, "short key": {shortKey, ErrCorrupt},
	} {
		if _, err := ControlRecord(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: ControlRecord error %v, want %v", name, err, tc.want)
		}
	}
}

func TestRecordsCorrupt(t *testing.T) {
	recs := []Record{{Offset: 0, Key: []byte("a")}, {Offset: 1, Key: []byte("b")}}
	good := mustBuild(t, CodecNone, 0, 0, 0, -1, -1, -1, recs)
	// Uncompressed, the records start at HeaderSize: [len, attrs, ts, off, key...].
	second := HeaderSize + 1 + int(good[HeaderSize])/2 // zigzag: length byte holds 2·len
	withRecords := func(codec Codec, raw []byte, n int32) []byte {
		b, err := appendCompressed(bytes.Clone(good[:HeaderSize]), codec, raw)
		if err != nil {
			t.Fatal(err)
		}
		return patched(b, func(b []byte) {
			binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-12))
			binary.BigEndian.PutUint16(b[offAttributes:], uint16(codec))
			binary.BigEndian.PutUint32(b[offNumRecords:], uint32(n))
		})
	}
	rawGood := good[HeaderSize:]
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"bad crc", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 0xFF; return b }(), ErrCRC},
		{"negative count", patched(good, func(b []byte) { binary.BigEndian.PutUint32(b[offNumRecords:], 0xFFFFFFFF) }), ErrCorrupt},
		{"count too high", patched(good, func(b []byte) { binary.BigEndian.PutUint32(b[offNumRecords:], 3) }), ErrCorrupt},
		{"count too low", patched(good, func(b []byte) { binary.BigEndian.PutUint32(b[offNumRecords:], 1) }), ErrCorrupt},
		{"unknown codec", patched(good, func(b []byte) { b[offAttributes+1] |= 6 }), ErrCodec},
		{"not gzip", patched(good, func(b []byte) { b[offAttributes+1] |= byte(CodecGzip) }), ErrCodec},
		{"not lz4", patched(good, func(b []byte) { b[offAttributes+1] |= byte(CodecLZ4) }), ErrCodec},
		{"not zstd", patched(good, func(b []byte) { b[offAttributes+1] |= byte(CodecZstd) }), ErrCodec},
		{"not snappy", patched(good, func(b []byte) { b[offAttributes+1] |= byte(CodecSnappy) }), ErrCodec},
		{"offset delta repeats", patched(good, func(b []byte) { b[second+3] = 0 }), ErrCorrupt},
		{"offset delta beyond last", patched(good, func(b []byte) { binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 0) }), ErrCorrupt},
		{"record length too long", patched(good, func(b []byte) { b[second] += 2 }), ErrCorrupt},
		{"trailing bytes", withRecords(CodecZstd, append(bytes.Clone(rawGood), 0), 2), ErrCorrupt},
		{"null header key", withRecords(CodecNone, []byte{16, 0, 0, 0, 1, 1, 2, 1, 1}, 1), ErrCorrupt},
		{"negative header count", withRecords(CodecNone, []byte{12, 0, 0, 0, 1, 1, 1}, 1), ErrCorrupt},
		{"varint overflow", withRecords(CodecNone, []byte{20, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 1, 1, 0}, 1), ErrCorrupt},
		// A raw snappy block claiming more than the bound.
		{"snappy claims too much", patched(withRecords(CodecNone, binary.AppendUvarint(nil, MaxUncompressedBytes+1), 1), func(b []byte) {
			b[offAttributes+1] |= byte(CodecSnappy)
		}), ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Records(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Records error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRawSnappy(t *testing.T) {
	// Some non-Java clients write one raw snappy block, no xerial framing.
	recs := sampleRecords(3, false)
	plain := mustBuild(t, CodecNone, 0, 3, 0, -1, -1, -1, recs)
	b := append(bytes.Clone(plain[:HeaderSize]), s2.EncodeSnappy(nil, plain[HeaderSize:])...)
	b = patched(b, func(b []byte) {
		binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-12))
		binary.BigEndian.PutUint16(b[offAttributes:], uint16(CodecSnappy))
	})
	got, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffRecords(recs, got); d != "" {
		t.Fatal(d)
	}
	// And what Build writes is xerial-framed, as the Java producer does.
	if x := mustBuild(t, CodecSnappy, 0, 3, 0, -1, -1, -1, recs); !bytes.HasPrefix(x[HeaderSize:], xerialMagic) {
		t.Fatal("snappy batch not xerial-framed")
	}
}

func TestEmptyBatch(t *testing.T) {
	// The cleaner leaves a header with no records but the codec bits.
	b := mustBuild(t, CodecZstd, 0, 50, 0, 1, 0, 0, sampleRecords(50, false))
	empty := patched(b[:HeaderSize], func(b []byte) {
		binary.BigEndian.PutUint32(b[offLength:], HeaderSize-12)
		binary.BigEndian.PutUint32(b[offNumRecords:], 0)
	})
	recs, err := Records(empty)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Records(empty) = %d, %v", len(recs), err)
	}
	if dense, err := IsDense(empty); dense || err != nil {
		t.Fatalf("IsDense(empty) = %v, %v", dense, err)
	}
	parts, err := SplitDense(empty)
	if err != nil || len(parts) != 0 {
		t.Fatalf("SplitDense(empty) = %d parts, %v", len(parts), err)
	}
}

func TestSplitDense(t *testing.T) {
	offsets := []int64{10, 11, 13, 14, 15, 20}
	wantRuns := [][2]int64{{10, 11}, {13, 15}, {20, 20}}
	for _, codec := range allCodecs {
		for _, attrs := range []int16{0, AttrTransactional, AttrLogAppendTime, AttrDeleteHorizon} {
			t.Run(fmt.Sprintf("%v/attrs%#x", codec, attrs), func(t *testing.T) {
				recs := make([]Record, len(offsets))
				for i, o := range offsets {
					recs[i] = Record{Offset: o, Timestamp: 1000 + int64(i)*int64(1-2*(i%2)), Key: fmt.Appendf(nil, "k%d", o), Value: bytes.Repeat([]byte{byte(o)}, 100)}
				}
				b := mustBuild(t, codec, attrs, 10, 900, 66, 2, math.MaxInt32-3, recs)
				// Compaction also removed the batch's last record (offset 22).
				b = patched(b, func(b []byte) {
					binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 12)
					binary.BigEndian.PutUint32(b[offLeaderEpoch:], 5)
				})
				orig := mustHeader(t, b)
				want, err := Records(b)
				if err != nil {
					t.Fatal(err)
				}
				if dense, err := IsDense(b); dense || err != nil {
					t.Fatalf("IsDense = %v, %v", dense, err)
				}
				parts, err := SplitDense(b)
				if err != nil {
					t.Fatalf("SplitDense: %v", err)
				}
				if len(parts) != len(wantRuns) {
					t.Fatalf("%d parts, want %d", len(parts), len(wantRuns))
				}
				var got []Record
				for i, p := range parts {
					if p.FirstOffset != wantRuns[i][0] || p.LastOffset != wantRuns[i][1] {
						t.Fatalf("part %d covers %d-%d, want %v", i, p.FirstOffset, p.LastOffset, wantRuns[i])
					}
					h := mustHeader(t, p.Batch)
					if dense, _ := IsDense(p.Batch); !dense || !CRCValid(p.Batch) {
						t.Fatalf("part %d: dense %v, crc valid %v", i, dense, CRCValid(p.Batch))
					}
					wantSeq := int32((int64(math.MaxInt32-3) + p.FirstOffset - 10) % (1 << 31))
					if h.BaseOffset != p.FirstOffset || h.LastOffset() != p.LastOffset || h.Attributes != orig.Attributes ||
						h.ProducerID != 66 || h.ProducerEpoch != 2 || h.BaseSequence != wantSeq ||
						h.PartitionLeaderEpoch != 5 || h.FirstTimestamp != 900 {
						t.Fatalf("part %d header %+v", i, h)
					}
					if attrs&AttrLogAppendTime != 0 && h.MaxTimestamp != orig.MaxTimestamp {
						t.Fatalf("part %d max timestamp %d, want the append time %d", i, h.MaxTimestamp, orig.MaxTimestamp)
					}
					pr, err := Records(p.Batch)
					if err != nil {
						t.Fatalf("part %d: %v", i, err)
					}
					got = append(got, pr...)
					// Each part is ready for Rewrite.
					if err := Rewrite(bytes.Clone(p.Batch), 1, 0, 0, false); err != nil && attrs&AttrLogAppendTime == 0 {
						t.Fatalf("part %d: Rewrite: %v", i, err)
					}
				}
				if d := diffRecords(want, got); d != "" {
					t.Fatal(d)
				}
			})
		}
	}

	t.Run("dense is not re-encoded", func(t *testing.T) {
		b := mustBuild(t, CodecGzip, 0, 10, 0, -1, -1, -1, sampleRecords(10, false))
		parts, err := SplitDense(b)
		if err != nil || len(parts) != 1 {
			t.Fatalf("SplitDense = %d parts, %v", len(parts), err)
		}
		p := parts[0]
		if &p.Batch[0] != &b[0] || len(p.Batch) != len(b) || p.FirstOffset != 10 || p.LastOffset != 16 {
			t.Fatalf("part %d-%d, %d bytes, same bytes %v", p.FirstOffset, p.LastOffset, len(p.Batch), &p.Batch[0] == &b[0])
		}
	})
}

func TestReencodeLogAppendTime(t *testing.T) {
	for _, codec := range allCodecs {
		for _, extra := range []int16{0, AttrTransactional, AttrDeleteHorizon} {
			t.Run(fmt.Sprintf("%v/attrs%#x", codec, extra), func(t *testing.T) {
				recs := sampleRecords(300, true)
				b := mustBuild(t, codec, AttrLogAppendTime|extra, 300, 1_600_000_000_000, 8, 1, 20, recs)
				// The source broker stamps its append time into MaxTimestamp.
				const appendTime = 1_750_000_000_000
				b = patched(b, func(b []byte) {
					binary.BigEndian.PutUint64(b[offMaxTimestamp:], appendTime)
					binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 40)
				})
				src := mustHeader(t, b)
				want, err := Records(b)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range want {
					if r.Timestamp != appendTime {
						t.Fatalf("LogAppendTime record timestamp %d, want %d", r.Timestamp, appendTime)
					}
				}
				out, err := ReencodeLogAppendTime(b)
				if err != nil {
					t.Fatalf("ReencodeLogAppendTime: %v", err)
				}
				h := mustHeader(t, out)
				if h.LogAppendTime() || h.Codec() != codec || h.Attributes != src.Attributes&^AttrLogAppendTime ||
					h.BaseOffset != 300 || h.LastOffsetDelta != 40 || h.MaxTimestamp != appendTime ||
					h.ProducerID != 8 || h.ProducerEpoch != 1 || h.BaseSequence != 20 || !CRCValid(out) {
					t.Fatalf("re-encoded header %+v", h)
				}
				if extra == AttrDeleteHorizon && h.FirstTimestamp != src.FirstTimestamp {
					t.Fatalf("delete horizon %d lost, want %d", h.FirstTimestamp, src.FirstTimestamp)
				}
				got, err := Records(out)
				if err != nil {
					t.Fatal(err)
				}
				if d := diffRecords(want, got); d != "" {
					t.Fatal(d)
				}
				checkWithKmsg(t, out, want) // a CreateTime reader sees the append time too
			})
		}
	}
	plain := mustBuild(t, CodecNone, 0, 0, 0, -1, -1, -1, []Record{{}})
	if _, err := ReencodeLogAppendTime(plain); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ReencodeLogAppendTime(CreateTime) error %v, want ErrInvalid", err)
	}
}

func TestLZ4FrameLikeJava(t *testing.T) {
	// The Java client writes 64 KiB independent blocks and no content
	// checksum: FLG 0x60, BD 0x40. Check the pooled writer keeps that
	// after Reset.
	for range 2 {
		b := mustBuild(t, CodecLZ4, 0, 0, 0, -1, -1, -1, sampleRecords(0, false))
		frame := b[HeaderSize:]
		if !bytes.Equal(frame[:4], []byte{0x04, 0x22, 0x4D, 0x18}) || frame[4] != 0x60 || frame[5] != 0x40 {
			t.Fatalf("lz4 frame header % x", frame[:7])
		}
	}
}

// TestConcurrent runs the pooled and shared codec state from several
// goroutines, for the race detector.
func TestConcurrent(t *testing.T) {
	recs := sampleRecords(10, true)
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for i := range 20 {
				codec := allCodecs[(g+i)%len(allCodecs)]
				var b []byte
				if b, err = Build(codec, 0, 10, 0, -1, -1, -1, recs); err != nil {
					break
				}
				var got []Record
				if got, err = Records(b); err != nil {
					break
				}
				if d := diffRecords(recs, got); d != "" {
					err = errors.New(d)
					break
				}
				if _, err = SplitDense(b); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestAll walks a record set as fetches return it: whole batches with
// their headers, a trailing batch cut short left out, a bad one ending the
// walk with its error, and an early break stopping it.
func TestAll(t *testing.T) {
	a := mustBuild(t, CodecNone, 0, 0, 0, -1, -1, -1, sampleRecords(0, false))
	b := mustBuild(t, CodecLZ4, 0, 7, 0, -1, -1, -1, sampleRecords(7, false))
	c := mustBuild(t, CodecGzip, 0, 14, 0, -1, -1, -1, sampleRecords(14, false))
	raw := append(append(append([]byte{}, a...), b...), c[:len(c)-9]...)
	var bases []int64
	for batch, err := range All(raw) {
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(batch.Raw, a) && !bytes.Equal(batch.Raw, b) {
			t.Fatalf("batch at %d is not one of those built", batch.BaseOffset)
		}
		bases = append(bases, batch.BaseOffset)
	}
	if len(bases) != 2 || bases[0] != 0 || bases[1] != 7 {
		t.Fatalf("base offsets %v, want [0 7] (the cut batch left out)", bases)
	}
	for range All(raw) {
		break // must not panic: the iterator stops when told
	}
	bad := append(append([]byte{}, a...), b...)
	binary.BigEndian.PutUint32(bad[len(a)+8:], 3) // b's length below the v2 minimum
	var n int
	var last error
	for _, err := range All(bad) {
		n++
		last = err
	}
	if n != 2 || !errors.Is(last, ErrLength) {
		t.Fatalf("%d items, last error %v; want a then ErrLength", n, last)
	}
}

// TestZstdFrameWithoutChecksum: the zstd frames Build writes carry no
// content checksum (the Java producer's do not either; the batch CRC covers
// them), and decode.
func TestZstdFrameWithoutChecksum(t *testing.T) {
	recs := []Record{{Key: []byte("k"), Value: bytes.Repeat([]byte("value "), 100)}}
	b := mustBuild(t, CodecZstd, 0, 0, 0, 1, 0, 0, recs)
	frame := b[HeaderSize:]
	if !bytes.HasPrefix(frame, []byte{0x28, 0xb5, 0x2f, 0xfd}) || len(frame) < 5 {
		t.Fatalf("records section does not start with a zstd frame: % x", frame[:min(len(frame), 8)])
	}
	// Frame_Header_Descriptor, bit 2: Content_Checksum_flag.
	if desc := frame[4]; desc&0x04 != 0 {
		t.Errorf("frame header descriptor %#x has the content checksum flag set", desc)
	}
	got, err := Records(b)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Value, recs[0].Value) {
		t.Fatalf("Records = %d records, %v", len(got), err)
	}
}
