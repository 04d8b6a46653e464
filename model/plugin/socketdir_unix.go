//go:build unix

package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// sweepSocketDirs removes the plugin socket directories in dir whose worker
// is gone: a worker killed outright (the worker timeout, kill -9, the OOM
// killer) cannot remove its own.
func sweepSocketDirs(dir string) { SweepDeadDirs(dir, socketDirPrefix, nil) }

// SweepDeadDirs removes the directories in dir named prefix, a pid, "-"
// and anything, whose process no longer exists: those a process made for
// itself and could not remove, killed outright. It removes only
// directories (never a link) of this user, and never this process's own.
// removed, when not nil, hears of each one it removed, or failed to.
// The server's socket directory and each worker's inside it are swept so.
func SweepDeadDirs(dir, prefix string, removed func(path string, pid int, err error)) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := dirOwner(e.Name(), prefix)
		if !ok || pid == os.Getpid() || processExists(pid) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := os.Lstat(path)
		if err != nil || !info.IsDir() {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if inUse(path) {
			continue // its owner lives, in another PID namespace
		}
		err = os.RemoveAll(path)
		if removed != nil {
			removed(path, pid, err)
		}
	}
}

// LockDir locks dir, a directory this process made for itself, until
// release is called or the process ends: SweepDeadDirs leaves a directory
// so locked alone, whatever the pid in its name says. A pid means nothing
// in another PID namespace (two containers that share a temporary
// directory), where the lock is seen all the same.
func LockDir(dir string) (release func(), err error) {
	// A descriptor of its own, not an *os.File: a file's finalizer would
	// close it, and drop the lock, once a caller let go of release.
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	var once sync.Once
	return func() { once.Do(func() { syscall.Close(fd) }) }, nil
}

// inUse reports whether a process holds the lock of the directory at path
// or of one in it (see LockDir): a server's directory made again by a
// worker after something removed it is not locked by the server, whose
// lock went with the old one, but the worker's own directory in it is.
func inUse(path string) bool {
	if locked(path) {
		return true
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() && locked(filepath.Join(path, e.Name())) {
			return true
		}
	}
	return false
}

// locked reports whether a process holds the lock of the directory at
// path. It opens only a directory, never through a link, and never waits
// (a FIFO put in its place would block an open for ever).
func locked(path string) bool {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd) // and with it the lock, if taken
	return errors.Is(syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

// dirOwner reads the pid out of a directory's name: prefix, the pid, "-".
func dirOwner(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	return pid, ok && err == nil && pid > 0
}

// processExists reports whether a process with this pid exists.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
