package supervisor

import (
	"fmt"
	"testing"
	"time"
)

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
