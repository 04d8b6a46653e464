package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// This file holds the answers given before a body is read, or all of it,
// to clients that send the whole body before they read anything (Python's
// http.client, requests, tritonclient): over a real loopback connection,
// since what goes wrong is the connection's, not the handler's.

// unreadTimeout bounds every wait of these tests: far longer than anything
// they wait for takes, so that it only ever ends a broken run.
const unreadTimeout = 20 * time.Second

// serveLoopback serves h on a loopback port with readTimeout as the
// server's ReadTimeout, and returns its address and a channel that gets a
// value each time h returns.
func serveLoopback(t *testing.T, h http.Handler, readTimeout time.Duration) (addr string, returned <-chan struct{}) {
	t.Helper()
	done := make(chan struct{}, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }() // also when it aborts the connection
		h.ServeHTTP(w, r)
	}))
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), done
}

// rawPost is a request written by hand: head is everything before the
// body, "Host" and the blank line left out.
func rawPost(path, head string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: streamer\r\n" + head + "\r\n"
}

// sendWholeThenRead writes request and body whole before it reads
// anything, as the clients above do, then reads the answer.
func sendWholeThenRead(t *testing.T, addr, request string, body []byte) (*http.Response, []byte, error) {
	t.Helper()
	conn := dialSmallBuffer(t, addr)
	if _, err := io.WriteString(conn, request); err != nil {
		return nil, nil, fmt.Errorf("write the headers: %w", err)
	}
	if _, err := conn.Write(body); err != nil {
		return nil, nil, fmt.Errorf("write the body: %w", err)
	}
	return readAnswer(conn)
}

// dialSmallBuffer connects to addr with a send buffer far smaller than the
// bodies sent: the kernel's, grown to its bound, would take in megabytes
// of a body the server does not read, and a client that has written its
// body whole reads its answer before the server closes the connection.
// Over a network, a body far larger than the buffers does the same.
func dialSmallBuffer(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, unreadTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetWriteBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(unreadTimeout))
	return conn
}

func readAnswer(conn net.Conn) (*http.Response, []byte, error) {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// chunked encodes body as one chunk and the last.
func chunked(body []byte) []byte {
	return append(fmt.Appendf(nil, "%x\r\n%s\r\n", len(body), body), "0\r\n\r\n"...)
}

// TestAnAnswerGivenUnreadReachesAClientSendingItsWholeBody: every answer
// the handler gives without reading the body to its end (a body announced
// or found over --max-body, a full queue, a content type it cannot read, a
// route that takes no body) reaches a client that writes megabytes of
// body before it reads, where net/http alone would close the connection
// with the body unread and the client would be reset mid-send.
func TestAnAnswerGivenUnreadReachesAClientSendingItsWholeBody(t *testing.T) {
	const maxBody = 1 << 20
	over := bytes.Repeat([]byte("x"), 3*maxBody)
	within := bytes.Repeat([]byte("y"), maxBody-1000)
	open := New(Config{Backend: &fakeBackend{ready: true}, MaxBody: maxBody, Tensors: oneInput("INT8")})
	full := New(Config{Backend: &fullBackend{fakeBackend{ready: true}}, MaxBody: maxBody, Tensors: oneInput("INT8")})
	guarded := RequireToken("s3cret", open)
	for _, tc := range []struct {
		name    string
		handler http.Handler
		request string
		body    []byte
		want    int
		says    string
	}{
		{"/predict, a body announced over --max-body", open,
			rawPost("/predict", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(over))), over,
			http.StatusRequestEntityTooLarge, "limit of 1048576 bytes"},
		{"/predict, a chunked body found over --max-body", open,
			rawPost("/predict", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"), chunked(over),
			http.StatusRequestEntityTooLarge, "limit of 1048576 bytes"},
		{"v2 infer, a body announced over --max-body", open,
			rawPost("/v2/models/m/infer", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(over))), over,
			http.StatusRequestEntityTooLarge, "limit of 1048576 bytes"},
		{"/predict, the queue full", full,
			rawPost("/predict", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(within))), within,
			http.StatusTooManyRequests, "unread"},
		{"v2 infer, the queue full", full,
			rawPost("/v2/models/m/infer", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(within))), within,
			http.StatusTooManyRequests, "unread"},
		{"/predict, a content type it cannot read", open,
			rawPost("/predict", fmt.Sprintf("Content-Type: text/plain\r\nContent-Length: %d\r\n", len(within))), within,
			http.StatusUnsupportedMediaType, "text/plain"},
		{"/predict without the token", guarded,
			rawPost("/predict", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(within))), within,
			http.StatusUnauthorized, "requires a token"},
		{"v2 infer with a wrong token", guarded,
			rawPost("/v2/models/m/infer", fmt.Sprintf("Authorization: Bearer s3cre\r\nContent-Length: %d\r\n", len(within))), within,
			http.StatusUnauthorized, "not valid"},
		{"a route that takes no body", open,
			rawPost("/nowhere", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(within))), within,
			http.StatusNotFound, "/nowhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serveLoopback(t, tc.handler, unreadTimeout)
			resp, data, err := sendWholeThenRead(t, addr, tc.request, tc.body)
			if err != nil {
				t.Fatalf("want %d: %v", tc.want, err)
			}
			var e errorBody
			if resp.StatusCode != tc.want || json.Unmarshal(data, &e) != nil || !strings.Contains(e.Error, tc.says) {
				t.Fatalf("%d %s; want %d with an error saying %q", resp.StatusCode, data, tc.want, tc.says)
			}
			if tc.want == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		})
	}
}

