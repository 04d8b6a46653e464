package ipc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/vmihailenco/msgpack/v5"
)

// sampleMessages covers every Kind and the field shapes that must survive the
// wire exactly: nil and empty slices stay apart, nil items inside a batch
// stay nil, and large items come back whole.
func sampleMessages(tb testing.TB) []struct {
	name string
	msg  ipc.Message
} {
	tb.Helper()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	return []struct {
		name string
		msg  ipc.Message
	}{
		{"ready", ipc.Message{Kind: ipc.KindReady, Ready: &ipc.Ready{Version: ipc.Version, PID: 4242, Device: "cuda:0 (CUDA_VISIBLE_DEVICES=2)", Model: "sleep:10ms,100us"}}},
		{"ready zero", ipc.Message{Kind: ipc.KindReady, Ready: &ipc.Ready{}}},
		{"ready negative", ipc.Message{Kind: ipc.KindReady, Ready: &ipc.Ready{Version: -1, PID: -7}}},
		{"batch", ipc.Message{Kind: ipc.KindBatch, BatchID: 1, Items: [][]byte{mp(tb, "a"), mp(tb, 42), mp(tb, []float32{1, 2})}}},
		{"batch max id", ipc.Message{Kind: ipc.KindBatch, BatchID: ^uint64(0), Items: [][]byte{mp(tb, "x")}}},
		{"batch nil items", ipc.Message{Kind: ipc.KindBatch, BatchID: 2}},
		{"batch empty items", ipc.Message{Kind: ipc.KindBatch, BatchID: 3, Items: [][]byte{}}},
		{"batch nil and empty item", ipc.Message{Kind: ipc.KindBatch, BatchID: 4, Items: [][]byte{nil, {}, {0xc0}}}},
		{"batch big items", ipc.Message{Kind: ipc.KindBatch, BatchID: 5, Items: [][]byte{big, big[:70000], big[:300]}}},
		{"batch deadlines", ipc.Message{Kind: ipc.KindBatch, BatchID: 11, Items: [][]byte{mp(tb, "a"), mp(tb, "b"), mp(tb, "c")}, TTLs: []int64{0, 30e6, 1 << 62}}},
		{"result", ipc.Message{Kind: ipc.KindResult, BatchID: 6, Items: [][]byte{mp(tb, "A"), mp(tb, "B")}}},
		{"result expired", ipc.Message{Kind: ipc.KindResult, BatchID: 12, Items: [][]byte{nil, mp(tb, "B"), nil}, Expired: []int{0, 2}}},
		{"result item errors", ipc.Message{Kind: ipc.KindResult, BatchID: 7, Items: [][]byte{mp(tb, 1), nil}, ItemErrors: []string{"", "item 1: shape [3] does not match [4] — naïve input"}}},
		{"result empty item errors", ipc.Message{Kind: ipc.KindResult, BatchID: 8, Items: [][]byte{}, ItemErrors: []string{}}},
		{"result batch error", ipc.Message{Kind: ipc.KindResult, BatchID: 9, Error: "model returned 2 outputs for 3 items"}},
		{"result long error", ipc.Message{Kind: ipc.KindResult, BatchID: 10, Error: strings.Repeat("e", 70000)}},
		{"heartbeat", ipc.Message{Kind: ipc.KindHeartbeat}},
		{"stop", ipc.Message{Kind: ipc.KindStop}},
		{"fatal", ipc.Message{Kind: ipc.KindFatal, Error: "open model chaos:init-fail: chaos: init failed as asked"}},
		{"hello", ipc.Message{Kind: ipc.KindHello, Ready: &ipc.Ready{Version: ipc.Version, PID: 77, Magic: ipc.Magic}}},
		{"recall", ipc.Message{Kind: ipc.KindRecall, BatchID: 13}},
		{"recalled", ipc.Message{Kind: ipc.KindRecalled, BatchID: 13}},
		{"init", ipc.Message{Kind: ipc.KindInit, Spec: []byte(`{"runner":"sleep","settings":{"fixed":1000000,"per_item":0}}`)}},
	}
}

