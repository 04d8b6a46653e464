package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedWriter is a reader of the log that stops reading: its Write blocks
// until open is closed.
type gatedWriter struct {
	entered chan struct{} // a Write began
	open    chan struct{}
	mu      sync.Mutex
	got     bytes.Buffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got.Write(p)
}

// A log whose reader stops reading costs lines, not the writers: each
// Write returns at once, lines past the bound are dropped and counted,
// and once the reader reads again it gets the lines kept, in order, then
// the notice of how many it missed.
func TestALogWhoseReaderStopsDropsLinesWithoutBlocking(t *testing.T) {
	g := &gatedWriter{entered: make(chan struct{}, 1), open: make(chan struct{})}
	l := newLogOutput(g)
	l.setNotice(func(dropped int) { fmt.Fprintf(l, "dropped %d\n", dropped) })
	if _, err := l.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	<-g.entered // the writer is stuck on it
	line := []byte(strings.Repeat("x", 1023) + "\n")
	const kept, dropped = logPendingMax / 1024, 10
	for range kept + dropped {
		if n, err := l.Write(line); n != len(line) || err != nil {
			t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(line))
		}
	}
	l.mu.Lock()
	total := l.total
	l.mu.Unlock()
	if total != dropped {
		t.Errorf("%d lines counted dropped; want %d", total, dropped)
	}
	close(g.open)
	l.flush(10 * time.Second)
	g.mu.Lock()
	defer g.mu.Unlock()
	want := "first\n" + strings.Repeat(string(line), kept) + fmt.Sprintf("dropped %d\n", dropped)
	if got := g.got.String(); got != want {
		t.Errorf("the reader got %d bytes, ending %q; want %d, ending %q", len(got), got[max(0, len(got)-40):], len(want), want[len(want)-40:])
	}
}

// flush gives up on a reader that does not read: the process's exit must
// not wait for it.
func TestFlushGivesUpOnAStuckReader(t *testing.T) {
	g := &gatedWriter{entered: make(chan struct{}, 1), open: make(chan struct{})}
	defer close(g.open)
	l := newLogOutput(g)
	if _, err := l.Write([]byte("stuck\n")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	done := make(chan struct{})
	go func() {
		l.flush(50 * time.Millisecond)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("flush waited on for a reader that reads nothing")
	}
}
