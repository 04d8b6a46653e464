package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/streamer-dev/streamer/supervisor"
)

// notifications plays the service manager's part: it listens on a
// datagram socket, as systemd does for a Type=notify unit, and hands
// each message it gets as its assignments.
type notifications struct {
	socket string
	got    chan map[string]string
}

func listenNotifications(t *testing.T) *notifications {
	t.Helper()
	n := &notifications{socket: filepath.Join(t.TempDir(), "notify"), got: make(chan map[string]string, 64)}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 1<<16)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			msg := map[string]string{}
			for _, line := range strings.Split(strings.TrimSuffix(string(buf[:k]), "\n"), "\n") {
				key, value, _ := strings.Cut(line, "=")
				msg[key] = value
			}
			n.got <- msg
		}
	}()
	return n
}

// next is the next message, which must come within readyTimeout.
func (n *notifications) next(t *testing.T, what string) map[string]string {
	t.Helper()
	select {
	case msg := <-n.got:
		return msg
	case <-time.After(readyTimeout):
		t.Fatalf("the service manager heard nothing within %s; waited for %s", readyTimeout, what)
		return nil
	}
}

func monotonicNow(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano() / 1000
}

// TestServiceManagerHearsWhatTheServerDoes: a server started by a service
// manager (systemd's Type=notify and Type=notify-reload set NOTIFY_SOCKET)
// tells it, in its protocol, that it starts and may take the init timeout
// to, that it is ready once it serves, how many workers it has once a
// scaling is done, that a SIGHUP's reload begins (on the manager's clock)
// and may take an init timeout per worker, and once it has replaced the
// workers, and that it stops. Its workers do not get the socket.
func TestServiceManagerHearsWhatTheServerDoes(t *testing.T) {
	n := listenNotifications(t)
	s := newServerFrom(t, streamerBin, freePort(t), []string{"--model", "echo", "--workers", "1", "--init-timeout", "40s", "--admin", "--auth-token", adminToken},
		nil, []string{envNotifySocket + "=" + n.socket})
	s.token = adminToken

	start := n.next(t, "the start")
	if !strings.HasPrefix(start["STATUS"], "starting") || start["EXTEND_TIMEOUT_USEC"] != strconv.Itoa(int((40*time.Second+startSlack).Microseconds())) {
		t.Errorf("the start said %v; want a STATUS of starting, and EXTEND_TIMEOUT_USEC of --init-timeout and %s", start, startSlack)
	}
	ready := n.next(t, "READY=1")
	if ready["READY"] != "1" || !strings.HasPrefix(ready["STATUS"], "serving") {
		t.Fatalf("after the start the server said %v; want READY=1 and a STATUS of serving", ready)
	}
	// Ready means ready, at once: no poll.
	if status, _, _, err := s.do(context.Background(), http.MethodGet, "/readyz", "", nil); err != nil || status != http.StatusOK {
		t.Errorf("/readyz as the server said READY=1: %d %v; want 200", status, err)
	}
	if status, answer := s.admin(t, "/admin/workers", `{"workers": 2}`); status != http.StatusOK {
		t.Fatalf("POST /admin/workers: %d %v", status, answer)
	}
	if scaled := n.next(t, "the status after the scaling"); !strings.HasSuffix(scaled["STATUS"], "on 2 workers") || len(scaled) != 1 {
		t.Errorf("after the scaling to 2 the server said %v; want a STATUS of 2 workers, alone", scaled)
	}
	before := s.waitAllReady(t, 2)
	for _, w := range before {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", w.PID))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(environ, []byte(envNotifySocket+"=")) {
			t.Errorf("worker %d has %s in its environment", w.PID, envNotifySocket)
		}
	}

	signalled := monotonicNow(t)
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloading := n.next(t, "RELOADING=1")
	heard := monotonicNow(t)
	at, err := strconv.ParseInt(reloading["MONOTONIC_USEC"], 10, 64)
	if reloading["RELOADING"] != "1" || err != nil || at < signalled || at > heard {
		t.Errorf("after SIGHUP the server said %v; want RELOADING=1 and a MONOTONIC_USEC between %d and %d", reloading, signalled, heard)
	}
	if want := strconv.Itoa(int((2*40*time.Second + startSlack).Microseconds())); reloading["EXTEND_TIMEOUT_USEC"] != want {
		t.Errorf("the reload of 2 workers may take %s µs, want %s: an init timeout each, and %s", reloading["EXTEND_TIMEOUT_USEC"], want, startSlack)
	}
	reloaded := n.next(t, "READY=1 after the reload")
	if reloaded["READY"] != "1" || !strings.HasPrefix(reloaded["STATUS"], "serving") || !strings.HasSuffix(reloaded["STATUS"], "on 2 workers") {
		t.Fatalf("after the reload the server said %v; want READY=1 and a STATUS of serving on 2 workers", reloaded)
	}
	// Ready again once every worker is replaced.
	for _, w := range s.workers(t) {
		if w.PID == before[0].PID || w.PID == before[1].PID || w.State != supervisor.SlotReady {
			t.Errorf("as the server said the reload was done, a worker was %+v; want new workers, ready (before: %+v)", w, before)
		}
	}

	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if stopping := n.next(t, "STOPPING=1"); stopping["STOPPING"] != "1" {
		t.Errorf("after SIGTERM the server said %v; want STOPPING=1", stopping)
	}
	if code, err := s.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("exit code %d (%v) after SIGTERM, want 0", code, err)
	}
	select {
	case msg := <-n.got:
		t.Errorf("the server said %v after STOPPING=1", msg)
	default:
	}
}

