package main

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
	"github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// Calls compressed with gzip are read, as REST bodies may be, by the
// service's own compressor, which refuses broken data as a client's
// mistake rather than a server's.
func init() { encoding.RegisterCompressor(httpapi.GRPCGzip()) }

// grpcMaxStreams bounds the calls one gRPC connection carries at once, as
// HTTP/2 servers commonly do (Go's own serves 250): without it one
// connection could hold any number.
const grpcMaxStreams = 256

// maxHeaderBytes bounds the headers of a request, and of a gRPC call with
// its metadata: 64 KiB, far above what a token and a client's own headers
// take, and little for a client that opens thousands of connections to
// hold. Headers are read whole before the token is checked, so the
// libraries' defaults (1 MiB for net/http, 16 MiB for grpc-go) would let
// anyone pin gigabytes through --max-connections' 4096 connections.
const maxHeaderBytes = 64 << 10

// grpcStreamWorkers is how many goroutines the gRPC server keeps to run
// calls on, rather than start one a call: a call grows its goroutine's
// stack on the way to the model, and a new goroutine a call paid for that
// growth every time (a sixth of the server's CPU at 8 clients). A call
// waits on its worker for its answer, so the pool covers the calls of a
// moderate load at once; more calls run on goroutines of their own, as
// before.
const grpcStreamWorkers = 64

// grpcHeaderSlack is what a call's message may hold beyond --max-body: its
// names, shapes and parameters, around data the size of a REST body.
const grpcHeaderSlack = 4 << 10

// grpcServer serves the Open Inference Protocol's gRPC service on
// --grpc-listen, beside the HTTP API: the same handler behind it, so the
// same model, checks, counts and token.
type grpcServer struct {
	server   *grpc.Server
	listener *grpcListener
	served   chan error
}

// openGRPC listens on --grpc-listen and serves api's gRPC service there,
// with the flags' bounds: the body limit bounds a call's message, the
// connection cap and the idle timeout its connections, and the token and
// the certificate are the HTTP API's. The connections it turns away or
// closes at the cap are counted in counts. It returns nil when
// --grpc-listen is not set.
func (o serveOptions) openGRPC(api http.Handler, guard *security, counts *grpcConnCounts, log *slog.Logger) (*grpcServer, error) {
	if o.grpcListen == "" {
		return nil, nil
	}
	tcp, err := net.Listen("tcp", o.grpcListen)
	if err != nil {
		return nil, fmt.Errorf("--grpc-listen %s: %w", o.grpcListen, err)
	}
	if ip, ok := tcp.Addr().(*net.TCPAddr); ok && !ip.IP.IsLoopback() && guard.token == nil {
		log.Warn("the gRPC API listens beyond this machine with no token: anyone who can reach it can run the model; give --auth-token", "grpc_listen", tcp.Addr().String())
	}
	service := httpapi.NewGRPC(api)
	listener := &grpcListener{Listener: tcp, max: int64(o.maxConnections), counts: counts, log: log, conns: map[string]*grpcConn{}}
	refused := func(remote string, carried bool) { guard.refused(&guard.refusedGRPC, "gRPC call", remote, carried) }
	calls := &grpcCalls{token: tokenCheck(guard.token, refused), readTimeout: o.readTimeout, unread: service.CountUnread, conns: listener, log: log}
	options := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(o.maxBody, 1<<31-1-grpcHeaderSlack) + grpcHeaderSlack)),
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.ConnectionTimeout(min(10*time.Second, o.readTimeout)),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: o.idleTimeout,
			// grpc-go keeps a call's answer for its client with no
			// deadline, and a client frozen or gone that reads nothing
			// held its answers in this server's memory as long as its
			// connection stayed open. Quiet for --write-timeout, a
			// client is asked for a ping's answer, and its connection is
			// closed if none comes within as long again.
			Time:    o.writeTimeout,
			Timeout: o.writeTimeout,
		}),
		// grpc-go's own policy closes, with "too_many_pings", the
		// connection of a client that pings more often than every 5
		// minutes, its calls under way failed: clients and proxies that
		// keep their connections alive ping every 10 to 30 s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(service.Codec()),
		grpc.InTapHandle(calls.begin),
		grpc.UnaryInterceptor(calls.read),
		grpc.StreamInterceptor(calls.readStream),
	}
	if guard.cert != nil {
		options = append(options, grpc.Creds(credentials.NewTLS(guard.cert.config())))
		log.Info("serving gRPC over TLS", "cert", guard.cert.certFile)
	}
	server := grpc.NewServer(options...)
	calls.register(server, service)
	healthpb.RegisterHealthServer(server, httpapi.NewGRPCHealth(api))
	g := &grpcServer{server: server, listener: listener, served: make(chan error, 1)}
	go func() { g.served <- server.Serve(listener) }()
	log.Info("serving the Open Inference Protocol over gRPC", "grpc_listen", tcp.Addr().String())
	return g, nil
}

