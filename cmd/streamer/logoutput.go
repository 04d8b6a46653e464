package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// logPendingMax bounds the bytes of log lines waiting for their reader.
const logPendingMax = 1 << 20

// logOutput is where serve's log goes: its lines are handed to one
// goroutine that writes them to out, the process's stderr. A reader that
// stops reading (a log shipper stuck, a terminal paused) would otherwise
// block the first write to its full pipe, and with it the goroutine that
// logged, holding whatever lock it held: the dispatcher logs under the
// queue's lock, and the whole server stopped, SIGTERM too, while its
// liveness probe still passed. Past logPendingMax waiting, lines are
// dropped and counted; once the reader takes lines again, a line says how
// many it missed.
type logOutput struct {
	out io.Writer

	mu        sync.Mutex
	pending   []byte // lines waiting
	spare     []byte // the buffer last written, for the next lines
	writing   bool   // a write to out is under way
	dropped   int    // lines dropped since the last notice
	total     uint64 // lines dropped in all
	started   bool
	notice    func(dropped int) // logs a drop, once lines go through again
	wake      chan struct{}     // lines are waiting
	wroteSome chan struct{}     // a round of writes ended
}

// stderrLog is serve's log output. main flushes it before the process
// exits.
var stderrLog = newLogOutput(os.Stderr)

func newLogOutput(out io.Writer) *logOutput {
	return &logOutput{out: out, wake: make(chan struct{}, 1), wroteSome: make(chan struct{}, 1)}
}

// Write queues p, a line, for the output; it never blocks on the reader.
// It drops p, counting it, when logPendingMax bytes wait already.
func (l *logOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	if len(l.pending)+len(p) > logPendingMax {
		l.dropped++
		l.total++
		l.mu.Unlock()
		return len(p), nil
	}
	l.pending = append(l.pending, p...)
	if !l.started {
		l.started = true
		go l.run()
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// setNotice sets how a drop is told, once lines go through again: in the
// log's own format.
func (l *logOutput) setNotice(notice func(dropped int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notice = notice
}

func (l *logOutput) run() {
	for range l.wake {
		for {
			l.mu.Lock()
			lines, dropped, notice := l.pending, l.dropped, l.notice
			if len(lines) == 0 && dropped == 0 {
				l.writing = false
				l.mu.Unlock()
				break
			}
			l.pending, l.spare, l.dropped, l.writing = l.spare[:0], nil, 0, true
			l.mu.Unlock()
			// Errors are the reader's: a closed pipe's EPIPE costs the
			// lines, not the server (see runServe).
			_, _ = l.out.Write(lines)
			l.mu.Lock()
			if cap(lines) <= logPendingMax {
				l.spare = lines[:0]
			}
			l.mu.Unlock()
			if dropped > 0 {
				if notice != nil {
					notice(dropped)
				} else {
					_, _ = fmt.Fprintf(l.out, "streamer: %d log lines dropped: the log's reader fell behind\n", dropped)
				}
			}
		}
		select {
		case l.wroteSome <- struct{}{}:
		default:
		}
	}
}

// flush waits until every line queued is written, or within has passed:
// a reader that does not read must not hold up the process's exit.
func (l *logOutput) flush(within time.Duration) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		l.mu.Lock()
		idle := len(l.pending) == 0 && l.dropped == 0 && !l.writing
		l.mu.Unlock()
		if idle {
			return
		}
		select {
		case <-l.wroteSome:
		case <-t.C:
			return
		}
	}
}

var logDroppedDesc = prometheus.NewDesc("streamer_log_lines_dropped_total",
	"Log lines dropped because the reader of the server's stderr fell behind by a megabyte.", nil, nil)

func (l *logOutput) Describe(ch chan<- *prometheus.Desc) { ch <- logDroppedDesc }

// Collect sends the count of lines dropped, read when /metrics is scraped.
func (l *logOutput) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	total := l.total
	l.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(logDroppedDesc, prometheus.CounterValue, float64(total))
}
