//go:build !linux

package main

// monotonicMicros has no service manager's clock to read here.
func monotonicMicros() (int64, bool) { return 0, false }
