package httpclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"
)

// ExcerptBytes bounds the excerpt Post keeps of an answer that is not 2xx.
const ExcerptBytes = 256

// readResponse reads one HTTP/1.x answer: its status, whether the
// connection stays open, and the body, which is discarded but for the
// first ExcerptBytes of an answer that is not 2xx. Interim 1xx answers are
// skipped.
func readResponse(r *bufio.Reader) (status int, keepAlive bool, excerpt []byte, err error) {
	for first := true; ; first = false {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if first && len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
				return 0, false, nil, errNoAnswer
			}
			return 0, false, nil, fmt.Errorf("read status line: %w", err)
		}
		status, http10, err := parseStatusLine(line)
		if err != nil {
			return 0, false, nil, err
		}
		h, err := readHeader(r, http10)
		if err != nil {
			return 0, false, nil, err
		}
		if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
			continue
		}
		keep := 0
		if status < 200 || status > 299 {
			keep = ExcerptBytes
		}
		excerpt, err := h.discardBody(r, status, keep)
		return status, h.keepAlive, excerpt, err
	}
}

// parseStatusLine reads "HTTP/1.1 200 OK".
func parseStatusLine(line []byte) (status int, http10 bool, err error) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, false, fmt.Errorf("malformed status line %q", line)
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, false, fmt.Errorf("malformed status line %q", line)
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 {
		return 0, false, fmt.Errorf("malformed status line %q: no status is below 100", line)
	}
	return status, line[7] == '0', nil
}

// answerHeader is what readResponse needs of the header fields.
type answerHeader struct {
	contentLength int64 // -1: not given
	chunked       bool
	keepAlive     bool
}

// readHeader reads header lines up to the empty one.
func readHeader(r *bufio.Reader, http10 bool) (answerHeader, error) {
	h := answerHeader{contentLength: -1, keepAlive: !http10}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return h, fmt.Errorf("read header: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, fmt.Errorf("malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := parseDecimal(value)
			if !ok {
				return h, fmt.Errorf("malformed Content-Length %q", value)
			}
			h.contentLength = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			switch {
			case bytes.EqualFold(value, []byte("close")):
				h.keepAlive = false
			case bytes.EqualFold(value, []byte("keep-alive")):
				h.keepAlive = true
			}
		}
	}
}

// parseDecimal parses a non-negative decimal that fits comfortably in int64.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// discardBody reads past the body, and returns a copy of its first keep
// bytes (nil when keep is 0). An answer with neither a length nor chunks
// ends when the server closes the connection.
func (h *answerHeader) discardBody(r *bufio.Reader, status, keep int) ([]byte, error) {
	switch {
	case status == http.StatusNoContent || status == http.StatusNotModified:
		return nil, nil
	case h.chunked:
		return discardChunked(r, keep)
	case h.contentLength >= 0:
		excerpt := peek(r, int(min(h.contentLength, int64(keep))), nil)
		if _, err := r.Discard(int(h.contentLength)); err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
		return excerpt, nil
	}
	h.keepAlive = false
	excerpt := peek(r, keep, nil)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return excerpt, nil
}

// peek appends to excerpt up to n of the bytes r holds next, without
// reading past them; fewer when the stream ends first.
func peek(r *bufio.Reader, n int, excerpt []byte) []byte {
	if n <= 0 {
		return excerpt
	}
	p, _ := r.Peek(n)
	return append(excerpt, p...)
}

// discardChunked reads past a chunked body and its trailer, and returns a
// copy of the body's first keep bytes.
func discardChunked(r *bufio.Reader, keep int) ([]byte, error) {
	var excerpt []byte
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, fmt.Errorf("read chunk size: %w", err)
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		size, err := strconv.ParseInt(string(bytes.TrimSpace(sizeText)), 16, 32)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("malformed chunk size %q", line)
		}
		if size == 0 {
			break
		}
		excerpt = peek(r, min(int(size), keep-len(excerpt)), excerpt)
		if _, err := r.Discard(int(size)); err != nil {
			return nil, fmt.Errorf("read chunk: %w", err)
		}
		if line, err = r.ReadSlice('\n'); err != nil || len(bytes.TrimRight(line, "\r\n")) != 0 {
			return nil, fmt.Errorf("malformed chunk end %q: %v", line, err)
		}
	}
	for { // the trailer, up to its empty line
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, fmt.Errorf("read trailer: %w", err)
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return excerpt, nil
		}
	}
}
