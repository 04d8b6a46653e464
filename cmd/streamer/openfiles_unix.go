//go:build unix

package main

import "syscall"

// openFilesLimit is the most files this process may have open (its
// RLIMIT_NOFILE, which Go raised to the hard limit as it started), or
// false where it cannot be read.
func openFilesLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return lim.Cur, true
}
