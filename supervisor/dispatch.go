package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// dispatchLoop hands batches to slots whenever something changes: items
// arrive, a worker answers or becomes ready, a timer fires.
func (s *Streamer) dispatchLoop() {
	defer s.dispatched.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		next := s.dispatchLocked(time.Now())
		s.mu.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-s.wake:
		case <-timer.C:
		case <-s.stopped:
			return
		}
	}
}

// dispatchLocked sends every batch that should go now and returns when it
// wants to look again at the latest.
//
// The policy: a slot with nothing in flight takes whatever is queued, at
// once with BatchingGreedy; with BatchingAdaptive it may first wait a little
// for arrivals, when its measured costs say a fuller batch pays (see
// holdLocked). A slot with
// one batch running gets its next batch early, so it never idles between
// batches, but only once that batch is full or its oldest item has waited
// MaxLatency; not while a piece of a hunt waits for an idle slot (see
// nextBatch), nor while its batch runs late and another slot is on time
// (see pickSlot). No slot holds more than PipelineDepth batches.
//
// It requires that s.mu is held.
func (s *Streamer) dispatchLocked(now time.Time) time.Time {
	next := now.Add(time.Hour)
	earlier := func(t time.Time) {
		if t.Before(next) {
			next = t
		}
	}
	s.checkAvailable(now, earlier)
	s.sweepLocked(now, earlier)
	s.recallAbandonedLocked()
	s.recallLate(now, earlier)
	for {
		sl := s.pickSlot(now)
		if sl == nil {
			break
		}
		b := s.nextBatch(sl, now, earlier)
		if b == nil {
			break
		}
		sl.sendLocked(b, now)
	}
	// After the sends, so that the batches just sent are timed too.
	s.checkTimeouts(now, earlier)
	if s.draining.Load() {
		s.abandonHuntsLocked(now, earlier)
		s.checkDrained()
	}
	return next
}

// sweepInterval is the least time between two sweeps of the queue.
const sweepInterval = 10 * time.Millisecond

// sweepLocked frees the room held by queued items that must not run (their
// deadline passed, their caller left) once a request was refused for want
// of room, at most every sweepInterval: refusals stay O(1) however many
// clients are turned away. It requires that s.mu is held.
func (s *Streamer) sweepLocked(now time.Time, earlier func(time.Time)) {
	if !s.sweepWanted.Load() {
		return
	}
	if due := s.lastSweep.Add(sweepInterval); now.Before(due) {
		earlier(due)
		return
	}
	s.sweepWanted.Store(false)
	s.givenUp.Store(0)
	s.lastSweep = now
	s.queue.sweep(now, s.drop)
}

// recallAbandonedLocked asks back the batches sent ahead whose callers have
// all left, once a caller left since the last look (see
// slot.recallAbandonedLocked). It requires that s.mu is held.
func (s *Streamer) recallAbandonedLocked() {
	if !s.recallWanted.CompareAndSwap(true, false) || isClosed(s.stopping) {
		return // none left, or the workers stop, and what they hold is answered
	}
	for _, slots := range [...][]*slot{s.slots, s.retiring} {
		for _, sl := range slots {
			if sl.state == SlotReady || sl.state == SlotDraining {
				sl.recallAbandonedLocked()
			}
		}
	}
}

// pickSlot returns the ready slot with the fewest batches in flight (below
// PipelineDepth), taking turns among equals. A slot whose batch runs late
// (see lateLocked) is left out while another ready slot is on time: a batch
// sent ahead to it would wait behind one that may run on for as long as
// WorkerTimeout, while the other, free sooner, could run it. Once every
// ready slot runs late (the model as a whole got slower than its measured
// cost) they take batches ahead as before. A batch sent ahead before the
// one it follows ran late is given back, unless it began (see
// recallLate). While a piece of a hunt wants a fresh worker (see
// wantsFresh), an idle one comes first. It requires that s.mu is held.
func (s *Streamer) pickSlot(now time.Time) *slot {
	if sl := s.freshIdle(); sl != nil {
		return sl
	}
	var best, late *slot
	n := len(s.slots)
	for i := range n {
		sl := s.slots[(s.nextSlot+i)%n]
		if sl.state != SlotReady || len(sl.inflight) >= s.cfg.PipelineDepth {
			continue
		}
		if best != nil && len(sl.inflight) >= len(best.inflight) {
			continue
		}
		if s.lateLocked(sl, now) {
			if late == nil || len(sl.inflight) < len(late.inflight) {
				late = sl
			}
			continue
		}
		best = sl
	}
	if best == nil && late != nil && !s.someSlotOnTime(now) {
		best = late
	}
	if best != nil {
		s.nextSlot = (best.id + 1) % n
	}
	return best
}

