package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
	"github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// grpcMaxStreams bounds the calls one gRPC connection carries at once, as
// HTTP/2 servers commonly do (Go's own serves 250): without it one
// connection could hold any number.
const grpcMaxStreams = 256

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
func (o serveOptions) openGRPC(api http.Handler, guard *security, log *slog.Logger) (*grpcServer, error) {
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
	options := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(o.maxBody+grpcHeaderSlack, 1<<31-1))),
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.ConnectionTimeout(min(10*time.Second, o.readTimeout)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: o.idleTimeout}),
	}
	if guard.token != "" {
		check := tokenCheck(guard.token)
		options = append(options, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if !grpcHealthCall(info.FullMethod) {
				if err := check(ctx); err != nil {
					return nil, err
				}
			}
			return handler(ctx, req)
		}))
	}
	if guard.cert != nil {
		options = append(options, grpc.Creds(credentials.NewTLS(guard.cert.config())))
		log.Info("serving gRPC over TLS", "cert", guard.cert.certFile)
	}
	server := grpc.NewServer(options...)
	inferencepb.RegisterGRPCInferenceServiceServer(server, httpapi.NewGRPC(api))
	listener := &grpcListener{Listener: tcp, max: int64(o.maxConnections), log: log}
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
// compared in constant time.
func tokenCheck(token string) func(context.Context) error {
	want := []byte(token)
	return func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		values := md.Get("authorization")
		if len(values) == 0 {
			return status.Error(codes.Unauthenticated, `missing "authorization" metadata: send "Bearer TOKEN" with the server's --auth-token`)
		}
		scheme, got, ok := strings.Cut(values[0], " ")
		if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") ||
			subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) != 1 {
			return status.Error(codes.Unauthenticated, `the "authorization" metadata is not "Bearer" with the server's token`)
		}
		return nil
	}
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
	open     atomic.Int64
	log      *slog.Logger
	warnings repeats.Lines
}

func (l *grpcListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.warnings.Log(l.log, slog.LevelWarn, "over cap", "gRPC connection refused: --max-connections are open",
				"max_connections", l.max, "remote", conn.RemoteAddr().String())
			_ = conn.Close()
			continue
		}
		return &countedConn{Conn: conn, open: &l.open}, nil
	}
}
