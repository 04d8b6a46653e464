//go:build unix

package supervisor

import (
	"os"
	"syscall"
)

// exitSignal names the signal that ended a process, if one did.
func exitSignal(ps *os.ProcessState) (string, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return "", false
	}
	return ws.Signal().String(), true
}
