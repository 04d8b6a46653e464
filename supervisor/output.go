package supervisor

import (
	"log/slog"
	"strings"
	"time"
)

// A worker's output goes into the log a line an event, but no faster than
// outputRate lines a second after a burst of outputBurst: a model that
// prints on every item must not grow the log with the traffic. The lines
// dropped are counted in a line of their own once lines go through again,
// and the last outputTail of them are logged when the stream ends: a
// process's last words say why it ended, however much it said before.
const (
	outputBurst = 200
	outputRate  = 20
	outputTail  = 20
)

// outputLog writes one stream of a worker's output into the log. It is
// used by the one goroutine that reads the stream.
type outputLog struct {
	log      *slog.Logger
	tokens   float64
	last     time.Time
	dropped  int
	reported time.Time // when the lines dropped were last counted in the log

	// tail holds the last lines dropped, a ring of outputTail buffers
	// reused, so that dropping a line costs a copy and no allocation.
	tail [outputTail][]byte
	next int // where the next dropped line goes in tail
	held int // lines in tail
}

func newOutputLog(log *slog.Logger) *outputLog {
	return &outputLog{log: log, tokens: outputBurst}
}

// line logs line, read at now, unless the stream is over its rate, and
// reports the text logged ("" when dropped). A line that says why the
// process is dying always goes through.
func (o *outputLog) line(line []byte, now time.Time) string {
	if !o.last.IsZero() {
		o.tokens = min(outputBurst, o.tokens+now.Sub(o.last).Seconds()*outputRate)
	}
	o.last = now
	if o.tokens < 1 && !deathLine(line) {
		o.dropped++
		o.tail[o.next] = append(o.tail[o.next][:0], line...)
		o.next = (o.next + 1) % outputTail
		o.held = min(o.held+1, outputTail)
		return ""
	}
	o.tokens = max(o.tokens-1, 0)
	if now.Sub(o.reported) >= time.Second {
		// At most one count a second, or each line let through would
		// come with a count of its own, twice the rate.
		o.report()
		o.reported = now
	}
	o.held = 0 // older than this line: no one's last words
	text := plainText(string(line))
	o.log.Info("worker output", "line", text)
	return text
}

// report logs how many lines were dropped since the last line logged.
func (o *outputLog) report() {
	if o.dropped > 0 {
		o.log.Warn("worker output dropped: more lines than the log takes", "lines", o.dropped, "burst", outputBurst, "per_second", outputRate)
		o.dropped = 0
	}
}

// end logs, once the stream has ended, the count of the lines dropped and
// the last of them, and returns the stream's last line ("" if none was
// dropped since the last one logged).
func (o *outputLog) end() string {
	o.report()
	last := ""
	for i := o.held; i > 0; i-- {
		text := plainText(string(o.tail[(o.next-i+outputTail)%outputTail]))
		o.log.Info("worker output", "line", text, "dropped_before", true)
		last = text
	}
	o.held = 0
	return last
}

// deathLine reports whether a line of output says why a Go process dies:
// a panic's message or a fatal runtime error. (The stack that follows ends
// with a line that says nothing of the cause.)
func deathLine(line []byte) bool {
	s := string(line) // no allocation: only compared
	return strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ")
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
