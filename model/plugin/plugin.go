// Package plugin runs a model plugin binary as a model.Model: it starts the
// binary through hashicorp/go-plugin (gRPC only), checks the handshake, calls
// the plugin's Init once, sends it each batch on one Predict stream, and
// stops it. What the plugin prints on stdout or stderr is passed on line by
// line, prefixed with its name.
//
// Each streamer worker process opens its own copy of the plugin, which
// inherits the worker's environment and so its CUDA_VISIBLE_DEVICES. The
// plugin's death is the worker's crash: a worker opens its plugin with
// OpenSpec, which ends the worker process when the plugin dies, so that the
// supervisor restarts it, retries the batch elsewhere and isolates an item
// that keeps killing plugins. On Linux the plugin, and what it started, is
// also killed the moment its worker dies, however it dies.
//
// Plugins are written in Go with package model/plugin/sdk, or in any language
// that implements the contract of package model/plugin/pluginpb.
package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/streamer-dev/streamer/internal/filekind"
	"github.com/streamer-dev/streamer/internal/lastwords"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

// Errors that callers branch on with errors.Is.
var (
	// ErrChecksum: the binary's SHA-256 is not the one asked for.
	ErrChecksum = errors.New("plugin checksum mismatch")
	// ErrPluginChanged: the binary's content is no longer that whose
	// SHA-256 Settings.Loaded records: it was replaced on disk since the
	// server read it, without a reload. The error that wraps it is
	// model.ErrStale too.
	ErrPluginChanged = errors.New("the plugin binary changed since it was loaded")
	// ErrHandshake: the binary did not answer as a streamer plugin of this
	// protocol version: it exited, printed something else, or nothing.
	ErrHandshake = errors.New("not a streamer plugin")
	// ErrExited: the plugin process died while in use.
	ErrExited = errors.New("plugin process exited")
	// ErrProtocol: the plugin broke the contract of model.proto in a way
	// that leaves its answers in doubt (an answer to no batch, or one with
	// another batch's id); the worker kills it.
	ErrProtocol = errors.New("plugin broke the protocol")
)

// DefaultStartTimeout is how long Open waits for the handshake when
// Config.StartTimeout is zero. A plugin loads its model in Init, after the
// handshake, so the handshake itself is quick.
const DefaultStartTimeout = 5 * time.Second

// socketDirPrefix starts the name of a plugin's socket directory; the pid
// of the worker that started the plugin follows, then a dash.
const socketDirPrefix = "plugin-"

// SocketNameRoom is the room, in bytes, a plugin has for what it adds to
// the path of PLUGIN_UNIX_SOCKET_DIR, the directory Open makes for it: a
// slash, a directory of its own and its socket's name (go-plugin's
// "/plugin1234567890" takes 17). Open refuses a Config.SocketDir that
// would leave less within the longest path of a Unix socket.
const SocketNameRoom = 24

// DirRoom is the most a directory named prefix, a pid and MkdirTemp's
// random part adds to the path of the directory it is made in, the slash
// included.
func DirRoom(prefix string) int {
	const pidDigits, randomDigits = 7, 10 // Linux's largest pid, 4194304; a uint32
	return len("/"+prefix) + pidDigits + len("-") + randomDigits
}

// MaxSocketDir is the longest Config.SocketDir (or temporary directory,
// when it is empty) Open takes: the directory it makes in it for each
// plugin leaves the plugin SocketNameRoom within a Unix socket's longest
// path, 107 bytes on Linux and 103 elsewhere.
func MaxSocketDir() int { return MaxSocketPath - SocketNameRoom - DirRoom(socketDirPrefix) }

// windowSize is the HTTP/2 flow control window of the plugin connection. A
// fixed window also turns off gRPC's bandwidth estimation, whose ping on
// every response would cost a round trip of system calls per batch.
const windowSize = 16 << 20

