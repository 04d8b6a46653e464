package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/streamer-dev/streamer/internal/bench/plotdata"
)

// PlotterName is the binary that draws the plot: the plotting code lives
// there, not in the streamer binary that every worker process runs.
const PlotterName = "streamer-bench"

// ErrNoPlotter means the streamer-bench binary was not found; the error
// that wraps it says where it was looked for and how to build it.
var ErrNoPlotter = errors.New(PlotterName + " not found")

// plotJob is the plot a run writes: the plotter that draws it, and a
// temporary file beside the plot's path that receives it and is renamed
// over the path once the plot is drawn, so that a run that fails, is
// interrupted or finds no plotter leaves a file already at the path as it
// was. The zero plotJob writes nothing.
type plotJob struct {
	path    string
	tmp     *os.File // nil once renamed, or when no plot is asked for
	plotter string
}

// openPlot finds the plotter and creates the temporary file, so that
// either failing ends the run before it starts.
func (cfg *Config) openPlot() (*plotJob, error) {
	if cfg.PlotFile == "" {
		return &plotJob{}, nil
	}
	plotter, err := findPlotter(cfg.Plotter, cfg.Server.Binary)
	if err != nil {
		return nil, fmt.Errorf("--plot: %w", err)
	}
	if info, err := os.Stat(cfg.PlotFile); err == nil && !info.Mode().IsRegular() {
		return nil, fmt.Errorf("--plot %s: not a regular file", cfg.PlotFile)
	}
	dir, name := filepath.Split(cfg.PlotFile)
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("--plot: %w", err)
	}
	// CreateTemp makes the file private; a plot is as readable as any file
	// the user's umask leaves alone.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("--plot: %w", err)
	}
	return &plotJob{path: cfg.PlotFile, tmp: tmp, plotter: plotter}, nil
}

// findPlotter returns given when set, else the streamer-bench binary next
// to nextTo (the streamer binary), else the one on PATH.
func findPlotter(given, nextTo string) (string, error) {
	if given != "" {
		return given, nil
	}
	looked := "on PATH"
	if nextTo != "" {
		beside := filepath.Join(filepath.Dir(nextTo), PlotterName)
		if info, err := os.Stat(beside); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return beside, nil
		}
		looked = "at " + beside + " and on PATH"
	}
	if onPath, err := exec.LookPath(PlotterName); err == nil {
		return onPath, nil
	}
	return "", fmt.Errorf("the plot is drawn by the %s binary: %w (looked %s); build it with `go build -o bin/%s ./cmd/%s` (make build does) and keep it next to streamer",
		PlotterName, ErrNoPlotter, looked, PlotterName, PlotterName)
}

// draw runs `streamer-bench plot` with the samples on its stdin and its
// stdout on the temporary file, then renames that over the plot's path.
func (p *plotJob) draw(samples []sample, batchSizes map[int]uint64) error {
	if p.tmp == nil {
		return nil
	}
	var stderr bytes.Buffer
	cmd := exec.Command(p.plotter, "plot")
	cmd.Stdout, cmd.Stderr = p.tmp, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("--plot %s: %w", p.path, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("--plot %s: run %s: %w", p.path, p.plotter, err)
	}
	in := bufio.NewWriter(stdin)
	writeErr := plotdata.Write(in, plotInput(samples, batchSizes))
	if writeErr == nil {
		writeErr = in.Flush()
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("--plot %s: %s plot: %w: %s", p.path, p.plotter, err, strings.TrimSpace(stderr.String()))
	}
	if writeErr != nil {
		return fmt.Errorf("--plot %s: %w", p.path, writeErr)
	}
	if err := p.tmp.Close(); err != nil {
		return fmt.Errorf("--plot %s: %w", p.path, err)
	}
	if err := os.Rename(p.tmp.Name(), p.path); err != nil {
		return fmt.Errorf("--plot %s: %w", p.path, err)
	}
	p.tmp = nil
	return nil
}

// abandon removes the temporary file of a plot that was not drawn; the
// plot's path is left as it was.
func (p *plotJob) abandon() {
	if p.tmp != nil {
		p.tmp.Close()
		os.Remove(p.tmp.Name())
		p.tmp = nil
	}
}

// plotInput is the plot's view of the samples, the successful requests.
func plotInput(samples []sample, batchSizes map[int]uint64) plotdata.Data {
	points := make([]plotdata.Point, len(samples))
	for i, s := range samples {
		points[i] = plotdata.Point{At: s.at, Latency: s.latency}
	}
	return plotdata.Data{Points: points, BatchSizes: batchSizes}
}
