package bench

import (
	"strings"
	"testing"
)

func TestSleepBest(t *testing.T) {
	tests := []struct {
		workers, clients, perRequest int
		items, p50                   float64
	}{
		{1, 8, 1, 8 / 0.0108, 10.8},           // one batch of 8
		{2, 8, 1, 8 / 0.0104, 10.4},           // 4 on each
		{1, 64, 1, 64 / 0.0164, 16.4},         // one full batch
		{1, 512, 1, 64 / 0.0164, 0},           // beyond a batch per worker: the limit
		{4, 512, 1, 4 * 64 / 0.0164, 0},       // the limit of four
		{4, 200, 1, 200 / 0.0150, 15.0},       // ⌈200/4⌉ = 50 per worker
		{3, 7, 1, 7 / (0.010 + 0.0003), 10.3}, // ⌈7/3⌉ = 3 per worker
		{1, 2, 4, 8 / 0.0108, 10.8},           // two requests of 4: one batch of 8
		{2, 1, 4, 4 / 0.0102, 10.2},           // one request of 4 spread over two workers
		{1, 16, 4, 64 / 0.0164, 16.4},         // 64 items: one full batch
		{1, 32, 4, 64 / 0.0164, 0},            // 128 items: the limit
	}
	for _, tt := range tests {
		items, p50 := SleepBest("sleep:10ms,100us", tt.workers, 64, tt.clients, tt.perRequest)
		if diff := items/tt.items - 1; diff > 1e-9 || diff < -1e-9 || p50 != tt.p50 {
			t.Errorf("%d workers, %d clients of %d items: %.2f items/s p50 %.2f, want %.2f and %.2f",
				tt.workers, tt.clients, tt.perRequest, items, p50, tt.items, tt.p50)
		}
	}
	if items, _ := SleepBest("echo", 1, 64, 8, 1); items != 0 {
		t.Errorf("echo has no known cost, got %.0f", items)
	}
}

// A run as good as any could be, each client's request of k items answered
// a round after it was sent, rounds back to back, reaches at most the best,
// as a fraction 1, whatever k; and the best grows with k, the fixed cost of
// a batch being spread over more items.
func TestSleepBestCountsEveryItemOfARequest(t *testing.T) {
	const workers, clients = 2, 2
	cost := func(n int) float64 { return 0.010 + 0.0001*float64(n) } // sleep:10ms,100us
	last := 0.0
	for _, perRequest := range []int{1, 2, 4, 8} {
		best, _ := SleepBest("sleep:10ms,100us", workers, 64, clients, perRequest)
		// Each round, every client's request is answered at once, the
		// items spread evenly over the workers.
		perfect := float64(clients*perRequest) / cost(clients*perRequest/workers)
		if fraction := perfect / best; fraction > 1+1e-9 {
			t.Errorf("%d items a request: a perfect run of %.0f items/s is %.3f of the best %.0f; want at most 1", perRequest, perfect, fraction, best)
		}
		if best <= last {
			t.Errorf("%d items a request: best %.0f items/s, not above the %.0f of fewer", perRequest, best, last)
		}
		last = best
	}
}

