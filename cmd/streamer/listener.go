package main

import (
	"bytes"
	"cmp"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// maxRefusals bounds the refusals under way at once: beyond it, a
// connection turned away is closed without an answer, so that a flood of
// connections that send nothing holds no more than that many goroutines
// and descriptors.
const maxRefusals = 1024

// refusalTimeout bounds each step of a refusal (the wait for the request,
// the writing of the answer, the wait for the client to close): the
// refusal must cost the server next to nothing.
const refusalTimeout = time.Second

// refusal is the whole answer to a connection the server will not serve:
// a 503 with a JSON error, written once the client's request has begun to
// arrive (see refuse), which HTTP/1.1 clients take as the answer to it.
func refusal(reason string) []byte {
	body := `{"error":` + strconv.Quote(reason) + "}\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Retry-After: 1\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" +
		body)
}

var (
	overCapRefusal  = refusal("too many open connections: the server's limit (--max-connections) is reached; try again")
	shutdownRefusal = refusal(httpapi.ShuttingDown)
)

// reclaimAfter is how long a connection must have been idle, between
// requests or before its first (with no call in progress, over gRPC),
// before a new connection at the cap takes its place: a client in a loop
// sends its next request sooner, and one that keeps a connection for
// later can open it again.
const reclaimAfter = time.Second

// cappedListener holds at most max connections open at once. A connection
// beyond the cap takes the place of the one idle longest (for reclaimAfter
// at least, see track): between requests, or silent since it opened, or
// still sending its first request's headers; with none, it is accepted,
// answered 503 and closed, rather than left waiting in the kernel's queue
// where the client cannot tell a full server from a dead one. Connections
// held open, by a client that means harm or by a pool larger than it
// needs, would otherwise keep every new client out until the idle or the
// read timeout.
//
// Before the server closes, quiesce turns every new connection away with a
// 503 until connections stop coming, so that a client that connects in the
// last moments gets an answer rather than a reset.
//
// The connections turned away never reach the API, which counts requests:
// the listener counts them itself, for /metrics (see Collect), and logs
// them, held back as they repeat.
type cappedListener struct {
	net.Listener
	max      int64
	log      *slog.Logger // nil: no lines
	warnings repeats.Lines
	open     atomic.Int64
	closing  atomic.Bool
	lastSeen atomic.Int64 // when the last connection came, in Unix nanoseconds

	refusing     sync.WaitGroup
	refusalsMu   sync.Mutex
	refusals     int           // under way, at most maxRefusals (or l.maxRefusals)
	refusalsOver bool          // awaitRefusals has begun: a late connection is closed
	maxRefusals  int           // tests' bound in place of maxRefusals; 0: that
	reclaimAfter time.Duration // tests' wait in place of reclaimAfter; 0: that
	arriving     time.Duration // tests' time in place of reclaimAfter for a request to arrive (see busy); 0: that

	// The connections idle between requests or before their first, the
	// longest idle first: a list linked through the connections
	// themselves, so that track, called twice a request, allocates nothing.
	idleMu             sync.Mutex
	idleHead, idleTail *countedConn

	// The connections turned away over the cap and while draining, and
	// those closed for a new one to take their place; and the gRPC
	// service's alike (see grpcListener), counted here so that /metrics
	// has them beside the API's.
	refusedOverCap, refusedDraining, reclaimed atomic.Uint64
	grpc                                       grpcConnCounts
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.lastSeen.Store(time.Now().UnixNano())
		switch {
		case l.closing.Load():
			l.turnAway(conn, shutdownRefusal, func() {
				l.refusedDraining.Add(1)
				l.note(slog.LevelInfo, "draining", "connection refused: the server is draining", conn)
			})
			continue
		case l.open.Add(1) > l.max && !l.reclaim():
			l.open.Add(-1)
			l.turnAway(conn, overCapRefusal, func() {
				l.refusedOverCap.Add(1)
				l.note(slog.LevelWarn, "over cap", "connection refused: --max-connections are open, none idle long enough to give its place", conn, "max_connections", l.max)
			})
			continue
		}
		return &countedConn{Conn: conn, open: &l.open}, nil
	}
}