// Config tells Open which plugin to run and how.
type Config struct {
	// Path is the plugin binary. Required.
	Path string
	// Args are passed to the plugin's Init (--plugin-arg key=value).
	Args map[string]string
	// Device is passed to the plugin's Init: "cpu" or "cuda". Empty means cpu.
	Device string
	// SHA256, when not empty, is the binary's expected SHA-256 in hex; a
	// binary that differs is refused before it runs.
	SHA256 string
	// StartTimeout bounds the wait for the plugin's handshake (not its
	// Init, which the context bounds). Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// Output receives what the plugin prints on stdout and stderr, one whole
	// line per write, each prefixed with "[plugin NAME] ". Nil discards it.
	Output io.Writer
	// Logger receives go-plugin's own lines about the plugin process. Nil
	// discards them.
	Logger *slog.Logger
	// SocketDir is where the plugin's socket goes: Open makes a private
	// directory (mode 0700) inside it for each plugin it starts, and
	// removes it when the plugin is closed or killed. Empty means the
	// system's temporary directory. streamer serve points it at a
	// directory of its own, removed when it exits and swept at its next
	// start after a kill -9. When set, Open also removes the directories
	// in it of plugins whose worker was killed before it could.
	SocketDir string
	// Crashed, when set, is called once when the plugin process dies after
	// Open succeeded and before Close, whether or not a batch was running. A
	// worker sets it to end its own process, so that the plugin's death
	// counts as the worker's crash; a Predict that the dying plugin could not
	// answer then waits for Crashed rather than fail its batch. When Crashed
	// returns, or is nil, Predict fails with ErrExited.
	Crashed func(error)
}

// Model is a running plugin. It implements model.Model and model.Describer.
// Predict must not be called concurrently, as the worker never does.
type Model struct {
	cfg     Config
	name    string // the binary's base name, for messages
	client  *goplugin.Client
	cmd     *exec.Cmd
	runner  *procRunner
	rpc     pluginpb.ModelClient
	cc      *grpc.ClientConn
	exited  <-chan struct{} // closed when the plugin process has exited
	release func()          // lets the thread that started the plugin go
	outputs []*lineWriter
	info    *pluginpb.InitResponse

	socketDir string // the plugin's private socket directory

	unlockSocketDir func() // lets SweepDeadDirs take socketDir (see LockDir)

	batches   *batchStream // the batches' stream; nil until the first, and after it failed
	lastID    uint64       // the id of the last batch sent
	echoesIDs bool         // the plugin echoed a batch's id: every answer must carry one

	serving   atomic.Bool // Init succeeded: a death from now on is a crash
	closing   atomic.Bool
	ending    atomic.Bool // the plugin is being killed as crashed or in breach
	crashOnce sync.Once
	crashErr  error
	// lastWords is the first line of the plugin's output that says why it
	// dies (a Go panic's message), if any.
	lastWords atomic.Pointer[string]
	// tail keeps the last lines of the plugin's output that are not blank.
	tail outputTail
}

// Open starts the plugin, checks its handshake and calls its Init with
// cfg's Args and Device. ctx bounds Init. Errors name the binary and say
// what was expected of it.
func Open(ctx context.Context, cfg Config) (*Model, error) {
	// The checksum is go-plugin's to check, right before it runs the binary.
	path, err := Check(cfg.Path, "")
	if err != nil {
		return nil, err
	}
	if _, err := decodeSHA256(cfg.SHA256); err != nil {
		return nil, err
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Device == "" {
		cfg.Device = "cpu"
	}
	if err := checkSocketDir(path, cfg.SocketDir); err != nil {
		return nil, err
	}
	if cfg.SocketDir != "" {
		sweepSocketDirs(cfg.SocketDir)
	}
	m := &Model{cfg: cfg, name: filepath.Base(path)}
	if err := m.start(path); err != nil {
		return nil, err
	}
	info, err := m.rpc.Init(ctx, &pluginpb.InitRequest{Args: cfg.Args, Device: cfg.Device})
	if err != nil {
		err = m.callError(ctx, "init", err)
		m.kill()
		return nil, err
	}
	m.info = info
	m.serving.Store(true)
	go m.watch()
	return m, nil
}

// checkSocketDir refuses, for the plugin at path, a socket directory dir
// (the temporary directory when empty) whose path leaves a plugin's socket
// too little room, which a plugin would fail to bind with an error that
// reads as its own. It makes dir again, private, if it was removed (a
// cleaner of old files in /tmp, another server's sweep): a worker
// restarted then would fail every start.
func checkSocketDir(path, dir string) error {
	root := dir
	if root == "" {
		root = os.TempDir()
	}
	if len(root) > MaxSocketDir() {
		return fmt.Errorf("plugin %s: its socket would be made in %s, whose path is %d bytes: with the directory made for it, a plugin's socket there could pass the %d bytes a Unix socket's path may take; use a temporary directory of at most %d bytes (TMPDIR)",
			path, root, len(root), MaxSocketPath, MaxSocketDir())
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("plugin %s: make the socket directory %s: %w", path, dir, err)
		}
	}
	return nil
}

