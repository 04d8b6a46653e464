package main

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestExpiredBatchFormedAheadNeverRuns: against a busy worker, a full batch
// of items with a short deadline is formed and sent ahead; every caller gets
// 504 at its deadline, and the worker, finding them expired when the batch
// reaches the model, does not run them: they are counted expired, and only
// the first batch reached the model.
func TestExpiredBatchFormedAheadNeverRuns(t *testing.T) {
	const batch = 64
	// The first batch runs long enough that all the late requests come
	// while it runs, however slow the machine.
	s := startServer(t, "--model", "sleep:2s,0s", "--workers", "1", "--batch-size", "64", "--pipeline-depth", "2")
	busy := make(chan int, 1)
	go func() {
		status, _, _, _ := s.do(context.Background(), http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["first"]}`))
		busy <- status
	}()
	s.waitFor(t, "the first batch running", readyTimeout, func() bool { return s.stats(t).Submitted == 1 })
	var wg sync.WaitGroup
	statuses := make(chan int, batch)
	for range batch {
		wg.Go(func() {
			status, _, _, err := s.do(context.Background(), http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["late"], "timeout_ms": 100}`))
			if err != nil {
				t.Error(err)
			}
			statuses <- status
		})
	}
	wg.Wait()
	close(statuses)
	for status := range statuses {
		if status != http.StatusGatewayTimeout {
			t.Fatalf("a request with timeout_ms 100 behind a 2s batch: status %d, want 504", status)
		}
	}
	if status := <-busy; status != http.StatusOK {
		t.Fatalf("first request: %d", status)
	}
	s.waitFor(t, "every item answered", 10*time.Second, func() bool { return s.stats(t).Answered == 1+batch })
	st := s.stats(t)
	if st.Expired != batch || st.Batches != 1 || st.BatchSizes[batch] != 0 {
		t.Fatalf("stats %+v: want %d expired and only the first batch run", st, batch)
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Fatalf("the server keeps serving: %s", p)
	}
}
