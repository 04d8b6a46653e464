package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/streamer-dev/streamer/internal/waitq"
	"github.com/streamer-dev/streamer/model"
)

// worker is one running worker behind a slot: a child process, or a
// goroutine in the in-process mode. Its results and its death reach the
// slot through slot.onResult and wait.
type worker interface {
	// send hands a batch over, as its send number b.sendSeq; it never
	// blocks for long: a slot holds at most PipelineDepth batches, and a
	// worker has room for them, a recall of each, and a stop. It requires
	// that s.mu is held.
	send(b *batch)
	// recall asks the worker to give back batch id, which it took (see
	// batch.onWire) but may not have started: it answers through
	// slot.onRecalled if it gave it back, and with its result otherwise.
	// A worker that takes a batch only to run it does nothing. It requires
	// that s.mu is held.
	recall(id uint64)
	// forget drops the order to run b, which the worker has not taken
	// (see batch.onWire) and was given back. It requires that s.mu is held.
	forget(b *batch)
	// stop asks the worker to exit once the batches it has are answered.
	stop()
	// kill ends the worker now; reason becomes the error wait returns.
	kill(reason error)
	// wait blocks until the worker has exited and says why.
	wait() error
	pid() int
	device() string
	// modelName names the model the worker serves, as its ready message
	// does; empty where the supervisor holds the model itself.
	modelName() string
}

// order is what a slot tells its worker, in turn: run batch b, sent as
// send seq (see batch.sendSeq); give back batch recall; or, when neither is
// set, stop.
type order struct {
	b      *batch
	seq    uint64
	recall uint64
}

// orders are what a slot told its worker and the worker's goroutine has not
// taken yet, oldest first. Putting one never blocks, as the slot puts them
// under the streamer's lock; and they never pile up: a slot holds at most
// PipelineDepth batches, each recalled at most once, and a batch given back
// before it was taken leaves them (see forgetOrder).
type orders = waitq.Queue[order]

// forgetOrder drops from q the order to run b, given back before it was
// taken.
func forgetOrder(q *orders, b *batch) { q.Remove(func(o order) bool { return o.b == b }) }

// result is a worker's answer to one batch. Its errors are the model's
// own in the in-process mode, so that callers can match them with
// errors.Is; from a worker process they are rebuilt from the pipe's text.
type result struct {
	id       uint64
	outputs  [][]byte
	itemErrs []error // one per item (nil for success), or nil
	expired  []int   // the items the worker found expired and did not run
	err      error   // the whole batch failed
}

// pipeError turns an error text a worker process sent into an error; ""
// is none.
func pipeError(text string) error {
	if text == "" {
		return nil
	}
	return errors.New(text)
}

// pipeErrors turns a worker process's item error texts into errors, nil
// where the text is "" (the item succeeded).
func pipeErrors(texts []string) []error {
	if texts == nil {
		return nil
	}
	errs := make([]error, len(texts))
	for i, text := range texts {
		errs[i] = pipeError(text)
	}
	return errs
}

// slot is one place for a worker: it keeps a worker running there,
// restarting it with back-off when it dies, on the same device.
type slot struct {
	s    *Streamer
	id   int
	cuda string // CUDA_VISIBLE_DEVICES for this slot's workers; "" leaves it alone
	// spec is the model this slot's workers open, restarted ones included,
	// set before its first worker starts and never changed: a slot takes a
	// new spec only by being replaced, by a Reload.
	spec model.Spec

	runDone chan struct{}
	// quit is closed, under s.mu, when the slot is retired (by Reload or
	// SetWorkers): it takes no new batches, its worker stops once those it
	// holds are answered, and no worker is started in it again.
	quit chan struct{}

	// Guarded by s.mu.
	state     SlotState
	w         worker
	inflight  []*batch // sent and not answered, oldest (running) first
	headStart time.Time
	// headStalled is the streamer's stalls counted at headStart (see
	// stallClock): those after it are no time the batch ran.
	headStalled time.Duration
	recent      []time.Time // restarts within RestartWindow
	failures    int         // crashes since the last answered batch
	// ran counts the batches its current worker answered: none, and the
	// batch it dies on was its first (see requeueLocked).
	ran     int
	lastErr string
	// startErr is why its last worker failed to start, until one is ready.
	startErr string
	tally    *slotTally    // the counts of every slot of its number
	initTime time.Duration // how long the current worker took to be ready
	// startBegan is when the start of the slot's next worker began; only
	// the goroutine starting it writes it (see startWorker).
	startBegan time.Time
	stopAsked  bool   // its retired worker was told to stop
	killed     worker // the worker killLocked killed, while it dies
	killedWhy  error  // why killLocked killed it
	ended      bool   // its run has returned
}

// slotTally counts what the slots numbered alike did: the one a Reload
// replaced and the one that took its place, or one that SetWorkers
// drained and a later one it started, count on where the other left off,
// so that the counts by slot number never go back. Guarded by
// Streamer.mu.
type slotTally struct {
	restarts, crashes int
	batches           uint64 // batches that reached the model
}

