// Package redistest starts real redis-server processes for tests: each on a
// free loopback port, with its own directory and configuration, killed when
// the test ends. Tests that need Redis fail, rather than skip, when
// redis-server is not installed; `make install-tools` installs it.
//
// A Server also answers single commands through Do, over a minimal RESP
// client of its own, so a test can look at the server's state (DBSIZE, XLEN,
// INFO memory) without the client library under test.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure the server Start runs. The zero value is a server with
// no password, no TLS and no persistence.
type Options struct {
	// Password is the default user's password (requirepass). Empty: the
	// default user needs none.
	Password string

	// User, when not empty, is an extra ACL user with every permission on
	// every key and channel, whose password is UserPassword (empty: the user
	// needs none).
	User, UserPassword string

	// TLS makes the server speak TLS only: its one port is a tls-port, and
	// plain TCP is refused. The certificates are made for this server alone:
	// a test CA (CAFile, CACertPool) and a certificate for 127.0.0.1 signed
	// by it. Clients need no certificate of their own. A Sentinel (Watch)
	// with TLS speaks it to its clients and to the server it watches, which
	// must speak TLS too; its certificate is signed by that server's CA, for
	// the name localhost alone (see FailoverURL).
	TLS bool

	// Persist keeps the data across Kill and Restart, in an append-only file
	// in the server's directory, flushed before each reply (appendfsync
	// always), so a write acknowledged before Kill is there after Restart.
	// (With everysec, Redis puts off its write to the file while the last
	// second's flush is still running, as on a loaded machine, and answers
	// meanwhile: a Kill then lost acknowledged writes.) Without Persist
	// nothing is ever written to disk and Restart starts empty.
	Persist bool

	// MaxMemory is the server's maxmemory in Redis's notation ("64mb").
	// Empty: no limit.
	MaxMemory string

	// RenameAway names commands the server does not run, as an operator
	// takes them away with rename-command NAME "".
	RenameAway []string

	// ReplicaOf, when not nil, makes the server a replica of that one,
	// which must run without TLS (its Password is the replica's
	// masterauth).
	ReplicaOf *Server

	// Cluster runs the server in cluster mode (cluster-enabled), a node of
	// a cluster of its own that serves no hash slot yet.
	Cluster bool

	// Watch, when not nil, makes the process a Sentinel rather than a
	// data server: it watches that server as the master named MasterName
	// (quorum 1: it alone decides), takes it for down after
	// SentinelDownAfter without an answer, and then promotes one of its
	// replicas. Password, when not empty, is the Sentinel's own
	// (requirepass); User, Persist and MaxMemory do not apply.
	Watch      *Server
	MasterName string
}

// SentinelDownAfter is how long a Sentinel of Options.Watch waits for an
// answer from the master before it takes it for down and fails over.
const SentinelDownAfter = 500 * time.Millisecond

// Server is a redis-server process run for one test. Its address, directory
// and credentials stay the same across Kill and Restart.
type Server struct {
	opt     Options
	binary  string
	dir     string
	port    int
	certs   certFiles   // zero without TLS
	tlsConf *tls.Config // for Do's connections; nil without TLS

	mu     sync.Mutex
	cmd    *exec.Cmd       // the running process; nil while killed
	exited <-chan struct{} // closed once cmd has exited and been waited for
	held   net.Listener    // the port Vanish holds; nil before it
}

const (
	// readyTimeout bounds how long a start waits for the first PONG.
	readyTimeout = 10 * time.Second
	// readyPollInterval is the pause between PINGs while the server starts.
	readyPollInterval = 10 * time.Millisecond
	// doTimeout bounds one Do, connection included.
	doTimeout = 10 * time.Second
	// bindAttempts is how many free ports Start tries: another process can
	// take the port between its probe and the server's bind.
	bindAttempts = 5
	// logTailLines is how much of the server's log a failure shows.
	logTailLines = 30
)

// errPortTaken marks a start that failed because the port was in use.
var errPortTaken = errors.New("port already in use")

