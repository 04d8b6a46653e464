package main

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

// serverSocketDir finds the plugin socket directory of the server with pid.
func serverSocketDir(t *testing.T, pid int) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), socketDirPrefix+strconv.Itoa(pid)+"-*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("socket directories of server %d: %v (%v), want one", pid, dirs, err)
	}
	return dirs[0]
}

// socketsIn lists the unix sockets below dir.
func socketsIn(t *testing.T, dir string) []string {
	t.Helper()
	var sockets []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			sockets = append(sockets, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sockets
}

// TestPluginSocketsArePrivate: under umask 000, each plugin's socket lies in
// directories only their owner can enter; a process that reaches the socket
// without the worker's certificate cannot call the plugin; the directory is
// removed when the server stops.
func TestPluginSocketsArePrivate(t *testing.T) {
	bin := pluginBins(t)["fillmask"]
	old := syscall.Umask(0)
	s := startPluginServer(t, "--plugin", bin, "--workers", "2")
	syscall.Umask(old)
	if p := s.predictJSON(t, "the [MASK] sat"); p.Status != http.StatusOK {
		t.Fatalf("fillmask: %s", p)
	}
	dir := serverSocketDir(t, s.cmd.Process.Pid)
	var sockets []string
	s.waitFor(t, "a socket per worker's plugin", readyTimeout, func() bool {
		sockets = socketsIn(t, dir)
		return len(sockets) == 2
	})
	for _, sock := range sockets {
		for d := filepath.Dir(sock); ; d = filepath.Dir(d) {
			info, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if perm := info.Mode().Perm(); perm != 0o700 {
				t.Errorf("%s, on the way to a plugin socket, has mode %o; want 0700", d, perm)
			}
			if d == dir {
				break
			}
		}
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = pluginpb.NewModelClient(conn).Init(ctx, &pluginpb.InitRequest{})
		cancel()
		conn.Close()
		if err == nil {
			t.Errorf("a client without the worker's certificate called Init on %s", sock)
		}
	}
	s.stop(t)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("socket directory %s after the server stopped: %v; want it removed", dir, err)
	}
}

// TestLeftoverSocketDirIsSwept: the socket directory of a server killed
// with kill -9 is removed by the next server that starts.
func TestLeftoverSocketDirIsSwept(t *testing.T) {
	bin := pluginBins(t)["fillmask"]
	first := startPluginServer(t, "--plugin", bin)
	dir := serverSocketDir(t, first.cmd.Process.Pid)
	if err := syscall.Kill(-first.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := first.wait(stopTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("after kill -9 the directory %s should be left behind: %v", dir, err)
	}
	second := startPluginServer(t, "--plugin", bin)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the dead server's directory %s survived a new start: %v", dir, err)
	}
	if !strings.Contains(second.logs(), "removed a dead server's plugin socket directory") {
		t.Errorf("the sweep was not logged:\n%s", second.logs())
	}
}

// TestAFrontEndOfAPluginMakesNoSocketDir: a front end (--workers 0) of a
// plugin model starts no plugin, so it makes no socket directory, and its
// model's settings name none.
func TestAFrontEndOfAPluginMakesNoSocketDir(t *testing.T) {
	bin := pluginBins(t)["fillmask"]
	front := launchBroker(t, "redis://127.0.0.1:1/0", "--workers", "0", "--plugin", bin)
	brokerLogField(t, front, "serving", "level")
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), socketDirPrefix+strconv.Itoa(front.cmd.Process.Pid)+"-*"))
	if err != nil || len(dirs) != 0 {
		t.Errorf("a front end made plugin socket directories %v (%v); want none", dirs, err)
	}
	status, body, err := front.get("/v1/models")
	if err != nil || status != http.StatusOK {
		t.Fatalf("/v1/models: %d %v", status, err)
	}
	if !strings.Contains(string(body), bin) || strings.Contains(string(body), "socket_dir") {
		t.Errorf("a front end's /v1/models: %s; want the plugin's path and no socket_dir", body)
	}
}

