package heapfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

// The goal live×(1+GOGC/100) is Size for a small live heap, within the
// runtime's own least goal, and twice the live heap from Size/2 up.
func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400}, {1 << 20, 400}, {4 << 20, 300}, {Size / 2, 100}, {Size, 100}, {1 << 30, 100},
	} {
		if got := percent(c.live); got != c.want {
			t.Errorf("percent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}

// After a collection that finds a large heap live, GOGC is back to 100.
func TestKeepFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// The live heap Keep reads is the last collection's: let it be this
	// test's, not one that found an earlier run's 64 MiB still live.
	runtime.GC()
	Keep()
	if got := gogc(); got != 400 {
		t.Fatalf("GOGC %d with a small heap, want 400", got)
	}
	big := make([]*[1 << 20]byte, 64)
	for i := range big {
		big[i] = new([1 << 20]byte)
	}
	for range 50 {
		runtime.GC()
		if gogc() == 100 {
			runtime.KeepAlive(big)
			return
		}
	}
	t.Fatal("GOGC not back to 100 with 64 MiB live")
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
