package recordbatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchRecords returns n records with valueSize-byte values that compress
// about like log lines: words from a small vocabulary.
func benchRecords(n, valueSize int) []Record {
	rng := rand.New(rand.NewPCG(7, 7))
	words := []string{"GET ", "/api/v1/", "orders ", "200 ", "user=", "42 ", "latency_ms=", "17 ", "ok ", "trace=", "abcdef "}
	recs := make([]Record, n)
	for i := range recs {
		v := make([]byte, 0, valueSize)
		for len(v) < valueSize {
			v = append(v, words[rng.IntN(len(words))]...)
		}
		recs[i] = Record{Offset: int64(i), Timestamp: 1_700_000_000_000 + int64(i), Key: fmt.Appendf(nil, "key-%d", i), Value: v[:valueSize]}
	}
	return recs
}

// BenchmarkRewrite measures the forwarding hot path; MB/s is over the whole
// batch, which Rewrite reads once.
func BenchmarkRewrite(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"1KiB", 1 << 10}, {"16KiB", 16 << 10}, {"1MiB", 1 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			batch := mustBuild(b, CodecNone, 0, 0, 0, 1, 0, 0, benchRecords(max(size.bytes/1024, 1), 1000))
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := Rewrite(batch, 1, 0, int32(i&0x7FFFFFFF), i&1 == 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCRCValid is the floor Rewrite is measured against: one CRC32C
// pass over the batch.
func BenchmarkCRCValid(b *testing.B) {
	batch := mustBuild(b, CodecNone, 0, 0, 0, 1, 0, 0, benchRecords(1024, 1000))
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		if !CRCValid(batch) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkRecords decodes a batch of 1 KiB values; MB/s is over the
// uncompressed records.
func BenchmarkRecords(b *testing.B) {
	for _, codec := range []Codec{CodecZstd, CodecNone} {
		b.Run(codec.String(), func(b *testing.B) {
			recs := benchRecords(256, 1024)
			batch := mustBuild(b, codec, 0, 0, 0, 1, 0, 0, recs)
			plain := mustBuild(b, CodecNone, 0, 0, 0, 1, 0, 0, recs)
			b.SetBytes(int64(len(plain) - HeaderSize))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Records(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuild encodes the same batch, as the splitter and padding do.
func BenchmarkBuild(b *testing.B) {
	for _, codec := range []Codec{CodecZstd, CodecLZ4, CodecNone} {
		b.Run(codec.String(), func(b *testing.B) {
			recs := benchRecords(256, 1024)
			plain := mustBuild(b, CodecNone, 0, 0, 0, 1, 0, 0, recs)
			b.SetBytes(int64(len(plain) - HeaderSize))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(codec, 0, 0, 0, 1, 0, 0, recs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