// note logs that conn was turned away, at once and then at most once every
// repeats.Every for each kind: a server at its cap turns away connections
// by the thousand.
func (l *cappedListener) note(level slog.Level, kind, msg string, conn net.Conn, args ...any) {
	if l.log == nil {
		return
	}
	args = append(args, "remote", conn.RemoteAddr().String())
	l.warnings.Log(l.log, level, kind, msg, args...)
}

// The metrics of the listener, served on /metrics beside the API's.
var (
	connectionsRefusedDesc = prometheus.NewDesc("streamer_connections_refused_total",
		"Connections answered 503 and closed before any request was read (or closed unanswered, past 1024 such at once), by reason: over_cap (--max-connections open, none idle for a second) or draining (after SIGTERM); and grpc_over_cap, connections to --grpc-listen closed as they came, --max-connections of them being open, none with no call in progress for a second. The requests on them are counted in no other metric. Liveness probes so turned away are answered 200 and not counted.",
		[]string{"reason"}, nil)
	connectionsReclaimedDesc = prometheus.NewDesc("streamer_connections_reclaimed_total",
		"Connections idle for a second at least, closed for a new one at --max-connections to take their place, by protocol: http (the API's, idle between requests or before the first) or grpc (--grpc-listen's, with no call in progress).",
		[]string{"protocol"}, nil)
)

// Describe sends the descriptions of the listener's metrics.
func (l *cappedListener) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectionsRefusedDesc
	ch <- connectionsReclaimedDesc
}

// Collect sends the listener's counts, read when /metrics is scraped.
func (l *cappedListener) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(connectionsRefusedDesc, prometheus.CounterValue, float64(l.refusedOverCap.Load()), "over_cap")
	ch <- prometheus.MustNewConstMetric(connectionsRefusedDesc, prometheus.CounterValue, float64(l.refusedDraining.Load()), "draining")
	ch <- prometheus.MustNewConstMetric(connectionsRefusedDesc, prometheus.CounterValue, float64(l.grpc.refusedOverCap.Load()), "grpc_over_cap")
	ch <- prometheus.MustNewConstMetric(connectionsReclaimedDesc, prometheus.CounterValue, float64(l.reclaimed.Load()), "http")
	ch <- prometheus.MustNewConstMetric(connectionsReclaimedDesc, prometheus.CounterValue, float64(l.grpc.reclaimed.Load()), "grpc")
}

// track is the HTTP server's ConnState hook: it keeps the list of the
// connections idle between requests, or new (no request read yet).
//
// Only the connections Accept returned are listed: no other could be
// reclaimed.
func (l *cappedListener) track(conn net.Conn, state http.ConnState) {
	c, ok := conn.(*countedConn)
	if !ok {
		return
	}
	idle := state == http.StateIdle || state == http.StateNew
	var now time.Time
	if idle {
		now = time.Now()
	}
	l.idleMu.Lock()
	if c.listed {
		l.unlinkIdle(c)
	}
	if idle {
		c.idleSince = now
		c.firstRead.Store(0)
		c.listed = true
		c.idlePrev, c.idleNext = l.idleTail, nil
		if l.idleTail != nil {
			l.idleTail.idleNext = c
		} else {
			l.idleHead = c
		}
		l.idleTail = c
	}
	l.idleMu.Unlock()
}

// unlinkIdle takes c, listed, off the list of idle connections. It
// requires l.idleMu.
func (l *cappedListener) unlinkIdle(c *countedConn) {
	if c.idlePrev != nil {
		c.idlePrev.idleNext = c.idleNext
	} else {
		l.idleHead = c.idleNext
	}
	if c.idleNext != nil {
		c.idleNext.idlePrev = c.idlePrev
	} else {
		l.idleTail = c.idlePrev
	}
	c.idlePrev, c.idleNext, c.listed = nil, nil, false
}

