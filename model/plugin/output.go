package plugin

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
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
	// dying, when not nil, keeps the first line that says why a Go
	// program dies (its panic's message), for the crash's error.
	dying *atomic.Pointer[string]
	// last, when not nil, keeps the last line that is not blank, for the
	// error of a plugin that exits before its handshake (Python's
	// ModuleNotFoundError, a shell's "not found").
	last *atomic.Pointer[string]
}

// Write buffers p and writes out every line it completes.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out == nil && w.dying == nil && w.last == nil {
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

// stopLast stops keeping the last line, once the plugin serves: it was
// for an error of its start.
func (w *lineWriter) stopLast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = nil
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
	if w.dying != nil && w.dying.Load() == nil && (bytes.HasPrefix(line, []byte("panic: ")) || bytes.HasPrefix(line, []byte("fatal error: "))) {
		text := capText(line)
		w.dying.CompareAndSwap(nil, &text)
	}
	if trimmed := bytes.TrimSpace(line); w.last != nil && len(trimmed) > 0 {
		text := capText(trimmed) // cut before it is copied
		w.last.Store(&text)
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
