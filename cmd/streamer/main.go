// Command streamer serves deep-learning models with dynamic batching: one
// supervisor process queues requests and forms batches, and worker processes,
// one per slot and GPU, run them.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "streamer:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamer",
		Short:         "Batching middleware for serving deep-learning models",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newServeCommand(), newBenchCommand(), newWorkerCommand(), newStatusCommand())
	return root
}
