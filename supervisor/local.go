package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/streamer-dev/streamer/internal/waitq"
	"github.com/streamer-dev/streamer/model"
)

// local is a worker in this process: a goroutine calling a Model's Predict.
// A panic in Predict is that worker's death, handled like a crashed child:
// the goroutine is replaced and its batch retried or isolated.
type local struct {
	sl     *slot
	model  model.Model
	ctx    context.Context
	cancel context.CancelFunc
	exited chan struct{}
	orders *orders
	// handling is held while the goroutine reads a batch that the slot
	// shares with it or answers one, never across the model's call: wait
	// takes it, so that once the slot hears of the death and gives the
	// batches to other workers, a killed goroutine whose call may never
	// return touches none of them again, and no answer is still being
	// delivered.
	handling sync.Mutex

	once   sync.Once
	reason error
}

func startLocal(sl *slot, m model.Model) *local {
	ctx, cancel := context.WithCancel(context.Background())
	l := &local{sl: sl, model: m, ctx: ctx, cancel: cancel, orders: waitq.New[order](), exited: make(chan struct{})}
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
		o, ok, _ := l.orders.Take(l.exited)
		if !ok || isClosed(l.exited) {
			return
		}
		if o.b == nil {
			l.die(errors.New("stopped"))
			return
		}
		id, data, check := l.take(o.b, o.seq)
		switch check {
		case takeDead:
			return // dead: its batches are back in the queue, or soon will be
		case takeStale:
			continue // given back before it was taken
		}
		r, err := l.call(id, data)
		if err != nil {
			l.die(err)
			return
		}
		if !l.settle(r) {
			return
		}
	}
}

// take readies b, sent as send seq, to run and returns its id and its own
// list of the items' bytes; or takeDead when the worker is dead: the select
// in loop may pick a batch though exited is closed too, and a dead worker's
// batches go back to the queue, to be run and reused elsewhere; or
// takeStale when b was given back since that send (see slot.recallLocked).
func (l *local) take(b *batch, seq uint64) (id uint64, data [][]byte, check takeCheck) {
	l.handling.Lock()
	defer l.handling.Unlock()
	if isClosed(l.exited) {
		return 0, nil, takeDead
	}
	if _, check := l.sl.pruneForRun(l, b, seq, nil); check != takeIt {
		return 0, nil, check
	}
	l.sl.s.modelCalls.Add(1) // while the worker lives: see Streamer.modelCalls
	return b.id, slices.Clone(b.data), takeIt
}

// call runs a batch that take took, and counts its end.
func (l *local) call(id uint64, data [][]byte) (result, error) {
	defer l.sl.s.modelCalls.Done()
	return l.run(id, data)
}

// settle has the slot answer the batch with r, completing its Futures in
// this goroutine, or reports false when the worker is dead: the batch is
// back in the queue then, or soon will be. It holds handling meanwhile, so
// that a Shutdown that kills the worker in the middle of the answer, and
// waits for it, returns only once every Future of the batch is completed.
func (l *local) settle(r result) bool {
	l.handling.Lock()
	defer l.handling.Unlock()
	if isClosed(l.exited) {
		return false
	}
	l.sl.onResult(l, r)
	return true
}

// run calls the model for batch id, whose items' bytes are data. A panic
// comes back as a short error, its stack logged, as a crashed child's
// stderr would be.
func (l *local) run(id uint64, data [][]byte) (r result, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.sl.s.log.Error("panic in the in-process model", "slot", l.sl.id, "batch", r.id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic in the model: %v", p)
		}
	}()
	r.id = id
	if len(data) == 0 {
		return r, nil // everything in it expired on the way
	}
	// The model gets its own list of the items (see take): a call that
	// outlives its worker (abandoned on a timeout) may still be running
	// when its batch has been answered elsewhere and reused.
	r.outputs, r.itemErrs, r.err = model.Call(l.ctx, l.model, data)
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

func (l *local) send(b *batch) { l.orders.Put(order{b: b, seq: b.sendSeq}) }

// recall does nothing: the goroutine takes a batch only to run it, and one
// not taken yet is given back without its word (see slot.recallLocked).
func (l *local) recall(uint64) {}

func (l *local) forget(b *batch) { forgetOrder(l.orders, b) }

func (l *local) stop() { l.orders.Put(order{}) }

// kill abandons the goroutine: a Predict stuck in a batch cannot be
// interrupted, only told through its context and no longer listened to.
func (l *local) kill(reason error) {
	if reason == nil {
		reason = errors.New("killed")
	}
	l.die(reason)
}

// wait returns once the worker is dead and its goroutine has let go of
// the batch it was taking or answering (see handling); not once the
// goroutine has ended, which a call stuck in the model may never let it do.
func (l *local) wait() error {
	<-l.exited
	l.handling.Lock()
	defer l.handling.Unlock()
	return l.reason
}

func (l *local) pid() int { return os.Getpid() }

func (l *local) device() string { return "in-process" }

// modelName is empty: the embedder that handed over the model knows it,
// and Describe, the model's own code, is not called under the lock.
func (l *local) modelName() string { return "" }
