package main

// The integration-test harness: TestMain builds the real streamer binary once,
// and startServer runs `streamer serve` as a real process with real worker
// children, on a free loopback port, stopping it when the test ends.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/supervisor"
)

// envTestBin names a prebuilt streamer binary for the integration tests to
// use instead of building one.
const envTestBin = "STREAMER_TEST_BIN"

// Harness timeouts: generous bounds on waits that normally take milliseconds,
// so that a slow CI machine does not fail the tests and a hung server does.
const (
	readyTimeout   = 30 * time.Second
	stopTimeout    = 15 * time.Second
	requestTimeout = 30 * time.Second
	pollInterval   = 10 * time.Millisecond
	probeTimeout   = 2 * time.Second
)

// streamerBin is the binary under test, set once by TestMain before any test
// runs and only read afterwards.
var streamerBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if bin := os.Getenv(envTestBin); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%s: %v\n", envTestBin, bin, err)
			return 2
		}
		streamerBin = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "streamer-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "make temp dir for the test binary:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	streamerBin = filepath.Join(dir, "streamer")
	build := exec.Command("go", "build", "-o", streamerBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build streamer for the integration tests: %v\n%s", err, out)
		return 2
	}
	return m.Run()
}

// server is one running `streamer serve` process.
type server struct {
	addr   string
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	client *http.Client
	done   chan struct{} // closed once the process has exited and its output is read
	// token, when set, is sent as the bearer token of every request that
	// does not bring an Authorization header of its own.
	token string
}

// startServer runs `streamer serve --listen 127.0.0.1:PORT args...` and waits
// until GET /readyz answers 200. The server is stopped when the test ends
// (SIGTERM, then SIGKILL of its whole process group), and its output is
// printed if the test failed.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerOn(t, freePort, args...)
}

// startServerOn is startServer on a port port picks.
func startServerOn(t *testing.T, port func(*testing.T) string, args ...string) *server {
	t.Helper()
	s := launchServerOn(t, port, args...)
	s.waitReady(t)
	return s
}

// waitReady waits until GET /readyz answers 200, failing the test if the
// server exits first.
func (s *server) waitReady(t *testing.T) {
	t.Helper()
	s.waitFor(t, "the server to be ready", readyTimeout, func() bool {
		if s.exited() {
			t.Fatalf("the server exited with code %d before it was ready", s.cmd.ProcessState.ExitCode())
		}
		// A short limit per probe, so that an exit is seen soon even when
		// something else holds the port and never answers.
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		status, _, _, err := s.do(ctx, http.MethodGet, "/readyz", "", nil)
		return err == nil && status == http.StatusOK
	})
}

// launchServer starts the server process without waiting for it to be ready,
// for tests of servers that never become ready. Retries on another port when
// the chosen one was taken in the meantime.
func launchServer(t *testing.T, args ...string) *server {
	t.Helper()
	return launchServerOn(t, freePort, args...)
}

// launchServerOn is launchServer on a port port picks.
func launchServerOn(t *testing.T, port func(*testing.T) string, args ...string) *server {
	t.Helper()
	for attempt := 0; ; attempt++ {
		s := newServer(t, port(t), args)
		if !s.lostPortRace() || attempt == 2 {
			return s
		}
		t.Logf("port %s was taken before the server bound it; retrying", s.addr)
	}
}

func newServer(t *testing.T, addr string, args []string) *server {
	t.Helper()
	return newServerTo(t, addr, args, nil)
}

// newServerTo is newServer with the server's stderr going to stderr, when
// it is not nil, rather than to its output buffer: its log is then not
// read from it.
func newServerTo(t *testing.T, addr string, args []string, stderr io.Writer) *server {
	t.Helper()
	return newServerFrom(t, streamerBin, addr, args, stderr, nil)
}

// newServerFrom is newServerTo with the server run from the binary bin,
// with env added to the test's environment.
func newServerFrom(t *testing.T, bin, addr string, args []string, stderr io.Writer, env []string) *server {
	t.Helper()
	s := &server{
		addr:   addr,
		out:    &syncbuf.Buffer{},
		done:   make(chan struct{}),
		client: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	s.cmd = exec.Command(bin, append([]string{"serve", "--listen", addr}, args...)...)
	// A service manager that runs the tests is not the servers'.
	s.cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool {
		name, _, _ := strings.Cut(v, "=")
		return name == envNotifySocket || name == envWatchdogUsec || name == envWatchdogPID
	})
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	if stderr != nil {
		s.cmd.Stderr = stderr
	}
	// A process group of its own lets cleanup kill workers a crashed server
	// left behind; WaitDelay bounds the wait for output pipes such orphans hold.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.WaitDelay = 2 * time.Second
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("streamer serve %s output:\n%s", strings.Join(args, " "), s.logs())
		}
	})
	return s
}

