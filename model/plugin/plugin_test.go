package plugin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
)

func TestRoundTrip(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "3")
	m := openChaos(t, Config{Args: map[string]string{"lang": "en", "k": "v=w"}, Device: "cuda"})

	if got, want := m.Describe(), "plugin chaos on cuda ("+bin("chaos")+")"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	items := pack(t, "Happy birthday to [MASK].", int64(42), map[string]any{"x": []any{1.5, "y"}}, "config", "env:CUDA_VISIBLE_DEVICES")
	outs, err := m.Predict(context.Background(), items)
	if err != nil {
		t.Fatalf("Predict: %v", err)
	}
	if len(outs) != len(items) {
		t.Fatalf("%d outputs for %d items", len(outs), len(items))
	}
	for i := range 3 {
		if string(outs[i]) != string(items[i]) {
			t.Errorf("output %d = %x, want the item echoed: %x", i, outs[i], items[i])
		}
	}
	wantConfig := map[string]any{"args": map[string]any{"lang": "en", "k": "v=w"}, "device": "cuda"}
	if got := unpack(t, outs[3]); !reflect.DeepEqual(got, wantConfig) {
		t.Errorf("the plugin's Init config = %v, want %v", got, wantConfig)
	}
	if got := unpack(t, outs[4]); got != "3" {
		t.Errorf("the plugin's CUDA_VISIBLE_DEVICES = %v, want the worker's, 3", got)
	}
}

func TestPerItemErrors(t *testing.T) {
	m := openChaos(t, Config{})
	items := pack(t, "a", "reject", "b")
	outs, err := m.Predict(context.Background(), items)
	var itemErrs *model.ItemErrors
	if !errors.As(err, &itemErrs) {
		t.Fatalf("Predict error = %v, want *model.ItemErrors", err)
	}
	if len(itemErrs.Errs) != 3 || itemErrs.Errs[0] != nil || itemErrs.Errs[2] != nil {
		t.Fatalf("item errors = %v, want only item 1 failed", itemErrs.Errs)
	}
	if msg := itemErrs.Errs[1].Error(); !strings.Contains(msg, `item "reject" rejected`) || !strings.Contains(msg, "plugin chaos") {
		t.Errorf("item 1's error %q does not say what failed where", msg)
	}
	if string(outs[0]) != string(items[0]) || string(outs[2]) != string(items[2]) {
		t.Errorf("batch-mates of the failed item were not answered: %x", outs)
	}
	assertServes(t, m)
}

func TestBatchFailures(t *testing.T) {
	tests := []struct {
		name    string
		items   []any
		wantErr string
	}{
		{"wrong output count", []any{"a", "b", "wrong-count"}, "plugin chaos returned 2 outputs for a batch of 3 items"},
		{"batch error", []any{"a", "batch-error"}, "plugin chaos: chaos plugin: batch failed as asked"},
	}
	m := openChaos(t, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := m.Predict(context.Background(), pack(t, tt.items...))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Predict = %x, %v; want an error containing %q", outs, err, tt.wantErr)
			}
			var itemErrs *model.ItemErrors
			if errors.As(err, &itemErrs) {
				t.Errorf("a batch failure came back as item errors: %v", err)
			}
			assertServes(t, m)
		})
	}
}

// TestLargeBatch sends a batch past gRPC's default 4 MiB message limit.
func TestLargeBatch(t *testing.T) {
	m := openChaos(t, Config{})
	big := strings.Repeat("x", 1<<20)
	values := make([]any, 6)
	for i := range values {
		values[i] = big
	}
	items := pack(t, values...)
	outs, err := m.Predict(context.Background(), items)
	if err != nil {
		t.Fatalf("Predict of a 6 MiB batch: %v", err)
	}
	for i := range items {
		if string(outs[i]) != string(items[i]) {
			t.Fatalf("output %d of the large batch differs from its item", i)
		}
	}
}

// assertServes checks that the plugin still answers.
func assertServes(t *testing.T, m *Model) {
	t.Helper()
	items := pack(t, "still there?")
	outs, err := m.Predict(context.Background(), items)
	if err != nil || len(outs) != 1 || string(outs[0]) != string(items[0]) {
		t.Fatalf("the plugin does not serve any more: %x, %v", outs, err)
	}
}

