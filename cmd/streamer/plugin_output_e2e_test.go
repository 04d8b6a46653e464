package main

import (
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestPluginCrashWithItsOutputHeldOpen: a plugin that dies while a process
// it started (in a session of its own) holds its stderr is a crash of its
// worker at once, not after --worker-timeout; the worker is restarted.
func TestPluginCrashWithItsOutputHeldOpen(t *testing.T) {
	bin := pluginBins(t)["chaos"]
	s := startPluginServer(t, "--plugin", bin, "--workers", "1", "--worker-timeout", "60s")
	t.Cleanup(func() {
		for _, match := range regexp.MustCompile(`daemon pid (\d+)`).FindAllStringSubmatch(s.logs(), -1) {
			pid, _ := strconv.Atoi(match[1])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	worker := s.waitAllReady(t, 1)[0].PID
	start := time.Now()
	p := s.predictJSON(t, "daemon")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the crash was answered after %s, want at once", took)
	}
	if p.Status == http.StatusOK {
		t.Errorf("a request whose plugin died: %s, want an error", p)
	}
	if st := s.stats(t); st.Crashes == 0 {
		t.Error("no crash counted")
	}
	s.waitFor(t, "a new worker", readyTimeout, func() bool {
		ready := s.readyWorkers(t)
		return len(ready) == 1 && ready[0].PID != worker
	})
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Errorf("after the crash: %s", p)
	}
}

// TestPluginLongStdoutLines: a plugin writing lines over 64 KiB on its own
// stdout goes on answering, and the lines reach the server log.
func TestPluginLongStdoutLines(t *testing.T) {
	bin := pluginBins(t)["unruly"]
	s := startPluginServer(t, "--plugin", bin, "--workers", "1", "--worker-timeout", "10s")
	worker := s.waitAllReady(t, 1)[0].PID
	for i := range 4 {
		if p := s.predictJSON(t, "stdout:200"); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"stdout:200"}) {
			t.Fatalf("batch %d after lines of 200 KiB on the plugin's stdout: %s", i, p)
		}
	}
	s.waitLogged(t, "[plugin unruly] pppppppp")
	if now := s.readyWorkers(t); len(now) != 1 || now[0].PID != worker {
		t.Errorf("workers %+v: want worker %d still serving", now, worker)
	}
}
