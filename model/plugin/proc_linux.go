package plugin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/streamer-dev/streamer/internal/procstat"
)

// setProcAttr puts the plugin in the process group pgid leads (a group of
// its own when pgid is 0), so that what it starts can be stopped with it,
// and has the kernel kill it when the worker that started it dies, even by
// kill -9, so that a plugin never outlives its worker and holds on to its
// GPU.
func setProcAttr(cmd *exec.Cmd, pgid int) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills process group pgid: the plugin and whatever it started
// that is still in it.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// guardName is the name the guard runs under, as ps shows it.
const guardName = "streamer-plugin-guard"

// groupGuard kills the plugin's process group when the worker dies, however
// it dies. The parent death signal reaches the plugin alone, not what the
// plugin started (a shell that runs python without exec leaves python
// behind), and nothing runs in a worker killed by SIGKILL. So a small shell
// leads the plugin's process group and waits on a pipe that only the worker
// holds open: when the worker is gone, however it went, the pipe ends and
// the shell kills the group, itself included. Being in the group, it also
// keeps the group's id from being reused while the group lives.
//
// A guard that dies before stop (killed by hand, or by the OOM killer)
// would leave the group unguarded for the rest of the worker's life, and a
// zombie. So the guard holds the write end of a second pipe, its stdout,
// which ends when it does, and watch then kills the group as the guard
// would have: the plugin's death is the worker's crash (see Config.Crashed),
// and the worker that takes its place starts the plugin with a new guard.
// The guard is reaped by stop alone, as before: until then its zombie keeps
// the group's id, which watch and the worker's killGroup use, from being
// reused.
type groupGuard struct {
	cmd  *exec.Cmd
	pipe *os.File // the write end: closing it ends the group
	once sync.Once

	mu      sync.Mutex
	stopped bool // stop or ending has begun: the guard's death is their doing

	watched chan struct{} // closed once watch has returned
}

// startGroupGuard starts the guard; the plugin then joins its group.
// output is told when the guard dies before stop.
func startGroupGuard(output io.Writer) (*groupGuard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	goneR, goneW, err := os.Pipe()
	if err != nil {
		w.Close()
		return nil, err
	}
	defer goneW.Close()
	cmd := &exec.Cmd{
		Path: "/bin/sh",
		// It ignores the signals of a stop: a service manager that
		// signals every process of the service (systemd's default) would
		// otherwise end it, and with it the plugin, while the worker
		// drains. Ignored, not trapped: a trap's handler would end the
		// read, and the group with it.
		Args:   []string{guardName, "-c", "trap '' TERM INT HUP; read line; kill -KILL 0"},
		Stdin:  r,
		Stdout: goneW,
		// A group of its own, and no parent death signal: it must outlive
		// the worker to do its job.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		goneR.Close()
		return nil, err
	}
	g := &groupGuard{cmd: cmd, pipe: w, watched: make(chan struct{})}
	go g.watch(goneR, output)
	return g, nil
}

// watch waits for the guard's stdout to end, which it does when the guard
// dies, and kills the group if stop did not end it.
func (g *groupGuard) watch(gone *os.File, output io.Writer) {
	defer close(g.watched)
	defer gone.Close()
	_, _ = io.Copy(io.Discard, gone) // the guard writes nothing
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	fmt.Fprintf(output, "the guard of the plugin's process group (pid %d) died: killing the group, plugin included, as the guard would have\n", g.pgid())
	// Its zombie holds the group's id until stop reaps it, which waits
	// for this.
	killGroup(g.pgid())
}

// pgid is the process group the plugin joins; 0 without a guard.
func (g *groupGuard) pgid() int {
	if g == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// ending says the group is about to be killed on purpose, the guard with
// it: its death is then no news for watch to tell.
func (g *groupGuard) ending() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// stop kills the group, if it is still there, and reaps the guard.
func (g *groupGuard) stop() {
	if g == nil {
		return
	}
	g.once.Do(func() {
		g.mu.Lock()
		g.stopped = true
		g.mu.Unlock()
		g.pipe.Close()
		_ = g.cmd.Wait()
	})
}

// exiting reports whether process pid is dying or dead, not yet reaped:
// its state is zombie, or it has begun to exit (PF_EXITING in its flags,
// set before the kernel closes its files). Linux's /proc/PID/stat has its
// state and its flags, third and ninth, the name in parentheses second.
//
// A process whose entry is gone (or goes as it is read: ESRCH) was reaped
// already: our wait for it returned between its stdout closing, which has
// go-plugin kill it, and this look, so it ended before any kill of ours.
// Where /proc itself is missing, nothing is known: not exiting.
func exiting(pid int) bool {
	fields, err := procstat.Fields(pid)
	if err != nil {
		_, self := os.Stat("/proc/self/stat")
		return (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)) && self == nil
	}
	if len(fields) < 7 {
		return false
	}
	const pfExiting = 0x4
	flags, err := strconv.ParseUint(fields[6], 10, 64)
	return fields[0] == "Z" || fields[0] == "X" || err == nil && flags&pfExiting != 0
}
