package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// RoomHold is the longest a request waiting for room kept for it in the
// queue waits without a batch answered, before it is refused with
// ErrOverloaded: about the Retry-After its caller would be told, or twice
// what a full batch takes, as measured, if that is longer. While batches
// are answered it waits on, as the room is being made, up to
// roomWaitMax: a request of thousands of items may need more than a
// second of batches to leave before it fits.
const (
	RoomHold    = time.Second
	roomWaitMax = 30 * time.Second
)

// roomPoll is how often a request waiting for room looks at the queue.
const roomPoll = 2 * time.Millisecond

// room keeps space in the queue for the largest request that found none,
// if it is at least twice the mean of the requests queued of late, which
// waits for it. Without it, a request of many items was never
// admitted while small ones kept the queue near its bound: each time a
// batch left, small requests filled the gap before the large one, which
// needs the gap whole, came back. While room is kept for want items, a
// request that is not the one it is kept for is admitted only if it leaves
// that room free, and refused at once when it does not fit, unless it is
// larger: then the room is kept for it instead, and the one it was kept
// for is refused. The request it is kept for is admitted as soon as the
// queue has room for it (see RoomHold): as batches leave, in tens of
// milliseconds under load, where a caller told to come back after a
// Retry-After of a second held the queue down that long. The bound itself
// never moves: a queue never holds more than MaxQueue items. A request no
// larger than most is refused at once, as before: it finds room as soon
// as any comes, as the others do.
type room struct {
	want  atomic.Int64 // items kept free; 0 while none
	owner *Future      // the request waiting for the room; guarded by Streamer.mu
	// mean is the mean size of the requests queued of late, in 1/1024
	// items: the last few dozen, weighted.
	mean atomic.Int64
}

// queued notes that a request of n items was queued.
func (r *room) queued(n int) {
	// A race between two requests loses one of them, which matters little.
	if m := r.mean.Load(); m == 0 {
		r.mean.Store(1024 * int64(n))
	} else {
		// A sixteenth of the way, at least one step: the mean reaches
		// the size of a steady stream of requests.
		d := 1024*int64(n) - m
		step := d / 16
		if step == 0 && d != 0 {
			step = d / max(d, -d)
		}
		r.mean.Store(m + step)
	}
}

// large says whether a request of n items is larger than most: at least
// twice the mean, and of more than one item.
func (r *room) large(n int) bool { return n > 1 && 1024*int64(n) >= 2*r.mean.Load() }

// fits says whether n more items, of the request whose Future is f, may
// join the waiting ones within max and around the room kept. It requires
// Streamer.mu.
func (r *room) fits(waiting, n, max int, f *Future) bool {
	if waiting+n > max {
		return false
	}
	want := r.want.Load()
	return want == 0 || r.owner == f || int64(waiting+n)+want <= int64(max)
}

// refusedAtOnce says, without Streamer.mu, that n items that do not fit
// beside waiting ones are refused at once, as the locked path would: they
// are no larger than most, or room is kept for a request at least as large
// (it may have been given up meanwhile; then the refusal is one a moment
// early). Refusing takes no lock under overload, which the workers'
// answers need.
func (r *room) refusedAtOnce(waiting, n, max int) bool {
	want := r.want.Load()
	if waiting+n <= max && (want == 0 || int64(waiting+n)+want <= int64(max)) {
		return false // it fits
	}
	return want >= int64(n) || !r.large(n)
}

// claim keeps the room for n items of the request whose Future is f, if
// they are larger than most and none is kept or it is kept for fewer, and
// says whether it did. It requires Streamer.mu.
func (r *room) claim(n int, f *Future) bool {
	if want := r.want.Load(); (want != 0 && int64(n) <= want) || !r.large(n) {
		return false
	}
	r.owner = f
	r.want.Store(int64(n))
	return true
}

// leave gives the room up if it is kept for f. It requires Streamer.mu.
func (r *room) leave(f *Future) {
	if r.owner == f {
		r.owner = nil
		r.want.Store(0)
	}
}

// kept is the room kept now, in items: 0 when none.
func (r *room) kept() int { return int(r.want.Load()) }

// refusal says why n items were refused with waiting queued.
func (r *room) refusal(waiting, n, max int) error {
	if want := r.kept(); want > 0 {
		return fmt.Errorf("%w: %d items waiting, limit %d, and room for %d kept for a request that waits for it", ErrOverloaded, waiting, max, want)
	}
	return fmt.Errorf("%w: %d items waiting, limit %d", ErrOverloaded, waiting, max)
}

