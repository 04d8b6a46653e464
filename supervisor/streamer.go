package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/model"
)

// Streamer queues items, forms batches and runs them on its worker slots.
// Make one with New, then Start it; it is safe for concurrent use.
type Streamer struct {
	cfg Config
	log *slog.Logger
	// failedItems holds back the lines of items failed for a crash that
	// are not taken for poison, which a model that crashes on every batch
	// writes for every item.
	failedItems repeats.Lines

	epoch time.Time // the origin of clock

	// mu guards queue, slots, retiring, tallies, downSince, lastSweep, nextSlot, spec and
	// the slots' fields marked as guarded by it. Functions that need it say
	// so.
	mu          sync.Mutex
	queue       *queue
	spec        model.Spec   // what new slots' workers open: Process.Model, or Refresh's at the last Reload
	slots       []*slot      // the slots taking batches; slot i is slots[i]
	retiring    []*slot      // slots retired by Reload or SetWorkers, until their run ends
	tallies     []*slotTally // the slots' counts by slot number, kept across reloads and scaling
	changing    atomic.Bool  // a Reload or SetWorkers is running
	downSince   time.Time    // when the last ready slot went away; zero while one is ready
	lastSweep   time.Time    // when the queue was last swept
	sweepWanted atomic.Bool  // a request was refused for want of room since lastSweep
	// recallWanted: a caller left before its answer since the dispatcher
	// last looked for batches sent ahead that nobody waits for.
	recallWanted atomic.Bool
	givenUp      atomic.Int64  // items whose callers left before their answer since lastSweep
	nextSlot     int           // round-robin start for picking a slot
	cost         costFit       // the batches' measured cost
	returns      returnTracker // callers coming back after their answers
	arrivals     rateMeter     // how fast items arrive
	holdStart    time.Time     // when an idle slot began waiting for arrivals; zero if none
	holdUntil    time.Time     // when that wait ends, as last judged
	explore      int           // holds considered while the cost fit was not ready
	returned     uint64        // batches workers returned, under mu (see firstCrash)
	sends        uint64        // batches sent to workers, under mu (see batch.sendSeq)
	record       crashRecord   // the recent batches' outcomes, under mu (see judgeLocked)
	canary       canary        // an item the model answered lately, under mu (see probeLocked)
	answering    atomic.Int32  // slots completing a batch's Futures now (see Answering)
	answered     atomic.Uint64 // batches whose Futures have all been completed
	wake         chan struct{}
	batchID      atomic.Uint64
	draining     atomic.Bool
	unavail      atomic.Bool    // no worker has been able to run for UnavailableAfter
	dispatched   sync.WaitGroup // the dispatcher and watchStalls
	stalls       stallClock

	drained     chan struct{} // closed when draining and nothing is left
	drainedOnce sync.Once
	stopping    chan struct{} // closed when slots must stop restarting workers
	stopOnce    sync.Once
	stopped     chan struct{} // closed when the dispatcher must end
	closeOnce   sync.Once

	shutdownBegun atomic.Bool   // the first Shutdown drains; the others wait
	shutDown      chan struct{} // closed when the first Shutdown is done

	// modelCalls counts the in-process model's calls, from the moment a
	// slot's goroutine takes a batch (under its handling lock, while it
	// lives) until the call returns: once Shutdown has waited for every
	// worker, none is added, and WaitModel may wait for it.
	modelCalls    sync.WaitGroup
	modelIdle     chan struct{} // closed once modelCalls is done after Shutdown
	modelIdleOnce sync.Once

	poison  *poisonList
	room    room      // kept in the queue for a large request refused
	batches sync.Pool // of *batch, answered and emptied, for reuse
	futures futurePool

	started   atomic.Bool
	everReady atomic.Bool // some worker has been ready since Start
	fatalOnce sync.Once
	fatal     chan error

	stats counters
}

type counters struct {
	reasons   [numReasons]atomic.Uint64 // batches by why they were dispatched
	waitAdded atomic.Int64              // nanoseconds idle slots waited for arrivals
	submitted atomic.Uint64
	// answered counts every item answered, the sum of the outcomes below,
	// for the room's look at progress (see room.go).
	answered atomic.Uint64
	// The outcomes of the items answered, each item in one of them: Stats
	// sums them rather than subtract one from another, so that none reads
	// backwards when a scrape falls between two additions.
	ok, failed, expired, poisoned, canceled atomic.Uint64
	rejected                                atomic.Uint64
	batches, crashes                        atomic.Uint64
	batchSizes                              []atomic.Uint64
	latency                                 latencies
	reloads, reloadFailures                 atomic.Uint64
	lastReloadError                         atomic.Pointer[string]
}