// lateMargin is how far past twice its expected run time a batch runs
// before its slot counts as late (see lateLocked). Twice, and this on top:
// neither the noise of a loaded machine on a model of a few milliseconds,
// nor a worker on a card slower than its peers (the cost is measured over
// them all), should make a slot late; a stuck batch is late all the same,
// long before WorkerTimeout.
const lateMargin = 20 * time.Millisecond

// lateLocked reports whether the batch sl runs has run more than twice
// its expected time and lateMargin, not counting the time the
// supervisor stalled (see stallClock): it is stuck, or much slower than
// the batches measured so far, and no one can tell when it will end. A
// slot with nothing in flight, or before any batch has told the cost, is
// never late. It requires that s.mu is held.
func (s *Streamer) lateLocked(sl *slot, now time.Time) bool {
	_, late := s.lateAt(sl, now)
	return late
}

// lateAt reports whether sl runs late at now (see lateLocked), and if not,
// the first moment it will, as far as now tells: zero if it never will
// (nothing in flight, or no cost measured yet). It requires that s.mu is
// held.
func (s *Streamer) lateAt(sl *slot, now time.Time) (time.Time, bool) {
	if len(sl.inflight) == 0 {
		return time.Time{}, false
	}
	run := s.expectedRun(len(sl.inflight[0].items))
	if run <= 0 {
		return time.Time{}, false
	}
	limit := 2*run + lateMargin
	// Late once it ran more than limit: from a nanosecond past it.
	at := sl.headStart.Add(limit + time.Nanosecond)
	if now.Before(at) {
		return at, false // the stall clock, which takes a lock, is looked at only past it
	}
	// The time the supervisor stalled is no time the batch ran.
	at = at.Add(s.stalledAt(now) - sl.headStalled)
	return at, !now.Before(at)
}

// someSlotOnTime reports whether a ready slot is idle or runs a batch that
// is not late (see lateLocked). It requires that s.mu is held.
func (s *Streamer) someSlotOnTime(now time.Time) bool {
	for _, sl := range s.slots {
		if sl.state == SlotReady && !s.lateLocked(sl, now) {
			return true
		}
	}
	return false
}

// recallLate takes back the batches sent ahead to a worker whose running
// batch runs late (see lateLocked) while another ready slot is on time: they
// would wait behind a batch that may run on for as long as WorkerTimeout,
// where the other could run them when it ends its own. Those the worker
// has not started are given back (see slot.recallLocked), and sent again
// to the first worker with room. A worker that a reload or a scaling
// retired, which answers what it holds before it stops, gives them back
// alike: the reload or scaling would wait for them too. It requires that
// s.mu is held.
func (s *Streamer) recallLate(now time.Time, earlier func(time.Time)) {
	if isClosed(s.stopping) {
		return // the queue is drained, and the workers stop
	}
	onTime := -1 // not looked at yet
	for _, slots := range [...][]*slot{s.slots, s.retiring} {
		for _, sl := range slots {
			if (sl.state != SlotReady && sl.state != SlotDraining) || len(sl.inflight) < 2 {
				continue
			}
			if at, late := s.lateAt(sl, now); !late {
				if !at.IsZero() {
					earlier(at)
				}
				continue
			}
			if onTime < 0 {
				onTime = 0
				if s.someSlotOnTime(now) {
					onTime = 1
				}
			}
			if onTime == 1 {
				sl.recallLocked()
			}
		}
	}
}

