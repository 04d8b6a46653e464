package supervisor

import (
	"strconv"
	"testing"
	"time"
)

func TestLatencyBucket(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Millisecond, 0},
		{0, 0},
		{99 * time.Microsecond, 0},
		{100 * time.Microsecond, 1},
		{199 * time.Microsecond, 1},
		{200 * time.Microsecond, 2},
		{399 * time.Microsecond, 2},
		{400 * time.Microsecond, 3},
		{50 * time.Second, latencyBuckets - 1},
		{time.Hour, latencyBuckets},
	} {
		if got := latencyBucket(int64(tc.d)); got != tc.want {
			t.Errorf("latencyBucket(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// Every duration falls below its bucket's bound and not below the one before.
func TestLatencyBucketBounds(t *testing.T) {
	var h latencyHistogram
	bounds := h.snapshot().BoundsSeconds
	for d := time.Duration(1); d < 100*time.Second; d = d*3/2 + 1 {
		i := latencyBucket(int64(d))
		if i < len(bounds) && d.Seconds() >= bounds[i] {
			t.Errorf("%s in bucket %d, whose bound is %gs", d, i, bounds[i])
		}
		if i > 0 && d.Seconds() < bounds[i-1] {
			t.Errorf("%s in bucket %d, below the bound before, %gs", d, i, bounds[i-1])
		}
	}
}

// The bounds read as the decimals they are (1.6384, not 1.6383999999999999),
// since Prometheus's le labels print them.
func TestLatencyBoundsAreShortDecimals(t *testing.T) {
	var h latencyHistogram
	bounds := h.snapshot().BoundsSeconds
	for i, b := range bounds {
		if text := strconv.FormatFloat(b, 'g', -1, 64); len(text) > 10 {
			t.Errorf("bound %d reads %s", i, text)
		}
	}
	if got := strconv.FormatFloat(bounds[14], 'g', -1, 64); got != "1.6384" {
		t.Errorf("bound 14 reads %s; want 1.6384", got)
	}
}
