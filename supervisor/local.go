package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/streamer-dev/streamer/model"
)

// local is a worker in this process: a goroutine calling a Model's Predict.
// A panic in Predict is that worker's death, handled like a crashed child:
// the goroutine is replaced and its batch retried or isolated.
type local struct {
	sl      *slot
	model   model.Model
	ctx     context.Context
	cancel  context.CancelFunc
	batches chan *batch // nil batch: stop
	exited  chan struct{}

	once   sync.Once
	reason error
}

func startLocal(sl *slot, m model.Model) *local {
	ctx, cancel := context.WithCancel(context.Background())
	l := &local{sl: sl, model: m, ctx: ctx, cancel: cancel, batches: make(chan *batch, sl.s.cfg.PipelineDepth+1), exited: make(chan struct{})}
	go func() {
		// Every way out of loop has the worker dead already, but one: a
		// model that ended the goroutine with runtime.Goexit (as t.Fatal
		// does in a test's model), which no recover sees. That is a death
		// too, else its batch would wait for the worker timeout.
		defer l.die(errGoexit)
		l.loop()
	}()
	return l
}

var errGoexit = errors.New("the model ended its goroutine (runtime.Goexit, as t.Fatal and t.FailNow do) rather than return")

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

// run calls the model for one batch. A panic comes back as a short error,
// its stack logged, as a crashed child's stderr would be.
func (l *local) run(b *batch) (r result, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.sl.s.log.Error("panic in the in-process model", "slot", l.sl.id, "batch", r.id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic in the model: %v", p)
		}
	}()
	r.id = b.id
	if len(b.data) == 0 {
		return r, nil // everything in it expired on the way
	}
	// The model gets its own list of the items, and b is not read after
	// it returns: a call that outlives its worker (abandoned on a timeout)
	// returns when b may have been answered elsewhere and reused.
	r.outputs, r.itemErrs, r.err = model.Call(l.ctx, l.model, slices.Clone(b.data))
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

// kill abandons the goroutine: a Predict stuck in a batch cannot be
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