// start launches the process and connects to it.
func (m *Model) start(path string) error {
	m.cmd = exec.Command(path)
	prefix := "[plugin " + m.name + "] "
	var mu sync.Mutex
	newOutput := func() io.Writer {
		w := &lineWriter{mu: &mu, out: m.cfg.Output, prefix: prefix, dying: &m.lastWords, tail: &m.tail}
		m.outputs = append(m.outputs, w)
		return w
	}
	m.runner = newProcRunner(m.cmd, m.cfg.SHA256, newOutput())
	clientCfg := &goplugin.ClientConfig{
		HandshakeConfig: handshakeConfig(),
		Plugins:         goplugin.PluginSet{pluginpb.PluginName: &grpcPlugin{}},
		RunnerFunc:      m.runnerFunc,
		AllowedProtocols: []goplugin.Protocol{
			goplugin.ProtocolGRPC,
		},
		StartTimeout: m.cfg.StartTimeout,
		// go-plugin makes the directory the plugin's socket goes in, here.
		UnixSocketConfig: &goplugin.UnixSocketConfig{TempDir: m.cfg.SocketDir},
		// A certificate for each side, made for this start: the plugin
		// answers only this worker, over TLS.
		AutoMTLS: true,
		// The plugin's stdout and stderr are read by the runner; these are
		// the copies of a Go plugin's os.Stdout and os.Stderr that go-plugin
		// streams over gRPC.
		Stderr:     io.Discard,
		SyncStdout: newOutput(),
		SyncStderr: newOutput(),
		Logger:     newHCLogger(m.cfg.Logger, m.name),
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithInitialWindowSize(windowSize),
			grpc.WithInitialConnWindowSize(windowSize),
		},
	}
	m.client = goplugin.NewClient(clientCfg)

	conn, release, err := startOnLockedThread(m.client)
	m.release = release
	if err != nil {
		// How it ended. Waited for only where its stdout ended: one
		// that exited is reaped at once, and one that printed
		// something else, or nothing in time, is no matter of its exit.
		// (go-plugin has killed it already, should it still run.)
		wait := time.Duration(0)
		if msg := err.Error(); strings.Contains(msg, "Failed to read any lines") || strings.Contains(msg, "exited before we could connect") {
			wait = time.Second
		}
		status, ended := m.runner.exitStatus(wait)
		m.kill()
		return m.startError(err, status, ended)
	}
	m.rpc, m.cc, m.exited = conn.rpc, conn.cc, conn.exited
	return nil
}

