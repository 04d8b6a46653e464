package redistest_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
)

const pingCommand = "*1\r\n$4\r\nPING\r\n"

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// replyError returns the *ReplyError in err, failing the test when there is
// none.
func replyError(t *testing.T, err error) *redistest.ReplyError {
	t.Helper()
	var replyErr *redistest.ReplyError
	if !errors.As(err, &replyErr) {
		t.Fatalf("got error %v, want an error reply", err)
	}
	return replyErr
}

func TestStartPlain(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})

	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q, want 127.0.0.1 and a real port", s.Addr())
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if s.CAFile() != "" || s.CACertPool() != nil {
		t.Errorf("CAFile() = %q, CACertPool() = %v without TLS, want neither", s.CAFile(), s.CACertPool())
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, ""},
		{[]string{"INCR", "n"}, "1"},
		{[]string{"RPUSH", "list", "a", "b c", ""}, "3"},
		{[]string{"LRANGE", "list", "0", "-1"}, "a\nb c\n"},
		{[]string{"DBSIZE"}, "3"},
		{[]string{"CONFIG", "GET", "appendonly"}, "appendonly\nno"},
		{[]string{"CONFIG", "GET", "save"}, "save\n"},
		{[]string{"CONFIG", "GET", "bind"}, "bind\n127.0.0.1"},
	} {
		if got := s.Do(t, step.args...); got != step.want {
			t.Errorf("Do(%q) = %q, want %q", step.args, got, step.want)
		}
	}

	_, err := s.DoErr(testContext(t), "LPUSH", "k", "x")
	if replyErr := replyError(t, err); !strings.HasPrefix(replyErr.Message, "WRONGTYPE") {
		t.Errorf("LPUSH on a string: %q, want WRONGTYPE", replyErr.Message)
	}
	if !strings.HasPrefix(err.Error(), "LPUSH: ") {
		t.Errorf("error %q does not name the command", err)
	}
}

func TestMaxMemory(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{MaxMemory: "64mb"})
	if got, want := s.Do(t, "CONFIG", "GET", "maxmemory"), "maxmemory\n67108864"; got != want {
		t.Errorf("CONFIG GET maxmemory = %q, want %q", got, want)
	}
	if !strings.Contains(s.Do(t, "INFO", "memory"), "maxmemory:67108864") {
		t.Error("INFO memory does not report the limit")
	}
}

func TestPassword(t *testing.T) {
	t.Parallel()
	// Spaces and quotes, to hold the configuration file's quoting.
	const password = `s3cret "with quotes" \ and spaces`
	s := redistest.Start(t, redistest.Options{Password: password})
	ctx := testContext(t)

	_, err := s.DoAs(ctx, "", "", "GET", "k")
	if replyErr := replyError(t, err); !strings.HasPrefix(replyErr.Message, "NOAUTH") {
		t.Errorf("unauthenticated GET: %q, want NOAUTH", replyErr.Message)
	}
	_, err = s.DoAs(ctx, "", "wrong", "PING")
	if replyErr := replyError(t, err); !strings.HasPrefix(replyErr.Message, "WRONGPASS") {
		t.Errorf("PING with a wrong password: %q, want WRONGPASS", replyErr.Message)
	}
	if got := s.Do(t, "SET", "k", "v"); got != "OK" {
		t.Errorf("authenticated SET = %q, want OK", got)
	}
	if got, err := s.DoAs(ctx, "default", password, "GET", "k"); err != nil || got != "v" {
		t.Errorf("GET as default with the password = %q, %v; want v", got, err)
	}

	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := u.User.Password(); u.User.Username() != "" || got != password {
		t.Errorf("URL() = %q, want the default user with the password", s.URL())
	}
}

func TestUser(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{User: "alice", UserPassword: "pw"})
	ctx := testContext(t)

	if got, err := s.DoAs(ctx, "alice", "pw", "ACL", "WHOAMI"); err != nil || got != "alice" {
		t.Errorf("ACL WHOAMI as alice = %q, %v; want alice", got, err)
	}
	if _, err := s.DoAs(ctx, "alice", "pw", "XADD", "stream", "*", "f", "v"); err != nil {
		t.Errorf("XADD as alice: %v", err)
	}
	if got := s.Do(t, "XLEN", "stream"); got != "1" {
		t.Errorf("XLEN as default = %q, want 1", got)
	}
	_, err := s.DoAs(ctx, "alice", "wrong", "PING")
	if replyErr := replyError(t, err); !strings.HasPrefix(replyErr.Message, "WRONGPASS") {
		t.Errorf("PING as alice with a wrong password: %q, want WRONGPASS", replyErr.Message)
	}
	if want := "redis://alice:pw@" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
}

