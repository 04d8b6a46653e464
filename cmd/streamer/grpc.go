package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // calls compressed with gzip, as REST bodies may be
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
	"github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// grpcMaxStreams bounds the calls one gRPC connection carries at once, as
// HTTP/2 servers commonly do (Go's own serves 250): without it one
// connection could hold any number.
const grpcMaxStreams = 256

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
// the certificate are the HTTP API's. It returns nil when --grpc-listen
// is not set.
func (o serveOptions) openGRPC(api http.Handler, guard *security, refused *atomic.Uint64, log *slog.Logger) (*grpcServer, error) {
	if o.grpcListen == "" {
		return nil, nil
	}
	tcp, err := net.Listen("tcp", o.grpcListen)
	if err != nil {
		return nil, fmt.Errorf("--grpc-listen %s: %w", o.grpcListen, err)
	}
	if ip, ok := tcp.Addr().(*net.TCPAddr); ok && !ip.IP.IsLoopback() && guard.token == "" {
		log.Warn("the gRPC API listens beyond this machine with no token: anyone who can reach it can run the model; give --auth-token", "grpc_listen", tcp.Addr().String())
	}
	service := httpapi.NewGRPC(api)
	calls := &grpcCalls{token: tokenCheck(guard.token), readTimeout: o.readTimeout, log: log}
	options := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(o.maxBody+grpcHeaderSlack, 1<<31-1))),
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.ConnectionTimeout(min(10*time.Second, o.readTimeout)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: o.idleTimeout}),
		grpc.ForceServerCodecV2(service.Codec()),
		grpc.InTapHandle(calls.begin),
		grpc.UnaryInterceptor(calls.read),
	}
	if guard.cert != nil {
		options = append(options, grpc.Creds(credentials.NewTLS(guard.cert.config())))
		log.Info("serving gRPC over TLS", "cert", guard.cert.certFile)
	}
	server := grpc.NewServer(options...)
	inferencepb.RegisterGRPCInferenceServiceServer(server, service)
	listener := &grpcListener{Listener: tcp, max: int64(o.maxConnections), refused: refused, log: log, conns: map[*grpcConn]struct{}{}}
	g := &grpcServer{server: server, listener: listener, served: make(chan error, 1)}
	go func() { g.served <- server.Serve(listener) }()
	log.Info("serving the Open Inference Protocol over gRPC", "grpc_listen", tcp.Addr().String())
	return g, nil
}

// grpcHealthCall says whether method is one of the server's health calls,
// which, as the HTTP API's health routes, need no token: probes may not
// carry one, and the answers tell nothing of the model.
func grpcHealthCall(method string) bool {
	switch method {
	case inferencepb.GRPCInferenceService_ServerLive_FullMethodName, inferencepb.GRPCInferenceService_ServerReady_FullMethodName:
		return true
	}
	return false
}

// tokenCheck returns the check of a call's "authorization" metadata
// against token, as RequireToken checks the HTTP header: "Bearer TOKEN",
// compared through their SHA-256 digests in constant time, which tells
// nothing of the token's length either. With no token, it checks nothing.
func tokenCheck(token string) func(metadata.MD) error {
	if token == "" {
		return func(metadata.MD) error { return nil }
	}
	want := sha256.Sum256([]byte(token))
	return func(md metadata.MD) error {
		values := md.Get("authorization")
		if len(values) == 0 {
			return status.Error(codes.Unauthenticated, `missing "authorization" metadata: send "Bearer TOKEN" with the server's --auth-token`)
		}
		scheme, got, ok := strings.Cut(values[0], " ")
		digest := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(digest[:], want[:]) != 1 {
			return status.Error(codes.Unauthenticated, `the "authorization" metadata is not "Bearer" with the server's token`)
		}
		return nil
	}
}

// grpcCalls vets each call as it begins, before its message is read: the
// token, which a call without it is refused for before it costs the server
// the decoding of its message, and the time its message may take to
// arrive, --read-timeout as on the HTTP API, after which the call is
// ended: a client that opens calls and sends their messages slowly, or
// not at all, would otherwise hold them, and their connections, for ever.
type grpcCalls struct {
	token       func(metadata.MD) error
	readTimeout time.Duration
	log         *slog.Logger
	warnings    repeats.Lines
}

// readTimerKey keys the timer of a call's message in its context.
type readTimerKey struct{}

// begin is the server's tap: it runs as a call's headers arrive.
func (c *grpcCalls) begin(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !grpcHealthCall(info.FullMethodName) {
		if err := c.token(info.Header); err != nil {
			return ctx, err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	method := info.FullMethodName
	timer := time.AfterFunc(c.readTimeout, func() {
		if ctx.Err() != nil {
			return // the call ended before its message was read: refused, or its client left
		}
		c.warnings.Log(c.log, slog.LevelWarn, "read timeout", "gRPC call ended: its message did not arrive within --read-timeout",
			"method", method, "read_timeout", c.readTimeout)
		cancel(errReadTimeout)
	})
	// A call that ends before its handler runs (its client gave up, its
	// message was refused as it was decoded) stops its timer as it ends,
	// rather than keep the call's state for --read-timeout.
	context.AfterFunc(ctx, func() { timer.Stop() })
	return context.WithValue(ctx, readTimerKey{}, timer), nil
}

// errReadTimeout ends a call whose message came too slowly.
var errReadTimeout = errors.New("the call's message did not arrive within --read-timeout")

// read is the server's interceptor: it runs once the call's message is in,
// and stops its timer.
func (c *grpcCalls) read(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if timer, ok := ctx.Value(readTimerKey{}).(*time.Timer); ok && !timer.Stop() {
		return nil, status.Error(codes.DeadlineExceeded, errReadTimeout.Error())
	}
	return handler(ctx, req)
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

// grpcListener holds at most max gRPC connections open at once; one more
// is closed as it comes, which the client reports as UNAVAILABLE, the
// code gRPC clients retry. A gRPC connection carries many calls at once,
// so clients need few: the cap is --max-connections, counted apart from
// the HTTP API's.
type grpcListener struct {
	net.Listener
	max      int64
	refused  *atomic.Uint64 // the connections closed over the cap
	log      *slog.Logger
	warnings repeats.Lines

	mu    sync.Mutex
	conns map[*grpcConn]struct{} // those open
}

func (l *grpcListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		over := int64(len(l.conns)) >= l.max
		c := &grpcConn{Conn: conn, l: l}
		if !over {
			l.conns[c] = struct{}{}
		}
		l.mu.Unlock()
		if over {
			l.refused.Add(1)
			l.warnings.Log(l.log, slog.LevelWarn, "over cap", "gRPC connection refused: --max-connections are open",
				"max_connections", l.max, "remote", conn.RemoteAddr().String())
			_ = conn.Close()
			continue
		}
		return c, nil
	}
}

// closeAll closes every connection open.
func (l *grpcListener) closeAll() {
	l.mu.Lock()
	conns := make([]*grpcConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// grpcConn is a connection of grpcListener, which counts it until it is
// closed.
type grpcConn struct {
	net.Conn
	l *grpcListener
}

func (c *grpcConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
