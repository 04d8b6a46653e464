//go:build unix

package plugin

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sweepSocketDirs removes the plugin socket directories in dir whose worker
// is gone: a worker killed outright (the worker timeout, kill -9, the OOM
// killer) cannot remove its own. It removes only directories (never a link)
// of this user, named after a process that no longer exists.
func sweepSocketDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := socketDirOwner(e.Name())
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
		_ = os.RemoveAll(path)
	}
}

// socketDirOwner reads the worker's pid out of a socket directory's name.
func socketDirOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, socketDirPrefix)
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
	return err == nil || err == syscall.EPERM
}