// roomHold is how long a request waiting for room waits without a batch
// answered (see RoomHold): before any batch has told what one costs, as
// long as it may wait at all.
func (s *Streamer) roomHold() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch time.Duration
	if fixed, perItem, ok := s.cost.line(); ok {
		batch = fixed + time.Duration(s.cfg.BatchSize)*perItem
	} else if _, batch = s.cost.mean(); batch == 0 {
		return roomWaitMax
	}
	return max(RoomHold, 2*batch)
}

// waitRoom waits until the queue has room for req's n items, kept for f,
// and queues them; or refuses them, when RoomHold passes without a batch
// answered, or roomWaitMax in all (then with ErrOverloaded), a larger
// request takes the room, the request's deadline passes or its caller
// gives up, no worker can run, or the streamer drains. It is called with
// the room claimed for f, without Streamer.mu.
func (s *Streamer) waitRoom(ctx context.Context, req Request, f *Future, n int) error {
	began := time.Now()
	answered, progress := s.stats.answered.Load(), began // the last batch answered seen, and when
	var deadline <-chan time.Time
	if !f.deadline.IsZero() {
		t := time.NewTimer(time.Until(f.deadline))
		defer t.Stop()
		deadline = t.C
	}
	poll := time.NewTicker(roomPoll)
	defer poll.Stop()
	swept := time.Now() // when a sweep was last asked for
	refused := func(err error) error {
		s.mu.Lock()
		s.room.leave(f)
		s.mu.Unlock()
		s.stats.rejected.Add(uint64(n))
		return err
	}
	// left is refused for a request whose deadline passed or whose caller
	// left meanwhile: its items count as its request does (see gone).
	left := func(err error) error {
		s.mu.Lock()
		s.room.leave(f)
		s.mu.Unlock()
		return s.gone(n, err)
	}
	for {
		select {
		case now := <-poll.C:
			if a := s.stats.answered.Load(); a != answered {
				answered, progress = a, now
			}
			switch {
			case now.Sub(progress) >= RoomHold && now.Sub(progress) >= s.roomHold():
				return refused(fmt.Errorf("%w: no room for %d items, limit %d, and no batch answered for %s", ErrOverloaded, n, s.cfg.MaxQueue, now.Sub(progress).Round(time.Millisecond)))
			case now.Sub(began) >= roomWaitMax:
				return refused(fmt.Errorf("%w: no room for %d items within %s, limit %d", ErrOverloaded, n, roomWaitMax, s.cfg.MaxQueue))
			}
		case <-deadline:
			return left(fmt.Errorf("%w: before the request was queued, waiting for room", ErrDeadline))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return left(fmt.Errorf("%w: before the request was queued, waiting for room", ErrDeadline))
			}
			return left(fmt.Errorf("%w: before the request was queued, waiting for room", ErrCanceled))
		}
		if int(s.queue.size.Load())+n > s.cfg.MaxQueue && s.room.want.Load() == int64(n) && !s.draining.Load() && !s.unavail.Load() {
			// Not yet, as looked at without the lock; items that will
			// never run may hold the room.
			if time.Since(swept) >= 100*time.Millisecond {
				swept = time.Now()
				s.askSweep()
			}
			continue
		}
		s.mu.Lock()
		switch {
		case s.draining.Load():
			s.room.leave(f)
			s.mu.Unlock()
			s.stats.rejected.Add(uint64(n))
			return ErrShuttingDown
		case s.unavail.Load():
			s.room.leave(f)
			why := s.startFailureLocked()
			s.mu.Unlock()
			s.stats.rejected.Add(uint64(n))
			return fmt.Errorf("%w for %s or more%s", ErrUnavailable, s.cfg.UnavailableAfter, why)
		case s.room.owner != f:
			s.mu.Unlock()
			s.stats.rejected.Add(uint64(n))
			return fmt.Errorf("%w: the room kept for these %d items went to a larger request", ErrOverloaded, n)
		case s.queue.items()+n <= s.cfg.MaxQueue:
			s.room.leave(f)
			// Queued now: its items' wait for a batch, and the latency
			// the dispatcher allows them, count from here.
			f.enqueued = s.clock()
			s.queueLocked(req, f) // unlocks
			return nil
		}
		s.mu.Unlock()
	}
}
