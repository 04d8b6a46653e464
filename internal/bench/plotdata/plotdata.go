// Package plotdata is what a bench run hands to its plotter: each answered
// request's send time and latency, and the batch sizes the server formed.
// The plot is drawn by the streamer-bench binary, so that the streamer
// binary, which every worker process runs, links no plotting code; Write
// and Read carry the data between the two processes (gob, on a pipe).
package plotdata

import (
	"encoding/gob"
	"fmt"
	"io"
	"time"
)

// Point is one successful request.
type Point struct {
	// At is when the request was sent (open loop: when it was scheduled),
	// counted from the start of the measured window; negative for a
	// request sent during the warm-up and answered inside the window.
	At time.Duration
	// Latency is how long the answer took from At.
	Latency time.Duration
}

// Data is one run's input to the plot.
type Data struct {
	// Points are the successful requests answered inside the window.
	Points []Point
	// BatchSizes counts the batches the server formed in the window by
	// their number of items.
	BatchSizes map[int]uint64
}

// Write encodes d onto w.
func Write(w io.Writer, d Data) error {
	if err := gob.NewEncoder(w).Encode(d); err != nil {
		return fmt.Errorf("write plot data: %w", err)
	}
	return nil
}

// Read decodes the Data that Write put on r.
func Read(r io.Reader) (Data, error) {
	var d Data
	if err := gob.NewDecoder(r).Decode(&d); err != nil {
		return Data{}, fmt.Errorf("read plot data: %w", err)
	}
	return d, nil
}