func newSlot(s *Streamer, id int) *slot {
	sl := &slot{s: s, id: id, state: SlotStarting, runDone: make(chan struct{}), quit: make(chan struct{})}
	s.mu.Lock()
	for len(s.tallies) <= id {
		s.tallies = append(s.tallies, &slotTally{})
	}
	sl.tally = s.tallies[id]
	sl.spec = s.spec
	s.mu.Unlock()
	if devs := s.cfg.Process.CUDADevices; len(devs) > 0 {
		sl.cuda = devs[id%len(devs)]
	}
	return sl
}

// status describes the slot. It requires that s.mu is held.
func (sl *slot) status() SlotStatus {
	st := SlotStatus{Slot: sl.id, State: sl.state, CUDA: sl.cuda, Restarts: sl.tally.restarts, InFlight: len(sl.inflight),
		LastErr: sl.lastErr, Batches: sl.tally.batches, Crashes: sl.tally.crashes}
	if sl.w != nil {
		st.PID, st.Device, st.Model = sl.w.pid(), sl.w.device(), sl.w.modelName()
		st.InitSeconds = sl.initTime.Seconds()
	}
	return st
}

// run keeps a worker alive in the slot until the streamer stops, the slot
// is retired, or the slot fails. It begins with w when w is not nil: a
// worker already started and made ready, by Reload or SetWorkers.
// Otherwise it starts one, and the outcome of that first start is sent on
// firstTry.
func (sl *slot) run(w worker, firstTry chan<- error) {
	defer close(sl.runDone)
	s := sl.s
	defer s.forgetRetired(sl)
	reported := w != nil
	report := func(err error) {
		if !reported {
			reported = true
			firstTry <- err
		}
	}
	for {
		if w == nil {
			if isClosed(s.stopping) || isClosed(sl.quit) {
				report(ErrShuttingDown)
				sl.setState(SlotStopped)
				return
			}
			var err error
			if w, err = sl.start(); err != nil {
				report(err)
				sl.noteCrash(err, startFailure(err), nil)
			} else {
				sl.setReady(w)
				report(nil)
			}
		}
		if w != nil {
			born := time.Now()
			sl.onExit(w, w.wait(), born)
			w = nil
		}
		if !sl.backoff() {
			return
		}
	}
}

// start starts a worker in the slot and waits until it is ready, or until
// the slot is retired: a reload or scaling that retires a slot whose worker
// is restarting (its model slow to open, or hung) waits for nothing.
func (sl *slot) start() (worker, error) {
	sl.setState(SlotStarting)
	w, err := sl.s.startWorker(sl.quit, sl)
	if errors.Is(err, errStartAbandoned) {
		err = errSlotRetired
	}
	switch {
	case err == nil:
	case isClosed(sl.s.stopping) || isClosed(sl.quit):
		// Stopped on the way, as asked: no failure of the worker.
		err = fmt.Errorf("slot %d: %w", sl.id, err)
		sl.s.log.Info("worker start given up: the slot is stopping", sl.logAttrs(nil, "err", err)...)
	default:
		err = fmt.Errorf("slot %d: %w", sl.id, err)
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			err = fmt.Errorf("%w (this process has no file descriptor left for the worker's pipes: raise its open-files limit, ulimit -n or systemd's LimitNOFILE=, or let in fewer connections; the slot retries, and is not given up for it)", err)
		}
		sl.s.log.Error("worker failed to start", sl.logAttrs(nil, "err", err)...)
		sl.s.mu.Lock()
		sl.startErr = err.Error()
		// A worker that dies as it starts died all the same: a slot
		// whose model crashes as it loads shows in the crashes.
		sl.tally.crashes++
		sl.s.mu.Unlock()
		sl.s.stats.crashes.Add(1)
	}
	return w, err
}

// logAttrs are the attributes of every lifecycle log line about the slot
// and its worker w (nil: none).
func (sl *slot) logAttrs(w worker, more ...any) []any {
	attrs := []any{"slot", sl.id}
	if w != nil {
		attrs = append(attrs, "pid", w.pid())
	}
	if sl.cuda != "" {
		attrs = append(attrs, "device", sl.cuda)
	}
	return append(attrs, more...)
}

// setState moves the slot to st; a retired slot stays draining until it
// stops.
func (sl *slot) setState(st SlotState) {
	sl.s.mu.Lock()
	if st == SlotStopped || !isClosed(sl.quit) {
		sl.state = st
	}
	sl.s.mu.Unlock()
}

func (sl *slot) setReady(w worker) {
	s := sl.s
	s.mu.Lock()
	sl.readyLocked(w)
	retired := isClosed(sl.quit) && sl.askStopLocked()
	s.mu.Unlock()
	s.signal()
	// A shutdown that began while this worker was starting found no worker
	// to stop (it looks at sl.w after closing stopping, this after setting
	// it); so did a retirement.
	switch {
	case isClosed(s.stopping):
		w.stop()
	case retired:
		sl.stopRetired(w)
	}
}

