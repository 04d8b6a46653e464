package main

import (
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestVersionIsSaidAndLogged: `streamer version` and `streamer --version`
// say which build this is, and a server logs the same as it starts, and
// how long it ran as it stops: an operator reading a log knows which
// build wrote it.
func TestVersionIsSaidAndLogged(t *testing.T) {
	var said []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(streamerBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("streamer %s: %v\n%s", args[0], err, out)
		}
		said = append(said, strings.TrimSpace(string(out)))
	}
	line := strings.TrimPrefix(said[0], "streamer ")
	if said[0] != said[1] || line == said[0] || !strings.Contains(line, runtime.Version()) {
		t.Fatalf("streamer version says %q, --version %q: want one line, streamer VERSION (…, %s, …)", said[0], said[1], runtime.Version())
	}
	if out, err := exec.Command(streamerBin, "version", "extra").CombinedOutput(); err == nil {
		t.Errorf("streamer version extra: %s; want it refused", out)
	}

	s := startServer(t, "--model", "echo", "--workers", "1")
	s.waitLogged(t, "version="+strconv.Quote(line))
	s.stop(t)
	if !strings.Contains(s.logs(), `msg=stopped uptime=`) {
		t.Errorf("the server's last line does not say how long it ran:\n%s", s.logs())
	}
}