// mp encodes v as msgpack, as the edge does for every item.
func mp(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal %v: %v", v, err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range sampleMessages(t) {
		t.Run(tc.name, func(t *testing.T) {
			frame := encodeFrame(t, &tc.msg)
			if got := binary.BigEndian.Uint32(frame); int(got) != len(frame)-4 {
				t.Fatalf("length prefix says %d, payload is %d bytes", got, len(frame)-4)
			}
			decoded, err := ipc.Decode(frame[4:])
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			assertSame(t, decoded, tc.msg)

			read, err := ipc.NewReader(bytes.NewReader(frame), 0).Read()
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			assertSame(t, read, tc.msg)
		})
	}
}

// assertSame fails unless got equals want field by field, nil and empty
// slices told apart.
func assertSame(t *testing.T, got, want ipc.Message) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("message changed on the wire:\n got %s\nwant %s", describe(got), describe(want))
	}
}

func describe(m ipc.Message) string {
	items := "nil"
	if m.Items != nil {
		sizes := make([]string, len(m.Items))
		for i, it := range m.Items {
			if it == nil {
				sizes[i] = "nil"
			} else {
				sizes[i] = fmt.Sprintf("%dB", len(it))
			}
		}
		items = "[" + strings.Join(sizes, " ") + "]"
	}
	errs := "nil"
	if m.ItemErrors != nil {
		errs = fmt.Sprintf("%q", m.ItemErrors)
	}
	return fmt.Sprintf("{%s batch=%d items=%s itemErrors=%s error=%.60q ready=%+v ttls=%v expired=%v}", m.Kind, m.BatchID, items, errs, m.Error, m.Ready, m.TTLs, m.Expired)
}

