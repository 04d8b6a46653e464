//go:build unix && !linux

package supervisor

import "syscall"

// workerProcAttr puts a worker in a process group of its own, so that
// killing the group kills what it started too. Outside Linux there is no
// parent-death signal: a worker outlives a supervisor killed with SIGKILL
// until its pipe to it breaks.
func workerProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killProcessGroup kills the process group that pid leads.
func killProcessGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
