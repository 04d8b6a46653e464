package supervisor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Future is the pending answer to one request. Each of its items is
// completed exactly once, by whichever batch (or refusal) settles it; the
// Future is done when all of them are.
type Future struct {
	outputs   [][]byte
	errs      atomic.Pointer[[]error] // nil until some item fails
	remaining atomic.Int32

	mu   sync.Mutex    // guards done, over and then
	done chan struct{} // made by Done on demand, closed when finished
	over bool          // every item is completed
	then func()        // set by OnDone, run when finished

	// wake, on the Futures that Predict reuses, gets one token when the
	// last item is completed: the finishing goroutine's last touch of the
	// Future, after which its owner may reuse it.
	wake chan struct{}

	enqueued int64           // when the request was queued, on the streamer's clock
	deadline time.Time       // zero for none
	ctx      context.Context // the caller's; once it ends, undispatched items are dropped
	one      [1][]byte       // outputs of a single-item request, saving an allocation

	// callerSet is true when deadline is the caller's context's, which
	// came before the request's own: await's timer fires first, and its
	// error must name the deadline that was set.
	callerSet bool
	// poisonGen is the poison list's generation before admission looked
	// at it for the request's items (see Streamer.pushLocked).
	poisonGen uint64
	// owner, set on the Futures SubmitRequest returns, is told when
	// Result finds the request's context ended before the answer.
	owner *Streamer
}

// closedChan is what Done returns for a Future that finished before anybody
// asked for its channel.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// newFuture returns a Future for n items.
func newFuture(n int) *Future {
	f := &Future{}
	f.init(n)
	return f
}

func (f *Future) init(n int) {
	if n == 1 {
		f.outputs = f.one[:]
	} else {
		f.outputs = make([][]byte, n)
	}
	f.remaining.Store(int32(n))
	f.over = n == 0
}

// Len is the number of items.
func (f *Future) Len() int { return len(f.outputs) }

// complete settles item i with its output, or with err when err is not nil.
// Each item must be completed exactly once: a second completion would
// finish the Future early or twice. It may be called from any goroutine.
func (f *Future) complete(i int, output []byte, err error) {
	if err != nil {
		f.setErr(i, err)
	} else {
		f.outputs[i] = output
	}
	if f.remaining.Add(-1) == 0 {
		f.finish()
	}
}

func (f *Future) finish() {
	f.mu.Lock()
	f.over = true
	done, wake, then := f.done, f.wake, f.then
	f.then = nil
	f.mu.Unlock()
	if done != nil {
		close(done)
	}
	if then != nil {
		then()
	}
	if wake != nil {
		wake <- struct{}{} // last: the owner may reuse f once it has this
	}
}

// setErr records item i's error. Items of one request may be answered from
// several goroutines at once, so the error slice is made once, atomically.
func (f *Future) setErr(i int, err error) {
	errs := f.errs.Load()
	if errs == nil {
		fresh := make([]error, len(f.outputs))
		if f.errs.CompareAndSwap(nil, &fresh) {
			errs = &fresh
		} else {
			errs = f.errs.Load()
		}
	}
	(*errs)[i] = err
}

// Done is closed once every item is answered.
func (f *Future) Done() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		if f.over {
			return closedChan
		}
		f.done = make(chan struct{})
	}
	return f.done
}

// OnDone runs fn once every item of f is completed: at once, in the
// caller's goroutine, when they already are; else in the goroutine that
// completes the last one. For an answer from a worker that is the goroutine
// that took the batch's answer, which runs the functions of the batch's
// requests one after another (see Answering): an embedder that writes the
// answers on, as a broker node does, sees a whole batch's together, without
// a goroutine per request to wake. An item dropped while queued (its
// deadline passed, its caller left, no worker could take it, it is a copy
// of an item convicted as poison meanwhile) is completed while the
// Streamer holds its own lock. So fn must only hand the answer on
// (to a channel with room, or a list under a lock of its own) and never
// wait, nor call the Streamer. At most one fn per Future; Result reads the
// answer without waiting once fn runs.
func (f *Future) OnDone(fn func()) {
	f.mu.Lock()
	if f.over {
		f.mu.Unlock()
		fn()
		return
	}
	if f.then != nil {
		f.mu.Unlock()
		panic("supervisor: OnDone called twice on one Future")
	}
	f.then = fn
	f.mu.Unlock()
}