// TestServiceManagerWatchdogHearsTheServerAlive: with systemd's
// WatchdogSec= (WATCHDOG_USEC), the server says it is alive, again and
// again, from the end of its start on; its workers do not get the
// variables.
func TestServiceManagerWatchdogHearsTheServerAlive(t *testing.T) {
	n := listenNotifications(t)
	s := newServerFrom(t, streamerBin, freePort(t), []string{"--model", "echo", "--workers", "1"}, nil,
		[]string{envNotifySocket + "=" + n.socket, envWatchdogUsec + "=200000"})
	for msg := n.next(t, "READY=1"); msg["READY"] != "1"; msg = n.next(t, "READY=1") {
		if msg["WATCHDOG"] != "" {
			t.Fatalf("the server said %v before it was ready: the watchdog runs from then on", msg)
		}
	}
	for i := range 3 {
		if msg := n.next(t, "WATCHDOG=1"); msg["WATCHDOG"] != "1" {
			t.Fatalf("message %d after READY=1: %v; want WATCHDOG=1", i+1, msg)
		}
	}
	for _, w := range s.waitAllReady(t, 1) {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", w.PID))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{envNotifySocket, envWatchdogUsec} {
			if bytes.Contains(environ, []byte(name+"=")) {
				t.Errorf("worker %d has %s in its environment", w.PID, name)
			}
		}
	}
}

// TestServiceManagerGivesAReloadThatWaitedItsTime: a reload that begins
// later than its SIGHUP, behind a scaling or behind another reload, is
// given its time anew by the service manager (EXTEND_TIMEOUT_USEC, sent
// alone), as the time it was given at the SIGHUP may have run out
// meanwhile; READY=1 comes once, after the last reload.
func TestServiceManagerGivesAReloadThatWaitedItsTime(t *testing.T) {
	n := listenNotifications(t)
	s := newServerFrom(t, streamerBin, freePort(t), []string{"--model", "chaos:init-delay=1s", "--workers", "1", "--init-timeout", "40s", "--admin", "--auth-token", adminToken},
		nil, []string{envNotifySocket + "=" + n.socket})
	s.token = adminToken
	for msg := n.next(t, "READY=1"); msg["READY"] != "1"; msg = n.next(t, "READY=1") {
	}
	reloadOf2 := strconv.Itoa(int((2*40*time.Second + startSlack).Microseconds()))
	// untilReady takes the messages up to READY=1, and says whether the
	// time of a reload of 2 workers was given anew, alone, after the
	// RELOADING=1 of the last SIGHUP.
	untilReady := func(what string, reloads int) (extended bool) {
		t.Helper()
		for {
			msg := n.next(t, what)
			switch {
			case msg["RELOADING"] == "1":
				reloads--
			case msg["READY"] == "1":
				if reloads != 0 {
					t.Fatalf("READY=1 with %d RELOADING=1 still to come; %s", reloads, what)
				}
				return extended
			case len(msg) == 1 && msg["EXTEND_TIMEOUT_USEC"] != "":
				// Behind the scaling, the reload may first be told the
				// time of one worker's: the scaling's counts once ready.
				extended = extended || reloads == 0 && msg["EXTEND_TIMEOUT_USEC"] == reloadOf2
			}
		}
	}
	// Behind a scaling: the new worker takes a second to load.
	scaled := make(chan error, 1)
	go func() {
		status, body, _, err := s.do(context.Background(), http.MethodPost, "/admin/workers", "application/json", []byte(`{"workers": 2}`))
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("POST /admin/workers: %d %s", status, body)
		}
		scaled <- err
	}()
	s.waitLogged(t, `msg="worker started" slot=1`)
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !untilReady("the reload behind the scaling", 1) {
		t.Error("a reload that waited for a scaling was not given its time anew as it could begin")
	}
	if err := <-scaled; err != nil {
		t.Fatal(err)
	}
	s.waitLogged(t, "a reload or scaling of the workers is running")

	// Behind another reload: the second SIGHUP comes as the first's
	// reload replaces a worker.
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if msg := n.next(t, "RELOADING=1"); msg["RELOADING"] != "1" {
		t.Fatalf("after SIGHUP the server said %v; want RELOADING=1", msg)
	}
	s.waitLog(t, "reload begun", 2)
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !untilReady("the reload behind another", 1) {
		t.Error("a reload that waited for another reload was not given its time anew as it could begin")
	}
	s.waitAllReady(t, 2)
}
