//go:build linux

// Command calibrate measures what the sleep model's batch of 64 really
// costs on this machine, against its nominal 16.4 ms, and for comparison
// how late a plain nanosleep of that length returns. The model's mean is
// the ceiling that scenarios A and B can reach here, whatever the batcher
// does. scripts/bench.sh runs it before those scenarios.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/streamer-dev/streamer/model/builtin"
)

func main() {
	const n = 150
	m, err := builtin.ParseSleep("10ms,100us")
	if err != nil {
		fmt.Fprintln(os.Stderr, "calibrate:", err)
		os.Exit(1)
	}
	items := make([][]byte, 64)
	want := m.Cost(len(items))

	var over time.Duration
	for range n {
		ts := syscall.NsecToTimespec(int64(want))
		t0 := time.Now()
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
		over += time.Since(t0) - want
	}
	fmt.Printf("sleep calibration: a plain nanosleep(%v) returns %v late on average\n", want, (over / n).Round(time.Microsecond))

	t0 := time.Now()
	for range n {
		if _, err := m.Predict(context.Background(), items); err != nil {
			fmt.Fprintln(os.Stderr, "calibrate:", err)
			os.Exit(1)
		}
	}
	mean := time.Since(t0) / n
	fmt.Printf("sleep calibration: the sleep model's batch of 64 takes %v on average for a cost of %v: a ceiling of %.4f of the limit\n",
		mean.Round(time.Microsecond), want, float64(want)/float64(mean))
}
