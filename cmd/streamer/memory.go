package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// idleCheckEvery is how often the server looks for memory to give back.
const idleCheckEvery = 2 * time.Second

// releaseSlack is how much the heap may hold beyond twice its live size
// before an idle server gives the rest back.
const releaseSlack = 32 << 20

// releaseMemoryWhenIdle gives memory back to the system once a burst is
// over. Go collects garbage only as the heap grows, so after a burst of
// large requests an idle server would hold the burst's garbage until the
// runtime's periodic collection minutes later. When nothing was queued,
// running or answered for a whole check interval and the heap holds far
// more than it uses, it collects and returns the free memory at once.
func releaseMemoryWhenIdle(ctx context.Context, st statser, log *slog.Logger) {
	tick := time.NewTicker(idleCheckEvery)
	defer tick.Stop()
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	read := func() (live, held uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64() + samples[2].Value.Uint64()
	}
	var lastAnswered uint64
	collected := false // since the server was last busy
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		stats := st.Stats()
		idle := quiet(stats, lastAnswered)
		lastAnswered = stats.Answered
		if !idle {
			collected = false
			continue
		}
		live, held := read()
		if held > live+releaseSlack && held <= 2*live+releaseSlack && !collected {
			// The live size is the last collection's, which may have run
			// at the burst's peak, with every request live; with nothing
			// allocated since, no other would run for minutes. Once per
			// idle spell, collect to learn what is live now.
			runtime.GC()
			collected = true
			live, held = read()
		}
		if held <= 2*live+releaseSlack {
			continue
		}
		debug.FreeOSMemory()
		collected = true
		log.Info("idle after a burst: returned memory to the system", "heap_held_mib", held>>20, "heap_live_mib", live>>20)
	}
}

// parseBytes reads a size such as 512MiB, 2GiB, 1.5G or 1000000.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		factor float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	text := strings.TrimSpace(s)
	factor := 1.0
	for _, u := range units {
		if strings.HasSuffix(text, u.suffix) {
			text, factor = strings.TrimSpace(strings.TrimSuffix(text, u.suffix)), u.factor
			break
		}
	}
	n, err := strconv.ParseFloat(text, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size: want a number of bytes with an optional unit (KiB, MiB, GiB, TiB)", s)
	}
	return int64(n * factor), nil
}

// statser is what the memory watch reads the server's work from.
type statser interface{ Stats() supervisor.Stats }

// quiet says whether stats show no work since the last look, which saw
// lastAnswered answered: nothing queued, running or answered meanwhile.
func quiet(stats supervisor.Stats, lastAnswered uint64) bool {
	return stats.Queued == 0 && stats.Answered == stats.Submitted && stats.Answered == lastAnswered
}

// nodeWork is a node's work, for the memory watch: its own HTTP callers'
// (callers, the backend's counts), and the items its workers run
// (workers), most of them other front ends', which the backend does not
// count: a node busy with those is not idle.
type nodeWork struct{ callers, workers statser }

// Stats are the counts quiet reads, of both.
func (w nodeWork) Stats() supervisor.Stats {
	c, k := w.callers.Stats(), w.workers.Stats()
	return supervisor.Stats{Queued: k.Queued, Submitted: c.Submitted + k.Submitted, Answered: c.Answered + k.Answered}
}
