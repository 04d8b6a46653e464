package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
)

func TestPipeErrors(t *testing.T) {
	if err := pipeError(""); err != nil {
		t.Errorf(`pipeError("") = %v, want nil`, err)
	}
	if err := pipeError("model failed to load"); err == nil || err.Error() != "model failed to load" {
		t.Errorf("pipeError kept %v, want the text", err)
	}
	if errs := pipeErrors(nil); errs != nil {
		t.Errorf("pipeErrors(nil) = %v, want nil: no item errors at all", errs)
	}
	errs := pipeErrors([]string{"", "bad shape"})
	if len(errs) != 2 || errs[0] != nil || errs[1] == nil || errs[1].Error() != "bad shape" {
		t.Errorf("pipeErrors = %v, want [nil, bad shape]", errs)
	}
}

// The first death of a batch whose hunt found its bad item before the
// death was noted (the lock is let go between the requeue and the note,
// and another slot may run the pieces meanwhile) is forgiven as it is
// noted, as it would have been at the verdict: before, the verdict found
// nothing to take back, and the death counted towards MaxRestarts.
func TestAFirstDeathNotedAfterItsHuntFoundPoisonIsForgiven(t *testing.T) {
	s := unstartedEcho(t)
	sl := s.slots[0]
	s.mu.Lock()
	hunt := &firstCrash{slot: sl, returned: s.returned, pieces: 1}
	s.returned++ // the model answered a batch since the death
	s.huntOverLocked(hunt, false)
	s.mu.Unlock()
	sl.noteCrash(errors.New("worker died"), crashFirstOfBatch, hunt)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(sl.recent) != 0 || !hunt.forgiven {
		t.Errorf("%d deaths counted towards MaxRestarts (forgiven %v); want the death its bad item explains taken back", len(sl.recent), hunt.forgiven)
	}
}

// A batch whose items all expired as it was sent, at the head of a worker
// that dies, is dropped rather than split: halves of nothing ran as two
// empty suspect batches, each alone on a worker.
func TestAnEmptyBatchOfADeadWorkerIsNotSplit(t *testing.T) {
	s := unstartedEcho(t)
	sl := s.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	head := s.newBatch(nil, false)
	head.crash = &firstCrash{slot: sl, returned: s.returned, pieces: 1}
	hunt := head.crash
	if settled := sl.requeueLocked([]*batch{head}, false); len(settled) != 0 {
		t.Errorf("settled %d items of an empty batch", len(settled))
	}
	if n := len(s.queue.ready); n != 0 {
		t.Errorf("%d batches requeued from an empty one; want none", n)
	}
	if hunt.pieces != 0 {
		t.Errorf("the hunt has %d pieces left; want it over", hunt.pieces)
	}
}

// unstartedEcho is a Streamer of one slot serving an echo model in
// process, not started: its parts are there for a test to drive.
func unstartedEcho(t *testing.T) *Streamer {
	t.Helper()
	s, err := New(Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }), Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An item whose caller's context ran out of time is dropped as expired,
