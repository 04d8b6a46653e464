//go:build !linux

package builtin

import "time"

// nanosleep waits for d. Outside Linux it parks the goroutine on a Go
// timer, which may wake somewhat later than asked.
func nanosleep(d time.Duration) error {
	time.Sleep(d)
	return nil
}