func TestUserAndPassword(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Password: "admin", User: "bob", UserPassword: "pw"})
	if got := s.Do(t, "ACL", "WHOAMI"); got != "default" {
		t.Errorf("Do runs as %q, want default", got)
	}
	if want := "redis://bob:pw@" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q (the extra user)", s.URL(), want)
	}
}

func TestUserWithoutPassword(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Password: "admin", User: "carol"})
	if got, err := s.DoAs(testContext(t), "carol", "anything", "ACL", "WHOAMI"); err != nil || got != "carol" {
		t.Errorf("ACL WHOAMI as carol = %q, %v; want carol", got, err)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{TLS: true})

	if want := "rediss://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	ca := readCertificate(t, s.CAFile())
	if !ca.IsCA {
		t.Errorf("CAFile() holds %q, not a CA", ca.Subject)
	}
	if got := tlsPing(t, s.Addr(), s.CACertPool()); got != "+PONG\r\n" {
		t.Errorf("PING over TLS = %q, want +PONG", got)
	}
	if got, want := s.Do(t, "CONFIG", "GET", "port"), "port\n0"; got != want {
		t.Errorf("CONFIG GET port = %q, want %q: plain TCP should be off", got, want)
	}
	if got := s.Do(t, "SET", "k", "v"); got != "OK" {
		t.Errorf("SET over TLS = %q, want OK", got)
	}

	var verifyErr *tls.CertificateVerificationError
	if _, err := tls.Dial("tcp", s.Addr(), &tls.Config{RootCAs: x509.NewCertPool()}); !errors.As(err, &verifyErr) {
		t.Errorf("handshake trusting no CA: %v, want a verification error", err)
	}
	if got := plainPing(t, s.Addr()); strings.HasPrefix(got, "+PONG") {
		t.Errorf("plain TCP PING to the TLS port answered %q", got)
	}
}

// servedCertificate returns the certificate the server at addr presents,
// checked for name against pool.
func servedCertificate(t *testing.T, addr, name string, pool *x509.CertPool) *x509.Certificate {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: name})
	if err != nil {
		t.Fatalf("TLS to %s as %s: %v", addr, name, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func readCertificate(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// tlsPing sends PING over TLS, verifying the server with roots, and returns
// the raw reply line.
func tlsPing(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	dialer := tls.Dialer{Config: &tls.Config{RootCAs: roots}}
	conn, err := dialer.DialContext(testContext(t), "tcp", addr)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, pingCommand); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read PING reply: %v", err)
	}
	return line
}

// plainPing sends PING over plain TCP and returns whatever comes back before
// the server closes the connection.
func plainPing(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, pingCommand); err != nil {
		return ""
	}
	got, err := io.ReadAll(conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatal("the TLS port neither answered nor closed a plain TCP connection")
	}
	return string(got)
}

func TestPersistSurvivesKill(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Persist: true})
	addr := s.Addr()
	s.Do(t, "SET", "first", "1")

	// Twice, to hold that Kill and Restart can be repeated.
	for round, key := range []string{"second", "third"} {
		s.Kill()
		if _, err := s.DoErr(testContext(t), "PING"); err == nil {
			t.Fatalf("round %d: PING answered after Kill", round)
		}
		s.Kill() // a second Kill does nothing
		s.Restart(t)
		if s.Addr() != addr {
			t.Errorf("round %d: Addr() = %q after Restart, want %q", round, s.Addr(), addr)
		}
		if got := s.Do(t, "GET", "first"); got != "1" {
			t.Errorf("round %d: GET first after Restart = %q, want 1", round, got)
		}
		s.Do(t, "SET", key, "1")
	}
	if got := s.Do(t, "DBSIZE"); got != "3" {
		t.Errorf("DBSIZE = %q, want 3", got)
	}
}

func TestRestartWithoutPersistStartsEmpty(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	s.Do(t, "SET", "k", "v")
	dir := strings.TrimPrefix(s.Do(t, "CONFIG", "GET", "dir"), "dir\n")
	s.Kill()
	s.Restart(t)
	if got := s.Do(t, "DBSIZE"); got != "0" {
		t.Errorf("DBSIZE after Restart = %q, want 0", got)
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		if name := entry.Name(); strings.HasSuffix(name, ".rdb") || strings.HasPrefix(name, "appendonly") {
			t.Errorf("the server wrote %s without Persist", name)
		}
	}
}

func TestRestartRunningServer(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	before := runID(t, s)
	s.Restart(t)
	if after := runID(t, s); after == before {
		t.Errorf("run_id %s unchanged: Restart did not restart a running server", after)
	}
}

