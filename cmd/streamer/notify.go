package main

import (
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serviceManager tells the service manager that started the server what
// the server is doing, in its notify protocol: READY=1 once it serves,
// RELOADING=1 as a SIGHUP's reload begins and READY=1 once it ends,
// STOPPING=1 as it drains, and a STATUS= line that systemctl status
// shows. Under systemd, Type=notify makes `systemctl start` return, and
// units ordered after the server start, once the server serves rather
// than once it was forked; Type=notify-reload makes `systemctl reload`
// return once the workers are replaced. With WatchdogSec=, it hears that
// the server is alive (see keepAlive). With no manager (NOTIFY_SOCKET
// unset) it does nothing.
type serviceManager struct {
	socket string // "" for none
	log    *slog.Logger
	warned atomic.Bool // a failed send was logged
	// watchdog is how often the manager wants to hear that the server
	// is alive (systemd's WatchdogSec=); 0 for never.
	watchdog time.Duration

	// mu makes the messages go one at a time, each after the state it
	// reads: a reload that ends as the drain begins must not say READY=1
	// after STOPPING=1.
	mu      sync.Mutex
	stopped bool // STOPPING=1 was sent: no READY=1, RELOADING=1 or STATUS= after it
}

// The service manager's variables: its socket, and its watchdog's
// interval, in microseconds, and the process it watches.
const (
	envNotifySocket = "NOTIFY_SOCKET"
	envWatchdogUsec = "WATCHDOG_USEC"
	envWatchdogPID  = "WATCHDOG_PID"
)

// notifyService takes the service manager's variables from the
// environment, and out of it: a worker, or the plugin it starts, is not
// the service, and a message of theirs would be taken for the server's.
func notifyService(log *slog.Logger) *serviceManager {
	m := &serviceManager{socket: os.Getenv(envNotifySocket), log: log}
	usec, err := strconv.ParseInt(os.Getenv(envWatchdogUsec), 10, 64)
	pid := os.Getenv(envWatchdogPID)
	if err == nil && usec > 0 && (pid == "" || pid == strconv.Itoa(os.Getpid())) {
		m.watchdog = time.Duration(usec) * time.Microsecond
	}
	for _, name := range []string{envNotifySocket, envWatchdogUsec, envWatchdogPID} {
		_ = os.Unsetenv(name)
	}
	return m
}

// send sends one message of the given lines, unless the server said it
// stops and the message would say otherwise (stopping, and the
// watchdog's, go all the same). Each goes on a socket of its own, as the
// manager may have made its socket anew since the last (systemd's
// daemon-reexec).
func (m *serviceManager) send(lines ...string) {
	if m == nil || m.socket == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch lines[0] {
	case "STOPPING=1":
		m.stopped = true
	case "WATCHDOG=1":
	default:
		if m.stopped {
			return
		}
	}
	if m.socket[0] != '/' && m.socket[0] != '@' { // a path, or an abstract name
		if !m.warned.Swap(true) {
			m.log.Warn(envNotifySocket+" names no Unix socket (a path, or @ and an abstract name): the service manager will not hear what the server does", "socket", m.socket)
		}
		return
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: m.socket, Net: "unixgram"})
	if err == nil {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		var msg strings.Builder
		for _, line := range lines {
			// A line is an assignment: a newline in a value (an
			// error's) would start another.
			msg.WriteString(strings.ReplaceAll(line, "\n", " "))
			msg.WriteByte('\n')
		}
		_, err = conn.Write([]byte(msg.String()))
		_ = conn.Close()
	}
	if err != nil && !m.warned.Swap(true) {
		m.log.Warn("could not tell the service manager what the server is doing (logged once)", "socket", m.socket, "message", lines[0], "err", err)
	}
}

// starting says what the start does, and lets it take up to the time
// given from now, if that is more than the manager allows (its start
// timeout): a model's load may take longer than systemd's default 90 s.
// With upTo 0 it leaves the manager's timeout as it is.
func (m *serviceManager) starting(status string, upTo time.Duration) {
	if upTo <= 0 {
		m.send("STATUS=" + status)
		return
	}
	m.send("STATUS="+status, "EXTEND_TIMEOUT_USEC="+strconv.FormatInt(upTo.Microseconds(), 10))
}

// ready says the server serves (after its start, or a reload).
func (m *serviceManager) ready(status string) { m.send("READY=1", "STATUS="+status) }

// status says what the server does now.
func (m *serviceManager) status(status string) { m.send("STATUS=" + status) }

// reloading says a reload begins, when, on the clock the manager compares
// with its own signal's, and that it may take up to the time given from
// now (systemd bounds a reload by the unit's start timeout); 0 leaves the
// manager's bound as it is.
func (m *serviceManager) reloading(status string, upTo time.Duration) {
	lines := []string{"RELOADING=1", "STATUS=" + status}
	if usec, ok := monotonicMicros(); ok {
		lines = append(lines, "MONOTONIC_USEC="+strconv.FormatInt(usec, 10))
	}
	if upTo > 0 {
		lines = append(lines, "EXTEND_TIMEOUT_USEC="+strconv.FormatInt(upTo.Microseconds(), 10))
	}
	m.send(lines...)
}

// extend lets what the server does now (a reload that waited for
// another change) take up to the time given from now.
func (m *serviceManager) extend(upTo time.Duration) {
	m.send("EXTEND_TIMEOUT_USEC=" + strconv.FormatInt(upTo.Microseconds(), 10))
}

// stopping says the server drains and stops.
func (m *serviceManager) stopping(status string) { m.send("STOPPING=1", "STATUS="+status) }

// keepAlive tells the manager that the server is alive, at half the
// interval its watchdog allows, until done is closed; each time only once
// look has returned. look takes the lock every request takes (the
// supervisor's, in its Stats), so that a server whose supervisor is
// wedged, or that no longer runs at all, is not kept alive: the manager
// kills it (by default with SIGABRT, on which Go writes every goroutine's
// stack to the log) and, as configured, starts it again. Without a
// watchdog it returns at once.
func (m *serviceManager) keepAlive(done <-chan struct{}, look func()) {
	if m == nil || m.watchdog <= 0 {
		return
	}
	t := time.NewTicker(m.watchdog / 2)
	defer t.Stop()
	for {
		look()
		m.send("WATCHDOG=1")
		select {
		case <-t.C:
		case <-done:
			return
		}
	}
}
