package main

import "golang.org/x/sys/unix"

// monotonicMicros reads CLOCK_MONOTONIC in microseconds, the clock of the
// service manager's MONOTONIC_USEC.
func monotonicMicros() (int64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, false
	}
	return ts.Nano() / 1000, true
}
