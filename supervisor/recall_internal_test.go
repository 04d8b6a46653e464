package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
)

// unstartedPair is an unstarted streamer of two slots whose workers do
// nothing, its batch cost measured at 10ms, for tests that drive the slots
// by hand.
func unstartedPair(t *testing.T) *Streamer {
	t.Helper()
	s, err := New(Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }), Workers: 2, PipelineDepth: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cost.observe(1, 10*time.Millisecond)
	for _, sl := range s.slots {
		sl.w, sl.state = idleWorker{}, SlotReady
	}
	return s
}

// sendOne sends a batch of one item, name, to sl as if at time at, and
// returns it and its Future. It requires that s.mu is held.
func sendOne(s *Streamer, sl *slot, name string, at time.Time) (*batch, *Future) {
	its, f := queuedItems(name)
	b := s.newBatch(its, false)
	sl.sendLocked(b, at)
	return b, f
}

// A forced Shutdown drains the queue, then stops the workers. A slot that
// runs late meanwhile gives nothing back to the queue drained (nothing
// would run it): its batches are answered with ErrShuttingDown as its
// worker dies.
func TestNoBatchIsGivenBackOnceTheQueueIsDrainedForAStop(t *testing.T) {
	s := unstartedPair(t)
	late, onTime := s.slots[0], s.slots[1]
	now := time.Now()
	s.mu.Lock()
	_, fa := sendOne(s, late, "a", now.Add(-time.Second)) // runs late
	_, fb := sendOne(s, late, "b", now.Add(-time.Second)) // sent ahead before
	_, fc := sendOne(s, onTime, "c", now)
	_, fd := sendOne(s, onTime, "d", now) // its pipeline full
	s.mu.Unlock()
	close(s.stopping)
	s.mu.Lock()
	if pending := s.drainLocked(); len(pending) != 0 {
		t.Fatalf("%d items queued; want none", len(pending))
	}
	s.dispatchLocked(time.Now()) // the dispatcher, as its timer fires
	s.mu.Unlock()
	late.onExit(idleWorker{}, ErrShuttingDown, now)
	onTime.onExit(idleWorker{}, ErrShuttingDown, now)
	for name, f := range map[string]*Future{"a": fa, "b": fb, "c": fc, "d": fd} {
		if ok, err := answerOf(f, 0); !ok || !errors.Is(err, ErrShuttingDown) {
			t.Errorf("item %s: answered %v (%v); want ErrShuttingDown", name, ok, err)
		}
	}
}

// A worker's word that it gave a batch back, read after the queue was
// drained for a stop (it was in the pipe as the worker was killed), has
// the batch answered with ErrShuttingDown rather than queued for nothing.
func TestABatchGivenBackAsTheStreamerStopsIsAnswered(t *testing.T) {
	s := unstartedPair(t)
	sl := s.slots[0]
	w := sl.w
	s.mu.Lock()
	a, fa := sendOne(s, sl, "a", time.Now())
	b, fb := sendOne(s, sl, "b", time.Now())
	s.mu.Unlock()
	// The writer took both; b is asked back.
	sl.pruneForRun(w, a, a.sendSeq, nil)
	sl.pruneForRun(w, b, b.sendSeq, nil)
	s.mu.Lock()
	sl.recallLocked()
	s.mu.Unlock()
	close(s.stopping)
	s.mu.Lock()
	s.drainLocked()
	s.mu.Unlock()
	if err := sl.onRecalled(w, b.id); err != nil {
		t.Fatal(err)
	}
	sl.onExit(w, ErrShuttingDown, time.Now())
	for name, f := range map[string]*Future{"a": fa, "b": fb} {
		if ok, err := answerOf(f, 0); !ok || !errors.Is(err, ErrShuttingDown) {
			t.Errorf("item %s: answered %v (%v); want ErrShuttingDown", name, ok, err)
		}
	}
	if n := s.queue.items(); n != 0 {
		t.Errorf("%d items queued after the stop; want none", n)
	}
}