// grpcMinPingInterval is the shortest time between a client's pings that
// the server takes: a client that pings more often, three times running
// with no data between, has its connection closed ("too_many_pings").
const grpcMinPingInterval = 5 * time.Second

// grpcHealthCall says whether method is one of the server's health calls,
// which, as the HTTP API's health routes, need no token: probes may not
// carry one, and the answers tell nothing of the model. The health
// service's Watch is not one: it holds its call open for as long as its
// client likes.
func grpcHealthCall(method string) bool {
	switch method {
	case inferencepb.GRPCInferenceService_ServerLive_FullMethodName, inferencepb.GRPCInferenceService_ServerReady_FullMethodName,
		healthpb.Health_Check_FullMethodName, healthpb.Health_List_FullMethodName:
		return true
	}
	return false
}

// tokenCheck returns the check of a call's "authorization" metadata, in
// md, against token, as its Guard checks the HTTP header: "Bearer TOKEN",
// compared through their SHA-256 digests in constant time. A call it
// refuses is told to refused, with its client's address, from ctx. With no
// token, it checks nothing.
func tokenCheck(token *httpapi.Token, refused func(remote string, carried bool)) func(ctx context.Context, md metadata.MD) error {
	if token == nil {
		return func(context.Context, metadata.MD) error { return nil }
	}
	return func(ctx context.Context, md metadata.MD) error {
		values := md.Get("authorization")
		if len(values) == 0 {
			refused(remoteOf(ctx), false)
			return status.Error(codes.Unauthenticated, `missing "authorization" metadata: send "Bearer TOKEN" with the server's --auth-token`)
		}
		scheme, got, ok := strings.Cut(values[0], " ")
		if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || !token.Matches(strings.TrimSpace(got)) {
			refused(remoteOf(ctx), true)
			return status.Error(codes.Unauthenticated, `the "authorization" metadata is not "Bearer" with the server's token`)
		}
		return nil
	}
}

// remoteOf is the address of the client of the call whose context is ctx.
func remoteOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// grpcCalls vets each call as it begins, before its message is read: the
// token, which a call without it is refused for before it costs the server
// the decoding of its message, and the time its message may take to
// arrive, --read-timeout as on the HTTP API, after which the call is
// ended: a client that opens calls and sends their messages slowly, or
// not at all, would otherwise hold them, and their connections, for ever.
// It tells conns of each call it lets through, which keeps the connection
// from being reclaimed while the call is in progress.
type grpcCalls struct {
	token       func(context.Context, metadata.MD) error
	readTimeout time.Duration
	// unread counts a ModelInfer call ended before its handler ran, with
	// the REST route's status for the same end.
	unread   func(status int)
	conns    *grpcListener
	log      *slog.Logger
	warnings repeats.Lines
}

// readTimerKey keys a call's *unreadCall in its context.
type readTimerKey struct{}

