package main

// End-to-end tests of the security flags of streamer serve: the bearer
// token, HTTPS with a certificate reloaded on SIGHUP, and the log level.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// authedRequest sends method path with the given Authorization header value
// (none when empty) and returns the status, headers and body.
func authedRequest(t *testing.T, s *server, method, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	var body []byte
	contentType := ""
	if method == http.MethodPost {
		body, contentType = []byte(`{"inputs": ["x"]}`), "application/json"
	}
	var header []string
	if auth != "" {
		header = []string{"Authorization", auth}
	}
	status, data, hdr, err := s.do(context.Background(), method, path, contentType, body, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return status, hdr, data
}

// checkUnauthorized fails the test unless the answer is the documented 401.
func checkUnauthorized(t *testing.T, what string, status int, hdr http.Header, body []byte) {
	t.Helper()
	if status != http.StatusUnauthorized {
		t.Errorf("%s: status %d (%s), want 401", what, status, bytes.TrimSpace(body))
		return
	}
	if got := hdr.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge", what, got)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("%s: 401 body %q is not {\"error\": \"...\"}", what, body)
	}
}

func TestSecurityAuthTokenGuardsEndpoints(t *testing.T) {
	const token = "tok-7f3a9c"
	s := startServer(t, "--workers", "1", "--model", "echo", "--auth-token", token)
	if !strings.Contains(s.logs(), "the API token is 10 characters long: a short one can be guessed") {
		t.Errorf("no warning of the short token in the log:\n%s", s.logs())
	}
	guarded := []struct{ method, path string }{
		{http.MethodPost, "/predict"},
		{http.MethodGet, "/v1/stats"},
		{http.MethodGet, "/v1/workers"},
		{http.MethodGet, "/v1/models"},
		{http.MethodGet, "/metrics"},
		{http.MethodPost, "/admin/reload"},
		{http.MethodGet, "/v2/models/echo/stats"},
		{http.MethodPost, "/v2/repository/index"},
	}
	for _, r := range guarded {
		what := r.method + " " + r.path
		status, hdr, body := authedRequest(t, s, r.method, r.path, "")
		checkUnauthorized(t, what+" without a token", status, hdr, body)
		status, hdr, body = authedRequest(t, s, r.method, r.path, "Bearer wrong-"+token)
		checkUnauthorized(t, what+" with a wrong token", status, hdr, body)
		status, hdr, body = authedRequest(t, s, r.method, r.path, "Bearer "+token[:len(token)-1])
		checkUnauthorized(t, what+" with a prefix of the token", status, hdr, body)
	}
	for _, path := range []string{"/predict", "/v1/stats"} {
		method := http.MethodGet
		if path == "/predict" {
			method = http.MethodPost
		}
		if status, _, body := authedRequest(t, s, method, path, "Bearer "+token); status != http.StatusOK {
			t.Errorf("%s %s with the token: status %d (%s), want 200", method, path, status, bytes.TrimSpace(body))
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready", "/"} {
		if status, _, body := authedRequest(t, s, http.MethodGet, path, ""); status != http.StatusOK {
			t.Errorf("GET %s without a token: status %d (%s), want 200", path, status, bytes.TrimSpace(body))
		}
	}
}

// TestSecurityAClientWithoutTheTokenHoldsNoConnectionBySendingSlowly: a
// request without the token whose body comes slowly, or not at all, is
// answered and its connection closed within seconds, not held to
// --read-timeout: its place under --max-connections is free again, for a
// client with the token. Before, a few such clients kept every client with
// the token out with 503s.
func TestSecurityAClientWithoutTheTokenHoldsNoConnectionBySendingSlowly(t *testing.T) {
	const token = "tok-slow-3e1b"
	stalls := []struct{ what, head string }{
		// A body over what Go's server reads before it answers: answered at
		// once, then read until the client stops.
		{"a large body refused for want of the token", "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n{"},
		// A small body: Go's server reads it before it sends the answer.
		{"a small body refused for want of the token", "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"},
		// A route that passes without the token and takes no body.
		{"a body sent to /healthz without the token", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx"},
	}
	s := startServer(t, "--workers", "1", "--model", "echo", "--auth-token", token,
		"--max-connections", strconv.Itoa(len(stalls)), "--read-timeout", "2m")
	conns := make([]net.Conn, len(stalls))
	for i, st := range stalls {
		conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, st.head); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		conns[i] = conn // and it sends nothing more
	}
	for i, st := range stalls {
		_ = conns[i].SetReadDeadline(time.Now().Add(20 * time.Second))
		got, err := io.ReadAll(conns[i])
		if err != nil {
			t.Errorf("%s: the server held the connection of a client that stopped sending (%v), having answered %q; want it answered and closed within seconds", st.what, err, got)
			continue
		}
		want := "HTTP/1.1 401 "
		if strings.Contains(st.head, "/healthz") {
			want = "HTTP/1.1 200 "
		}
		if !strings.HasPrefix(string(got), want) {
			t.Errorf("%s: answered %q; want %s", st.what, got, want)
		}
	}
	if status, _, body := authedRequest(t, s, http.MethodPost, "/predict", "Bearer "+token); status != http.StatusOK {
		t.Errorf("a request with the token after those: status %d (%s), want 200", status, bytes.TrimSpace(body))
	}
}

// TestSecurityTokenFileIsReadAgainOnSIGHUP: SIGHUP reads --auth-token-file
// again, and requests from then on need the token it holds; a file that
// holds no token leaves the one required. Requests refused for the token
// are counted in /metrics, and logged with their client's address.
func TestSecurityTokenFileIsReadAgainOnSIGHUP(t *testing.T) {
	const first, second = "first-token-5b0e27c1", "second-token-9d4f6a83"
	file := filepath.Join(t.TempDir(), "token")
	writeFileWhole(t, file, []byte(first+"\n"))
	s := startServer(t, "--workers", "1", "--model", "echo", "--auth-token-file", file)
	status := func(token string) int {
		t.Helper()
		status, _, _ := authedRequest(t, s, http.MethodPost, "/predict", "Bearer "+token)
		return status
	}
	if got := status(first); got != http.StatusOK {
		t.Fatalf("with the file's token: status %d, want 200", got)
	}

	writeFileWhole(t, file, []byte(second+"\n"))
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the token reloaded", readyTimeout, func() bool {
		return strings.Contains(s.logs(), `msg="API token reloaded: requests from now on need the new one" file=`+file)
	})
	if got := status(first); got != http.StatusUnauthorized {
		t.Errorf("with the token the file held before: status %d, want 401", got)
	}
	if got := status(second); got != http.StatusOK {
		t.Errorf("with the token the file holds now: status %d, want 200", got)
	}

	writeFileWhole(t, file, []byte("\n"))
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the empty file refused", readyTimeout, func() bool {
		return strings.Contains(s.logs(), `level=ERROR msg="API token not reloaded; still requiring the previous one (the files are read again every 2s until they load)" err="--auth-token-file `+file+`: the file is empty"`)
	})
	if got := status(second); got != http.StatusOK {
		t.Errorf("after a reload of an empty file: status %d, want 200 with the token required before", got)
	}

	s.token = second
	if got := metricValue(t, s, `streamer_unauthorized_total{protocol="http"}`); got != 1 {
		t.Errorf(`streamer_unauthorized_total{protocol="http"} is %v; want the one request refused`, got)
	}
	s.waitLogged(t, `level=WARN msg="HTTP request refused: a wrong token" remote=127.0.0.1:`)
}