// outcome counts one item answered with err (nil: with its output).
func (c *counters) outcome(err error) {
	switch {
	case err == nil:
		c.ok.Add(1)
	case errors.Is(err, ErrDeadline):
		c.expired.Add(1)
	case errors.Is(err, ErrPoison):
		c.poisoned.Add(1)
	case errors.Is(err, ErrCanceled):
		c.canceled.Add(1)
	default:
		c.failed.Add(1)
	}
	c.answered.Add(1)
}

// New checks cfg and returns a Streamer that is not yet running.
func New(cfg Config) (*Streamer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Streamer{
		cfg:       cfg,
		log:       cfg.Logger,
		spec:      cfg.Process.Model,
		epoch:     time.Now(),
		queue:     newQueue(),
		wake:      make(chan struct{}, 1),
		stopped:   make(chan struct{}),
		drained:   make(chan struct{}),
		stopping:  make(chan struct{}),
		shutDown:  make(chan struct{}),
		modelIdle: make(chan struct{}),
		poison:    newPoisonList(cfg.PoisonTTL),
		returns:   newReturnTracker(cfg.MaxLatency),
		fatal:     make(chan error, 1),
	}
	s.stats.batchSizes = make([]atomic.Uint64, cfg.BatchSize+1)
	for i := range cfg.Workers {
		s.slots = append(s.slots, newSlot(s, i))
	}
	return s, nil
}

// Start launches every slot's worker and returns once one of them is ready
// to take batches. It fails when every slot's first worker failed to
// start, with every slot's reason; and when ctx ends before a worker is
// ready, with ctx's error. Either way Start stops everything it started
// and waits for it to exit: the Streamer is then shut down, and nothing
// is left running for want of a Shutdown. A ctx ended already starts
// nothing and fails with its error, the Streamer left as it was. Start
// after Shutdown fails with ErrShuttingDown and starts nothing; a second
// Start fails with ErrStarted. A Shutdown made while Start runs stops all
// that Start started and waits for it, as after Start; Start may still
// return nil then, when a worker was ready before the Shutdown stopped it.
func (s *Streamer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	s.mu.Lock()
	switch {
	case s.draining.Load():
		s.mu.Unlock()
		return fmt.Errorf("start: %w", ErrShuttingDown)
	case s.started.Load():
		s.mu.Unlock()
		return ErrStarted
	}
	// Under the lock, so that a Shutdown either sees it started or
	// makes this Start refuse; and one that sees it started waits for the
	// dispatcher and watchStalls, counted before it can look.
	s.started.Store(true)
	s.dispatched.Add(2)
	s.downSince = time.Now()
	slots := slices.Clone(s.slots)
	s.mu.Unlock()
	firstTries := make(chan error, len(slots))
	for _, sl := range slots {
		go sl.run(nil, firstTries)
	}
	go s.dispatchLoop()
	go s.watchStalls()
	var errs []error
	for range slots {
		select {
		case err := <-firstTries:
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		case <-ctx.Done():
			// Nothing was admitted: no worker was ever ready.
			_ = s.Shutdown(ctx)
			return ctx.Err()
		}
	}
	// Nothing was admitted either; the slots would go on restarting
	// workers that fail until somebody called Shutdown.
	ended, end := context.WithCancel(context.Background())
	end()
	_ = s.Shutdown(ended)
	return fmt.Errorf("no worker started: %w", errors.Join(errs...))
}

// Submit queues items as one request. See SubmitRequest.
func (s *Streamer) Submit(ctx context.Context, items [][]byte) (*Future, error) {
	return s.SubmitRequest(ctx, Request{Items: items})
}

// Predict submits items and waits for their outputs. See PredictRequest.
func (s *Streamer) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	return s.PredictRequest(ctx, Request{Items: items})
}

// PredictRequest submits req and waits for its outputs: SubmitRequest
// followed by Result, with the same errors, but cheaper, as it reuses its
// Futures.
func (s *Streamer) PredictRequest(ctx context.Context, req Request) ([][]byte, error) {
	f := s.futures.get(len(req.Items))
	if err := s.enqueue(ctx, req, f); err != nil {
		s.futures.put(f)
		return nil, err
	}
	out, reusable, err := f.wait(ctx)
	if reusable {
		s.futures.put(f)
	} else {
		s.callerLeft(len(req.Items))
	}
	return out, err
}