// runnerFunc gives go-plugin the runner of the plugin's process. cmd is
// go-plugin's template, with the environment it made for the plugin;
// socketDir is the directory it made for the plugin's socket.
func (m *Model) runnerFunc(_ hclog.Logger, cmd *exec.Cmd, socketDir string) (runner.Runner, error) {
	// The socket goes in a directory only this user can enter, whatever
	// the umask: no other local user can connect to it. AutoMTLS also
	// keeps out this user's other processes.
	// The directory is ours rather than go-plugin's, named after this
	// process, so that the next worker can tell it from the directory of a
	// worker killed before it could remove its own.
	_ = os.Remove(socketDir)
	dir, err := os.MkdirTemp(m.cfg.SocketDir, socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err == nil {
		m.socketDir = dir
		err = os.Chmod(dir, 0o700)
	}
	if err == nil {
		m.unlockSocketDir, err = LockDir(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("plugin %s: make its socket directory: %w", m.cmd.Path, err)
	}
	// The last value of a variable is the one the plugin sees.
	m.cmd.Env = append(cmd.Env, goplugin.EnvUnixSocketDir+"="+dir)
	m.cmd.Stdin = cmd.Stdin
	return m.runner, nil
}

// handshakeConfig is what go-plugin checks before any call.
func handshakeConfig() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  pluginpb.ProtocolVersion,
		MagicCookieKey:   pluginpb.MagicCookieKey,
		MagicCookieValue: pluginpb.MagicCookieValue,
	}
}

// startError explains a failed start: what the binary did and what a
// streamer plugin does instead. go-plugin's errors are strings; the known
// ones are reworded, any other is passed on.
func (m *Model) startError(err error, status string, ended bool) error {
	path := m.cmd.Path
	if errors.Is(err, ErrChecksum) {
		return err
	}
	for _, e := range []error{syscall.EAGAIN, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC} {
		if errors.Is(err, e) {
			// Not the binary's doing: the machine's want, which the
			// worker says as such (see workerproc).
			return fmt.Errorf("plugin %s could not be started: %w", path, err)
		}
	}
	if cause := m.lastWords.Load(); cause != nil && lastwords.WantsThreads(*cause) {
		// A Go plugin started, but its runtime had no room for a thread.
		return fmt.Errorf("plugin %s could not start a thread: the limit of processes (a container's pids limit, ulimit -u) leaves it no room (its last words: %s): %w", path, *cause, syscall.EAGAIN)
	}
	msg, _, _ := strings.Cut(err.Error(), "\n") // go-plugin appends generic advice; ours follows
	want := fmt.Sprintf("want a streamer model plugin: started with %s=%s in its environment, it prints the handshake line \"1|%d|unix|SOCKET|grpc|CERT\" on stdout within %s and serves streamer.plugin.v1.Model there over gRPC with TLS (a Go plugin: model/plugin/sdk; another language: the contract in model/plugin/pluginpb/doc.go)",
		pluginpb.MagicCookieKey, pluginpb.MagicCookieValue, pluginpb.ProtocolVersion, m.cfg.StartTimeout)
	did := msg
	switch {
	case m.runner.overlongLine() > 0:
		did = fmt.Sprintf("it printed a line of more than %d KiB on stdout, starting %q, instead of a handshake", maxHandshakeLine>>10, strings.TrimPrefix(msg, "Unrecognized remote plugin message: "))
	case strings.HasPrefix(msg, "Unrecognized remote plugin message: "):
		printed := strings.TrimPrefix(msg, "Unrecognized remote plugin message: ")
		switch {
		case printed != "":
			did = fmt.Sprintf("it printed %q instead of a handshake", printed)
		case strings.Contains(err.Error(), "Failed to read any lines"):
			did = "it exited before the handshake, or closed its stdout" + m.exitNote(status, ended) + unflushed
		default: // go-plugin trims the line it read
			did = "it printed an empty line instead of a handshake"
		}
	case strings.Contains(msg, "exited before we could connect"):
		did = "it exited before the handshake" + m.exitNote(status, ended)
	case strings.Contains(msg, "timeout while waiting"):
		did = fmt.Sprintf("it printed no handshake within %s, its limit (a plugin that is slow to start does the slow part in Init, after the handshake)%s", m.cfg.StartTimeout, unflushed)
	case strings.Contains(msg, "incompatible API version"):
		did = strings.TrimPrefix(msg, "incompatible API version with plugin. ")
		want = fmt.Sprintf("want streamer plugin protocol version %d (a Go plugin: rebuild it against this streamer's model/plugin/sdk; another language: implement version %[1]d of the contract in model/plugin/pluginpb/doc.go)", pluginpb.ProtocolVersion)
	case strings.Contains(msg, "unsupported plugin protocol"):
		if line := m.runner.handshakeLine(); strings.Count(line, "|") < 4 {
			// go-plugin takes a line without the protocol's field
			// for net/rpc's: the line is short, not of another kind.
			did = fmt.Sprintf("its handshake line %q has no protocol field", line)
			break
		}
		want = "want a plugin that serves gRPC (go-plugin's net/rpc is not supported)"
	}
	return fmt.Errorf("plugin %s: %w: %s; %s", path, ErrHandshake, did, want)
}

