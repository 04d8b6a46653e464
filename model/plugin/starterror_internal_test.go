package plugin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// A plugin that could not be forked, or given its sockets, for want of
// the machine's resources is said so, the errno kept for the worker to
// mark, not taken for a binary that is no streamer plugin.
func TestAStartThatWantedResourcesIsNoHandshakeFailure(t *testing.T) {
	m := &Model{cmd: exec.Command("./p")}
	fork := fmt.Errorf("fork/exec ./p: %w", &os.SyscallError{Syscall: "fork", Err: syscall.EAGAIN})
	err := m.startError(fork, "", false)
	if !errors.Is(err, syscall.EAGAIN) || errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "could not be started") {
		t.Errorf("startError(%v) = %v; want EAGAIN kept, no handshake failure", fork, err)
	}
}

// A Go plugin whose runtime could not start a thread (a limit of
// processes) is a want of the machine's, the errno kept for the worker to
// mark; and a plugin that died says the line that says why, not the last
// line of the registers or stack that follow it.
func TestAPluginsLastWordsAreItsCause(t *testing.T) {
	m := &Model{cmd: exec.Command("./p")}
	feed(m, "runtime/cgo: pthread_create failed: Resource temporarily unavailable", "SIGABRT: abort", "PC=0x4a1b2c m=0 sigcode=18446744073709551610", "gs     0x0")
	err := m.startError(errors.New("plugin exited before we could connect"), "exit status 2", true)
	if !errors.Is(err, syscall.EAGAIN) || errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "could not start a thread") {
		t.Errorf("startError of a plugin without threads: %v; want EAGAIN kept, no handshake failure", err)
	}
	var panicked Model
	feed(&panicked, "panic: the weights are corrupt", "", "goroutine 1 [running]:", "main.main()", "\t/src/main.go:12 +0x1d")
	if note := panicked.exitNote("exit status 2", true); !strings.Contains(note, `its last words: "panic: the weights are corrupt"`) {
		t.Errorf("exitNote of a plugin that panicked: %q; want its panic's line", note)
	}
}

// feed writes lines to m's output as its plugin's stderr would.
func feed(m *Model, lines ...string) {
	var mu sync.Mutex
	w := &lineWriter{mu: &mu, out: io.Discard, prefix: "[plugin p] ", dying: &m.lastWords, tail: &m.tail}
	for _, line := range lines {
		_, _ = w.Write([]byte(line + "\n"))
	}
}