// readyLocked makes w the slot's worker, ready for batches unless the slot
// is retired. It requires that s.mu is held.
func (sl *slot) readyLocked(w worker) {
	s := sl.s
	sl.w = w
	sl.ran = 0
	sl.startErr = ""
	sl.initTime = time.Since(sl.startBegan)
	if !isClosed(sl.quit) {
		sl.state = SlotReady
		// A worker can run: Available says so at once, not at the
		// dispatcher's next look (see checkAvailable).
		s.downSince = time.Time{}
		s.unavail.Store(false)
	}
	s.everReady.Store(true)
	more := []any{"runs_on", w.device()}
	if name := w.modelName(); name != "" {
		more = append(more, "model", name)
	}
	s.log.Info("worker ready", sl.logAttrs(w, more...)...)
}

// sendLocked hands b to the slot's worker. It requires that s.mu is held.
func (sl *slot) sendLocked(b *batch, now time.Time) {
	if len(sl.inflight) == 0 {
		sl.headStart, sl.headStalled = now, sl.s.stalledAt(now)
	}
	sl.inflight = append(sl.inflight, b)
	sl.s.sends++
	b.sendSeq, b.onWire, b.recalling = sl.s.sends, false, false
	sl.w.send(b)
}

// takeCheck is what pruneForRun found of a batch a worker is about to take.
type takeCheck int

const (
	takeIt    takeCheck = iota // it is the worker's to run
	takeStale                  // it was given back since this send: pass it by
	takeDead                   // the worker no longer holds the slot
)

// pruneForRun answers the items of b that must not run any more, at the
// moment b goes to worker w rather than when it was formed: a batch formed
// ahead for a busy worker may wait a whole batch's time. It fills ttls with
// the time left of the items that remain, or returns nil ttls when none has
// a deadline. seq is the send it comes from. It reports takeDead, touching
// nothing, when w no longer holds the slot: b has been given back to the
// queue then, and is not w's to change; and takeStale when b was given back
// since (see recallLocked).
func (sl *slot) pruneForRun(w worker, b *batch, seq uint64, ttls []int64) ([]int64, takeCheck) {
	s := sl.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.w != w {
		return nil, takeDead
	}
	if b.sendSeq != seq {
		return nil, takeStale
	}
	b.onWire = true
	now := time.Now()
	// Formed before the last conviction, it may hold a copy of the item.
	s.cleanLocked(b)
	s.pruneLocked(b, now)
	if b.suspect {
		return nil, takeIt // it runs whole (see pruneLocked): no deadline goes with it
	}
	ttls = ttls[:0]
	timed := false
	for i := range b.items {
		var ttl int64
		if d := b.items[i].fut.deadline; !d.IsZero() {
			ttl, timed = max(int64(d.Sub(now)), 1), true
		}
		ttls = append(ttls, ttl)
	}
	if !timed {
		return nil, takeIt
	}
	return ttls, takeIt
}

// recallLocked takes back the batches sent ahead to the slot's worker,
// behind the one it runs: those it has not taken yet at once, and asks the
// worker for the others (see worker.recall). A batch given back goes to
// the front of the queue, for a worker on time. It requires that s.mu is
// held.
func (sl *slot) recallLocked() {
	for i := 1; i < len(sl.inflight); {
		if sl.recallAtLocked(i) {
			i++
		}
	}
}

// recallAtLocked takes back inflight[i], a batch sent ahead (i > 0): at
// once if the worker has not taken it yet, else by asking the worker for
// it. It reports whether the batch is still in flight, being asked for. It
// requires that s.mu is held.
func (sl *slot) recallAtLocked(i int) bool {
	b := sl.inflight[i]
	switch {
	case b.recalling:
		return true
	case b.onWire:
		b.recalling = true
		sl.w.recall(b.id)
		return true
	default:
		sl.giveBackLocked(i)
		return false
	}
}

// recallAbandonedLocked asks for the batches sent ahead whose callers have
// all left: given back, they are dropped as queued items are, counted
// canceled, and the worker runs the next batch instead of one nobody waits
// for. A batch of which some callers wait still runs, for them. Pieces of
// a hunt run whole, whoever waits. It requires that s.mu is held.
func (sl *slot) recallAbandonedLocked() {
	for i := 1; i < len(sl.inflight); i++ {
		b := sl.inflight[i]
		if b.onWire && !b.recalling && !b.suspect && !slices.ContainsFunc(b.items, stillWanted) {
			sl.recallAtLocked(i)
		}
	}
}

// stillWanted reports whether its caller still waits for its answer.
func stillWanted(it item) bool { return !it.fut.gone() }

// giveBackLocked takes the batch at inflight[i] from the slot, unrun, and
// queues it ahead of every other; or, once the streamer stops, answers its
// items with ErrShuttingDown. It requires that s.mu is held.
func (sl *slot) giveBackLocked(i int) {
	s := sl.s
	b := sl.inflight[i]
	sl.inflight = slices.Delete(sl.inflight, i, i+1)
	if !b.onWire {
		sl.w.forget(b)
	}
	if isClosed(s.stopping) {
		// The queue was drained for the stop: nothing would run it.
		s.pieceEndedLocked(b, false)
		for _, it := range b.items {
			s.complete(it, nil, ErrShuttingDown)
		}
		return
	}
	b.sendSeq, b.onWire, b.recalling, b.recalled = 0, false, false, true
	s.queue.requeue([]*batch{b})
}

