package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestClientThatDisconnectsCancelsItsQueuedItems: while the one worker is
// busy (and, with --pipeline-depth 1, holds no batch ahead), a client gives
// up on a queued request. Its item must never reach the model: once the
// worker is free, only the first batch has run, and the dropped item is
// counted as failed.
func TestClientThatDisconnectsCancelsItsQueuedItems(t *testing.T) {
	// The first request runs long enough that the second is given up
	// while it runs, however slow the machine.
	s := startServer(t, "--model", "sleep:2s,0s", "--workers", "1", "--batch-size", "1", "--pipeline-depth", "1")
	busy := make(chan int, 1)
	go func() {
		status, _, _, _ := s.do(context.Background(), http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["first"]}`))
		busy <- status
	}()
	s.waitFor(t, "the first request running", 10*time.Second, func() bool { return s.stats(t).Submitted == 1 })

	// The client gives up once its item is queued behind the first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gone := make(chan error, 1)
	go func() {
		_, _, _, err := s.do(ctx, http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["gone"]}`))
		gone <- err
	}()
	s.waitFor(t, "the second request queued", 10*time.Second, func() bool { return s.stats(t).Submitted == 2 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client should have given up, got %v", err)
	}
	if status := <-busy; status != http.StatusOK {
		t.Fatalf("first request: status %d", status)
	}
	s.waitFor(t, "the dropped item answered", 10*time.Second, func() bool { return s.stats(t).Answered == 2 })
	st := s.stats(t)
	if st.Batches != 1 || st.Failed != 1 {
		t.Fatalf("stats %+v: want 1 batch run and the canceled item failed without running", st)
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Fatalf("the server must keep serving: %s", p)
	}
}
