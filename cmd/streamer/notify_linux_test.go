package main

import (
	"bytes"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A value with a newline (a failed reload's error) stays one assignment,
// and the message ends with a newline, as the protocol has it.
func TestServiceManagerKeepsAValueOnItsLine(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := &serviceManager{socket: socket, log: slog.New(slog.DiscardHandler)}
	m.ready("serving (the last reload failed: slot 0: its last words:\nout of memory)")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	k, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := "READY=1\nSTATUS=serving (the last reload failed: slot 0: its last words: out of memory)\n"
	if got := string(buf[:k]); got != want {
		t.Errorf("sent %q, want %q", got, want)
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
	socket := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := &serviceManager{socket: socket, log: slog.New(slog.DiscardHandler)}
	m.stopping("stopping")
	m.ready("serving")
	m.reloading("reloading", time.Minute)
	m.status("serving")
	m.send("WATCHDOG=1")
	var got []string
	buf := make([]byte, 4096)
	for range 2 {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, strings.SplitN(string(buf[:k]), "\n", 2)[0])
	}
	if got[0] != "STOPPING=1" || got[1] != "WATCHDOG=1" {
		t.Errorf("the manager heard %q; want STOPPING=1, then WATCHDOG=1 alone", got)
	}
}