// unreadCall is a call on its way to its handler: the timer of its
// message, and whether its end is settled. Three things may settle it,
// and the first does: the timer, which ends the call for its read timeout;
// the message refused as it is read (over the limit, or the call ended
// meanwhile); the handler that starts, and counts the call as it ends.
type unreadCall struct {
	timer   *time.Timer
	settled atomic.Bool
	// requests counts a streaming inference call's requests under way,
	// nil for another call (see inProgress).
	requests *inProgress
}

// inProgress is a streaming inference call's count on its connection (see
// grpcListener.callBegun). It counts while the call's first message is on
// its way, then only while the call has requests under way (read, and not
// yet answered: ModelStreamInfer answers each once): a client that holds
// the call open with none does not keep its connection from being
// reclaimed at --max-connections, as a connection between unary calls may
// be. Held open so, a call would otherwise keep its connection for good,
// out of the reach of both the read timeout, which ends at its first
// message, and grpc-go's idle timeout, which waits for every call to end.
type inProgress struct {
	begin func() (ended func()) // counts the call on its connection

	mu       sync.Mutex
	ended    func() // uncounts it; nil while it is not counted
	underWay int
	over     bool // the call has ended
}

// countLocked counts the call, unless it has ended or is counted already.
// It requires that p.mu is held.
func (p *inProgress) countLocked() {
	if p.ended == nil && !p.over {
		p.ended = p.begin()
	}
}

// uncountLocked uncounts the call if it is counted. It requires that p.mu
// is held.
func (p *inProgress) uncountLocked() {
	if p.ended != nil {
		p.ended()
		p.ended = nil
	}
}

// read notes a request read.
func (p *inProgress) read() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.underWay++
	p.countLocked()
}

// answered notes a request answered (its answer sent, or its send failed).
func (p *inProgress) answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.underWay > 0 {
		p.underWay--
	}
	if p.underWay == 0 {
		p.uncountLocked()
	}
}

// end notes that the call has ended.
func (p *inProgress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.over = true
	p.uncountLocked()
}

// settle says whether the caller is the first to settle the call.
func (u *unreadCall) settle() bool { return u.settled.CompareAndSwap(false, true) }

// register serves service on server, with a ModelInfer that counts the
// calls it refuses as it reads their messages, as the REST route counts
// the requests whose bodies it cannot read: grpc-go refuses a message over
// the limit, or a call that ends first, before any handler or interceptor
// sees it.
func (c *grpcCalls) register(server *grpc.Server, service inferencepb.GRPCInferenceServiceServer) {
	desc := inferencepb.GRPCInferenceService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i, m := range desc.Methods {
		if "/"+desc.ServiceName+"/"+m.MethodName != inferencepb.GRPCInferenceService_ModelInfer_FullMethodName {
			continue
		}
		handler := m.Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			counted := func(msg any) error {
				err := dec(msg)
				if u, ok := ctx.Value(readTimerKey{}).(*unreadCall); ok && err != nil && u.settle() {
					c.unread(unreadStatus(ctx, err))
				}
				return err
			}
			return handler(srv, ctx, counted, interceptor)
		}
	}
	server.RegisterService(&desc, service)
}

