package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/supervisor"
)

// threadlessEnv, in a worker's environment, names a file whose presence
// makes the worker's model die as a Go process does that cannot start a
// thread under a limit of processes: its runtime's words, then exit 2.
const threadlessEnv = "SUPERVISOR_TEST_THREADLESS_IF"

// idleThreadlessEnv, set beside threadlessEnv, has the worker die so a
// moment after it is ready, running nothing, as a runtime does that wants
// a thread for itself.
const idleThreadlessEnv = "SUPERVISOR_TEST_THREADLESS_IDLE"

// threadless is the model threadlessEnv asks for: an echo, but for that.
type threadless struct{ path string }

func newThreadless(path string) threadless {
	m := threadless{path: path}
	if os.Getenv(idleThreadlessEnv) != "" {
		// Time enough to be ready first, even on a loaded machine: a
		// worker that dies before it is ready fails its start instead.
		time.AfterFunc(500*time.Millisecond, m.dieIfLimited)
	}
	return m
}

// dieIfLimited dies for want of a thread once for each file named path
// and a suffix that is there, taking one away.
func (m threadless) dieIfLimited() {
	if left, _ := filepath.Glob(m.path + "*"); len(left) > 0 {
		_ = os.Remove(left[0])
		dieThreadless()
	}
}

func dieThreadless() {
	fmt.Fprintln(os.Stderr, "runtime: failed to create new OS thread (have 9 already; errno=11)")
	fmt.Fprintln(os.Stderr, "runtime: may need to increase max user processes (ulimit -u)")
	fmt.Fprintln(os.Stderr, "fatal error: newosproc")
	os.Exit(2)
}

// Predict dies for want of a thread while the files last, and always for
// the item "hog", as a model does that an item has start threads without
// end.
func (m threadless) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	m.dieIfLimited()
	for _, it := range items {
		switch string(it) {
		case "hog":
			dieThreadless()
		case "closepipe":
			// Its pipe to the supervisor, as a library that closes every
			// descriptor past stderr would, and on it runs.
			_ = os.NewFile(ipc.WorkerOutFD, "results").Close()
			select {}
		}
	}
	return items, nil
}

func (threadless) Close() error { return nil }

// A worker that dies for want of a thread (a container's pids limit) is
// the machine's want, not its batch's fault: the batch runs again whole,
// no item is hunted or convicted, the deaths do not use up the restarts,
// and once the limit lets it, the item is answered. Before, each such
// death counted as a crash and began a hunt: the lone item was convicted
// as poison, and the slot given up.
func TestAWorkerWithoutThreadsIsTheMachinesWant(t *testing.T) {
	t.Run("running a batch", func(t *testing.T) { testWorkerWithoutThreads(t, false) })
	t.Run("idle", func(t *testing.T) { testWorkerWithoutThreads(t, true) })
}

func testWorkerWithoutThreads(t *testing.T, idle bool) {
	limited := filepath.Join(t.TempDir(), "limited")
	cfg := processConfig("echo", 1, 8)
	cfg.MaxLatency, cfg.BackoffMin, cfg.BackoffMax, cfg.MaxRestarts = time.Millisecond, time.Millisecond, 20*time.Millisecond, 1
	cfg.Process.Env = []string{threadlessEnv + "=" + limited}
	if idle {
		cfg.Process.Env = append(cfg.Process.Env, idleThreadlessEnv+"=1")
	}
	// As many deaths as a batch runs again whole: each would count, and
	// two give the slot up.
	deaths := 2
	for i := range deaths {
		if err := os.WriteFile(fmt.Sprint(limited, i), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, cfg)
	answered := make(chan error, 1)
	ask := func() {
		go func() {
			_, err := s.Predict(context.Background(), items("a"))
			answered <- err
		}()
	}
	if !idle {
		ask()
	}
	waitFor(t, "the deaths for want of threads", func() bool { return s.Slots()[0].Crashes >= deaths })
	if why := s.Slots()[0].LastErr; !strings.Contains(why, "could not start a thread") || !strings.Contains(why, "failed to create new OS thread") {
		t.Errorf("the death: %q; want it said to be for want of threads, in the runtime's words", why)
	}
	if idle {
		ask() // after the deaths, which had nothing to run
	}
	if err := <-answered; err != nil {
		t.Fatalf("the item, once the worker has threads: %v; want it answered", err)
	}
	if st := s.Slots()[0].State; st != supervisor.SlotReady {
		t.Errorf("the slot is %s; want it ready, not given up", st)
	}
}

// An item that has its worker die for want of threads every time it runs
// (a model that it has start threads without end) is not taken for the
// machine's want for ever: once its batch ran again whole twice, it is
// hunted as after any crash, convicted, and its batch-mates answered.
func TestAnItemThatTakesEveryThreadIsConvicted(t *testing.T) {
	cfg := processConfig("echo", 1, 8)
	cfg.MaxLatency, cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, time.Millisecond, 20*time.Millisecond
	cfg.Process.Env = []string{threadlessEnv + "=" + filepath.Join(t.TempDir(), "never")}
	s := start(t, cfg)
	// A model that has answered too few batches does not convict: the
	// item might be innocent and the model one that crashes at random.
	seenWorking(t, s)
	errs := make(chan error, 3)
	for _, name := range []string{"ok1", "hog", "ok2"} {
		go func() {
			// Room for two whole reruns and a hunt, each with a worker
			// restarted: seconds on a busy machine.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := s.Predict(ctx, items(name))
			if name != "hog" && err != nil {
				err = fmt.Errorf("%s: %w", name, err)
			}
			if name == "hog" {
				if !errors.Is(err, supervisor.ErrPoison) {
					err = fmt.Errorf("hog: %v; want ErrPoison", err)
				} else {
					err = nil
				}
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// A worker that closes its pipe to the server and runs on is killed for
// it, and its death says so: not that a SIGKILL came from elsewhere, which
// points at the out-of-memory killer.
func TestAWorkerThatClosesItsPipeIsKilledSayingSo(t *testing.T) {
	cfg := processConfig("echo", 1, 8)
	cfg.MaxLatency, cfg.BackoffMin = time.Millisecond, time.Millisecond
	cfg.Process.Env = []string{threadlessEnv + "=" + filepath.Join(t.TempDir(), "never")}
	s := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() { _, _ = s.Predict(ctx, items("closepipe")) }()
	waitFor(t, "the worker's death", func() bool { return s.Slots()[0].Crashes >= 1 })
	if why := s.Slots()[0].LastErr; !strings.Contains(why, "closed its pipe") || strings.Contains(why, "did not send") {
		t.Errorf("the death of a worker that closed its pipe: %q; want it said, and no SIGKILL from elsewhere", why)
	}
}