// even when the clock read before the drop was short of its deadline: its
// caller got a deadline error, not a cancellation (before, it was counted
// canceled, and its HTTP caller got 499 rather than 504).
func TestAnItemWhoseContextRanOutIsExpired(t *testing.T) {
	s := unstartedEcho(t)
	deadline := time.Now().Add(-time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	f := newFuture(1)
	f.ctx, f.deadline = ctx, deadline
	s.drop(item{fut: f}, deadline.Add(-time.Millisecond))
	if _, err := f.Result(context.Background()); !errors.Is(err, ErrDeadline) {
		t.Errorf("the item was answered %v; want ErrDeadline", err)
	}
	if st := s.Stats(); st.Expired != 1 || st.Canceled != 0 || st.Failed != 1 || st.Answered != 1 {
		t.Errorf("counted answered %d, failed %d, expired %d, canceled %d; want 1, 1, 1, 0", st.Answered, st.Failed, st.Expired, st.Canceled)
	}
}

// So is one whose request's own deadline (timeout_ms) ended its caller's
// wait, whose handler then canceled its context on the way out: the
// caller got a deadline error, and left for no other reason.
func TestAnItemPastItsRequestsDeadlineIsExpired(t *testing.T) {
	s := unstartedEcho(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := newFuture(1)
	stale := time.Now() // read before the deadline, as a dispatcher may
	f.ctx, f.deadline = ctx, stale.Add(time.Microsecond)
	for time.Now().Before(f.deadline) { // a microsecond: spun, not slept
	}
	s.drop(item{fut: f}, stale)
	if _, err := f.Result(context.Background()); !errors.Is(err, ErrDeadline) {
		t.Errorf("the item was answered %v; want ErrDeadline", err)
	}
	if st := s.Stats(); st.Expired != 1 || st.Canceled != 0 {
		t.Errorf("counted expired %d, canceled %d; want 1, 0", st.Expired, st.Canceled)
	}
}

// Every death of a model crashing on two batches of three, whatever they
// hold, is counted towards MaxRestarts once: whether its hunt blamed the
// model, or ended with its pieces answered and no verdict. None is left
// out (before, the deaths of a hunt with no verdict were) and none is
// counted twice.
func TestEveryDeathOfAModelCrashingAtRandomCountsOnce(t *testing.T) {
	var calls atomic.Int64
	fn := func(_ context.Context, batch [][]byte) ([][]byte, error) {
		if calls.Add(1)%3 != 0 {
			panic("crashes at random")
		}
		return batch, nil
	}
	s, err := New(Config{InProcess: model.Func(fn), Workers: 2, BatchSize: 4, MaxRestarts: 1000, BackoffMin: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	var futures []*Future
	for i := range 40 {
		f, err := s.Submit(context.Background(), [][]byte{fmt.Appendf(nil, "innocent%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		if _, err := f.Result(context.Background()); err != nil && !errors.Is(err, ErrModelFailed) {
			t.Fatalf("item %d: %v; want its output or ErrModelFailed", i, err)
		}
	}
	// Every item is answered, so every hunt is over; once every slot is
	// ready again, every death has been noted too.
	counted := func() (int, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, sl := range s.slots {
			if sl.state != SlotReady {
				return 0, false
			}
			n += len(sl.recent)
		}
		return n, true
	}
	deadline := time.Now().Add(10 * time.Second)
	n, ready := counted()
	for ; !ready; n, ready = counted() {
		if time.Now().After(deadline) {
			t.Fatalf("the slots not ready again: %+v", s.Slots())
		}
		time.Sleep(time.Millisecond)
	}
	st := s.Stats()
	if st.Poisoned != 0 {
		t.Fatalf("%d items taken for poison; the test wants every hunt to end blaming the model or with no verdict", st.Poisoned)
	}
	if uint64(n) != st.Crashes {
		t.Errorf("%d deaths counted towards MaxRestarts, of %d", n, st.Crashes)
	}
}

// killCounter is a worker that counts the kills it is sent.
type killCounter struct {
	idleWorker
	kills *int
}

func (k killCounter) kill(error) { *k.kills++ }

// A retired slot stays draining while the worker killed for running past
// the worker timeout dies, and the dispatcher looks at it in the meantime:
// the worker is killed, and the kill logged, once. (Before, once per look
// of the dispatcher until the worker was gone: three lines in a few
// milliseconds for one stopped worker.)
func TestAWorkerPastItsTimeoutIsKilledOnce(t *testing.T) {
	var logs syncbuf.Buffer
	s, err := New(Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }), Workers: 1,
		WorkerTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sl := s.slots[0]
	kills := 0
	its, _ := queuedItems("a")
	s.mu.Lock()
	sl.w = killCounter{kills: &kills}
	sl.state = SlotReady
	sl.sendLocked(s.newBatch(its, false), time.Now().Add(-time.Minute))
	s.retireLocked(sl)
	for range 3 {
		s.checkTimeouts(time.Now(), func(time.Time) {})
	}
	s.mu.Unlock()
	if n := strings.Count(logs.String(), "killing worker"); kills != 1 || n != 1 {
		t.Errorf("a draining worker past its timeout, looked at three times: killed %d times, logged %d times; want once each", kills, n)
	}
}
