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
