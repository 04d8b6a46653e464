package main

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A value with a newline (a failed reload's error) stays one assignment.
func TestServiceManagerKeepsAValueOnItsLine(t *testing.T) {
	n := listenNotifications(t)
	m := &serviceManager{socket: n.socket, log: slog.New(slog.DiscardHandler)}
	m.ready("serving (the last reload failed: slot 0: its last words:\nout of memory)")
	msg := n.next(t, "READY=1")
	want := "serving (the last reload failed: slot 0: its last words: out of memory)"
	if len(msg) != 2 || msg["READY"] != "1" || msg["STATUS"] != want {
		t.Errorf("sent %v, want READY=1 and STATUS=%s", msg, want)
	}
}

// A socket the server cannot use is logged once, naming it, however many
// messages it would have taken; the server goes on.
func TestServiceManagerOutOfReachIsLoggedOnce(t *testing.T) {
	for _, socket := range []string{"vsock:2:1234", filepath.Join(t.TempDir(), "nobody-listens")} {
		var log bytes.Buffer
		m := &serviceManager{socket: socket, log: slog.New(slog.NewTextHandler(&log, nil))}
		m.starting("starting", time.Minute)
		m.ready("serving")
		m.reloading("reloading", time.Minute)
		m.stopping("stopping")
		if got := strings.Count(log.String(), "level=WARN"); got != 1 || !strings.Contains(log.String(), socket) {
			t.Errorf("NOTIFY_SOCKET=%s logged %d warnings, want 1 naming it:\n%s", socket, got, log.String())
		}
	}
	var none *serviceManager // no manager: nothing to tell, nothing logged
	none.ready("serving")
}

// Once the server said it stops, it says nothing that would tell
// otherwise, however the calls interleave: no READY=1 of a reload that
// ends in the drain, no RELOADING=1, no STATUS=. The watchdog's word goes
// on until the end.
func TestServiceManagerHearsNothingButStopsAfterStopping(t *testing.T) {
	n := listenNotifications(t)
	m := &serviceManager{socket: n.socket, log: slog.New(slog.DiscardHandler)}
	m.stopping("stopping")
	m.ready("serving")
	m.reloading("reloading", time.Minute)
	m.status("serving")
	m.send("WATCHDOG=1")
	if msg := n.next(t, "STOPPING=1"); msg["STOPPING"] != "1" {
		t.Errorf("the manager heard %v first; want STOPPING=1", msg)
	}
	if msg := n.next(t, "WATCHDOG=1"); msg["WATCHDOG"] != "1" || len(msg) != 1 {
		t.Errorf("the manager heard %v after STOPPING=1; want WATCHDOG=1 alone", msg)
	}
}
