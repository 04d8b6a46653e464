package builtin

import (
	"fmt"
	"syscall"
	"time"
)

// nanosleep blocks the calling thread in the kernel for d, as a GPU call
// would block it: a Go timer would park the goroutine instead, and wakes
// later than asked.
func nanosleep(d time.Duration) error {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		err := syscall.Nanosleep(&ts, &ts)
		if err == nil {
			return nil
		}
		if err != syscall.EINTR {
			return fmt.Errorf("sleep: %w", err)
		}
	}
}