// TestAConnectionWhoseBodyWasReadThroughServesTheNext: once an answer
// given unread is followed by the rest of its body, read and thrown away,
// the connection serves the client's next request.
// A chunked body found over the limit serves it too: it was refused with
// the connection closed (http.MaxBytesReader's doing).
func TestAConnectionWhoseBodyWasReadThroughServesTheNext(t *testing.T) {
	addr, _ := serveLoopback(t, New(Config{Backend: &fakeBackend{ready: true}, MaxBody: 1 << 20}), unreadTimeout)
	over := bytes.Repeat([]byte("x"), 2<<20)
	small := `{"inputs": ["after"]}`
	for _, first := range []string{
		rawPost("/predict", fmt.Sprintf("Content-Length: %d\r\n", len(over))) + string(over),
		rawPost("/predict", "Transfer-Encoding: chunked\r\n") + string(chunked(over)),
	} {
		conn := dialSmallBuffer(t, addr)
		go func() {
			_, _ = io.WriteString(conn, first)
			fmt.Fprintf(conn, "%s%s", rawPost("/predict", fmt.Sprintf("Content-Length: %d\r\n", len(small))), small)
		}()
		reader := bufio.NewReader(conn)
		for i, want := range []int{http.StatusRequestEntityTooLarge, http.StatusOK} {
			resp, err := http.ReadResponse(reader, nil)
			if err != nil {
				t.Fatalf("%.40q: answer %d: %v; want %d", first, i, err, want)
			}
			data, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != want {
				t.Fatalf("%.40q: answer %d: %d %s (%v); want %d", first, i, resp.StatusCode, data, err, want)
			}
		}
	}
}

// TestAClientWaitingToSendItsBodyIsAnsweredAndLetGo: a client that sent
// Expect: 100-continue and is answered without its body being asked for
// sends none, and its connection is closed with the answer. It was held
// until the read timeout, net/http waiting for a small body that would
// never come.
func TestAClientWaitingToSendItsBodyIsAnsweredAndLetGo(t *testing.T) {
	api := New(Config{Backend: &fakeBackend{ready: true}, MaxBody: 1 << 20})
	for _, tc := range []struct {
		name string
		h    http.Handler
		head string
		want int
	}{
		{"a content type it cannot read", api, "Content-Type: text/plain\r\n", http.StatusUnsupportedMediaType},
		{"a route that takes no body", api, "", http.StatusNotFound},
		{"no token", RequireToken("s3cret", api), "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serveLoopback(t, tc.h, unreadTimeout)
			conn := dialSmallBuffer(t, addr)
			path := "/predict"
			if tc.want == http.StatusNotFound {
				path = "/nowhere"
			}
			if _, err := io.WriteString(conn, rawPost(path, tc.head+"Content-Length: 1000\r\nExpect: 100-continue\r\n")); err != nil {
				t.Fatal(err)
			}
			// Well within the read timeout: a connection held until it
			// fails this.
			_ = conn.SetDeadline(time.Now().Add(unreadTimeout / 4))
			reader := bufio.NewReader(conn)
			resp, err := http.ReadResponse(reader, nil)
			if err != nil || resp.StatusCode != tc.want {
				t.Fatalf("answer: %v %v; want %d", resp, err, tc.want)
			}
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatal(err)
			}
			if n, err := reader.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("after the answer: %d bytes, %v; want the connection closed", n, err)
			}
		})
	}
}

