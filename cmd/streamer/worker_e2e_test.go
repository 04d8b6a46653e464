package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/supervisor"
)

// `streamer worker` run by hand, or by anything but a supervisor, says what
// it is and exits, instead of serving a default model or waiting on pipes
// it was never given.
func TestWorkerCommandOutsideASupervisor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, streamerBin, "worker")
	cmd.Env = append(cmd.Environ(), ipc.WorkerEnv+"=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("streamer worker: %v, want a failing exit status; output:\n%s", err, out)
	}
	for _, want := range []string{"not started by a streamer supervisor", ipc.WorkerEnv} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q does not say %q", out, want)
		}
	}
}

// TestWorkerServesOnThroughSIGHUP: a SIGHUP sent to a worker process (as
// a command that signals every process of the binary does) is logged and
// ignored: the worker keeps serving, and no crash is counted. (Before, it
// died of the signal, a crash that spent one of --max-restarts.)
func TestWorkerServesOnThroughSIGHUP(t *testing.T) {
	s := startServer(t, "--model", "echo", "--workers", "1")
	pid := s.waitAllReady(t, 1)[0].PID
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("kill -HUP worker %d: %v", pid, err)
	}
	s.waitFor(t, "the worker to log the SIGHUP, or to die of it", readyTimeout, func() bool {
		return strings.Contains(s.logs(), "SIGHUP ignored") || strings.Contains(s.logs(), "worker died")
	})
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Errorf("a request after the worker's SIGHUP: %s; want 200", p)
	}
	w := s.workers(t)
	if len(w) != 1 || w[0].PID != pid || w[0].State != supervisor.SlotReady || w[0].Crashes != 0 || w[0].Restarts != 0 {
		t.Errorf("workers after the SIGHUP: %+v; want worker %d ready as before, with no crash or restart", w, pid)
	}
	if st := s.stats(t); st.Crashes != 0 {
		t.Errorf("after a worker's SIGHUP: %d crashes; want none", st.Crashes)
	}
}

// TestSIGTERMToTheServerAndItsWorkersAnswersWhatRuns: a SIGTERM or SIGINT
// sent to the workers as well as to the server (pkill, killall, or a
// service manager that signals every process of the service) is logged
// and ignored by the workers, which the draining server stops itself once
// their batches are answered: the batch running is answered by its
// worker, not run again by a new one after a death counted as a crash.
func TestSIGTERMToTheServerAndItsWorkersAnswersWhatRuns(t *testing.T) {
	s := startServer(t, "--model", "sleep:1s,0", "--workers", "1")
	pid := s.waitAllReady(t, 1)[0].PID
	answer := make(chan prediction, 1)
	go func() {
		p, _ := predictWithin(s, readyTimeout, 0, "running")
		answer <- p
	}()
	s.waitFor(t, "the batch to reach the worker", readyTimeout, func() bool {
		w := s.workers(t)
		return len(w) == 1 && w[0].InFlight == 1
	})
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("kill -%d worker %d: %v", sig, pid, err)
		}
	}
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if p := <-answer; p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "running" {
		t.Errorf("the request running as the server and its worker got SIGTERM: %s; want 200 with its input", p)
	}
	if code, err := s.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("the server's exit on SIGTERM: code %d, %v; want 0", code, err)
	}
	logs := s.logs()
	for _, want := range []string{"SIGINT ignored", "SIGTERM ignored"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "worker died") {
		t.Errorf("the worker died of a signal meant for the server:\n%s", logs)
	}
}

