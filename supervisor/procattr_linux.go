package supervisor

import "syscall"

// workerProcAttr puts a worker in a process group of its own, so that
// killing the group kills what it started too, and has the kernel kill it
// when the supervisor dies, however it dies.
func workerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killProcessGroup kills the process group that pid leads.
func killProcessGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