// unflushed is what a plugin that printed its handshake into a buffer
// seems to have done: exited, or printed nothing.
const unflushed = "; or it wrote the handshake without flushing its stdout, which Python, Node.js and C's stdio hold in a buffer when it is a pipe: flush it after the line"

// exitNote says how the plugin ended (status), or that it had not (it
// closed its stdout, and runs on), and the last line it printed: what
// went wrong is most often there (a module its interpreter lacks, a file
// not found). A plugin whose start fails is killed, by go-plugin: one
// ended by SIGKILL may have been running still, which the note says.
func (m *Model) exitNote(status string, ended bool) string {
	note := " (it had not exited, and was killed"
	switch {
	case ended && status == "signal: killed" && m.runner.killed.Load():
		note = " (signal: killed, as streamer kills a plugin whose start failed, if nothing killed it first"
	case ended && status == "signal: killed":
		note = " (signal: killed, and not by streamer: the out-of-memory killer, or an operator"
	case ended:
		note = " (" + status
	}
	if cause := m.lastWords.Load(); cause != nil {
		note += "; its last words: " + strconv.Quote(*cause)
	} else if last, ok := m.tail.last(); ok {
		note += "; its last line: " + strconv.Quote(last)
	}
	return note + ")"
}

// Predict sends the batch to the plugin. Per-item failures come back as a
// *model.ItemErrors with the outputs; a plugin that answers with the wrong
// number of outputs fails the whole batch. When ctx ends first, Predict
// returns ctx's error and the next batch goes on a new stream.
func (m *Model) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	resp, err := m.roundTrip(ctx, items)
	if err != nil {
		return nil, err
	}
	if msg := resp.GetError(); msg != "" {
		return nil, fmt.Errorf("plugin %s: %s", m.name, capText(msg))
	}
	outputs := resp.GetOutputs()
	if len(outputs) != len(items) {
		return nil, fmt.Errorf("plugin %s returned %d outputs for a batch of %d items; a plugin must answer each item once", m.name, len(outputs), len(items))
	}
	var errs []error
	if failed := resp.GetItemErrors(); len(failed) > 0 {
		errs = make([]error, len(items))
		for i, msg := range failed {
			if int64(i) >= int64(len(items)) {
				return nil, fmt.Errorf("plugin %s failed item %d of a batch of %d items", m.name, i, len(items))
			}
			if msg == "" {
				msg = "it failed the item with an empty error"
			}
			errs[i] = fmt.Errorf("plugin %s: %s", m.name, capText(msg))
		}
	}
	for i, out := range outputs {
		if len(out) == 0 && (errs == nil || errs[i] == nil) {
			// No value at all: the answer's encoder would say only that
			// the output is cut short.
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = fmt.Errorf("plugin %s answered with an empty output and no error: an output is one msgpack value (an empty string is the byte 0xa0), or the item is failed in item_errors", m.name)
		}
	}
	if errs == nil {
		return outputs, nil
	}
	return outputs, &model.ItemErrors{Errs: errs}
}