// TestAnOrphanedWorkerEndsOnSIGTERM: a worker whose supervisor is gone
// (no parent-death signal took it along: outside Linux, or under a
// supervisor of another make) is stopped by nobody, so SIGTERM ends it
// as it ends any process, rather than be ignored as it is while its
// supervisor lives.
func TestAnOrphanedWorkerEndsOnSIGTERM(t *testing.T) {
	toWorker, workerIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromWorker, workerOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer toWorker.Close()
	defer workerIn.Close()
	defer fromWorker.Close()
	defer workerOut.Close()
	// A shell in the supervisor's place starts the worker, says its pid,
	// and exits when told.
	shell := exec.Command("/bin/sh", "-c", `"$0" worker & echo $!; read gone || exit 0`, streamerBin)
	shell.Env = append(os.Environ(), ipc.WorkerEnv+"="+ipc.WorkerCookie)
	shell.ExtraFiles = []*os.File{toWorker, workerOut}
	release, err := shell.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := shell.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscan(out, &pid); err != nil {
		t.Fatalf("read the worker's pid: %v", err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	// Its Hello: it serves, its signals caught, under the shell.
	if msg, err := ipc.NewReader(fromWorker, 0).Read(); err != nil || msg.Kind != ipc.KindHello {
		t.Fatalf("the worker's first frame: %v, %v; want its Hello", msg.Kind, err)
	}
	release.Close()
	if err := shell.Wait(); err != nil {
		t.Fatalf("the shell: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("worker %d, its supervisor gone, to end on SIGTERM", pid), 10*time.Second, func() bool { return processGone(pid) })
}

// readmeHangup is the pattern the README's `pkill -HUP -f` gives to
// signal the server only.
var readmeHangup = regexp.MustCompile(`^[^ ]*streamer serve`)

// TestReadmeHangupPatternMatchesTheServerOnly: the README's command to
// reload matches the server's command line, as pkill -f reads it (the
// arguments joined by spaces), and not its workers'.
func TestReadmeHangupPatternMatchesTheServerOnly(t *testing.T) {
	// The pattern names the binary: run one named as it is installed.
	s := newServerFrom(t, binaryCopy(t), freePort(t), []string{"--model", "echo", "--workers", "1"}, nil, nil)
	s.waitReady(t)
	worker := s.waitAllReady(t, 1)[0].PID
	if line := commandLine(t, s.cmd.Process.Pid); !readmeHangup.MatchString(line) {
		t.Errorf("the README's pattern %q does not match the server's command line %q", readmeHangup, line)
	}
	if line := commandLine(t, worker); readmeHangup.MatchString(line) {
		t.Errorf("the README's pattern %q matches the worker's command line %q", readmeHangup, line)
	}
}

// commandLine is the command line of process pid as pkill -f matches it.
func commandLine(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Skipf("no command line of process %d to read: %v", pid, err)
	}
	return strings.ReplaceAll(strings.TrimSuffix(string(data), "\x00"), "\x00", " ")
}

// TestWorkersRunTheServersBuildAfterItsBinaryIsReplaced: a deploy that
// puts another binary where the server's was (here, one that is no worker
// at all) changes nothing until the server restarts. A worker killed, then
// a reload's workers, run the server's own image, under its name (for ps,
// top and pgrep, and for each thread), and serve. Before, they ran the new file: another build
// under this server, or, as here, slots given up one crash at a time.
func TestWorkersRunTheServersBuildAfterItsBinaryIsReplaced(t *testing.T) {
	bin := binaryCopy(t)
	s := newServerFrom(t, bin, freePort(t), []string{"--model", "echo", "--workers", "2"}, nil, nil)
	s.waitReady(t)
	before := s.waitAllReady(t, 2)
	replaceFile(t, bin, []byte("#!/bin/sh\necho 'another build' >&2\nexit 3\n"), 0o755)

	failed := func() bool {
		return strings.Contains(s.logs(), "failed to start") || strings.Contains(s.logs(), "reload failed")
	}
	killWorker(t, before[0].PID)
	s.waitFor(t, "the killed worker to be replaced", readyTimeout, func() bool {
		if failed() {
			t.Fatalf("a worker started after the binary was replaced failed:\n%s", s.logs())
		}
		w := s.readyWorkers(t)
		return len(w) == 2 && !slices.ContainsFunc(w, func(st supervisor.SlotStatus) bool { return st.PID == before[0].PID })
	})
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLogged(t, "reload done")
	if failed() {
		t.Fatalf("a reload after the binary was replaced failed:\n%s", s.logs())
	}
	after := s.waitAllReady(t, 2)
	server, err := os.Stat(fmt.Sprintf("/proc/%d/exe", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range after {
		if w.PID == before[0].PID || w.PID == before[1].PID {
			t.Errorf("worker %d outlived the reload", w.PID)
		}
		image, err := os.Stat(fmt.Sprintf("/proc/%d/exe", w.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(server, image) {
			t.Errorf("worker %d runs another image than its server's", w.PID)
		}
		threads, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/comm", w.PID))
		if err != nil || len(threads) == 0 {
			t.Fatalf("worker %d's threads: %v", w.PID, err)
		}
		for _, thread := range append(threads, fmt.Sprintf("/proc/%d/comm", w.PID)) {
			comm, err := os.ReadFile(thread)
			if err != nil {
				continue // a thread that ended
			}
			if got := strings.TrimSpace(string(comm)); got != "streamer" {
				t.Errorf("%s is %q, want streamer, its server's", thread, got)
			}
		}
		if line := commandLine(t, w.PID); line != bin+" worker" {
			t.Errorf("worker %d's command line is %q, want %q", w.PID, line, bin+" worker")
		}
	}
	if got := s.predictJSON(t, "same build"); got.Status != http.StatusOK {
		t.Errorf("a request after the binary was replaced: %s", got)
	}
}

// binaryCopy copies the binary under test to a directory of the test's
// own, under the name it is installed as, and returns its path.
func binaryCopy(t *testing.T) string {
	t.Helper()
	build, err := os.ReadFile(streamerBin)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "streamer")
	if err := os.WriteFile(bin, build, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
