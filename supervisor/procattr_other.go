//go:build !unix

package supervisor

import "syscall"

// workerProcAttr has nothing to add where there are no process groups.
// Worker processes are untested there; the in-process mode (Config.InProcess)
// is the way to run on such systems.
func workerProcAttr() *syscall.SysProcAttr { return nil }

// killProcessGroup does nothing: the worker itself is killed by the caller.
func killProcessGroup(int) {}
