package bench

import (
	"strings"
	"testing"
)

func TestSleepBest(t *testing.T) {
	tests := []struct {
		workers, clients int
		items, p50       float64
	}{
		{1, 8, 8 / 0.0108, 10.8},           // one batch of 8
		{2, 8, 8 / 0.0104, 10.4},           // 4 on each
		{1, 64, 64 / 0.0164, 16.4},         // one full batch
		{1, 512, 64 / 0.0164, 0},           // beyond a batch per worker: the limit
		{4, 512, 4 * 64 / 0.0164, 0},       // the limit of four
		{4, 200, 200 / 0.0150, 15.0},       // ⌈200/4⌉ = 50 per worker
		{3, 7, 7 / (0.010 + 0.0003), 10.3}, // ⌈7/3⌉ = 3 per worker
	}
	for _, tt := range tests {
		items, p50 := SleepBest("sleep:10ms,100us", tt.workers, 64, tt.clients)
		if diff := items/tt.items - 1; diff > 1e-9 || diff < -1e-9 || p50 != tt.p50 {
			t.Errorf("%d workers, %d clients: %.2f items/s p50 %.2f, want %.2f and %.2f", tt.workers, tt.clients, items, p50, tt.items, tt.p50)
		}
	}
	if items, _ := SleepBest("echo", 1, 64, 8); items != 0 {
		t.Errorf("echo has no known cost, got %.0f", items)
	}
}

func TestWithReturn(t *testing.T) {
	// 8 clients on 2 workers: rounds of 4, 10.4 ms each; the callers of a
	// round are back 0.5 + 3 × 0.1 ms after their answer.
	best, p50 := SleepBest("sleep:10ms,100us", 2, 64, 8)
	r := SweepRow{Clients: 8, BestItemsPerS: best, BestP50MS: p50, Report: Report{BatchFigures: &BatchFigures{}}}
	r.Report.Returns.Share, r.Report.Returns.FirstMs, r.Report.Returns.GapMs = 1, 0.5, 0.1
	r.WithReturn(2)
	if diff := r.ReturnMS - 0.8; diff > 1e-9 || diff < -1e-9 {
		t.Errorf("return %.3f ms, want 0.8", r.ReturnMS)
	}
	if want := 8 / 0.0112; r.BestWithReturnItemsPerS/want-1 > 1e-9 || r.BestWithReturnItemsPerS/want-1 < -1e-9 {
		t.Errorf("best with return %.1f items/s, want %.1f", r.BestWithReturnItemsPerS, want)
	}
	// Beyond a batch per worker the limit holds whatever the return.
	best, p50 = SleepBest("sleep:10ms,100us", 1, 64, 512)
	r = SweepRow{Clients: 512, BestItemsPerS: best, BestP50MS: p50, Report: Report{BatchFigures: &BatchFigures{}}}
	r.Report.Returns.Share, r.Report.Returns.FirstMs = 1, 3
	if r.WithReturn(1); r.BestWithReturnItemsPerS != 0 {
		t.Errorf("at saturation: best with return %.1f, want none", r.BestWithReturnItemsPerS)
	}
	// Greedy batching measures no returns.
	best, p50 = SleepBest("sleep:10ms,100us", 1, 64, 8)
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
