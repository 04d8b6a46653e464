package supervisor

import (
	"math"
	"time"
)

// Batching is the policy that decides when an idle worker starts a batch
// that is not full.
type Batching string

// The batching policies.
const (
	// BatchingAdaptive lets an idle worker wait a little for items that are
	// about to arrive, when its measured batch cost says that a fuller batch
	// pays: mostly the callers just answered, coming back. A lone request
	// on an idle server never waits, nor does anything when the per-item
	// cost dominates; MaxLatency bounds every wait.
	BatchingAdaptive Batching = "adaptive"
	// BatchingGreedy starts a batch on an idle worker at once with whatever
	// is queued (work-conserving).
	BatchingGreedy Batching = "greedy"
)

// Why a batch was dispatched, as counted in Stats.Dispatch.
const (
	reasonFull       = iota // it had BatchSize items
	reasonIdle              // an idle worker took what was queued
	reasonWaited            // an idle worker waited for arrivals, then took them
	reasonMaxLatency        // its oldest item had waited MaxLatency
	reasonDeadline          // a wait ended early for an item's deadline
	reasonRetry             // it was formed before: a retry or a split
	reasonRecalled          // it was given back by a worker running late
	numReasons
)

// costFit is a running least-squares fit of a batch's run time against its
// number of items, t ≈ fixed + perItem·n, over the recent batches: each new
// batch weighs 1 and the older ones fade by costDecay per batch.
//
// The slope needs batches of different sizes. When the recent ones are all
// alike (a steady load forms the same batch again and again), the last slope
// found is kept and only the fixed cost follows the recent mean.
type costFit struct {
	s0, s1, s2, st, snt float64 // Σw, Σw·n, Σw·n², Σw·t, Σw·n·t (t in seconds)
	batches             uint64
	perItem             float64 // seconds, the last slope found
	fitted              bool    // a slope was found
}

// costDecay makes the fit remember about the last 200 batches.
const costDecay = 0.995

func (c *costFit) observe(n int, took time.Duration) {
	x, t := float64(n), took.Seconds()
	c.s0 = c.s0*costDecay + 1
	c.s1 = c.s1*costDecay + x
	c.s2 = c.s2*costDecay + x*x
	c.st = c.st*costDecay + t
	c.snt = c.snt*costDecay + x*t
	c.batches++
	spread := c.s0*c.s2 - c.s1*c.s1 // s0² × the variance of n
	// A standard deviation of a fifth of an item, over 8 batches at least.
	if c.batches >= 8 && spread >= 0.04*c.s0*c.s0 {
		c.perItem = max((c.s0*c.snt-c.s1*c.st)/spread, 0)
		c.fitted = true
	}
}

// line returns the fitted fixed and per-item cost. ok is false until batches
// of different sizes have told the two apart.
func (c *costFit) line() (fixed, perItem time.Duration, ok bool) {
	if !c.fitted {
		return 0, 0, false
	}
	p := c.perItem
	f := (c.st - p*c.s1) / c.s0
	if f < 0 {
		p, f = c.st/c.s1, 0
	}
	return seconds(f), seconds(p), true
}

