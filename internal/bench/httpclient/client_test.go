package httpclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// outcome names what Post returned: the status, or the error.
func outcome(status int, _ []byte, err error) string {
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(status)
}

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    string
		status    int
		keepAlive bool
		excerpt   string // of an answer that is not 2xx
		wantErr   string
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, true, "", ""},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nTrailer: v\r\n\r\n", 200, true, "", ""},
		{"connection close", "HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", 429, false, "{}", ""},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 200, false, "", ""},
		{"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", 200, true, "", ""},
		{"interim answer skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nContent-Length: 1\r\n\r\nx", 503, true, "x", ""},
		{"no length: read to close", "HTTP/1.1 200 OK\r\n\r\nuntil the end", 200, false, "", ""},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, true, "", ""},
		{"failure chunked", "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nmodel\r\n7\r\n failed\r\n0\r\n\r\n", 500, true, "model failed", ""},
		{"failure read to close", "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n", 400, false, "Client sent an HTTP request to an HTTPS server.\n", ""},
		{"failure kept in part", "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 300\r\n\r\n" + strings.Repeat("y", 300), 413, true, strings.Repeat("y", ExcerptBytes), ""},
		{"failure chunked kept in part", "HTTP/1.1 413 Request Entity Too Large\r\nTransfer-Encoding: chunked\r\n\r\n96\r\n" + strings.Repeat("a", 150) + "\r\n96\r\n" + strings.Repeat("b", 150) + "\r\n0\r\n\r\n", 413, true, strings.Repeat("a", 150) + strings.Repeat("b", ExcerptBytes-150), ""},
		{"closed before answer", "", 0, false, "", "connection closed before the answer"},
		{"not http", "SSH-2.0-OpenSSH\r\n", 0, false, "", "malformed status line"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, false, "", "malformed Content-Length"},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, false, "", "read body"},
		{"short failure", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\nabc", 0, false, "", "read body"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, false, "", "malformed chunk size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReader(strings.NewReader(tc.answer))
			status, keepAlive, excerpt, err := readResponse(r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one that says %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.status || keepAlive != tc.keepAlive || string(excerpt) != tc.excerpt {
				t.Errorf("status %d keep-alive %v excerpt %q; want %d %v %q", status, keepAlive, excerpt, tc.status, tc.keepAlive, tc.excerpt)
			}
			if rest, _ := r.Peek(1); len(rest) != 0 {
				t.Errorf("%q left unread after the answer", rest)
			}
		})
	}
}

func TestReadResponseBackToBack(t *testing.T) {
	// Answers on a keep-alive connection follow each other; each read must
	// stop exactly at its answer's end.
	stream := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" +
		"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
	r := bufio.NewReader(strings.NewReader(stream))
	for i, want := range []int{200, 200, 500} {
		status, keepAlive, _, err := readResponse(r)
		if err != nil || status != want || !keepAlive {
			t.Fatalf("answer %d: status %d keep-alive %v err %v; want %d, true, nil", i, status, keepAlive, err, want)
		}
	}
	if _, _, _, err := readResponse(r); !errors.Is(err, errNoAnswer) {
		t.Errorf("after the last answer: %v, want errNoAnswer", err)
	}
}

func TestWireClientAgainstNetHTTP(t *testing.T) {
	body := []byte(`{"inputs":["x"]}`)
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/base/predict" || r.Header.Get("Content-Type") != "application/json" || !bytes.Equal(got, body) {
			http.Error(w, fmt.Sprintf("unexpected %s %s %q %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), got), http.StatusBadRequest)
			return
		}
		n := served.Add(1)
		switch {
		case n%5 == 0:
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusTooManyRequests)
		case n%2 == 0:
			// Flushed before the end: the answer goes out chunked.
			_, _ = w.Write([]byte(`{"outputs":[`))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte(`"x"]}`))
		default:
			_, _ = w.Write([]byte(`{"outputs":["x"]}`))
		}
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL + "/base/")
	if err != nil {
		t.Fatal(err)
	}
	c := New(u, "/predict", body, 4)
	defer c.CloseIdle()
	kinds := map[string]int{}
	for i := range 40 {
		if i == 20 {
			// Idle connections closed by the server: the next request on
			// one is sent again on a new connection, not failed.
			srv.CloseClientConnections()
		}
		kinds[outcome(c.Post(context.Background()))]++
	}
	if want := map[string]int{"200": 32, "429": 8}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("outcomes %v; want %v", kinds, want)
	}
	if served.Load() != 40 {
		t.Errorf("server answered %d requests; want 40", served.Load())
	}
}

func TestWireClientCanceledMidRequest(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	u, _ := url.Parse(srv.URL)
	c := New(u, "/predict", []byte(`{}`), 1)
	defer c.CloseIdle()
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() {
		_, _, err := c.Post(ctx)
		result <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the server")
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a request cut short by its context returns %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("send did not return after its context ended")
	}
	if n := len(c.idle); n != 0 {
		t.Errorf("%d connections kept after a canceled request; its connection is unusable", n)
	}
}

// A server that takes the request and never answers: Post gives up after
// the client's Timeout with ErrTimeout, and the connection is not kept.
func TestWireClientTimeout(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1) == 2 {
			<-release // the second request hangs
		}
	}))
	defer srv.Close()
	defer close(release)
	u, _ := url.Parse(srv.URL)
	c := New(u, "/predict", []byte(`{}`), 1)
	c.Timeout = 200 * time.Millisecond
	defer c.CloseIdle()
	if status, _, err := c.Post(context.Background()); status != http.StatusOK || err != nil {
		t.Fatalf("first Post = %d, %v; want 200", status, err)
	}
	began := time.Now()
	_, _, err := c.Post(context.Background())
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "timed out after 200ms") {
		t.Errorf("a request never answered returns %v; want ErrTimeout saying after how long", err)
	}
	if d := time.Since(began); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %s; want about the 200ms timeout", d)
	}
	if n := len(c.idle); n != 0 {
		t.Errorf("%d connections kept after a request timed out", n)
	}
	if status, _, err := c.Post(context.Background()); status != http.StatusOK || err != nil {
		t.Errorf("third Post, on a new connection = %d, %v; want 200", status, err)
	}
}
