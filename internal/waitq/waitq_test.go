package waitq_test

import (
	"errors"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/waitq"
)

// Values come out in the order they went in; one taken back never comes
// out; a taker waits for the next value, and ends once the queue ended
// and is empty, or once it is told to stop waiting.
func TestQueue(t *testing.T) {
	q := waitq.New[int]()
	for i := range 4 {
		q.Put(i)
	}
	if !q.Remove(func(v int) bool { return v == 2 }) {
		t.Fatal("2 was waiting, and not taken back")
	}
	if q.Remove(func(v int) bool { return v == 7 }) {
		t.Fatal("7 was never put, yet taken back")
	}
	for _, want := range []int{0, 1, 3} {
		if got, ok, err := q.Take(nil); !ok || err != nil || got != want {
			t.Fatalf("took %d, %v, %v; want %d", got, ok, err, want)
		}
	}
	if q.Remove(func(v int) bool { return v == 3 }) {
		t.Fatal("3, taken already, was taken back")
	}

	got := make(chan int, 1)
	go func() {
		v, _, _ := q.Take(nil)
		got <- v
	}()
	select {
	case v := <-got:
		t.Fatalf("took %d from an empty queue", v)
	case <-time.After(20 * time.Millisecond):
	}
	q.Put(5)
	if v := <-got; v != 5 {
		t.Fatalf("the waiting taker took %d; want 5", v)
	}

	done := make(chan struct{})
	close(done)
	if _, ok, err := q.Take(done); ok || err != nil {
		t.Fatalf("told to stop waiting: %v, %v; want false, nil", ok, err)
	}

	why := errors.New("the end")
	q.Put(6)
	q.End(why)
	if v, ok, err := q.Take(nil); !ok || v != 6 {
		t.Fatalf("after End, the value put before it: %d, %v, %v; want 6", v, ok, err)
	}
	if _, ok, err := q.Take(nil); ok || !errors.Is(err, why) {
		t.Fatalf("once ended and empty: %v, %v; want false and the end's error", ok, err)
	}
}
