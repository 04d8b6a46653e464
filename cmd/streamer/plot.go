package main

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// writePlot draws latency against time (successful requests) above the
// histogram of the batch sizes the server formed, into a PNG at path.
func writePlot(path string, samples []sample, batchSizes map[int]uint64) error {
	latency := plot.New()
	latency.Title.Text = "latency of each request"
	latency.X.Label.Text = "seconds since start"
	latency.Y.Label.Text = "ms"
	points := make(plotter.XYs, 0, len(samples))
	for _, s := range samples {
		if s.errKind == "" {
			points = append(points, plotter.XY{X: s.at.Seconds(), Y: float64(s.latency) / float64(time.Millisecond)})
		}
	}
	scatter, err := plotter.NewScatter(points)
	if err != nil {
		return fmt.Errorf("plot latency: %w", err)
	}
	scatter.GlyphStyle.Radius = vg.Points(1)
	latency.Add(scatter)

	hist := plot.New()
	hist.Title.Text = "batch sizes"
	hist.X.Label.Text = "items in the batch"
	hist.Y.Label.Text = "batches"
	sizes := make([]int, 0, len(batchSizes))
	for n := range batchSizes {
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	if len(sizes) > 0 {
		counts := make(plotter.XYs, len(sizes))
		for i, n := range sizes {
			counts[i] = plotter.XY{X: float64(n), Y: float64(batchSizes[n])}
		}
		bars, err := plotter.NewHistogram(counts, max(1, sizes[len(sizes)-1]-sizes[0]+1))
		if err != nil {
			return fmt.Errorf("plot batch sizes: %w", err)
		}
		hist.Add(bars)
	}

	const width, height = 8 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(width, height)
	canvas := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8), PadY: vg.Points(16)}
	grid := [][]*plot.Plot{{latency}, {hist}}
	canvases := plot.Align(grid, tiles, canvas)
	for row := range grid {
		grid[row][0].Draw(canvases[row][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("--plot: write %s: %w", path, err)
	}
	return f.Close()
}