// reclaim closes the connection idle longest, if it has been for
// reclaimAfter, for a new one over the cap to take its place (counted
// already); false when none has. A connection closed already, whose place
// was given back before the server told track (it closes a connection
// before it says so), is passed over.
func (l *cappedListener) reclaim() bool {
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	after := cmp.Or(l.reclaimAfter, reclaimAfter)
	for conn := l.idleHead; conn != nil; {
		if time.Since(conn.idleSince) < after {
			return false
		}
		next := conn.idleNext
		if conn.busy(cmp.Or(l.arriving, reclaimAfter)) {
			// A request is coming on it: its server goroutine lists it
			// active once the headers are whole, or idle again after.
			conn = next
			continue
		}
		l.unlinkIdle(conn)
		if !conn.release() {
			conn = next
			continue
		}
		// Its server goroutine, waiting for a request, ends on the closed
		// connection, as at the idle timeout. The close goes on apart:
		// over TLS it writes an alert, which a client that reads nothing
		// could hold up, and Accept must not wait.
		go func() { _ = conn.Close() }()
		l.reclaimed.Add(1)
		return true
	}
	return false
}

// quiesce answers every new connection 503 from now on, and returns once
// none has come for quiet, or after at most limit.
func (l *cappedListener) quiesce(quiet, limit time.Duration) {
	l.closing.Store(true)
	l.lastSeen.Store(time.Now().UnixNano())
	end := time.Now().Add(limit)
	for {
		calm := time.Unix(0, l.lastSeen.Load()).Add(quiet)
		now := time.Now()
		if !now.Before(calm) || !now.Before(end) {
			return
		}
		wake := calm
		if end.Before(wake) {
			wake = end
		}
		time.Sleep(wake.Sub(now))
	}
}

// turnAway refuses conn with answer in a goroutine of its own, unless the
// refusals are over (the listener closed under the Accept that took it) or
// too many are under way: then it closes conn without an answer.
func (l *cappedListener) turnAway(conn net.Conn, answer []byte, refused func()) {
	l.refusalsMu.Lock()
	defer l.refusalsMu.Unlock()
	if l.refusalsOver || l.refusals >= cmp.Or(l.maxRefusals, maxRefusals) {
		_ = conn.Close()
		refused()
		return
	}
	l.refusals++
	l.refusing.Go(func() {
		if !refuse(conn, answer) {
			refused()
		}
		l.refusalsMu.Lock()
		l.refusals--
		l.refusalsMu.Unlock()
	})
}

// awaitRefusals waits for the refusals under way, each done within a few
// refusalTimeouts: the process must not exit under them, which would reset
// their connections with the request unread. It is called once the
// listener is closed.
func (l *cappedListener) awaitRefusals() {
	l.refusalsMu.Lock()
	l.refusalsOver = true
	l.refusalsMu.Unlock()
	l.refusing.Wait()
}

// refuse answers a connection with answer and closes it; or, when it
// carries a liveness probe, with the probe's answer, and then says so
// (alive): it refused nothing.
//
// It answers once the request has begun to arrive, or a client that sends
// none has had refusalTimeout to: an answer that comes before the client
// has sent its request is, to Go's net/http client and others, a response
// to no request, dropped with the connection, and the request fails
// without the 503 and its Retry-After.
func refuse(conn net.Conn, answer []byte) (alive bool) {
	// Over TLS, the read also runs the handshake.
	_ = conn.SetDeadline(time.Now().Add(refusalTimeout))
	var first [512]byte
	n, _ := conn.Read(first[:])
	_ = conn.SetDeadline(time.Now().Add(refusalTimeout))
	if probe := livenessAnswer(first[:n]); probe != nil {
		answer, alive = probe, true
	}
	_, _ = conn.Write(answer)
	if half, ok := conn.(interface{ CloseWrite() error }); ok {
		// Closing with the request unread would reset the connection and
		// could destroy the answer in flight: shut down writing and let
		// the client close.
		_ = half.CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(refusalTimeout))
		var discard [512]byte
		for {
			if _, err := conn.Read(discard[:]); err != nil {
				break
			}
		}
	}
	_ = conn.Close()
	return alive
}