// mean returns the mean batch size and run time of the recent batches.
func (c *costFit) mean() (n float64, took time.Duration) {
	if c.s0 == 0 {
		return 0, 0
	}
	return c.s1 / c.s0, seconds(c.st / c.s0)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// answer is one batch's answer, as the return tracker remembers it: when,
// how many callers it answered, how many items arrived since that are
// counted as theirs, and when the last of them came.
type answer struct {
	at, last time.Time
	n        int
	arrived  int
}

// returnTracker learns how many callers come back right after they are
// answered, and how soon: in a closed loop nearly all of them, the first
// after the client's round trip and the others one after the other, as
// fast as the clients' and the server's threads turn them round. Arrivals
// are counted against the oldest answers still in their return window;
// what came back by the window's end updates the return ratio.
type returnTracker struct {
	answers []answer // in their window, oldest first
	// ratio is the share of answered callers that came back within the
	// window; delay the time until the first of them came; gap the time
	// between two of them. All are running means.
	ratio float64
	delay time.Duration
	gap   time.Duration
	limit time.Duration // a window's upper bound: MaxLatency, at most 20ms
	// reach is a window's lower bound: half the batch's fixed cost, once it
	// is known. Callers who come back later than the window are never
	// counted, so a window drawn from the delay learned so far could not
	// learn a longer one: a client across a network, or a front end
	// through Redis, comes back a millisecond or more after its answer.
	reach time.Duration
}

func newReturnTracker(maxLatency time.Duration) returnTracker {
	return returnTracker{delay: 500 * time.Microsecond, gap: 50 * time.Microsecond, limit: min(maxLatency, 20*time.Millisecond)}
}

// eta is how long after an answer of n callers the last is expected back.
func (r *returnTracker) eta(n int) time.Duration {
	return r.delay + time.Duration(n-1)*r.gap
}

// window is how long an answer of n callers is watched for their return:
// twice the expected time for them all, at least half a millisecond and at
// least reach, and at most limit.
func (r *returnTracker) window(n int) time.Duration {
	return min(max(2*r.eta(n), 500*time.Microsecond, r.reach), r.limit)
}

// expire forgets the answers whose window has passed at now.
func (r *returnTracker) expire(now time.Time) {
	i := 0
	for ; i < len(r.answers) && now.Sub(r.answers[i].at) >= r.window(r.answers[i].n); i++ {
		a := r.answers[i]
		r.ratio += (float64(a.arrived)/float64(a.n) - r.ratio) / 16
	}
	if i > 0 {
		n := copy(r.answers, r.answers[i:])
		r.answers = r.answers[:n]
	}
}

// answered notes that n callers were answered at now. An answer of none
// (a batch whose items were all canceled or expired as it went to its
// worker) is not noted: its share of returns, 0/0, made the ratio NaN for
// good, and /v1/stats, which carries it, could no longer be encoded.
func (r *returnTracker) answered(now time.Time, n int) {
	if n <= 0 {
		return
	}
	r.expire(now)
	if len(r.answers) >= 64 { // bounded: the oldest is nearly out anyway
		m := copy(r.answers, r.answers[1:])
		r.answers = r.answers[:m]
	}
	r.answers = append(r.answers, answer{at: now, n: n})
}

// arrived notes that m items were queued at now, counting them against the
// oldest answers still waiting for their callers.
func (r *returnTracker) arrived(now time.Time, m int) {
	r.expire(now)
	for i := range r.answers {
		a := &r.answers[i]
		take := min(m, a.n-a.arrived)
		if take <= 0 {
			continue
		}
		if a.arrived == 0 {
			r.delay += (now.Sub(a.at) - r.delay) / 16
		} else {
			r.gap += (now.Sub(a.last)/time.Duration(take) - r.gap) / 16
		}
		a.arrived += take
		a.last = now
		if m -= take; m == 0 {
			return
		}
	}
}

// expected returns how many more items are expected from callers just
// answered, how long until they are all in (the wait), and when the
// soonest answer leaves its window (zero if none).
func (r *returnTracker) expected(now time.Time) (k float64, wait time.Duration, until time.Time) {
	r.expire(now)
	for _, a := range r.answers {
		more := r.ratio*float64(a.n) - float64(a.arrived)
		if more <= 0 {
			continue
		}
		k += more
		next := a.at.Add(r.delay) // the first is still to come
		if a.arrived > 0 {
			next = a.last
		}
		wait = max(wait, next.Add(time.Duration(more*float64(r.gap))).Sub(now))
	}
	if len(r.answers) > 0 {
		until = r.answers[0].at.Add(r.window(r.answers[0].n))
	}
	return k, max(wait, 0), until
}

// holdLocked decides whether an idle slot should leave the q items of f
// queued a little longer, for arrivals that would fill the batch. It says
// when to look again (through earlier) when it holds; when it does not, it
// says why the batch goes now. It requires that s.mu is held.
//
// Two reasons to wait: the callers just answered are coming back (a closed
// loop, see below), or items arrive so fast that a batch this small would
// take a worker from the many about to come (see rateHoldLocked). For the
// first, waiting pays when the k items expected soon, which would otherwise wait
// for the next free worker, gain more than the waiting costs the q items
// already queued and the longer batch costs them all:
//
//	k·(T − w) > 1.5 × (q·w + q·p·k)
//
// where T is how long the newcomers would otherwise wait for a worker (the
// batch's own run time F + p·q when no other worker is free sooner), w the
// expected wait until they are all in and p the per-item cost. With no fixed cost the
// left side never wins; a lone caller, once back, is expected by nobody.
func (s *Streamer) holdLocked(f *fifo, now time.Time, earlier func(time.Time)) (hold bool, why int) {
	hold, why = s.returnHoldLocked(f, now, earlier)
	if hold || why == reasonMaxLatency || why == reasonDeadline {
		return hold, why
	}
	if s.rateHoldLocked(f, now, earlier) {
		return true, 0
	}
	return false, why
}

// returnHoldLocked is holdLocked's wait for the callers just answered. It
// requires that s.mu is held.
func (s *Streamer) returnHoldLocked(f *fifo, now time.Time, earlier func(time.Time)) (hold bool, why int) {
	why = reasonIdle
	if !s.holdStart.IsZero() {
		why = reasonWaited
	}
	if s.cfg.Batching != BatchingAdaptive {
		return false, why
	}
	q := f.len()
	k, w, until := s.returns.expected(now)
	k = min(k, float64(s.cfg.BatchSize-q))
	if k < 0.5 { // what is expected is a mean: 0.99 of a caller is one
		return false, why
	}
	// This worker's share of what is queued and coming is here already:
	// it does not wait for the rest, which another idle worker takes as
	// it comes (the wait drawn from the arrival rate, in holdLocked,
	// still applies). Through a broker a node's callers come back in two
	// or three groups, each a worker's batch, and waiting for the next
	// held the first for nothing.
	if idle := s.idleSlots(); idle > 1 && float64(q) >= (float64(q)+k)/float64(idle)-0.5 {
		return false, why
	}
	fixed, perItem, ok := s.cost.line()
	if !ok {
		if s.cost.batches < 8 {
			return false, why // too soon to tell anything: be greedy
		}
		// The sizes seen so far cannot tell fixed from per-item cost: wait
		// now and then, so that the batches differ and the fit learns. A
		// wait begun goes on: this is looked at again at every arrival.
		if s.holdStart.IsZero() {
			s.explore++
			if s.explore%8 != 0 {
				return false, why
			}
		}
		_, fixed = s.cost.mean()
		perItem = 0
	}
	run := fixed + time.Duration(float64(perItem)*(float64(q)+k))
	// The wait's hard bounds: the oldest item's MaxLatency, and every
	// queued item's deadline, which must still be met after the wait.
	due := s.at(f.front().fut.enqueued).Add(s.cfg.MaxLatency)
	switch {
	case !now.Add(w).Before(due):
		// Not even at due itself: the dispatcher would look again at once.
		return false, reasonMaxLatency
	case !s.deadlinesAllow(f, now.Add(w+run)):
		return false, reasonDeadline
	}
	// The newcomers would otherwise wait for this batch to run, or for a
	// busy worker to come free first. But a wait that fills the batch is
	// worth a whole batch to them: a busy worker that took them would leave
	// its own callers, coming back as it answers, to wait in their turn.
	newcomersWait := fixed + time.Duration(float64(perItem)*float64(q))
	var gain float64
	if float64(q)+k < float64(s.cfg.BatchSize)-0.5 {
		// A busy worker that takes them makes its own callers' batch
		// longer by p·k, as this one would be for the q queued here.
		if t, n := s.soonestOtherFree(now, fixed, perItem); t < newcomersWait {
			newcomersWait = t
			gain = 1.5 * k * perItem.Seconds() * n
		}
	} else if s.otherSlotIdle() {
		newcomersWait = 0
	}
	gain += k * (newcomersWait - w).Seconds()
	cost := float64(q)*w.Seconds() + float64(q)*perItem.Seconds()*k
	// Ask for half as much again: a wait that barely pays on the means
	// loses whenever the callers come back later than usual. And the fixed
	// cost the newcomers would pay again in a batch of their own must pay
	// for the wait by itself: the batch lengths weighed above can favour a
	// wait even with no fixed cost, where batching buys nothing.
	if gain <= 1.5*cost || k*fixed.Seconds() <= 1.5*float64(q)*w.Seconds() {
		return false, why
	}
	if s.holdStart.IsZero() {
		s.holdStart = now
	}
	s.holdUntil = minTime(until, due)
	earlier(s.holdUntil)
	return true, 0
}

// splitLimit is how many of the q items of f an idle slot takes when others
// are idle too: an even share, so that they all finish sooner (by p·q·(1 −
// 1/m) on m workers). When callers are expected back soon, the other idle
// workers are needed for them too: the share is then at least the ready
// workers' share of every item about (queued, running and expected), so
// that a closed loop settles into one batch per worker, as large as its
// share, rather than one batch of them all while the others idle (callers
// through a broker come back several batches' worth at a time). Otherwise
// it is BatchSize. It requires that s.mu is held.
func (s *Streamer) splitLimit(f *fifo, now time.Time) int {
	limit := s.cfg.BatchSize
	if s.cfg.Batching != BatchingAdaptive || f.len() < 2 {
		return limit
	}
	idle := s.idleSlots()
	if idle < 2 {
		return limit
	}
	if _, perItem, ok := s.cost.line(); !ok || perItem <= 0 {
		return limit
	}
	k, _, _ := s.returns.expected(now)
	if k < 0.5 {
		return min(limit, (f.len()+idle-1)/idle)
	}
	ready, about := 0, f.len()+int(k+0.5)
	for _, sl := range s.slots {
		if sl.state == SlotReady {
			ready++
			for _, b := range sl.inflight {
				about += len(b.items)
			}
		}
	}
	return min(limit, max((f.len()+idle-1)/idle, (about+ready-1)/ready))
}

// deadlinesAllow reports whether every item of f can still meet its
// deadline if its batch ends at end. It requires that s.mu is held.
func (s *Streamer) deadlinesAllow(f *fifo, end time.Time) bool {
	for i := f.head; i < len(f.items); i++ {
		if d := f.items[i].fut.deadline; !d.IsZero() && d.Before(end) {
			return false
		}
	}
	return true
}

// soonestOtherFree estimates how long until some ready slot other than an
// idle one taking this batch starts its next batch, and how many of its own
// callers it expects in it: once free, it waits in its turn for them to come
// back. It is zero when another slot is idle too, unless the callers
// answered come back (a closed loop): a batch started for the first of
// them would then take a worker for a whole fixed cost, and those after
// them would need the other. It requires that s.mu is held.
func (s *Streamer) soonestOtherFree(now time.Time, fixed, perItem time.Duration) (after time.Duration, callers float64) {
	after = time.Duration(math.MaxInt64)
	idleSeen := false
	for _, sl := range s.slots {
		if sl.state != SlotReady {
			continue
		}
		if len(sl.inflight) == 0 {
			if idleSeen && s.returns.ratio < 0.5 {
				return 0, 0 // a second idle slot: newcomers need not wait
			}
			idleSeen = true
			continue
		}
		left := sl.headStart.Sub(now)
		for _, b := range sl.inflight {
			left += fixed + time.Duration(float64(perItem)*float64(len(b.items)))
		}
		n := 0.0
		if s.returns.ratio >= 0.5 {
			last := len(sl.inflight[len(sl.inflight)-1].items)
			left += s.returns.eta(last)
			n = s.returns.ratio * float64(last)
		}
		if left = max(left, 0); left < after {
			after, callers = left, n
		}
	}
	return after, callers
}

// otherSlotIdle reports whether more than one ready slot is idle: one of
// them takes this batch, and the newcomers need not wait for the other.
// It requires that s.mu is held.
func (s *Streamer) otherSlotIdle() bool { return s.idleSlots() > 1 }

// idleSlots counts the ready slots with nothing in flight. It requires
// that s.mu is held.
func (s *Streamer) idleSlots() int {
	idle := 0
	for _, sl := range s.slots {
		if sl.state == SlotReady && len(sl.inflight) == 0 {
			idle++
		}
	}
	return idle
}

func minTime(a, b time.Time) time.Time {
	if !a.IsZero() && a.Before(b) {
		return a
	}
	return b
}

// rateHoldLocked decides whether an idle slot should leave the q items of f
// queued for arrivals, judged by the rate at which items arrive rather
// than by who is coming back. Callers that return through a broker come
// back to whichever node reads first, late and in bunches, so a node
// cannot tell whose return an item is; but the rate it receives items at
// says how large its batches should be. At λ items/s on W ready workers, a
// batch of F + p·b seconds gathers b = λ·F / (W − λ·p) items per worker in
// the steady state: a batch of fewer than half of that would hold a worker
// for a whole fixed cost while the items after it wait their turn. It
// waits for that half, at most as long as a worker takes to come free in
// the steady state (b/λ), and never past MaxLatency or a queued item's
// deadline. At a lone caller's rate b is below one item, and nothing
// waits. It requires that s.mu is held.
func (s *Streamer) rateHoldLocked(f *fifo, now time.Time, earlier func(time.Time)) bool {
	if s.cfg.Batching != BatchingAdaptive {
		return false
	}
	fixed, perItem, ok := s.cost.line()
	if !ok {
		return false
	}
	ready := 0
	for _, sl := range s.slots {
		if sl.state == SlotReady {
			ready++
		}
	}
	rate := s.arrivals.perSecond(now)
	spare := float64(ready) - rate*perItem.Seconds()
	if spare <= 0 {
		return false // overloaded: batches fill by themselves
	}
	want := min(rate*fixed.Seconds()/spare, float64(s.cfg.BatchSize)) / 2
	q := float64(f.len())
	if q >= want || want < 1 {
		return false
	}
	until := s.at(f.front().fut.enqueued).Add(min(seconds(2*want/rate), s.cfg.MaxLatency))
	if !now.Before(until) || !s.deadlinesAllow(f, until.Add(fixed+time.Duration(want*float64(perItem)))) {
		return false
	}
	if s.holdStart.IsZero() {
		s.holdStart = now
	}
	s.holdUntil = until
	earlier(until)
	return true
}

// rateMeter follows the rate at which items arrive: a running mean over
// windows of at least rateWindow, each weighed by its length, so that it
// follows a change within about 8 windows, and a silence lowers it as
// soon as it is asked.
type rateMeter struct {
	start time.Time // the current window's start
	n     float64   // items in the current window
	rate  float64   // items/s
}

const rateWindow = 25 * time.Millisecond

func (m *rateMeter) add(now time.Time, n int) {
	m.roll(now)
	m.n += float64(n)
}

func (m *rateMeter) perSecond(now time.Time) float64 {
	m.roll(now)
	return m.rate
}

func (m *rateMeter) roll(now time.Time) {
	if m.start.IsZero() {
		m.start = now
		return
	}
	elapsed := now.Sub(m.start)
	if elapsed < rateWindow {
		return
	}
	weight := min(elapsed.Seconds()/(8*rateWindow.Seconds()), 1)
	m.rate += (m.n/elapsed.Seconds() - m.rate) * weight
	m.start, m.n = now, 0
}
