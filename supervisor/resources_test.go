package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		time.AfterFunc(20*time.Millisecond, m.dieIfLimited)
	}
	return m
}

func (m threadless) dieIfLimited() {
	if _, err := os.Stat(m.path); err == nil {
		fmt.Fprintln(os.Stderr, "runtime: failed to create new OS thread (have 9 already; errno=11)")
		fmt.Fprintln(os.Stderr, "runtime: may need to increase max user processes (ulimit -u)")
		fmt.Fprintln(os.Stderr, "fatal error: newosproc")
		os.Exit(2)
	}
}

func (m threadless) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	m.dieIfLimited()
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
	s := start(t, cfg)
	if err := os.WriteFile(limited, nil, 0o600); err != nil {
		t.Fatal(err)
	}
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
	waitFor(t, "three deaths for want of threads", func() bool { return s.Slots()[0].Crashes >= 3 })
	if idle {
		ask() // after the deaths, which had nothing to run
	}
	if why := s.Slots()[0].LastErr; !strings.Contains(why, "could not start a thread") || !strings.Contains(why, "failed to create new OS thread") {
		t.Errorf("the death: %q; want it said to be for want of threads, in the runtime's words", why)
	}
	if err := os.Remove(limited); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the item, once the worker has threads: %v; want it answered", err)
	}
	if st := s.Slots()[0].State; st != supervisor.SlotReady {
		t.Errorf("the slot is %s; want it ready, not given up", st)
	}
}
