//go:build unix

package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// A directory whose name's pid is not running here is left alone while a
// process holds its lock, as its owner does from another PID namespace
// (two containers sharing a temporary directory), and swept once the lock
// is let go.
func TestSweepLeavesALockedDirectory(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "owner-"+strconv.Itoa(gone.Process.Pid)+"-1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	unlock, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	SweepDeadDirs(tmp, "owner-", nil)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a locked directory of pid %d was swept: %v", gone.Process.Pid, err)
	}
	unlock()
	SweepDeadDirs(tmp, "owner-", nil)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the directory, no longer locked, of pid %d that is gone was not swept: %v", gone.Process.Pid, err)
	}
}
