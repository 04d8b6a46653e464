package supervisor

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// A worker printing fast has its lines logged up to the burst, then at the
// rate, with the count of those dropped; a panic's message always goes
// through; and once the stream ends, the last lines dropped are logged,
// the very last returned as the stream's last words.
func TestWorkerOutputIsRateLimited(t *testing.T) {
	var logs syncbuf.Buffer
	out := newOutputLog(slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Now()
	for range 1000 {
		out.line([]byte("chatty"), now)
	}
	out.line([]byte("panic: runtime error: index out of range"), now)
	now = now.Add(time.Second)
	out.line([]byte("later"), now)
	for i := range 500 {
		out.line(fmt.Appendf(nil, "more %d", i), now)
	}
	out.line([]byte("exiting: the model file is gone"), now)
	last := out.end()
	text := logs.String()
	if got := strings.Count(text, "line=chatty"); got != outputBurst {
		t.Errorf("%d chatty lines logged in one instant; want the burst, %d", got, outputBurst)
	}
	for _, want := range []string{
		`line="panic: runtime error: index out of range"`,
		"worker output dropped", "lines=800",
		"line=later",
		`line="more 499"`, `line="exiting: the model file is gone" dropped_before=true`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the log lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, `line="more 400"`) {
		t.Errorf("the log has more than the last %d lines dropped", outputTail)
	}
	if last != "exiting: the model file is gone" {
		t.Errorf("the last words are %q; want the stream's last line", last)
	}
}

// Past its burst, a worker's output is logged at outputRate lines a second,
// and the lines dropped are counted at most once a second.
func TestWorkerOutputRate(t *testing.T) {
	var logs syncbuf.Buffer
	out := newOutputLog(slog.New(slog.NewTextHandler(&logs, nil)))
	start := time.Now()
	send := func(text string, n int, at time.Duration) {
		for range n {
			out.line([]byte(text), start.Add(at))
		}
	}
	send("burst", outputBurst+50, 0)
	send("half", 100, 500*time.Millisecond)
	send("second", 100, 1500*time.Millisecond)
	text := logs.String()
	for _, c := range []struct {
		line string
		want int
	}{{"burst", outputBurst}, {"half", outputRate / 2}, {"second", outputRate}} {
		if got := strings.Count(text, "line="+c.line+"\n"); got != c.want {
			t.Errorf("%d lines %q logged; want %d", got, c.line, c.want)
		}
	}
	if got := strings.Count(text, "worker output dropped"); got != 1 || !strings.Contains(text, "lines=140 ") {
		t.Errorf("the lines dropped were counted %d times; want once, 140 of them (50 + 90), a second after the first line:\n%s", got, text)
	}
}

func TestPlainTextDropsEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"\x1b[1;31m2026 [E:onnxruntime] bad\x1b[m": "2026 [E:onnxruntime] bad",
		"\x1b[0mok\x1b": "ok",
		"a\x1bMb":       "ab",
	} {
		if got := plainText(in); got != want {
			t.Errorf("plainText(%q) = %q; want %q", in, got, want)
		}
	}
}

