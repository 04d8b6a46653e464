package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/workerproc"
)

// The supervisor hands a worker its model through the environment and its
// pipes as file descriptors 3 (batches in) and 4 (results out), so the
// worker's stdout and stderr stay free for the model to print on.
const (
	envWorkerSpec = "STREAMER_WORKER_SPEC"
	workerInFD    = 3
	workerOutFD   = 4
)

func newWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "Run one worker process (started by streamer serve)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd.Context())
		},
	}
}

func runWorker(ctx context.Context) error {
	var spec model.Spec
	if raw := os.Getenv(envWorkerSpec); raw != "" {
		if err := json.Unmarshal([]byte(raw), &spec); err != nil {
			return fmt.Errorf("worker: %s is not a model spec: %w", envWorkerSpec, err)
		}
	}
	// A model may start processes of its own (a plugin does): they must not
	// inherit our pipes, or the supervisor would not see us die.
	syscall.CloseOnExec(workerInFD)
	syscall.CloseOnExec(workerOutFD)
	in := os.NewFile(workerInFD, "supervisor-in")
	out := os.NewFile(workerOutFD, "supervisor-out")
	if in == nil || out == nil {
		return fmt.Errorf("worker: file descriptors %d and %d must be the supervisor's pipes; this command is started by streamer serve", workerInFD, workerOutFD)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return workerproc.Run(ctx, workerproc.Config{
		Spec:   spec,
		Open:   load.Open,
		In:     in,
		Out:    out,
		Device: describeDevice(spec),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
}

// describeDevice says where this worker's model runs: with CUDA the card is
// device 0 of the CUDA_VISIBLE_DEVICES the supervisor gave this slot.
func describeDevice(spec model.Spec) string {
	device := spec.Device
	if device == "" {
		device = "cpu"
	}
	if visible, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		return fmt.Sprintf("%s (CUDA_VISIBLE_DEVICES=%s)", device, visible)
	}
	return device
}
