//go:build unix

package sdk

import (
	"os"

	"golang.org/x/sys/unix"
)

// redirectOutput sends everything the plugin prints to stderr, which the
// worker copies into the server log line by line. It runs when Init is
// called, after the handshake line went out on stdout: go-plugin's streamed
// copy of os.Stdout and os.Stderr loses what is still in flight when a
// plugin crashes, the process's own stderr does not. Pointing
// file descriptor 1 at descriptor 2 also catches what native libraries print.
func redirectOutput(stderr *os.File) {
	_ = unix.Dup2(int(stderr.Fd()), 1)
	os.Stdout = stderr
	os.Stderr = stderr
}