// nextBatch takes the batch sl should run next, or nil if it should wait.
//
// A piece of a hunt (a suspect batch) runs alone, on an idle slot. While
// one waits, a busy slot is given nothing more: the first to finish what it
// holds is then idle, and takes it. Were busy slots given their next batch
// early, as they are otherwise, under a steady load none would ever be idle,
// and the piece would wait until the load dropped or its items' deadlines
// passed. A fresh worker takes first a lone item that crashed workers
// alone, none of them fresh (see wantsFresh). It requires that s.mu is
// held.
func (s *Streamer) nextBatch(sl *slot, now time.Time, earlier func(time.Time)) *batch {
	idle := len(sl.inflight) == 0
	if !idle && s.suspectWaits() {
		return nil
	}
	if idle && sl.ran == 0 {
		// A piece that wants a fresh worker goes first.
		ready := s.queue.ready
		if k := slices.IndexFunc(ready, func(b *batch) bool { return wantsFresh(b) && !s.deferredLocked(b) }); k > 0 {
			b := ready[k]
			copy(ready[1:k+1], ready[:k])
			ready[0] = b
		}
	}
	for i := 0; i < len(s.queue.ready); i++ {
		if s.deferredLocked(s.queue.ready[i]) {
			continue
		}
		b := s.queue.takeReady(i)
		if s.pruneLocked(b, now) {
			why := reasonRetry
			if b.recalled {
				why, b.recalled = reasonRecalled, false
			}
			s.stats.reasons[why].Add(1)
			return b
		}
		s.pieceEndedLocked(b, false) // every item of it dropped
		s.probeEndedLocked(b)
		i--
	}
	for {
		f := s.queue.oldest()
		if f == nil {
			return nil
		}
		why, limit := reasonFull, s.cfg.BatchSize
		switch {
		case f.len() >= s.cfg.BatchSize:
			if idle { // other workers may be idle too
				limit = s.splitLimit(f, now)
			}
		case !idle:
			due := s.at(f.front().fut.enqueued).Add(s.cfg.MaxLatency)
			if now.Before(due) {
				earlier(due)
				return nil
			}
			why = reasonMaxLatency
		default:
			var hold bool
			if hold, why = s.holdLocked(f, now, earlier); hold {
				return nil
			}
			limit = s.splitLimit(f, now)
		}
		b := s.spareBatch()
		b.items = s.queue.take(b.items, f, limit, s.cfg.MaxBatchBytes, now, s.drop)
		if len(b.items) > 0 {
			s.counted(why, now)
			return s.sealBatch(b)
		}
		s.recycle(b)
	}
}

// deferredLocked reports whether b is a lone item judged too early to tell
// whether to blame it (see verdictWait) that waits behind the items queued
// for deferAnswers answers: on a server that has answered nothing yet, or
// since a reload, those answers are what lets it be judged; or behind the
// probe of the model, until it ends (see probeLocked). It requires that
// s.mu is held.
func (s *Streamer) deferredLocked(b *batch) bool {
	return b.suspect && len(b.items) == 1 && b.items[0].deferred &&
		(s.canary.probe != nil || s.queue.n > 0 && s.record.answers < b.deferredAt+deferAnswers)
}

// suspectWaits reports whether a piece of a hunt waits for an idle slot,
// rather than for a fresh worker (see wantsFresh). It requires that s.mu
// is held.
func (s *Streamer) suspectWaits() bool {
	for _, b := range s.queue.ready {
		if b.suspect {
			return true
		}
	}
	return false
}

// wantsFresh reports whether b is a lone item that crashed workers alone,
// none of them on its first batch: a fresh worker's crash convicts it
// sooner (see judgeLocked), so that a fresh worker that is idle takes it
// first. It never waits for one: a worker may take its model's load time
// to come back, or never, and copies of the item sent meanwhile would
// crash the others.
func wantsFresh(b *batch) bool {
	return b.suspect && len(b.items) == 1 && b.items[0].aloneCrashes > 0 && !b.items[0].crashedFresh
}

// freshIdle returns a ready, idle slot whose worker has run no batch, when
// a piece wants one (see wantsFresh); nil otherwise. It requires that s.mu
// is held.
func (s *Streamer) freshIdle() *slot {
	waits := false
	for _, b := range s.queue.ready {
		if wantsFresh(b) && !s.deferredLocked(b) {
			waits = true
			break
		}
	}
	if !waits {
		return nil
	}
	for _, sl := range s.slots {
		if sl.state == SlotReady && len(sl.inflight) == 0 && sl.ran == 0 {
			return sl
		}
	}
	return nil
}

// counted counts a batch formed for reason why, and ends a wait for
// arrivals, if one was on, adding its length to the wait added. It requires
// that s.mu is held.
func (s *Streamer) counted(why int, now time.Time) {
	s.stats.reasons[why].Add(1)
	if !s.holdStart.IsZero() {
		s.stats.waitAdded.Add(int64(now.Sub(s.holdStart)))
		s.holdStart, s.holdUntil = time.Time{}, time.Time{}
	}
}

