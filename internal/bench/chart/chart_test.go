package chart

import (
	"bytes"
	"image"
	"image/png"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/bench/plotdata"
)

// varied reports whether img has more than one colour: a blank image has one.
func varied(img image.Image) bool {
	b := img.Bounds()
	first := img.At(b.Min.X, b.Min.Y)
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			if img.At(x, y) != first {
				return true
			}
		}
	}
	return false
}

func TestWritePNG(t *testing.T) {
	points := make([]plotdata.Point, 50000)
	for i := range points {
		points[i] = plotdata.Point{At: time.Duration(i) * 20 * time.Microsecond, Latency: time.Duration(1+i%7) * time.Millisecond}
	}
	for _, tc := range []struct {
		name string
		data plotdata.Data
	}{
		{"run", plotdata.Data{Points: points, BatchSizes: map[int]uint64{1: 3, 8: 40, 16: 7}}},
		{"nothing answered", plotdata.Data{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WritePNG(&buf, tc.data); err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
				t.Errorf("plot is %dx%d pixels; want a readable size", b.Dx(), b.Dy())
			}
			if !varied(img) {
				t.Error("the plot is blank")
			}
		})
	}
}

func TestSliceQuantileFollowsTheRun(t *testing.T) {
	// Latency 1ms for the first second, 9ms for the second: the p50 line
	// must show the step, not the mean.
	var points []plotdata.Point
	for i := range 2000 {
		lat := time.Millisecond
		if i >= 1000 {
			lat = 9 * time.Millisecond
		}
		points = append(points, plotdata.Point{At: time.Duration(i) * time.Millisecond, Latency: lat})
	}
	line := sliceQuantile(points, 0.5)
	if len(line) < plotTimeSlices/2 {
		t.Fatalf("%d points for %d slices", len(line), plotTimeSlices)
	}
	if first, last := line[0].Y, line[len(line)-1].Y; first != 1 || last != 9 {
		t.Errorf("p50 from %v ms to %v ms; want 1 to 9", first, last)
	}
}