// TestPluginSocketDirsOfKilledWorkersAreSwept: the socket directory of a
// worker killed with kill -9, which it could not remove, is removed when its
// replacement starts, so that they do not pile up while the server runs.
func TestPluginSocketDirsOfKilledWorkersAreSwept(t *testing.T) {
	bin := pluginBins(t)["chaos"]
	s := startPluginServer(t, "--plugin", bin, "--workers", "1")
	dir := serverSocketDir(t, s.cmd.Process.Pid)
	for range 3 {
		worker := s.waitAllReady(t, 1)[0].PID
		killWorker(t, worker)
		s.waitFor(t, "a new worker", readyTimeout, func() bool {
			ready := s.readyWorkers(t)
			return len(ready) == 1 && ready[0].PID != worker
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 {
		t.Errorf("socket directories after three workers were killed: %v; want the live worker's alone", names)
	}
}

// TestALongTMPDIRPutsPluginSocketsInTmp: a plugin's socket path below a
// TMPDIR this long would pass the longest a Unix socket takes, and the
// plugin fail to bind it with an error that read as its own; the server
// puts its plugins' sockets in /tmp instead, says so, and serves.
func TestALongTMPDIRPutsPluginSocketsInTmp(t *testing.T) {
	bin := pluginBins(t)["fillmask"]
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 60))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	s := startPluginServer(t, "--plugin", bin)
	if p := s.predictJSON(t, "the [MASK] sat"); p.Status != http.StatusOK {
		t.Fatalf("fillmask with a long TMPDIR: %s", p)
	}
	if !strings.Contains(s.logs(), "the plugins' sockets go in /tmp") {
		t.Errorf("the server does not say where the sockets went:\n%s", s.logs())
	}
	if dirs, _ := filepath.Glob(filepath.Join("/tmp", socketDirPrefix+strconv.Itoa(s.cmd.Process.Pid)+"-*")); len(dirs) != 1 {
		t.Errorf("socket directories of the server in /tmp: %v; want one", dirs)
	}
}

// TestATMPDIRThatIsNotThereIsNamed: a TMPDIR that does not exist fails
// the start of a plugin's server, naming it as the temporary directory,
// which the error of the directory's making alone did not.
func TestATMPDIRThatIsNotThereIsNamed(t *testing.T) {
	const gone = "/no-such-tmpdir" // short enough for the sockets below it
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Fatalf("%s is there (%v): the test wants a TMPDIR that is not", gone, err)
	}
	t.Setenv("TMPDIR", gone)
	s := launchPluginServer(t, "--plugin", "/bin/true")
	code, err := s.wait(readyTimeout)
	if want := "make the plugin socket directory in " + gone + " (the temporary directory, $TMPDIR)"; err != nil || code != 1 || !strings.Contains(s.logs(), want) {
		t.Errorf("exit code %d, %v; want 1, saying %q:\n%s", code, err, want, s.logs())
	}
}

// TestAPluginStartsAfterItsSocketDirWasRemoved: the server's socket
// directory removed under it (a cleaner of old files in /tmp) is made
// again by the next worker that starts a plugin, rather than fail every
// start until the slot is given up.
func TestAPluginStartsAfterItsSocketDirWasRemoved(t *testing.T) {
	bin := pluginBins(t)["fillmask"]
	s := startPluginServer(t, "--plugin", bin)
	before := s.waitAllReady(t, 1)
	if err := os.RemoveAll(serverSocketDir(t, s.cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	killWorker(t, before[0].PID)
	s.waitFor(t, "a new worker with its plugin", readyTimeout, func() bool {
		after := s.readyWorkers(t)
		return len(after) == 1 && after[0].PID != before[0].PID
	})
	if p := s.predictJSON(t, "the [MASK] sat"); p.Status != http.StatusOK {
		t.Errorf("after the socket directory was made again: %s", p)
	}
}

// TestASecondSignalRemovesThePluginSocketFolder: a second SIGTERM during
// the drain ends the server at once, killed by that signal as before, and
// its workers and their plugins with it; the plugins' socket folder, which
// the drain would have removed at its end, is removed first.
func TestASecondSignalRemovesThePluginSocketFolder(t *testing.T) {
	s := startPluginServer(t, "--plugin", pluginBins(t)["chaos"], "--workers", "1", "--worker-timeout", "60s")
	worker := s.waitAllReady(t, 1)[0].PID
	plugin := pluginOf(t, worker)
	dir := serverSocketDir(t, s.cmd.Process.Pid)
	go func() { _, _ = s.tryPredictJSON(map[string]any{"inputs": []any{"hang"}}) }() // keeps the drain going
	s.waitFor(t, "the hanging item to run", readyTimeout, func() bool { return s.workers(t)[0].InFlight > 0 })

	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitLogged(t, "signal received: draining")
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wait(stopTimeout); err != nil {
		t.Fatal(err)
	}
	if status, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !status.Signaled() || status.Signal() != syscall.SIGTERM {
		t.Errorf("the server ended %v after a second SIGTERM; want killed by SIGTERM", s.cmd.ProcessState)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("socket directory %s after a second SIGTERM: %v; want it removed", dir, err)
	}
	waitFor(t, "the worker and its plugin to die with the server", readyTimeout, func() bool {
		return processGone(worker) && processGone(plugin)
	})
}

// TestTwoSignalsBackToBackAreTwo: a second signal sent right after the
// first, before the drain has begun, ends the server at once as well,
// rather than being lost. (SIGINT, then SIGTERM: the kernel keeps one of
// a signal pending, so that two SIGTERMs sent back to back may reach the
// process as one.)
func TestTwoSignalsBackToBackAreTwo(t *testing.T) {
	for round := range 3 {
		s := startServer(t, "--model", "sleep:30s,0", "--workers", "1")
		go func() { _, _ = s.tryPredictJSON(map[string]any{"inputs": []any{"x"}}) }() // keeps the drain going
		s.waitFor(t, "the item to run", readyTimeout, func() bool { return s.workers(t)[0].InFlight > 0 })
		if err := s.signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if err := s.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if _, err := s.wait(stopTimeout); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// Killed by the one taken second: Go's runtime may hand on two
		// pending signals in either order.
		if status, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !status.Signaled() || status.Signal() != syscall.SIGTERM && status.Signal() != syscall.SIGINT {
			t.Fatalf("round %d: the server ended %v after SIGINT and SIGTERM back to back; want killed by one of them, not a drain to its end", round, s.cmd.ProcessState)
		}
	}
}
