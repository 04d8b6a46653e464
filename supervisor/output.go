package supervisor

import (
	"log/slog"
	"strings"
	"time"
)

// A worker's output goes into the log a line an event, but no faster than
// outputRate lines a second after a burst of outputBurst: a model that
// prints on every item must not grow the log with the traffic. The lines
// dropped are counted in a line of their own once lines go through again.
const (
	outputBurst = 200
	outputRate  = 20
)

// outputLog writes one stream of a worker's output into the log. It is
// used by the one goroutine that reads the stream.
type outputLog struct {
	log     *slog.Logger
	tokens  float64
	last    time.Time
	dropped int
}

func newOutputLog(log *slog.Logger) *outputLog {
	return &outputLog{log: log, tokens: outputBurst}
}

// line logs text, read at now, unless the stream is over its rate. A line
// that says why the process is dying always goes through.
func (o *outputLog) line(text string, now time.Time) {
	if !o.last.IsZero() {
		o.tokens = min(outputBurst, o.tokens+now.Sub(o.last).Seconds()*outputRate)
	}
	o.last = now
	if o.tokens < 1 && !deathLine(text) {
		o.dropped++
		return
	}
	o.tokens = max(o.tokens-1, 0)
	o.flush()
	o.log.Info("worker output", "line", text)
}

// flush logs how many lines were dropped since the last line logged.
func (o *outputLog) flush() {
	if o.dropped > 0 {
		o.log.Warn("worker output dropped: more lines than the log takes", "lines", o.dropped, "burst", outputBurst, "per_second", outputRate)
		o.dropped = 0
	}
}

// deathLine reports whether a line of output says why a Go process dies:
// a panic's message or a fatal runtime error. (The stack that follows ends
// with a line that says nothing of the cause.)
func deathLine(text string) bool {
	return strings.HasPrefix(text, "panic: ") || strings.HasPrefix(text, "fatal error: ")
}

// plainText drops terminal escape sequences (colours, mostly, which some
// libraries write whether or not a terminal reads them) from a line of
// output, which would otherwise reach the log as noise.
func plainText(text string) string {
	if !strings.Contains(text, "\x1b") {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] != '\x1b' {
			b.WriteByte(text[i])
			continue
		}
		// ESC [ parameters, then one final byte in @ … ~.
		if i+1 < len(text) && text[i+1] == '[' {
			j := i + 2
			for j < len(text) && (text[j] < '@' || text[j] > '~') {
				j++
			}
			i = j
			continue
		}
		i++ // ESC and the one byte after it
	}
	return b.String()
}
