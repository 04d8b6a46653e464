package ipc

import (
	"bytes"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/internal/idlemem"
)

// largeBatch is a batch of 1 MiB, whose frame grows a Writer's buffer far
// past keepIdleBuffer and stays under keepEncodeBuffer.
func largeBatch() *Message {
	items := make([][]byte, 16)
	for i := range items {
		items[i] = bytes.Repeat([]byte{'a'}, 64<<10)
	}
	return &Message{Kind: KindBatch, BatchID: 1, Items: items}
}

// encodeBuffer is w's encoder, the first byte of its buffer (nil for
// none), which change when the buffer is given up or grown afresh, and the
// buffer's size.
func encodeBuffer(w *Writer) (*encoder, *byte, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first *byte
	if b := w.enc.buf.Bytes(); cap(b) > 0 {
		first = &b[:1][0]
	}
	return w.enc, first, w.enc.buf.Cap()
}

func write(t *testing.T, w *Writer, m *Message) {
	t.Helper()
	if err := w.Write(m); err != nil {
		t.Fatal(err)
	}
}

// A Writer keeps its large buffer while large frames keep coming, however
// long, and gives it up once they stop, even as small frames (a worker's
// heartbeats) go on.
func TestWriterGivesUpLargeBufferWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := NewWriter(io.Discard, 0)
		large, heartbeat := largeBatch(), &Message{Kind: KindHeartbeat}
		write(t, w, large)
		enc, first, size := encodeBuffer(w)
		if size <= keepIdleBuffer {
			t.Fatalf("a frame of 1 MiB left a buffer of %d bytes; want over %d", size, keepIdleBuffer)
		}
		for i := range 10 {
			time.Sleep(idleAfter / 2)
			write(t, w, large)
			write(t, w, heartbeat)
			synctest.Wait()
			if e, f, _ := encodeBuffer(w); e != enc || f != first {
				t.Fatalf("after %s of large frames every %s, the buffer was made afresh; want it kept while they come", time.Duration(i+1)*idleAfter/2, idleAfter/2)
			}
		}
		for range 3 {
			time.Sleep(idleAfter / 4)
			write(t, w, heartbeat)
		}
		synctest.Wait()
		if e, f, _ := encodeBuffer(w); e != enc || f != first {
			t.Fatalf("%s after the last large frame, the buffer was given up; want it kept for %s", 3*idleAfter/4, idleAfter)
		}
		time.Sleep(idleAfter / 4)
		synctest.Wait()
		if _, _, size := encodeBuffer(w); size > keepIdleBuffer {
			t.Fatalf("%s after the last large frame, with heartbeats since, the Writer holds %d bytes; want at most %d", idleAfter, size, keepIdleBuffer)
		}
		write(t, w, large)
		if _, _, size := encodeBuffer(w); size <= keepIdleBuffer {
			t.Fatalf("a frame of 1 MiB after the buffer was given up left one of %d bytes", size)
		}
		time.Sleep(idleAfter)
		synctest.Wait()
		if _, _, size := encodeBuffer(w); size > keepIdleBuffer {
			t.Fatalf("%s after a second burst, the Writer holds %d bytes; want at most %d", idleAfter, size, keepIdleBuffer)
		}
	})
}

// The buffer a burst leaves is garbage before the idle memory release
// collects after it, so that collection frees it: see idleAfter.
func TestWriterIdlesBeforeMemoryRelease(t *testing.T) {
	if idleAfter >= idlemem.CheckEvery {
		t.Fatalf("a Writer gives its buffer up after %s idle; want less than idlemem.CheckEvery (%s)", idleAfter, idlemem.CheckEvery)
	}
}

// Under steady load the Writer writes large frames with no allocation.
func TestWriterUnderLoadAllocatesNothing(t *testing.T) {
	w := NewWriter(io.Discard, 0)
	large := largeBatch()
	if allocs := testing.AllocsPerRun(100, func() {
		if err := w.Write(large); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("%.1f allocations per frame of 1 MiB; want none", allocs)
	}
}
