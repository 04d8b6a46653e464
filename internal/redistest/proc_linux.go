//go:build linux

package redistest

import "syscall"

// sysProcAttr has the kernel kill the server when the thread that started it
// ends. A test binary that dies past its cleanups (a -timeout panic does)
// would otherwise leave servers running that no one will stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