func runID(t *testing.T, s *redistest.Server) string {
	t.Helper()
	for line := range strings.Lines(s.Do(t, "INFO", "server")) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id
		}
	}
	t.Fatal("INFO server has no run_id")
	return ""
}

// The tests below are not parallel: while they run no other test starts a
// server, so a port they see free stays free.

func TestCleanupKillsServer(t *testing.T) {
	var s *redistest.Server
	t.Run("start", func(t *testing.T) {
		s = redistest.Start(t, redistest.Options{})
		s.Do(t, "PING")
	})
	if _, err := s.DoErr(testContext(t), "PING"); err == nil {
		t.Error("PING answered after the test that started the server ended")
	}
}

func TestRestartFailsWhenPortTaken(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	s.Kill()
	ln, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	msg := fatalMessage(t, func(tb testing.TB) { s.Restart(tb) })
	if !strings.Contains(msg, s.Addr()) || !strings.Contains(msg, "port already in use") {
		t.Errorf("Restart on a taken port failed with %q, want the address and the cause", msg)
	}
}

// TestRestartFailsWhenAnotherServerTookThePort: a Redis of another
// process's on the port answers PING as ours would; it is not taken for
// ours, which fails to bind.
func TestRestartFailsWhenAnotherServerTookThePort(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	s.Kill()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(s.Addr())
	other := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	})
	ctx := testContext(t)
	for {
		conn, err := net.Dial("tcp", s.Addr())
		if err == nil {
			_, err = io.WriteString(conn, pingCommand)
			line := ""
			if err == nil {
				line, err = bufio.NewReader(conn).ReadString('\n')
			}
			conn.Close()
			if err == nil && line == "+PONG\r\n" {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the other server never answered PING: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	msg := fatalMessage(t, func(tb testing.TB) { s.Restart(tb) })
	if !strings.Contains(msg, s.Addr()) || !strings.Contains(msg, "port already in use") {
		t.Errorf("Restart on a port another server took failed with %q, want the address and the cause", msg)
	}
}

func TestStartWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	msg := fatalMessage(t, func(tb testing.TB) { redistest.Start(tb, redistest.Options{}) })
	if !strings.Contains(msg, "redis-server not found: run make install-tools") {
		t.Errorf("Start without redis-server failed with %q", msg)
	}
}

func TestStartFailsFastWhenServerExits(t *testing.T) {
	begin := time.Now()
	msg := fatalMessage(t, func(tb testing.TB) {
		redistest.Start(tb, redistest.Options{MaxMemory: "plenty"})
	})
	if !strings.Contains(msg, "exited while starting") || !strings.Contains(msg, "FATAL CONFIG FILE ERROR") {
		t.Errorf("Start with a bad maxmemory failed with %q, want the exit and the log", msg)
	}
	// Half the readiness timeout: Start saw the exit rather than waiting
	// the full ten seconds for a PONG.
	if elapsed := time.Since(begin); elapsed > 5*time.Second {
		t.Errorf("Start took %s to notice the exit", elapsed)
	}
}

// fatalRecorder is a testing.TB whose Fatal ends only the calling goroutine,
// recording the message, so a test can hold what Start and Restart fail
// with.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalMessage runs f on a goroutine of its own and returns what it failed
// the test with, failing the real test when it did not fail at all.
func fatalMessage(t *testing.T, f func(testing.TB)) string {
	t.Helper()
	rec := &fatalRecorder{TB: t}
	failed := true
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(rec)
		failed = false
	}()
	<-done
	if !failed {
		t.Fatal("it did not fail the test")
	}
	return rec.msg
}

func TestSentinelPromotesTheReplicaWhenTheMasterDies(t *testing.T) {
	t.Parallel()
	master, replica, sentinel := redistest.StartFailover(t, "main", "")
	if got := sentinel.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main"); got != strings.Replace(master.Addr(), ":", "\n", 1) {
		t.Fatalf("the sentinel's master: %q, want %s", got, master.Addr())
	}
	master.Do(t, "SET", "k", "v")
	master.AwaitReplicated(t, replica)
	master.Vanish(t)
	// The Sentinel names the new master once it has promoted it.
	promoted := strings.Replace(replica.Addr(), ":", "\n", 1)
	deadline := time.Now().Add(15 * time.Second)
	for sentinel.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main") != promoted {
		if time.Now().After(deadline) {
			t.Fatal("the sentinel names no other master 15s after the master died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := replica.Do(t, "ROLE"); !strings.HasPrefix(got, "master") {
		t.Errorf("ROLE of the promoted replica: %q, want master", got)
	}
	if got := replica.Do(t, "GET", "k"); got != "v" {
		t.Errorf("GET k on the promoted replica = %q, want v", got)
	}
	if want := "redis://" + sentinel.Addr() + "/0?master_name=main"; sentinel.FailoverURL() != want {
		t.Errorf("FailoverURL() = %q, want %q", sentinel.FailoverURL(), want)
	}
}

