// Package lastwords reads what a dying process wrote last: which line of
// its output says why it died, and whether that was a want of the
// machine's resources rather than a fault of its own.
package lastwords

import (
	"bytes"
	"strings"
)

// Cause reports whether line says why a Go process dies: a panic's
// message, a fatal runtime error, the runtime's failure to start a thread,
// a C++ exception nobody caught, or the signal that ends it ("SIGABRT:
// abort", as a library's abort() gives). The stack and the registers that
// follow end with a line that says nothing of the cause.
func Cause(line []byte) bool {
	for _, prefix := range [...]string{"panic: ", "fatal error: ", "runtime/cgo: ", "runtime: failed to create new OS thread", "terminate called "} {
		if bytes.HasPrefix(line, []byte(prefix)) {
			return true
		}
	}
	name, _, ok := bytes.Cut(line, []byte(": "))
	if !ok {
		return false
	}
	switch string(name) { // no allocation: only compared; the signals the Go runtime crashes on, as it names them
	case "SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGSYS", "SIGQUIT":
		return true
	}
	return false
}

// WantsThreads reports whether line, a Go process's cause of death, is its
// runtime failing to start a thread: a limit of processes (a container's
// pids limit, ulimit -u) that leaves it no room to run.
func WantsThreads(line string) bool {
	return strings.HasPrefix(line, "runtime/cgo: pthread_create failed") || strings.HasPrefix(line, "runtime: failed to create new OS thread")
}