// TestSecurityFilesChangedAreReadAgainWithoutASignal: a certificate and a
// token file replaced on disk are read again without a SIGHUP, and the
// workers are left alone: a certificate renewed every few hours does not
// reload the model.
func TestSecurityFilesChangedAreReadAgainWithoutASignal(t *testing.T) {
	const first, second = "first-token-0c5e2a97", "second-token-7b31d4f8"
	dir := t.TempDir()
	ca := newTestCA(t, "watched")
	pair := writeCertPair(t, dir, ca, 1)
	file := filepath.Join(dir, "token")
	writeFileWhole(t, file, []byte(first+"\n"))
	s := launchServer(t, "--workers", "1", "--model", "echo", "--tls-cert", pair.cert, "--tls-key", pair.key, "--auth-token-file", file)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
	status := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "https://"+s.addr+"/predict", strings.NewReader(`{"inputs": ["a"]}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST /predict over https: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	s.waitFor(t, "the server to answer over https", readyTimeout, func() bool {
		resp, err := client.Get("https://" + s.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if got := status(first); got != http.StatusOK {
		t.Fatalf("with the file's token: status %d, want 200", got)
	}

	writeCertPair(t, dir, ca, 2)
	writeFileWhole(t, file, []byte(second+"\n"))
	s.waitFor(t, "a new connection to see the new certificate", readyTimeout, func() bool {
		serial, err := servedSerial(s.addr, roots)
		return err == nil && serial == 2
	})
	s.waitLogged(t, `msg="API token reloaded: requests from now on need the new one"`)
	if got := status(second); got != http.StatusOK {
		t.Errorf("with the token the file holds now: status %d, want 200", got)
	}
	if got := status(first); got != http.StatusUnauthorized {
		t.Errorf("with the token the file held before: status %d, want 401", got)
	}
	for _, want := range []string{"TLS certificate files changed on disk: reading them again", "API token file changed on disk: reading it again"} {
		if !strings.Contains(s.logs(), want) {
			t.Errorf("the log does not say %q", want)
		}
	}

	// A certificate whose key comes seconds later: read with the old key,
	// it fails, which is said once, as a warning, not an error; it is
	// read again at each look, and served once its key is there.
	next := writeCertPair(t, t.TempDir(), ca, 3)
	read := func(path string) []byte {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	writeFileWhole(t, pair.cert, read(next.cert))
	s.waitLogged(t, `level=WARN msg="TLS certificate not reloaded; still serving the previous one (the files are read again every 2s until they load)"`)
	writeFileWhole(t, pair.key, read(next.key))
	s.waitFor(t, "the certificate served once its key came", readyTimeout, func() bool {
		serial, err := servedSerial(s.addr, roots)
		return err == nil && serial == 3
	})
	if strings.Contains(s.logs(), "level=ERROR") {
		t.Errorf("an error logged for the rotations:\n%s", s.logs())
	}
	if n := strings.Count(s.logs(), `msg="worker started"`); n != 1 || strings.Contains(s.logs(), "reload begun") {
		t.Errorf("%d workers started, and a reload begun: %v; want the one worker left alone", n, strings.Contains(s.logs(), "reload begun"))
	}
}

// TestSecurityUnauthorizedReadableByAllowedOrigin: a request without the
// token from a page of an --allow-origin gets its 401 with the CORS headers
// that let the page read it and its challenge; a page of another origin
// gets none.
func TestSecurityUnauthorizedReadableByAllowedOrigin(t *testing.T) {
	s := startServer(t, "--workers", "1", "--auth-token", "tok", "--allow-origin", "https://app.example")
	for origin, want := range map[string]string{"https://app.example": "https://app.example", "https://evil.example": ""} {
		status, body, hdr, err := s.do(context.Background(), http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["x"]}`), "Origin", origin)
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusUnauthorized || hdr.Get("Access-Control-Allow-Origin") != want ||
			strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "WWW-Authenticate") != (want != "") {
			t.Errorf("from %s without the token: %d %s, Access-Control-Allow-Origin %q, Access-Control-Expose-Headers %q; want 401 allowing %q and exposing WWW-Authenticate to it",
				origin, status, bytes.TrimSpace(body), hdr.Get("Access-Control-Allow-Origin"), hdr.Get("Access-Control-Expose-Headers"), want)
		}
	}
}

