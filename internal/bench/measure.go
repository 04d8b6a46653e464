package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// sender sends one request and says how it went: "" for success, or the
// kind of failure and, when it says more than the kind, the failure itself
// ("connection" and "dial tcp 127.0.0.1:1: connect: connection refused").
// It is called from many goroutines at once.
type sender func(ctx context.Context) (errKind string, err error)

// statsSource reads the server's counters.
type statsSource func(ctx context.Context) (serverStats, error)

// serverStats are a server's counters, and whether it is a front end
// behind Redis (serve --broker --workers 0), whose nodes form the batches:
// it forms none of its own.
type serverStats struct {
	supervisor.Stats
	frontEnd bool
}

// statsSnapshot is the server's counters when the measured window opened.
type statsSnapshot struct {
	stats serverStats
	err   error
	at    time.Time
}

// measure sends one continuous load for the warm-up and then the measured
// window, and builds the report from the requests answered inside the window
// and the server's counters at its start and end. The load does not stop
// between the two: a pause would let the queue and the workers' pipelines
// drain, and the window would start from an idle server and read low.
func (cfg *Config) measure(ctx context.Context, send sender, stats statsSource) (Result, []sample, error) {
	statsCtx, stopStats := statsContext(ctx)
	defer stopStats()
	stats = statsUntilGrace(stats)
	opened := make(chan statsSnapshot, 1)
	openWindow := func() {
		at := time.Now()
		st, err := stats(statsCtx)
		opened <- statsSnapshot{stats: st, err: err, at: at}
	}
	var window *time.Timer
	if cfg.Warmup == 0 {
		openWindow()
	} else {
		window = time.AfterFunc(cfg.Warmup, openWindow)
	}
	counted, kinds, refused := cfg.load(ctx, send)
	loadEnded := time.Now()
	if window != nil && window.Stop() {
		if refused != nil {
			return Result{}, nil, fmt.Errorf("in the warm-up, nothing measured: %w", refused)
		}
		return Result{}, nil, errors.New("interrupted during the warm-up; nothing was measured")
	}
	before := <-opened
	after, unavailable, lost := cfg.statsAfter(statsCtx, stats, before)
	elapsed := cfg.Duration
	if ctx.Err() != nil || refused != nil { // the window ended early
		elapsed = min(loadEnded.Sub(before.at), cfg.Duration)
	}
	samples := inWindow(counted.samples, cfg.Warmup)
	rep := newReport(samples, counted, kinds, elapsed, cfg.ItemsPerRequest)
	switch {
	case unavailable != "":
		rep.BatchesUnavailable = unavailable
	case after.frontEnd:
		rep.FrontEnd = true
	case wentBack(before.stats.Stats, after.Stats):
		rep.BatchesUnavailable = "the server's counters went back between the reads at the window's start and end: it restarted, or another server behind the same address answered one of them"
	default:
		rep.BatchFigures = batchFigures(before.stats, after)
	}
	if cfg.Target == "" {
		rep.setLimit(cfg.LimitItemsPerS)
	}
	rep.Interrupted = ctx.Err() != nil
	return Result{Report: rep, Err: errors.Join(cfg.verdict(rep), refused, lost)}, samples, nil
}

// interruptGrace bounds the stats reads still to come once a run is
// interrupted. They outlive the interrupt, so that what was measured is
// reported with its batch figures; but whoever pressed Ctrl-C waits this
// long for a server that does not answer, not the --request-timeout that
// bounds a read otherwise.
const interruptGrace = 2 * time.Second

// errStatsGrace is the cause of a stats read that interruptGrace cut short.
var errStatsGrace = fmt.Errorf("interrupted, and the server did not answer its stats within %s of it", interruptGrace)

// statsContext is the context of the stats reads of a run under ctx: the
// end of ctx does not end it, but ends it interruptGrace later, with the
// cause errStatsGrace. The returned func releases it.
func statsContext(ctx context.Context) (context.Context, func()) {
	statsCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stopWatch := context.AfterFunc(ctx, func() {
		time.AfterFunc(interruptGrace, func() { cancel(errStatsGrace) })
	})
	return statsCtx, func() {
		stopWatch()
		cancel(nil)
	}
}

// statsUntilGrace is stats, whose read cut short by the end of its context
// fails with the context's cause: "context canceled" would not say that
// the read was given up on after an interrupt.
func statsUntilGrace(stats statsSource) statsSource {
	return func(ctx context.Context) (serverStats, error) {
		st, err := stats(ctx)
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return st, err
	}
}

// statsAfter reads the counters at the end of the window. When either read
// failed it says why the batch figures are unavailable, and whether that
// makes the run no measurement (lost): a server that answered at the
// window's start and not at its end, or a server of Run's own, stopped
// answering. A --target that did not answer at the start may merely lack
// the endpoint: its client-side figures stand, with a note.
func (cfg *Config) statsAfter(ctx context.Context, stats statsSource, before statsSnapshot) (after serverStats, unavailable string, lost error) {
	if before.err != nil {
		unavailable = fmt.Sprintf("read the server's stats at the window's start: %v", before.err)
		if cfg.Target == "" {
			return serverStats{}, unavailable, fmt.Errorf("the server did not answer its stats at the window's start (%w): its batch figures are missing", before.err)
		}
		fmt.Fprintf(cfg.Stderr, "streamer bench: no batch figures: read %s/v1/stats: %v\n", strings.TrimSuffix(cfg.Target, "/"), before.err)
		return serverStats{}, unavailable, nil
	}
	after, err := stats(ctx)
	if err != nil {
		return serverStats{}, fmt.Sprintf("read the server's stats at the window's end: %v", err),
			fmt.Errorf("the server stopped answering: its stats could not be read at the window's end (%w), and its batch figures are missing", err)
	}
	return after, "", nil
}

// inWindow keeps the samples answered after the warm-up, with their send
// times counted from the window's start (negative for a request sent during
// the warm-up and answered inside the window). Counting answers in the
// window, whenever they were sent, measures the steady rate without a bias
// for the requests in flight at either end.
func inWindow(samples []sample, warmup time.Duration) []sample {
	kept := samples[:0]
	for _, s := range samples {
		if s.at+s.latency >= warmup {
			s.at -= warmup
			kept = append(kept, s)
		}
	}
	return kept
}