// newBatch makes a batch of items, which it copies.
func (s *Streamer) newBatch(items []item, suspect bool) *batch {
	b := s.spareBatch()
	b.items = append(b.items, items...)
	b.suspect = suspect
	return s.sealBatch(b)
}

// spareBatch returns an empty batch, reusing one that was answered when it
// can: at a few thousand batches a second their item lists are most of
// what the batcher allocates.
func (s *Streamer) spareBatch() *batch {
	if b, ok := s.batches.Get().(*batch); ok {
		return b
	}
	return &batch{items: make([]item, 0, s.cfg.BatchSize), data: make([][]byte, 0, s.cfg.BatchSize)}
}

// sealBatch numbers b and lists its items' bytes for the wire. Its items
// come from the queue, or from a batch looked at since the last conviction:
// none is on the poison list (see purgeLocked).
func (s *Streamer) sealBatch(b *batch) *batch {
	b.id = s.batchID.Add(1)
	b.cleanGen = s.poison.gen.Load()
	b.data = b.data[:0]
	for i := range b.items {
		b.data = append(b.data, b.items[i].data)
	}
	return b
}

// recycle keeps b for another batch. Nothing may refer to it any more: it
// has been answered and its worker is done with its bytes.
func (s *Streamer) recycle(b *batch) {
	clear(b.items)
	clear(b.data)
	*b = batch{items: b.items[:0], data: b.data[:0]}
	s.batches.Put(b)
}

// pruneLocked answers the items of a formed batch that must not run any
// more and reports whether any are left. A piece of a hunt for a bad item
// (a suspect batch) keeps them all and runs whole, its callers gone or
// late: were it cut short, the hunt would find nothing, and a client whose
// bad items come with deadlines too short for their hunts would have the
// deaths they cause counted against the model until every slot was given
// up. Their answers are dropped as those of any item answered late (see
// onResult). But not once the streamer drains: its verdict would go with
// the process, and the drain would wait for it (see abandonHuntsLocked).
// It requires that s.mu is held.
func (s *Streamer) pruneLocked(b *batch, now time.Time) bool {
	if b.suspect && !s.draining.Load() {
		return len(b.items) > 0
	}
	kept := b.items[:0]
	for _, it := range b.items {
		if it.fut.gone() || it.fut.expired(now) {
			s.drop(it, now)
			continue
		}
		kept = append(kept, it)
	}
	if len(kept) == len(b.data) {
		return true
	}
	clear(b.items[len(kept):])
	b.items = kept
	b.data = b.data[:len(kept)]
	for i := range kept {
		b.data[i] = kept[i].data
	}
	return len(kept) > 0
}

// checkTimeouts kills the workers whose running batch is past WorkerTimeout,
// not counting the time the supervisor stalled meanwhile (see stallClock).
// It requires that s.mu is held.
func (s *Streamer) checkTimeouts(now time.Time, earlier func(time.Time)) {
	stalled := time.Duration(-1) // looked at once, for the first batch running
	// Over both lists without joining them: this runs on every dispatch.
	for _, slots := range [...][]*slot{s.slots, s.retiring} {
		for _, sl := range slots {
			if (sl.state != SlotReady && sl.state != SlotDraining) || len(sl.inflight) == 0 {
				continue
			}
			if stalled < 0 {
				stalled = s.stalledAt(now)
			}
			due := sl.headStart.Add(s.cfg.WorkerTimeout + stalled - sl.headStalled)
			if now.Before(due) {
				earlier(due)
				continue
			}
			sl.killLocked(fmt.Errorf("batch %d ran past the worker timeout of %s", sl.inflight[0].id, s.cfg.WorkerTimeout))
		}
	}
}

