package main

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// refusingListener is a listener that turns away every connection, as in
// a drain's last phase, with room for max refusals at once. Connections
// it would serve are closed.
func refusingListener(t *testing.T, max int) *cappedListener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cappedListener{Listener: inner, max: 100, maxRefusals: max}
	l.closing.Store(true)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	return l
}

// refusalsUnderWay is how many refusals l has under way.
func (l *cappedListener) refusalsUnderWay() int {
	l.refusalsMu.Lock()
	defer l.refusalsMu.Unlock()
	return l.refusals
}

// dialRefused dials l and waits until its refusal is under way.
func dialRefused(t *testing.T, l *cappedListener) net.Conn {
	t.Helper()
	before := l.refusalsUnderWay()
	conn := dialRaw(t, l.Addr().String())
	waitFor(t, "the refusal to begin", requestTimeout, func() bool { return l.refusalsUnderWay() == before+1 })
	return conn
}

// askHealth sends a request on conn and reads the answer.
func askHealth(t *testing.T, conn net.Conn) *http.Response {
	t.Helper()
	if _, err := conn.Write([]byte("GET /v1/stats HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the refusal: %v", err)
	}
	return resp
}

// A drain's refusals answer the request 503 once it comes, and the drain
// waits for those under way once its listener is closed; a connection
// taken after that is closed without an answer.
func TestADrainWaitsForItsRefusals(t *testing.T) {
	l := refusingListener(t, 0)
	conn := dialRefused(t, l)
	_ = l.Close()
	waited := make(chan int) // the refusals under way when the wait ended
	go func() {
		l.awaitRefusals()
		waited <- l.refusalsUnderWay()
	}()
	resp := askHealth(t, conn)
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("the refusal: %d, close %v; want 503 and Connection: close", resp.StatusCode, resp.Close)
	}
	_ = conn.Close()
	select {
	case left := <-waited:
		if left != 0 {
			t.Errorf("the drain's wait ended with %d refusals under way", left)
		}
	case <-time.After(requestTimeout):
		t.Fatal("the drain still waits for a refusal that is done")
	}
	late, server := net.Pipe()
	defer late.Close()
	l.turnAway(server, shutdownRefusal, func() {})
	if n, err := late.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("a connection turned away after the wait began: read %d bytes, %v; want it closed unanswered", n, err)
	}
}