// onRecalled takes back batch id, which w gave back unrun as asked. A
// worker that gives back a batch it was not asked for, or holds not,
// breaks the protocol.
func (sl *slot) onRecalled(w worker, id uint64) error {
	s := sl.s
	s.mu.Lock()
	i := slices.IndexFunc(sl.inflight, func(b *batch) bool { return b.id == id })
	if sl.w != w || i < 0 || !sl.inflight[i].recalling {
		s.mu.Unlock()
		return fmt.Errorf("worker gave back batch %d, which it was not asked to give back", id)
	}
	// Were it first in flight, the batch behind it, if any, began as it
	// would have, when the last answer came: headStart stays.
	sl.giveBackLocked(i)
	// Retired since it was asked, it may hold nothing now.
	drained := isClosed(sl.quit) && len(sl.inflight) == 0 && sl.askStopLocked()
	s.mu.Unlock()
	s.signal()
	if drained {
		sl.stopRetired(w)
	}
	return nil
}

// killLocked kills the slot's worker, if it has one, and takes no more
// batches for it. It requires that s.mu is held.
func (sl *slot) killLocked(reason error) {
	if sl.w != nil && sl.killed != sl.w {
		// Once: a retired slot stays draining while its worker dies,
		// and the dispatcher looks at it meanwhile.
		sl.killed, sl.killedWhy = sl.w, reason
		// No more batches for it while it dies.
		if !isClosed(sl.quit) {
			sl.state = SlotBackoff
		}
		sl.s.log.Warn("killing worker", sl.logAttrs(sl.w, "reason", reason)...)
		sl.w.kill(reason)
	}
}

// runningItems is the number of items of batch id if it is the batch w
// runs, the oldest in flight on the slot, or false if it is not: the
// parts of an answer are checked against it as they come, so that a
// worker cannot make the supervisor hold the parts of a batch it does not
// run, or more outputs than the batch has items.
func (sl *slot) runningItems(w worker, id uint64) (int, bool) {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	if sl.w != w || len(sl.inflight) == 0 || sl.inflight[0].id != id {
		return 0, false
	}
	return len(sl.inflight[0].items), true
}

// onResult settles the items of the batch w answered.
func (sl *slot) onResult(w worker, r result) {
	s := sl.s
	now := time.Now()
	s.mu.Lock()
	if sl.w != w || len(sl.inflight) == 0 || sl.inflight[0].id != r.id {
		s.mu.Unlock()
		w.kill(fmt.Errorf("worker answered batch %d, which is not the one it runs", r.id))
		return
	}
	b := sl.inflight[0]
	sl.inflight = append(sl.inflight[:0], sl.inflight[1:]...)
	s.pieceEndedLocked(b, len(b.items) > len(r.expired))
	s.probeEndedLocked(b)
	probe := len(b.items) == 1 && b.items[0].probe
	stalled := s.stalledAt(now)
	if ran := len(b.items) - len(r.expired); ran > 0 && r.err == nil && stalled == sl.headStalled {
		// A batch through which the supervisor stalled took longer than
		// it ran: its time says nothing of the model's cost.
		s.cost.observe(ran, now.Sub(sl.headStart))
	}
	if s.cfg.Batching == BatchingAdaptive && !probe { // no caller comes back from a probe
		if fixed, _, ok := s.cost.line(); ok {
			s.returns.reach = fixed / 2
		}
		s.returns.answered(now, len(b.items))
	}
	started := sl.headStart
	if len(b.items) > len(r.expired) {
		sl.tally.batches++ // as stats.batches: only batches that reached the model
		s.addAnswerLocked(b, r.expired)
	}
	s.returned++
	sl.headStart, sl.headStalled = now, stalled
	sl.failures = 0
	sl.ran++
	retired := isClosed(sl.quit)
	// Refill this worker's pipeline here rather than wait for the dispatcher
	// goroutine to be scheduled: for a fast model that wait is the bottleneck.
	if !retired && !s.otherSlotHasRoom(sl, now) {
		if next := s.nextBatch(sl, now, func(time.Time) {}); next != nil {
			sl.sendLocked(next, now)
		}
	}
	drained := retired && len(sl.inflight) == 0 && sl.askStopLocked()
	s.mu.Unlock()
	s.signal()
	if drained {
		sl.stopRetired(w)
	}

	if probe {
		// Its answer only lifted the doubt (see probeLocked): no caller
		// waits for it, and no count tells of it but the batch's.
		s.stats.batches.Add(1)
		if len(s.stats.batchSizes) > 1 {
			s.stats.batchSizes[1].Add(1)
		}
		b.items[0].fut.complete(0, nil, nil)
		s.recycle(b)
		return
	}
	s.observeLatency(b, r.expired, started, now)
	if n := len(b.items) - len(r.expired); n > 0 {
		// Only batches that reached the model count.
		s.stats.batches.Add(1)
		if n < len(s.stats.batchSizes) {
			s.stats.batchSizes[n].Add(1)
		}
	}
	// Counted per batch rather than per item, as complete would: these
	// counters are shared by every core. And counted first, as complete
	// does, so that a caller woken by its answer finds it counted.
	batchErr := checkResult(r, len(b.items))
	var ok, failed, late, left int
	expired := r.expired
	// Whether an item is late is read now, as its caller is woken, not
	// as the answer came: a caller whose deadline passed meanwhile (the
	// next batch sent, the latencies noted) had its ErrDeadline, and its
	// item must count expired, not answered well.
	now = time.Now()
	// A piece of a hunt ran though its callers may have left (see
	// pruneLocked): those are counted canceled, as they would have been.
	suspect := b.suspect
	for i, it := range b.items {
		switch {
		case len(expired) > 0 && expired[0] == i:
			expired = expired[1:]
		case it.fut.expired(now):
			late++ // its caller had its ErrDeadline by now
		case suspect && it.fut.gone():
			left++
		case batchErr != nil || r.itemErrs != nil && r.itemErrs[i] != nil:
			failed++
		default:
			ok++
		}
	}
	s.stats.answered.Add(uint64(len(b.items)))
	if ok > 0 {
		s.stats.ok.Add(uint64(ok))
	}
	if failed > 0 {
		s.stats.failed.Add(uint64(failed))
	}
	if n := len(r.expired) + late; n > 0 {
		s.stats.expired.Add(uint64(n))
	}
	if left > 0 {
		s.stats.canceled.Add(uint64(left))
	}
	expired = r.expired
	s.answering.Add(1)
	defer func() {
		s.answered.Add(1)
		s.answering.Add(-1)
	}()
	for i, it := range b.items {
		switch {
		case len(expired) > 0 && expired[0] == i:
			expired = expired[1:]
			it.fut.complete(int(it.index), nil, fmt.Errorf("%w: expired before its worker ran it", ErrDeadline))
		case it.fut.expired(now):
			// Counted as expired above: its caller's wait ends at the
			// deadline, and the answer says so whenever it is read.
			it.fut.complete(int(it.index), nil, fmt.Errorf("%w: answered %s after it", ErrDeadline, now.Sub(it.fut.deadline).Round(time.Millisecond)))
		case suspect && it.fut.gone():
			it.fut.complete(int(it.index), nil, ErrCanceled)
		case batchErr != nil:
			it.fut.complete(int(it.index), nil, batchErr)
		case r.itemErrs != nil && r.itemErrs[i] != nil:
			it.fut.complete(int(it.index), nil, fmt.Errorf("%w: %w", ErrModel, r.itemErrs[i]))
		default:
			it.fut.complete(int(it.index), r.outputs[i], nil)
		}
	}
	s.recycle(b)
}

