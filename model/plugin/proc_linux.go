package plugin

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the plugin in a process group of its own, so that what it
// starts can be stopped with it, and has the kernel kill it when the worker
// that started it dies, even by kill -9, so that a plugin never outlives its
// worker and holds on to its GPU.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the plugin's process group: the plugin and whatever it
// started that is still in it.
func killGroup(pid int) {
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}
