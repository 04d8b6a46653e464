package supervisor

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The queue hands out its keys oldest first, whatever the number of keys
// and however their items come and go: items pushed in a shuffled order
// of keys, some removed, come out by the time their key's first item was
// queued, each key's items in the order they came.
func TestQueueTakesTheOldestKeyFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	q := newQueue()
	now := time.Now()
	const keys, items = 300, 3000
	for i := range items {
		fut := newFuture(1)
		fut.enqueued = int64(i)
		q.push(item{fut: fut, key: fmt.Sprint("k", rng.IntN(keys)), index: int32(i)})
	}
	// Every fifth item goes, as a sweep takes those whose caller left.
	removed := 0
	q.remove(func(it *item) bool { return it.index%5 == 0 }, func(item) { removed++ })
	if removed != items/5 || q.n != items-removed {
		t.Fatalf("removed %d, %d left; want %d and %d", removed, q.n, items/5, items-items/5)
	}
	drop := func(it item, _ time.Time) { t.Fatalf("item %d dropped", it.index) }
	lastOf := map[string]int32{}
	for q.n > 0 {
		// The oldest is the key whose first item came first, of all.
		f := q.oldest()
		for key, other := range q.byKey {
			if other.len() > 0 && other.front().fut.enqueued < f.front().fut.enqueued {
				t.Fatalf("key %s, first queued at %d, comes before key %s, first queued at %d", f.key, f.front().fut.enqueued, key, other.front().fut.enqueued)
			}
		}
		// Batches of at most 2, so that keys go back into the heap with
		// items left.
		for _, it := range q.take(nil, f, 2, 1<<20, now, drop) {
			if prev, ok := lastOf[it.key]; it.index%5 == 0 || it.key != f.key || ok && it.index <= prev {
				t.Fatalf("item %d of key %s out of place", it.index, it.key)
			}
			lastOf[it.key] = it.index
		}
	}
	if q.oldest() != nil {
		t.Fatalf("an empty queue has live keys")
	}
}
