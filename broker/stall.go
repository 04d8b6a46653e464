package broker

import (
	"sync"
	"time"
)

// stallWatch tells a process's own stalls (a SIGSTOP, a paused virtual
// machine, a starved CPU) from a Redis that is slow or hung: a goroutine
// looks at the clock every stallTick, and a gap of more than stallMargin
// between two looks is a stall of the process. A command that ran out of
// time across such a gap did not because Redis was silent: its timer
// fired late, when the process ran again. A Redis that hangs stalls only
// the goroutines waiting for it, and the watch sees no gap.
type stallWatch struct {
	mu      sync.Mutex
	last    time.Time // the last look
	stalls  [8]span   // the last stalls seen, in a ring
	next    int       // where the next stall goes in the ring
	stopped bool      // the watch no longer looks: it sees no stall
}

// stallTick is how often the watch looks at the clock.
const stallTick = 100 * time.Millisecond

// stallMargin is the gap between two looks that makes a stall: a ticker
// fires within milliseconds of its time on a process that runs.
const stallMargin = 500 * time.Millisecond

// run looks at the clock every stallTick until stop is closed.
func (w *stallWatch) run(stop <-chan struct{}) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	w.look(time.Now())
	for {
		select {
		case <-t.C:
			w.look(time.Now())
		case <-stop:
			w.mu.Lock()
			w.stopped = true
			w.mu.Unlock()
			return
		}
	}
}

// look notes the clock at now, and a stall if the last look was more than
// stallMargin before it.
func (w *stallWatch) look(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lookLocked(now)
}

func (w *stallWatch) lookLocked(now time.Time) {
	if w.stopped || !now.After(w.last) {
		return
	}
	if !w.last.IsZero() && now.Sub(w.last) > stallMargin {
		w.stalls[w.next%len(w.stalls)] = span{from: w.last, to: now}
		w.next++
	}
	w.last = now
}

// stalledSince is how long the process stalled from began until now,
// looking at the clock first: the command that asks may run before the
// watch's goroutine after the stall.
func (w *stallWatch) stalledSince(began time.Time) time.Duration {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last.IsZero() || w.stopped {
		return 0 // not watching: no stall can be told
	}
	w.lookLocked(now)
	var stalled time.Duration
	for _, s := range w.stalls {
		from, to := s.from, s.to
		if began.After(from) {
			from = began
		}
		if now.Before(to) {
			to = now
		}
		if to.After(from) {
			stalled += to.Sub(from)
		}
	}
	return stalled
}

// through says whether err is a command, begun at began, that ran out of
// time because its process (a front end, a node) did not run for more than
// stallMargin meanwhile, rather than because Redis was silent; and how
// long the command took.
func (w *stallWatch) through(err error, began time.Time) (time.Duration, bool) {
	took := time.Since(began)
	return took, err != nil && timedOut(err) && w.stalledSince(began) > stallMargin
}
