package supervisor

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// A worker printing fast has its lines logged up to the burst, then at the
// rate, with the count of those dropped; a panic's message always goes
// through.
func TestWorkerOutputIsRateLimited(t *testing.T) {
	var logs syncbuf.Buffer
	out := newOutputLog(slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Now()
	for range 1000 {
		out.line("chatty", now)
	}
	out.line("panic: runtime error: index out of range", now)
	now = now.Add(time.Second)
	out.line("later", now)
	out.flush()
	text := logs.String()
	if got := strings.Count(text, "line=chatty"); got != outputBurst {
		t.Errorf("%d chatty lines logged in one instant; want the burst, %d", got, outputBurst)
	}
	for _, want := range []string{
		`line="panic: runtime error: index out of range"`,
		"worker output dropped", "lines=800",
		"line=later",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the log lacks %q:\n%s", want, text)
		}
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
