//go:build !linux

package redistest

import "syscall"

// sysProcAttr is nil off Linux, which has no parent-death signal: a test
// binary that dies past its cleanups leaves its servers running there.
func sysProcAttr() *syscall.SysProcAttr { return nil }
