package plugin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin/runner"
)

// outputDrainTime bounds how long, once the plugin has exited, its output
// is still read: what it wrote before it died is read at once, but a
// process it started may hold its stdout or stderr open for ever.
const outputDrainTime = 500 * time.Millisecond

// maxHandshakeLine bounds the first line the plugin prints. A handshake is a
// few hundred bytes, a kilobyte or two with its certificate; a longer line
// is no handshake.
const maxHandshakeLine = 64 << 10

// procRunner runs the plugin process for go-plugin (as its runner.Runner)
// and reads the plugin's stdout and stderr itself, rather than leave them to
// go-plugin, whose readers stop at a line over 64 KiB (after which the
// plugin blocks on its next write) and which learns of the plugin's exit
// only once both pipes are closed (never, while a process the plugin
// started holds one open). go-plugin is given the handshake line alone on
// its stdout, nothing on its stderr, and both end when the plugin exits.
type procRunner struct {
	cmd       *exec.Cmd
	sha256Hex string    // the binary's expected SHA-256, or empty
	output    io.Writer // what the plugin writes, but for its handshake

	handshakeR *io.PipeReader // go-plugin's stdout: the handshake line
	handshakeW *io.PipeWriter
	silentR    *io.PipeReader // go-plugin's stderr: nothing, until the exit
	silentW    *io.PipeWriter

	guard   *groupGuard // leads the plugin's process group; nil where there is none
	pumps   sync.WaitGroup
	waited  chan struct{} // closed when the plugin has exited and its output is read
	waitErr error         // cmd.Wait's, set before waited is closed

	killed atomic.Bool // Kill was called while it ran: by go-plugin as a start failed, or by the worker

	mu        sync.Mutex
	overlong  int    // the length read of a first line too long to be a handshake
	handshake string // the first line, of a handshake's length at most
}

var _ runner.Runner = (*procRunner)(nil)

func newProcRunner(cmd *exec.Cmd, sha256Hex string, output io.Writer) *procRunner {
	r := &procRunner{cmd: cmd, sha256Hex: sha256Hex, output: output, waited: make(chan struct{})}
	r.handshakeR, r.handshakeW = io.Pipe()
	r.silentR, r.silentW = io.Pipe()
	return r
}

// Start checks the binary's checksum, when one is asked for, and starts it
// with its stdout and stderr on pipes of its own.
func (r *procRunner) Start(context.Context) error {
	// Checked right before it runs, as go-plugin's SecureConfig would.
	if want, _ := decodeSHA256(r.sha256Hex); want != nil {
		got, err := fileSHA256(r.cmd.Path)
		if err != nil || !bytes.Equal(got, want) {
			return checksumError(r.cmd.Path, r.sha256Hex)
		}
	}
	// Without a guard (no /bin/sh) the plugin leads a group of its own,
	// and what it started dies with it, but not with a worker killed outright.
	var err error
	if r.guard, err = startGroupGuard(r.output); err != nil {
		fmt.Fprintf(r.output, "no guard for the plugin's process group (%v): what it starts may outlive a worker killed outright\n", err)
	}
	setProcAttr(r.cmd, r.guard.pgid())
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return err
	}
	r.cmd.Stdout, r.cmd.Stderr = stdoutW, stderrW
	err = r.cmd.Start()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdoutR.Close()
		stderrR.Close()
		return err
	}
	r.pumps.Add(2)
	go r.pumpStdout(stdoutR)
	go r.pumpStderr(stderrR)
	go r.wait(stdoutR, stderrR)
	return nil
}

// wait reaps the plugin, reads what is left of its output without waiting
// for processes it started, and then ends go-plugin's stdout and stderr, so
// that go-plugin learns of the exit.
func (r *procRunner) wait(stdout, stderr *os.File) {
	err := r.cmd.Wait()
	deadline := time.Now().Add(outputDrainTime)
	_ = stdout.SetReadDeadline(deadline)
	_ = stderr.SetReadDeadline(deadline)
	r.pumps.Wait()
	r.waitErr = err
	r.handshakeW.Close()
	r.silentW.Close()
	close(r.waited)
}

// pumpStdout hands go-plugin the plugin's first line, the handshake, and
// passes on whatever follows, however long its lines.
func (r *procRunner) pumpStdout(f *os.File) {
	defer r.pumps.Done()
	defer f.Close()
	in := bufio.NewReader(f)
	var line []byte
	for {
		chunk, err := in.ReadSlice('\n')
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) && len(line) <= maxHandshakeLine {
			continue
		}
		break
	}
	r.mu.Lock()
	if len(line) > maxHandshakeLine {
		r.overlong = len(line)
		// go-plugin says what it got: a start is enough.
		line = append(line[:60:60], '\n')
	} else {
		r.handshake = strings.TrimSpace(string(line))
	}
	r.mu.Unlock()
	if len(line) > 0 {
		_, _ = r.handshakeW.Write(line)
	}
	r.handshakeW.Close()
	_, _ = io.Copy(r.output, in)
}

// pumpStderr passes on what the plugin writes on stderr.
func (r *procRunner) pumpStderr(f *os.File) {
	defer r.pumps.Done()
	defer f.Close()
	_, _ = io.Copy(r.output, f)
}

// group is the plugin's process group, 0 before it started.
func (r *procRunner) group() int {
	if pgid := r.guard.pgid(); pgid > 0 {
		return pgid
	}
	if r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// overlongLine reports the length of a first line too long to be a
// handshake, or 0.
func (r *procRunner) overlongLine() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overlong
}

// handshakeLine is the first line the plugin printed, trimmed, when it was
// of a handshake's length.
func (r *procRunner) handshakeLine() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handshake
}

// exitStatus waits up to wait for the plugin's exit, and says how it
// ended: "exit status 3", "signal: killed"; false when it has not.
func (r *procRunner) exitStatus(wait time.Duration) (string, bool) {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-r.waited:
		case <-t.C:
		}
	}
	select {
	case <-r.waited:
	default:
		return "", false
	}
	if r.waitErr == nil {
		return "exit status 0", true
	}
	var exit *exec.ExitError
	if errors.As(r.waitErr, &exit) {
		return exit.ProcessState.String(), true
	}
	return r.waitErr.Error(), true
}

// Wait waits for the plugin's exit.
func (r *procRunner) Wait(context.Context) error {
	<-r.waited
	return r.waitErr
}

// Kill kills the plugin process.
func (r *procRunner) Kill(context.Context) error {
	if r.cmd.Process == nil {
		return nil
	}
	select {
	case <-r.waited:
		return nil // it ended, and was reaped
	default:
	}
	if !exiting(r.cmd.Process.Pid) {
		// Not a plugin that something else killed, whose stdout closed
		// as it died: go-plugin kills it then, finding no handshake.
		r.killed.Store(true)
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Stdout is what go-plugin reads the handshake from.
func (r *procRunner) Stdout() io.ReadCloser { return r.handshakeR }

// Stderr is empty: the plugin's stderr goes to the output directly.
func (r *procRunner) Stderr() io.ReadCloser { return r.silentR }

// Name is the binary's path.
func (r *procRunner) Name() string { return r.cmd.Path }

// ID is the plugin's pid, empty until it has started.
func (r *procRunner) ID() string {
	if r.cmd.Process == nil {
		return ""
	}
	return strconv.Itoa(r.cmd.Process.Pid)
}

// Diagnose adds nothing: startError explains a failed start.
func (r *procRunner) Diagnose(context.Context) string { return "" }

// PluginToHost passes the plugin's address on: it runs on this host.
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

// HostToPlugin passes the host's address on.
func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
