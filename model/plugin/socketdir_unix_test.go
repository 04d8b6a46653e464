//go:build unix

package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
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

// A directory whose own lock went with an older one of its name (made
// again by a worker after something removed it) is left alone while a
// directory in it is locked; and an entry that is no directory, a FIFO
// that would block an open for ever, is passed over at once.
func TestSweepLeavesADirectoryInUseAndPassesOverAFIFO(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	pid := strconv.Itoa(gone.Process.Pid)
	remade := filepath.Join(tmp, "owner-"+pid+"-1")
	inner := filepath.Join(remade, "worker-1")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	unlock, err := LockDir(inner)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	fifo := filepath.Join(tmp, "owner-"+pid+"-2")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	swept := make(chan struct{})
	go func() {
		SweepDeadDirs(tmp, "owner-", nil)
		close(swept)
	}()
	select {
	case <-swept:
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep still runs after 10s: it waits on the FIFO")
	}
	for _, path := range []string{remade, fifo} {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s was swept: %v", path, err)
		}
	}
}

// A lock stays held while the process runs, even once the caller has let go
// of its release: before, the lock was on an *os.File, whose finalizer
// closed it at the next collection.
func TestALockOutlivesItsDroppedRelease(t *testing.T) {
	dir := t.TempDir()
	func() {
		if _, err := LockDir(dir); err != nil {
			t.Fatal(err)
		}
	}()
	for range 3 {
		// A finalizer of its own, run once the collection's queue
		// reaches it: those queued with it have run by then too.
		ran := make(chan struct{})
		runtime.SetFinalizer(new([64]byte), func(*[64]byte) { close(ran) })
		runtime.GC()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("no finalizer ran within 10s of a collection")
		}
	}
	if !locked(dir) {
		t.Fatal("the lock went with the collection that found its release dropped")
	}
}
