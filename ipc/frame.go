package ipc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// keepEncodeBuffer is the largest encode buffer a Writer keeps between
// messages; after one large batch it starts afresh instead of pinning it.
const keepEncodeBuffer = 4 << 20

// keepIdleBuffer is the largest encode buffer a Writer keeps once idle
// (see Writer.trimIdle): as much as a Reader's own read buffer, so that a
// worker costs the supervisor no more at rest for having run large batches.
const keepIdleBuffer = 64 << 10

// idleAfter is how long a Writer keeps a buffer over keepIdleBuffer after
// the last frame that used it. It is shorter than idlemem.CheckEvery: the
// collection that gives a burst's memory back comes a whole check interval
// after the last answer at the soonest, and by then the buffer it should
// free is garbage.
const idleAfter = time.Second

// readAhead is the most a Reader allocates for a frame beyond the bytes that
// have arrived: a large frame's buffer grows as its bytes come in, so a
// corrupt length under the limit costs memory only for data that exists.
const readAhead = 1 << 20

// FrameLimit returns the limit a Reader or Writer made with maxFrame
// uses: the default for zero or less, and never more than the length
// prefix can express.
func FrameLimit(maxFrame int) int {
	if maxFrame <= 0 {
		return DefaultMaxFrame
	}
	return min(maxFrame, math.MaxUint32)
}

// Writer writes messages as frames. It is safe for concurrent use: each
// message goes out whole. It keeps the buffer it encodes in from frame to
// frame, and gives a large one up a second after the last frame that
// needed it, so that a process at rest does not hold its largest batch.
type Writer struct {
	mu       sync.Mutex
	w        io.Writer
	enc      *encoder
	maxFrame int

	// usedAt is when a frame last used the encode buffer while it was
	// over keepIdleBuffer (see trimBuffer); idle, made at the first such
	// frame, runs trimIdle, and idleArmed says whether it is due to.
	usedAt    time.Time
	idle      *time.Timer
	idleArmed bool
}

// NewWriter returns a Writer on w that refuses to send frames over maxFrame
// bytes (DefaultMaxFrame when maxFrame <= 0).
func NewWriter(w io.Writer, maxFrame int) *Writer {
	return &Writer{w: w, enc: newEncoder(), maxFrame: FrameLimit(maxFrame)}
}

// Write encodes m and writes it as one frame. A message too large for the
// limit is not written and yields an error wrapping ErrFrameTooLarge.
func (w *Writer) Write(m *Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if size := contentSize(m); size > w.maxFrame {
		// Refuse before encoding: no point copying a huge batch to throw it away.
		return fmt.Errorf("%w: %s message of over %d bytes, limit %d", ErrFrameTooLarge, m.Kind, size, w.maxFrame)
	}
	defer w.trimBuffer()
	if err := w.enc.encode(m); err != nil {
		return fmt.Errorf("ipc: encode %s: %w", m.Kind, err)
	}
	b := w.enc.buf.Bytes()
	if len(b)-frameHeader > w.maxFrame {
		return fmt.Errorf("%w: %s message of %d bytes, limit %d", ErrFrameTooLarge, m.Kind, len(b)-frameHeader, w.maxFrame)
	}
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("ipc: write %s: %w", m.Kind, err)
	}
	return nil
}

// trimBuffer starts afresh after a frame too large to keep the buffer of,
// and otherwise sees to it that a buffer over keepIdleBuffer is given up
// once no frame has used it for idleAfter. A frame uses the buffer when it
// fills more than a quarter of it: the buffer grows by doubling, so frames
// of a steady size fill half of it or more and keep it, while the
// heartbeats and small answers that follow a burst of large batches do
// not. It requires that w.mu is locked.
//
// The Writer times this itself, as its callers cannot tell idle from busy
// any better: the supervisor's queue of batches for a worker is empty
// after most writes even under steady load (each batch is sent the moment
// it is formed), so that giving the buffer up there would allocate it
// afresh for each frame; and the idle memory release
// (idlemem.Release) neither reaches each Writer nor sees these buffers as
// waste, since they are live.
func (w *Writer) trimBuffer() {
	size := w.enc.buf.Cap()
	if size > keepEncodeBuffer {
		w.enc = newEncoder()
		return
	}
	if size <= keepIdleBuffer {
		return
	}
	if 4*w.enc.buf.Len() > size {
		w.usedAt = time.Now()
	}
	if !w.idleArmed {
		w.armIdle(idleAfter)
	}
}

// armIdle has trimIdle run after d. It requires that w.mu is locked.
func (w *Writer) armIdle(d time.Duration) {
	w.idleArmed = true
	if w.idle == nil {
		w.idle = time.AfterFunc(d, w.trimIdle)
		return
	}
	w.idle.Reset(d)
}

// trimIdle gives up an encode buffer over keepIdleBuffer that no frame has
// used for idleAfter, and otherwise looks again when that will be so.
// While frames keep using it, this runs once every idleAfter, not once a
// frame, and allocates nothing.
func (w *Writer) trimIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idleArmed = false
	if w.enc.buf.Cap() <= keepIdleBuffer {
		return
	}
	if unused := time.Since(w.usedAt); unused < idleAfter {
		w.armIdle(idleAfter - unused)
		return
	}
	w.enc = newEncoder()
}

// contentSize is a lower bound of m's encoded size: the bytes of its items
// and texts without their msgpack headers.
func contentSize(m *Message) int {
	n := len(m.Error)
	for _, it := range m.Items {
		n += len(it)
	}
	for _, s := range m.ItemErrors {
		n += len(s)
	}
	return n + len(m.TTLs) + len(m.Expired)
}

// Reader reads frames written by a Writer. It is not safe for concurrent use.
type Reader struct {
	r        *bufio.Reader
	dec      *decoder
	maxFrame int
	header   [frameHeader]byte
}

// NewReader returns a Reader on r that rejects frames over maxFrame bytes
// (DefaultMaxFrame when maxFrame <= 0).
func NewReader(r io.Reader, maxFrame int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), dec: newDecoder(), maxFrame: FrameLimit(maxFrame)}
}

// Read returns the next message. At a clean end of stream it returns io.EOF; a
// stream that ends inside a frame gives io.ErrUnexpectedEOF. An oversized
// frame gives ErrFrameTooLarge before anything is allocated for it, and a
// malformed one ErrCorruptFrame; after either, the stream is out of step and
// the caller should close it. The returned Items are owned by the caller.
func (r *Reader) Read() (Message, error) {
	if _, err := io.ReadFull(r.r, r.header[:]); err != nil {
		return Message{}, err
	}
	n := binary.BigEndian.Uint32(r.header[:])
	if int64(n) > int64(r.maxFrame) {
		return Message{}, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, n, r.maxFrame)
	}
	payload, err := readPayload(r.r, int(n))
	if err != nil {
		return Message{}, err
	}
	return r.dec.decode(payload)
}

// readPayload reads n bytes into a new buffer, growing it as the bytes
// arrive once past readAhead. A stream that ends early gives
// io.ErrUnexpectedEOF.
func readPayload(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readAhead))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(len(buf), n-len(buf)))
		}
		got, err := io.ReadFull(r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+got]
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}
