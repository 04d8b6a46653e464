package supervisor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkQueue measures the batcher's data path alone: single items pushed
// under one batch key and taken out as full batches, as the dispatcher does.
// ns/op is per item.
func BenchmarkQueue(b *testing.B) {
	for _, size := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			q := newQueue()
			fut := newFuture(1) // shared by every item; never completed here
			data := []byte("\xa5hello")
			now := time.Now()
			drop := func(item, time.Time) { b.Fatal("an item was dropped") }
			taken := 0
			out := make([]item, 0, size) // reused, as the streamer reuses batches
			b.ReportAllocs()
			for b.Loop() {
				q.push(item{fut: fut, data: data})
				if q.n == size {
					out = q.take(out[:0], q.oldest(), size, 1<<20, now, drop)
					taken += len(out)
				}
			}
			if taken+q.n != b.N {
				b.Fatalf("took %d and left %d of %d items", taken, q.n, b.N)
			}
		})
	}
}

// BenchmarkQueueManyKeys drains a queue of one item for each of many keys,
// as requests of as many shapes queue them: ns/op is per item, and stays
// flat as the keys grow (each batch looked at every key before).
func BenchmarkQueueManyKeys(b *testing.B) {
	for _, keys := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("k", i)
			}
			now := time.Now()
			drop := func(item, time.Time) { b.Fatal("an item was dropped") }
			q := newQueue()
			out := make([]item, 0, 64)
			b.ReportAllocs()
			for b.Loop() {
				for i := range keys {
					fut := newFuture(1)
					fut.enqueued = int64(i)
					q.push(item{fut: fut, key: names[i]})
				}
				for q.n > 0 {
					out = q.take(out[:0], q.oldest(), 64, 1<<20, now, drop)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/item")
		})
	}
}

// BenchmarkFuture measures the future path: make a single-item Future,
// complete it, and collect its result.
//
//   - same-goroutine: completed before Result is called, so nothing waits;
//   - handoff: the caller waits in Result (a Future from Submit) and another
//     goroutine completes it, a wake-up per request as in serving;
//   - handoff-pooled: the same through the reused Futures of Predict;
//   - with-context: as handoff-pooled, with a cancellable context, which
//     makes the wait select on it as an HTTP handler's does.
func BenchmarkFuture(b *testing.B) {
	out := []byte("\xa5hello")
	b.Run("same-goroutine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f := newFuture(1)
			f.complete(0, out, nil)
			if got, err := f.Result(context.Background()); err != nil || len(got) != 1 {
				b.Fatal(got, err)
			}
		}
	})
	// handoff runs 64 callers, each making a Future, handing it to one
	// completer (as a result reader answers a batch) and waiting for it.
	handoff := func(b *testing.B, ctx context.Context, pooled bool) {
		futs := make(chan *Future, 1024)
		var completer sync.WaitGroup
		completer.Go(func() {
			for f := range futs {
				f.complete(0, out, nil)
			}
		})
		var pool futurePool
		var callers sync.WaitGroup
		per := b.N/64 + 1
		b.ReportAllocs()
		b.ResetTimer()
		for range 64 {
			callers.Go(func() {
				for range per {
					var got [][]byte
					var err error
					if pooled {
						f := pool.get(1)
						futs <- f
						var reusable bool
						if got, reusable, err = f.wait(ctx); reusable {
							pool.put(f)
						}
					} else {
						f := newFuture(1)
						futs <- f
						got, err = f.Result(ctx)
					}
					if err != nil || len(got) != 1 {
						panic(fmt.Sprint(got, err))
					}
				}
			})
		}
		callers.Wait()
		b.StopTimer()
		close(futs)
		completer.Wait()
	}
	b.Run("handoff", func(b *testing.B) { handoff(b, context.Background(), false) })
	b.Run("handoff-pooled", func(b *testing.B) { handoff(b, context.Background(), true) })
	b.Run("with-context", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		handoff(b, ctx, true)
	})
}