// unreadStatus is the REST route's status for a call of ctx whose message
// grpc-go could not read for err.
func unreadStatus(ctx context.Context, err error) int {
	code := status.Code(err)
	if deadline, ok := ctx.Deadline(); ok && code == codes.Canceled && !time.Now().Before(deadline) {
		// grpc-go ends a call at its deadline by canceling it, which may
		// come before its context sees the deadline pass.
		code = codes.DeadlineExceeded
	}
	switch code {
	case codes.ResourceExhausted:
		return http.StatusRequestEntityTooLarge
	case codes.Canceled:
		return httpapi.StatusClientClosedRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// begin is the server's tap: it runs as a call's headers arrive.
func (c *grpcCalls) begin(ctx context.Context, info *tap.Info) (context.Context, error) {
	readTimeout, ended := c.readTimeout, func() {}
	if grpcHealthCall(info.FullMethodName) {
		// Open to anyone, so it holds nothing for long: its connection
		// stays as idle as it was, to be reclaimed at --max-connections,
		// and its message, an empty one, has a second to come.
		readTimeout = min(readTimeout, healthReadTimeout)
	} else {
		if err := c.token(ctx, info.Header); err != nil {
			return ctx, err
		}
		// Counted once let through: a call refused here is aborted with a
		// context grpc-go never ends, so that a count raised for it would
		// never fall, and it leaves its connection as idle as it was.
		ended = c.conns.callBegun(ctx)
	}
	u := &unreadCall{}
	if info.FullMethodName == inferencepb.GRPCInferenceService_ModelStreamInfer_FullMethodName {
		tapped := ctx
		u.requests = &inProgress{begin: func() func() { return c.conns.callBegun(tapped) }, ended: ended}
		ended = u.requests.end
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ctx = readTimedContext{ctx}
	method := info.FullMethodName
	u.timer = time.AfterFunc(readTimeout, func() {
		if ctx.Err() != nil || !u.settle() {
			return // the call ended before its message was read, or its message is in
		}
		c.warnings.Log(c.log, slog.LevelWarn, "read timeout", "gRPC call ended: its message did not arrive within --read-timeout",
			"method", method, "read_timeout", readTimeout)
		if method == inferencepb.GRPCInferenceService_ModelInfer_FullMethodName {
			c.unread(http.StatusRequestTimeout)
		}
		cancel(errReadTimeout)
	})
	// A call that ends before its handler runs (its client gave up, its
	// message was refused as it was decoded) stops its timer as it ends,
	// rather than keep the call's state for --read-timeout. grpc-go ends
	// a call's context as the call ends, however it ends; a call ended
	// for its read timeout is counted ended on its connection as it is
	// told to end, a moment before it has.
	context.AfterFunc(ctx, func() {
		u.timer.Stop()
		ended()
	})
	return context.WithValue(ctx, readTimerKey{}, u), nil
}

// readTimedContext is a call's context, ended (canceled) when the call's
// message does not arrive within its read timeout; then its Err is
// context.DeadlineExceeded, which grpc-go answers DEADLINE_EXCEEDED, as
// the REST route answers 408, where a canceled context's CANCELLED told
// the client it had canceled the call itself. Its Deadline is its
// parent's: the read timeout does not bound the call once its message is
// in.
type readTimedContext struct{ context.Context }

func (c readTimedContext) Err() error {
	if errors.Is(context.Cause(c.Context), errReadTimeout) {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// healthReadTimeout bounds the wait for a health call's message, which
// needs no token: a client holding many open costs the server a goroutine
// each, for this long at most.
const healthReadTimeout = time.Second

// errReadTimeout ends a call whose message came too slowly.
var errReadTimeout = errors.New("the call's message did not arrive within --read-timeout")

// read is the server's interceptor: it runs once the call's message is in,
// and stops its timer; the handler counts the call from then on. A call
// its read timeout settled first has been counted, and is ended.
func (c *grpcCalls) read(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if u, ok := ctx.Value(readTimerKey{}).(*unreadCall); ok {
		if !u.settle() {
			return nil, status.Error(codes.DeadlineExceeded, errReadTimeout.Error())
		}
		u.timer.Stop()
	}
	return handler(ctx, req)
}

// readStream is read for streaming calls: it stops the call's timer once
// the call's first message is in, and counts a streaming inference call's
// requests under way (see inProgress).
func (c *grpcCalls) readStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	u, ok := ss.Context().Value(readTimerKey{}).(*unreadCall)
	if !ok {
		return handler(srv, ss)
	}
	return handler(srv, &timedStream{ServerStream: ss, u: u})
}

// timedStream is a streaming call whose first message stops its timer.
type timedStream struct {
	grpc.ServerStream
	u  *unreadCall
	in bool // the first message came
}

func (s *timedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.u.requests != nil {
		s.u.requests.read()
	}
	if s.in {
		return nil
	}
	s.in = true
	if !s.u.settle() {
		return status.Error(codes.DeadlineExceeded, errReadTimeout.Error())
	}
	s.u.timer.Stop()
	return nil
}

func (s *timedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if s.u.requests != nil {
		s.u.requests.answered()
	}
	return err
}

// stop ends the gRPC service once the drain has answered every admitted
// request: the calls still writing their answers get within, then the
// connections are closed.
func (g *grpcServer) stop(within time.Duration) {
	if g == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		g.server.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// The server's Stop also waits for connections still in their
		// handshake, which a client that sends nothing holds up to the
		// connection timeout: close them all first.
		g.listener.closeAll()
		g.server.Stop()
		<-done
	}
}

// failed is the gRPC server's error if it stopped serving by itself.
func (g *grpcServer) failed() <-chan error {
	if g == nil {
		return nil
	}
	return g.served
}

// grpcConnCounts counts the connections grpcListener turns away over the
// cap, and those it closes for a new one to take their place.
type grpcConnCounts struct {
	refusedOverCap, reclaimed atomic.Uint64
}

// grpcListener holds at most max gRPC connections open at once. A
// connection beyond the cap takes the place of the one that has had no
// call in progress for longest, if for reclaimAfter at least: between
// calls, or since it opened (silent, or still in its handshake). With
// none, it is closed as it comes, which the client reports as
// UNAVAILABLE, the code gRPC clients retry. Without this, connections
// held open by clients gone quiet would keep every new client out until
// the idle timeout. A gRPC connection carries many calls at once, so
// clients need few: the cap is --max-connections, counted apart from the
// HTTP API's.
//
// The listener learns of calls from the server's tap (see callBegun),
// which runs as a call's headers are read: sooner than a stats handler's
// Begin, which comes once the call is handed to a goroutine, so that the
// window in which a call can begin on a connection being reclaimed is as
// narrow as grpc-go allows (see reclaim).
type grpcListener struct {
	net.Listener
	max          int64
	reclaimAfter time.Duration // tests' wait in place of reclaimAfter; 0: that
	counts       *grpcConnCounts
	log          *slog.Logger
	warnings     repeats.Lines

	mu    sync.Mutex
	conns map[string]*grpcConn // those open, by remote address, as the tap knows them
	// byTCP holds the same by the address value their TCP connection
	// gives, which grpc-go hands the tap in each call's peer: found by
	// it, a call costs no address made into a string (2% of the CPU of
	// calls on the echo model).
	byTCP map[*net.TCPAddr]*grpcConn
	idle  list.List // of *grpcConn with no call in progress, idle longest first
}

func (l *grpcListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, replaced := l.admit(conn)
		if replaced != nil {
			l.reclaim(replaced)
		}
		if c == nil {
			l.counts.refusedOverCap.Add(1)
			l.warnings.Log(l.log, slog.LevelWarn, "over cap", "gRPC connection refused: --max-connections are open, none idle long enough to give its place",
				"max_connections", l.max, "remote", conn.RemoteAddr().String())
			_ = conn.Close()
			continue
		}
		return c, nil
	}
}

// admit counts conn among the connections open; at the cap, in the place
// of the one idle longest, which it returns, forgotten already, for the
// caller to close (see reclaim). It returns no connection when conn is
// over the cap, none having been idle for reclaimAfter.
//
// The connection replaced is chosen and forgotten under l.mu, the lock
// under which callBegun counts a call: it has no call in progress, and a
// call that begins on it from now on is not counted on it.
func (l *grpcListener) admit(conn net.Conn) (admitted, replaced *grpcConn) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if int64(len(l.conns)) >= l.max {
		front := l.idle.Front()
		if front == nil {
			return nil, nil
		}
		replaced = front.Value.(*grpcConn)
		if now.Sub(replaced.idleSince) < cmp.Or(l.reclaimAfter, reclaimAfter) {
			return nil, nil
		}
		l.forgetLocked(replaced)
	}
	raddr := conn.RemoteAddr()
	admitted = &grpcConn{Conn: conn, l: l, addr: raddr.String()}
	l.conns[admitted.addr] = admitted
	if tcp, ok := raddr.(*net.TCPAddr); ok {
		if l.byTCP == nil {
			l.byTCP = map[*net.TCPAddr]*grpcConn{}
		}
		admitted.tcp = tcp
		l.byTCP[tcp] = admitted
	}
	l.idleLocked(admitted, now)
	return admitted, replaced
}

// reclaim closes c, forgotten by admit for a new connection to take its
// place.
//
// grpc-go gives no way to send one connection of its server a GOAWAY (it
// drains them only all together, in GracefulStop, or each at keepalive's
// MaxConnectionIdle), so c is closed bare. Its client, with no call in
// progress, connects again when it next calls. A call it began as c was
// chosen, its headers on their way, fails with UNAVAILABLE (the connection
// closed under it), as at any server's idle timeout, and is sent again if
// the client retries; grpc-go clients send a call not yet written to c on
// a new connection, transparently.
func (l *grpcListener) reclaim(c *grpcConn) {
	idle := time.Since(c.idleSince)
	_ = c.Close()
	l.counts.reclaimed.Add(1)
	l.warnings.Log(l.log, slog.LevelInfo, "reclaimed", "gRPC connection closed for a new one to take its place: --max-connections are open",
		"max_connections", l.max, "remote", c.addr, "idle", idle.Round(time.Millisecond))
}

// callBegun counts a call in progress on its connection, known by the
// peer in ctx, the context the server's tap is given, and returns what
// counts the call's end, to be called once as it ends. A call on a
// connection no longer counted (closed, or forgotten for reclaim) is not
// counted.
func (l *grpcListener) callBegun(ctx context.Context) (ended func()) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var c *grpcConn
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		c = l.byTCP[tcp]
	}
	if c == nil {
		// Another address value than the connection's own: by its text.
		c = l.conns[p.Addr.String()]
	}
	if c == nil {
		return func() {}
	}
	c.calls++
	if c.idleAt != nil {
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
	return func() { l.callEnded(c) }
}