// lostPortRace reports whether the server exited because its port was
// taken. It waits until the server says it is listening or exits: the server
// loads its model before it binds, which takes a while for an ONNX model or a
// plugin, longer still on a busy machine.
func (s *server) lostPortRace() bool {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return strings.Contains(s.logs(), "address already in use")
		case <-tick.C:
		}
		if strings.Contains(s.logs(), "listening") || time.Now().After(deadline) {
			return false
		}
	}
}

// stop sends SIGTERM, waits a bounded time, then kills the process group.
// Idle client connections are closed first: the server's drain would wait
// for connections it cannot tell are abandoned.
func (s *server) stop(t *testing.T) {
	s.client.CloseIdleConnections()
	if !s.exited() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			t.Errorf("server did not exit within %s of SIGTERM; killing it", stopTimeout)
		}
	}
	// Whatever is left of the group (workers of a killed server) goes too.
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		t.Errorf("server process %d survived SIGKILL", s.cmd.Process.Pid)
	}
}

func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// URL is the server's base URL, e.g. http://127.0.0.1:40123.
func (s *server) URL() string { return "http://" + s.addr }

// logs returns everything the server (and its workers, through it) printed.
func (s *server) logs() string { return s.out.String() }

// signal sends sig to the server process (not to its workers).
func (s *server) signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// wait waits up to timeout for the server to exit and returns its exit code.
func (s *server) wait(timeout time.Duration) (int, error) {
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("server still running after %s", timeout)
	}
}

// waitLog waits until the server's log has n lines or more that contain
// want, and fails the test if it then has more than n. A line logged as
// the state a test saw changed may come a moment after it, through the
// server's log writer and its stderr pipe: a test that read the log once
// failed on a loaded machine.
func (s *server) waitLog(t *testing.T, want string, n int) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("%d lines of the log to say %q", n, want), readyTimeout, func() bool { return strings.Count(s.logs(), want) >= n })
	if got := strings.Count(s.logs(), want); got > n {
		t.Errorf("%d lines of the log say %q; want %d", got, want, n)
	}
}

// waitLogged waits until the server's log says want, at least once.
func (s *server) waitLogged(t *testing.T, want string) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("the log to say %q", want), readyTimeout, func() bool { return strings.Contains(s.logs(), want) })
}

// waitFor polls cond until it holds, failing the test after timeout.
func (s *server) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	waitFor(t, what, timeout, cond)
}

// waitFor polls cond every pollInterval until it holds, failing the test
// after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// do sends one request and reads the whole answer; transport errors are
// returned, not fatal, so that it is safe from any goroutine.
func (s *server) do(ctx context.Context, method, path, contentType string, body []byte, header ...string) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if s.token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, data, resp.Header, fmt.Errorf("read answer to %s %s: %w", method, path, err)
	}
	return resp.StatusCode, data, resp.Header, nil
}

// get sends GET path; safe from any goroutine.
func (s *server) get(path string) (int, []byte, error) {
	status, body, _, err := s.do(context.Background(), http.MethodGet, path, "", nil)
	return status, body, err
}

// post sends a POST /predict, failing the test on a transport error. From
// other goroutines use tryPost.
func (s *server) post(t *testing.T, contentType string, body []byte, header ...string) (int, []byte, http.Header) {
	t.Helper()
	status, data, hdr, err := s.tryPost(contentType, body, header...)
	if err != nil {
		t.Fatalf("POST /predict: %v", err)
	}
	return status, data, hdr
}

// tryPost sends a POST /predict; safe from any goroutine.
func (s *server) tryPost(contentType string, body []byte, header ...string) (int, []byte, http.Header, error) {
	return s.do(context.Background(), http.MethodPost, "/predict", contentType, body, header...)
}

// prediction is a decoded /predict answer.
type prediction struct {
	Status  int
	Outputs []any  // on success
	Error   string // on failure
	Header  http.Header
	Body    []byte
}

