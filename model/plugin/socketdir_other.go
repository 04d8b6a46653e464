//go:build !unix

package plugin

// sweepSocketDirs does nothing where a worker cannot tell a live process
// from a dead one this way: the directories of workers killed outright
// stay until the server removes its own.
func sweepSocketDirs(string) {}

// SweepDeadDirs does nothing here (see sweepSocketDirs).
func SweepDeadDirs(string, string, func(string, int, error)) {}

// LockDir does nothing here, where nothing is swept (see sweepSocketDirs).
func LockDir(string) (release func(), err error) { return func() {}, nil }
