package httpclient

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// FuzzReadResponse: whatever a server sends, the reader returns an error
// or an answer that holds together (a final status of three digits, no
// excerpt of a success, none longer than ExcerptBytes), and never panics
// or reads without end.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nTrailer: v\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
		"HTTP/1.1 413 Request Entity Too Large\r\nTransfer-Encoding: chunked\r\n\r\n96\r\n" + strings.Repeat("a", 150) + "\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\n",
		"HTTP/1.1 500 x\r\nTransfer-Encoding: chunked\r\n\r\n7fffffff\r\n",
		"SSH-2.0-OpenSSH\r\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		status, _, excerpt, err := readResponse(bufio.NewReader(strings.NewReader(answer)))
		if err != nil {
			return
		}
		switch {
		case status < 100 || status > 999 || status < 200 && status != http.StatusSwitchingProtocols:
			t.Errorf("status %d from %q", status, answer)
		case len(excerpt) > ExcerptBytes:
			t.Errorf("an excerpt of %d bytes, over %d", len(excerpt), ExcerptBytes)
		case status >= 200 && status <= 299 && excerpt != nil:
			t.Errorf("a %d kept an excerpt %q", status, excerpt)
		}
	})
}

// FuzzReadResponseOfNetHTTP: an answer as net/http writes it, with a
// length or in chunks, is read as what it says: its status, whether the
// connection stays open, and the start of the body of a failure.
func FuzzReadResponseOfNetHTTP(f *testing.F) {
	f.Add(200, []byte("hello"), false, true)
	f.Add(429, []byte(`{"error":"the queue is full"}`), true, true)
	f.Add(413, bytes.Repeat([]byte("y"), 300), true, false)
	f.Add(500, []byte{}, false, false)
	f.Fuzz(func(t *testing.T, status int, body []byte, chunked, keepAlive bool) {
		if status < 200 || status > 599 || status == http.StatusNoContent || status == http.StatusNotModified {
			return
		}
		resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Close: !keepAlive,
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if chunked {
			resp.ContentLength, resp.TransferEncoding = -1, []string{"chunked"}
		}
		var wire bytes.Buffer
		if err := resp.Write(&wire); err != nil {
			t.Skip(err)
		}
		wire.WriteString("HTTP/1.1 204 No Content\r\n\r\n") // the next answer
		r := bufio.NewReader(&wire)
		gotStatus, gotKeep, excerpt, err := readResponse(r)
		if err != nil {
			t.Fatalf("%v reading %q", err, wire.String())
		}
		var want []byte
		if status > 299 {
			want = body[:min(len(body), ExcerptBytes)]
		}
		if gotStatus != status || gotKeep != keepAlive || !bytes.Equal(excerpt, want) {
			t.Errorf("read %d, keep-alive %v, excerpt %q; want %d, %v, %q", gotStatus, gotKeep, excerpt, status, keepAlive, want)
		}
		if next, _, _, err := readResponse(r); err != nil || next != http.StatusNoContent {
			t.Errorf("the answer after it read as %d, %v: the body was not read to its end", next, err)
		}
	})
}