// roundTrip sends one batch on the Predict stream and reads its answer,
// which must be that batch's: a plugin that answers with another batch's id,
// or sends an answer no batch asked for, is killed (see the Predict call in
// model.proto), so that no caller ever gets another caller's results.
func (m *Model) roundTrip(ctx context.Context, items [][]byte) (*pluginpb.PredictResponse, error) {
	if m.hasExited() {
		return nil, m.crash(nil)
	}
	m.lastID++
	id := m.lastID
	if m.batches == nil || !m.batches.expect(id) {
		if m.batches != nil {
			m.batches.abandon()
			m.batches = nil
		}
		streamCtx, cancel := context.WithCancel(context.Background())
		stream, err := m.rpc.Predict(streamCtx)
		if err != nil {
			cancel()
			return nil, m.callError(ctx, "predict", err)
		}
		m.batches = newBatchStream(stream, cancel, func(err error) { _ = m.breach(err) })
		m.batches.expect(id)
	}
	s := m.batches
	// A stream is not bound to one call's context: ending ctx ends the
	// stream, and with it this call.
	stopWatch := context.AfterFunc(ctx, s.cancel)
	err := s.stream.Send(&pluginpb.PredictRequest{Items: items, Id: id})
	if err != nil && !errors.Is(err, io.EOF) { // on EOF, the reader's Recv says why
		s.cancel()
	}
	got := <-s.answers
	if err == nil || errors.Is(err, io.EOF) {
		err = got.err
	}
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("it ended its Predict stream without answering batch %d", id)
	}
	if !stopWatch() {
		err = ctx.Err()
	}
	if err != nil {
		s.abandon()
		m.batches = nil
		return nil, m.callError(ctx, "predict", err)
	}
	if err := m.checkID(got.resp.GetId(), id); err != nil {
		return nil, m.breach(err)
	}
	if !m.echoesIDs {
		s.retire()
		m.batches = nil
	}
	return got.resp, nil
}

// checkID checks that an answer is the one to batch id. A plugin that never
// echoes ids (one built before they were added) is answered by order.
func (m *Model) checkID(got, want uint64) error {
	switch {
	case got == want:
		m.echoesIDs = true
		return nil
	case got == 0 && !m.echoesIDs:
		return nil
	case got == 0:
		return fmt.Errorf("%w: it answered batch %d without its id, after echoing the ids of the batches before", ErrProtocol, want)
	}
	return fmt.Errorf("%w: it answered batch %d with the id %d", ErrProtocol, want, got)
}

// callError turns a failed call into an error. A plugin that cannot be
// reached any more is dead (or as good as dead, and then killed): that is a
// crash, reported through Crashed.
func (m *Model) callError(ctx context.Context, call string, err error) error {
	code := status.Code(err)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("plugin %s: %s: %w", m.name, call, ctx.Err())
	case code == codes.DeadlineExceeded:
		// The plugin's side saw ctx's deadline pass a moment before ctx did.
		return fmt.Errorf("plugin %s: %s: %w", m.name, call, context.DeadlineExceeded)
	case m.hasExited() || m.ending.Load() || code == codes.Unavailable && m.unreachable():
		// A call cut short as the plugin is killed (its stream's reader
		// found it in breach) is the crash's too: the batch is retried
		// elsewhere, as after any crash, not failed.
		return m.crash(err)
	}
	msg := capText(status.Convert(err).Message())
	if code == codes.ResourceExhausted && strings.Contains(strings.ToLower(msg), "larger than max") {
		// The host takes answers of any size: the limit is the plugin's.
		msg += " (the plugin's gRPC server refused a message this large: lift its receive limit, 4 MiB by default in most gRPC libraries, as model/plugin/pluginpb/doc.go says under \"Large batches\", or lower --max-batch-bytes)"
	}
	return fmt.Errorf("plugin %s: %s: %s", m.name, call, msg)
}

// unavailableGrace is how long a call's UNAVAILABLE waits for the plugin's
// end or its connection's to show before it is taken for the plugin's own
// answer.
const unavailableGrace = 250 * time.Millisecond