// checkResult returns the error that fails the whole batch, if any.
func checkResult(r result, n int) error {
	switch {
	case r.err != nil:
		return fmt.Errorf("%w: %w", ErrModelFailed, r.err)
	case len(r.outputs) != n:
		return fmt.Errorf("%w: it returned %d outputs for a batch of %d", ErrModelFailed, len(r.outputs), n)
	case r.itemErrs != nil && len(r.itemErrs) != n:
		return fmt.Errorf("%w: it returned %d item errors for a batch of %d", ErrModelFailed, len(r.itemErrs), n)
	}
	return nil
}

// onExit deals with a worker that has exited: its batches are run again
// elsewhere, except for an item that was alone in a batch that killed
// workers, whose hunt is over: poison, or a model that crashes on
// everything (see judgeLocked).
func (sl *slot) onExit(w worker, exitErr error, born time.Time) {
	s := sl.s
	s.mu.Lock()
	batches := sl.inflight
	sl.inflight = nil
	sl.w = nil
	stopping := isClosed(s.stopping)
	retired := isClosed(sl.quit)
	if stopping || retired {
		sl.state = SlotStopped
	} else {
		sl.state = SlotBackoff
	}
	var settled []settledItem
	var hunt *firstCrash
	cause := crashUnexplained
	wanting := noResources(exitErr)
	if wanting {
		cause = crashNoResources // see below, for the batches it held
	}
	inFlight := len(batches)
	copies := 0
	// Killed by the server as it drains, for a hunt nobody waits for (see
	// abandonHuntsLocked): no crash of the worker's own.
	abandoned := sl.killed == w && errors.Is(sl.killedWhy, errHuntAbandoned)
	if !stopping && !(retired && inFlight == 0) && !abandoned {
		sl.tally.crashes++ // not a drained worker leaving as asked (see below)
	}
	if !stopping && len(batches) > 0 {
		copies = s.cleanLocked(batches[0])
		for _, b := range batches[1:] {
			s.cleanLocked(b)
		}
		switch {
		case copies > 0:
			// An item convicted already explains the death: its copies
			// failed, its batch-mates run again, and nothing counts.
			cause = crashPoisonKnown
			s.queue.requeue(slices.DeleteFunc(batches, func(b *batch) bool { return len(b.items) == 0 }))
		case wanting && batches[0].wantReruns < maxWantReruns:
			// The machine's want, as a rule (a limit of processes that
			// leaves the worker no thread), not an item's: the batches
			// run again whole, with no hunt, and nothing counts. But an
			// item may be what takes the threads: a batch whose workers
			// die so again is hunted, as after any crash.
			cause = crashNoResources
			batches[0].wantReruns++
			s.queue.requeue(slices.DeleteFunc(batches, func(b *batch) bool { return len(b.items) == 0 }))
		case len(batches[0].items) == 1 && batches[0].items[0].probe:
			// The model crashed on an item it answered before (see
			// probeLocked): the death is the model's.
			cause = crashProbe
			s.probeEndedLocked(batches[0])
			s.record.add(runRecord{died: true})
			s.complete(batches[0].items[0], nil, ErrModelFailed)
			s.queue.requeue(batches[1:])
		default:
			cause = crashFirstOfBatch
			if batches[0].suspect {
				cause = crashHunting
			} else {
				batches[0].crash = s.newHuntLocked(sl, batches[0])
			}
			hunt = batches[0].crash
			s.record.add(runRecord{died: true, hunt: hunt})
			settled = sl.requeueLocked(batches, sl.ran == 0)
		}
		batches = nil
	}
	for _, b := range batches {
		s.pieceEndedLocked(b, false) // answered below, with ErrShuttingDown
	}
	s.mu.Unlock()
	if stopping {
		for _, b := range batches {
			for _, it := range b.items {
				s.complete(it, nil, fmt.Errorf("%w: the worker stopped", ErrShuttingDown))
			}
		}
		s.log.Info("worker stopped", sl.logAttrs(w, "reason", "shutdown", "err", exitErr, "batches_in_flight", inFlight)...)
		return
	}
	if retired && inFlight == 0 {
		// A drained worker leaving as asked, or dying with nothing to lose.
		s.log.Info("worker stopped", sl.logAttrs(w, "reason", "retired", "err", exitErr)...)
		s.signal()
		return
	}
	if time.Since(born) >= s.cfg.StableAfter {
		sl.setFailures(0)
	}
	if abandoned {
		s.log.Info("worker stopped", sl.logAttrs(w, "reason", errHuntAbandoned, "err", exitErr, "batches_in_flight", inFlight)...)
	} else {
		s.stats.crashes.Add(1)
		s.log.Error("worker died", sl.logAttrs(w, "err", exitErr, "batches_in_flight", inFlight)...)
	}
	switch {
	case copies > 0:
		s.log.Warn("the worker ran a copy of an item convicted as poison; its death is not counted", sl.logAttrs(w, "copies", copies)...)
	case cause == crashProbe:
		s.log.Warn("the model crashed on an item it answered before: it crashes whatever it runs, and the item that crashed workers after the last one convicted is not to blame", "slot", sl.id)
	}
	sl.noteCrash(exitErr, cause, hunt)
	for _, st := range settled {
		if st.poison {
			s.log.Error("poison item isolated", sl.logAttrs(w, "crashes", st.it.crashes, "alone", st.it.aloneCrashes, "copies_failed", st.copies,
				"item_bytes", len(st.it.data), "item_sha256", itemDigest(st.it.data), "err", exitErr)...)
		} else {
			// Its error says which: the model crashes on every batch, or
			// on too many of the few seen, to take the item for poison.
			// A model that crashes on every batch fails each of its items
			// so: held back when they repeat.
			s.failedItems.Log(s.log, slog.LevelError, "not taken for poison", "item failed, not taken for poison: the model is not seen sound enough to blame it",
				sl.logAttrs(w, "crashes", st.it.crashes, "alone", st.it.aloneCrashes, "why", st.err, "err", exitErr)...)
		}
		s.complete(st.it, nil, fmt.Errorf("%w (last: %v)", st.err, exitErr))
	}
	s.signal()
}