// Start runs redis-server configured by opt and returns once it answers
// PING, or fails the test: at once if redis-server is not on PATH or exits
// while starting, with its log; after 10 seconds if it never answers. The
// test's cleanup kills the server and removes its directory. Call Start from
// the goroutine running the test.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found: run make install-tools (%v)", err)
	}
	s := &Server{opt: opt, binary: binary, dir: t.TempDir()}
	switch {
	case opt.TLS && opt.Watch != nil:
		if !opt.Watch.opt.TLS {
			t.Fatalf("redistest: a Sentinel with TLS watches a server with TLS")
		}
		s.certs, err = writeSentinelCertificates(s.dir, opt.Watch.certs)
		s.tlsConf = &tls.Config{RootCAs: s.certs.pool, ServerName: "localhost"}
	case opt.TLS:
		s.certs, err = writeCertificates(s.dir)
		s.tlsConf = &tls.Config{RootCAs: s.certs.pool, ServerName: "127.0.0.1"}
	}
	if err != nil {
		t.Fatalf("redistest: TLS certificates: %v", err)
	}
	t.Cleanup(s.stop)
	for attempt := 1; ; attempt++ {
		s.port, err = freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		err = s.launch()
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == bindAttempts {
			t.Fatalf("redistest: start redis-server on %s (attempt %d): %v", s.Addr(), attempt, err)
		}
	}
}

// StartFailover runs a master, a replica of it and a Sentinel that watches
// the master as name, and returns once the replica has synced and the
// Sentinel knows it (so that it can promote it), or fails the test after
// readyTimeout. Master and replica ask for password, when it is not empty;
// the Sentinel asks for none. Kill the master (or make it Vanish), and the
// Sentinel promotes the replica a few seconds later.
func StartFailover(t testing.TB, name, password string) (master, replica, sentinel *Server) {
	t.Helper()
	master = Start(t, Options{Password: password})
	replica = Start(t, Options{ReplicaOf: master, Password: password})
	sentinel = Start(t, Options{Watch: master, MasterName: name})
	deadline := time.Now().Add(readyTimeout)
	for {
		synced := strings.Contains(replica.Do(t, "INFO", "replication"), "master_link_status:up")
		known := strings.Contains(sentinel.Do(t, "SENTINEL", "REPLICAS", name), strconv.Itoa(replica.port))
		if synced && known {
			return master, replica, sentinel
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: after %s, the replica synced: %v, the sentinel knows it: %v", readyTimeout, synced, known)
		}
		time.Sleep(readyPollInterval)
	}
}

// AwaitReplicated returns once replica has applied every write the server
// (its master) had taken when it was called, or fails the test after 10
// seconds. WAIT cannot say so here: it counts the replicas that have the
// writes of its own connection, and each Do has a connection of its own.
func (s *Server) AwaitReplicated(t testing.TB, replica *Server) {
	t.Helper()
	want := replOffset(t, s)
	deadline := time.Now().Add(readyTimeout)
	for {
		info := replica.Do(t, "INFO", "replication")
		got := infoField(info, "master_repl_offset")
		if strings.Contains(info, "master_link_status:up") && got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: after %s, replica %s has applied up to offset %d of its master's %d", readyTimeout, replica.Addr(), got, want)
		}
		time.Sleep(readyPollInterval)
	}
}

// replOffset returns s's master_repl_offset: how far its replication
// stream has gone.
func replOffset(t testing.TB, s *Server) int64 {
	t.Helper()
	return infoField(s.Do(t, "INFO", "replication"), "master_repl_offset")
}

// infoField returns the integer field name of an INFO reply, or -1 when
// it has none.
func infoField(info, name string) int64 {
	for line := range strings.Lines(info) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns the address as a client library takes it:
// redis://127.0.0.1:PORT/0, or rediss:// with TLS. It carries User and
// UserPassword when Options named a User, and otherwise Password for the
// default user.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr(), Path: "/0"}
	if s.opt.TLS {
		u.Scheme = "rediss"
	}
	switch {
	case s.opt.User != "":
		u.User = url.UserPassword(s.opt.User, s.opt.UserPassword)
	case s.opt.Password != "":
		u.User = url.UserPassword("", s.opt.Password)
	}
	return u.String()
}

// FailoverURL returns the URL through which a client finds the master that
// a Sentinel (Options.Watch) watches, as go-redis's ParseFailoverURL reads
// it: redis://127.0.0.1:PORT/0?master_name=NAME, with the master's password
// when it has one, and the Sentinel's own as sentinel_password. With TLS it
// is rediss://localhost:PORT/…, the name of the Sentinel's certificate,
// which the master's lacks.
func (s *Server) FailoverURL() string {
	q := url.Values{"master_name": {s.opt.MasterName}}
	if s.opt.Password != "" {
		q.Set("sentinel_password", s.opt.Password)
	}
	u := url.URL{Scheme: "redis", Host: s.Addr(), Path: "/0", RawQuery: q.Encode()}
	if s.opt.TLS {
		u.Scheme, u.Host = "rediss", net.JoinHostPort("localhost", strconv.Itoa(s.port))
	}
	if w := s.opt.Watch; w != nil && w.opt.Password != "" {
		u.User = url.UserPassword("", w.opt.Password)
	}
	return u.String()
}

