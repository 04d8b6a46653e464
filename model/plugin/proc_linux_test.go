package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// TestAGuardsDeathEndsThePlugin: when the guard of the plugin's process
// group dies (kill -9), the worker does not serve on with its plugin
// unguarded: the group is killed, plugin and child alike, which is the
// plugin's crash, said in its output; and the guard is reaped, not left a
// zombie.
func TestAGuardsDeathEndsThePlugin(t *testing.T) {
	var out syncbuf.Buffer
	crashed := make(chan error, 1)
	m := openChaos(t, Config{Output: &out, Crashed: func(err error) { crashed <- err }})
	outs, err := m.Predict(context.Background(), pack(t, "fork"))
	if err != nil {
		t.Fatal(err)
	}
	var child int
	if err := msgpack.Unmarshal(outs[0], &child); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	guard := m.runner.guard.pgid()
	if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-crashed:
		if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "signal: killed") {
			t.Errorf("Crashed got %v, want ErrExited saying the plugin was killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the guard (pid %d) was killed and the plugin still serves:\n%s", guard, out.String())
	}
	if want := fmt.Sprintf("[plugin chaos] the guard of the plugin's process group (pid %d) died", guard); !strings.Contains(out.String(), want) {
		t.Errorf("the output does not say why the plugin was killed; want %q in:\n%s", want, out.String())
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("the plugin's child %d to die with its group", child), func() bool { return processGone(child) })
	m.Close()
	var status syscall.WaitStatus
	if pid, err := syscall.Wait4(guard, &status, syscall.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Errorf("after Close, waiting for the guard (pid %d) gives pid %d, %v; want ECHILD: it is reaped", guard, pid, err)
	}
}

// TestAGuardOutlivesTheSignalsOfAStop: a service manager that signals
// every process of the service as it stops it (systemd's default) signals
// the guard too, whose death would kill the plugin while its worker
// drains. The guard ignores those signals, and the plugin serves on.
func TestAGuardOutlivesTheSignalsOfAStop(t *testing.T) {
	var out syncbuf.Buffer
	crashed := make(chan error, 1)
	m := openChaos(t, Config{Output: &out, Crashed: func(err error) { crashed <- err }})
	guard := m.runner.guard.pgid()
	stops := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}
	var mask uint64
	for _, sig := range stops {
		mask |= 1 << (sig - 1)
	}
	// The shell sets its signals as it starts, maybe after Open returned.
	waitFor(t, 5*time.Second, fmt.Sprintf("the guard (pid %d) to ignore SIGTERM, SIGINT and SIGHUP", guard), func() bool {
		return ignoredSignals(t, guard)&mask == mask
	})
	for _, sig := range stops {
		if err := syscall.Kill(guard, sig); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Predict(context.Background(), pack(t, "still there?")); err != nil {
		t.Fatalf("Predict after the guard was signalled: %v\n%s", err, out.String())
	}
	select {
	case err := <-crashed:
		t.Fatalf("the plugin crashed after its guard was signalled: %v\n%s", err, out.String())
	default:
	}
	if processGone(guard) {
		t.Fatalf("the guard (pid %d) died of the signals", guard)
	}
}

// ignoredSignals reads the mask of the signals pid ignores.
func ignoredSignals(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatalf("SigIgn of pid %d: %v", pid, err)
			}
			return mask
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return 0
}

// TestAPluginClosedSaysNothingOfItsGuard: Close kills the plugin's group,
// the guard with it, on purpose: its output does not report the guard's
// death as news, which it did when the watch saw the guard die before
// stop began.
func TestAPluginClosedSaysNothingOfItsGuard(t *testing.T) {
	for i := range 10 {
		var out syncbuf.Buffer
		m := openChaos(t, Config{Output: &out})
		if _, err := m.Predict(context.Background(), pack(t, "ok")); err != nil {
			t.Fatal(err)
		}
		guard := m.runner.guard
		m.Close()
		select {
		case <-guard.watched:
		case <-time.After(5 * time.Second):
			t.Fatal("the guard's watch did not end after Close")
		}
		if strings.Contains(out.String(), "died") {
			t.Fatalf("round %d: Close's output reports the guard's death:\n%s", i, out.String())
		}
	}
}