// String describes the answer for test failures.
func (p prediction) String() string {
	return fmt.Sprintf("status %d, body %s", p.Status, bytes.TrimSpace(p.Body))
}

// predictJSON posts {"inputs": inputs} as JSON, failing the test on a
// transport error or an answer that is not the documented JSON.
// seenWorking has s answer 30 requests of one good item each, through its
// own port, so that an item that then crashes workers alone is told from a
// model that crashes whatever it runs: seen answering 30 batches or more,
// the model convicts a bad item in two runs alone (see the README's
// poison isolation).
func (s *server) seenWorking(t *testing.T) {
	t.Helper()
	for i := range 30 {
		if p := s.predictJSON(t, fmt.Sprint("warm", i)); p.Status != http.StatusOK {
			t.Fatalf("warming up, request %d: %s", i, p)
		}
	}
}

func (s *server) predictJSON(t *testing.T, inputs ...any) prediction {
	t.Helper()
	p, err := s.tryPredictJSON(map[string]any{"inputs": inputs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tryPredictJSON posts body as JSON and decodes the answer; safe from any
// goroutine.
func (s *server) tryPredictJSON(body any, header ...string) (prediction, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return prediction{}, err
	}
	status, data, hdr, err := s.tryPost("application/json", raw, header...)
	if err != nil {
		return prediction{}, fmt.Errorf("POST /predict %s: %w", raw, err)
	}
	return decodePrediction(status, data, hdr)
}

func decodePrediction(status int, data []byte, hdr http.Header) (prediction, error) {
	p := prediction{Status: status, Header: hdr, Body: data}
	var answer struct {
		Outputs []any  `json:"outputs"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return p, fmt.Errorf("answer with status %d is not JSON: %q", status, data)
	}
	p.Outputs, p.Error = answer.Outputs, answer.Error
	if status == http.StatusOK && answer.Outputs == nil || status != http.StatusOK && answer.Error == "" {
		return p, fmt.Errorf("answer does not match its status: %s", p)
	}
	return p, nil
}

// getJSON decodes the JSON answer to GET path into v, failing the test
// otherwise.
func (s *server) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	status, body, err := s.get(path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", path, status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// workers returns GET /v1/workers.
func (s *server) workers(t *testing.T) []supervisor.SlotStatus {
	t.Helper()
	var slots []supervisor.SlotStatus
	s.getJSON(t, "/v1/workers", &slots)
	return slots
}

// stats returns GET /v1/stats.
func (s *server) stats(t *testing.T) supervisor.Stats {
	t.Helper()
	var st supervisor.Stats
	s.getJSON(t, "/v1/stats", &st)
	return st
}

// readyWorkers returns the ready slots of GET /v1/workers.
func (s *server) readyWorkers(t *testing.T) []supervisor.SlotStatus {
	t.Helper()
	var ready []supervisor.SlotStatus
	for _, w := range s.workers(t) {
		if w.State == supervisor.SlotReady && w.PID > 0 {
			ready = append(ready, w)
		}
	}
	return ready
}

// waitAllReady waits until n slots are ready with a live pid and returns them.
func (s *server) waitAllReady(t *testing.T, n int) []supervisor.SlotStatus {
	t.Helper()
	var ready []supervisor.SlotStatus
	s.waitFor(t, strconv.Itoa(n)+" ready workers", readyTimeout, func() bool {
		ready = s.readyWorkers(t)
		return len(ready) == n
	})
	return ready
}

// replaceFile writes data beside path and renames it into place, as an
// operator replaces a served file: a reader never sees half of it.
func replaceFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// killWorker sends SIGKILL to a worker process of this server.
func killWorker(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no worker pid to kill (%d)", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill -9 worker %d: %v", pid, err)
	}
}

// TestHarnessRetriesATakenPort checks the harness itself: a server whose port
// was taken after it was chosen is started again on another. The ONNX model
// loads before the server binds, so the server lives a while before it finds
// the port taken.
func TestHarnessRetriesATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports := 0
	port := func(t *testing.T) string {
		ports++
		if ports == 1 {
			return taken.Addr().String()
		}
		return freePort(t)
	}
	s := startServerOn(t, port, "--model", "demo", "--workers", "1", "--intra-op-threads", "1")
	if s.addr == taken.Addr().String() || ports != 2 {
		t.Fatalf("the server runs on %s after %d ports were chosen; want a second port, not the taken %s", s.addr, ports, taken.Addr())
	}
}