func TestSecurityAuthTokenPreflightPassesWithoutToken(t *testing.T) {
	s := startServer(t, "--workers", "1", "--auth-token", "tok", "--allow-origin", "https://app.example")
	status, body, hdr, err := s.do(context.Background(), http.MethodOptions, "/predict", "", nil,
		"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusNoContent {
		t.Fatalf("preflight: status %d (%s), want 204", status, body)
	}
	if got := hdr.Get("Access-Control-Allow-Headers"); !strings.Contains(got, "Authorization") {
		t.Errorf("preflight allows headers %q: a page could not send its token", got)
	}
}

func TestSecurityAuthTokenFromEnvAndFile(t *testing.T) {
	const token = "from-elsewhere-42"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("  "+token+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sources := []struct {
		name  string
		setup func(t *testing.T) []string // flags to pass
	}{
		{"env", func(t *testing.T) []string {
			t.Setenv(envAuthToken, token) // inherited by the server process
			return nil
		}},
		{"file", func(t *testing.T) []string { return []string{"--auth-token-file", file} }},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			s := startServer(t, append([]string{"--workers", "1"}, src.setup(t)...)...)
			status, hdr, body := authedRequest(t, s, http.MethodPost, "/predict", "")
			checkUnauthorized(t, "POST /predict without a token", status, hdr, body)
			if status, _, body := authedRequest(t, s, http.MethodPost, "/predict", "Bearer "+token); status != http.StatusOK {
				t.Errorf("POST /predict with the token: status %d (%s), want 200", status, bytes.TrimSpace(body))
			}
			// The workers, and what they start, are not handed it.
			s.token = token
			for _, w := range s.waitAllReady(t, 1) {
				if v, ok := workerEnv(t, w.PID, envAuthToken); ok {
					t.Errorf("worker %d has %s=%q in its environment; want the token kept from it", w.PID, envAuthToken, v)
				}
			}
		})
	}
}

