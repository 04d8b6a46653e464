package supervisor

import (
	"fmt"
	"sync/atomic"
	"time"
)

// RoomHold is how long a queue (or, with a broker, the shared backlog)
// keeps room for a request refused for want of it: a little past the
// Retry-After of 1 s its caller was told, so that it finds the room when it
// comes back, and not so long that room kept for a caller who gave up
// holds back the others for long.
const RoomHold = 2 * time.Second

// room keeps space in the queue for the largest request lately refused for
// want of it. Without it, a request of many items is never admitted while
// small ones keep the queue near its bound: each time a batch leaves, small
// requests fill the gap before the large one, which needs the gap whole,
// comes back. While room is kept for want items, a request of fewer is
// admitted only if it leaves that many places free; the first request of
// want items or more that is admitted takes the room, and the room lapses
// RoomHold after the last refusal that asked for it. The bound itself never
// moves: a queue still never holds more than MaxQueue items.
type room struct {
	want  atomic.Int64 // items kept free; 0 while no room is kept
	until atomic.Int64 // when the room lapses, on the streamer's clock
}

// fits says whether n more items may join the waiting ones, within max and
// around the room kept; it lets a lapsed room go. now reads the clock, only
// when a room is kept.
func (r *room) fits(waiting, n, max int, now func() int64) bool {
	if waiting+n > max {
		return false
	}
	want := r.want.Load()
	if want == 0 || int64(n) >= want || int64(waiting+n)+want <= int64(max) {
		return true
	}
	if now() > r.until.Load() {
		// A refusal may have renewed it meanwhile: then it stays.
		if r.want.CompareAndSwap(want, 0) && now() <= r.until.Load() {
			r.want.CompareAndSwap(0, want)
			return false
		}
		return true
	}
	return false
}

// refused notes that n items were refused for want of room: room is kept
// for them unless it is kept for more already.
func (r *room) refused(n int, now int64) {
	for {
		want := r.want.Load()
		if int64(n) < want {
			return
		}
		// The lapse is set first: a fits that sees the new want sees, at
		// worst, a later lapse than it needs.
		r.until.Store(now + int64(RoomHold))
		if r.want.CompareAndSwap(want, int64(n)) {
			return
		}
	}
}

// admitted notes that n items were queued: room kept for n or fewer is
// theirs, and is given up.
func (r *room) admitted(n int) {
	if want := r.want.Load(); want != 0 && int64(n) >= want {
		r.want.CompareAndSwap(want, 0)
	}
}

// kept is the room kept, in items: 0 when none. It may have lapsed
// (see keptAt).
func (r *room) kept() int { return int(r.want.Load()) }

// keptAt is the room kept at now, on the streamer's clock: 0 when none, or
// when it has lapsed.
func (r *room) keptAt(now int64) int {
	if now > r.until.Load() {
		return 0
	}
	return r.kept()
}

// refusal says why n items were refused with waiting queued.
func (r *room) refusal(waiting, n, max int) error {
	if want := r.kept(); waiting+n <= max && want > n {
		return fmt.Errorf("%w: %d items waiting, limit %d, and room for %d kept for a larger request refused before", ErrOverloaded, waiting, max, want)
	}
	return fmt.Errorf("%w: %d items waiting, limit %d", ErrOverloaded, waiting, max)
}
