package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/streamer-dev/streamer/model"
)

// Errors of Reload and SetWorkers.
var (
	// ErrBusy: a Reload or SetWorkers is already running; only one runs at
	// a time (HTTP 409).
	ErrBusy = errors.New("a reload or scaling of the workers is already running")
	// ErrStartFailed: a worker started by Reload or SetWorkers did not
	// become ready; the error wrapping it names the slot and says why
	// (HTTP 500).
	ErrStartFailed = errors.New("new worker failed to start")
	// ErrNotStarted: Reload or SetWorkers was called before Start, or
	// before any worker was ever ready (HTTP 503).
	ErrNotStarted = errors.New("supervisor: not started: no worker has been ready yet")
)

// Workers is the number of slots that take batches, as Config.Workers
// set it or SetWorkers since; slots still draining after a Reload or
// SetWorkers are not counted.
func (s *Streamer) Workers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.slots)
}

// Model is the model spec the newest workers open: ProcessConfig.Model, or
// what ProcessConfig.Refresh made of it for the last Reload that replaced
// a worker. A Reload that failed part of the way leaves the slots it did
// not reach on the spec they had.
func (s *Streamer) Model() model.Spec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spec
}

// Reload replaces every slot's worker by a freshly started one, a slot at
// a time, so that the workers open their model again (after the model
// file or the plugin binary changed on disk) while the others keep
// serving. For each slot it starts a new worker on the slot's device and
// waits until it is ready; then the slot's new batches go to the new
// worker, the old one answers those it holds and stops, and once it has
// exited the next slot's turn comes. No admitted item is lost, and the
// number of workers able to run never drops.
//
// A new worker that fails to start (its model does not initialise, it
// crashes, it fails the handshake) ends the reload there: the slots not
// yet reached keep their old workers, those done keep their new ones, and
// Reload returns an error naming the slot, wrapping ErrStartFailed and
// the worker's own error.
//
// Before the first new worker starts, ProcessConfig.Refresh, when set,
// makes the spec the new workers open (a model file's checksum read
// again); the slots not yet replaced, and their workers restarted after a
// crash meanwhile, keep the spec they had. A Refresh that fails ends the
// Reload before any worker is replaced, with its error.
//
// A Reload that replaced every worker forgets the items found to be poison
// (see ErrPoison): the model they crashed may be mended. Each slot it
// replaces forgets the batches the model answered and crashed on lately,
// by which an item crashing workers alone is judged: new weights that
// crash on every batch are not to have innocent items convicted on the
// old weights' answers.
//
// Only one Reload or SetWorkers runs at a time: another call fails at once
// with ErrBusy. Reload before Start, or before any worker was ever
// ready, fails with ErrNotStarted, and after
// Shutdown began with ErrShuttingDown; a Shutdown that begins during a
// Reload ends it with ErrShuttingDown. When ctx ends, Reload returns ctx's
// error: a worker it was starting is stopped, an old worker that was
// draining finishes its batches and stops on its own, and the slots not
// reached keep their workers.
//
// In the in-process mode there is nothing to open again: Reload goes
// through the same steps with new goroutines calling the same
// Config.InProcess model, which callers cannot tell from before.
func (s *Streamer) Reload(ctx context.Context) error {
	release, err := s.beginChange()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	defer release()
	n := s.Workers()
	began := time.Now()
	s.log.Info("reload begun", "workers", n)
	spec, err := s.refreshSpec(ctx)
	if err != nil {
		s.reloadFailed(err, "err", err)
		return err
	}
	for i := range n {
		if err := s.reloadSlot(ctx, i, spec); err != nil {
			if errors.Is(err, ErrShuttingDown) {
				// Cut short, as the shutdown must: not a failure of the
				// model, to count or to report as the last reload error.
				s.log.Info("reload stopped: shutting down", "slot", i)
				return fmt.Errorf("reload: %w", err)
			}
			s.reloadFailed(err, "slot", i, "err", err)
			return err
		}
	}
	s.stats.reloads.Add(1)
	// The items that crashed the old model may not crash the new one.
	s.poison.clear()
	s.log.Info("reload done", "workers", n, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// refreshSpec is the spec a Reload's workers open: what
// ProcessConfig.Refresh makes of the newest one, or the newest one itself.
func (s *Streamer) refreshSpec(ctx context.Context) (model.Spec, error) {
	spec := s.Model()
	if s.cfg.InProcess != nil || s.cfg.Process.Refresh == nil {
		return spec, nil
	}
	fresh, err := s.cfg.Process.Refresh(ctx, spec)
	if err != nil {
		return model.Spec{}, fmt.Errorf("reload: read the model %s again: %w", spec.Runner, err)
	}
	if err := checkSpec(fresh); err != nil {
		return model.Spec{}, fmt.Errorf("reload: the refreshed model spec: %w", err)
	}
	return fresh, nil
}

// reloadFailed logs and counts a Reload that failed with err.
func (s *Streamer) reloadFailed(err error, attrs ...any) {
	s.log.Error("reload failed", attrs...)
	s.stats.reloadFailures.Add(1)
	msg := err.Error()
	s.stats.lastReloadError.Store(&msg)
}

// freshSlotLocking starts a slot numbered i whose workers open spec, with
// a worker of its own, ready, and returns with s.mu held, unless the
// streamer refuses changes by then (the worker is discarded and s.mu not
// held) or the start failed.
func (s *Streamer) freshSlotLocking(ctx context.Context, i int, spec model.Spec) (*slot, worker, error) {
	fresh := newSlot(s, i)
	fresh.spec = spec
	w, err := s.startSpare(ctx, fresh)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if err := s.changeRefusedLocked(); err != nil {
		s.mu.Unlock()
		discard(w, err)
		return nil, nil, err
	}
	return fresh, w, nil
}

// reloadSlot gives slot i a new worker opening spec, drains the old one
// and waits for it to exit.
func (s *Streamer) reloadSlot(ctx context.Context, i int, spec model.Spec) error {
	fresh, w, err := s.freshSlotLocking(ctx, i, spec)
	if err != nil {
		return err
	}
	old := s.slots[i]
	oldAttrs := oldWorkerAttrs(old.w)
	s.slots[i] = fresh
	s.spec = spec
	// The crash rate the hunts judge by was the old model's: the new one
	// may crash on everything the old one answered, and would have its
	// deaths put down to innocent items.
	s.record.reset()
	s.canary.data = nil // the new model may not answer it
	fresh.readyLocked(w)
	stop := s.retireLocked(old)
	s.mu.Unlock()
	s.log.Info("worker replaced", fresh.logAttrs(w, oldAttrs...)...)
	go fresh.run(w, nil)
	if stop != nil {
		old.stopRetired(stop)
	}
	s.signal()
	return waitRetired(ctx, old)
}

// SetWorkers changes the number of slots to n, at least 1. New slots are
// numbered on from the last, open the spec Model returns, and slot i's
// workers run on ProcessConfig.CUDADevices[i % len], as at Start; SetWorkers starts
// their workers one at a time and waits until each is ready. Slots beyond
// n, the last ones, are drained: they take no new batches, their workers
// answer the batches they hold, then stop; SetWorkers waits until they
// have exited. No admitted item is lost. Config.MaxQueue stays what New
// made of it.
//
// The slots drained are the last ones whatever their state: a slot given
// up (SlotFailed) is not drained in the place of a later one, so that
// every slot keeps its number and its device. When the slots left have
// all been given up, nothing can run any more, and Fatal says so, as when
// the last slot is given up.
//
// A new worker that fails to start ends the scaling there, with an error
// naming the slot and wrapping ErrStartFailed; the slots started before
// it keep running. Only one Reload or SetWorkers runs at a time, with the
// same errors as Reload's; when ctx ends, SetWorkers returns ctx's error,
// and the slots it was draining finish their drain on their own.
func (s *Streamer) SetWorkers(ctx context.Context, n int) error {
	if n < 1 || n > MaxWorkers {
		return fmt.Errorf("%w: %d workers: want 1 to %d", ErrBadRequest, n, MaxWorkers)
	}
	release, err := s.beginChange()
	if err != nil {
		return fmt.Errorf("set workers: %w", err)
	}
	defer release()
	have := s.Workers()
	if n == have {
		return nil
	}
	s.log.Info("scaling workers", "from", have, "to", n)
	for i := have; i < n; i++ {
		if err := s.addSlot(ctx, i); err != nil {
			s.log.Error("scaling failed", "slot", i, "err", err)
			return err
		}
	}
	if n < have {
		if err := s.removeSlots(ctx, n); err != nil {
			return err
		}
	}
	s.log.Info("scaled workers", "workers", n)
	return nil
}

// addSlot starts slot i, the next one, and lets it take batches once its
// worker is ready.
func (s *Streamer) addSlot(ctx context.Context, i int) error {
	fresh, w, err := s.freshSlotLocking(ctx, i, s.Model())
	if err != nil {
		return err
	}
	s.slots = append(s.slots, fresh)
	fresh.readyLocked(w)
	s.mu.Unlock()
	go fresh.run(w, nil)
	s.signal()
	return nil
}

// removeSlots drains the slots from n on and waits until they have ended.
// When the slots left have all been given up, nothing can run any more:
// Fatal says so, as when the last slot is given up (see slot.backoff).
func (s *Streamer) removeSlots(ctx context.Context, n int) error {
	s.mu.Lock()
	gone := slices.Clone(s.slots[n:])
	clear(s.slots[n:])
	s.slots = s.slots[:n]
	s.nextSlot = 0
	stops := make([]worker, len(gone))
	// The workers to name in the log: a slot with batches in flight is
	// stopped once they are answered, not now, and has one all the same.
	workers := make([]worker, len(gone))
	for i, sl := range gone {
		workers[i] = sl.w
		stops[i] = s.retireLocked(sl)
	}
	allFailed := s.allFailedLocked()
	last := s.slots[n-1]
	lastErr, deaths := last.lastErr, len(last.recent)
	s.mu.Unlock()
	for i, sl := range gone {
		s.log.Info("draining slot", sl.logAttrs(workers[i], "reason", "scaled down")...)
		if stops[i] != nil {
			sl.stopRetired(stops[i])
		}
	}
	s.signal()
	if allFailed {
		s.log.Error("the slots left after scaling down have all been given up; nothing can run", "workers", n)
		s.giveUp(lastErr, deaths)
	}
	for _, sl := range gone {
		if err := waitRetired(ctx, sl); err != nil {
			return err
		}
	}
	return nil
}

// beginChange claims the right to change the slots, and returns what gives
// it back.
func (s *Streamer) beginChange() (release func(), err error) {
	if !s.changing.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	release = func() { s.changing.Store(false) }
	switch {
	case s.draining.Load():
		err = ErrShuttingDown
	case !s.started.Load() || !s.everReady.Load():
		// Start still counts the first tries of the slots it began with.
		err = ErrNotStarted
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// changeRefusedLocked says why the slots must not change any more, if they
// must not: a Shutdown began, and the slots it stops are those it finds.
// It requires that s.mu is held.
func (s *Streamer) changeRefusedLocked() error {
	if s.draining.Load() || isClosed(s.stopping) {
		return ErrShuttingDown
	}
	return nil
}

// startSpare starts a worker for sl, which no one else sees yet, and waits
// until it is ready or ctx ends; a worker still starting when ctx ends is
// stopped at once (a model that hangs in its start would otherwise hold its
// device until InitTimeout), and one that came up meanwhile once it is.
func (s *Streamer) startSpare(ctx context.Context, sl *slot) (worker, error) {
	type started struct {
		w   worker
		err error
	}
	s.mu.Lock()
	err := s.changeRefusedLocked()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	done := make(chan started, 1)
	go func() {
		w, err := s.startWorker(ctx.Done(), sl)
		done <- started{w, err}
	}()
	select {
	case r := <-done:
		switch {
		case errors.Is(r.err, ErrShuttingDown):
			// Stopped by the shutdown, not a worker that failed.
			return nil, fmt.Errorf("slot %d: %w", sl.id, r.err)
		case r.err != nil:
			return nil, fmt.Errorf("slot %d: %w: %w", sl.id, ErrStartFailed, r.err)
		}
		return r.w, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				discard(r.w, ctx.Err())
			}
		}()
		return nil, fmt.Errorf("slot %d: start a new worker: %w", sl.id, ctx.Err())
	}
}

// errStartAbandoned is why a worker started for a reload or a scaling that
// gave up before it was ready is stopped.
var errStartAbandoned = errors.New("the reload or scaling that started it gave up before it was ready")

// errSlotRetired is why a worker restarting in a slot that a reload or a
// scaling retires is stopped before it is ready.
var errSlotRetired = errors.New("a reload or scaling retired its slot before it was ready")

// discard kills a worker that was never given a batch and waits for it.
func discard(w worker, reason error) {
	w.kill(reason)
	_ = w.wait()
}

// retireLocked takes sl out of dispatch: it keeps its batches in flight,
// gets no new ones, and its worker stops once they are answered. It
// returns the worker to stop now, when it holds no batch; the caller
// stops it with stopRetired once s.mu is released. It requires that s.mu
// is held.
func (s *Streamer) retireLocked(sl *slot) worker {
	close(sl.quit)
	if sl.state != SlotStopped && sl.state != SlotFailed {
		sl.state = SlotDraining
	}
	if sl.ended {
		return nil // it had ended already (a failed slot)
	}
	s.retiring = append(s.retiring, sl)
	if sl.w != nil && len(sl.inflight) == 0 && sl.askStopLocked() {
		return sl.w
	}
	return nil
}

// askStopLocked reports whether the slot's retired worker is yet to be
// told to stop, and notes that it is being told. It requires that s.mu is
// held.
func (sl *slot) askStopLocked() bool {
	if sl.stopAsked {
		return false
	}
	sl.stopAsked = true
	return true
}

// stopRetired asks w, the worker of a retired slot that holds no batch any
// more, to exit, and kills it when it has not within StopTimeout.
func (sl *slot) stopRetired(w worker) {
	s := sl.s
	s.log.Info("worker drained; stopping it", sl.logAttrs(w, "reason", "retired")...)
	w.stop()
	go func() {
		t := time.NewTimer(s.cfg.Process.StopTimeout)
		defer t.Stop()
		select {
		case <-sl.runDone:
		case <-t.C:
			s.log.Warn("worker did not stop in time; killing it", sl.logAttrs(w, "reason", "retired")...)
			w.kill(errors.New("did not stop in time after its drain"))
		}
	}()
}

// forgetRetired notes that sl has ended and drops it from the slots being
// drained.
func (s *Streamer) forgetRetired(sl *slot) {
	s.mu.Lock()
	sl.ended = true
	s.retiring = slices.DeleteFunc(s.retiring, func(r *slot) bool { return r == sl })
	s.mu.Unlock()
	s.signal()
}

// waitRetired waits until the retired slot sl has ended, or ctx has.
func waitRetired(ctx context.Context, sl *slot) error {
	select {
	case <-sl.runDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("slot %d: wait for the old worker to drain: %w", sl.id, ctx.Err())
	}
}

// oldWorkerAttrs are the log attributes naming the worker a reload
// replaced: none when it had none (its slot was given up, or between
// restarts).
func oldWorkerAttrs(w worker) []any {
	if w == nil {
		return nil
	}
	return []any{"old_pid", w.pid()}
}
