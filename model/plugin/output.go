package plugin

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/streamer-dev/streamer/internal/lastwords"
)

// maxLine bounds how much of a line without an end is held before it is
// written anyway.
const maxLine = 64 << 10

// lineWriter writes what a plugin prints as whole lines, each with a prefix,
// so that lines from its several streams never interleave mid-line in the
// worker's stderr, where the supervisor reads them line by line.
type lineWriter struct {
	mu     *sync.Mutex // shared by the writers of one output
	out    io.Writer   // nil discards
	prefix string
	buf    []byte
	// dying, when not nil, keeps the first line that says why the
	// program dies (a Go panic's message, or a line a plugin in another
	// language writes the same way), for the crash's error.
	dying *atomic.Pointer[string]
	// tail, when not nil, keeps the last lines that are not blank, for
	// the error of a plugin that exits before its handshake (Python's
	// ModuleNotFoundError, a shell's "not found") or dies without last
	// words (a Python traceback).
	tail *outputTail
}

// Write buffers p and writes out every line it completes.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out == nil && w.dying == nil && w.tail == nil {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.writeLine(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= maxLine {
		w.writeLine(w.buf)
		w.buf = w.buf[:0]
	}
	if len(w.buf) == 0 {
		w.buf = nil // let a large buffer go
	}
	return len(p), nil
}

// Flush writes a last line that has no end yet.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.writeLine(w.buf)
	}
	w.buf = nil
}

func (w *lineWriter) writeLine(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if w.dying != nil && w.dying.Load() == nil && isLastWords(line) {
		text := capText(line)
		w.dying.CompareAndSwap(nil, &text)
	}
	if trimmed := bytes.TrimSpace(line); w.tail != nil && len(trimmed) > 0 {
		w.tail.add(trimmed)
	}
	if w.out == nil {
		return
	}
	out := make([]byte, 0, len(w.prefix)+len(line)+1)
	out = append(out, w.prefix...)
	out = append(out, line...)
	out = append(out, '\n')
	_, _ = w.out.Write(out)
}

// isLastWords reports whether line says why its program dies, as the
// first line of a Go panic or fatal error does, or a cgo abort's (see
// lastwords.Cause). Plugins in other languages may write such a line
// themselves (see package pluginpb).
func isLastWords(line []byte) bool { return lastwords.Cause(line) }

// tailLines and tailBytes bound the last lines of its output that a crash
// of a plugin without last words is reported with: a Python traceback's
// last frame and exception, and no more than a log line can bear.
const (
	tailLines = 3
	tailBytes = 512
)

// outputTail keeps the last lines of a plugin's output that are not
// blank, each cut to maxErrorText. It is fed every line of the plugin's
// life, so it copies into buffers it reuses rather than allocate.
type outputTail struct {
	mu    sync.Mutex
	lines [tailLines][]byte // a ring; next is the oldest once it is full
	sizes [tailLines]int    // each line's length before it was cut
	next  int
	count int
}

// add keeps line as the last, in place of the oldest kept.
func (t *outputTail) add(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sizes[t.next] = len(line)
	t.lines[t.next] = append(t.lines[t.next][:0], line[:cutIndex(line, maxErrorText)]...)
	t.next = (t.next + 1) % tailLines
	t.count = min(t.count+1, tailLines)
}

// last returns the last line, cut as a plugin's error text is, or false
// when there was none.
func (t *outputTail) last() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count == 0 {
		return "", false
	}
	i := (t.next + tailLines - 1) % tailLines
	if cut := t.sizes[i] - len(t.lines[i]); cut > 0 {
		return fmt.Sprintf("%s… (%d more bytes cut)", t.lines[i], cut), true
	}
	return string(t.lines[i]), true
}

// recent returns the last lines, the oldest first, joined by " | ": as
// many of the last tailLines as fit in tailBytes together, the last one
// cut to fit should it be longer alone.
func (t *outputTail) recent() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	const sep = " | "
	var kept []string
	size := 0
	for n := range t.count {
		i := (t.next + tailLines - 1 - n) % tailLines
		line := t.lines[i]
		if n == 0 && len(line) > tailBytes {
			kept = append(kept, string(line[:cutIndex(line, tailBytes)])+"…")
			break
		}
		if n > 0 {
			size += len(sep)
		}
		if size += len(line); size > tailBytes {
			break
		}
		kept = append(kept, string(line))
	}
	slices.Reverse(kept)
	return strings.Join(kept, sep)
}
