package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
)

// local is a worker in this process: a goroutine calling a BatchFunc. A
// panic in the function is that worker's death, handled like a crashed child:
// the goroutine is replaced and its batch retried or isolated.
type local struct {
	sl      *slot
	fn      BatchFunc
	ctx     context.Context
	cancel  context.CancelFunc
	batches chan *batch // nil batch: stop
	exited  chan struct{}

	once   sync.Once
	reason error
}

func startLocal(sl *slot, fn BatchFunc) *local {
	ctx, cancel := context.WithCancel(context.Background())
	l := &local{sl: sl, fn: fn, ctx: ctx, cancel: cancel, batches: make(chan *batch, sl.s.cfg.PipelineDepth+1), exited: make(chan struct{})}
	go l.loop()
	return l
}

func (l *local) loop() {
	for {
		select {
		case b := <-l.batches:
			if b == nil {
				l.die(errors.New("stopped"))
				return
			}
			if _, ok := l.sl.pruneForRun(l, b, nil); !ok {
				return // abandoned: its batches are back in the queue
			}
			r, err := l.run(b)
			if err != nil {
				l.die(err)
				return
			}
			if isClosed(l.exited) {
				return
			}
			l.sl.onResult(l, r)
		case <-l.exited:
			return
		}
	}
}

// run calls the function for one batch; a panic comes back as an error.
func (l *local) run(b *batch) (r result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in the model function: %v", p)
		}
	}()
	r.id = b.id
	if len(b.data) == 0 {
		return r, nil // everything in it expired on the way
	}
	// The function gets its own list of the items, and b is not read after
	// it returns: a function that outlives its worker (abandoned on a
	// timeout) returns when b may have been answered elsewhere and reused.
	n := len(b.data)
	outputs, ferr := l.fn(l.ctx, slices.Clone(b.data))
	var itemErrs *BatchItemErrors
	switch {
	case errors.As(ferr, &itemErrs) && len(itemErrs.Errs) == n:
		r.itemErrors = make([]string, n)
		for i, e := range itemErrs.Errs {
			if e != nil {
				r.itemErrors[i] = e.Error()
			}
		}
	case ferr != nil:
		r.err = ferr.Error()
		return r, nil
	}
	r.outputs = outputs
	return r, nil
}

func (l *local) die(reason error) {
	l.once.Do(func() {
		l.reason = reason
		// Close exited before canceling, so that a batch that returns because
		// of the cancel is seen as belonging to a dead worker.
		close(l.exited)
		l.cancel()
	})
}

func (l *local) send(b *batch) { l.batches <- b }

func (l *local) stop() {
	select {
	case l.batches <- nil:
	case <-l.exited:
	}
}

// kill abandons the goroutine: a function stuck in a batch cannot be
// interrupted, only told through its context and no longer listened to.
func (l *local) kill(reason error) {
	if reason == nil {
		reason = errors.New("killed")
	}
	l.die(reason)
}

func (l *local) wait() error {
	<-l.exited
	return l.reason
}

func (l *local) pid() int { return os.Getpid() }

func (l *local) device() string { return "in-process" }
