package supervisor

import (
	"context"
	"testing"
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
