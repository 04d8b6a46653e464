// Package chart draws a bench run as a PNG: each request's latency against
// its send time, with the p50 and p99 over time, above the histogram of the
// batch sizes the server formed. It links gonum/plot, its fonts and its
// LaTeX renderer, so only the streamer-bench binary imports it: never the
// streamer binary, which every worker process runs.
package chart

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"slices"
	"time"

	"github.com/streamer-dev/streamer/internal/bench/plotdata"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot sizing: enough dots to show the spread of latencies without drawing
// a million glyphs for a long run, and enough time buckets for the
// percentile lines to follow the run's changes.
const (
	plotMaxDots    = 20000
	plotTimeSlices = 100
)

// WritePNG draws latency against time above the histogram of the batch
// sizes, as a PNG into w.
func WritePNG(w io.Writer, d plotdata.Data) error {
	latency, err := latencyPlot(d.Points)
	if err != nil {
		return err
	}
	hist := batchSizePlot(d.BatchSizes)
	const width, height = 8 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(width, height)
	canvas := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8), PadY: vg.Points(16)}
	grid := [][]*plot.Plot{{latency}, {hist}}
	canvases := plot.Align(grid, tiles, canvas)
	for row := range grid {
		grid[row][0].Draw(canvases[row][0])
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("write PNG: %w", err)
	}
	return nil
}

// latencyPlot shows each request's latency at its send time (at
// most plotMaxDots of them, evenly picked) with the p50 and p99 of each time
// slice drawn over them.
func latencyPlot(points []plotdata.Point) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "latency of each request"
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "ms"
	if len(points) == 0 {
		return p, nil
	}
	ok := slices.Clone(points)
	slices.SortFunc(ok, func(a, b plotdata.Point) int { return cmp.Compare(a.At, b.At) })
	stride := max(1, len(ok)/plotMaxDots)
	dots := make(plotter.XYs, 0, len(ok)/stride+1)
	for i := 0; i < len(ok); i += stride {
		dots = append(dots, plotter.XY{X: ok[i].At.Seconds(), Y: milliseconds(ok[i].Latency)})
	}
	scatter, err := plotter.NewScatter(dots)
	if err != nil {
		return nil, fmt.Errorf("plot latency: %w", err)
	}
	scatter.GlyphStyle.Radius = vg.Points(1)
	scatter.GlyphStyle.Color = color.Gray{Y: 170}
	p.Add(scatter)
	for _, q := range []struct {
		name     string
		quantile float64
		color    color.Color
	}{
		{"p50", 0.50, color.RGBA{B: 200, A: 255}},
		{"p99", 0.99, color.RGBA{R: 200, A: 255}},
	} {
		line, err := plotter.NewLine(sliceQuantile(ok, q.quantile))
		if err != nil {
			return nil, fmt.Errorf("plot latency %s: %w", q.name, err)
		}
		line.Color = q.color
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(q.name, line)
	}
	p.Legend.Top = true
	return p, nil
}

// sliceQuantile cuts the run, sorted by send time, into plotTimeSlices
// equal spans of time and returns the quantile q of the latencies in each
// span that has any.
func sliceQuantile(sorted []plotdata.Point, q float64) plotter.XYs {
	first, last := sorted[0].At, sorted[len(sorted)-1].At
	span := max((last-first)/plotTimeSlices, time.Millisecond)
	var points plotter.XYs
	lat := make([]time.Duration, 0, len(sorted)/plotTimeSlices+1)
	for begin := 0; begin < len(sorted); {
		end := begin
		limit := sorted[begin].At + span
		lat = lat[:0]
		for end < len(sorted) && sorted[end].At < limit {
			lat = append(lat, sorted[end].Latency)
			end++
		}
		slices.Sort(lat)
		mid := sorted[begin].At + (sorted[end-1].At-sorted[begin].At)/2
		points = append(points, plotter.XY{X: mid.Seconds(), Y: milliseconds(lat[min(int(q*float64(len(lat))), len(lat)-1)])})
		begin = end
	}
	return points
}

// batchSizePlot draws one bar per batch size, centred on the size.
func batchSizePlot(batchSizes map[int]uint64) *plot.Plot {
	p := plot.New()
	p.Title.Text = "batch sizes"
	p.X.Label.Text = "items in the batch"
	p.Y.Label.Text = "batches"
	if len(batchSizes) == 0 {
		return p
	}
	sizes := make([]int, 0, len(batchSizes))
	for n := range batchSizes {
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	bins := make([]plotter.HistogramBin, len(sizes))
	for i, n := range sizes {
		bins[i] = plotter.HistogramBin{Min: float64(n) - 0.5, Max: float64(n) + 0.5, Weight: float64(batchSizes[n])}
	}
	p.Add(&plotter.Histogram{Bins: bins, Width: 1, FillColor: color.Gray{Y: 128}, LineStyle: plotter.DefaultLineStyle})
	return p
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