// CAFile returns the path of the PEM file of the CA that signed the server's
// certificate, or "" without TLS.
func (s *Server) CAFile() string { return s.certs.caFile }

// CACertPool returns a pool holding the CA that signed the server's
// certificate, for a client's tls.Config.RootCAs, or nil without TLS.
func (s *Server) CACertPool() *x509.CertPool { return s.certs.pool }

// Kill ends the server with SIGKILL, as a crash would, and returns once it
// has exited. Nothing holds the port while the server is down: Restart binds
// it again, and fails if another process took it meanwhile. Kill on a server
// that is not running does nothing; commands sent while it is down fail.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	// An error here means it has exited already; the wait below is the same.
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Vanish ends the server with SIGKILL, as Kill does, and then holds its
// port, accepting connections that nothing answers: a machine gone from the
// network, whose address no other process of the test run can take. A
// Sentinel that knew the server would otherwise turn the process that took
// the port into a replica of its own master, wiping that process's data.
// The port is held until the server's own cleanup, which runs after those
// of the servers started after it, a Sentinel watching it among them.
// Restart fails after it.
func (s *Server) Vanish(t testing.TB) {
	t.Helper()
	s.Kill()
	ln, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("redistest: hold the port of the server gone: %v", err)
	}
	s.mu.Lock()
	s.held = ln
	s.mu.Unlock()
}

// stop is Start's cleanup: it kills the server and lets go of the port
// Vanish held.
func (s *Server) stop() {
	s.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		_ = s.held.Close()
		s.held = nil
	}
}

// Restart starts the server again on the same port and in the same
// directory, killing it first if it is running, and returns once it answers
// PING; with Persist it has loaded its data by then. It fails the test as
// Start does, and also when another process took the port while the server
// was down. It may be called any number of times, from the goroutine running
// the test.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	err := s.launch()
	if errors.Is(err, errPortTaken) {
		t.Fatalf("redistest: restart redis-server on %s: %v (another process took the port while the server was down)", s.Addr(), err)
	}
	if err != nil {
		t.Fatalf("redistest: restart redis-server on %s: %v", s.Addr(), err)
	}
}

// RestartRenamingAway restarts the server as Restart does, taking the
// commands names away (rename-command NAME ""), as a new configuration of
// the operator's does, or a failover to a replica configured so.
func (s *Server) RestartRenamingAway(t testing.TB, names ...string) {
	t.Helper()
	s.opt.RenameAway = names
	s.Restart(t)
}

// Do runs one command as the default user (with Options.Password) and
// returns its reply as text: simple and bulk strings as they are, integers
// in decimal, a null reply as "", arrays as their elements joined by
// newlines. It fails the test on an error reply or a failed connection.
func (s *Server) Do(t testing.TB, args ...string) string {
	t.Helper()
	// Not t.Context: that ends before the cleanups, and a cleanup may well
	// want to look at the server.
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	text, err := s.DoErr(ctx, args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return text
}

// Monitor opens a connection of its own to s, a server started without a
// password or TLS, and runs MONITOR on it: the scanner reads a line for
// each command Redis runs from then on, those of scripts too
// (`+1700000000.123456 [0 lua] "XRANGE" "key" "id" "id"`). The connection
// closes when the test ends.
func (s *Server) Monitor(t testing.TB) *bufio.Scanner {
	t.Helper()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatalf("redistest: MONITOR: %v", err)
	}
	lines := bufio.NewScanner(conn)
	lines.Buffer(nil, 64<<20) // a command's line holds its arguments
	if !lines.Scan() || lines.Text() != "+OK" {
		t.Fatalf("redistest: MONITOR answered %q, %v", lines.Text(), lines.Err())
	}
	return lines
}

// Info is the field name of the INFO section, failing the test when the
// section has no such field.
func (s *Server) Info(t testing.TB, section, name string) string {
	t.Helper()
	for line := range strings.Lines(s.Do(t, "INFO", section)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	t.Fatalf("redistest: INFO %s has no %s", section, name)
	return ""
}

// InfoInt is Info's field as a whole number.
func (s *Server) InfoInt(t testing.TB, section, name string) int64 {
	t.Helper()
	v := s.Info(t, section, name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("redistest: INFO %s: %s is %q, not a whole number", section, name, v)
	}
	return n
}

// DoErr is Do returning the error instead of failing the test. An error
// reply is a *ReplyError, wrapped with the command's name.
func (s *Server) DoErr(ctx context.Context, args ...string) (string, error) {
	return s.DoAs(ctx, "", s.opt.Password, args...)
}

// DoAs is DoErr on a connection that first authenticates as user with
// password: AUTH password for the default user when user is empty, and no
// AUTH at all when both are empty.
func (s *Server) DoAs(ctx context.Context, user, password string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redistest: no command")
	}
	text, err := s.roundTrip(ctx, user, password, args)
	if err != nil {
		return "", fmt.Errorf("%s: %w", args[0], err)
	}
	return text, nil
}

