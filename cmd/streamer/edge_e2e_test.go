package main

// End-to-end tests of what a hostile or clumsy client can do to the server:
// connections that announce more than they send, send slowly, never read,
// or come from a browser page.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// profiles reads a --pprof address's profiles.
type profiles struct {
	addr   string
	client *http.Client
}

func (p profiles) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := p.client.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, %v", path, resp.StatusCode, err)
	}
	return string(body)
}

// goroutinesIn counts the server's goroutines whose stack passes through fn.
func (p profiles) goroutinesIn(t *testing.T, fn string) int {
	dump := p.get(t, "/debug/pprof/goroutine?debug=2")
	n := 0
	for _, stack := range strings.Split(dump, "\n\n") {
		if strings.Contains(stack, fn) {
			n++
		}
	}
	return n
}

var heapInuse = regexp.MustCompile(`# HeapInuse = (\d+)`)

// heapInuse is the server's heap in use after a forced collection, in bytes.
func (p profiles) heapInuse(t *testing.T) int64 {
	m := heapInuse.FindStringSubmatch(p.get(t, "/debug/pprof/heap?debug=1&gc=1"))
	if m == nil {
		t.Fatal("no HeapInuse in the heap profile")
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

func startProfiledServer(t *testing.T, args ...string) (*server, profiles) {
	addr := freePort(t)
	s := startServer(t, append([]string{"--pprof", addr}, args...)...)
	return s, profiles{addr: addr, client: &http.Client{Timeout: requestTimeout}}
}

// dialRaw opens a TCP connection to the server, closed when the test ends.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestAnnouncedBodyLengthPinsNoMemory: connections that announce the largest
// body allowed and send one byte hold memory for the byte, not for the
// announcement, and a normal client is served meanwhile.
func TestAnnouncedBodyLengthPinsNoMemory(t *testing.T) {
	const conns = 300
	const announced = 8 << 20
	s, prof := startProfiledServer(t, "--model", "echo")
	before := prof.heapInuse(t)
	for range conns {
		conn := dialRaw(t, s.addr)
		fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", announced)
	}
	s.waitFor(t, "every connection's body being read", readyTimeout, func() bool {
		return prof.goroutinesIn(t, "httpapi.(*handler).readBody") >= conns
	})
	grown := prof.heapInuse(t) - before
	t.Logf("%d connections announcing %d bytes each: heap in use grew by %.1f MiB", conns, announced, float64(grown)/(1<<20))
	if limit := int64(conns) * announced / 20; grown > limit {
		t.Errorf("%d connections announcing %d bytes grew the heap by %d bytes; want under %d (memory must follow the bytes received)", conns, announced, grown, limit)
	}
	if p := s.predictJSON(t, "meanwhile"); p.Status != http.StatusOK {
		t.Fatalf("a normal request meanwhile: %s", p)
	}
}

// readRawResponse reads one HTTP response from conn.
func readRawResponse(conn net.Conn) (*http.Response, []byte, error) {
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// TestSlowBodyIsCutOffAtTheReadTimeout: a client that sends its body a byte
// at a time is answered 408 once --read-timeout has passed, while a normal
// client is served meanwhile.
func TestSlowBodyIsCutOffAtTheReadTimeout(t *testing.T) {
	s := startServer(t, "--model", "echo", "--read-timeout", "1s")
	conn := dialRaw(t, s.addr)
	fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	answered := make(chan error, 1)
	var resp *http.Response
	var body []byte
	go func() {
		var err error
		resp, body, err = readRawResponse(conn)
		answered <- err
	}()
	start := time.Now()
	trickle := time.NewTicker(100 * time.Millisecond)
	defer trickle.Stop()
	for sending := true; sending; {
		select {
		case err := <-answered:
			if err != nil {
				t.Fatalf("no answer to the slow body: %v", err)
			}
			sending = false
		case <-trickle.C:
			_, _ = conn.Write([]byte(" ")) // JSON allows the space
			if time.Since(start) > 10*time.Second {
				t.Fatal("a body sent a byte per 100ms was still being read after 10s with --read-timeout 1s")
			}
		}
	}
	if resp.StatusCode != http.StatusRequestTimeout || !isJSONError(body) {
		t.Fatalf("slow body answered %d %s; want 408 with a JSON error", resp.StatusCode, body)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("cut off after %s, before the read timeout of 1s", took)
	}
	if p := s.predictJSON(t, "normal"); p.Status != http.StatusOK {
		t.Fatalf("a normal request: %s", p)
	}
}

// TestLongInferenceOutlivesTheReadTimeout: --read-timeout bounds sending the
// request, not waiting for the model.
func TestLongInferenceOutlivesTheReadTimeout(t *testing.T) {
	s := startServer(t, "--model", "sleep:1500ms,0s", "--read-timeout", "500ms")
	if p := s.predictJSON(t, "slow model"); p.Status != http.StatusOK {
		t.Fatalf("a request whose model takes 1.5s with --read-timeout 500ms: %s", p)
	}
}

// TestIdleKeepAliveConnectionIsClosed: a keep-alive connection left idle is
// closed by the server after --idle-timeout.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	s := startServer(t, "--model", "echo", "--idle-timeout", "500ms")
	conn := dialRaw(t, s.addr)
	// Taken before the request: the server's idle time begins after its
	// answer, and a stalled test must not make it look shorter.
	idleSince := time.Now()
	fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"inputs\":[1]}\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("first request: status %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF from the server closing it", err)
	}
	if idle := time.Since(idleSince); idle < 400*time.Millisecond {
		t.Errorf("closed after %s idle, before --idle-timeout 500ms", idle)
	}
	// The client's own kept-alive connections were idle as long, and the
	// server closes them too: a POST on one it just closed is not retried.
	s.client.CloseIdleConnections()
	if p := s.predictJSON(t, "normal"); p.Status != http.StatusOK {
		t.Fatalf("a normal request: %s", p)
	}
}

// TestClientThatNeverReadsIsDropped: a client that sends a request for a
// large answer and never reads it is dropped once --write-timeout has
// passed, and its goroutine does not stay behind.
func TestClientThatNeverReadsIsDropped(t *testing.T) {
	s, prof := startProfiledServer(t, "--model", "echo", "--write-timeout", "1s", "--max-body", "40000000")
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := dialer.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	item := strings.Repeat("x", 30<<20)
	body := `{"inputs":["` + item + `"]}`
	fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	const writer = "httpapi.(*handler).writeBody"
	s.waitFor(t, "the answer's write to block", requestTimeout, func() bool { return prof.goroutinesIn(t, writer) == 1 })
	s.waitFor(t, "the stuck writer to be dropped", 10*time.Second, func() bool { return prof.goroutinesIn(t, writer) == 0 })
	got, _ := io.Copy(io.Discard, conn)
	if got >= int64(len(item)) {
		t.Errorf("the client read %d bytes, the whole answer: it was not dropped", got)
	}
	if p := s.predictJSON(t, "normal"); p.Status != http.StatusOK {
		t.Fatalf("a normal request: %s", p)
	}
}

// TestAClientThatPipelinesAndNeverReadsGivesItsPlace: clients that
// pipeline requests answered at once (the status page; a 401 without the
// token, which asks nothing of them) and never read their answers are
// dropped once --write-timeout has passed, and give their places at
// --max-connections to clients that read; before, their writes waited for
// good, and two such clients locked everyone out.
func TestAClientThatPipelinesAndNeverReadsGivesItsPlace(t *testing.T) {
	s := startServer(t, "--model", "echo", "--max-connections", "2", "--write-timeout", "1s", "--auth-token", "s3cret")
	s.token = "s3cret"
	s.client.CloseIdleConnections()
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	for _, path := range []string{"/", "/v1/stats"} {
		conn, err := dialer.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		requests := strings.Repeat("GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n", 20000)
		go func() { _, _ = io.WriteString(conn, requests) }() // ends when the server drops it
	}
	servedAtTheCap(t, s)
}

// TestConnectionsBeyondTheCapAreRefused: with --max-connections open, none
// of them idle, one more connection is answered 503 with a JSON error and
// closed, once its request has begun to come (an answer before it is
// dropped by Go's client as a response to no request); once a connection
// closes, a new one is served.
func TestConnectionsBeyondTheCapAreRefused(t *testing.T) {
	const limit = 4
	s := startServer(t, "--model", "echo", "--max-connections", strconv.Itoa(limit))
	held := holdConnections(t, s, limit)
	for _, conn := range held {
		// Busy: a request whose body is on its way.
		fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	}
	extra := dialRaw(t, s.addr)
	_ = extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := extra.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection over the cap, before its request: read %d bytes, %v; want nothing until the request", n, err)
	}
	fmt.Fprintf(extra, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body, err := readRawResponse(extra)
	if err != nil {
		t.Fatalf("connection over the cap: %v; want a 503 answer", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || !isJSONError(body) || !strings.Contains(string(body), "--max-connections") {
		t.Fatalf("connection over the cap: %d close=%v %s; want 503, Connection: close and a JSON error naming --max-connections", resp.StatusCode, resp.Close, body)
	}
	// Go's client, on new connections, is told as much each time.
	fresh := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	// But for a liveness probe, which a full server passes: refused, it
	// had an orchestrator kill a server for being busy.
	for path, want := range map[string]string{"/healthz": `{"status":"ok"}`, "/v2/health/live": `{"live":true}`} {
		resp, err := fresh.Get(s.URL() + path)
		if err != nil {
			t.Fatalf("GET %s over the cap: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Errorf("GET %s over the cap: %d %s; want 200 %s, as the API answers it", path, resp.StatusCode, body, want)
		}
	}
	if resp, err := fresh.Get(s.URL() + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz over the cap: %v %v; want 503: not ready to take more", resp, err)
	} else {
		resp.Body.Close()
	}
	for i := range 50 {
		resp, err := fresh.Post(s.URL()+"/predict", "application/json", strings.NewReader(`{"inputs": ["x"]}`))
		if err != nil {
			t.Fatalf("request %d over the cap: %v; want a 503 answer", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("request %d over the cap: %d, Retry-After %q; want 503 with Retry-After", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	held[0].Close()
	s.waitFor(t, "a freed place to be served", readyTimeout, func() bool {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"after"}})
		return err == nil && p.Status == http.StatusOK
	})
}

// holdConnections opens n connections to s, each served one request and
// then idle, closed when the test ends. The readiness probe's connection
// is closed first.
func holdConnections(t *testing.T, s *server, n int) []net.Conn {
	t.Helper()
	s.client.CloseIdleConnections()
	held := make([]net.Conn, n)
	for i := range held {
		// Each is served, so it is counted before the next is opened.
		s.waitFor(t, "a held connection to be served", readyTimeout, func() bool {
			conn, err := net.DialTimeout("tcp", s.addr, requestTimeout)
			if err != nil {
				return false
			}
			if healthyOn(conn) != nil {
				conn.Close()
				return false
			}
			held[i] = conn
			return true
		})
		t.Cleanup(func() { held[i].Close() })
	}
	return held
}

// TestAnIdleConnectionMakesRoomAtTheCap: with --max-connections open, all
// idle between requests (a client holding them to keep others out, or a
// pool larger than it needs), a new connection takes the place of the one
// idle longest, once it has been for a second: the others stay open and
// served.
func TestAnIdleConnectionMakesRoomAtTheCap(t *testing.T) {
	const limit = 4
	s := startServer(t, "--model", "echo", "--max-connections", strconv.Itoa(limit))
	held := holdConnections(t, s, limit)
	// The others serve requests for a while after the first went idle, so
	// that the first is idle longest by that while: one answer apart, the
	// server could see the first two go idle in either order (it says a
	// connection is idle a moment after its answer is sent, and a run
	// under load saw the second closed).
	for until := time.Now().Add(200 * time.Millisecond); time.Now().Before(until); {
		for i, conn := range held[1:] {
			if err := healthyOn(conn); err != nil {
				t.Fatalf("held connection %d: %v", i+1, err)
			}
		}
	}
	servedAtTheCap(t, s)
	_ = held[0].SetReadDeadline(time.Now().Add(requestTimeout))
	if n, err := held[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection idle longest: read %d bytes, %v; want it closed", n, err)
	}
	for i, conn := range held[1:] {
		if err := healthyOn(conn); err != nil {
			t.Errorf("held connection %d after the new client: %v; want it open and served", i+1, err)
		}
	}
}

// healthyOn sends GET /v1/models on conn and reads its answer: an error
// unless it is 200, which says the connection is served. Not /healthz: a
// liveness probe is answered 200 on a connection turned away at the cap
// too, which is then closed.
func healthyOn(conn net.Conn) error {
	fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _, err := readRawResponse(conn)
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET /v1/models: status %d", resp.StatusCode)
	}
	return nil
}

// TestASilentConnectionMakesRoomAtTheCap: with --max-connections open
// that have sent nothing since they opened (a flood that sends no
// request), a new client is served once one has been silent a second,
// not only once they reach the server's 10 s header timeout.
func TestASilentConnectionMakesRoomAtTheCap(t *testing.T) {
	const limit = 4
	s := startServer(t, "--model", "echo", "--max-connections", strconv.Itoa(limit))
	s.client.CloseIdleConnections()
	began := time.Now()
	for range limit {
		conn := dialRaw(t, s.addr)
		t.Cleanup(func() { conn.Close() })
	}
	servedAtTheCap(t, s)
	if took := time.Since(began); took > 8*time.Second {
		t.Errorf("a new client was served %s after the silent connections opened; want it once one had been silent a second, before the header timeout of 10 s", took)
	}
}

// servedAtTheCap waits until a new client is served by s, its
// --max-connections open: answered 503 naming the cap until one of them
// has been idle a second, then 200.
func servedAtTheCap(t *testing.T, s *server) {
	t.Helper()
	fresh := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	s.waitFor(t, "a new client to be served at the cap", readyTimeout, func() bool {
		req, err := http.NewRequest(http.MethodPost, s.URL()+"/predict", strings.NewReader(`{"inputs": ["new"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if s.token != "" {
			req.Header.Set("Authorization", "Bearer "+s.token)
		}
		resp, err := fresh.Do(req)
		if err != nil {
			t.Fatalf("a new client at the cap: %v; want an answer", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true
		case http.StatusServiceUnavailable: // none idle for a second yet
			if !strings.Contains(string(body), "--max-connections") {
				t.Fatalf("a new client at the cap: 503 %s; want the cap named", body)
			}
			return false
		}
		t.Fatalf("a new client at the cap: %d %s; want 200, or 503 until a connection has been idle a second", resp.StatusCode, body)
		return false
	})
}

// TestPprofBeyondLoopbackIsWarnedAbout: --pprof on an address other
// machines can reach starts, with a warning naming the address.
func TestPprofBeyondLoopbackIsWarnedAbout(t *testing.T) {
	s := startServer(t, "--model", "echo", "--pprof", "0.0.0.0:0")
	if !strings.Contains(s.logs(), "--pprof listens beyond this machine") || !strings.Contains(s.logs(), "pprof=0.0.0.0:") {
		t.Fatalf("no warning naming the --pprof address in:\n%s", s.logs())
	}
	loop := startServer(t, "--model", "echo", "--pprof", "127.0.0.1:0")
	if strings.Contains(loop.logs(), "beyond this machine") {
		t.Fatalf("a loopback --pprof was warned about:\n%s", loop.logs())
	}
}

// isJSONError reports whether body is {"error": "..."} with a message.
func isJSONError(body []byte) bool {
	var e struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error != ""
}

// TestBrowserPageCannotRunInference: a form POST from a web page (it
// carries an Origin header) is refused unless --allow-origin names the
// page's origin; the allowed origin's preflight and request are answered.
func TestBrowserPageCannotRunInference(t *testing.T) {
	s := startServer(t, "--model", "echo", "--allow-origin", "https://app.example")
	form := []byte("s=hello")
	status, body, _ := s.post(t, "application/x-www-form-urlencoded", form, "Origin", "https://evil.example")
	if status != http.StatusForbidden || !isJSONError(body) || !strings.Contains(string(body), "evil.example") {
		t.Fatalf("form POST from evil.example: %d %s; want 403 with a JSON error naming the origin", status, body)
	}
	if st := s.stats(t); st.Submitted != 0 {
		t.Fatalf("the refused request reached the model: %+v", st)
	}
	status, _, hdr, err := s.do(t.Context(), http.MethodOptions, "/predict", "", nil,
		"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type")
	if err != nil || status != http.StatusNoContent || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("preflight of the allowed origin: %d %v %v", status, hdr, err)
	}
	status, body, hdr = s.post(t, "application/x-www-form-urlencoded", form, "Origin", "https://app.example")
	if status != http.StatusOK || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("form POST from the allowed origin: %d %s %v", status, body, hdr)
	}
}

// TestSIGTERMUnderLoadAnswersEveryRequest: clients on keep-alive
// connections keep sending while SIGTERM arrives. Every request that reached
// the server gets a whole answer: 200, or 503 with Connection: close, after
// which a client moves off; none sees its connection closed under it. The
// process exits 0.
func TestSIGTERMUnderLoadAnswersEveryRequest(t *testing.T) {
	const clients = 48
	s := startServer(t, "--model", "echo", "--workers", "1")
	var ok, refused, lost atomic.Int64
	var firstLost atomic.Value
	var wg sync.WaitGroup
	body := []byte(`{"inputs": ["last moments"]}`)
	for range clients {
		wg.Go(func() {
			client := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for {
				resp, err := client.Post(s.URL()+"/predict", "application/json", bytes.NewReader(body))
				if err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) {
						return // the server is gone: the request never reached it
					}
					lost.Add(1)
					firstLost.CompareAndSwap(nil, err.Error())
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					lost.Add(1)
					firstLost.CompareAndSwap(nil, "reading the answer: "+err.Error())
					return
				case resp.StatusCode == http.StatusOK:
					ok.Add(1)
				case resp.StatusCode == http.StatusServiceUnavailable && resp.Close:
					refused.Add(1)
					return
				default:
					lost.Add(1)
					firstLost.CompareAndSwap(nil, fmt.Sprintf("status %d, close %v", resp.StatusCode, resp.Close))
					return
				}
			}
		})
	}
	s.waitFor(t, "load to be running", readyTimeout, func() bool { return ok.Load() > 2000 })
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	code, err := s.wait(stopTimeout)
	if err != nil || code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, err)
	}
	t.Logf("%d answered 200, %d answered 503 and closed, %d lost", ok.Load(), refused.Load(), lost.Load())
	if n := lost.Load(); n > 0 {
		t.Fatalf("%d requests got no whole answer; the first: %v", n, firstLost.Load())
	}
}

// TestErrorsAtTheProtocolEdge: what the server answers to requests that are
// wrong at the HTTP level. The ones our handler sees are JSON; the ones
// net/http refuses before any handler runs (a malformed Content-Length) are
// its own plain-text answers, as the README says, and the server keeps
// serving either way.
func TestErrorsAtTheProtocolEdge(t *testing.T) {
	s := startServer(t, "--model", "echo", "--max-body", "1000")
	big := strings.Repeat("x", 5000)
	tests := []struct {
		name     string
		request  string
		status   int
		wantJSON bool
	}{
		{"chunked body over --max-body", "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big), http.StatusRequestEntityTooLarge, true},
		{"announced length over --max-body", "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n", http.StatusRequestEntityTooLarge, true},
		{"body shorter than announced", "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{", http.StatusBadRequest, true},
		{"unknown route", "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusNotFound, true},
		{"malformed Content-Length (net/http's own answer)", "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", http.StatusBadRequest, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialRaw(t, s.addr)
			if strings.Contains(tc.request, "Connection: close") {
				// The body never comes: shut the sending side so the
				// server sees it end short.
				go func() {
					_, _ = io.WriteString(conn, tc.request)
					_ = conn.(*net.TCPConn).CloseWrite()
				}()
			} else {
				go func() { _, _ = io.WriteString(conn, tc.request) }()
			}
			resp, body, err := readRawResponse(conn)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || isJSONError(body) != tc.wantJSON {
				t.Fatalf("status %d, body %q; want %d, JSON error %v", resp.StatusCode, body, tc.status, tc.wantJSON)
			}
			if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
				t.Fatalf("the server keeps serving: %s", p)
			}
		})
	}
}

// TestABodyOverTheLimitSentWholeGetsItsAnswer: a client that writes its
// whole body before it reads anything, as Python's http.client, requests
// and tritonclient do, reads the 413 of a body over --max-body, rather
// than being reset while it sends; and the server keeps serving.
func TestABodyOverTheLimitSentWholeGetsItsAnswer(t *testing.T) {
	s := startServer(t, "--model", "echo", "--max-body", "1000000")
	body := bytes.Repeat([]byte("x"), 3_000_000)
	conn := dialRaw(t, s.addr)
	// A send buffer far smaller than the body, as a network's would be:
	// the kernel's own, grown to its bound, would take in a few megabytes
	// the server never reads, and the client would read its answer before
	// the reset.
	if err := conn.(*net.TCPConn).SetWriteBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(requestTimeout))
	fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := conn.Write(body); err != nil {
		t.Fatalf("the server stopped the body of a request over --max-body: %v; want its 413 once sent", err)
	}
	resp, answer, err := readRawResponse(conn)
	if err != nil {
		t.Fatalf("no answer to a body over --max-body sent whole: %v", err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !isJSONError(answer) || !strings.Contains(string(answer), "1000000 bytes") {
		t.Fatalf("%d %s; want 413 with a JSON error naming the limit", resp.StatusCode, answer)
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Fatalf("the server keeps serving: %s", p)
	}
}

// TestABodyAnnouncedFarOverTheLimitGetsItsAnswer: a body announced past
// four times --max-body, which the server does not read through, is
// answered 413 all the same to a client that writes it whole before it
// reads, as a proxy does: the server shuts down writing and reads what
// comes for a moment before it closes, where the close had reset the
// connection, and the answer with it (nginx answered its client 502). So
// for a request that asks to close the connection (nginx's default), which
// Go's server closes at once, and for one that does not.
func TestABodyAnnouncedFarOverTheLimitGetsItsAnswer(t *testing.T) {
	s := startServer(t, "--model", "echo", "--max-body", "100000")
	// More than the kernel's buffers take in at their largest, sent at
	// the speed of a proxy on a network: a few milliseconds on loopback.
	body := bytes.Repeat([]byte("x"), 16<<20)
	for _, connection := range []string{"close", "keep-alive"} {
		conn := dialRaw(t, s.addr)
		_ = conn.SetWriteDeadline(time.Now().Add(requestTimeout))
		fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: x\r\nConnection: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", connection, len(body))
		if _, err := conn.Write(body); err != nil {
			t.Errorf("Connection: %s: the server reset the body of a request far over --max-body: %v; want its 413 once sent", connection, err)
			continue
		}
		resp, answer, err := readRawResponse(conn)
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || !isJSONError(answer) {
			t.Errorf("Connection: %s: %v, %v %s; want 413 with a JSON error", connection, err, resp, answer)
		}
	}
	// An answer of no length, sent chunked (/metrics), is ended whole
	// before its connection is closed: closed the same way, it lost its
	// last chunk.
	conn := dialRaw(t, s.addr)
	fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET /metrics announcing a body far over the limit: %v", err)
	}
	metrics, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Contains(metrics, []byte("streamer_")) {
		t.Errorf("GET /metrics announcing a body far over the limit: %d, %d bytes, %v; want the whole answer", resp.StatusCode, len(metrics), err)
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Fatalf("the server keeps serving: %s", p)
	}
}

// rssBytes is a process's resident memory.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// postDiscarding posts body as JSON to /predict with client and reads the
// answer into nothing, returning its length: the burst's answers, kept
// whole by a test built with the race detector, took it longer to take in
// than the server to send (21 s against 10 s for 48 of 4 MiB), close to the
// client's timeout on a loaded machine.
func postDiscarding(s *server, client *http.Client, body []byte) (int64, error) {
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/predict", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return n, err
}

// TestMemoryIsGivenBackAfterABurst: after a burst of large requests, an idle
// server returns the burst's memory to the system by itself, within a few
// seconds rather than at the runtime's periodic collection minutes later.
func TestMemoryIsGivenBackAfterABurst(t *testing.T) {
	// The model holds each batch a while, so that the burst's requests are
	// all in memory at once, however slow the machine. The burst's 200 MiB
	// of answers took 16 s to send and read on a loaded VM, and once, at a
	// load average of 10, over 30 s: the server's write timeout and the
	// client's are set well past that, as the test is of memory, not speed.
	const burstTimeout = 2 * time.Minute
	s := startServer(t, "--model", "sleep:300ms,0s", "--workers", "1", "--max-body", "10000000",
		"--write-timeout", burstTimeout.String())
	client := &http.Client{Timeout: burstTimeout}
	pid := s.cmd.Process.Pid
	base := rssBytes(t, pid)
	body := []byte(`{"inputs": ["` + strings.Repeat("m", 4<<20) + `"]}`)
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			if n, err := postDiscarding(s, client, body); err != nil || n < 4<<20 {
				t.Errorf("burst request: %d bytes of answer, %v", n, err)
			}
		})
	}
	// The peak is sampled while the burst runs: on a slow machine the
	// server may be idle, and give memory back, before the last client has
	// read its answer.
	burstDone := make(chan struct{})
	peaked := make(chan int64)
	go func() {
		peak := rssBytes(t, pid)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, rssBytes(t, pid))
			select {
			case <-burstDone:
				peaked <- peak
				return
			case <-tick.C:
			}
		}
	}()
	wg.Wait()
	close(burstDone)
	peak := <-peaked
	if peak < base+100<<20 {
		t.Fatalf("the burst raised RSS from %d MiB to only %d MiB: nothing to give back", base>>20, peak>>20)
	}
	curve := []string{fmt.Sprintf("0s:%d", peak>>20)}
	defer func() {
		t.Logf("RSS before the burst %d MiB; after it, seconds:MiB %s", base>>20, strings.Join(curve, " "))
	}()
	start, noted := time.Now(), time.Now()
	s.waitFor(t, "the burst's memory to be given back", 20*time.Second, func() bool {
		rss := rssBytes(t, pid)
		given := rss < base+(peak-base)/4
		if given || time.Since(noted) >= 500*time.Millisecond {
			noted = time.Now()
			curve = append(curve, fmt.Sprintf("%.1fs:%d", time.Since(start).Seconds(), rss>>20))
		}
		return given
	})
}

// TestIdleServerKeepsNoBatchBuffers: after a burst of batches of nearly
// 4 MiB, an idle server's heap in use is back within seconds to what it
// was before, with no collection forced from outside. (Before, the encoder
// of each worker's pipe kept a buffer as large as the largest batch sent
// to it, up to 4 MiB, for the server's life: 32 MiB for 8 workers.)
func TestIdleServerKeepsNoBatchBuffers(t *testing.T) {
	const workers = 2
	s := startServer(t, "--model", "echo", "--workers", strconv.Itoa(workers))
	s.waitAllReady(t, workers)
	before := heapInUse(t, s)
	// A batch of 64 items of 60 kB is a frame of 3.8 MB.
	body, err := json.Marshal(map[string]any{"inputs": slices.Repeat([]string{strings.Repeat("a", 60000)}, 64)})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: requestTimeout}
	var wg sync.WaitGroup
	for range 4 * workers {
		wg.Go(func() {
			for range 2 {
				if n, err := postDiscarding(s, client, body); err != nil || n < 64*60000 {
					t.Errorf("burst request: %d bytes of answer, %v", n, err)
				}
			}
		})
	}
	wg.Wait()
	var heap float64
	defer func() {
		t.Logf("heap in use before the burst %.1f MiB, at the end of the wait %.1f MiB", before/(1<<20), heap/(1<<20))
	}()
	s.waitFor(t, "the heap in use to be back to its size before the burst", 20*time.Second, func() bool {
		heap = heapInUse(t, s)
		return heap < before+3<<20
	})
}

// heapInUse is the server's heap in use, as its /metrics says, in bytes.
func heapInUse(t *testing.T, s *server) float64 {
	t.Helper()
	const series = "go_memstats_heap_inuse_bytes "
	status, body, err := s.get("/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", status, err)
	}
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, series); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

// TestConnectionsTurnedAwayAreCountedAndLogged: connections turned away
// at --max-connections never reach the API, so its count of requests
// misses them: /metrics counts them in streamer_connections_refused_total,
// one for each, and the log warns of them once, holding back the lines
// that repeat. (Before, a server refusing every new client showed it in
// no metric and no line.)
func TestConnectionsTurnedAwayAreCountedAndLogged(t *testing.T) {
	// The slow request runs 5 s: the connections below are all turned
	// away while it runs, even on a loaded machine; once it is answered
	// and its connection idle, a newcomer would take its place.
	s := startServer(t, "--model", "sleep:5s,0", "--max-connections", "1")
	held := holdConnections(t, s, 1)[0]
	before := refusedOverCap(t, held)
	// The only connection is busy with a slow request: none is idle to
	// give its place.
	fmt.Fprintf(held, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"inputs\": [\"a\"]}\n")
	const turnedAway = 5
	fresh := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range turnedAway {
		resp, err := fresh.Get(s.URL() + "/v1/models")
		if err != nil {
			t.Fatalf("request %d over the cap: %v; want a 503 answer", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d over the cap: %d; want 503", i, resp.StatusCode)
		}
	}
	// A liveness probe so turned away is answered 200: it refused nothing.
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, s.URL()+"/healthz", nil)
		resp, err := fresh.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /healthz over the cap: %v %v; want 200", method, resp, err)
		}
		resp.Body.Close()
	}
	if resp, body, err := readRawResponse(held); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the slow request: %v %v %s; want 200", resp, err, body)
	}
	if got := refusedOverCap(t, held) - before; got != turnedAway {
		t.Errorf("streamer_connections_refused_total{reason=\"over_cap\"} grew by %d; want %d, one for each connection turned away, none for the probes answered", got, turnedAway)
	}
	// One line for the connections turned away at once, the others held back.
	s.waitLog(t, `level=WARN msg="connection refused: --max-connections are open`, 1)
}

// refusedOverCap scrapes GET /metrics on conn, an open connection to the
// server, and returns its count of connections turned away over the cap.
func refusedOverCap(t *testing.T, conn net.Conn) int {
	t.Helper()
	fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body, err := readRawResponse(conn)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", resp, err)
	}
	const series = `streamer_connections_refused_total{reason="over_cap"} `
	for line := range strings.Lines(string(body)) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), series); ok {
			n, err := strconv.Atoi(value)
			if err != nil {
				t.Fatalf("GET /metrics: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("GET /metrics has no %s:\n%s", strings.TrimSpace(series), body)
	return 0
}
