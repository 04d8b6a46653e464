package plugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// TestACrashIsSeenWhileAnotherProcessHoldsTheOutput: a plugin that dies
// while a process it started (in a session of its own, out of reach of its
// process group) holds its stderr is reported at once, not when that
// process ends.
func TestACrashIsSeenWhileAnotherProcessHoldsTheOutput(t *testing.T) {
	var out syncbuf.Buffer
	crashed := make(chan error, 1)
	m := openChaos(t, Config{Output: &out, Crashed: func(err error) { crashed <- err }})
	t.Cleanup(func() { killDaemon(t, out.String()) })

	errc := make(chan error, 1)
	go func() {
		_, err := m.Predict(context.Background(), pack(t, "daemon"))
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("Predict = %v, want ErrExited with the plugin's exit status", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's death went unnoticed while its daemon held its stderr")
	}
	select {
	case <-crashed:
	default:
		t.Error("Predict returned before Crashed was called")
	}
	if !strings.Contains(out.String(), "chaos plugin: daemon pid") {
		t.Errorf("the plugin's last words are missing from its output:\n%s", out.String())
	}
}

// killDaemon kills the daemon the chaos plugin said it started.
func killDaemon(t *testing.T, output string) {
	t.Helper()
	if match := regexp.MustCompile(`daemon pid (\d+)`).FindStringSubmatch(output); match != nil {
		pid, _ := strconv.Atoi(match[1])
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestLongStdoutLinesDoNotStopThePlugin: a plugin that writes lines over
// 64 KiB on its own stdout after the handshake (a plugin not built with the
// SDK, whose stdout is not pointed at stderr) goes on answering, and its
// lines reach the output.
func TestLongStdoutLinesDoNotStopThePlugin(t *testing.T) {
	var out syncbuf.Buffer
	m, err := Open(context.Background(), Config{Path: bin("unruly"), Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		items := pack(t, "stdout:200")
		outs, err := m.Predict(ctx, items)
		cancel()
		if err != nil || len(outs) != 1 || string(outs[0]) != string(items[0]) {
			t.Fatalf("batch %d, after lines of 200 KiB on stdout: %x, %v", i, outs, err)
		}
	}
	m.Close()
	if n := strings.Count(out.String(), "[plugin unruly] ppp"); n < 4 {
		t.Errorf("%d pieces of the long stdout lines in the output, want them all passed on", n)
	}
}

// TestAnOverlongFirstLineIsNoHandshake: a binary whose first line is far
// too long for a handshake is refused saying so.
func TestAnOverlongFirstLineIsNoHandshake(t *testing.T) {
	script := filepath.Join(t.TempDir(), "longline")
	writeFile(t, script, "#!/bin/sh\nhead -c 200000 /dev/zero | tr '\\0' p\necho\nsleep 30\n", 0o755)
	m, err := Open(context.Background(), Config{Path: script, StartTimeout: 10 * time.Second})
	if err == nil {
		m.Close()
		t.Fatal("Open succeeded")
	}
	want := fmt.Sprintf("it printed a line of more than 64 KiB on stdout, starting %q", strings.Repeat("p", 60))
	if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), want) {
		t.Errorf("Open = %v, want ErrHandshake saying %q", err, want)
	}
}

// TestAnUnreachablePluginSaysWhy: a plugin whose handshake names a socket
// that cannot be reached is refused with the reason, not only with the
// signal it was killed by; and a handshake line of five fields, as
// go-plugin's own examples print, is said to lack its certificate.
func TestAnUnreachablePluginSaysWhy(t *testing.T) {
	script := filepath.Join(t.TempDir(), "nosocket")
	writeFile(t, script, "#!/bin/sh\necho '1|1|unix|/nonexistent/plugin.sock|grpc'\nsleep 30\n", 0o755)
	m, err := Open(context.Background(), Config{Path: script})
	if err == nil {
		m.Close()
		t.Fatal("Open succeeded")
	}
	for _, want := range []string{script, "could not be called", `its handshake line "1|1|unix|/nonexistent/plugin.sock|grpc" has no certificate, the sixth field`, "/nonexistent/plugin.sock", "no such file or directory", "killed it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open = %v, want it to say %q", err, want)
		}
	}
}
