package supervisor

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/streamer-dev/streamer/internal/lastwords"
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

// line logs line, read at now, unless the stream is over its rate or the
// line's level is one the log leaves out, and reports its text ("" when
// dropped for the rate). A line that says why the process is dying always
// goes through the rate. A line left out for its level takes nothing of
// the rate, so that a plugin that writes its debug lines by thousands is
// heard at warn level all the same; its text is reported as a logged
// line's is, being the last words so far, which say why a worker died
// whatever the log keeps.
func (o *outputLog) line(line []byte, now time.Time) string {
	// The level is in the line's head: past the tag of a plugin's lines
	// ("[plugin NAME] "), within lineHead.
	level := lineLevel(plainText(string(line[:min(len(line), 4*lineHead)])))
	if !o.log.Enabled(context.Background(), level) {
		o.held = 0 // older than this line: no one's last words
		return plainText(string(line))
	}
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
	o.log.Log(context.Background(), level, "worker output", "line", text)
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
		o.log.Log(context.Background(), lineLevel(text), "worker output", "line", text, "dropped_before", true)
		last = text
	}
	o.held = 0
	return last
}

// lineHead is how far into a line lineLevel looks for its level: past a
// timestamp and a logger's name, not into the message.
const lineHead = 80

// lineLevel is the level a line of a worker's output says it has, in the
// forms the code a worker runs writes: slog's text and JSON (the worker
// itself, a Go plugin), hclog's "[WARN]" (go-plugin), onnxruntime's
// "[W:onnxruntime:", Python logging's "WARNING:root:", a level after a
// timestamp (see levelAfterTimestamp). A panic's message
// is an error; a line that says no level (print, a stack trace) is info.
// Without it a warning from a worker hid under --log-level warn.
func lineLevel(line string) slog.Level {
	// A plugin's lines come through its worker tagged "[plugin NAME] ".
	if rest, ok := strings.CutPrefix(line, "[plugin "); ok {
		if _, after, ok := strings.Cut(rest, "] "); ok {
			line = after
		}
	}
	if deathLine([]byte(line)) {
		return slog.LevelError
	}
	head := line[:min(len(line), lineHead)]
	if i := strings.Index(head, "level="); i == 0 || i > 0 && head[i-1] == ' ' {
		return namedLevel(head[i+len("level="):], ' ')
	}
	if i := strings.Index(head, `"level":"`); i >= 0 {
		return namedLevel(head[i+len(`"level":"`):], '"')
	}
	if level, ok := levelAfterTimestamp(head); ok {
		return level
	}
	if i := strings.IndexByte(head, '['); i >= 0 && i+2 < len(head) {
		rest := head[i+1:]
		if j := strings.IndexByte(rest, ']'); j > 0 && j <= len("ERROR") {
			return namedLevel(rest[:j], ']')
		}
		if rest[1] == ':' { // onnxruntime's [E:onnxruntime:...]
			switch rest[0] {
			case 'W':
				return slog.LevelWarn
			case 'E', 'F':
				return slog.LevelError
			}
		}
	}
	if i := strings.IndexByte(head, ':'); i > 0 {
		return namedLevel(head[:i], ':')
	}
	return slog.LevelInfo
}

// levelAfterTimestamp reads the level of a line that begins with a
// timestamp and gives its level as a word of its own, in capitals, among
// its first few: Python logging's "%(asctime)s %(levelname)s ..." and
// "%(asctime)s - %(name)s - %(levelname)s - ...", log4j's and many others'
// ("2026-12-07 23:00:00,123 ERROR model: ..."); or glog's and absl's,
// whose first letter is the level ("E1207 23:00:00.123456 12 model.cc:40]").
func levelAfterTimestamp(head string) (slog.Level, bool) {
	if len(head) > 5 && strings.IndexByte("IWEF", head[0]) >= 0 && head[5] == ' ' && isDigits(head[1:5]) && isClock(head[6:]) {
		switch head[0] {
		case 'W':
			return slog.LevelWarn, true
		case 'E', 'F':
			return slog.LevelError, true
		}
		return slog.LevelInfo, true
	}
	first, _, _ := strings.Cut(head, " ")
	if !isTimestamp(first) {
		return 0, false
	}
	rest := head
	for range 5 {
		var word string
		word, rest, _ = strings.Cut(strings.TrimLeft(rest, " \t-|"), " ")
		switch strings.Trim(word, "[]:-|") {
		case "DEBUG":
			return slog.LevelDebug, true
		case "INFO":
			return slog.LevelInfo, true
		case "WARN", "WARNING":
			return slog.LevelWarn, true
		case "ERROR", "CRITICAL", "FATAL":
			return slog.LevelError, true
		}
	}
	return 0, false
}

// isTimestamp says whether word looks like a date or a time of day, as a
// log line's first word: it begins with a date (2026-12-07, 2026/12/07)
// or a time (23:00:00, 9:00:00), and holds nothing but digits and - / : .
// , T Z +. "1/2", "3-5" or "10:1" is not.
func isTimestamp(word string) bool {
	date := len(word) >= 10 && isDigits(word[:4]) && (word[4] == '-' || word[4] == '/') && word[7] == word[4] &&
		isDigits(word[5:7]) && isDigits(word[8:10])
	if !date && !isClock(word) {
		return false
	}
	for i := range len(word) {
		if c := word[i]; (c < '0' || c > '9') && !strings.ContainsRune("-/:.,TZ+", rune(c)) {
			return false
		}
	}
	return true
}

// isClock says whether s begins with a time of day, h:mm:ss or hh:mm:ss.
func isClock(s string) bool {
	h, _, ok := strings.Cut(s, ":")
	return ok && (len(h) == 1 || len(h) == 2) && isDigits(h) && len(s) >= len(h)+6 &&
		isDigits(s[len(h)+1:len(h)+3]) && s[len(h)+3] == ':' && isDigits(s[len(h)+4:len(h)+6])
}

func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// namedLevel reads a level's name (DEBUG, INFO, WARN or WARNING, ERROR,
// CRITICAL or FATAL, TRACE; any case, with slog's "+2" offsets) at the
// start of s, up to end; anything else is info.
func namedLevel(s string, end byte) slog.Level {
	if i := strings.IndexByte(s, end); i >= 0 {
		s = s[:i]
	}
	if len(s) > len("CRITICAL")+3 {
		return slog.LevelInfo // not a level, and not worth upper-casing
	}
	switch name := strings.ToUpper(strings.TrimSpace(s)); name {
	case "WARNING":
		return slog.LevelWarn
	case "CRITICAL", "FATAL":
		return slog.LevelError
	case "TRACE":
		return slog.LevelDebug - 4
	default:
		var level slog.Level
		if level.UnmarshalText([]byte(name)) != nil {
			return slog.LevelInfo
		}
		return level
	}
}

// deathLine reports whether a line of output says why a Go process dies
// (see lastwords.Cause).
func deathLine(line []byte) bool {
	return lastwords.Cause(line)
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