// checkAvailable tracks whether any worker can run. Once none has been able
// to for UnavailableAfter, queued items are failed and new ones refused, so
// callers get a quick error rather than a hang. It requires that s.mu is held.
func (s *Streamer) checkAvailable(now time.Time, earlier func(time.Time)) {
	for _, sl := range s.slots {
		if sl.state == SlotReady {
			s.downSince = time.Time{}
			s.unavail.Store(false)
			return
		}
	}
	if s.downSince.IsZero() {
		s.downSince = now
	}
	due := s.downSince.Add(s.cfg.UnavailableAfter)
	if now.Before(due) {
		earlier(due)
		return
	}
	switch {
	case s.unavail.Load():
	case !s.everReady.Load():
		// The first workers are slow to open their model: nothing failed.
		s.log.Info("the workers are still starting; refusing requests until one is ready", "for", now.Sub(s.downSince).Round(time.Millisecond))
	default:
		s.log.Error("no worker is able to run; refusing requests until one is ready", "for", now.Sub(s.downSince).Round(time.Millisecond))
	}
	s.unavail.Store(true)
	for _, sl := range s.slots {
		if sl.state == SlotStarting {
			// Admitted work waits for the worker coming up (bounded by
			// InitTimeout and the items' own deadlines).
			earlier(now.Add(s.cfg.UnavailableAfter))
			return
		}
	}
	err := fmt.Errorf("%w for %s%s", ErrUnavailable, now.Sub(s.downSince).Round(time.Millisecond), s.startFailureLocked())
	for _, it := range s.drainLocked() {
		s.complete(it, nil, err)
	}
}

// errHuntAbandoned is why a worker is killed as the streamer drains (see
// abandonHuntsLocked). Its death is no crash of its own: not counted, and
// logged as a stop.
var errHuntAbandoned = errors.New("it runs a piece of a hunt for a bad item that no caller waits for any more, and the server drains")

// abandonHuntsLocked kills, as the streamer drains, the workers that run
// a piece of a hunt for a bad item whose callers are all gone or late: no
// one waits for its answer, its verdict would go with the process, and a
// model hung on the item would hold the drain up to the worker timeout.
// The hunt ends there: its pieces queued are dropped, those of their
// items whose callers are gone or late (see pruneLocked), and its deaths
// but the first are forgiven (see pieceEndedLocked). One whose callers
// wait is looked at again once their deadlines have passed. It requires
// that s.mu is held.
func (s *Streamer) abandonHuntsLocked(now time.Time, earlier func(time.Time)) {
	// Those queued go now, not once a worker is there to take them: one
	// may be starting after the piece's death.
	s.queue.trimReady(func(b *batch) {
		if b.suspect && !s.pruneLocked(b, now) {
			s.pieceEndedLocked(b, false)
		}
	})
	for _, slots := range [...][]*slot{s.slots, s.retiring} {
		for _, sl := range slots {
			if len(sl.inflight) == 0 || !sl.inflight[0].suspect {
				continue
			}
			var last time.Time // the last deadline of a caller waiting; zero: one has none
			waited, timed := false, true
			for _, it := range sl.inflight[0].items {
				if it.fut.gone() || it.fut.expired(now) {
					continue
				}
				waited = true
				if d := it.fut.deadline; d.IsZero() {
					timed = false
				} else if d.After(last) {
					last = d
				}
			}
			switch {
			case !waited:
				sl.killLocked(errHuntAbandoned)
			case timed:
				earlier(last)
			}
		}
	}
}

// checkDrained reports, while draining, that nothing is queued or in
// flight, by closing s.drained once. It requires that s.mu is held.
func (s *Streamer) checkDrained() {
	if s.queue.items() > 0 {
		return
	}
	for _, slots := range [...][]*slot{s.slots, s.retiring} {
		for _, sl := range slots {
			if len(sl.inflight) > 0 {
				return
			}
		}
	}
	s.drainedOnce.Do(func() { close(s.drained) })
}

// Shutdown stops the streamer gracefully. It stops admitting work at once
// (Submit fails with ErrShuttingDown and Ready turns false), then waits for
// every admitted item to be answered, then stops the workers and waits for
// them to exit. If ctx ends first, the items still queued or running are
// answered with ErrShuttingDown, the workers are killed, and Shutdown
// returns ctx's error, once the answers a worker was delivering as it was
// killed are delivered (their OnDone callbacks run then: one that waits
// holds Shutdown up, which is why they must not). Either way every
// admitted item has been answered when Shutdown returns.
//
// Only the first call drains. Another call made while it runs waits for it
// to end, bounded by its own ctx, and returns nil (or its ctx's error); a
// call after it has ended returns nil at once. A Streamer that was never
// started is marked shut down: Start then fails.
//
// Shutdown does not close Config.InProcess: its owner does, once
// WaitModel has returned.
func (s *Streamer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	started := s.started.Load()
	s.mu.Unlock()
	if !started {
		// Start now refuses: it is shut down, for WaitModel too.
		if s.shutdownBegun.CompareAndSwap(false, true) {
			close(s.shutDown)
		}
		return nil
	}
	if s.shutdownBegun.CompareAndSwap(false, true) {
		err := s.shutdown(ctx)
		close(s.shutDown)
		return err
	}
	if isClosed(s.shutDown) {
		return nil
	}
	select {
	case <-s.shutDown:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the first shutdown: %w", ctx.Err())
	}
}

