package main

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAStuckLogReaderDoesNotStopTheServer: the server's stderr is a pipe
// that nobody reads, full, as behind a log shipper that is stuck. The
// server goes on answering, its workers' output goes on being relayed
// (dropped past the bound), and SIGTERM drains it and it exits 0. Before,
// the first log line that found the pipe full blocked its goroutine: the
// relay of the workers' output first, then the dispatcher, which logged
// with the queue's lock held, and every request hung, SIGTERM's drain too,
// while /healthz still answered 200.
func TestAStuckLogReaderDoesNotStopTheServer(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The smallest pipe the kernel makes (a page), full in a few lines.
	size, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s := newServerTo(t, freePort(t), []string{"--model", "chaos:stdout", "--workers", "2", "--max-latency", "1ms"}, w)
	_ = w.Close() // the server's copy is the only one
	s.waitReady(t)
	predict := func() {
		t.Helper()
		if status, body, _ := s.post(t, "application/json", []byte(`{"inputs":["a","b"]}`)); status != http.StatusOK {
			t.Fatalf("POST /predict: %d %s", status, body)
		}
	}
	// Each batch prints a line on the worker's stdout, which the server
	// logs.
	s.waitFor(t, "the log's pipe to be full", readyTimeout, func() bool {
		predict()
		waiting, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			t.Fatal(err)
		}
		// Full but for a line: a write to a pipe goes in whole or waits.
		return waiting > size-512
	})
	for range 100 {
		predict()
	}
	if status, body, err := s.get("/readyz"); err != nil || status != http.StatusOK {
		t.Errorf("GET /readyz with the log's pipe full: %d %s %v", status, body, err)
	}
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := s.wait(15 * time.Second); err != nil || code != 0 {
		t.Fatalf("after SIGTERM with the log's pipe full: exit %d %v, want 0", code, err)
	}
}

// TestAStartFailureExitsThoughItsLogReaderIsStuck: a server that cannot
// start exits 1 within a few seconds though its stderr is a full pipe that
// nobody reads, in either log format: its last lines are given 2 s. Before,
// the text format's error line was written straight to stderr and blocked
// the exit for good.
func TestAStartFailureExitsThoughItsLogReaderIsStuck(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		size, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		s := newServerTo(t, freePort(t), []string{"--log-format", format, "--model", filepath.Join(t.TempDir(), "missing.onnx")}, w)
		_ = w.Close()
		if code, err := s.wait(15 * time.Second); err != nil || code != 1 {
			t.Errorf("--log-format %s, a model that is missing, stderr full: exit %d %v; want 1", format, code, err)
		}
		_ = r.Close()
	}
}
