// Package syncbuf is a byte buffer that goroutines may write and read at
// once: a process's or a logger's output, read by a test while it runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it. Its zero value is empty and ready
// to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
