package main

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/streamer-dev/streamer/supervisor/httpapi"
	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// holdingService answers ServerLive at once, and holds each ModelInfer in
// progress until release is closed, saying on held that one is.
type holdingService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	held    chan struct{}
	release chan struct{}
}

func newHoldingService() *holdingService {
	return &holdingService{held: make(chan struct{}, 16), release: make(chan struct{})}
}

func (s *holdingService) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (s *holdingService) ModelInfer(ctx context.Context, _ *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	s.held <- struct{}{}
	select {
	case <-s.release:
		return &pb.ModelInferResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// cappedGRPC serves service on a port of its own through a grpcListener
// that holds max connections and reclaims one idle for a nanosecond, with
// openGRPC's tap, which checks token.
func cappedGRPC(t *testing.T, max int, token string, service pb.GRPCInferenceServiceServer) *grpcListener {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	l := &grpcListener{Listener: tcp, max: int64(max), reclaimAfter: time.Nanosecond, counts: &grpcConnCounts{}, log: log, conns: map[string]*grpcConn{}}
	var required *httpapi.Token
	if token != "" {
		required = httpapi.NewToken(token)
	}
	calls := &grpcCalls{token: tokenCheck(required, func(string, bool) {}), readTimeout: requestTimeout, unread: func(int) {}, conns: l, log: log}
	server := grpc.NewServer(grpc.InTapHandle(calls.begin), grpc.UnaryInterceptor(calls.read))
	calls.register(server, service)
	go func() { _ = server.Serve(l) }()
	t.Cleanup(server.Stop)
	return l
}

// callsOn says, for each connection l counts open, by its remote
// address, how many calls are in progress on it.
func (l *grpcListener) callsOn() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	calls := map[string]int{}
	for addr, c := range l.conns {
		calls[addr] = c.calls
	}
	return calls
}

// testGRPCClient is a client of the service with a connection of its own,
// which knows the address it last connected from.
type testGRPCClient struct {
	pb.GRPCInferenceServiceClient
	conn *grpc.ClientConn

	mu    sync.Mutex
	local string
}

func newTestGRPCClient(t *testing.T, addr string) *testGRPCClient {
	t.Helper()
	c := &testGRPCClient{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.mu.Lock()
			c.local = conn.LocalAddr().String()
			c.mu.Unlock()
		}
		return conn, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c.conn, c.GRPCInferenceServiceClient = conn, pb.NewGRPCInferenceServiceClient(conn)
	return c
}

// localAddr is the address c last connected from: the remote address of
// its connection to the server.
func (c *testGRPCClient) localAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local
}

// waitIdle waits until l counts c's connection open with no call in
// progress.
func waitIdle(t *testing.T, l *grpcListener, c *testGRPCClient, what string) {
	t.Helper()
	waitFor(t, what+" to be idle", requestTimeout, func() bool {
		calls, open := l.callsOn()[c.localAddr()]
		return open && calls == 0
	})
}

// At the cap, a new gRPC connection takes the place of the one idle
// longest, whose client sees it closed: idle after a call, or after a
// call refused for its token, which leaves it as idle as it was.
func TestGRPCIdleConnectionMakesRoomAtTheCap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string
		call  func(context.Context, *testGRPCClient) error
		want  codes.Code
	}{
		{"after a call", "", func(ctx context.Context, c *testGRPCClient) error {
			_, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
			return err
		}, codes.OK},
		{"after a call refused for its token", "s3cret", func(ctx context.Context, c *testGRPCClient) error {
			_, err := c.ModelInfer(ctx, &pb.ModelInferRequest{})
			return err
		}, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := cappedGRPC(t, 2, tc.token, newHoldingService())
			addr := l.Addr().String()
			ctx := callCtx(t)
			first, second := newTestGRPCClient(t, addr), newTestGRPCClient(t, addr)
			if err := tc.call(ctx, first); status.Code(err) != tc.want {
				t.Fatalf("the first connection's call: %v; want %s", err, tc.want)
			}
			waitIdle(t, l, first, "the first connection")
			if _, err := second.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
				t.Fatal(err)
			}
			waitIdle(t, l, second, "the second connection")

			third := newTestGRPCClient(t, addr)
			if _, err := third.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
				t.Fatalf("a third connection at a cap of 2, both idle: %v; want it served", err)
			}
			open := slices.Sorted(maps.Keys(l.callsOn()))
			if want := slices.Sorted(slices.Values([]string{second.localAddr(), third.localAddr()})); !slices.Equal(open, want) {
				t.Errorf("connections open %v; want the second's and the third's %v, the first's (%s) closed", open, want, first.localAddr())
			}
			if reclaimed, refused := l.counts.reclaimed.Load(), l.counts.refusedOverCap.Load(); reclaimed != 1 || refused != 0 {
				t.Errorf("counted %d reclaimed, %d refused; want 1 and 0", reclaimed, refused)
			}
			waitFor(t, "the first client to see its connection closed", requestTimeout, func() bool {
				return first.conn.GetState() == connectivity.Idle // as grpc-go leaves a lost connection
			})
			// The second connection is still the one it was: a call on it
			// goes out from the same address. (Its state is no witness: the
			// client may show CONNECTING for a while after its first call
			// was answered, as grpc-go updates the state after the picker
			// that calls go through.)
			from := second.localAddr()
			if _, err := second.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
				t.Fatalf("a call on the second connection after the third's: %v", err)
			}
			if now := second.localAddr(); now != from {
				t.Errorf("the second client connected again (from %s, was %s); want its connection left open", now, from)
			}
		})
	}
}

// At the cap, with a call in progress on every gRPC connection, a new one
// is closed as it comes, and the calls go on.
func TestGRPCBusyConnectionsKeepTheirPlacesAtTheCap(t *testing.T) {
	service := newHoldingService()
	l := cappedGRPC(t, 2, "", service)
	addr := l.Addr().String()
	ctx := callCtx(t)
	held := make(chan error, 2)
	for range 2 {
		c := newTestGRPCClient(t, addr)
		go func() {
			_, err := c.ModelInfer(ctx, &pb.ModelInferRequest{})
			held <- err
		}()
		select {
		case <-service.held:
		case <-time.After(requestTimeout):
			t.Fatal("the call to hold did not reach the service")
		}
	}
	_, err := newTestGRPCClient(t, addr).ServerLive(ctx, &pb.ServerLiveRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a third connection at a cap of 2, both busy: %v; want UNAVAILABLE", err)
	}
	if reclaimed, refused := l.counts.reclaimed.Load(), l.counts.refusedOverCap.Load(); reclaimed != 0 || refused == 0 {
		t.Errorf("counted %d reclaimed, %d refused; want none reclaimed, the third refused", reclaimed, refused)
	}
	close(service.release)
	for range 2 {
		if err := <-held; err != nil {
			t.Errorf("a call held in progress at the cap: %v; want it answered", err)
		}
	}
}