// WaitModel waits until Shutdown has returned and no call of
// Config.InProcess's Predict is running or can begin, and returns nil; or
// until ctx ends, with ctx's error. Once it returns nil the model may be
// closed. It matters when Shutdown abandoned calls (its ctx ended, or a
// batch ran past WorkerTimeout): a call that ignores its canceled context
// may still be running when Shutdown returns, and one whose goroutine had
// taken its batch just as it was killed may only then begin. With worker
// processes there are no such calls: WaitModel returns once Shutdown has.
func (s *Streamer) WaitModel(ctx context.Context) error {
	select {
	case <-s.shutDown:
	case <-ctx.Done():
		return fmt.Errorf("wait for shutdown: %w", ctx.Err())
	}
	s.modelIdleOnce.Do(func() {
		go func() {
			s.modelCalls.Wait()
			close(s.modelIdle)
		}()
	})
	select {
	case <-s.modelIdle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the model's calls: %w", ctx.Err())
	}
}

// shutdown is the first Shutdown's work.
func (s *Streamer) shutdown(ctx context.Context) error {
	s.signal()
	var err error
	select {
	case <-s.drained:
	case <-ctx.Done():
		err = fmt.Errorf("drain: %w", ctx.Err())
	}
	s.stopOnce.Do(func() { close(s.stopping) })
	s.mu.Lock()
	pending := s.drainLocked()
	// A Reload or SetWorkers adds no slot once stopping is closed.
	slots := s.allSlotsLocked()
	s.mu.Unlock()
	for _, it := range pending {
		s.complete(it, nil, ErrShuttingDown)
	}
	var wg sync.WaitGroup
	for _, sl := range slots {
		wg.Go(func() { sl.shutdown(err != nil) })
	}
	wg.Wait()
	// A batch given back by a worker as it was stopped (see onRecalled)
	// went back to the queue after the drain above.
	s.mu.Lock()
	pending = s.drainLocked()
	s.mu.Unlock()
	for _, it := range pending {
		s.complete(it, nil, ErrShuttingDown)
	}
	s.closeOnce.Do(func() { close(s.stopped) })
	s.dispatched.Wait()
	return err
}

// drainLocked empties the queue, formed batches included, and returns
// the items, which the caller answers: the hunts of the batches are over
// for them (see pieceEndedLocked). It requires that s.mu is held.
func (s *Streamer) drainLocked() []item {
	for _, b := range s.queue.ready {
		s.pieceEndedLocked(b, false)
	}
	return s.queue.drain()
}

// allSlotsLocked returns the slots taking batches and those draining, in a
// new slice. It requires that s.mu is held.
func (s *Streamer) allSlotsLocked() []*slot {
	return append(slices.Clone(s.slots), s.retiring...)
}

// worthWaking reports whether the dispatcher could send something now that
// queued items have arrived: some slot is idle, or one has room for a batch
// ahead, is not late while another is on time (see pickSlot), and a full
// batch is waiting. It saves a wake-up per item under load. It requires
// that s.mu is held.
func (s *Streamer) worthWaking() bool {
	full := s.queue.n >= s.cfg.BatchSize
	var now time.Time
	lateWithRoom := false
	for _, sl := range s.slots {
		if sl.state != SlotReady {
			continue
		}
		if len(sl.inflight) == 0 {
			return true
		}
		if full && len(sl.inflight) < s.cfg.PipelineDepth {
			if now.IsZero() {
				now = time.Now()
			}
			if !s.lateLocked(sl, now) {
				return true
			}
			lateWithRoom = true
		}
	}
	return lateWithRoom && !s.someSlotOnTime(now)
}

// otherSlotHasRoom reports whether a ready slot other than sl holds fewer
// batches than sl, and is not late (see pickSlot): the work should go
// there, through the dispatcher. It requires that s.mu is held.
func (s *Streamer) otherSlotHasRoom(sl *slot, now time.Time) bool {
	for _, other := range s.slots {
		if other != sl && other.state == SlotReady && len(other.inflight) < len(sl.inflight) && !s.lateLocked(other, now) {
			return true
		}
	}
	return false
}
