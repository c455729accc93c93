package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec state is pooled or shared: splitting and re-encoding run per batch,
// and a fresh gzip/lz4/zstd state per call would dwarf the work itself.

// xerialMagic starts the snappy framing the Java client (snappy-java's
// SnappyOutputStream) writes: this magic, version 1, compatible version 1,
// then per block a big-endian int32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const (
	xerialHeaderSize = 16
	// xerialBlockSize is the uncompressed block size snappy-java writes.
	xerialBlockSize = 32 << 10
)

// appendWriter is an io.Writer appending to a slice, so that streaming
// compressors write straight behind the batch header.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

var (
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	lz4Writers  = sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		// Like the Java client's KafkaLZ4BlockOutputStream: 64 KiB
		// independent blocks, no content checksum. Concurrency 1 keeps
		// the work on the calling goroutine.
		if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false), lz4.ConcurrencyOption(1)); err != nil {
			panic("recordbatch: lz4 writer options: " + err.Error()) // static options; cannot fail
		}
		return w
	}}
	lz4Readers = sync.Pool{New: func() any { return &lz4Reader{r: lz4.NewReader(nil)} }}

	zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		// EncodeAll is safe for concurrent use: by default up to
		// GOMAXPROCS calls run at once, each on its own encoder state.
		// No frame checksum: the batch's CRC-32C covers the compressed
		// bytes already, and the Java producer (zstd-jni) writes none
		// either; on the small runs cut out of compacted batches (10
		// KiB) it was about a tenth of the encoding time.
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(false))
	})
	zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(uint64(maxUncompressed)),
			zstd.WithDecoderMaxWindow(uint64(max(maxUncompressed, zstd.MinWindowSize))))
	})
)

// gzipReader and lz4Reader pool a decoder with the bytes.Reader it reads
// from, so that a decompression allocates neither.
type gzipReader struct {
	gz  gzip.Reader
	src bytes.Reader
}

type lz4Reader struct {
	r   *lz4.Reader
	src bytes.Reader
}

// appendCompressed appends src compressed with c to dst.
func appendCompressed(dst []byte, c Codec, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		gz := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(gz)
		w := appendWriter{b: dst}
		gz.Reset(&w)
		if _, err := gz.Write(src); err != nil {
			return nil, fmt.Errorf("gzip compressing %d bytes: %w: %w", len(src), ErrCodec, err)
		}
		if err := gz.Close(); err != nil {
			return nil, fmt.Errorf("gzip compressing %d bytes: %w: %w", len(src), ErrCodec, err)
		}
		gz.Reset(nil) // do not keep the output alive from the pool
		return w.b, nil
	case CodecSnappy:
		return appendXerial(dst, src), nil
	case CodecLZ4:
		lw := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(lw)
		w := appendWriter{b: dst}
		lw.Reset(&w)
		if _, err := lw.Write(src); err != nil {
			return nil, fmt.Errorf("lz4 compressing %d bytes: %w: %w", len(src), ErrCodec, err)
		}
		if err := lw.Close(); err != nil {
			return nil, fmt.Errorf("lz4 compressing %d bytes: %w: %w", len(src), ErrCodec, err)
		}
		lw.Reset(nil)
		return w.b, nil
	case CodecZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return nil, fmt.Errorf("zstd compressing: %w: %w", ErrCodec, err)
		}
		return enc.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("compressing: %v: %w", c, ErrCodec)
}

// appendXerial appends src as xerial-framed snappy, the layout the Java
// producer writes, so that any consumer reads it.
func appendXerial(dst, src []byte) []byte {
	dst = append(dst, xerialMagic...)
	dst = binary.BigEndian.AppendUint32(dst, 1) // version
	dst = binary.BigEndian.AppendUint32(dst, 1) // compatible version
	for len(src) > 0 {
		n := min(len(src), xerialBlockSize)
		dst = slices.Grow(dst, 4+s2.MaxEncodedLen(n))
		at := len(dst)
		block := s2.EncodeSnappy(dst[at+4:cap(dst)], src[:n]) // room reserved: encodes in place
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(block)))
		dst = dst[:at+4+len(block)]
		src = src[n:]
	}
	return dst
}