// settledItem is an item whose hunt is over: poison, or failed as the
// model's fault, with the error that says which.
type settledItem struct {
	it     item
	err    error
	poison bool
	copies int // the item's copies that its conviction failed (see convictLocked)
}

// requeueLocked puts the batches of a dead worker back in front of the
// queue. The first was running when the worker died: it is split in halves,
// each run alone, so that the item that kills workers is narrowed down; a
// lone item is judged (see judgeLocked), and run alone again, or settled,
// its copies failed with it when it is convicted; one with no item left
// (they expired as it was sent) is dropped, as no item can be to blame.
// The others never started and go back as they were. first says that the
// first was the first batch of the worker that died. It requires that
// s.mu is held.
func (sl *slot) requeueLocked(batches []*batch, first bool) (settled []settledItem) {
	s := sl.s
	head := batches[0]
	for i := range head.items {
		head.items[i].crashes++
		if len(head.items) == 1 {
			head.items[i].aloneCrashes++
			head.items[i].crashedFresh = head.items[i].crashedFresh || first
		}
	}
	var again []*batch
	convicted, probe := false, false
	switch len(head.items) {
	case 0:
		s.pieceEndedLocked(head, false)
	case 1:
		// Items queued count as waiting work: while no worker runs, none
		// is formed into a batch.
		v, err := s.judgeLocked(&head.items[0], head.crash, len(batches) > 1 || len(s.queue.ready) > 0 || s.queue.n > 0)
		switch v {
		case verdictUnsure:
			head.suspect = true
			again = append(again, head)
		case verdictWait, verdictProbe:
			head.suspect = true
			head.items[0].deferred = true
			head.deferredAt = s.record.answers
			s.queue.requeueLast(head)
			probe = v == verdictProbe
		default:
			settled = append(settled, settledItem{it: head.items[0], err: err, poison: v == verdictPoison})
			s.huntOverLocked(head.crash, v == verdictModel)
			s.pieceEndedLocked(head, true)
			convicted = v == verdictPoison
		}
	default:
		hunt := head.crash
		half := len(head.items) / 2
		again = append(again,
			s.newBatch(head.items[:half], true),
			s.newBatch(head.items[half:], true))
		again[0].crash, again[1].crash = hunt, hunt
		hunt.pieces += 2
		s.pieceEndedLocked(head, true)
	}
	again = append(again, batches[1:]...)
	s.queue.requeue(again)
	if probe {
		s.probeLocked()
	}
	if convicted {
		// Once the batches are back, so that copies in them fail too.
		st := &settled[len(settled)-1]
		st.copies = s.convictLocked(s.hashOf(&st.it))
	}
	return settled
}