// A worker's line is logged at the level it says, in each form the code a
// worker runs writes, so that a model's warning shows under --log-level
// warn; a line that says none is info.
func TestWorkerOutputKeepsItsLevel(t *testing.T) {
	for line, want := range map[string]slog.Level{
		`time=2026-12-07T02:40:00.000Z level=WARN msg="close model" err=gone`: slog.LevelWarn,
		`time=2026-12-07T02:40:00.000Z level=ERROR+2 msg=x`:                   slog.LevelError + 2,
		`level=DEBUG msg=x`: slog.LevelDebug,
		`{"time":"2026-12-07T02:40:00Z","level":"ERROR","msg":"x"}`:                                  slog.LevelError,
		`{"@level":"warn","level":"warn","@message":"x"}`:                                            slog.LevelWarn,
		`2026-12-07T02:40:00.000Z [WARN]  plugin: slow start`:                                        slog.LevelWarn,
		`2026-12-07T02:40:00.000Z [ERROR] plugin: failed`:                                            slog.LevelError,
		`2026-12-07T02:40:00.000Z [DEBUG] plugin: detail`:                                            slog.LevelDebug,
		`2026-12-07 02:40:00.1 [W:onnxruntime:, session_state.cc:1166] some nodes were not assigned`: slog.LevelWarn,
		"\x1b[1;31m2026-12-07 02:40:00.1 [E:onnxruntime:Default, provider.cc:1] failed\x1b[m":        slog.LevelError,
		`WARNING:root:tokenizer truncated the input`:                                                 slog.LevelWarn,
		`CRITICAL:model:out of memory`:                                                               slog.LevelError,
		`2026-12-07 23:00:00,123 ERROR mymodel: CUDA out of memory`:                                  slog.LevelError,
		`2026-12-07 23:00:00,123 - root - WARNING - weights in float16`:                              slog.LevelWarn,
		`2026-12-07 23:00:00,123 - my.model - DEBUG - batch of 3`:                                    slog.LevelDebug,
		`2026-12-07 23:00:00 [main] INFO  Loader - ready`:                                            slog.LevelInfo,
		`E1207 23:00:00.123456  123 model.cc:12] tensor shape mismatch`:                              slog.LevelError,
		`W1207 23:00:00.123456  123 model.cc:12] slow kernel`:                                        slog.LevelWarn,
		`F1207 23:00:00.123456  123 model.cc:12] Check failed`:                                       slog.LevelError,
		`I1207 23:00:00.123456  123 model.cc:12] loaded`:                                             slog.LevelInfo,
		`2026-12-07 23:00:00 loaded the weights of 12 layers; ERROR rate 0`:                          slog.LevelInfo,
		`Epoch 1 of 3`: slog.LevelInfo,
		`1/2 shards loaded: DEBUG symbols stripped`:  slog.LevelInfo,
		`3-5 items had ERROR flags cleared`:          slog.LevelInfo,
		`10:1 ratio of WARNING to INFO lines`:        slog.LevelInfo,
		`E1234 is the code we saw`:                   slog.LevelInfo,
		`23:00:00.123 WARNING slow`:                  slog.LevelWarn,
		`2 items done: ERROR count 0`:                slog.LevelInfo,
		`2026-12-07T23:00:00.123+01:00 WARNING slow`: slog.LevelWarn,
		`2026/12/07 23:00:00 ERROR weights: missing`: slog.LevelError,
		`Error: the weights are missing`:             slog.LevelError,
		`panic: runtime error: index out of range`:   slog.LevelError,
		`fatal error: out of memory`:                 slog.LevelError,
		// A plugin's lines, as its worker tags them.
		`[plugin fillmask] WARNING:root:tokenizer truncated the input`:         slog.LevelWarn,
		`[plugin fillmask] 2026-12-07T02:40:00.000Z [WARN]  mylib: slow start`: slog.LevelWarn,
		`[plugin fillmask] time=2026-12-07T02:40:00Z level=ERROR msg=x`:        slog.LevelError,
		`[plugin fillmask] panic: runtime error: index out of range`:           slog.LevelError,
		`[plugin fillmask] fillmask: 4-gram model of 12 words ready`:           slog.LevelInfo,
		`goroutine 1 [running]:`:                        slog.LevelInfo,
		`python-plugin: bigram model of 12 words ready`: slog.LevelInfo,
		`loading weights: 3/12`:                         slog.LevelInfo,
		`[1/3] warming up`:                              slog.LevelInfo,
		`msg="level=WARN is what a caller asked for"`:   slog.LevelInfo,
		``: slog.LevelInfo,
	} {
		if got := lineLevel(plainText(line)); got != want {
			t.Errorf("lineLevel(%q) = %v; want %v", line, got, want)
		}
	}

	// Through the log: under a warn level, the warning shows and the
	// chatter does not.
	var logs syncbuf.Buffer
	out := newOutputLog(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	now := time.Now()
	out.line([]byte("loading weights"), now)
	out.line([]byte("WARNING:root:tokenizer truncated the input"), now)
	text := logs.String()
	if !strings.Contains(text, "level=WARN") || !strings.Contains(text, "tokenizer truncated") || strings.Contains(text, "loading weights") {
		t.Errorf("under --log-level warn the log is:\n%s\nwant the warning alone, at WARN", text)
	}

	// Lines the level leaves out take nothing of the rate, and are not
	// counted dropped: a flood of debug lines does not hide the errors.
	var flood syncbuf.Buffer
	out = newOutputLog(slog.New(slog.NewTextHandler(&flood, &slog.HandlerOptions{Level: slog.LevelWarn})))
	for i := range 10 * outputBurst {
		out.line(fmt.Appendf(nil, "[DEBUG] chatty %d", i), now)
		if i%100 == 0 {
			out.line(fmt.Appendf(nil, "[ERROR] important %d", i), now)
		}
	}
	// Its text is the last words so far all the same: a worker's death is
	// explained by its lines whatever the log keeps.
	if got := out.line([]byte("[DEBUG] the last line"), now); got != "[DEBUG] the last line" {
		t.Errorf("a line left out for its level reports %q; want its text, the last words so far", got)
	}
	out.end()
	text = flood.String()
	if got := strings.Count(text, "important"); got != 10*outputBurst/100 || strings.Contains(text, "chatty") || strings.Contains(text, "dropped") {
		t.Errorf("under --log-level warn, %d debug lines and %d errors among them: %d errors logged, want all:\n%s", 10*outputBurst, 10*outputBurst/100, got, text)
	}
}
