package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

func TestLatencyHistograms(t *testing.T) {
	const compute = 20 * time.Millisecond
	fn := func(_ context.Context, in [][]byte) ([][]byte, error) {
		time.Sleep(compute) // the model's cost, not a wait for a state
		return in, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), BatchSize: 8})
	for range 3 {
		if _, err := s.Predict(context.Background(), items("a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	lat := st.Latency
	for name, h := range map[string]supervisor.Histogram{"queue wait": lat.QueueWait, "compute": lat.Compute, "end to end": lat.EndToEnd} {
		if got := h.Count(); got != 6 {
			t.Errorf("%s counts %d items, want 6", name, got)
		}
		if len(h.Counts) != len(h.BoundsSeconds)+1 {
			t.Errorf("%s has %d counts for %d bounds", name, len(h.Counts), len(h.BoundsSeconds))
		}
	}
	if min := 6 * compute.Seconds(); lat.Compute.SumSeconds < min {
		t.Errorf("compute sums %gs, want at least %gs", lat.Compute.SumSeconds, min)
	}
	if lat.EndToEnd.SumSeconds < lat.Compute.SumSeconds+lat.QueueWait.SumSeconds-1e-6 {
		t.Errorf("end to end %gs is less than queue wait %gs + compute %gs",
			lat.EndToEnd.SumSeconds, lat.QueueWait.SumSeconds, lat.Compute.SumSeconds)
	}
	for i, bound := range lat.Compute.BoundsSeconds {
		if bound <= compute.Seconds() && lat.Compute.Counts[i] != 0 {
			t.Errorf("%d items in the compute bucket below %gs, faster than the model", lat.Compute.Counts[i], bound)
		}
	}
	slots := s.Slots()
	if len(slots) != 1 || slots[0].Batches != st.Batches || st.Batches == 0 {
		t.Errorf("slots %+v: want one that served the %d batches", slots, st.Batches)
	}
	if slots[0].InitSeconds <= 0 || slots[0].Crashes != 0 {
		t.Errorf("slot %+v: want an init time and no crashes", slots[0])
	}
}
