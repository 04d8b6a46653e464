package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/streamer-dev/streamer/internal/heapfloor"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/workerproc"
)

// newWorkerCommand is the worker process streamer serve starts for each
// slot: workerproc's side of the worker contract, with every runner
// streamer has.
func newWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "Run one worker process (started by streamer serve)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			heapfloor.Keep()
			return workerproc.Serve(ctx, load.Open)
		},
	}
}