// pythonTraceback is what Python prints on stderr when an exception ends it.
const pythonTraceback = `Traceback (most recent call last):
  File "plugin.py", line 40, in Predict
    raise ValueError("bad input")
ValueError: bad input
`

// nodeCrash is what Node.js prints on stderr when an exception ends it,
// after a line of the plugin's own that gives the reason.
const nodeCrash = `fatal error: Error: bad input
/srv/plugin.js:12
    throw new Error("bad input");
    ^

Error: bad input
    at predict (/srv/plugin.js:12:11)
    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)

Node.js v20.11.0
`

func TestCrashes(t *testing.T) {
	tests := []struct {
		name       string
		trigger    string
		wantReason string // in the error: how it ended, and what it said of why
		wantOutput string // what the dying plugin printed, in Output
	}{
		{"exit", "crash", "exit status 3; its last lines: chaos plugin: crashing on a trigger item", "[plugin chaos] chaos plugin: crashing on a trigger item\n"},
		{"panic", "panic", "exit status 2; its last words: panic: chaos plugin: panic on a trigger item", "[plugin chaos] panic: chaos plugin: panic on a trigger item\n"},
		// A plugin in another language: the last lines of its traceback,
		// or the line it wrote as a Go panic's, say why.
		{"exception", "die:" + pythonTraceback, `exit status 1; its last lines: File "plugin.py", line 40, in Predict | raise ValueError("bad input") | ValueError: bad input`, "[plugin chaos] ValueError: bad input\n"},
		{"last words", "die:" + nodeCrash, "exit status 1; its last words: fatal error: Error: bad input", "[plugin chaos] Node.js v20.11.0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out syncbuf.Buffer
			var crashes atomic.Int32
			crashed := make(chan error, 2)
			m := openChaos(t, Config{Output: &out, Crashed: func(err error) {
				crashes.Add(1)
				crashed <- err
			}})
			pid := pidOf(t, m)

			_, err := m.Predict(context.Background(), pack(t, "a", tt.trigger, "b"))
			if !errors.Is(err, ErrExited) {
				t.Fatalf("Predict error = %v, want ErrExited", err)
			}
			for _, want := range []string{bin("chaos"), fmt.Sprintf("pid %d", pid), tt.wantReason} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("crash error %q does not contain %q", err, want)
				}
			}
			select {
			case cerr := <-crashed:
				if cerr.Error() != err.Error() {
					t.Errorf("Crashed got %q, Predict returned %q", cerr, err)
				}
			default:
				t.Fatal("Predict returned before Crashed was called")
			}
			if !strings.Contains(out.String(), tt.wantOutput) {
				t.Errorf("the plugin's last words are missing from its output; want %q in:\n%s", tt.wantOutput, out.String())
			}
			if _, err := m.Predict(context.Background(), pack(t, "a")); !errors.Is(err, ErrExited) {
				t.Errorf("Predict after the crash = %v, want ErrExited", err)
			}
			m.Close()
			if n := crashes.Load(); n != 1 {
				t.Errorf("Crashed called %d times, want once", n)
			}
		})
	}
}

func TestCrashBetweenBatchesIsReported(t *testing.T) {
	crashed := make(chan error, 1)
	m := openChaos(t, Config{Crashed: func(err error) { crashed <- err }})
	pid := pidOf(t, m)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-crashed:
		if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "signal: killed") {
			t.Errorf("Crashed got %v, want ErrExited saying it was killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the plugin's death was not reported")
	}
}

