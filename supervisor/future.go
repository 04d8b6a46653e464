package supervisor

import (
	"context"
	"fmt"
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
	done      chan struct{}
	deadline  time.Time
	ctx       context.Context // the caller's; once it ends, undispatched items are dropped
	one       [1][]byte       // outputs of a single-item request, saving an allocation
}

// NewFuture returns a Future for n items. The supervisor makes its own; other
// intakes (a remote front end, say) use it to answer through the same type.
func NewFuture(n int) *Future {
	f := &Future{done: make(chan struct{})}
	if n == 1 {
		f.outputs = f.one[:]
	} else {
		f.outputs = make([][]byte, n)
	}
	f.remaining.Store(int32(n))
	if n == 0 {
		close(f.done)
	}
	return f
}

// Len is the number of items.
func (f *Future) Len() int { return len(f.outputs) }

// Complete settles item i with its output, or with err when err is not nil.
// Each item must be completed exactly once.
func (f *Future) Complete(i int, output []byte, err error) {
	if err != nil {
		f.setErr(i, err)
	} else {
		f.outputs[i] = output
	}
	if f.remaining.Add(-1) == 0 {
		close(f.done)
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
func (f *Future) Done() <-chan struct{} { return f.done }

// Result waits for every item and returns the outputs in order. If an item
// failed, the error is an *ItemError for the first one that did. Waiting ends
// early, with an error wrapping ErrDeadline, at the request's deadline or when
// ctx ends; the items still pending are answered later regardless.
func (f *Future) Result(ctx context.Context) ([][]byte, error) {
	if ctx.Done() == nil && f.deadline.IsZero() {
		<-f.done
		return f.result()
	}
	select {
	case <-f.done:
		return f.result()
	default:
	}
	var timeout <-chan time.Time
	if !f.deadline.IsZero() {
		t := time.NewTimer(time.Until(f.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-f.done:
		return f.result()
	case <-timeout:
		return nil, fmt.Errorf("%w: no answer by the request's deadline", ErrDeadline)
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("%w: %v", ErrDeadline, ctx.Err())
		}
		return nil, fmt.Errorf("%w: %v", ErrCanceled, ctx.Err())
	}
}

func (f *Future) result() ([][]byte, error) {
	if errs := f.errs.Load(); errs != nil {
		for i, err := range *errs {
			if err != nil {
				return f.outputs, &ItemError{Index: i, Err: err}
			}
		}
	}
	return f.outputs, nil
}

// gone reports whether the caller's context has ended.
func (f *Future) gone() bool { return f.ctx != nil && f.ctx.Err() != nil }

// expired reports whether the request's deadline has passed at now.
func (f *Future) expired(now time.Time) bool {
	return !f.deadline.IsZero() && !now.Before(f.deadline)
}
