// Package idlemem gives a process's memory back to the system once a burst
// of work is over, for the server, its workers and their plugins alike.
package idlemem

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// CheckEvery is how often Release looks for memory to give back.
const CheckEvery = 2 * time.Second

// releaseSlack is how much the heap may hold beyond twice its live size
// before an idle process gives the rest back.
const releaseSlack = 32 << 20

// maxRecheck bounds, in checks, the wait between the collections of an
// idle process whose last one found much live (see Release): about a
// minute.
const maxRecheck = 32

// Progress says what work a process has done: done counts the pieces of
// work finished so far (items answered, batches run), and busy whether any
// is under way or waiting now.
type Progress func() (done uint64, busy bool)

// Release gives memory back to the system once a burst is over, until ctx
// ends. Go collects garbage only as the heap grows, so after a burst of
// large requests or batches an idle process would hold the burst's garbage
// until the runtime's periodic collection minutes later. When progress
// shows nothing under way and nothing done for a whole check interval, and
// the heap holds far more than it uses, Release collects and returns the
// free memory at once. log, when not nil, gets a line each time.
func Release(ctx context.Context, progress Progress, log *slog.Logger) {
	release(ctx, progress, log, CheckEvery)
}

func release(ctx context.Context, progress Progress, log *slog.Logger, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	read := func() (live, held, allocs uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64() + samples[2].Value.Uint64(), samples[3].Value.Uint64()
	}
	var lastDone uint64
	var collectedAt uint64 // the bytes allocated so far when Release last collected
	// An idle process whose last collection found much live collects again
	// after recheck idle checks since (waited), twice as many each time
	// but the first after a burst: a trickle of work in between leaves the
	// count as it was, or a process whose live heap is large would collect
	// after each piece of work.
	recheck, waited := 1, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		done, busy := progress()
		idle := !busy && done == lastDone
		lastDone = done
		if !idle {
			continue
		}
		live, held, allocs := read()
		waited++
		// What was live at the last collection may have died since,
		// with nothing allocated: connections that sent only headers,
		// which no count of work sees, held their buffers through the
		// collection, then closed.
		burst := allocs-collectedAt > releaseSlack
		stale := live > releaseSlack && waited >= recheck
		if (burst || stale) && held <= 2*live+releaseSlack {
			// The live size is the last collection's, which may have run
			// at the burst's peak, with all of it live (a process whose
			// heap grew by one large batch may never have collected
			// since); with nothing allocated while idle, no other would
			// run for minutes. Once after each burst, and again while
			// much is live, collect to learn what is live now: twice, as
			// what sync.Pools hold (gRPC keeps its message buffers in
			// them) outlives one collection.
			runtime.GC()
			runtime.GC()
			live, held, collectedAt = read()
			if burst {
				recheck = 1
			} else {
				recheck = min(2*recheck, maxRecheck)
			}
			waited = 0
		}
		if held <= 2*live+releaseSlack {
			continue
		}
		debug.FreeOSMemory()
		_, _, collectedAt = read()
		if log != nil {
			log.Info("idle after a burst: returned memory to the system", "heap_held_mib", held>>20, "heap_live_mib", live>>20)
		}
	}
}
