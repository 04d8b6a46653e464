package main

// End-to-end tests of what a hostile or clumsy client can do to the server:
// connections that announce more than they send, send slowly, never read,
// or come from a browser page.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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
