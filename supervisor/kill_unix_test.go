//go:build unix

package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A worker killed from outside (the kernel's out-of-memory killer, as a
// rule) while the supervisor writes it a batch is reported by its own end,
// a SIGKILL this server did not send, not by the pipe that broke with it:
// before, its death read "write |1: broken pipe", and nothing pointed at
// memory. Its batch is run again by the next worker.
func TestAWorkerKilledFromOutsideIsToldBySignalNotByItsPipe(t *testing.T) {
	cfg := processConfig("echo", 1, 8)
	cfg.MaxLatency = time.Millisecond
	cfg.BackoffMin = time.Millisecond
	s := start(t, cfg)
	pid := s.Slots()[0].PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Larger than a pipe holds: the write waits for the stopped worker.
	big := bytes.Repeat([]byte("x"), 4<<20)
	answered := make(chan error, 1)
	go func() {
		out, err := s.Predict(context.Background(), [][]byte{big})
		if err == nil && !bytes.Equal(out[0], big) {
			err = errors.New("the answer is not the item")
		}
		answered <- err
	}()
	waitFor(t, "the batch sent to the stopped worker", func() bool { return s.Slots()[0].InFlight == 1 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the item of the worker killed: %v; want it run again and answered", err)
	}
	why := s.Slots()[0].LastErr
	if !strings.Contains(why, "signal: killed") || !strings.Contains(why, "did not send") || strings.Contains(why, "pipe") {
		t.Errorf("the death of a worker killed from outside: %q; want its SIGKILL, not sent by the server, and no pipe", why)
	}
}
