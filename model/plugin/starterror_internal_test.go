package plugin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