// TestStream sends every sample message, one after the other, through an
// in-memory pipe and an OS pipe, and expects them back in order followed by
// a clean io.EOF.
func TestStream(t *testing.T) {
	pipes := []struct {
		name string
		open func(t *testing.T) (io.ReadCloser, io.WriteCloser)
	}{
		{"io.Pipe", func(*testing.T) (io.ReadCloser, io.WriteCloser) { return io.Pipe() }},
		{"os.Pipe", func(t *testing.T) (io.ReadCloser, io.WriteCloser) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			return r, w
		}},
	}
	for _, p := range pipes {
		t.Run(p.name, func(t *testing.T) {
			pr, pw := p.open(t)
			defer pr.Close()
			msgs := sampleMessages(t)
			writeErr := make(chan error, 1)
			go func() {
				defer pw.Close()
				w := ipc.NewWriter(pw, 0)
				for _, tc := range msgs {
					if err := w.Write(&tc.msg); err != nil {
						writeErr <- fmt.Errorf("write %s: %w", tc.name, err)
						return
					}
				}
				writeErr <- nil
			}()
			r := ipc.NewReader(pr, 0)
			for _, tc := range msgs {
				got, err := r.Read()
				if err != nil {
					t.Fatalf("read %s: %v", tc.name, err)
				}
				assertSame(t, got, tc.msg)
			}
			if _, err := r.Read(); err != io.EOF {
				t.Fatalf("after the last frame: got %v, want io.EOF", err)
			}
			if err := <-writeErr; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWriterRefusesOversizedMessage(t *testing.T) {
	const limit = 1024
	tests := []struct {
		name string
		msg  ipc.Message
	}{
		{"one big item", ipc.Message{Kind: ipc.KindBatch, Items: [][]byte{make([]byte, limit+1)}}},
		{"many items", ipc.Message{Kind: ipc.KindResult, Items: bytes.SplitAfter(make([]byte, 400), []byte{0})}},
		{"headers tip it over", ipc.Message{Kind: ipc.KindBatch, Items: [][]byte{make([]byte, limit-2)}}},
		{"long error", ipc.Message{Kind: ipc.KindFatal, Error: strings.Repeat("x", 2*limit)}},
		{"item errors", ipc.Message{Kind: ipc.KindResult, ItemErrors: []string{strings.Repeat("x", 600), strings.Repeat("y", 600)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := ipc.NewWriter(&out, limit)
			err := w.Write(&tc.msg)
			if !errors.Is(err, ipc.ErrFrameTooLarge) {
				t.Fatalf("Write: got %v, want ErrFrameTooLarge", err)
			}
			if !strings.Contains(err.Error(), tc.msg.Kind.String()) {
				t.Errorf("error %q does not name the %s message", err, tc.msg.Kind)
			}
			if out.Len() != 0 {
				t.Fatalf("a refused message wrote %d bytes", out.Len())
			}
			// The stream is still in step: the next message goes through.
			small := ipc.Message{Kind: ipc.KindHeartbeat}
			if err := w.Write(&small); err != nil {
				t.Fatalf("Write after refusal: %v", err)
			}
			got, err := ipc.NewReader(&out, limit).Read()
			if err != nil {
				t.Fatalf("Read after refusal: %v", err)
			}
			assertSame(t, got, small)
		})
	}
}

func TestWriterAcceptsMessageAtLimit(t *testing.T) {
	msg := ipc.Message{Kind: ipc.KindBatch, Items: [][]byte{make([]byte, 1000)}}
	limit := len(encodeFrame(t, &msg)) - 4
	var out bytes.Buffer
	if err := ipc.NewWriter(&out, limit).Write(&msg); err != nil {
		t.Fatalf("a message of exactly the limit (%d bytes): %v", limit, err)
	}
	got, err := ipc.NewReader(&out, limit).Read()
	if err != nil {
		t.Fatalf("Read with the same limit: %v", err)
	}
	assertSame(t, got, msg)
}

// TestReaderRejectsOversizedFrame announces frames over the limit, with no
// payload behind them: the reader must refuse from the header alone, without
// allocating the announced size or waiting for bytes that never come.
func TestReaderRejectsOversizedFrame(t *testing.T) {
	const limit = 1 << 20
	for _, announced := range []uint32{limit + 1, 1 << 30, 0xffffffff} {
		t.Run(fmt.Sprint(announced), func(t *testing.T) {
			var header [4]byte
			binary.BigEndian.PutUint32(header[:], announced)
			r := ipc.NewReader(bytes.NewReader(header[:]), limit)
			var err error
			allocated := bytesAllocated(func() { _, err = r.Read() })
			if !errors.Is(err, ipc.ErrFrameTooLarge) {
				t.Fatalf("Read: got %v, want ErrFrameTooLarge", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(announced)) {
				t.Errorf("error %q does not say how large the frame was", err)
			}
			if allocated > 64<<10 {
				t.Fatalf("refusing a %d-byte frame allocated %d bytes", announced, allocated)
			}
		})
	}
}

// TestReaderTruncatedLargeFrame announces a large frame under the limit and
// then ends the stream: the reader must not have allocated the announced
// size up front.
func TestReaderTruncatedLargeFrame(t *testing.T) {
	var stream bytes.Buffer
	binary.Write(&stream, binary.BigEndian, uint32(200<<20))
	stream.Write(make([]byte, 1000))
	r := ipc.NewReader(&stream, 0)
	var err error
	allocated := bytesAllocated(func() { _, err = r.Read() })
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("Read: got %v, want io.ErrUnexpectedEOF", err)
	}
	if allocated > 8<<20 {
		t.Fatalf("1000 bytes of a 200 MiB frame allocated %d bytes", allocated)
	}
}

// bytesAllocated reports how many bytes the process allocated while f ran.
func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestReaderTruncatedStream(t *testing.T) {
	frame := encodeFrame(t, &ipc.Message{Kind: ipc.KindBatch, BatchID: 3, Items: [][]byte{mp(t, "hello"), mp(t, "world")}})
	tests := []struct {
		name   string
		stream []byte
		good   int // whole frames before the cut
		want   error
	}{
		{"empty", nil, 0, io.EOF},
		{"inside header", frame[:2], 0, io.ErrUnexpectedEOF},
		{"header only", frame[:4], 0, io.ErrUnexpectedEOF},
		{"inside payload", frame[:len(frame)-1], 0, io.ErrUnexpectedEOF},
		{"after a whole frame", append(slices.Clone(frame), frame[:7]...), 1, io.ErrUnexpectedEOF},
		{"two whole frames", append(slices.Clone(frame), frame...), 2, io.EOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ipc.NewReader(bytes.NewReader(tc.stream), 0)
			for i := range tc.good {
				if _, err := r.Read(); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
			}
			if _, err := r.Read(); err != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// fields builds a message payload field by field, so tests can corrupt one
// field at a time. A nil argument is encoded as msgpack nil.
func fields(tb testing.TB, vals ...any) []byte {
	tb.Helper()
	return mp(tb, vals)
}

// deepArray returns depth nested one-element arrays around nil.
func deepArray(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
}

func TestDecodeCorrupt(t *testing.T) {
	valid := encodeFrame(t, &ipc.Message{Kind: ipc.KindBatch, BatchID: 1, Items: [][]byte{mp(t, "a")}})[4:]
	withReady := func(ready []byte) []byte {
		return fields(t, 1, 0, nil, nil, "", msgpack.RawMessage(ready))
	}
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"not an array", mp(t, "hello")},
		{"nil", []byte{0xc0}},
		{"too few fields", fields(t, 2, 1, nil, nil, "")},
		{"too many fields", fields(t, 2, 1, nil, nil, "", nil, nil)},
		{"kind zero", fields(t, 0, 1, nil, nil, "", nil)},
		{"kind past the last", fields(t, int(ipc.KindRecalled)+1, 1, nil, nil, "", nil)},
		{"spec longer than the payload", []byte{0x99, 0x08, 0x00, 0xc0, 0xc0, 0xa0, 0xc0, 0xc0, 0xc0, 0xc4, 0x09, 'x'}},
		{"kind wraps to a valid one", fields(t, 258, 1, nil, nil, "", nil)},
		{"kind is negative", fields(t, -254, 1, nil, nil, "", nil)},
		{"kind is a string", fields(t, "batch", 1, nil, nil, "", nil)},
		{"batch id is a string", fields(t, 2, "one", nil, nil, "", nil)},
		{"items not an array", fields(t, 2, 1, "items", nil, "", nil)},
		{"item is a map", fields(t, 2, 1, []any{map[string]int{"a": 1}}, nil, "", nil)},
		{"item errors hold a number", fields(t, 3, 1, nil, []any{1}, "", nil)},
		{"error is a number", fields(t, 6, 0, nil, nil, 17, nil)},
		{"ready is a string", fields(t, 1, 0, nil, nil, "", "ready")},
		{"ready version is a string", fields(t, 1, 0, nil, nil, "", map[string]any{"version": "one"})},
		{"ready key is a number", fields(t, 1, 0, nil, nil, "", map[int]int{1: 1})},
		{"ready unknown field nested too deep", withReady(append([]byte{0x81, 0xa1, 'x'}, deepArray(1000)...))},
		{"ready map claims more entries than bytes", withReady([]byte{0xdf, 0x7f, 0xff, 0xff, 0xff})},
		{"truncated", valid[:len(valid)-1]},
		{"trailing bytes", append(slices.Clone(valid), 0xc0)},
		{"item longer than the payload", []byte{0x96, 0x02, 0x01, 0x91, 0xc6, 0x7f, 0xff, 0xff, 0xff, 'a'}},
		{"items claim more elements than bytes", []byte{0x96, 0x02, 0x01, 0xdd, 0x7f, 0xff, 0xff, 0xff, 0xc0}},
		{"item errors claim more elements than bytes", []byte{0x96, 0x03, 0x01, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ipc.Decode(tc.payload)
			if !errors.Is(err, ipc.ErrCorruptFrame) {
				t.Fatalf("Decode: got %s, %v; want ErrCorruptFrame", describe(m), err)
			}
			// The same bytes inside a frame: the reader says the same.
			frame := binary.BigEndian.AppendUint32(nil, uint32(len(tc.payload)))
			frame = append(frame, tc.payload...)
			if _, err := ipc.NewReader(bytes.NewReader(frame), 0).Read(); !errors.Is(err, ipc.ErrCorruptFrame) {
				t.Fatalf("Read: got %v, want ErrCorruptFrame", err)
			}
		})
	}
}

// TestDecodeAcceptsUnknownReadyFields lets a newer worker add fields to its
// ready message without upsetting an older supervisor.
func TestDecodeAcceptsUnknownReadyFields(t *testing.T) {
	ready := map[string]any{
		"version": ipc.Version,
		"pid":     99,
		"device":  "cpu",
		"model":   "echo",
		"gpu":     map[string]any{"name": "H100", "memory": []any{80, "GiB", []byte{1}}},
		"flags":   []any{[]any{[]any{}}},
	}
	m, err := ipc.Decode(fields(t, 1, 0, nil, nil, "", ready))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := ipc.Message{Kind: ipc.KindReady, Ready: &ipc.Ready{Version: ipc.Version, PID: 99, Device: "cpu", Model: "echo"}}
	assertSame(t, m, want)
}

// TestDecodeItemsShareThePayload checks the documented contract that Decode
// does not copy items: they are windows on the payload, capped so that an
// append to one cannot overwrite the next.
func TestDecodeItemsShareThePayload(t *testing.T) {
	payload := encodeFrame(t, &ipc.Message{Kind: ipc.KindBatch, Items: [][]byte{mp(t, "aa"), mp(t, "bb")}})[4:]
	m, err := ipc.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	first := m.Items[0]
	if cap(first) != len(first) {
		t.Fatalf("item capacity %d exceeds its length %d: appending would clobber the next item", cap(first), len(first))
	}
	_ = append(first, 'X')
	if string(m.Items[1]) != string(mp(t, "bb")) {
		t.Fatalf("appending to item 0 changed item 1 to %q", m.Items[1])
	}
	i := bytes.Index(payload, mp(t, "aa"))
	payload[i+1] = 'z'
	if m.Items[0][1] != 'z' {
		t.Fatal("item 0 is a copy of the payload, not a window on it")
	}
}

// TestConcurrentWritersDoNotInterleave has several goroutines write through
// one Writer to a sink that passes each Write on in small pieces, yielding in
// between, so that frames not written whole under one lock would mix.
func TestConcurrentWritersDoNotInterleave(t *testing.T) {
	const writers, perWriter = 4, 50
	pr, pw := io.Pipe()
	defer pr.Close()
	w := ipc.NewWriter(&choppyWriter{w: pw, piece: 97}, 0)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for id := range writers {
		wg.Go(func() {
			for seq := range perWriter {
				item := bytes.Repeat([]byte{byte('A' + id)}, 500+seq*37)
				msg := ipc.Message{Kind: ipc.KindResult, BatchID: uint64(id*perWriter + seq), Items: [][]byte{item, item}}
				if err := w.Write(&msg); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(errs)
		pw.Close()
	}()

	r := ipc.NewReader(pr, 0)
	next := make([]int, writers) // next sequence number expected from each writer
	for range writers * perWriter {
		m, err := r.Read()
		if err != nil {
			t.Fatalf("read: %v (frames from concurrent writers mixed?)", err)
		}
		id, seq := int(m.BatchID)/perWriter, int(m.BatchID)%perWriter
		if id >= writers || seq != next[id] {
			t.Fatalf("batch %d out of order: writer %d expected seq %d", m.BatchID, id, next[id])
		}
		next[id]++
		want := bytes.Repeat([]byte{byte('A' + id)}, 500+seq*37)
		if len(m.Items) != 2 || !bytes.Equal(m.Items[0], want) || !bytes.Equal(m.Items[1], want) {
			t.Fatalf("batch %d arrived damaged", m.BatchID)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after all frames: got %v, want io.EOF", err)
	}
	for err := range errs {
		t.Fatalf("write: %v", err)
	}
}

// choppyWriter passes each Write on in pieces of at most piece bytes.
type choppyWriter struct {
	w     io.Writer
	piece int
}

func (c *choppyWriter) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := c.w.Write(p[written:min(written+c.piece, len(p))])
		written += n
		if err != nil {
			return written, err
		}
		runtime.Gosched()
	}
	return written, nil
}

func TestWriterReportsWriteError(t *testing.T) {
	pr, pw := io.Pipe()
	pr.CloseWithError(errors.New("reader gone"))
	err := ipc.NewWriter(pw, 0).Write(&ipc.Message{Kind: ipc.KindHeartbeat})
	if err == nil || !strings.Contains(err.Error(), "reader gone") || !strings.Contains(err.Error(), "heartbeat") {
		t.Fatalf("got %v, want an error naming the heartbeat and the cause", err)
	}
}

func TestKindString(t *testing.T) {
	tests := []struct {
		kind ipc.Kind
		want string
	}{
		{ipc.KindReady, "ready"},
		{ipc.KindBatch, "batch"},
		{ipc.KindResult, "result"},
		{ipc.KindHeartbeat, "heartbeat"},
		{ipc.KindStop, "stop"},
		{ipc.KindFatal, "fatal"},
		{ipc.KindHello, "hello"},
		{ipc.KindInit, "init"},
		{ipc.KindResultPart, "result part"},
		{ipc.KindRecall, "recall"},
		{ipc.KindRecalled, "recalled"},
		{0, "kind(0)"},
		{200, "kind(200)"},
	}
	for _, tc := range tests {
		if got := tc.kind.String(); got != tc.want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(tc.kind), got, tc.want)
		}
	}
}

// TestBadExpiredIndicesAreCorrupt: a result whose Expired list names an
// item it does not have, or names one twice, is a corrupt frame, not an
// index the supervisor would trip over.
func TestBadExpiredIndicesAreCorrupt(t *testing.T) {
	for _, expired := range [][]int{{2}, {-1}, {1, 1}, {1, 0}} {
		var buf bytes.Buffer
		m := ipc.Message{Kind: ipc.KindResult, BatchID: 1, Items: [][]byte{nil, nil}, Expired: expired}
		if err := ipc.NewWriter(&buf, 0).Write(&m); err != nil {
			t.Fatal(err)
		}
		if _, err := ipc.Decode(buf.Bytes()[4:]); !errors.Is(err, ipc.ErrCorruptFrame) {
			t.Errorf("Expired %v: decoded with %v, want ErrCorruptFrame", expired, err)
		}
	}
}

// TestTTLsOtherThanOneAnItemAreCorrupt: a batch carries a time to live
// for each item or none; a worker reads item i's by its index, and would
// trip over one past the items.
func TestTTLsOtherThanOneAnItemAreCorrupt(t *testing.T) {
	for _, tc := range []struct {
		items int
		ttls  []int64
	}{{1, []int64{0, 1}}, {2, []int64{5, 5, 5}}, {2, []int64{5}}} {
		var buf bytes.Buffer
		m := ipc.Message{Kind: ipc.KindBatch, BatchID: 1, Items: make([][]byte, tc.items), TTLs: tc.ttls}
		if err := ipc.NewWriter(&buf, 0).Write(&m); err != nil {
			t.Fatal(err)
		}
		if _, err := ipc.Decode(buf.Bytes()[4:]); !errors.Is(err, ipc.ErrCorruptFrame) || !strings.Contains(err.Error(), "ttls") {
			t.Errorf("%d items, TTLs %v: decoded with %v, want ErrCorruptFrame naming the ttls", tc.items, tc.ttls, err)
		}
	}
}

// TestDecodeReadsOlderVersions: a worker of an older version must be told
// apart by the Version it reports, not fail as a corrupt frame, so its
// eight-field (version 2) and six-field (version 1) messages are read.
func TestDecodeReadsOlderVersions(t *testing.T) {
	ready := map[string]any{"version": 2, "pid": 5, "device": "cpu", "model": "echo"}
	for _, payload := range [][]byte{
		fields(t, 1, 0, nil, nil, "", ready, nil, nil),
		fields(t, 1, 0, nil, nil, "", ready),
	} {
		m, err := ipc.Decode(payload)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		assertSame(t, m, ipc.Message{Kind: ipc.KindReady, Ready: &ipc.Ready{Version: 2, PID: 5, Device: "cpu", Model: "echo"}})
	}
}

// TestResultPartsFitTheLimit: a result too large for one frame is cut into
// parts that each go through a Writer and a Reader of that limit, whose
// outputs, item errors, Expired list and Error together are the result's;
// an output too large for any frame becomes its item's error, naming the
// limit, and leaves the other items alone.
func TestResultPartsFitTheLimit(t *testing.T) {
	const limit = 1 << 10
	for _, tc := range []struct {
		name     string
		sizes    []int
		itemErrs bool
	}{
		{"outputs", []int{400, 400, 400, 400, 10, limit - 200}, false},
		{"outputs and item errors", []int{400, 0, 400, 400, 400}, true},
		{"one too large", []int{300, 2 * limit, 300, 300, 300}, false},
		{"each nearly the limit", []int{limit - 100, limit - 100, limit - 100}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &ipc.Message{Kind: ipc.KindResult, BatchID: 7, Expired: []int{0, len(tc.sizes) - 1}}
			for i, n := range tc.sizes {
				res.Items = append(res.Items, bytes.Repeat([]byte{byte('a' + i)}, n))
				if tc.itemErrs {
					res.ItemErrors = append(res.ItemErrors, strings.Repeat("e", i))
				}
			}
			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, limit)
			if err := w.Write(res); !errors.Is(err, ipc.ErrFrameTooLarge) {
				t.Fatalf("the whole result written with %v; want it too large", err)
			}
			parts := ipc.ResultParts(res, limit)
			for _, part := range parts {
				if err := w.Write(part); err != nil {
					t.Fatalf("write a part: %v", err)
				}
			}
			r := ipc.NewReader(&buf, limit)
			var joined ipc.Message
			for i := range parts {
				m, err := r.Read()
				if err != nil {
					t.Fatalf("read part %d: %v", i, err)
				}
				want := ipc.KindResultPart
				if i == len(parts)-1 {
					want = ipc.KindResult
				}
				for _, e := range m.Expired {
					joined.Expired = append(joined.Expired, len(joined.Items)+e)
				}
				if m.Kind != want || m.BatchID != res.BatchID {
					t.Fatalf("part %d is a %s of batch %d, want a %s of batch %d", i, m.Kind, m.BatchID, want, res.BatchID)
				}
				if m.ItemErrors == nil {
					m.ItemErrors = make([]string, len(m.Items))
				}
				joined.Items = append(joined.Items, m.Items...)
				joined.ItemErrors = append(joined.ItemErrors, m.ItemErrors...)
			}
			if len(parts) < 2 {
				t.Errorf("%d parts, want several", len(parts))
			}
			if len(joined.Items) != len(tc.sizes) || !slices.Equal(joined.Expired, res.Expired) {
				t.Fatalf("joined %d outputs, expired %v; want %d, expired %v", len(joined.Items), joined.Expired, len(tc.sizes), res.Expired)
			}
			for i, n := range tc.sizes {
				wantErr := ""
				if tc.itemErrs {
					wantErr = res.ItemErrors[i]
				}
				switch {
				case n > limit:
					if joined.Items[i] != nil || !strings.Contains(joined.ItemErrors[i], "1024") {
						t.Errorf("item %d of %d bytes: output of %d bytes, error %q; want none, and an error naming the limit", i, n, len(joined.Items[i]), joined.ItemErrors[i])
					}
				case !bytes.Equal(joined.Items[i], res.Items[i]) || joined.ItemErrors[i] != wantErr:
					t.Errorf("item %d: %d bytes, error %q; want its %d bytes and error %q", i, len(joined.Items[i]), joined.ItemErrors[i], n, wantErr)
				}
			}
			if tc.sizes[1] > limit && (res.Items[1] == nil || res.ItemErrors != nil) {
				t.Error("ResultParts changed the result it was given")
			}
		})
	}
}
