package httpapi

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// This file reads, and throws away, what is left of a request body that
// the handler answered without reading to its end: a body announced or
// found over the limit, one refused for a full queue before it was read, a
// content type the handler cannot read, a route that takes no body.

// smallBody is the most of an unread body that net/http reads, and throws
// away, by itself before it sends the answer (its maxPostHandlerReadBytes).
// Past it, net/http sends the answer and closes the connection with the
// body unread, which has the kernel reset it: a client that writes its
// whole body before it reads anything (Python's http.client, requests,
// tritonclient) is reset while it sends and never reads the answer.
const smallBody = 256 << 10

// maxDiscardOver bounds how far past the body limit a body answered
// unread is read (see discardLimit).
const maxDiscardOver = 64 << 20

// discardLimit is the most of a body answered unread that is read: the
// whole of any body within maxBody (one refused for a full queue is likely
// sent again), and past it up to three times maxBody more, maxDiscardOver
// at most, so that a body somewhat over the limit gets its 413 and not a
// reset. A client sending more than that is cut off, as before.
func discardLimit(maxBody int64) int64 {
	over := min(maxBody, maxDiscardOver/3) * 3
	if maxBody > math.MaxInt64-over {
		return math.MaxInt64
	}
	return maxBody + over
}

// fullDuplexer is net/http's HTTP/1 ResponseWriter as
// http.ResponseController.EnableFullDuplex uses it; asserting it directly
// costs no allocation.
type fullDuplexer interface{ EnableFullDuplex() error }

// discardUnread follows the answer to a request whose body is larger than
// net/http reads by itself (smallBody), or of unknown length: it sends the
// answer at once and then reads what is left of the body, throwing it
// away, so that a client still sending gets to the end of its body and
// reads the answer, and so that the connection, its body read through,
// serves the client's next request. The server's read deadline bounds the
// reading (the handler lifts it only once it has read a body whole, as a
// served request's is, which reads as ended at once): a client that stops
// sending holds the handler no longer than one sending slowly would, and
// one that never stops, for no more than discardLimit bytes. Past either,
// net/http closes the connection, as it did without this.
//
// A body announced longer than discardLimit is not read through: its
// connection is closed once the answer is sent, what the client sends
// meanwhile thrown away for lingerTime (see lingerAndClose), in which a
// client still sending a few megabytes gets to its answer, and one sending
// more is reset, without the server reading megabytes for nothing. Nor is
// the body of a client waiting for 100 Continue read: it was
// answered instead, and does not send its body. Nor an HTTP/2 body: a
// stream left unread costs its connection nothing.
func (h *handler) discardUnread(w http.ResponseWriter, r *http.Request) {
	discardUnread(w, r, h.discardLimit)
}

// discardUnread is the handler's discardUnread with the bound limit.
func discardUnread(w http.ResponseWriter, r *http.Request, limit int64) {
	if r.ProtoMajor != 1 || expectsContinue(r.Header) {
		return
	}
	if r.ContentLength > limit {
		if w.Header().Get("Content-Length") != "" {
			// Whole on the wire once flushed; an answer of no length
			// (/metrics, chunked) is closed by net/http, which ends it.
			lingerAndClose(w)
		}
		return
	}
	// Without full duplex, net/http would read at most smallBody of the
	// body before it sends the answer, and close the connection after.
	if d, ok := w.(fullDuplexer); ok {
		_ = d.EnableFullDuplex()
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush() // the answer goes before the rest of the body is read
	}
	var err error
	if r.ContentLength > 0 {
		_, err = io.Copy(io.Discard, r.Body) // net/http ends it at its length
	} else if _, err = io.CopyN(io.Discard, r.Body, limit); err == io.EOF {
		err = nil
	}
	if err != nil && !errors.Is(err, http.ErrBodyReadAfterClose) {
		// Corrupt chunking, a read timeout, a client gone: where the body
		// ends is unknown, and what follows on the wire must not be read
		// as the connection's next request. Full duplex skips net/http's
		// own check, which would close the connection here.
		closeConnection(w)
	}
}

// lingerTime is how long a connection closed with its request's body
// unread is read from, its answer sent and its writing shut down, before
// it is closed (see lingerAndClose): as long as Go's server waits itself.
const lingerTime = 500 * time.Millisecond

// lingerAndClose sends the answer written to w and closes its connection
// without resetting it: it shuts down writing, then reads and throws away
// what the client still sends, for lingerTime at most, and closes. Closed
// with bytes unread, a connection is reset, and the reset can destroy the
// answer in flight: a client still sending its body sees the reset, and a
// proxy answers its own client 502. Go's server waits so itself, but not
// for a request that asked to close the connection (Connection: close, as
// nginx sends by default), and without reading.
func lingerAndClose(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // as closeConnection does
	}
	go func() {
		if half, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = half.CloseWrite()
		}
		_ = conn.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.Copy(io.Discard, conn)
		_ = conn.Close()
	}()
}

// sendAndClose sends the answer written to w, with its Content-Length,
// and closes its connection.
func sendAndClose(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	closeConnection(w)
}

// closeConnection closes the connection of w, whose answer has been sent
// whole (flushed, with its Content-Length). It takes the connection from
// net/http to close it; where w cannot give it up (a wrapper that hides
// it), it aborts the handler, which has net/http close it, unless a
// middleware swallows the panic.
func closeConnection(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// expectsContinue reports whether the request's client waits for 100
// Continue before it sends its body.
func expectsContinue(header http.Header) bool {
	v := header["Expect"]
	return len(v) > 0 && strings.EqualFold(strings.TrimSpace(v[0]), "100-continue")
}
