package main

import (
	"os"
	"strconv"
	"syscall"
)

// keepInheritedToItself marks each file descriptor the server has open
// past stderr close-on-exec, as those it opens itself are: the ones it
// inherited (a wrapper's lock taken with `flock 9`, a parent's pipe) would
// otherwise pass on to every worker and every plugin, and stay open as
// long as the last of them, or a process a plugin left behind, lives. The
// server keeps them open. Called before any child starts.
func keepInheritedToItself() {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return // no /proc: left as they are
	}
	for _, fd := range fds {
		if n, err := strconv.Atoi(fd.Name()); err == nil && n > 2 {
			syscall.CloseOnExec(n)
		}
	}
}