// TestAnUnreadBodyHoldsItsHandlerNoLonger: what is left of a body
// answered unread is read no longer than the server's read timeout, and
// no further than a few times --max-body: a client that stops sending, or
// never stops, does not hold the handler, and reads its answer all the
// same.
func TestAnUnreadBodyHoldsItsHandlerNoLonger(t *testing.T) {
	const maxBody = 1 << 20
	h := New(Config{Backend: &fullBackend{fakeBackend{ready: true}}, MaxBody: maxBody})
	for _, tc := range []struct {
		name        string
		readTimeout time.Duration
		request     string
		send        func(conn net.Conn)
	}{
		{"a client that stops sending", 300 * time.Millisecond,
			rawPost("/predict", fmt.Sprintf("Content-Length: %d\r\n", maxBody)),
			func(conn net.Conn) { _, _ = conn.Write([]byte("{")) }},
		{"a client that never stops", unreadTimeout,
			rawPost("/predict", "Transfer-Encoding: chunked\r\n"),
			func(conn net.Conn) {
				chunk := chunked(bytes.Repeat([]byte(" "), 32<<10))
				chunk = chunk[:len(chunk)-len("0\r\n\r\n")]
				for {
					if _, err := conn.Write(chunk); err != nil {
						return
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, returned := serveLoopback(t, h, tc.readTimeout)
			conn := dialSmallBuffer(t, addr)
			if _, err := io.WriteString(conn, tc.request); err != nil {
				t.Fatal(err)
			}
			go tc.send(conn)
			resp, data, err := readAnswer(conn)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("answer: %v %s; want 429", err, data)
			}
			select {
			case <-returned:
			case <-time.After(unreadTimeout):
				t.Fatalf("the handler still reads the body %s after the answer", unreadTimeout)
			}
		})
	}
}

// A body that cannot be read to its end (its chunked framing broken, or
// its client silent past the read timeout) is answered and its connection
// closed: where the body would have ended is unknown, so what follows on
// the wire is no request, and must never reach the model as one.
func TestABodyThatCannotBeReadEndsItsConnection(t *testing.T) {
	const maxBody = 1 << 20
	backend := &fakeBackend{ready: true}
	api := New(Config{Backend: backend, MaxBody: maxBody})
	smuggled := rawPost("/predict", "Content-Type: application/json\r\nContent-Length: 23\r\n") + `{"inputs":["SMUGGLED"]}`
	for _, tc := range []struct {
		name        string
		h           http.Handler
		readTimeout time.Duration
		request     string
		stall       bool // wait for the answer before sending the rest
		want        int
	}{
		{"chunked, a bad chunk size", api, unreadTimeout,
			rawPost("/predict", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n") + "zz\r\n", false, http.StatusBadRequest},
		{"chunked, a bad chunk size, no token", RequireToken("s3cret", api), unreadTimeout,
			rawPost("/predict", "Transfer-Encoding: chunked\r\n") + "zz\r\n", false, http.StatusUnauthorized},
		{"chunked, a bad chunk size, behind a middleware that swallows panics", swallowPanics(api), unreadTimeout,
			rawPost("/predict", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n") + "zz\r\n", false, http.StatusBadRequest},
		{"a large body that stalls past the read timeout", api, 300 * time.Millisecond,
			rawPost("/predict", fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", smallBody+1)) + "{", true, http.StatusRequestTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serveLoopback(t, tc.h, tc.readTimeout)
			conn := dialSmallBuffer(t, addr)
			_, _, callsBefore := backend.lastRequest()
			rest := smuggled
			if !tc.stall {
				rest = tc.request + smuggled
			} else if _, err := io.WriteString(conn, tc.request); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			if !tc.stall {
				if _, err := io.WriteString(conn, rest); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("read the answer: %v", err)
			}
			data, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != tc.want {
				t.Fatalf("answer: %d %s (%v); want %d whole", resp.StatusCode, data, err, tc.want)
			}
			if tc.stall {
				// The rest of the body, then a request, on a connection
				// that must be closed by now or soon.
				_, _ = io.WriteString(conn, strings.Repeat(" ", 64)+smuggled)
			}
			if next, err := http.ReadResponse(br, nil); err == nil {
				body, _ := io.ReadAll(next.Body)
				t.Fatalf("the bytes after a broken body were served as a request: %d %s", next.StatusCode, body)
			}
			if _, _, calls := backend.lastRequest(); calls != callsBefore {
				t.Fatalf("the backend ran %d requests; want none", calls-callsBefore)
			}
		})
	}
}

// swallowPanics is a middleware of a kind common in programs that embed
// the handler: it recovers every panic and carries on.
func swallowPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { _ = recover() }()
		h.ServeHTTP(w, r)
	})
}
