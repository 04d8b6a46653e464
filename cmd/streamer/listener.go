package main

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// refusalTimeout bounds the writing of the answer to a connection over the
// cap: the refusal must cost the server next to nothing.
const refusalTimeout = time.Second

// refusalBody is the error a connection over the cap is answered with.
const refusalBody = `{"error":"too many open connections: the server's limit (--max-connections) is reached; try again"}` + "\n"

// connectionRefusal is the whole answer to a connection over the cap. It is
// written before the client's request is read, which HTTP/1.1 clients take
// as the answer to the request they send.
var connectionRefusal = []byte("HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: application/json\r\n" +
	"Retry-After: 1\r\n" +
	"Connection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(refusalBody)) + "\r\n\r\n" +
	refusalBody)

// cappedListener holds at most max connections open at once. A connection
// beyond the cap is accepted, answered 503 and closed, rather than left
// waiting in the kernel's queue where the client cannot tell a full server
// from a dead one.
type cappedListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			go refuse(conn)
			continue
		}
		return &countedConn{Conn: conn, open: &l.open}, nil
	}
}

// refuse answers a connection over the cap and closes it.
func refuse(conn net.Conn) {
	_ = conn.SetWriteDeadline(time.Now().Add(refusalTimeout))
	_, _ = conn.Write(connectionRefusal)
	if tcp, ok := conn.(*net.TCPConn); ok {
		// Closing with the request unread would reset the connection and
		// could destroy the answer in flight: shut down writing and let
		// the client close.
		_ = tcp.CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(refusalTimeout))
		var discard [512]byte
		for {
			if _, err := conn.Read(discard[:]); err != nil {
				break
			}
		}
	}
	_ = conn.Close()
}

// countedConn gives its place back under the cap when it is closed.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
