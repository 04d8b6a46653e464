package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/streamer-dev/streamer/internal/idlemem"
	"github.com/streamer-dev/streamer/supervisor"
)

// serverProgress is the server's work as the memory watch (see
// idlemem.Release) reads it: the items answered, and whether any is queued
// or running.
func serverProgress(st statser) idlemem.Progress {
	return func() (uint64, bool) {
		stats := st.Stats()
		return stats.Answered, stats.Queued != 0 || stats.Answered != stats.Submitted
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
	if err != nil || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("%q is not a size: want a number of bytes with an optional unit: KiB, MiB, GiB, TiB (powers of 1024, as are K, M, G, T), KB, MB, GB, TB (of 1000) or B", s)
	}
	if n*factor >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is more bytes than any machine has", s)
	}
	return int64(n * factor), nil
}

// minMemoryLimit is the least --memory-limit: below it, the collector
// would run without rest on a server's own few megabytes, where 0 reads
// as "no limit" to many.
const minMemoryLimit = 16 << 20

// memoryLimitBytes reads --memory-limit; 0 when it is unset.
func (o serveOptions) memoryLimitBytes() (int64, error) {
	if o.memoryLimit == "" {
		return 0, nil
	}
	limit, err := parseBytes(o.memoryLimit)
	switch {
	case err != nil:
		return 0, fmt.Errorf("--memory-limit %s", err)
	case limit < minMemoryLimit:
		return 0, fmt.Errorf("--memory-limit %q: want at least 16MiB (leave it unset for no limit)", o.memoryLimit)
	}
	return limit, nil
}

// statser is what the memory watch reads the server's work from.
type statser interface{ Stats() supervisor.Stats }

// nodeWork is a node's work, for the memory watch: its own HTTP callers'
// (callers, the backend's counts), and the items its workers run
// (workers), most of them other front ends', which the backend does not
// count: a node busy with those is not idle.
type nodeWork struct{ callers, workers statser }

// Stats are the counts serverProgress reads, of both.
func (w nodeWork) Stats() supervisor.Stats {
	c, k := w.callers.Stats(), w.workers.Stats()
	return supervisor.Stats{Queued: k.Queued, Submitted: c.Submitted + k.Submitted, Answered: c.Answered + k.Answered}
}
