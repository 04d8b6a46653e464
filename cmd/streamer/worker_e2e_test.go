package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/ipc"
)

// `streamer worker` run by hand, or by anything but a supervisor, says what
// it is and exits, instead of serving a default model or waiting on pipes
// it was never given.
func TestWorkerCommandOutsideASupervisor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, streamerBin, "worker")
	cmd.Env = append(cmd.Environ(), ipc.WorkerEnv+"=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("streamer worker: %v, want a failing exit status; output:\n%s", err, out)
	}
	for _, want := range []string{"not started by a streamer supervisor", ipc.WorkerEnv} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q does not say %q", out, want)
		}
	}
}
