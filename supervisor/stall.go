package supervisor

import (
	"sync"
	"time"
)

// A supervisor that does not run for a while (stopped by SIGSTOP or a
// debugger, its virtual machine paused, or starved of CPU) comes back to
// find its workers silent and their batches long: time it did not look at
// them, not time they were stuck. Its watchdogs would then kill healthy
// workers, each counted as a crash. stallClock measures that time: a
// goroutine looks at the clock every stallTick, and a look that comes more
// than stallMin after the one before counts the gap, less a tick, as
// stalled. The watchdogs look too before they judge, so the first look
// after a stall counts it, whichever goroutine runs first.
type stallClock struct {
	mu    sync.Mutex
	last  int64         // the streamer's clock at the last look
	total time.Duration // the stalls counted so far, summed
}

const (
	stallTick = 100 * time.Millisecond
	stallMin  = time.Second
)

// stalled looks at the clock, now (the streamer's), and returns the stalls
// counted up to then.
func (c *stallClock) stalled(now int64) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gap := time.Duration(now - c.last); c.last != 0 && gap > stallMin {
		c.total += gap - stallTick
	}
	c.last = max(c.last, now)
	return c.total
}

// stalledAt is stalled at t.
func (s *Streamer) stalledAt(t time.Time) time.Duration {
	return s.stalls.stalled(int64(t.Sub(s.epoch)))
}

// watchStalls looks at the clock every stallTick until the dispatcher ends.
func (s *Streamer) watchStalls() {
	defer s.dispatched.Done()
	t := time.NewTicker(stallTick)
	defer t.Stop()
	s.stalls.stalled(s.clock())
	for {
		select {
		case <-t.C:
			s.stalls.stalled(s.clock())
		case <-s.stopped:
			return
		}
	}
}