func (sl *slot) setFailures(n int) {
	sl.s.mu.Lock()
	sl.failures = n
	sl.s.mu.Unlock()
}

// crashCause says how much a worker's death says about the slot's health.
type crashCause int

const (
	// crashUnexplained: it failed to start, or died with no batch in flight.
	// The back-off grows: something is wrong with the worker itself.
	crashUnexplained crashCause = iota
	// crashFirstOfBatch: it died running a batch that had not killed a
	// worker before. The batch is split and retried; the worker restarts at
	// once, but the death counts towards MaxRestarts.
	crashFirstOfBatch
	// crashHunting: it died running a piece of a batch that already killed
	// a worker. The hunt for the bad item is bounded (about log2 of the
	// batch size, and maxAloneCrashes runs alone), so it does not slow the
	// restart; the death counts towards MaxRestarts once the hunt is over,
	// unless it found a bad item (see huntOverLocked).
	crashHunting
	// crashModelChanged: it refused to start because the model changed
	// since the slot's spec was made (ErrModelChanged). The back-off grows,
	// but it never counts towards MaxRestarts: the slot must keep trying
	// until a Reload or the old file put back, not give up and, with every
	// slot alike, end the server in the middle of an ordinary deploy.
	crashModelChanged
	// crashNoResources: it could not be started for want of what the
	// supervisor itself needs to start a process (file descriptors for its
	// pipes, a process slot, memory: see noResources). Not the model's
	// doing: the back-off grows, but it never counts towards MaxRestarts,
	// so that clients holding every descriptor for a while do not have
	// every slot given up and the server end.
	crashNoResources
	// crashProbe: it died running the probe of the model, an item the
	// model answered before (see Streamer.probeLocked). The death is the
	// model's: it counts towards MaxRestarts, and the worker restarts at
	// once.
	crashProbe
	// crashPoisonKnown: it died running a batch that held a copy of an item
	// convicted as poison, admitted before the conviction and sent before
	// it could be taken out. The item explains the death: the worker
	// restarts at once, and the death never counts towards MaxRestarts.
	crashPoisonKnown
)

// maxWantReruns is how many times a batch runs again whole, no item
// hunted, after its worker died for want of the machine's resources.
const maxWantReruns = 2

// startFailure is the cause of a worker's failure to start.
func startFailure(err error) crashCause {
	switch {
	case errors.Is(err, ErrModelChanged):
		return crashModelChanged
	case noResources(err):
		return crashNoResources
	}
	return crashUnexplained
}

