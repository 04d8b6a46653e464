package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/model"
)

// unstartedSlot is an unstarted streamer of one slot whose deaths are
// counted as a crashed worker's, on the clock of the bubble it is made in.
func unstartedSlot(t *testing.T, cfg Config) (*Streamer, *slot) {
	t.Helper()
	cfg.InProcess = model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })
	cfg.Workers = 1
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.slots[0]
}

// Deaths older than RestartWindow no longer count towards MaxRestarts: a
// long-running server whose worker crashes now and then keeps its slot,
// and gives it up only for more than MaxRestarts deaths within the window.
func TestDeathsOutsideTheRestartWindowAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, sl := unstartedSlot(t, Config{MaxRestarts: 2, RestartWindow: time.Minute, BackoffMin: time.Millisecond})
		die := func(n int) {
			for range n {
				sl.onExit(idleWorker{}, errors.New("exit status 2"), time.Now())
			}
		}
		die(2)
		if !sl.backoff() {
			t.Fatal("slot given up after 2 deaths, with 2 restarts allowed")
		}
		time.Sleep(time.Minute)
		die(2)
		if !sl.backoff() {
			t.Fatal("slot given up after 2 deaths within the window and 2 a minute before; want the old ones forgotten")
		}
		die(1)
		if sl.backoff() {
			t.Fatal("slot still restarting after 3 deaths within the window, with 2 restarts allowed")
		}
		if st := s.Slots()[0].State; st != SlotFailed {
			t.Fatalf("slot %s after its restarts ran out, want %s", st, SlotFailed)
		}
	})
}

// A worker that lived StableAfter before it died restarts after the least
// back-off, whatever failures came before it; one that died young adds to
// them, and waits longer.
func TestAWorkerThatLivedStableAfterResetsTheBackoff(t *testing.T) {
	_, sl := unstartedSlot(t, Config{MaxRestarts: 1000, BackoffMin: time.Millisecond, BackoffMax: time.Hour, StableAfter: 30 * time.Second})
	failures := func() int {
		sl.s.mu.Lock()
		defer sl.s.mu.Unlock()
		return sl.failures
	}
	for range 4 {
		sl.onExit(idleWorker{}, errors.New("exit status 2"), time.Now())
	}
	if n := failures(); n != 4 {
		t.Fatalf("%d failures after 4 young deaths, want 4", n)
	}
	sl.onExit(idleWorker{}, errors.New("exit status 2"), time.Now().Add(-30*time.Second))
	if n := failures(); n != 1 {
		t.Fatalf("%d failures after a death that followed 30s of life, want 1: the death alone", n)
	}
}

// A worker that could not be started for want of the supervisor's own
// resources (its file descriptors, taken by clients' connections) is not
// the model's failure: its slot backs off and retries, and is never given
// up for it. Counted as crashes, such failures gave every slot up within
// seconds, and the server exited.
func TestStartsFailedForWantOfResourcesAreNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, sl := unstartedSlot(t, Config{MaxRestarts: 2, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})
		for _, errno := range []error{syscall.EMFILE, syscall.ENFILE, syscall.EAGAIN, syscall.ENOMEM} {
			err := fmt.Errorf("slot 0: make pipes for a worker: %w", &os.PathError{Op: "pipe2", Err: errno})
			for range 5 {
				sl.noteCrash(err, startFailure(err), nil)
				if !sl.backoff() {
					t.Fatalf("slot given up after failed starts for %v, with 2 restarts allowed", errno)
				}
			}
		}
		other := errors.New("slot 0: open model: cannot load weights")
		for range 3 {
			sl.noteCrash(other, startFailure(other), nil)
		}
		if sl.backoff() {
			t.Fatal("slot still restarting after 3 failed starts of its model, with 2 restarts allowed")
		}
	})
}