// Beyond maxRefusals under way at once, a connection is closed without an
// answer: a flood of connections that send nothing holds no more.
func TestRefusalsUnderWayAreBounded(t *testing.T) {
	l := refusingListener(t, 2)
	first, second := dialRefused(t, l), dialRefused(t, l)
	third := dialRaw(t, l.Addr().String())
	_ = third.SetReadDeadline(time.Now().Add(requestTimeout))
	n, err := third.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection beyond 2 refusals: read %d bytes, %v; want it closed at once", n, err)
	}
	for i, conn := range []net.Conn{first, second} {
		if resp := askHealth(t, conn); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
			t.Errorf("refusal %d: %d %s; want a JSON 503", i, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// A connection turned away is answered as the API would only for a whole
// request line of a liveness probe; anything else, or a line cut short,
// gets the refusal.
func TestLivenessAnswer(t *testing.T) {
	for first, want := range map[string][]byte{
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n":        healthzAnswer,
		"GET /v2/health/live HTTP/1.1\r\n":                liveAnswer,
		"GET /healthz HTTP/1.1":                           nil, // the line not whole yet
		"GET /healthz?verbose HTTP/1.1\r\n":               nil,
		"POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n": nil,
		"GET /readyz HTTP/1.1\r\n":                        nil,
		"GET  /healthz HTTP/1.1 extra\r\n":                nil,
		"":                                                nil,
	} {
		if got := livenessAnswer([]byte(first)); !bytes.Equal(got, want) {
			t.Errorf("livenessAnswer(%q) = %q; want %q", first, got, want)
		}
	}
	// HEAD gets the head of the same answer, Content-Length and all.
	head := livenessAnswer([]byte("HEAD /healthz HTTP/1.1\r\n"))
	if !bytes.HasSuffix(head, []byte("\r\n\r\n")) || !bytes.HasPrefix(healthzAnswer, head) || !bytes.Contains(head, []byte("Content-Length: 16\r\n")) {
		t.Errorf("livenessAnswer of HEAD /healthz = %q; want the head of %q", head, healthzAnswer)
	}
}

// BenchmarkTrack is what the HTTP server does to the listener's ConnState
// hook for each request on a keep-alive connection: StateActive as the
// request is read, StateIdle once it is answered. 128 connections, as many
// goroutines as GOMAXPROCS driving them.
func BenchmarkTrack(b *testing.B) {
	l := &cappedListener{max: 4096}
	var open atomic.Int64
	conns := make([]net.Conn, 128)
	for i := range conns {
		a, _ := net.Pipe()
		conns[i] = &countedConn{Conn: a, open: &open}
		l.track(conns[i], http.StateNew)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := conns[int(next.Add(1))%len(conns)]
		for pb.Next() {
			l.track(c, http.StateActive)
			l.track(c, http.StateIdle)
		}
	})
}

// A connection listed idle on which a request has begun to arrive is not
// reclaimed for a new one over the cap: a proxy that pools its
// connections writes a request on each before it opens another, and the
// request on the connection reclaimed was lost (the proxy's client got
// 502). The new connection is refused 503 instead, and the request that
// was coming is answered. A request whose headers have been arriving for
// longer than a request sent whole takes is reclaimed all the same: a
// client that sends them a byte at a time does not hold its place.
func TestAConnectionARequestIsComingOnIsNotReclaimed(t *testing.T) {
	t.Run("coming", func(t *testing.T) { requestComingAtTheCap(t, 0, false) })
	t.Run("coming slowly", func(t *testing.T) { requestComingAtTheCap(t, time.Nanosecond, true) })
}

// requestComingAtTheCap has a request begin to arrive on the one
// connection a listener of one allows, listed idle, as another connection
// comes; arriving is the listener's time for a request to arrive (0: its
// own), and reclaimed says whether the connection should be reclaimed.
func requestComingAtTheCap(t *testing.T, arriving time.Duration, reclaimed bool) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cappedListener{Listener: inner, max: 1, reclaimAfter: time.Nanosecond, arriving: arriving}
	server := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ConnState: l.track,
	}
	go func() { _ = server.Serve(l) }()
	t.Cleanup(func() { _ = server.Close() })

	pooled := dialRaw(t, l.Addr().String())
	defer pooled.Close()
	answers := bufio.NewReader(pooled)
	ask := func(what string) {
		t.Helper()
		_ = pooled.SetReadDeadline(time.Now().Add(requestTimeout))
		resp, err := http.ReadResponse(answers, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", what, resp.StatusCode)
		}
	}
	if _, err := pooled.Write([]byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	ask("the first request")
	waitFor(t, "the connection listed idle", requestTimeout, func() bool {
		l.idleMu.Lock()
		defer l.idleMu.Unlock()
		return l.idleHead != nil
	})
	// The next request begins, its headers not whole yet, and read.
	if _, err := pooled.Write([]byte("GET /b HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request's first bytes read", requestTimeout, func() bool {
		l.idleMu.Lock()
		defer l.idleMu.Unlock()
		return l.idleHead != nil && l.idleHead.firstRead.Load() != 0
	})
	if reclaimed {
		if resp := askHealth(t, dialRaw(t, l.Addr().String())); resp.StatusCode != http.StatusOK {
			t.Errorf("a connection over the cap, the other's request arriving for longer than one takes: %d; want it served", resp.StatusCode)
		}
		if n := l.reclaimed.Load(); n != 1 {
			t.Errorf("%d connections reclaimed; want the one whose request was slow to arrive", n)
		}
		return
	}
	if resp := askHealth(t, dialRaw(t, l.Addr().String())); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a connection over the cap, none idle: %d; want 503", resp.StatusCode)
	}
	if _, err := pooled.Write([]byte("Host: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	ask("the request that was coming as a connection came over the cap")
	if n := l.reclaimed.Load(); n != 0 {
		t.Errorf("%d connections reclaimed; want none", n)
	}
}