// noResources says whether err, a worker's failure to start, is the
// supervisor's want of a resource of its own: a file descriptor (EMFILE,
// ENFILE), a process (EAGAIN), memory (ENOMEM).
func noResources(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.EAGAIN, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// forgiveLocked takes the first death of a hunt that found a bad item
// out of the slot's restarts, if workers have returned batches since it:
// the item explains the death, and the model answers other items; or if
// the item found is a copy of one convicted before (see explainLocked),
// whose conviction asked that of the model already. Without
// it, a client sending a few items that crash the model, in batches of
// other callers' items, had the server give up every slot and exit. A model
// that crashes on every item returns no batch, and its deaths still count.
// It requires that s.mu is held.
func (s *Streamer) forgiveLocked(c *firstCrash) {
	if c == nil || c.forgiven || c.at.IsZero() || s.returned == c.returned && !c.byCopy {
		return
	}
	c.forgiven = true
	recent := c.slot.recent
	if i := slices.Index(recent, c.at); i >= 0 {
		c.slot.recent = slices.Delete(recent, i, i+1)
	}
}

// noteCrash records a failed start or a death, for back-off and for the
// restart budget. hunt is the hunt the death was part of, if any: its
// first death gets its place in the budget (see forgiveLocked), and a
// later one waits for the hunt's verdict (see huntOverLocked), counting
// at once only if the hunt blamed the model already, or ended without a
// verdict (see pieceEndedLocked): its pieces may have been answered
// elsewhere before this death is noted.
func (sl *slot) noteCrash(err error, cause crashCause, hunt *firstCrash) {
	s := sl.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cause == crashUnexplained || cause == crashModelChanged || cause == crashNoResources {
		sl.failures++
	}
	if err != nil {
		sl.lastErr = err.Error()
	}
	if cause == crashModelChanged || cause == crashNoResources || cause == crashPoisonKnown {
		return
	}
	if cause == crashHunting {
		switch {
		case hunt.explained:
			return
		case !hunt.blamed:
			hunt.pending = append(hunt.pending, pendingDeath{slot: sl, at: now})
			return
		}
	}
	kept := sl.recent[:0]
	for _, t := range sl.recent {
		if now.Sub(t) < s.cfg.RestartWindow {
			kept = append(kept, t)
		}
	}
	sl.recent = append(kept, now)
	if cause == crashFirstOfBatch {
		hunt.at = now
		// The hunt may have found its bad item already, between the
		// death's requeue and this note (the lock is let go between
		// them): its forgiveness, which found nothing to take back
		// then, takes this death back now.
		if hunt.explained {
			s.forgiveLocked(hunt)
		}
	}
}

// backoff waits before the next start. It returns false when the slot must
// not start again: the streamer is stopping, or the slot's worker died
// more than MaxRestarts times within RestartWindow (once more after as
// many restarts). That is checked here, after a
// death or a failed start, and nowhere else: deaths that a hunt counts
// when it ends (see huntOverLocked) give a slot up at its next one. A slot
// whose worker stopped with the streamer is not given up, whatever its
// count: it was not restarting.
func (sl *slot) backoff() bool {
	s := sl.s
	s.mu.Lock()
	if isClosed(sl.quit) || isClosed(s.stopping) {
		sl.state = SlotStopped
		s.mu.Unlock()
		return false
	}
	if len(sl.recent) > s.cfg.MaxRestarts {
		sl.state = SlotFailed
		allFailed := s.allFailedLocked()
		lastErr := sl.lastErr
		s.mu.Unlock()
		s.log.Error("slot is crash-looping; giving up on it", sl.logAttrs(nil, "deaths", len(sl.recent), "window", s.cfg.RestartWindow, "err", lastErr)...)
		s.signal()
		if allFailed {
			s.giveUp(lastErr, len(sl.recent))
		}
		return false
	}
	delay := s.cfg.BackoffMin << min(max(sl.failures-1, 0), 20)
	if delay > s.cfg.BackoffMax || delay <= 0 {
		delay = s.cfg.BackoffMax
	}
	// After a failed start too, which left it starting: a slot said to
	// be starting keeps the queue waiting for its worker (checkAvailable),
	// and a request admitted with no deadline waited as long as the
	// failures went on.
	sl.state = SlotBackoff
	sl.tally.restarts++
	restarts, lastErr := sl.tally.restarts, sl.lastErr
	s.mu.Unlock()
	// The dispatcher looks now: with no worker able to run for
	// UnavailableAfter, the queue is failed while the slot waits here,
	// not only should a look of its own fall in this wait. Before, a
	// model slower to fail its start than the backoff left queued callers
	// waiting past UnavailableAfter, to their deadlines.
	s.signal()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		s.log.Info("restarting worker", sl.logAttrs(nil, "restarts", restarts, "after", delay, "reason", lastErr)...)
		return true
	case <-s.stopping:
		sl.setState(SlotStopped)
		return false
	case <-sl.quit:
		sl.setState(SlotStopped)
		return false
	}
}

// allFailedLocked reports whether every slot taking batches has been
// given up (SlotFailed): none will run anything again. It requires that
// s.mu is held.
func (s *Streamer) allFailedLocked() bool {
	for _, sl := range s.slots {
		if sl.state != SlotFailed {
			return false
		}
	}
	return len(s.slots) > 0
}

// giveUp tells the owner, through Fatal, once, that every slot has been
// given up, the last of them after deaths within the window, for lastErr.
func (s *Streamer) giveUp(lastErr string, deaths int) {
	s.fatalOnce.Do(func() {
		s.fatal <- fmt.Errorf("every slot given up: the last one's worker died %d times within %s, past the %d restarts allowed; last error: %s", deaths, s.cfg.RestartWindow, s.cfg.MaxRestarts, lastErr)
	})
}

// shutdown stops the slot's worker (gently unless kill) and waits for the
// slot to end.
func (sl *slot) shutdown(kill bool) {
	s := sl.s
	s.mu.Lock()
	w := sl.w
	s.mu.Unlock()
	if w != nil {
		if kill {
			w.kill(ErrShuttingDown)
		} else {
			w.stop()
		}
	}
	select {
	case <-sl.runDone:
		return
	case <-time.After(s.cfg.Process.StopTimeout):
	}
	s.mu.Lock()
	w = sl.w // it may have come up since
	s.mu.Unlock()
	if w != nil {
		s.log.Warn("worker did not stop in time; killing it", sl.logAttrs(w, "reason", "shutdown")...)
		w.kill(errors.New("did not stop in time"))
	}
	<-sl.runDone
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