// Result waits for every item and returns the outputs in order. If some item
// failed, the error is an *ItemError for the failed item with the lowest
// index, and the outputs of the others are returned with it. Waiting ends
// early with an error wrapping ErrDeadline when the request's deadline or
// ctx's deadline passes, and with one wrapping ErrCanceled when ctx is
// canceled; the items still pending are answered later regardless, and an
// item answered at the moment waiting ends is returned rather than the
// error.
func (f *Future) Result(ctx context.Context) ([][]byte, error) {
	if f.remaining.Load() == 0 {
		return f.result()
	}
	if err := f.await(ctx, f.Done()); err != nil && f.remaining.Load() != 0 {
		if f.owner != nil && f.gone() {
			f.owner.callerLeft(len(f.outputs))
		}
		return nil, err
	}
	// Answered, even if the deadline or ctx ended at the same moment.
	return f.result()
}

// await waits until ready is signalled, the request's deadline passes or
// ctx ends, whichever comes first. It returns nil when ready came, an error
// wrapping ErrDeadline for the request's or ctx's deadline, and one
// wrapping ErrCanceled when ctx was canceled.
func (f *Future) await(ctx context.Context, ready <-chan struct{}) error {
	if ctx.Done() == nil && f.deadline.IsZero() {
		<-ready
		return nil
	}
	var timeout <-chan time.Time
	// A deadline that is the context's own ends the wait through
	// ctx.Done, whose timer is running already: no second one for it. A
	// wait under another context (Result's may be any) times it itself.
	if !f.deadline.IsZero() && !(f.callerSet && f.ctx != nil && ctx.Done() == f.ctx.Done()) {
		t := time.NewTimer(time.Until(f.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ready:
		return nil
	case <-timeout:
		if f.callerSet {
			return errCallerDeadline
		}
		return fmt.Errorf("%w: no answer by the request's deadline", ErrDeadline)
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			return errCallerDeadline
		}
		return fmt.Errorf("%w: the caller left before the answer", ErrCanceled)
	}
}

var errCallerDeadline = fmt.Errorf("%w: no answer by the caller's deadline", ErrDeadline)

func (f *Future) result() ([][]byte, error) {
	if errs := f.errs.Load(); errs != nil {
		return f.outputs, FirstItemError(*errs)
	}
	return f.outputs, nil
}

// FirstItemError is the error of a request whose items failed with errs,
// one per item, nil for those that did not: an *ItemError for the first
// that failed, with Every set when every item of a request of several
// failed with the one error value, or nil when none failed. It is what a
// Future's Result returns, for a backend that answers the items of a
// request itself (package broker) to return the same.
func FirstItemError(errs []error) error {
	for i, err := range errs {
		if err != nil {
			return &ItemError{Index: i, Err: err, Every: i == 0 && len(errs) > 1 && sameError(errs)}
		}
	}
	return nil
}

// sameError reports whether every error of errs is the one error value: a
// batch that failed as a whole gives each of its items the same.
func sameError(errs []error) bool {
	for _, err := range errs[1:] {
		if err != errs[0] {
			return false
		}
	}
	return true
}

// gone reports whether the caller's context has ended.
func (f *Future) gone() bool { return f.ctx != nil && f.ctx.Err() != nil }

// expired reports whether the request's deadline has passed at now.
func (f *Future) expired(now time.Time) bool {
	return !f.deadline.IsZero() && !now.Before(f.deadline)
}

// futurePool keeps the Futures of finished Predict calls for reuse: at
// hundreds of thousands of requests a second, a Future and its channel per
// request are most of what the supervisor allocates, and the collector's
// work for them the largest cost in its profile.
type futurePool struct{ pool sync.Pool }

func (p *futurePool) get(n int) *Future {
	f, _ := p.pool.Get().(*Future)
	if f == nil {
		f = &Future{wake: make(chan struct{}, 1)}
	}
	f.init(n)
	return f
}

// put keeps f, which nothing refers to any more: it was never queued, or
// its wake token has been taken.
func (p *futurePool) put(f *Future) {
	*f = Future{wake: f.wake}
	p.pool.Put(f)
}

// wait waits for the pooled f like Result, then hands its outputs over so
// that f can be reused. reusable is false when waiting ended before every
// item was answered: then f must be left to the collector, as items still
// queued refer to it.
func (f *Future) wait(ctx context.Context) (out [][]byte, reusable bool, err error) {
	if err := f.await(ctx, f.wake); err != nil {
		select {
		case <-f.wake: // answered as the wait ended: the answer wins
		default:
			return nil, false, err
		}
	}
	out, err = f.result()
	if len(out) == 1 {
		out = [][]byte{out[0]} // f.one is f's own memory
	}
	return out, true, err
}