// The answers of the API's liveness routes, for a probe turned away (see
// livenessAnswer).
var (
	healthzAnswer = okAnswer(`{"status":"ok"}`)
	liveAnswer    = okAnswer(`{"live":true}`)
)

// okAnswer is a whole 200 answer with body, JSON, closing the connection.
func okAnswer(body string) []byte {
	body += "\n"
	return []byte("HTTP/1.1 200 OK\r\n" +
		"Content-Type: application/json\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" +
		body)
}

// livenessAnswer is the answer to a request that begins with first when
// it is a liveness probe (GET or HEAD /healthz or /v2/health/live), or nil. A
// server at its cap, or draining, is alive all the same: a probe refused
// 503 there had an orchestrator kill a busy server, and with it every
// request it held. Readiness probes are refused as any request is: not
// ready to take more is what the 503 says.
func livenessAnswer(first []byte) []byte {
	line, _, whole := bytes.Cut(first, []byte("\r\n"))
	fields := bytes.Fields(line)
	if !whole || len(fields) != 3 {
		return nil // not a whole request line
	}
	var answer []byte
	switch string(fields[1]) {
	case "/healthz":
		answer = healthzAnswer
	case "/v2/health/live":
		answer = liveAnswer
	default:
		return nil
	}
	switch string(fields[0]) {
	case http.MethodGet:
		return answer
	case http.MethodHead: // the same answer without its body
		head, _, _ := bytes.Cut(answer, []byte("\r\n\r\n"))
		return append(head[:len(head):len(head)], "\r\n\r\n"...)
	}
	return nil
}

// countedConn gives its place back under the cap when it is closed.
type countedConn struct {
	net.Conn
	open     *atomic.Int64
	released atomic.Bool
	// firstRead is when the first read that brought bytes since the
	// connection was listed idle took them (see monotonic), 0 for none:
	// a request has begun to arrive, which net/http says only once its
	// headers are whole (see busy).
	firstRead atomic.Int64

	// Its place in the listener's list of idle connections, under the
	// listener's idleMu (see track).
	listed             bool
	idleSince          time.Time
	idlePrev, idleNext *countedConn
}

// CloseWrite shuts down the connection's writing, where the connection
// beneath can (TCP, TLS), as a server that closes with a request's body
// unread does first, lest the close reset its answer.
func (c *countedConn) CloseWrite() error {
	if half, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return half.CloseWrite()
	}
	return nil
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.firstRead.Load() == 0 {
		c.firstRead.CompareAndSwap(0, monotonic())
	}
	return n, err
}

// busy reports whether the connection, listed idle, has a request coming:
// bytes that began to arrive within reclaimAfter, or that wait to be read.
// A proxy that pools its connections writes a request on each before it
// opens another, the one that has an idle connection reclaimed: closed
// then, the request would be lost, and the proxy's client answered 502.
// Its headers come whole at once; a client that sends them a byte at a
// time, to hold its place, has its connection reclaimed all the same once
// it has sent them for longer than that. It requires the listener's
// idleMu.
func (c *countedConn) busy(after time.Duration) bool {
	if first := c.firstRead.Load(); first != 0 && monotonic()-first < int64(after) {
		return true
	}
	return bytesWaiting(c.Conn)
}

// started is when the process began, for monotonic.
var started = time.Now()

// monotonic is the time since the process began, in nanoseconds, on the
// monotonic clock; never 0.
func monotonic() int64 { return max(int64(time.Since(started)), 1) }

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// release gives the connection's place back, once: it says whether this
// call did.
func (c *countedConn) release() bool {
	if !c.released.CompareAndSwap(false, true) {
		return false
	}
	c.open.Add(-1)
	return true
}