// callerLeft is told of a caller that left before the answer of its n
// items. Those it leaves queued would hold their bytes, and their places,
// until a batch reached them, a worker's run away: a sweep drops them now,
// once the items left since the last are an eighth of the queue (a sweep
// walks the whole queue, under the lock). A batch sent ahead that holds
// them, and nothing else waited for, is asked back at once (see
// slot.recallAbandonedLocked): a look at the few batches in flight.
func (s *Streamer) callerLeft(n int) {
	// The dispatcher is woken once for the callers that leave between two
	// of its looks, however many: a flood of callers giving up must not
	// keep it turning.
	wake := s.recallWanted.CompareAndSwap(false, true)
	if left := s.givenUp.Add(int64(n)); left*8 >= s.queue.size.Load() {
		s.askSweep()
		return
	}
	if wake {
		s.signal()
	}
}

// SubmitRequest queues the request's items and returns their Future at once,
// but for a request larger than most that finds no room: it waits for room
// kept for it while batches leave (see Config.MaxQueue). It refuses the
// whole request, answering nothing, when the streamer is
// shutting down (ErrShuttingDown), no worker can run (ErrUnavailable), the
// queue has no room for all its items (ErrOverloaded), its deadline has
// passed (ErrDeadline), ctx is canceled already (ErrCanceled), or an item
// is known to crash the model (an *ItemError wrapping ErrPoison). When ctx
// ends before an item is sent to a worker, that item is dropped and
// answered with ErrCanceled, or with ErrDeadline when it was ctx's
// deadline (or the request's) that passed.
func (s *Streamer) SubmitRequest(ctx context.Context, req Request) (*Future, error) {
	f := newFuture(len(req.Items))
	if err := s.enqueue(ctx, req, f); err != nil {
		return nil, err
	}
	f.owner = s
	return f, nil
}

// SubmitRequests queues several independent requests at once and returns
// their Futures: futs[i] answers reqs[i], or is nil with errs[i] saying why
// that request was refused, as SubmitRequest would refuse it, except that
// the room kept for a large request refused earlier (see room) is neither
// respected nor taken: a node queues what it read from Redis, and has no
// caller to send away for it. Their items
// are queued together, so that a batch formed now can take items of all of
// them, which SubmitRequest called once for each cannot promise: the first
// may leave in a batch of its own before the next is queued. A front end
// that receives items in bunches (a node reading a shared queue) uses it.
func (s *Streamer) SubmitRequests(ctx context.Context, reqs []Request) (futs []*Future, errs []error) {
	futs, errs = make([]*Future, len(reqs)), make([]error, len(reqs))
	n := 0
	for i, req := range reqs {
		f := newFuture(len(req.Items))
		if errs[i] = s.prepare(ctx, req, f); errs[i] == nil {
			futs[i] = f
			n += len(req.Items)
		}
	}
	if n == 0 {
		return futs, errs
	}
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		for i := range futs {
			if futs[i] != nil {
				s.stats.rejected.Add(uint64(len(reqs[i].Items)))
				futs[i], errs[i] = nil, ErrShuttingDown
			}
		}
		return futs, errs
	}
	wasEmpty := s.queue.n == 0
	queued := 0
	stale := false
	for i, f := range futs {
		if f == nil {
			continue
		}
		if waiting := s.queue.items(); waiting+len(reqs[i].Items) > s.cfg.MaxQueue {
			futs[i], errs[i] = nil, s.refuseFull(waiting, len(reqs[i].Items))
			continue
		}
		stale = s.pushLocked(reqs[i], f) || stale
		queued += len(reqs[i].Items)
	}
	wake := false
	if queued > 0 {
		if s.cfg.Batching == BatchingAdaptive {
			s.returns.arrived(time.Now(), queued)
			s.arrivals.add(time.Now(), queued)
		}
		s.queue.resize()
		wake = wasEmpty || s.worthWaking()
	}
	// Counted before the lock is let go, as in queueLocked.
	s.stats.submitted.Add(uint64(queued))
	if stale {
		s.purgeLocked()
	}
	s.mu.Unlock()
	if wake {
		s.signal()
	}
	return futs, errs
}

