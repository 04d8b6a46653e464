package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ReplyError is an error reply from the server, such as
// "NOAUTH Authentication required." or "WRONGTYPE Operation against a key
// holding the wrong kind of value". Callers tell it from a failed connection
// with errors.As.
type ReplyError struct {
	// Message is the reply's text as sent, starting with the error code.
	Message string
}

func (e *ReplyError) Error() string { return e.Message }

// maxBulkLen is Redis's own default limit on a bulk string
// (proto-max-bulk-len); a longer one means the stream is not RESP.
const maxBulkLen = 512 << 20

// maxReplyDepth bounds how deeply arrays may nest, so a hostile or corrupt
// stream cannot recurse without limit; no Redis reply comes close.
const maxReplyDepth = 32

// reply is one RESP2 value as read off the wire.
type reply struct {
	kind  byte    // '+', '-', ':', '$' or '*'
	text  string  // the line, the integer's digits or the bulk string
	null  bool    // "$-1" or "*-1"
	elems []reply // an array's elements
}

// writeCommand writes args as a RESP array of bulk strings, the form in which
// Redis takes every command.
func writeCommand(w io.Writer, args []string) error {
	buf := make([]byte, 0, 64)
	buf = appendLength(buf, '*', len(args))
	for _, arg := range args {
		buf = appendLength(buf, '$', len(arg))
		buf = append(buf, arg...)
		buf = append(buf, "\r\n"...)
	}
	_, err := w.Write(buf)
	return err
}

func appendLength(buf []byte, kind byte, n int) []byte {
	buf = append(buf, kind)
	buf = strconv.AppendInt(buf, int64(n), 10)
	return append(buf, "\r\n"...)
}

// readReply reads one complete reply from r.
func readReply(r *bufio.Reader) (reply, error) {
	return readReplyAt(r, 0)
}

func readReplyAt(r *bufio.Reader, depth int) (reply, error) {
	line, err := readLine(r)
	if err != nil {
		return reply{}, err
	}
	if line == "" {
		return reply{}, errors.New("empty reply line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', '-':
		return reply{kind: kind, text: rest}, nil
	case ':':
		if _, err := strconv.ParseInt(rest, 10, 64); err != nil {
			return reply{}, fmt.Errorf("integer reply %q: %w", rest, err)
		}
		return reply{kind: kind, text: rest}, nil
	case '$':
		return readBulk(r, rest)
	case '*':
		return readArray(r, rest, depth)
	default:
		return reply{}, fmt.Errorf("unknown reply type %q in line %q", kind, line)
	}
}

// readLine reads up to and including the next CRLF and returns the line
// without it.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("reply line %q does not end in CRLF", line)
	}
	return line[:len(line)-2], nil
}

// parseLength parses the length of a bulk string or array: -1 for null, or
// a count in its plain decimal form (so "007" or "+7" are refused, not
// silently read as 7).
func parseLength(text string) (n int, null bool, err error) {
	if text == "-1" {
		return 0, true, nil
	}
	n, err = strconv.Atoi(text)
	if err != nil || n < 0 || strconv.Itoa(n) != text {
		return 0, false, fmt.Errorf("bad length %q", text)
	}
	return n, false, nil
}

func readBulk(r *bufio.Reader, lengthText string) (reply, error) {
	n, null, err := parseLength(lengthText)
	if err != nil {
		return reply{}, fmt.Errorf("bulk string: %w", err)
	}
	if null {
		return reply{kind: '$', null: true}, nil
	}
	if n > maxBulkLen {
		return reply{}, fmt.Errorf("bulk string of %d bytes is over the %d limit", n, maxBulkLen)
	}
	// Grown as bytes arrive rather than allocated up front, so a corrupt
	// length costs nothing until the bytes are really there.
	var body bytes.Buffer
	if _, err := io.CopyN(&body, r, int64(n)+2); err != nil {
		return reply{}, fmt.Errorf("bulk string of %d bytes: %w", n, err)
	}
	data := body.Bytes()
	if !bytes.HasSuffix(data, []byte("\r\n")) {
		return reply{}, fmt.Errorf("bulk string of %d bytes does not end in CRLF", n)
	}
	return reply{kind: '$', text: string(data[:n])}, nil
}

func readArray(r *bufio.Reader, lengthText string, depth int) (reply, error) {
	if depth >= maxReplyDepth {
		return reply{}, fmt.Errorf("arrays nested more than %d deep", maxReplyDepth)
	}
	n, null, err := parseLength(lengthText)
	if err != nil {
		return reply{}, fmt.Errorf("array: %w", err)
	}
	if null {
		return reply{kind: '*', null: true}, nil
	}
	array := reply{kind: '*'}
	for i := range n {
		elem, err := readReplyAt(r, depth+1)
		if err != nil {
			return reply{}, fmt.Errorf("array element %d of %d: %w", i, n, err)
		}
		array.elems = append(array.elems, elem)
	}
	return array, nil
}

// render turns a reply into the text Do returns: simple and bulk strings
// as they are, integers in decimal, null as the empty string, and arrays as
// their rendered elements joined by newlines (nested arrays flatten). An
// error reply, at any depth, is returned as a *ReplyError.
func render(rep reply) (string, error) {
	switch rep.kind {
	case '-':
		return "", &ReplyError{Message: rep.text}
	case '*':
		parts := make([]string, 0, len(rep.elems))
		for _, elem := range rep.elems {
			text, err := render(elem)
			if err != nil {
				return "", err
			}
			parts = append(parts, text)
		}
		return strings.Join(parts, "\n"), nil
	default:
		return rep.text, nil
	}
}