// decompress returns src decompressed with c (src itself for CodecNone),
// bounded by MaxUncompressedBytes.
func decompress(c Codec, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return src, nil
	case CodecGzip:
		r := gzipReaders.Get().(*gzipReader)
		defer gzipReaders.Put(r)
		r.src.Reset(src)
		if err := r.gz.Reset(&r.src); err != nil {
			return nil, fmt.Errorf("gzip decompressing: %w: %w", ErrCodec, err)
		}
		out, err := readAllBounded(&r.gz, 4*len(src))
		r.src.Reset(nil)
		if err != nil {
			return nil, fmt.Errorf("gzip decompressing: %w", err)
		}
		return out, nil
	case CodecSnappy:
		out, err := decodeSnappy(src)
		if err != nil {
			return nil, fmt.Errorf("snappy decompressing: %w", err)
		}
		return out, nil
	case CodecLZ4:
		r := lz4Readers.Get().(*lz4Reader)
		defer lz4Readers.Put(r)
		r.src.Reset(src)
		r.r.Reset(&r.src)
		out, err := readAllBounded(r.r, 4*len(src))
		r.src.Reset(nil)
		r.r.Reset(nil)
		if err != nil {
			return nil, fmt.Errorf("lz4 decompressing: %w", err)
		}
		return out, nil
	case CodecZstd:
		dec, err := zstdDecoder()
		if err != nil {
			return nil, fmt.Errorf("zstd decompressing: %w: %w", ErrCodec, err)
		}
		out, err := dec.DecodeAll(src, nil)
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, fmt.Errorf("zstd decompressing: %w: %w", ErrTooLarge, err)
		}
		if err != nil {
			return nil, fmt.Errorf("zstd decompressing: %w: %w", ErrCodec, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("decompressing: %v: %w", c, ErrCodec)
}

// readAllBounded reads r to EOF into a buffer first sized hint, failing with
// ErrTooLarge beyond the bound.
func readAllBounded(r io.Reader, hint int) ([]byte, error) {
	buf := make([]byte, 0, min(max(hint, 512), maxUncompressed))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > maxUncompressed {
				return nil, fmt.Errorf("more than %d bytes: %w", maxUncompressed, ErrTooLarge)
			}
			// One byte over the bound is enough to tell "too large".
			buf = slices.Grow(buf, min(len(buf), maxUncompressed+1-len(buf)))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) > maxUncompressed {
				return nil, fmt.Errorf("more than %d bytes: %w", maxUncompressed, ErrTooLarge)
			}
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCodec, err)
		}
	}
}

// decodeSnappy decodes xerial-framed snappy (what Java producers write) or a
// single raw snappy block (what some other clients write).
func decodeSnappy(src []byte) ([]byte, error) {
	if len(src) < xerialHeaderSize || !bytes.Equal(src[:len(xerialMagic)], xerialMagic) {
		n, err := s2.DecodedLen(src)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCodec, err)
		}
		if n > maxUncompressed {
			return nil, fmt.Errorf("block of %d bytes: %w", n, ErrTooLarge)
		}
		out, err := s2.Decode(nil, src)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCodec, err)
		}
		return out, nil
	}
	// Size every block first so that the output is allocated once and
	// bounded before any of it is decoded.
	total := 0
	for rest := src[xerialHeaderSize:]; len(rest) > 0; {
		block, next, err := xerialBlock(rest)
		if err != nil {
			return nil, err
		}
		n, err := s2.DecodedLen(block)
		if err != nil {
			return nil, fmt.Errorf("xerial block: %w: %w", ErrCodec, err)
		}
		if total += n; total > maxUncompressed {
			return nil, fmt.Errorf("more than %d bytes: %w", maxUncompressed, ErrTooLarge)
		}
		rest = next
	}
	out := make([]byte, 0, total)
	for rest := src[xerialHeaderSize:]; len(rest) > 0; {
		block, next, _ := xerialBlock(rest) // checked above
		n, _ := s2.DecodedLen(block)
		if _, err := s2.Decode(out[len(out):len(out)+n], block); err != nil {
			return nil, fmt.Errorf("xerial block: %w: %w", ErrCodec, err)
		}
		out = out[:len(out)+n]
		rest = next
	}
	return out, nil
}

// xerialBlock splits the first length-prefixed block off b.
func xerialBlock(b []byte) (block, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("xerial block length: %d bytes left: %w", len(b), ErrCodec)
	}
	n := int64(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || n > int64(len(b)-4) {
		return nil, nil, fmt.Errorf("xerial block of %d bytes, %d left: %w", n, len(b)-4, ErrCodec)
	}
	return b[4 : 4+n], b[4+n:], nil
}
