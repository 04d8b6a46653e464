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
// removing theirs (kill -9), and locks it (see plugin.LockDir). The caller
// removes it on exit, then calls unlock.
func makeSocketDir(log *slog.Logger) (dir string, unlock func(), err error) {
	base, err := socketBase(os.TempDir(), "/tmp", log)
	if err != nil {
		return "", nil, err
	}
	sweepSocketDirs(base, log)
	dir, err = os.MkdirTemp(base, socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err == nil {
		err = os.Chmod(dir, 0o700) // MkdirTemp's mode is 0700 less the umask
	}
	if err == nil {
		unlock, err = plugin.LockDir(dir)
	}
	if err != nil {
		if dir != "" {
			_ = os.Remove(dir)
		}
		return "", nil, fmt.Errorf("make the plugin socket directory in %s (the temporary directory, $TMPDIR): %w", base, err)
	}
	return dir, unlock, nil
}

// socketBase is where the server's socket directory goes: tmp, the
// temporary directory, unless its path is too long for the plugins'
// sockets below it (a Unix socket's path takes 107 bytes at most, 103 on
// macOS, whose own TMPDIR is about 50), then short, when it is a
// directory.
func socketBase(tmp, short string, log *slog.Logger) (string, error) {
	most := plugin.MaxSocketDir() - plugin.DirRoom(socketDirPrefix)
	if len(tmp) <= most {
		return tmp, nil
	}
	if info, err := os.Stat(short); err == nil && info.IsDir() && len(short) <= most {
		log.Info("the plugins' sockets go in "+short+": the temporary directory's path is too long for a socket's", "tmpdir", tmp, "bytes", len(tmp), "most", most)
		return short, nil
	}
	return "", fmt.Errorf("the temporary directory %s (TMPDIR) is %d bytes long, and a plugin's socket below it could pass the %d bytes a Unix socket's path may take: set TMPDIR to a directory of at most %d bytes",
		tmp, len(tmp), plugin.MaxSocketPath, most)
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
