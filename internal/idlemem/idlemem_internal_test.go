package idlemem

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// lineWatch is a log's output that closes seen at the first line holding
// want.
type lineWatch struct {
	want []byte
	once sync.Once
	seen chan struct{}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// forcedCollections counts the collections runtime.GC made.
func forcedCollections() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// What was live at the collection after a burst, and died later with
// nothing allocated (connections that sent only headers, held through it,
// then closed), is given back all the same: the memory used to stay held
// until the runtime's own collection minutes later.
func TestMemoryLiveAtTheLastCollectionAndDeadSinceIsGivenBack(t *testing.T) {
	var burst [][]byte
	for range 128 {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		burst = append(burst, b)
	}
	watch := &lineWatch{want: []byte("returned memory to the system"), seen: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := forcedCollections()
	idle := func() (uint64, bool) { return 0, false }
	done := make(chan struct{})
	go func() {
		defer close(done)
		release(ctx, idle, slog.New(slog.NewTextHandler(watch, nil)), 5*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()
	// The burst is live through release's first collections.
	deadline := time.After(10 * time.Second)
	for forcedCollections() < before+2 {
		select {
		case <-deadline:
			t.Fatal("release made no collection of an idle process that allocated 128 MiB")
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case <-watch.seen:
		t.Fatal("memory returned while the burst was live")
	default:
	}
	runtime.KeepAlive(burst)
	select {
	case <-watch.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the burst's 128 MiB died with nothing allocated since, and was not given back within 10 s")
	}
}

// A process whose live heap is large and that gets a little work now and
// then collects at the pace of an idle one, not after each piece of work:
// work between the idle checks used to restart the doubling of the wait,
// and with it two collections of the whole heap each time.
func TestATrickleOfWorkDoesNotCollectALargeHeapEachTime(t *testing.T) {
	var live [][]byte
	for range 64 {
		live = append(live, make([]byte, 1<<20))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const checks = 200
	var calls uint64
	over := make(chan struct{})
	trickle := func() (uint64, bool) {
		calls++
		if calls == checks {
			close(over)
		}
		return calls / 2, false // a piece of work every other check
	}
	before := forcedCollections()
	done := make(chan struct{})
	go func() {
		defer close(done)
		release(ctx, trickle, nil, time.Millisecond)
	}()
	<-over
	cancel()
	<-done
	runtime.KeepAlive(live)
	// About half the checks are idle: the waits of 1, 2, 4, 8, 16 and 32
	// of them, then 32 each, make 8 rounds of two collections, the first after the heap was made.
	if n := forcedCollections() - before; n > 20 {
		t.Errorf("%d collections in %d checks, half of them idle, of a 64 MiB live heap; want 20 at most", n, checks)
	}
}