// enqueue queues req's items, to be answered through f, or refuses them all.
func (s *Streamer) enqueue(ctx context.Context, req Request, f *Future) error {
	if err := s.prepare(ctx, req, f); err != nil {
		return err
	}
	n := len(req.Items)
	if waiting := int(s.queue.size.Load()); s.room.refusedAtOnce(waiting, n, s.cfg.MaxQueue) {
		// Refused without the lock, which the workers' answers need.
		return s.refuseFull(waiting, n)
	}
	s.mu.Lock()
	if s.draining.Load() {
		// Checked again under the lock: Shutdown empties the queue under it,
		// and an item pushed after that would never be answered.
		s.mu.Unlock()
		s.stats.rejected.Add(uint64(n))
		return ErrShuttingDown
	}
	if waiting := s.queue.items(); !s.room.fits(waiting, n, s.cfg.MaxQueue, f) {
		if !s.room.claim(n, f) {
			s.mu.Unlock()
			return s.refuseFull(waiting, n)
		}
		s.mu.Unlock()
		s.askSweep()
		return s.waitRoom(ctx, req, f, n)
	}
	s.queueLocked(req, f)
	return nil
}

// queueLocked queues req's items, to be answered through f, and unlocks
// s.mu, which it requires.
func (s *Streamer) queueLocked(req Request, f *Future) {
	n := len(req.Items)
	wasEmpty := s.queue.n == 0
	if s.cfg.Batching == BatchingAdaptive {
		s.returns.arrived(time.Now(), n)
		s.arrivals.add(time.Now(), n)
	}
	stale := s.pushLocked(req, f)
	s.queue.resize()
	s.room.queued(n)
	// The first item queued arms the dispatcher's MaxLatency timer.
	wake := wasEmpty || s.worthWaking()
	// Counted before the lock is let go, which a worker needs to take the
	// items: an item is counted submitted before it can be answered (see
	// Stats).
	s.stats.submitted.Add(uint64(n))
	if stale {
		s.purgeLocked()
	}
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// prepare checks req before it is queued, and readies f for it: its
// deadline, the earlier of the request's and ctx's, and ctx itself.
func (s *Streamer) prepare(ctx context.Context, req Request, f *Future) error {
	n := len(req.Items)
	// Read before admit looks at the list, so that an item convicted
	// after that look moves it (see pushLocked).
	poisonGen := s.poison.gen.Load()
	if err := s.admit(req); err != nil {
		s.stats.rejected.Add(uint64(n))
		return err
	}
	deadline, callerSet := req.Deadline, false
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline, callerSet = d, true
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return s.gone(n, fmt.Errorf("%w: before the request was queued", ErrDeadline))
	}
	if ctx.Err() != nil {
		// Canceled, as the deadline case above: its caller has gone.
		return s.gone(n, fmt.Errorf("%w: before the request was queued", ErrCanceled))
	}
	f.enqueued = s.clock()
	f.deadline, f.callerSet = deadline, callerSet
	f.poisonGen = poisonGen
	if ctx.Done() != nil {
		f.ctx = ctx
	}
	return nil
}

// pushLocked queues req's items, answered through f. It reports whether
// an item was convicted since admit looked at the list for them: they may
// be copies of it, which the caller fails (see purgeLocked) once they are
// counted submitted, before it lets the lock go. It requires that s.mu is
// held.
func (s *Streamer) pushLocked(req Request, f *Future) (stale bool) {
	for i, data := range req.Items {
		it := item{fut: f, index: int32(i), data: data}
		if req.Keys != nil {
			it.key = req.Keys[i]
		}
		s.queue.push(it)
	}
	return f.poisonGen != s.poison.gen.Load()
}

// Full reports whether the queue has no room for even one more item, the
// room kept for a request that waits for it counted as taken: a request
// now would be refused with ErrOverloaded, unless it is larger than the
// one waiting and larger than most (see Config.MaxQueue). It takes no lock, so a
// front end can refuse before it reads a request's body.
func (s *Streamer) Full() bool {
	// While room is kept, a request of one item is refused once the
	// rest of the queue is full.
	size := s.queue.size.Load()
	return size+s.room.want.Load() >= int64(s.cfg.MaxQueue)
}

// refuseFull refuses n items for want of room. The first refusal since the
// last sweep asks the dispatcher for one: room held by items that will never
// run is then given back within sweepInterval.
func (s *Streamer) refuseFull(waiting, n int) error {
	s.stats.rejected.Add(uint64(n))
	s.askSweep()
	return s.room.refusal(waiting, n, s.cfg.MaxQueue)
}

// askSweep asks the dispatcher for a sweep of the queue, unless one is
// asked for already: a request found it full, and room held by items that
// will never run is given back within sweepInterval.
func (s *Streamer) askSweep() {
	if s.sweepWanted.CompareAndSwap(false, true) {
		s.signal()
	}
}