// callEnded counts the end of a call on c: with no other in progress, c
// is idle from now on.
func (l *grpcListener) callEnded(c *grpcConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.calls--
	if c.calls == 0 && !c.forgotten {
		l.idleLocked(c, time.Now())
	}
}

// idleLocked puts c, idle since now, at the back of the idle list. It
// requires that l.mu is held.
func (l *grpcListener) idleLocked(c *grpcConn, now time.Time) {
	c.idleSince = now
	c.idleAt = l.idle.PushBack(c)
}

// forgetLocked stops counting c among the connections open, once. It
// requires that l.mu is held.
func (l *grpcListener) forgetLocked(c *grpcConn) {
	if c.forgotten {
		return
	}
	c.forgotten = true
	if l.conns[c.addr] == c {
		delete(l.conns, c.addr)
	}
	if c.tcp != nil && l.byTCP[c.tcp] == c {
		delete(l.byTCP, c.tcp)
	}
	if c.idleAt != nil {
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
}

// closeAll closes every connection open.
func (l *grpcListener) closeAll() {
	l.mu.Lock()
	conns := make([]*grpcConn, 0, len(l.conns))
	for _, c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// grpcConn is a connection of grpcListener, which counts it until it is
// closed, with the calls in progress on it.
type grpcConn struct {
	net.Conn
	l    *grpcListener
	addr string       // its remote address
	tcp  *net.TCPAddr // the same, as its TCP connection gives it; nil for another kind

	// Under l.mu:
	calls     int           // in progress
	idleSince time.Time     // when the last call ended, or the connection opened; fixed once forgotten
	idleAt    *list.Element // in l.idle while no call is in progress
	forgotten bool          // no longer counted: closed, or being reclaimed
}

func (c *grpcConn) Close() error {
	c.l.mu.Lock()
	c.l.forgetLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
