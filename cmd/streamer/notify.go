package main

import (
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// envNotifySocket names the datagram socket of the service manager that
// started the server and waits for word of it (systemd's Type=notify and
// Type=notify-reload).
const envNotifySocket = "NOTIFY_SOCKET"

// serviceManager tells the service manager that started the server what
// the server is doing, in its notify protocol: READY=1 once it serves,
// RELOADING=1 as a SIGHUP's reload begins and READY=1 once it ends,
// STOPPING=1 as it drains, and a STATUS= line that systemctl status
// shows. Under systemd, Type=notify makes `systemctl start` return, and
// units ordered after the server start, once the server serves rather
// than once it was forked; Type=notify-reload makes `systemctl reload`
// return once the workers are replaced. With no manager (NOTIFY_SOCKET
// unset) it does nothing.
type serviceManager struct {
	socket string // "" for none
	log    *slog.Logger
	warned atomic.Bool // a failed send was logged
}

// notifyService takes the service manager's socket from the environment,
// and out of it: a worker, or the plugin it starts, is not the service,
// and a message of theirs would be taken for the server's.
func notifyService(log *slog.Logger) *serviceManager {
	socket := os.Getenv(envNotifySocket)
	_ = os.Unsetenv(envNotifySocket)
	return &serviceManager{socket: socket, log: log}
}

// send sends one message of the given lines. Each goes on a socket of its
// own, as the manager may have made its socket anew since the last
// (systemd's daemon-reexec).
func (m *serviceManager) send(lines ...string) {
	if m == nil || m.socket == "" {
		return
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

// reloading says a reload begins, when, on the clock the manager compares
// with its own signal's.
func (m *serviceManager) reloading(status string) {
	lines := []string{"RELOADING=1", "STATUS=" + status}
	if usec, ok := monotonicMicros(); ok {
		lines = append(lines, "MONOTONIC_USEC="+strconv.FormatInt(usec, 10))
	}
	m.send(lines...)
}

// stopping says the server drains and stops.
func (m *serviceManager) stopping(status string) { m.send("STOPPING=1", "STATUS="+status) }