// admit checks what can be checked before taking the lock.
func (s *Streamer) admit(req Request) error {
	switch {
	case len(req.Items) == 0:
		return fmt.Errorf("%w: no items", ErrBadRequest)
	case req.Keys != nil && len(req.Keys) != len(req.Items):
		return fmt.Errorf("%w: %d keys for %d items", ErrBadRequest, len(req.Keys), len(req.Items))
	case len(req.Items) > s.cfg.MaxItems:
		return fmt.Errorf("%w: %d items, the limit per request is %d", ErrTooLarge, len(req.Items), s.cfg.MaxItems)
	case len(req.Items) > s.cfg.MaxQueue:
		return fmt.Errorf("%w: %d items, more than the whole queue holds (%d)", ErrTooLarge, len(req.Items), s.cfg.MaxQueue)
	}
	for i, data := range req.Items {
		if len(data) > s.cfg.MaxBatchBytes {
			// It could only be sent to a worker alone, in a frame over
			// the limit: the worker would die, and the item be taken for
			// poison.
			return &ItemError{Index: i, Err: fmt.Errorf("%w: the item is %d bytes encoded; the most one batch may carry is %d", ErrTooLarge, len(data), s.cfg.MaxBatchBytes)}
		}
	}
	switch {
	case s.draining.Load():
		return ErrShuttingDown
	case !s.started.Load():
		return fmt.Errorf("%w: the streamer is not started (call Start)", ErrUnavailable)
	case !s.everReady.Load():
		return fmt.Errorf("%w: the workers are still starting", ErrUnavailable)
	case s.unavail.Load():
		s.mu.Lock()
		why := s.startFailureLocked()
		s.mu.Unlock()
		return fmt.Errorf("%w for %s or more%s", ErrUnavailable, s.cfg.UnavailableAfter, why)
	}
	if s.poison.active() {
		for i, data := range req.Items {
			key := ""
			if req.Keys != nil {
				key = req.Keys[i]
			}
			if s.poison.has(key, data) {
				return &ItemError{Index: i, Err: errKnownPoison}
			}
		}
	}
	return nil
}

// errKnownPoison fails an item on the poison list without running it: one
// refused as it comes, or a copy of it admitted before it was convicted.
var errKnownPoison = fmt.Errorf("%w: refused on sight, it crashed workers earlier", ErrPoison)

// hashOf returns the hash of it on the poison list, hashing it the first
// time: items are hashed where the list is looked at (a death, a
// conviction), never on their way to a worker. It requires that s.mu is
// held, or that it is the caller's own.
func (s *Streamer) hashOf(it *item) uint64 {
	if !it.hashed {
		it.hash, it.hashed = s.poison.hash(it.key, it.data), true
	}
	return it.hash
}

// itemDigest names an item in the log without its content: the first 16
// hex digits of the SHA-256 of its bytes (as a model gets them: msgpack,
// or the codec's form), for an operator to match against a copy.
func itemDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// clock reads the streamer's monotonic clock, in nanoseconds since New. It
// is what items are stamped with: cheaper than time.Now, which reads the
// wall clock too.
func (s *Streamer) clock() int64 { return int64(time.Since(s.epoch)) }

// at turns a reading of clock into a time.
func (s *Streamer) at(ns int64) time.Time { return s.epoch.Add(time.Duration(ns)) }

// signal wakes the dispatcher; it never blocks.
func (s *Streamer) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// complete answers one item and counts it: first, so that a caller woken
// by its answer finds it counted.
func (s *Streamer) complete(it item, output []byte, err error) {
	if !it.probe {
		s.stats.outcome(err)
	}
	it.fut.complete(int(it.index), output, err)
}

// drop answers an item that will not run: its deadline passed or its
// caller left. A caller whose deadline passed left for that reason, though
// the clock read before the lock may not be past it yet: its context's
// deadline, or the request's own, after which its handler cancels the
// context as it returns. Its item expired.
func (s *Streamer) drop(it item, now time.Time) {
	if it.fut.expired(now) || it.fut.ctx != nil && errors.Is(it.fut.ctx.Err(), context.DeadlineExceeded) || it.fut.expired(time.Now()) {
		s.complete(it, nil, fmt.Errorf("%w: expired after %s in the queue", ErrDeadline, now.Sub(s.at(it.fut.enqueued)).Round(time.Millisecond)))
		return
	}
	s.complete(it, nil, ErrCanceled)
}

