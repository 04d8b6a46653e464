// Command streamer serves deep-learning models with dynamic batching: one
// supervisor process queues requests and forms batches, and worker processes,
// one per slot and GPU, run them.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamer-dev/streamer/internal/buildinfo"
)

func main() {
	err := newRootCommand().Execute()
	if err != nil {
		if log := exitLog.Load(); log != nil {
			log.Error("exiting", "err", err.Error())
		} else {
			// Behind the log's lines, and as bounded: a reader that has
			// stopped reading must not hold the exit.
			fmt.Fprintln(stderrLog, "streamer:", err)
		}
	}
	// The log's last lines, unless its reader has stopped reading.
	stderrLog.flush(2 * time.Second)
	if err != nil {
		os.Exit(1)
	}
}

// exitLog, when set, logs the error the command exits with, in place of
// the plain line: serve's logger with --log-format json, so that a log
// pipeline reads the last line, the one it most needs, as it reads the
// others.
var exitLog atomic.Pointer[slog.Logger]

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamer",
		Short:         "Batching middleware for serving deep-learning models",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Line(),
	}
	root.SetVersionTemplate("streamer {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newServeCommand(), newBenchCommand(), newWorkerCommand(), newStatusCommand(), newVersionCommand())
	return root
}

// newVersionCommand says which build this is, as --version does: the
// module's version, the commit, the toolchain and the platform.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "streamer", buildinfo.Line())
			return err
		},
	}
}
