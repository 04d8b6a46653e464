package supervisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// children lists the pids of this process's living children.
func children(t *testing.T) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // it ended meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) > 1 && fields[1] == self && fields[0] != "Z" {
			pid, _ := strconv.Atoi(strings.Fields(string(data))[0])
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestStartAfterShutdownStartsNothing(t *testing.T) {
	s, err := supervisor.New(processConfig("echo", 2, 8))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Fatalf("Start after Shutdown: %v, want ErrShuttingDown", err)
	}
	if pids := children(t); len(pids) != 0 {
		t.Fatalf("Start after Shutdown started processes %v", pids)
	}
	if _, err := s.Submit(context.Background(), items("x")); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Fatalf("Submit after Shutdown: %v, want ErrShuttingDown", err)
	}
}

func TestSecondStartFails(t *testing.T) {
	s := start(t, supervisor.Config{InProcess: model.Func(newGate(true).fn)})
	if err := s.Start(context.Background()); !errors.Is(err, supervisor.ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	if _, err := s.Predict(context.Background(), items("still serving")); err != nil {
		t.Fatal(err)
	}
}

// TestStartWhoseContextEndsStopsWhatItStarted: workers that take too long
// to initialise are stopped, and waited for, when Start's context ends.
func TestStartWhoseContextEndsStopsWhatItStarted(t *testing.T) {
	s, err := supervisor.New(processConfig("chaos:init-delay=1h", 2, 8))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := s.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start: %v, want the context's error", err)
	}
	if pids := children(t); len(pids) != 0 {
		t.Fatalf("worker processes %v outlived a Start whose context ended", pids)
	}
	if _, err := s.Submit(context.Background(), items("x")); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Fatalf("Submit after the failed Start: %v, want ErrShuttingDown", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after the failed Start: %v", err)
	}
}

// TestSecondShutdownReturnsAtOnce: once a Shutdown has returned, another
// needs no time at all, even with a context that has already ended.
func TestSecondShutdownReturnsAtOnce(t *testing.T) {
	s := start(t, supervisor.Config{InProcess: model.Func(newGate(true).fn)})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ended); err != nil {
		t.Fatalf("second Shutdown: %v, want nil at once", err)
	}
}

// TestConcurrentShutdownWaitsForTheFirst: a Shutdown called while another
// drains returns only once the admitted work is answered.
func TestConcurrentShutdownWaitsForTheFirst(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn)})
	f, err := s.Submit(context.Background(), items("admitted"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	firstDone := make(chan error, 1)
	go func() { firstDone <- s.Shutdown(context.Background()) }()
	waitFor(t, "the drain to begin", func() bool { return !s.Ready() })
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Shutdown while a batch runs: %v, want it to wait and hit its deadline", err)
	}
	g.release()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if _, err := f.Result(context.Background()); err != nil {
		t.Fatalf("admitted item: %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownWhileStartRunsWaitsForAllItStarted: a Shutdown made while
// Start runs stops all that Start started and waits for it, the
// dispatcher included. Before, Start counted the dispatcher for
// Shutdown's wait only after letting go of its lock, so that a Shutdown
// could wait before the count and return with the dispatcher running: the
// race detector saw the count made concurrently with the wait within a
// few dozen rounds.
func TestShutdownWhileStartRunsWaitsForAllItStarted(t *testing.T) {
	echo := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for round := range 200 {
		s, err := supervisor.New(supervisor.Config{InProcess: echo, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(ended) }()
		// Start returns nil when a worker was ready before the Shutdown
		// stopped it.
		if err := s.Start(context.Background()); err != nil && !errors.Is(err, supervisor.ErrShuttingDown) {
			t.Fatalf("round %d: Start: %v; want nil or ErrShuttingDown", round, err)
		}
		if err := <-shut; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: Shutdown: %v; want nil or its context's error", round, err)
		}
		if _, err := s.Submit(context.Background(), items("x")); !errors.Is(err, supervisor.ErrShuttingDown) {
			t.Fatalf("round %d: Submit once both returned: %v; want ErrShuttingDown", round, err)
		}
	}
}

// TestAvailableOnceAWorkerIsReady: workers slower to start than
// UnavailableAfter leave the streamer unavailable meanwhile; once Start
// has returned, a worker being ready, it is available at once, not only
// after its dispatcher's next look (a broker node beats by it as its
// Start returns).
func TestAvailableOnceAWorkerIsReady(t *testing.T) {
	cfg := processConfig("chaos:init-delay=300ms", 1, 4)
	cfg.UnavailableAfter = 50 * time.Millisecond
	s := start(t, cfg)
	if !s.Available() {
		t.Fatal("not available as Start returned, with its worker ready")
	}
	if _, err := s.Predict(context.Background(), items("x")); err != nil {
		t.Fatalf("a request once available: %v", err)
	}
}