// Room says how many more items the Streamer could start at once: a batch
// for every ready worker with nothing in flight, less the items already
// queued. Ahead is how many more it could form ahead for busy workers with
// room in their pipeline, once the batch each runs is near its end (within
// aheadHorizon of it, by its measured cost). A feeder
// that can leave items where others take them (a broker node) takes now
// while it has room, and ahead only while items wait upstream, so that it
// never holds what an idle peer could run; and a worker slower than its
// peers does not hold, for most of its long batch, items that a faster
// one, free sooner, could have run. A worker whose batch runs late, past
// its expected end by far (see pickSlot), counts no room ahead while
// another is on time: the items would wait for the other.
func (s *Streamer) Room() (now, ahead int) {
	if s.draining.Load() {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.cfg.BatchSize
	clock := time.Now()
	for _, sl := range s.slots {
		if sl.state != SlotReady {
			continue
		}
		if len(sl.inflight) == 0 {
			now += b
			ahead += (s.cfg.PipelineDepth - 1) * b
			continue
		}
		if s.aheadIn(sl, clock) > 0 || len(sl.inflight) >= s.cfg.PipelineDepth {
			continue
		}
		if s.lateLocked(sl, clock) && s.someSlotOnTime(clock) {
			continue
		}
		ahead += (s.cfg.PipelineDepth - len(sl.inflight)) * b
	}
	queued := s.queue.items()
	if queued > 0 && now > 0 && s.holdStart.IsZero() {
		// Not held for more, they leave for idle workers at once, each
		// batch of them taking a worker whole, the dispatcher's look at
		// them perhaps still to come. A feeder that took an item and
		// read again for the rest of a batch held its read open while
		// the worker ran, and Redis handed it the next item, which an
		// idle peer could have run at once.
		whole := min((queued+b-1)/b*b, now)
		now, queued = now-whole, max(queued-whole, 0)
		// Their workers are as good as busy, at the start of their
		// batches: no room ahead before those near their end. A feeder
		// that read a batch for an idle worker read the next at once,
		// before the first was sent, and held it for the whole of a long
		// batch; its callers, if they left meanwhile, had it run all the
		// same, where it could have been withdrawn unread.
		if s.expectedRun(b) > aheadHorizon {
			ahead = max(ahead-whole/b*(s.cfg.PipelineDepth-1)*b, 0)
		}
	}
	if queued >= now {
		return 0, max(ahead-(queued-now), 0)
	}
	return now - queued, ahead
}

// HoldEndsIn says how long until the items queued for an idle worker,
// held for more to come and fill their batch (see BatchingAdaptive),
// leave for it, as last judged: 0 when none are held, and a nanosecond
// when the hold is over and the dispatcher has yet to send them. A
// feeder that waits for those items (a broker node's read) waits no
// longer: past it, the worker runs, and what comes is for an idle peer.
func (s *Streamer) HoldEndsIn() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holdStart.IsZero() || s.queue.items() == 0 {
		return 0
	}
	return max(time.Until(s.holdUntil), time.Nanosecond)
}

// RoomAheadIn says how long until Room counts the room ahead of a busy
// worker whose batch is not yet near its end, the soonest of them; 0 when
// none is waited for.
func (s *Streamer) RoomAheadIn() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	clock := time.Now()
	soonest := time.Duration(0)
	idle := false
	for _, sl := range s.slots {
		if sl.state != SlotReady || len(sl.inflight) >= s.cfg.PipelineDepth {
			continue
		}
		if len(sl.inflight) == 0 {
			idle = true
			continue
		}
		if in := s.aheadIn(sl, clock); in > 0 && (soonest == 0 || in < soonest) {
			soonest = in
		}
	}
	if idle && s.queue.items() > 0 && s.holdStart.IsZero() {
		// A batch queued for an idle worker is about to start (see Room).
		if in := s.expectedRun(s.cfg.BatchSize) - aheadHorizon; in > 0 && (soonest == 0 || in < soonest) {
			soonest = in
		}
	}
	return soonest
}

// aheadIn is how long until the batch sl runs is near enough its expected
// end for its room ahead to count (see Room): 0 when it is, or when no
// batch has run yet to tell its cost. It requires that s.mu is held.
func (s *Streamer) aheadIn(sl *slot, now time.Time) time.Duration {
	run := s.expectedRun(len(sl.inflight[0].items))
	if run <= 0 {
		return 0
	}
	return max(sl.headStart.Add(run-aheadHorizon).Sub(now), 0)
}

