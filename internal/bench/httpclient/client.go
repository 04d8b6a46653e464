// Package httpclient is the load client of streamer bench: it posts one
// prepared HTTP/1.1 request over keep-alive connections and reads of each
// answer only what it needs, the status and where the answer ends.
//
// The load generator shares the machine with the server it measures, and
// net/http's client spends about twice the CPU per request (a reader and a
// writer goroutine per connection and hand-offs between them); every cycle
// the client spends is one the server does not get. It speaks plain http
// only: https targets take Go's standard client.
package httpclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Client posts one prepared request, from many goroutines at once. Its zero
// value is not usable: make one with New.
type Client struct {
	// Timeout bounds each Post: the dial, the request's write and the
	// answer's read together. 0 means none. Set it before the first Post.
	Timeout time.Duration

	addr    string // host:port to dial
	request []byte // the whole request: head and body
	idle    chan *conn
	dialer  net.Dialer
}

// conn is one keep-alive connection and its read buffer.
type conn struct {
	conn net.Conn
	r    *bufio.Reader
}

// errNoAnswer means the connection closed before a byte of the answer came:
// on a reused connection, the server closed it while it was idle.
var errNoAnswer = errors.New("connection closed before the answer")

// ErrTimeout means that a Post took longer than the client's Timeout.
var ErrTimeout = errors.New("timed out")

// aLongTimeAgo is a deadline in the past: setting it wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// New prepares POST target.Path+path with body as JSON to target's host
// (port 80 when target names none), with the extra header lines headers
// ("Name: value"); at most maxIdle connections are kept between requests.
func New(target *url.URL, path string, body []byte, maxIdle int, headers ...string) *Client {
	u := target
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: streamer-bench\r\n", strings.TrimSuffix(u.EscapedPath(), "/")+path, u.Host)
	for _, h := range headers {
		fmt.Fprintf(&head, "%s\r\n", h)
	}
	fmt.Fprintf(&head, "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	return &Client{
		addr:    addr,
		request: append(head.Bytes(), body...),
		idle:    make(chan *conn, maxIdle),
	}
}

// Post sends the request and returns the answer's status and, when that
// is not 2xx, the first ExcerptBytes of its body: the server's word on why.
// A request that fails on a reused connection before any answer is sent
// again once on a new one, as browsers do, within the same Timeout. When
// ctx ends first, the error is ctx's; when the Timeout passes first, it
// wraps ErrTimeout.
func (c *Client) Post(ctx context.Context) (status int, excerpt []byte, err error) {
	var deadline time.Time // zero: none
	if c.Timeout > 0 {
		deadline = time.Now().Add(c.Timeout)
	}
	for attempt := 0; ; attempt++ {
		cn, reused, err := c.get(ctx, deadline)
		if err != nil {
			return 0, nil, c.failure(ctx, err)
		}
		status, keepAlive, excerpt, err := cn.roundTrip(ctx, c.request, deadline)
		switch {
		case err != nil:
			cn.conn.Close()
			if reused && attempt == 0 && ctx.Err() == nil && errors.Is(err, errNoAnswer) {
				continue
			}
			return 0, nil, c.failure(ctx, err)
		case keepAlive:
			c.put(cn)
		default:
			cn.conn.Close()
		}
		return status, excerpt, nil
	}
}

// failure is err as Post returns it: ctx's error when ctx has ended, as a
// read woken by the end of ctx fails with a timeout that ctx caused; then
// ErrTimeout around a timeout, which can only be the client's own; err
// otherwise.
func (c *Client) failure(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if netErr, ok := errors.AsType[net.Error](err); ok && netErr.Timeout() {
		return fmt.Errorf("%w after %s: %w", ErrTimeout, c.Timeout, err)
	}
	return err
}

// get takes an idle connection or dials a new one by deadline.
func (c *Client) get(ctx context.Context, deadline time.Time) (cn *conn, reused bool, err error) {
	select {
	case cn := <-c.idle:
		return cn, true, nil
	default:
	}
	dialer := c.dialer
	dialer.Deadline = deadline
	nc, err := dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	return &conn{conn: nc, r: bufio.NewReaderSize(nc, 16<<10)}, false, nil
}

// put keeps cn for the next request, or closes it when enough are kept.
func (c *Client) put(cn *conn) {
	select {
	case c.idle <- cn:
	default:
		cn.conn.Close()
	}
}

// CloseIdle closes the kept connections; the client stays usable.
func (c *Client) CloseIdle() {
	for {
		select {
		case cn := <-c.idle:
			cn.conn.Close()
		default:
			return
		}
	}
}

// roundTrip writes request and reads the answer by deadline (none when
// zero). When ctx ends first, the blocked read is woken and the connection
// is unusable: the caller closes it on the error.
func (w *conn) roundTrip(ctx context.Context, request []byte, deadline time.Time) (status int, keepAlive bool, excerpt []byte, err error) {
	// Set before the wake-up below is armed, so as not to undo it; and on
	// every request, as a kept connection holds the last one's.
	if !deadline.IsZero() {
		if err := w.conn.SetDeadline(deadline); err != nil {
			return 0, false, nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err() // the deadline is set: the connection cannot be reused
		}
	}()
	if _, err := w.conn.Write(request); err != nil {
		return 0, false, nil, fmt.Errorf("%w: write: %w", errNoAnswer, err)
	}
	return readResponse(w.r)
}
