// Package waitq is a first-in, first-out queue whose taker waits for what
// is put in it, and from which what was put may be taken back until it is
// taken. Putting never blocks: the supervisor puts its orders to a worker
// under its lock, and a worker's reader puts the batches it reads ahead of
// the model. Neither bounds it: the one who puts does (a worker holds no
// more batches than the supervisor's pipeline sends it).
package waitq

import (
	"slices"
	"sync"
)

// Queue holds values of T until they are taken. The zero Queue is not
// ready for use: make one with New.
type Queue[T any] struct {
	mu    sync.Mutex
	list  []T
	ended bool
	err   error         // why it ended
	more  chan struct{} // holds a token once a value came or the queue ended
}

// New returns an empty queue.
func New[T any]() *Queue[T] { return &Queue[T]{more: make(chan struct{}, 1)} }

// Put puts x behind the values waiting.
func (q *Queue[T]) Put(x T) {
	q.mu.Lock()
	q.list = append(q.list, x)
	q.mu.Unlock()
	q.wake()
}

// End says that no more values will come, and why (nil for a plain end).
// The values put before it are still taken.
func (q *Queue[T]) End(err error) {
	q.mu.Lock()
	q.ended, q.err = true, err
	q.mu.Unlock()
	q.wake()
}

func (q *Queue[T]) wake() {
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// Remove takes the first value waiting that match picks out of the queue,
// and reports whether there was one.
func (q *Queue[T]) Remove(match func(T) bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.IndexFunc(q.list, match)
	if i < 0 {
		return false
	}
	q.list = slices.Delete(q.list, i, i+1)
	return true
}

// Take waits for the oldest value and hands it over. It reports false once
// done is closed, and once the queue ended with nothing left, with the
// error End was given.
func (q *Queue[T]) Take(done <-chan struct{}) (T, bool, error) {
	var zero T
	for {
		q.mu.Lock()
		if len(q.list) > 0 {
			x := q.list[0]
			q.list = slices.Delete(q.list, 0, 1)
			q.mu.Unlock()
			return x, true, nil
		}
		ended, err := q.ended, q.err
		q.mu.Unlock()
		if ended {
			return zero, false, err
		}
		select {
		case <-q.more:
		case <-done:
			return zero, false, nil
		}
	}
}