// expectedRun is how long a batch of n items is expected to run, by the
// measured cost; 0 before any batch has told it. It requires that s.mu is
// held.
func (s *Streamer) expectedRun(n int) time.Duration {
	if fixed, perItem, ok := s.cost.line(); ok {
		return fixed + time.Duration(n)*perItem
	}
	_, took := s.cost.mean()
	return took
}

// aheadHorizon is how long before a batch's expected end its worker's next
// batch may be formed: a feeder's round trip for its items, with room to
// spare. A model whose batches take longer holds items ahead, while other
// workers may be free, for no more than that; one whose batches take less
// forms its next as soon as it may.
const aheadHorizon = 20 * time.Millisecond

// Answering reports whether some worker's batch is having its Futures
// completed right now (their OnDone functions run one after another), and
// how many batches have had all theirs completed so far: an embedder that
// gathers what those functions post can wait for the rest of the batch
// under way, and tell it from the next.
func (s *Streamer) Answering() (now bool, batches uint64) {
	return s.answering.Load() > 0, s.answered.Load()
}

// Available reports whether the streamer admits requests as far as its
// workers go: they have started, and one has been able to run within
// UnavailableAfter (see Config). It is false while shutting down.
func (s *Streamer) Available() bool {
	return s.everReady.Load() && !s.unavail.Load() && !s.draining.Load()
}

// Started reports whether Start was called, and Shutdown was not: whether
// the workers were asked to run, and still are.
func (s *Streamer) Started() bool { return s.started.Load() && !s.draining.Load() }

// Ready reports whether some worker takes batches and the streamer admits work.
func (s *Streamer) Ready() bool {
	if s.draining.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.slots {
		if sl.state == SlotReady {
			return true
		}
	}
	return false
}

// NotReady says why the streamer is not Ready, or returns nil when it is:
// ErrShuttingDown while it drains or once stopped (its workers may still
// be answering what was admitted), else that no worker is ready, with why
// the last start of a slot's worker failed, if one did since the slot's
// last ready worker.
func (s *Streamer) NotReady() error {
	switch {
	case s.draining.Load():
		return ErrShuttingDown
	case s.Ready():
		return nil
	}
	s.mu.Lock()
	why := s.startFailureLocked()
	s.mu.Unlock()
	if why != "" {
		return fmt.Errorf("%w%s", errNoWorkerReady, why)
	}
	return errNoWorkerReady
}

var errNoWorkerReady = errors.New("no worker is ready")

// maxStartErrText bounds the start error said to callers and probes: the
// log and /v1/workers have it whole.
const maxStartErrText = 300

// startFailureLocked says why the slots' workers fail to start, as a
// clause to append to an error: the last start error of the first slot
// whose worker failed to start since it was last ready, cut short, and
// how many other slots fail so; "" when none does. It requires that s.mu
// is held.
func (s *Streamer) startFailureLocked() string {
	first, others := "", 0
	for _, sl := range s.slots {
		switch {
		case sl.startErr == "":
		case first == "":
			first = sl.startErr
		default:
			others++
		}
	}
	if first == "" {
		return ""
	}
	if len(first) > maxStartErrText {
		cut := maxStartErrText
		for cut > 0 && !utf8.RuneStart(first[cut]) {
			cut--
		}
		first = first[:cut] + "…"
	}
	if others > 0 {
		return fmt.Sprintf("; workers fail to start: %s (and %d other slots)", first, others)
	}
	return "; workers fail to start: " + first
}

// Fatal delivers an error when every slot has failed past MaxRestarts,
// or SetWorkers scaled down to slots that all had: the streamer can no
// longer run anything, and its owner should exit.
func (s *Streamer) Fatal() <-chan error { return s.fatal }

// Slots describes every slot: those taking batches, in order, then those
// that a Reload or SetWorkers is draining (SlotDraining), until their
// workers have exited.
func (s *Streamer) Slots() []SlotStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SlotStatus, 0, len(s.slots)+len(s.retiring))
	for _, sl := range s.slots {
		out = append(out, sl.status())
	}
	for _, sl := range s.retiring {
		out = append(out, sl.status())
	}
	return out
}

// gone counts the n items of a request whose deadline passed (err is
// ErrDeadline), or whose caller left, before it was queued, and returns
// err: expired or canceled, as the request is timed out or canceled, and
// submitted, so that Submitted still equals Answered once all is answered.
func (s *Streamer) gone(n int, err error) error {
	s.stats.submitted.Add(uint64(n)) // first: Stats reads the outcomes before it
	if errors.Is(err, ErrDeadline) {
		s.stats.expired.Add(uint64(n))
	} else {
		s.stats.canceled.Add(uint64(n))
	}
	return err
}

