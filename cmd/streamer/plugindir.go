package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/streamer-dev/streamer/model/plugin"
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
// gone (see plugin.SweepDeadDirs), and says so in the log.
func sweepSocketDirs(tmp string, log *slog.Logger) {
	plugin.SweepDeadDirs(tmp, socketDirPrefix, func(path string, pid int, err error) {
		if err != nil {
			log.Warn("could not remove a dead server's plugin socket directory", "dir", path, "err", err)
			return
		}
		log.Info("removed a dead server's plugin socket directory", "dir", path, "pid", pid)
	})
}