// unreachable reports whether a call that failed UNAVAILABLE failed for
// the connection: the plugin exited, or the connection left READY, within
// unavailableGrace. A plugin that answers UNAVAILABLE itself (a backend of
// its own busy) is alive and connected: its batch fails with its message,
// rather than its items be taken for ones that crash the model.
func (m *Model) unreachable() bool {
	if m.cc == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), unavailableGrace)
	defer cancel()
	for {
		state := m.cc.GetState()
		if state != connectivity.Ready || m.hasExited() {
			return true
		}
		if !m.cc.WaitForStateChange(ctx, state) {
			return m.hasExited()
		}
	}
}

// maxErrorText bounds the text of an error a plugin gives: it goes to every
// caller of the batch and into the log, where megabytes help no one.
const maxErrorText = 4 << 10

// capText cuts a plugin's error text to maxErrorText, saying how much was cut.
func capText[T string | []byte](msg T) string {
	if len(msg) <= maxErrorText {
		return string(msg)
	}
	cut := cutIndex(msg, maxErrorText)
	return fmt.Sprintf("%s… (%d more bytes cut)", msg[:cut], len(msg)-cut)
}

// cutIndex is where to cut msg to keep at most n bytes of it, whole
// UTF-8 sequences only: len(msg) if it is no longer.
func cutIndex[T string | []byte](msg T, n int) int {
	if len(msg) <= n {
		return len(msg)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return cut
}

func (m *Model) hasExited() bool {
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// watch reports the plugin's death when no call is there to see it.
func (m *Model) watch() {
	<-m.exited
	if !m.closing.Load() {
		_ = m.crash(nil)
	}
}

// crash makes sure the plugin is gone, says why once and calls Crashed.
// cause is the failed call that found the plugin dead or unreachable, or
// nil. Every caller waits for the first to finish.
func (m *Model) crash(cause error) error { return m.end(cause, false) }

// breach kills a plugin that broke the protocol, says why once and calls
// Crashed, as crash does.
func (m *Model) breach(why error) error { return m.end(why, true) }

func (m *Model) end(cause error, broke bool) error {
	m.ending.Store(true)
	m.crashOnce.Do(func() {
		diedAlone := false
		if !broke {
			select {
			case <-m.exited:
				diedAlone = true
			case <-time.After(2 * time.Second):
				// Unreachable but alive: no use to anyone.
			}
		}
		m.kill()
		how := "exited"
		if st := m.cmd.ProcessState; st != nil {
			how = st.String()
		}
		switch {
		case broke:
			m.crashErr = fmt.Errorf("plugin %s (pid %d): %w; killed it (%s)", m.cmd.Path, m.pid(), cause, how)
		case cause != nil && !diedAlone:
			// It ran, but could not be called: the cause says why (no
			// socket there, no TLS), which its death by our hand does not.
			why := capText(status.Convert(cause).Message())
			if line := m.runner.handshakeLine(); strings.Count(line, "|") == 4 {
				// go-plugin's own examples print five fields; without
				// the sixth, the TLS error blames an unknown authority.
				why = fmt.Sprintf("its handshake line %q has no certificate, the sixth field: a streamer plugin serves gRPC over TLS with the certificate it gives there (see model/plugin/pluginpb/doc.go); the call: %s", line, why)
			}
			m.crashErr = fmt.Errorf("plugin %s (pid %d) could not be called: %s; killed it: %w: %s", m.cmd.Path, m.pid(), why, ErrExited, how)
		default:
			m.crashErr = fmt.Errorf("plugin %s (pid %d): %w: %s", m.cmd.Path, m.pid(), ErrExited, how)
			if cause != nil && status.Code(cause) != codes.Unavailable {
				m.crashErr = fmt.Errorf("%w (%s)", m.crashErr, capText(status.Convert(cause).Message()))
			}
			// Its output is read to its end by now (see procRunner.wait).
			if last := m.lastWords.Load(); last != nil {
				m.crashErr = fmt.Errorf("%w; its last words: %s", m.crashErr, *last)
			} else if lines := m.tail.recent(); lines != "" {
				// No panic's message: what it printed last most often
				// says why (a Python traceback's exception).
				m.crashErr = fmt.Errorf("%w; its last lines: %s", m.crashErr, lines)
			}
		}
		if m.cfg.Crashed != nil && m.serving.Load() {
			m.cfg.Crashed(m.crashErr)
		}
	})
	return m.crashErr
}

func (m *Model) pid() int {
	if m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// PID is the plugin process's id.
func (m *Model) PID() int { return m.pid() }

// Close stops the plugin: it is asked to shut down, and killed if it is
// still running two seconds later, together with any process it started.
func (m *Model) Close() error {
	m.closing.Store(true)
	if m.batches != nil {
		m.batches.abandon()
	}
	done := make(chan struct{})
	go func() {
		m.client.Kill()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		// go-plugin gives a graceful exit two seconds: no more.
	}
	m.kill()
	return nil
}

// kill ends the plugin and what it started at once, and waits until go-plugin
// has read the last of its output.
func (m *Model) kill() {
	m.runner.guard.ending()
	killGroup(m.runner.group())
	m.client.Kill()
	m.runner.guard.stop()
	m.flushOutput()
	if m.release != nil {
		m.release()
	}
	if m.socketDir != "" {
		_ = os.RemoveAll(m.socketDir)
	}
	if m.unlockSocketDir != nil {
		m.unlockSocketDir()
	}
}

func (m *Model) flushOutput() {
	for _, w := range m.outputs {
		w.Flush()
	}
}

// Describe names the plugin's model and device, as its Init said.
func (m *Model) Describe() string {
	name, device := m.info.GetName(), m.info.GetDevice()
	if name == "" {
		name = m.name
	}
	if device == "" {
		device = m.cfg.Device
	}
	return fmt.Sprintf("plugin %s on %s (%s)", name, device, m.cmd.Path)
}

// Check validates a plugin binary without running it: it exists, is an
// executable file, and, when sha256Hex is not empty, has that SHA-256. It
// returns the binary's absolute path.
func Check(path, sha256Hex string) (string, error) {
	if path == "" {
		return "", errors.New("plugin: no binary given")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("plugin %s: %w", path, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("plugin %s: no such file; want the path of a plugin binary", path)
	case err != nil:
		return "", fmt.Errorf("plugin %s: %w", path, err)
	case st.IsDir():
		return "", fmt.Errorf("plugin %s: is a directory; want the path of a plugin binary", path)
	case !st.Mode().IsRegular():
		// Its checksum would wait on a named pipe for ever.
		return "", fmt.Errorf("plugin %s: is %s; want the path of a plugin binary", path, filekind.Of(st.Mode()))
	case st.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("plugin %s: is not executable (mode %s); want an executable plugin binary", path, st.Mode().Perm())
	}
	want, err := decodeSHA256(sha256Hex)
	if err != nil {
		return "", err
	}
	if want == nil {
		return abs, nil
	}
	got, err := fileSHA256(abs)
	if err != nil {
		return "", fmt.Errorf("plugin %s: checksum: %w", path, err)
	}
	if !bytes.Equal(got, want) {
		return "", checksumError(path, sha256Hex)
	}
	return abs, nil
}

// decodeSHA256 reads a hex SHA-256; empty is nil.
func decodeSHA256(sha256Hex string) ([]byte, error) {
	if sha256Hex == "" {
		return nil, nil
	}
	sum, err := hex.DecodeString(sha256Hex)
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("plugin sha256 %q: want %d hex digits", sha256Hex, 2*sha256.Size)
	}
	return sum, nil
}

// checksumError says that the binary at path does not have the SHA-256 asked
// for, and which one it has.
func checksumError(path, want string) error {
	got, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("plugin %s: %w: want SHA-256 %s; refusing to run it", path, ErrChecksum, strings.ToLower(want))
	}
	return fmt.Errorf("plugin %s: %w: its SHA-256 is %x, want %s; refusing to run it", path, ErrChecksum, got, strings.ToLower(want))
}

func fileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