// CountRejected counts as rejected n items refused before they reached
// Submit, by an API in front of the streamer that checks a request's size
// first (the v2 endpoints, for a request of more than MaxItems rows).
func (s *Streamer) CountRejected(n int) { s.stats.rejected.Add(uint64(max(n, 0))) }

// Stats returns a snapshot of the counters.
func (s *Streamer) Stats() Stats {
	// The outcomes before Submitted: every item is counted submitted before
	// it can be answered, so that Answered never reads above Submitted,
	// whatever is answered in between.
	ok, failed, expired, poisoned, canceled := s.stats.ok.Load(), s.stats.failed.Load(), s.stats.expired.Load(), s.stats.poisoned.Load(), s.stats.canceled.Load()
	st := Stats{
		Submitted:  s.stats.submitted.Load(),
		Rejected:   s.stats.rejected.Load(),
		Batches:    s.stats.batches.Load(),
		Crashes:    s.stats.crashes.Load(),
		BatchSizes: make([]uint64, len(s.stats.batchSizes)),
	}
	st.setOutcomes(ok, failed, expired, poisoned, canceled)
	for i := range s.stats.batchSizes {
		st.BatchSizes[i] = s.stats.batchSizes[i].Load()
	}
	r := &s.stats.reasons
	st.Reloads, st.ReloadFailures = s.stats.reloads.Load(), s.stats.reloadFailures.Load()
	if msg := s.stats.lastReloadError.Load(); msg != nil {
		st.LastReloadError = *msg
	}
	st.Latency = LatencyStats{
		QueueWait: s.stats.latency.queueWait.snapshot(),
		Compute:   s.stats.latency.compute.snapshot(),
		EndToEnd:  s.stats.latency.endToEnd.snapshot(),
	}
	st.Dispatch = DispatchStats{
		Full: r[reasonFull].Load(), Idle: r[reasonIdle].Load(), Waited: r[reasonWaited].Load(),
		MaxLatency: r[reasonMaxLatency].Load(), Deadline: r[reasonDeadline].Load(), Retry: r[reasonRetry].Load(),
		Recalled: r[reasonRecalled].Load(), WaitAddedMs: float64(s.stats.waitAdded.Load()) / 1e6,
	}
	s.mu.Lock()
	st.Queued = s.queue.items()
	st.RoomKept = s.room.kept()
	fixed, perItem, fitted := s.cost.line()
	st.Cost = CostStats{Fitted: fitted, FixedMs: ms(fixed), PerItemMs: ms(perItem), Batches: s.cost.batches}
	st.Returns = ReturnStats{Share: s.returns.ratio, FirstMs: ms(s.returns.delay), GapMs: ms(s.returns.gap)}
	s.mu.Unlock()
	return st
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// poisonList remembers items that crashed workers, by content hash, for a while.
type poisonList struct {
	mu    sync.Mutex
	seed  maphash.Seed
	ttl   time.Duration
	until map[uint64]time.Time
	count atomic.Int32
	// gen counts the items added, each after it is in until: what was
	// looked at against the list at one gen needs no second look until it
	// moves (see batch.cleanGen and Future.poisonGen).
	gen atomic.Uint64
}

func newPoisonList(ttl time.Duration) *poisonList {
	return &poisonList{seed: maphash.MakeSeed(), ttl: ttl, until: make(map[uint64]time.Time)}
}

func (p *poisonList) hash(key string, data []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(key)
	h.WriteByte(0)
	h.Write(data)
	return h.Sum64()
}

// active is a cheap check for the common case of an empty list.
func (p *poisonList) active() bool { return p.count.Load() > 0 }

// add remembers the item of hash h (see hash).
func (p *poisonList) add(h uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for old, until := range p.until {
		if now.After(until) {
			delete(p.until, old)
		}
	}
	if len(p.until) < 10000 {
		p.until[h] = now.Add(p.ttl)
	}
	p.count.Store(int32(len(p.until)))
	p.gen.Add(1)
}

// clear forgets every item: the model they crashed is gone.
func (p *poisonList) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.until)
	p.count.Store(0)
}

func (p *poisonList) has(key string, data []byte) bool {
	return p.hasHash(p.hash(key, data))
}

// hasHash reports whether the item of hash h is remembered.
func (p *poisonList) hasHash(h uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.until[h]
	if ok && time.Now().After(until) {
		delete(p.until, h)
		p.count.Store(int32(len(p.until)))
		return false
	}
	return ok
}
