//go:build !linux

package bench

import "syscall"

// serverProcAttr is the Linux one's where the kernel offers it: here the
// server shares bench's process group and may outlive it.
func serverProcAttr() *syscall.SysProcAttr { return nil }