func TestHangIsBoundedByContext(t *testing.T) {
	m := openChaos(t, Config{Crashed: func(err error) { t.Errorf("Crashed(%v) for a plugin that hangs", err) }})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Predict(ctx, pack(t, "hang"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Predict error = %v, want the context's deadline", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Predict returned %s after its deadline", elapsed)
	}
	pid := m.PID()
	m.Close()
	if !processGone(pid) {
		t.Errorf("the hung plugin (pid %d) outlived Close", pid)
	}
}

func TestCloseStopsThePlugin(t *testing.T) {
	m := openChaos(t, Config{Crashed: func(err error) { t.Errorf("Crashed(%v) after Close", err) }})
	pid := pidOf(t, m)
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// Under go-plugin's kill after 2 s, with room for a loaded machine.
	if elapsed := time.Since(start); elapsed > 1500*time.Millisecond {
		t.Errorf("Close of an idle plugin took %s; it should shut down at once", elapsed)
	}
	if !processGone(pid) {
		t.Errorf("plugin pid %d still runs after Close", pid)
	}
}

func TestOutputReachesTheLogWhole(t *testing.T) {
	var out syncbuf.Buffer
	m := openChaos(t, Config{Output: &out})
	if _, err := m.Predict(context.Background(), pack(t, "say:to stderr", "print:to stdout")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	lines := strings.Split(out.String(), "\n")
	for _, want := range []string{"[plugin chaos] to stderr", "[plugin chaos] to stdout"} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("line %q missing from the plugin's output:\n%s", want, out.String())
		}
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	chatty := filepath.Join(dir, "chatty")
	writeFile(t, notExec, "#!/bin/sh\n", 0o644)
	writeFile(t, chatty, "#!/bin/sh\necho hello, I am no plugin\nsleep 30\n", 0o755)
	blank := filepath.Join(dir, "blank")
	writeFile(t, blank, "#!/bin/sh\necho\nsleep 30\n", 0o755)
	// A Python plugin whose interpreter lacks a module says so on stderr
	// and exits: the error gives both.
	missing := filepath.Join(dir, "missing-module")
	writeFile(t, missing, "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho \"ModuleNotFoundError: No module named 'grpc'\" >&2\necho >&2\nexit 3\n", 0o755)
	segv := filepath.Join(dir, "segv")
	writeFile(t, segv, "#!/bin/sh\necho 'about to crash' >&2\nkill -SEGV $$\n", 0o755)
	closes := filepath.Join(dir, "closes")
	writeFile(t, closes, "#!/bin/sh\nexec >&-\nexec sleep 30\n", 0o755)
	// Killed as it starts, by the out-of-memory killer, say: not by
	// streamer, which had found nothing wrong yet.
	oomed := filepath.Join(dir, "oomed")
	writeFile(t, oomed, "#!/bin/sh\nkill -KILL $$\n", 0o755)
	// Executable, or so its mode says: its checksum would wait for a
	// writer for ever.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true binary")
	}
	tests := []struct {
		name     string
		path     string
		wantIs   error
		wantText []string
	}{
		{"missing", filepath.Join(dir, "nope"), nil, []string{"nope", "no such file"}},
		{"directory", dir, nil, []string{"is a directory"}},
		{"named pipe", fifo, nil, []string{"plugin " + fifo + ": is a named pipe; want the path of a plugin binary"}},
		{"not executable", notExec, nil, []string{"not-executable", "is not executable"}},
		{"exits at once", trueBin, ErrHandshake, []string{trueBin, "exited before the handshake", "want a streamer model plugin: started with STREAMER_PLUGIN=6f3c1e0a-streamer-model-plugin in its environment", "(a Go plugin: model/plugin/sdk; another language: the contract in model/plugin/pluginpb/doc.go)"}},
		{"exits at once, saying why", missing, ErrHandshake, []string{missing, `it exited before the handshake, or closed its stdout (exit status 3; its last line: "ModuleNotFoundError: No module named 'grpc'")`}},
		{"prints something else", chatty, ErrHandshake, []string{chatty, `printed "hello, I am no plugin" instead of a handshake`, "want a streamer model plugin"}},
		{"prints an empty line", blank, ErrHandshake, []string{blank, "printed an empty line instead of a handshake"}},
		{"closes its stdout", closes, ErrHandshake, []string{closes, "exited before the handshake, or closed its stdout (signal: killed, as streamer kills a plugin whose start failed"}},
		{"killed from outside", oomed, ErrHandshake, []string{oomed, "exited before the handshake, or closed its stdout (signal: killed, and not by streamer: the out-of-memory killer, or an operator)"}},
		{"dies of a signal", segv, ErrHandshake, []string{segv, `exited before the handshake, or closed its stdout (signal: segmentation fault; its last line: "about to crash")`}},
		{"prints nothing", bin("silent"), ErrHandshake, []string{bin("silent"), "printed no handshake within 700ms", "or it wrote the handshake without flushing its stdout"}},
		{"wrong protocol version", bin("wrongversion"), ErrHandshake, []string{bin("wrongversion"), "Plugin version: 99", "want streamer plugin protocol version 1 (a Go plugin: rebuild it against this streamer's model/plugin/sdk; another language: implement version 1 of the contract in model/plugin/pluginpb/doc.go)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Short only where the timeout is what is tested: elsewhere a
			// binary slow to start on a loaded machine must not run out of
			// it before it says what it says.
			timeout := 10 * time.Second
			if tt.name == "prints nothing" {
				timeout = 700 * time.Millisecond
			}
			start := time.Now()
			m, err := Open(context.Background(), Config{Path: tt.path, StartTimeout: timeout})
			if err == nil {
				m.Close()
				t.Fatal("Open succeeded")
			}
			if elapsed := time.Since(start); elapsed > 3*time.Second {
				t.Errorf("Open took %s to fail", elapsed)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			for _, want := range tt.wantText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// A socket directory too long for a plugin's socket below it is refused
// before the plugin runs, naming the directory and the limit, rather than
// the plugin failing to bind its socket; one that is short enough is
// made again when it was removed.
func TestOpenChecksTheSocketDir(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", MaxSocketDir()))
	_, err := Open(context.Background(), Config{Path: bin("chaos"), SocketDir: long})
	if err == nil || !strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), strconv.Itoa(MaxSocketDir())+" bytes") {
		t.Errorf("Open with a socket directory of %d bytes: %v; want it refused, naming it and the limit %d", len(long), err, MaxSocketDir())
	}
	short, err := os.MkdirTemp("/tmp", "s")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(short)
	gone := filepath.Join(short, "gone")
	m, err := Open(context.Background(), Config{Path: bin("chaos"), SocketDir: gone})
	if err != nil {
		t.Fatalf("Open with a socket directory that is gone: %v; want it made again", err)
	}
	m.Close()
	if info, err := os.Stat(gone); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("the socket directory made again: %v, %v; want mode 0700", info, err)
	}
}

func TestChecksum(t *testing.T) {
	data, err := os.ReadFile(bin("chaos"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)

	m, err := Open(context.Background(), Config{Path: bin("chaos"), SHA256: strings.ToUpper(good)})
	if err != nil {
		t.Fatalf("Open with the right checksum: %v", err)
	}
	m.Close()

	// Open checks right before it runs the binary; Check does it for a
	// supervisor, before any worker.
	_, openErr := Open(context.Background(), Config{Path: bin("chaos"), SHA256: bad})
	_, checkErr := Check(bin("chaos"), bad)
	for _, err := range []error{openErr, checkErr} {
		if !errors.Is(err, ErrChecksum) {
			t.Fatalf("a wrong checksum: %v, want ErrChecksum", err)
		}
		for _, want := range []string{bin("chaos"), good, bad} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("checksum error %q does not contain %q", err, want)
			}
		}
	}
	if _, err := Check(bin("chaos"), "abc"); err == nil || !strings.Contains(err.Error(), "want 64 hex digits") {
		t.Errorf("Check with a malformed checksum = %v", err)
	}
	if _, err := Open(context.Background(), Config{Path: bin("chaos"), SHA256: "xyz"}); err == nil || !strings.Contains(err.Error(), "want 64 hex digits") {
		t.Errorf("Open with a malformed checksum = %v", err)
	}
}

func TestInitFailures(t *testing.T) {
	tests := []struct {
		name    string
		args    map[string]string
		wantIs  error
		wantErr string
	}{
		{"error", map[string]string{"fail-init": "no weights in /models"}, nil, "plugin chaos: init: no weights in /models"},
		{"exit", map[string]string{"init-exit": ""}, ErrExited, "exit status 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out syncbuf.Buffer
			m, err := Open(context.Background(), Config{Path: bin("chaos"), Args: tt.args, Output: &out,
				Crashed: func(err error) { t.Errorf("Crashed(%v) for a plugin that never served", err) }})
			if err == nil {
				m.Close()
				t.Fatal("Open succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestPluginDiesWithItsHost kills a host process outright and checks that
// neither its plugin nor a process the plugin started outlives it.
func TestPluginDiesWithItsHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent death signal is Linux's")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host := exec.Command(self, "-test.run=^$")
	host.Env = append(os.Environ(), envHostPlugin+"="+bin("chaos"))
	host.Stderr = os.Stderr
	stdout, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer host.Process.Kill()
	pids := strings.Fields(readLine(t, bufio.NewReader(stdout), 20*time.Second))
	if len(pids) != 2 {
		t.Fatalf("the host printed %q, want the plugin's pid and its child's", pids)
	}
	pid, child := atoi(t, pids[0]), atoi(t, pids[1])
	defer syscall.Kill(child, syscall.SIGKILL)
	if processGone(pid) || processGone(child) {
		t.Fatalf("plugin pid %d or its child %d is not running", pid, child)
	}
	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	waitFor(t, 5*time.Second, fmt.Sprintf("plugin pid %d to die with its host", pid), func() bool { return processGone(pid) })
	waitFor(t, 5*time.Second, fmt.Sprintf("the plugin's child %d to die with its host", child), func() bool { return processGone(child) })
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// TestLongErrorsAreCut: a plugin's error text, which goes to every caller
// of its batch and into the log, is cut to a few KiB, saying how much was cut.
func TestLongErrorsAreCut(t *testing.T) {
	m := openChaos(t, Config{})
	_, batchErr := m.Predict(context.Background(), pack(t, "long-error:5000"))
	_, itemErr := m.Predict(context.Background(), pack(t, "long-reject:5000"))
	_, initErr := Open(context.Background(), Config{Path: bin("chaos"), Args: map[string]string{"fail-init": strings.Repeat("I", 1<<20)}})
	for _, err := range []error{batchErr, itemErr, initErr} {
		if err == nil {
			t.Fatal("no error")
		}
		if msg := err.Error(); len(msg) > 5<<10 || !strings.Contains(msg, "more bytes cut)") {
			t.Errorf("an error of %d bytes (%.80s…), want it cut to a few KiB saying so", len(msg), msg)
		}
	}
	assertServes(t, m)
}

// An empty output, which no item can be and which came with no error, fails
// its item, naming the plugin and what an output is, rather than reach the
// answer's encoder, which said only that it was cut short.
func TestAnEmptyOutputFailsItsItem(t *testing.T) {
	m, err := Open(context.Background(), Config{Path: bin("unruly")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	outputs, err := m.Predict(context.Background(), pack(t, "empty-output", "fine"))
	var itemErrs *model.ItemErrors
	if !errors.As(err, &itemErrs) || itemErrs.Errs[0] == nil || itemErrs.Errs[1] != nil ||
		!strings.Contains(itemErrs.Errs[0].Error(), "plugin unruly answered with an empty output and no error") {
		t.Fatalf("Predict = %v; want item 0 failed for its empty output, item 1 answered", err)
	}
	if string(outputs[1]) != string(pack(t, "fine")[0]) {
		t.Errorf("item 1 answered %x, want its echo", outputs[1])
	}
}

// A plugin whose gRPC server keeps its library's 4 MiB limit on what it
// receives (unruly keeps go-plugin's default server, as grpcio's keeps its
// own) fails a larger batch: the error says whose the limit is and how to
// lift it, where it said only "larger than max".
func TestABatchOverThePluginsMessageLimitSaysWhose(t *testing.T) {
	m, err := Open(context.Background(), Config{Path: bin("unruly")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Predict(context.Background(), [][]byte{make([]byte, 5<<20)})
	if err == nil || !strings.Contains(err.Error(), "larger than max") || !strings.Contains(err.Error(), "the plugin's gRPC server refused a message this large: lift its receive limit") {
		t.Fatalf("a 5 MiB batch: %v; want the plugin's limit named", err)
	}
	assertServes(t, m)
}

// TestEmptyItemErrorsSaySo: an item failed with an empty error says that
// much, from the SDK and from a plugin without it.
func TestEmptyItemErrorsSaySo(t *testing.T) {
	tests := []struct {
		name, binary, trigger, want string
	}{
		{"sdk", "chaos", "empty-reject", "plugin chaos: the item failed, with an empty error"},
		{"no sdk", "unruly", "empty-item-error", "plugin unruly: it failed the item with an empty error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Open(context.Background(), Config{Path: bin(tt.binary)})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_, err = m.Predict(context.Background(), pack(t, tt.trigger))
			var itemErrs *model.ItemErrors
			if !errors.As(err, &itemErrs) || itemErrs.Errs[0] == nil || itemErrs.Errs[0].Error() != tt.want {
				t.Errorf("Predict = %v, want item 0 failed with %q", err, tt.want)
			}
		})
	}
}

// A plugin's handshake limit travels in its spec's settings written as
// people read a duration, since /v1/models shows the settings, and comes
// back as it went.
func TestTheHandshakeLimitTravelsAsADuration(t *testing.T) {
	spec, err := Settings{Path: "/bin/plugin", StartTimeout: Duration(108 * time.Second)}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(spec.Settings), `"start_timeout":"1m48s"`) {
		t.Errorf("settings %s; want start_timeout written 1m48s", spec.Settings)
	}
	back, err := SettingsOf(spec)
	if err != nil || time.Duration(back.StartTimeout) != 108*time.Second {
		t.Errorf("read back: %+v, %v; want a limit of 1m48s", back, err)
	}
	spec.Settings = []byte(`{"path": "/bin/plugin", "start_timeout": "soon"}`)
	if _, err := SettingsOf(spec); !errors.Is(err, model.ErrBadSettings) {
		t.Errorf("a limit that is no duration: %v; want ErrBadSettings", err)
	}
}

// A spec records the binary's checksum when it is made, unless the
// operator pinned one; a worker refuses the binary once it changed, as
// model.ErrStale, until Refresh records it anew.
func TestSpecRecordsTheBinaryLoaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plugin")
	write := func(content string) {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("#!/bin/sh\n")
	spec, err := Settings{Path: path}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	settings, err := SettingsOf(spec)
	if sum := sha256.Sum256([]byte("#!/bin/sh\n")); err != nil || settings.Loaded != hex.EncodeToString(sum[:]) {
		t.Fatalf("spec's settings %+v, %v; want the binary's SHA-256 loaded", settings, err)
	}
	if err := checkLoaded(settings); err != nil || settings.LoadedStamp == "" {
		t.Fatalf("the binary as it was loaded: %v (stamp %q)", err, settings.LoadedStamp)
	}
	// Written again in place to the same size and modification time, as
	// cp -p, tar and rsync -t do, it is another binary all the same: the
	// change time, which no tool sets, says so.
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	write("#!/bin/ash")
	if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := checkLoaded(settings); !errors.Is(err, ErrPluginChanged) {
		t.Fatalf("a binary written again to the same size and time: %v; want ErrPluginChanged", err)
	}
	write("#!/bin/sh\n# another\n")
	if err := checkLoaded(settings); !errors.Is(err, ErrPluginChanged) || !errors.Is(err, model.ErrStale) {
		t.Fatalf("a binary replaced: %v; want ErrPluginChanged, and model.ErrStale", err)
	}
	fresh, err := Refresh(spec)
	if err != nil {
		t.Fatal(err)
	}
	if settings, err = SettingsOf(fresh); err != nil || checkLoaded(settings) != nil {
		t.Fatalf("the binary after a refresh: %+v, %v, %v", settings, err, checkLoaded(settings))
	}

	pinned, err := Settings{Path: path, SHA256: strings.Repeat("0", 64)}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if settings, err = SettingsOf(pinned); err != nil || settings.Loaded != "" {
		t.Fatalf("a pinned binary's settings %+v, %v; want no checksum loaded beside the pin", settings, err)
	}
	if again, err := Refresh(pinned); err != nil || string(again.Settings) != string(pinned.Settings) {
		t.Fatalf("a pinned binary refreshed: %s, %v; want the spec as it was", again.Settings, err)
	}
}
