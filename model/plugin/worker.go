package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/streamer-dev/streamer/model"
)

// CrashExitStatus is the exit status of a worker process whose plugin died.
const CrashExitStatus = 3

// OpenSpec opens spec's plugin the way a streamer worker process does: the
// plugin's output and go-plugin's log lines go to the worker's stderr, which
// the supervisor logs tagged with the slot, and the plugin's death ends the
// worker process with CrashExitStatus, so that the supervisor treats it as
// the worker's crash (restart, retry elsewhere, poison isolation).
//
// A worker whose model is a plugin only relays bytes, so OpenSpec also runs
// it on one thread at a time (GOMAXPROCS=1, unless the environment sets
// GOMAXPROCS): with fewer idle threads to wake for each message, the hop to
// the plugin costs about a quarter less per batch.
func OpenSpec(ctx context.Context, spec model.Spec) (model.Model, error) {
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	m, err := Open(ctx, Config{
		Path:      spec.Plugin,
		Args:      spec.PluginArgs,
		Device:    spec.Device,
		SHA256:    spec.PluginSHA256,
		SocketDir: spec.PluginSocketDir,
		Output:    os.Stderr,
		Logger:    log,
		Crashed: func(err error) {
			fmt.Fprintf(os.Stderr, "worker: %v; exiting so that the supervisor restarts this worker\n", err)
			os.Exit(CrashExitStatus)
		},
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// CheckSpec checks spec's plugin binary without running it, so that a
// supervisor can refuse a missing, non-executable or tampered binary before
// it starts any worker.
func CheckSpec(spec model.Spec) error {
	_, err := Check(spec.Plugin, spec.PluginSHA256)
	return err
}