// runServeToFailure runs streamer serve with args and env added to the
// environment (without any token variable of the test's own), expecting it
// to exit non-zero before serving; it returns the output.
func runServeToFailure(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, streamerBin, append([]string{"serve", "--listen", "127.0.0.1:0", "--workers", "1"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envAuthToken+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("streamer serve %s still ran after %s; want it to refuse to start\n%s", strings.Join(args, " "), readyTimeout, out)
	}
	if err == nil {
		t.Fatalf("streamer serve %s exited 0; want a refusal\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

func TestSecurityRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	token := filepath.Join(dir, "token")
	garbage := filepath.Join(dir, "garbage.pem")
	twoLines := filepath.Join(dir, "two-lines")
	for path, data := range map[string]string{empty: " \n", token: "t0k\n", garbage: "not a certificate\n", twoLines: "a\nb\n"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pair := writeCertPair(t, dir, newTestCA(t, "refusals"), 1)
	missing := filepath.Join(dir, "missing.pem")
	// A chain whose second certificate is cut short, as a file still being
	// written is: read as it is, it would serve the leaf alone.
	whole, err := os.ReadFile(pair.cert)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.pem")
	if err := os.WriteFile(cut, append(slices.Clone(whole), whole[:len(whole)/2]...), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string // all in the output
	}{
		{"empty token", nil, []string{"--auth-token", ""}, []string{"--auth-token is empty"}},
		{"blank token", nil, []string{"--auth-token", "  "}, []string{"--auth-token is empty"}},
		{"empty env token", []string{envAuthToken + "="}, nil, []string{"$" + envAuthToken, "empty"}},
		{"empty token file", nil, []string{"--auth-token-file", empty}, []string{"--auth-token-file", empty, "empty"}},
		{"missing token file", nil, []string{"--auth-token-file", missing}, []string{"--auth-token-file", missing}},
		// Every request would get 401: no header carries these.
		{"a token of two lines", nil, []string{"--auth-token-file", twoLines}, []string{`the API token of --auth-token-file holds '\n' at byte 1, which clients do not all send alike, or at all: want printable ASCII`}},
		// Browsers send it as Latin-1, curl as UTF-8, gRPC not at all.
		{"a token past ASCII", []string{envAuthToken + "=clé"}, nil, []string{`the API token of $` + envAuthToken + ` holds 'é' at byte 2`}},
		// What leaving the empty flag out would do depends on the others.
		{"an empty token file beside the variable", []string{envAuthToken + "=t"}, []string{"--auth-token-file", ""}, []string{"leaving the flag out takes $" + envAuthToken, "(env -u " + envAuthToken + " streamer serve ...)"}},
		{"an empty token file beside an empty variable", []string{envAuthToken + "="}, []string{"--auth-token-file", ""}, []string{"$" + envAuthToken + " is set but empty too: unset it and leave the flag out to serve without a token"}},
		{"flag and file", nil, []string{"--auth-token", "a", "--auth-token-file", token}, []string{"--auth-token and --auth-token-file", "one way only"}},
		{"env and flag", []string{envAuthToken + "=b"}, []string{"--auth-token", "a"}, []string{"--auth-token and $" + envAuthToken}},
		{"cert without key", nil, []string{"--tls-cert", pair.cert}, []string{"--tls-cert and --tls-key"}},
		{"key without cert", nil, []string{"--tls-key", pair.key}, []string{"--tls-cert and --tls-key"}},
		{"missing cert", nil, []string{"--tls-cert", missing, "--tls-key", pair.key}, []string{"--tls-cert", missing}},
		{"missing key", nil, []string{"--tls-cert", pair.cert, "--tls-key", missing}, []string{"--tls-key", missing}},
		{"garbage cert", nil, []string{"--tls-cert", garbage, "--tls-key", pair.key}, []string{"--tls-cert " + garbage}},
		{"chain cut short", nil, []string{"--tls-cert", cut, "--tls-key", pair.key}, []string{"--tls-cert " + cut, "cut short"}},
		{"bad log level", nil, []string{"--log-level", "loud"}, []string{"--log-level", "loud", "debug, info, warn or error"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := runServeToFailure(t, tc.env, tc.args...)
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output does not contain %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "listening") {
				t.Errorf("the server started listening before refusing:\n%s", out)
			}
		})
	}
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "streamer test CA " + name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

// certPair names a certificate file and its key file.
// write writes the CA's certificate, PEM, into dir and returns its path.
func (ca testCA) write(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.crt")
	writeFileWhole(t, path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
	return path
}

type certPair struct{ cert, key string }

// writeCertPair issues a server certificate for 127.0.0.1 with the given
// serial, signed by ca, and writes it and its key as PEM files in dir. It
// writes each file whole, through a rename, so that a reload never reads
// half of one.
func writeCertPair(t *testing.T, dir string, ca testCA, serial int64) certPair {
	t.Helper()
	return writeCertPairDated(t, dir, ca, serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// writeCertPairDated is writeCertPair of a certificate valid from
// notBefore to notAfter.
func writeCertPairDated(t *testing.T, dir string, ca testCA, serial int64, notBefore, notAfter time.Time) certPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair := certPair{cert: filepath.Join(dir, "server.crt"), key: filepath.Join(dir, "server.key")}
	writeFileWhole(t, pair.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	writeFileWhole(t, pair.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return pair
}

func writeFileWhole(t *testing.T, path string, data []byte) {
	t.Helper()
	replaceFile(t, path, data, 0o600)
}

// servedSerial makes a new TLS connection to addr, trusting roots, and
// returns the serial number of the certificate the server presented.
func servedSerial(addr string, roots *x509.CertPool) (int64, error) {
	dialer := &net.Dialer{Timeout: requestTimeout}
	conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// TestSecurityWarnsOfAnExpiredCertificate: a certificate served after its
// expiry, which every client refuses, is served all the same (the
// operator may be replacing it), but the log says so at once.
func TestSecurityWarnsOfAnExpiredCertificate(t *testing.T) {
	dir := t.TempDir()
	pair := writeCertPairDated(t, dir, newTestCA(t, "expired"), 1, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	s := launchServer(t, "--workers", "1", "--model", "echo", "--tls-cert", pair.cert, "--tls-key", pair.key)
	s.waitFor(t, "the server to say it serves HTTPS", readyTimeout, func() bool { return strings.Contains(s.logs(), "serving HTTPS") })
	s.waitFor(t, "the warning of the expired certificate", readyTimeout, func() bool {
		return strings.Contains(s.logs(), `level=WARN msg="TLS certificate out of date: clients that check it refuse it" cert=`+pair.cert+` err="it expired 2`)
	})
}

func TestSecurityTLSServesAndReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	firstCA, secondCA := newTestCA(t, "first"), newTestCA(t, "second")
	pair := writeCertPair(t, dir, firstCA, 101)

	s := launchServer(t, "--workers", "1", "--tls-cert", pair.cert, "--tls-key", pair.key)
	roots := x509.NewCertPool()
	roots.AddCert(firstCA.cert)
	roots.AddCert(secondCA.cert)
	// A new connection per request, so that each sees the certificate
	// served at that moment.
	client := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
	base := "https://" + s.addr
	s.waitFor(t, "the server to be ready over https", readyTimeout, func() bool {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	predict := func(what string) {
		t.Helper()
		resp, err := client.Post(base+"/predict", "application/json", strings.NewReader(`{"inputs": ["tls"]}`))
		if err != nil {
			t.Fatalf("%s: POST /predict over https: %v", what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: POST /predict over https: status %d (%s)", what, resp.StatusCode, body)
		}
	}
	predict("first certificate")

	// The only CA a client without the test's pool trusts is the system's:
	// the handshake must fail, which shows the test CA's certificate is served.
	if _, err := servedSerial(s.addr, x509.NewCertPool()); err == nil {
		t.Error("a client trusting no CA completed the handshake")
	}
	// Plain http to the TLS port is told so, in plain http.
	if status, body, err := s.get("/readyz"); err != nil || status != http.StatusBadRequest || !strings.Contains(string(body), "this port serves HTTPS") {
		t.Errorf("plain http to the TLS port: %d %q, %v; want 400 saying the port serves HTTPS", status, body, err)
	}

	writeCertPair(t, dir, secondCA, 202)
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "a new connection to see the new certificate", readyTimeout, func() bool {
		serial, err := servedSerial(s.addr, roots)
		return err == nil && serial == 202
	})
	predict("second certificate")

	writeFileWhole(t, pair.cert, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"))
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the failed reload to be logged", readyTimeout, func() bool {
		return strings.Contains(s.logs(), "TLS certificate not reloaded")
	})
	if serial, err := servedSerial(s.addr, roots); err != nil || serial != 202 {
		t.Errorf("after a failed reload: serial %d, %v; want the previous certificate, 202", serial, err)
	}
	predict("after a failed reload")

	// A path swapped for a device or a named pipe: read whole, /dev/zero
	// grew the server's memory without bound, and a pipe with no writer
	// held the reload for ever. Each is refused, and the certificate stays.
	for _, swap := range []struct {
		kind string
		make func(path string) error
	}{
		{"a device", func(path string) error { return os.Symlink("/dev/zero", path) }},
		{"a named pipe", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
	} {
		if err := os.Remove(pair.cert); err != nil {
			t.Fatal(err)
		}
		if err := swap.make(pair.cert); err != nil {
			t.Fatal(err)
		}
		if err := s.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "the reload of "+swap.kind+" refused", readyTimeout, func() bool {
			return strings.Contains(s.logs(), "--tls-cert "+pair.cert+": "+swap.kind+", not a regular file")
		})
		if serial, err := servedSerial(s.addr, roots); err != nil || serial != 202 {
			t.Errorf("after the reload of %s: serial %d, %v; want the previous certificate, 202", swap.kind, serial, err)
		}
	}
	predict("after the refused reloads")
	if s.exited() {
		t.Fatalf("the server exited on SIGHUP:\n%s", s.logs())
	}
}

// TestSecurityAReloadKeepsACertificateInItsDatesForOneOutOfThem: SIGHUP
// with an expired certificate in the files leaves the one served, which
// is in its dates; with one valid only from a few seconds on (issued by a
// machine whose clock is ahead), the one served stays until then, and the
// new one is served from then on, with no other SIGHUP.
func TestSecurityAReloadKeepsACertificateInItsDatesForOneOutOfThem(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "dates")
	pair := writeCertPair(t, dir, ca, 11)
	s := launchServer(t, "--workers", "1", "--model", "echo", "--tls-cert", pair.cert, "--tls-key", pair.key)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	serial := func() int64 {
		t.Helper()
		n, err := servedSerial(s.addr, roots)
		if err != nil {
			t.Fatalf("a TLS handshake: %v", err)
		}
		return n
	}
	s.waitFor(t, "the server to say it serves HTTPS", readyTimeout, func() bool { return strings.Contains(s.logs(), "serving HTTPS") })

	writeCertPairDated(t, dir, ca, 22, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the expired certificate refused", readyTimeout, func() bool {
		return strings.Contains(s.logs(), `level=ERROR msg="TLS certificate not reloaded: it expired 2`)
	})
	if n := serial(); n != 11 {
		t.Errorf("after a reload of an expired certificate: serial %d served; want the previous one, 11", n)
	}

	from := time.Now().Add(4 * time.Second)
	writeCertPairDated(t, dir, ca, 33, from, from.Add(time.Hour))
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the certificate not valid yet held back", readyTimeout, func() bool {
		return strings.Contains(s.logs(), `msg="TLS certificate loaded, not served yet: it is valid from`)
	})
	if n := serial(); n != 11 && time.Now().Before(from) {
		t.Errorf("before the new certificate's dates: serial %d served; want the previous one, 11", n)
	}
	s.waitFor(t, "the new certificate served once valid", readyTimeout, func() bool { return serial() == 33 })
	s.waitLogged(t, `msg="TLS certificate reloaded: it is valid from now"`)
}

func TestSecurityLogLevel(t *testing.T) {
	t.Run("warn hides info", func(t *testing.T) {
		// Not through the harness's wait for the "listening" line, which
		// this server does not write: it would wait its whole timeout.
		s := newServer(t, freePort(t), []string{"--workers", "1", "--log-level", "warn"})
		s.waitReady(t)
		if p := s.predictJSON(t, "quiet"); p.Status != http.StatusOK {
			t.Fatalf("predict: %s", p)
		}
		s.stop(t) // every line the server would write is written
		if logs := s.logs(); strings.Contains(logs, "level=INFO") {
			t.Errorf("--log-level warn wrote info lines:\n%s", logs)
		}
	})
	t.Run("debug shows info", func(t *testing.T) {
		s := startServer(t, "--workers", "1", "--log-level", "debug")
		s.waitFor(t, "the serving line", readyTimeout, func() bool {
			return strings.Contains(s.logs(), "msg=serving")
		})
	})
}
