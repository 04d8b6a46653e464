package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/procstat"
)

// A worker that dies on its own, leaving behind a process it started
// that holds its stderr, has that process end with it, and its death
// told with its last words. Before, the process lived on, and each death
// held the dead worker's batches for the wait for its stderr's end.
func TestAWorkerThatDiesTakesWhatItStartedWithIt(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	cfg := processConfig("echo", 1, 1)
	cfg.MaxLatency, cfg.BackoffMin = time.Millisecond, time.Millisecond
	cfg.Process.Env = []string{orphanEnv + "=" + pids}
	s := start(t, cfg)
	var left []int
	t.Cleanup(func() {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if _, err := s.Predict(context.Background(), items("orphan")); err == nil {
		t.Fatal("the item that kills its worker was answered")
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(line)
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, pid)
	}
	waitFor(t, fmt.Sprintf("the processes the dead workers started (%v) to end", left), func() bool {
		for _, pid := range left {
			if !procstat.Ended(pid) {
				return false
			}
		}
		return true
	})
	if why := s.Slots()[0].LastErr; !strings.Contains(why, "dying on purpose") {
		t.Errorf("the worker's death: %q; want its last words", why)
	}
}
