// Package heapfloor keeps a process's garbage collector from running on a
// heap of a few megabytes.
package heapfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// Size is the least heap Keep lets the collector run at.
//
// Go collects each time the heap doubles what the last collection found
// live, and at 4 MiB at least. The server's live heap at a moderate load is
// a megabyte or two, and each request allocates a few kilobytes (net/http's
// and grpc-go's headers and contexts, most of it): at 15k requests a second
// it collected 25 times a second over REST and 60 over gRPC, each time
// scanning every connection's goroutine, shrinking the stacks it grows
// back, and emptying the sync.Pools it fills again. A floor of 16 MiB (the
// runtime's own at GOGC=400) takes a fifth of the server's CPU a request
// off at 64 clients; a higher one took no more.
const Size = 16 << 20

// Keep holds the collector's heap goal at Size at least, for the life of
// the process, by setting GOGC after each collection from what it found
// live; from Size/2 live up the goal is twice the live heap, as Go's
// default. The memory it costs is at most Size, which idlemem.Release
// leaves held anyway. A GOGC set in the environment is left to rule.
func Keep() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tune := func() {
		metrics.Read(sample)
		debug.SetGCPercent(percent(sample[0].Value.Uint64()))
	}
	var arm func()
	arm = func() {
		// A cleanup runs once, after the collection that finds its
		// object unreachable: one on a fresh object is the next
		// collection's.
		runtime.AddCleanup(&cycle{}, func(struct{}) {
			tune()
			arm()
		}, struct{}{})
	}
	tune()
	arm()
}

// cycle is the object whose cleanup marks a collection. It holds a pointer
// so as not to share a tiny block of the allocator with others, which
// would put off its cleanup until they die too.
type cycle struct{ _ *byte }

// minHeap is the runtime's least heap goal at GOGC=100, which scales with
// GOGC.
const minHeap = 4 << 20

// percent is the GOGC that sets the heap goal, live×(1+GOGC/100), to Size
// for a live heap of live bytes, and never below 100: at most Size/minHeap
// times 100, where the runtime's own least goal reaches Size.
func percent(live uint64) int {
	most := 100 * Size / minHeap
	switch {
	case live >= Size/2:
		return 100
	case live == 0:
		return most
	}
	return min(most, int(100*Size/live)-100)
}
