package ipc_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/vmihailenco/msgpack/v5"
)

// benchBatches are the batches the benchmarks move: many small items (text
// requests), fewer large ones (image tiles, tensors), and a batch of
// nearly the most the encoder keeps between frames (4 MiB).
var benchBatches = []struct {
	name     string
	items    int
	itemSize int
}{
	{"64x16B", 64, 16},
	{"64x4KiB", 64, 4 << 10},
	{"64x60KB", 64, 60000},
}

// benchItems returns n msgpack strings of size bytes each (header included).
func benchItems(b *testing.B, n, size int) [][]byte {
	b.Helper()
	items := make([][]byte, n)
	for i := range items {
		// A str8/str16 header takes 2 or 3 bytes; aim the payload so the
		// encoded item is close to size.
		s := bytes.Repeat([]byte{'a' + byte(i%26)}, max(size-3, 1))
		enc, err := msgpack.Marshal(string(s))
		if err != nil {
			b.Fatal(err)
		}
		items[i] = enc
	}
	return items
}

func BenchmarkWrite(b *testing.B) {
	for _, bb := range benchBatches {
		b.Run(bb.name, func(b *testing.B) {
			msg := &ipc.Message{Kind: ipc.KindBatch, BatchID: 1, Items: benchItems(b, bb.items, bb.itemSize)}
			w := ipc.NewWriter(io.Discard, 0)
			b.ReportAllocs()
			b.SetBytes(int64(frameLen(b, msg)))
			for b.Loop() {
				if err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRead(b *testing.B) {
	for _, bb := range benchBatches {
		b.Run(bb.name, func(b *testing.B) {
			msg := &ipc.Message{Kind: ipc.KindResult, BatchID: 1, Items: benchItems(b, bb.items, bb.itemSize)}
			frame := encodeFrame(b, msg)
			src := &repeatReader{frame: frame}
			r := ipc.NewReader(src, 0)
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				got, err := r.Read()
				if err != nil {
					b.Fatal(err)
				}
				if len(got.Items) != bb.items {
					b.Fatalf("read %d items, want %d", len(got.Items), bb.items)
				}
			}
		})
	}
}

// repeatReader yields the same frame over and over, so the read benchmark
// measures framing and decoding rather than a pipe.
type repeatReader struct {
	frame []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.frame[r.off:])
		n += c
		r.off = (r.off + c) % len(r.frame)
	}
	return n, nil
}

func frameLen(tb testing.TB, m *ipc.Message) int {
	return len(encodeFrame(tb, m))
}

// encodeFrame returns the whole frame (length prefix included) for m.
func encodeFrame(tb testing.TB, m *ipc.Message) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := ipc.NewWriter(&buf, 0).Write(m); err != nil {
		tb.Fatalf("encode %s: %v", m.Kind, err)
	}
	return buf.Bytes()
}
