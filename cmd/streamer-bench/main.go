// Command streamer-bench draws the plot of `streamer bench --plot`. It is a
// binary of its own so that the streamer binary, which every worker process
// runs, links no plotting code (gonum/plot, its fonts and its LaTeX
// renderer: about a sixth of the binary). `streamer bench --plot FILE`
// runs `streamer-bench plot`, found next to the streamer binary or on PATH,
// feeding it the run's samples on stdin and taking the PNG from its stdout.
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/streamer-dev/streamer/internal/bench/chart"
	"github.com/streamer-dev/streamer/internal/bench/plotdata"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "streamer-bench:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamer-bench",
		Short:         "Plotting for streamer bench",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPlotCommand())
	return root
}

func newPlotCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "plot",
		Short: "Draw a bench run's samples, read from stdin, as a PNG on stdout",
		Long: `Plot reads the samples that streamer bench --plot writes to it on stdin and
draws latency against time above the histogram of batch sizes, as a PNG on
stdout. streamer bench runs it; there is no need to run it by hand.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			data, err := plotdata.Read(bufio.NewReader(os.Stdin))
			if err != nil {
				return err
			}
			out := bufio.NewWriter(os.Stdout)
			if err := chart.WritePNG(out, data); err != nil {
				return err
			}
			return out.Flush()
		},
	}
}
