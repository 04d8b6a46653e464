package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A request answered just as its caller's context ended is answered: the
// answer wins over the end of the wait, through Predict's pooled futures as
// through Result.
func TestAnsweredFutureWinsOverEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var pool futurePool
	for i := range 1000 {
		f := pool.get(1)
		f.complete(0, []byte("out"), nil)
		out, reusable, err := f.wait(ctx)
		if err != nil || !reusable || len(out) != 1 || string(out[0]) != "out" {
			t.Fatalf("try %d: wait = %q, reusable %v, %v; want the answer", i, out, reusable, err)
		}
		pool.put(f)

		g := newFuture(1)
		g.complete(0, []byte("out"), nil)
		if out, err := g.Result(ctx); err != nil || string(out[0]) != "out" {
			t.Fatalf("try %d: Result = %q, %v; want the answer", i, out, err)
		}
	}
}

// OnDone runs its function once, after the last item is completed, in the
// goroutine that completes it; on a finished Future, at once. Result then
// has the answer without waiting.
func TestOnDoneRunsOnceWhenTheLastItemIsCompleted(t *testing.T) {
	f := newFuture(3)
	runs := 0
	f.OnDone(func() {
		runs++
		out, err := f.Result(context.Background())
		if !errors.Is(err, ErrModel) || len(out) != 3 || string(out[0]) != "a" || string(out[2]) != "c" {
			t.Errorf("Result in OnDone = %q, %v; want a, c and item 1's error", out, err)
		}
	})
	f.complete(2, []byte("c"), nil)
	f.complete(0, []byte("a"), nil)
	if runs != 0 {
		t.Fatalf("OnDone ran %d times before the last item", runs)
	}
	f.complete(1, nil, ErrModel)
	if runs != 1 {
		t.Fatalf("OnDone ran %d times after the last item; want 1", runs)
	}

	g := newFuture(1)
	g.complete(0, []byte("out"), nil)
	ran := false
	g.OnDone(func() { ran = true })
	if !ran {
		t.Fatal("OnDone on a finished Future did not run at once")
	}

	h := newFuture(1)
	h.OnDone(func() {})
	defer func() {
		if recover() == nil {
			t.Fatal("a second OnDone on one Future did not panic")
		}
	}()
	h.OnDone(func() {})
}

// A wait whose deadline is its context's own starts no timer of its own
// (the context's ends it), and one under another context keeps the
// request's deadline.
func TestAFuturesWaitTimesOnlyWhatItsContextDoesNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	deadline, _ := ctx.Deadline()
	answered := make(chan struct{})
	close(answered)
	f := newFuture(1)
	f.deadline, f.callerSet, f.ctx = deadline, true, ctx
	if allocs := testing.AllocsPerRun(100, func() {
		if err := f.await(ctx, answered); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("a wait under the context whose deadline it has: %v allocations, want none (no timer)", allocs)
	}

	// Submitted under a context that has gone (as a handler's may), waited
	// for under another: the deadline still ends the wait.
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	deadline, _ = short.Deadline()
	g := newFuture(1)
	g.deadline, g.callerSet, g.ctx = deadline, true, short
	if err := g.await(context.Background(), make(chan struct{})); !errors.Is(err, ErrDeadline) {
		t.Errorf("a wait under another context past the caller's deadline: %v, want ErrDeadline", err)
	}
}
