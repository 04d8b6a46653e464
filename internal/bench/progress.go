package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// startProgress shows the run's progress on Stderr for a load of d: a bar
// on a terminal, one line otherwise (a bar redrawn ten times a second would
// fill a log file). The counter it returns, nil without a bar, counts the
// answers; the func stops the bar.
func (cfg *Config) startProgress(d time.Duration) (*atomic.Int64, func()) {
	if !cfg.Progress {
		return nil, func() {}
	}
	if !isTerminal(cfg.Stderr) {
		fmt.Fprintf(cfg.Stderr, "streamer bench: loading for %s (%s warm-up, then %s measured)\n", d, cfg.Warmup, cfg.Duration)
		return nil, func() {}
	}
	done := new(atomic.Int64)
	stop := make(chan struct{})
	var barDone sync.WaitGroup
	barDone.Go(func() { showProgress(cfg.Stderr, cfg.Warmup, d, done, stop) })
	return done, func() {
		close(stop)
		barDone.Wait()
	}
}

// isTerminal reports whether w is a terminal rather than a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// showProgress draws a bar on w that fills over d, says when the
// warm-up is over, and counts the answered requests, until stop is closed.
func showProgress(w io.Writer, warmup, d time.Duration, done *atomic.Int64, stop <-chan struct{}) {
	bar := progressbar.NewOptions64(d.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("bench"),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish())
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			_ = bar.Finish()
			return
		case <-t.C:
			elapsed := min(time.Since(start), d)
			phase := "bench"
			if elapsed < warmup {
				phase = "warm-up"
			}
			n := done.Load()
			bar.Describe(fmt.Sprintf("%s: %d answers, %.0f/s", phase, n, float64(n)/max(elapsed.Seconds(), 1e-3)))
			_ = bar.Set64(elapsed.Milliseconds())
		}
	}
}