// A Sentinel with TLS speaks it, knows its TLS master, and is named by its
// certificate's name, localhost, which the master's certificate lacks.
func TestSentinelWithTLS(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, redistest.Options{TLS: true})
	sentinel := redistest.Start(t, redistest.Options{TLS: true, Watch: master, MasterName: "main"})
	if got, want := sentinel.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main"), strings.Replace(master.Addr(), ":", "\n", 1); got != want {
		t.Errorf("the master the sentinel names: %q, want %q", got, want)
	}
	_, port, _ := net.SplitHostPort(sentinel.Addr())
	if want := "rediss://localhost:" + port + "/0?master_name=main"; sentinel.FailoverURL() != want {
		t.Errorf("FailoverURL() = %q, want %q", sentinel.FailoverURL(), want)
	}
	for _, s := range []struct {
		server *redistest.Server
		names  string
	}{{master, "127.0.0.1"}, {sentinel, "localhost"}} {
		cert := servedCertificate(t, s.server.Addr(), s.names, master.CACertPool())
		var names []string
		for _, ip := range cert.IPAddresses {
			names = append(names, ip.String())
		}
		names = append(names, cert.DNSNames...)
		if strings.Join(names, " ") != s.names {
			t.Errorf("%s's certificate names %q; want %s alone", s.server.Addr(), names, s.names)
		}
	}
}

// A Sentinel turns whatever answers at its dead master's address into a
// replica of the master it promoted, so the port of a server gone must stay
// held until the Sentinel watching it is gone: its cleanup runs before the
// server's own.
func TestTheVanishedMastersPortIsHeldUntilItsSentinelIsGone(t *testing.T) {
	t.Parallel()
	var addr string
	t.Run("failover", func(t *testing.T) {
		master := redistest.Start(t, redistest.Options{})
		redistest.Start(t, redistest.Options{Watch: master, MasterName: "main"})
		addr = master.Addr()
		// Registered after the Sentinel's start, so it runs before the
		// Sentinel is killed, as the Sentinel's own cleanup would.
		t.Cleanup(func() {
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				ln.Close()
				t.Errorf("the port of the vanished master %s was free while its Sentinel ran", addr)
			}
		})
		master.Vanish(t)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port of the vanished master is still held after its test: %v", err)
	}
	ln.Close()
}

// A proxy's Cut silences the connections it holds, neither closed nor
// answered, and lets new ones through.
func TestProxyCutSilencesItsConnections(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	p := redistest.StartProxy(t, s)
	ping := func(conn net.Conn) (string, error) {
		if err := conn.SetDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			return "", err
		}
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		buf := make([]byte, 16)
		n, err := conn.Read(buf)
		return string(buf[:n]), err
	}
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	old := dial()
	if got, err := ping(old); got != "+PONG\r\n" || err != nil {
		t.Fatalf("PING through %s: %q, %v", p, got, err)
	}
	if n := p.Cut(); n != 1 {
		t.Errorf("Cut silenced %d connections, want 1", n)
	}
	var timeout net.Error
	if got, err := ping(old); !errors.As(err, &timeout) || !timeout.Timeout() || got != "" {
		t.Errorf("PING on a cut connection: %q, %v; want no answer and no close, a timeout", got, err)
	}
	if got, err := ping(dial()); got != "+PONG\r\n" || err != nil {
		t.Errorf("PING on a connection made after the cut: %q, %v", got, err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{Cluster: true})
	if info := s.Do(t, "INFO", "cluster"); !strings.Contains(info, "cluster_enabled:1") {
		t.Errorf("INFO cluster of a server started with Cluster: %q, want cluster_enabled:1", info)
	}
}

// CloseOnNextCommand closes a connection as its client sends a command,
// unanswered, and lets new connections through.
func TestProxyCloseOnNextCommand(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	p := redistest.StartProxy(t, s)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("PING through %s: %q, %v", p, buf[:n], err)
	}
	if n := p.CloseOnNextCommand(); n != 1 {
		t.Errorf("CloseOnNextCommand marked %d connections, want 1", n)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(buf); err == nil || n != 0 {
		t.Errorf("PING on a marked connection: %q, %v; want the connection closed, unanswered", buf[:n], err)
	}
	later, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if err := later.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := later.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := later.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Errorf("PING on a connection made later: %q, %v", buf[:n], err)
	}
}