func TestWithReturn(t *testing.T) {
	// 8 clients on 2 workers: rounds of 4, 10.4 ms each; the callers of a
	// round are back 0.5 + 3 × 0.1 ms after their answer.
	best, p50 := SleepBest("sleep:10ms,100us", 2, 64, 8, 1)
	r := SweepRow{Clients: 8, BestItemsPerS: best, BestP50MS: p50, Report: Report{BatchFigures: &BatchFigures{}}}
	r.Report.Returns.Share, r.Report.Returns.FirstMs, r.Report.Returns.GapMs = 1, 0.5, 0.1
	r.WithReturn(2)
	if diff := r.ReturnMS - 0.8; diff > 1e-9 || diff < -1e-9 {
		t.Errorf("return %.3f ms, want 0.8", r.ReturnMS)
	}
	if want := 8 / 0.0112; r.BestWithReturnItemsPerS/want-1 > 1e-9 || r.BestWithReturnItemsPerS/want-1 < -1e-9 {
		t.Errorf("best with return %.1f items/s, want %.1f", r.BestWithReturnItemsPerS, want)
	}
	// 8 clients of 2 items on 2 workers: rounds of 16 items, 8 on each,
	// 10.8 ms; the callers are as many as before, and as quick to return.
	best, p50 = SleepBest("sleep:10ms,100us", 2, 64, 8, 2)
	r = SweepRow{Clients: 8, ItemsPerRequest: 2, BestItemsPerS: best, BestP50MS: p50, Report: Report{BatchFigures: &BatchFigures{}}}
	r.Report.Returns.Share, r.Report.Returns.FirstMs, r.Report.Returns.GapMs = 1, 0.5, 0.1
	r.WithReturn(2)
	if want := 16 / 0.0116; r.BestWithReturnItemsPerS/want-1 > 1e-9 || r.BestWithReturnItemsPerS/want-1 < -1e-9 {
		t.Errorf("2 items a request: best with return %.1f items/s, want %.1f", r.BestWithReturnItemsPerS, want)
	}
	// Beyond a batch per worker the limit holds whatever the return.
	best, p50 = SleepBest("sleep:10ms,100us", 1, 64, 512, 1)
	r = SweepRow{Clients: 512, BestItemsPerS: best, BestP50MS: p50, Report: Report{BatchFigures: &BatchFigures{}}}
	r.Report.Returns.Share, r.Report.Returns.FirstMs = 1, 3
	if r.WithReturn(1); r.BestWithReturnItemsPerS != 0 {
		t.Errorf("at saturation: best with return %.1f, want none", r.BestWithReturnItemsPerS)
	}
	// Greedy batching measures no returns.
	best, p50 = SleepBest("sleep:10ms,100us", 1, 64, 8, 1)
	r = SweepRow{Clients: 8, BestItemsPerS: best, BestP50MS: p50, Report: Report{BatchFigures: &BatchFigures{}}}
	if r.WithReturn(1); r.BestWithReturnItemsPerS != 0 || r.ReturnMS != 0 {
		t.Errorf("nothing measured: return %.2f ms, best with return %.1f, want none", r.ReturnMS, r.BestWithReturnItemsPerS)
	}
	// Nor does a server whose stats could not be read.
	r = SweepRow{Clients: 8, BestItemsPerS: best, BestP50MS: p50}
	if r.WithReturn(1); r.BestWithReturnItemsPerS != 0 || r.ReturnMS != 0 {
		t.Errorf("no batch figures: return %.2f ms, best with return %.1f, want none", r.ReturnMS, r.BestWithReturnItemsPerS)
	}
}

// A row without batch figures shows dashes rather than zeros, and a row
// whose requests failed shows how many, and of which kinds, below.
func TestPrintSweep(t *testing.T) {
	rows := []SweepRow{
		{Batching: "greedy", Clients: 4, Report: Report{ItemsPerS: 100, BatchFigures: &BatchFigures{MeanBatchSize: 3.5}}},
		{Batching: "adaptive", Clients: 8, Report: Report{BatchesUnavailable: "gone", Errors: map[string]uint64{"connection": 7}, FirstErrors: map[string]string{"connection": "refused"}}},
	}
	var out strings.Builder
	PrintSweep(&out, 1, rows)
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 5 || !strings.HasSuffix(lines[0], "errors") {
		t.Fatalf("table:\n%s\nwant a header ending in errors, two rows and the errors below", out.String())
	}
	first, second := strings.Fields(lines[1]), strings.Fields(lines[2])
	if first[6] != "3.5" || first[len(first)-1] != "0" {
		t.Errorf("row %q: want mean batch 3.5 and no errors", lines[1])
	}
	if second[6] != "—" || second[11] != "—" || second[len(second)-1] != "7" {
		t.Errorf("row %q: want no batch figures shown as dashes, and 7 errors", lines[2])
	}
	if !strings.Contains(out.String(), "errors of 8 clients, adaptive:\n  connection") || !strings.Contains(out.String(), "first: refused") {
		t.Errorf("table:\n%s\nwant the failed row's errors listed by kind", out.String())
	}
}