// roundTrip dials the server, authenticates when asked to, sends args and
// renders the reply. Each call has a connection of its own, so a command
// never sees the state another left behind.
func (s *Server) roundTrip(ctx context.Context, user, password string, args []string) (string, error) {
	conn, err := s.dial(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return "", err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	r := bufio.NewReader(conn)
	if user != "" || password != "" {
		auth := []string{"AUTH", password}
		if user != "" {
			auth = []string{"AUTH", user, password}
		}
		if _, err := exchange(conn, r, auth); err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
	}
	text, err := exchange(conn, r, args)
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return text, err
}

func (s *Server) dial(ctx context.Context) (net.Conn, error) {
	var dialer net.Dialer
	if s.tlsConf == nil {
		return dialer.DialContext(ctx, "tcp", s.Addr())
	}
	tlsDialer := tls.Dialer{NetDialer: &dialer, Config: s.tlsConf}
	return tlsDialer.DialContext(ctx, "tcp", s.Addr())
}

func exchange(conn net.Conn, r *bufio.Reader, args []string) (string, error) {
	if err := writeCommand(conn, args); err != nil {
		return "", err
	}
	rep, err := readReply(r)
	if err != nil {
		return "", err
	}
	return render(rep)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// launch writes the configuration, starts redis-server on s.port and waits
// until it answers. On failure the process is gone again.
func (s *Server) launch() error {
	confPath := filepath.Join(s.dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(s.config()), 0o600); err != nil {
		return err
	}
	// The server's own log and what it prints before it opens that log (a
	// configuration error) go to one file; both append, so neither
	// overwrites the other.
	logFile, err := os.OpenFile(s.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	info, err := logFile.Stat()
	if err != nil {
		return err
	}
	logStart := info.Size()

	cmd := exec.Command(s.binary, confPath)
	if s.opt.Watch != nil {
		cmd.Args = append(cmd.Args, "--sentinel")
	}
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	exited, err := startAndWait(cmd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	if err := s.awaitReady(cmd, exited, logStart); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// startAndWait starts cmd and waits for it in a goroutine, which closes the
// returned channel once it has exited.
func startAndWait(cmd *exec.Cmd) (<-chan struct{}, error) {
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		// The parent-death signal fires when the thread that started the
		// child ends, not the process. Holding this thread until the child
		// has exited means no other goroutine, locking it and returning, can
		// end it early; waiting occupies a thread anyway.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// awaitReady PINGs until the server answers PONG, it exits, or readyTimeout
// passes. An exit while binding the port is errPortTaken.
func (s *Server) awaitReady(cmd *exec.Cmd, exited <-chan struct{}, logStart int64) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	// A PING in flight ends when the server exits: what answered on the port
	// may be another process, which took it first.
	untilExit, cancelAtExit := context.WithCancel(context.Background())
	defer cancelAtExit()
	go func() {
		select {
		case <-exited:
			cancelAtExit()
		case <-untilExit.Done():
		}
	}()
	for {
		// Each PING gets a second at most, so a server that accepts but
		// never answers still leaves time for the next try.
		ctx, cancel := context.WithTimeout(untilExit, time.Second)
		err := s.ping(ctx)
		cancel()
		if err == nil && s.saidReady(logStart) {
			return nil
		}
		if err == nil {
			// Another process's server took the port first and answered:
			// ours fails to bind, and exits. Ours has said it is ready
			// before it answers anything.
			err = errors.New("PONG from a server that is not this one")
		}
		select {
		case <-exited:
			return s.exitError(cmd, logStart)
		case <-deadline.C:
			return fmt.Errorf("no PONG within %s (last: %v); log:\n%s", readyTimeout, err, tail(s.logSince(logStart)))
		case <-time.After(readyPollInterval):
		}
	}
}

// saidReady reports whether the server logged, since logStart, that it
// serves: a server as it enters its loop, a Sentinel once it runs.
func (s *Server) saidReady(logStart int64) bool {
	log := s.logSince(logStart)
	return strings.Contains(log, "Ready to accept connections") || strings.Contains(log, "Sentinel ID is")
}

// exitError tells why cmd exited while starting, from what it logged since
// logStart.
func (s *Server) exitError(cmd *exec.Cmd, logStart int64) error {
	log := s.logSince(logStart)
	if strings.Contains(log, "Address already in use") {
		return fmt.Errorf("%w: redis-server %s", errPortTaken, cmd.ProcessState)
	}
	return fmt.Errorf("redis-server exited while starting (%s); log:\n%s", cmd.ProcessState, tail(log))
}

// ping succeeds once the server answers PONG as the default user. While it
// loads its data it answers LOADING instead, so Restart with Persist waits
// for the data.
func (s *Server) ping(ctx context.Context) error {
	text, err := s.roundTrip(ctx, "", s.opt.Password, []string{"PING"})
	if err != nil {
		return err
	}
	if text != "PONG" {
		return fmt.Errorf("PING answered %q", text)
	}
	return nil
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

// logSince returns what the server logged from offset on: this start's part
// of a log that every start appends to.
func (s *Server) logSince(offset int64) string {
	data, err := os.ReadFile(s.logPath())
	if err != nil {
		return fmt.Sprintf("(read log: %v)", err)
	}
	if offset > int64(len(data)) {
		offset = 0
	}
	return string(data[offset:])
}

// tail returns the last logTailLines lines of log.
func tail(log string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// config renders the server's configuration file. Every value is quoted, so
// a directory or password with spaces or quotes stays one argument.
func (s *Server) config() string {
	var b strings.Builder
	set := func(args ...string) {
		for i, arg := range args {
			if i > 0 {
				b.WriteByte(' ')
				arg = quote(arg)
			}
			b.WriteString(arg)
		}
		b.WriteByte('\n')
	}
	port := strconv.Itoa(s.port)
	set("bind", "127.0.0.1")
	set("protected-mode", "no")
	set("daemonize", "no")
	set("dir", s.dir)
	set("logfile", s.logPath())
	if w := s.opt.Watch; w != nil {
		// Sentinel rewrites this file as it learns the replicas and
		// fails over; a restart starts it afresh.
		name := s.opt.MasterName
		if s.opt.TLS {
			s.setTLS(set, port)
			set("tls-replication", "yes") // to the master and its replicas too
		} else {
			set("port", port)
		}
		set("sentinel", "monitor", name, "127.0.0.1", strconv.Itoa(w.port), "1")
		set("sentinel", "down-after-milliseconds", name, strconv.FormatInt(SentinelDownAfter.Milliseconds(), 10))
		set("sentinel", "failover-timeout", name, "5000")
		if w.opt.Password != "" {
			set("sentinel", "auth-pass", name, w.opt.Password)
		}
		if s.opt.Password != "" {
			set("requirepass", s.opt.Password)
		}
		return b.String()
	}
	set("save", "")
	// A replica's first sync starts at once, rather than after the 5 s
	// Redis waits by default for other replicas to share its snapshot.
	set("repl-diskless-sync-delay", "0")
	if m := s.opt.ReplicaOf; m != nil {
		set("replicaof", "127.0.0.1", strconv.Itoa(m.port))
		if m.opt.Password != "" {
			set("masterauth", m.opt.Password)
		}
	}
	if s.opt.TLS {
		s.setTLS(set, port)
	} else {
		set("port", port)
	}
	if s.opt.Persist {
		set("appendonly", "yes")
		set("appendfsync", "always")
	} else {
		set("appendonly", "no")
	}
	if s.opt.MaxMemory != "" {
		set("maxmemory", s.opt.MaxMemory)
	}
	for _, name := range s.opt.RenameAway {
		set("rename-command", name, "")
	}
	if s.opt.Cluster {
		set("cluster-enabled", "yes")
		set("cluster-config-file", filepath.Join(s.dir, "nodes.conf"))
	}
	if s.opt.Password != "" {
		set("requirepass", s.opt.Password)
	}
	if s.opt.User != "" {
		secret := "nopass"
		if s.opt.UserPassword != "" {
			secret = ">" + s.opt.UserPassword
		}
		set("user", s.opt.User, "on", secret, "~*", "&*", "+@all")
	}
	return b.String()
}

// setTLS sets, through set, the configuration of a server that speaks TLS
// alone on port.
func (s *Server) setTLS(set func(...string), port string) {
	set("port", "0")
	set("tls-port", port)
	set("tls-cert-file", s.certs.certFile)
	set("tls-key-file", s.certs.keyFile)
	set("tls-ca-cert-file", s.certs.caFile)
	set("tls-auth-clients", "no")
}

// quote puts s in double quotes, escaping what Redis's configuration parser
// would otherwise read as the end of the string or an escape.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
