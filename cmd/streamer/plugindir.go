package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// socketDirPrefix starts the name of a server's plugin socket directory;
// the server's pid follows, so that a later server can tell whether its
// owner is still alive.
const socketDirPrefix = "streamer-plugins-"

// makeSocketDir makes this server's private directory (mode 0700) for its
// plugins' sockets, after removing those of servers that died without
// removing theirs (kill -9). The caller removes it on exit.
func makeSocketDir(log *slog.Logger) (string, error) {
	sweepSocketDirs(os.TempDir(), log)
	dir, err := os.MkdirTemp("", socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err == nil {
		err = os.Chmod(dir, 0o700) // MkdirTemp's mode is 0700 less the umask
	}
	if err != nil {
		return "", fmt.Errorf("make the plugin socket directory: %w", err)
	}
	return dir, nil
}

// sweepSocketDirs removes the socket directories in tmp whose server is
// gone. It removes only directories (never a link) owned by this user,
// named with the prefix and the pid of a process that no longer exists.
func sweepSocketDirs(tmp string, log *slog.Logger) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := socketDirOwner(e.Name())
		if !ok || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		info, err := os.Lstat(path)
		if err != nil || !info.IsDir() {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			log.Warn("could not remove a dead server's plugin socket directory", "dir", path, "err", err)
			continue
		}
		log.Info("removed a dead server's plugin socket directory", "dir", path, "pid", pid)
	}
}

// socketDirOwner reads the pid out of a socket directory's name.
func socketDirOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, socketDirPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	return pid, ok && err == nil && pid > 0
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
