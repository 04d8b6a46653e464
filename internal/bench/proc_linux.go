package bench

import "syscall"

// serverProcAttr puts the server bench starts in a process group of its
// own, so that a terminal's Ctrl-C, which signals bench's group, stops
// the load and not the server whose figures bench reads next (bench stops
// it after); and has the kernel stop it when bench dies, however it dies.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
