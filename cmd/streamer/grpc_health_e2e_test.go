package main

// End-to-end tests of what production gRPC clients and probes need of
// --grpc-listen beside the inference service: the standard health service
// and a ping policy that takes the keepalive settings they use.

import (
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// TestGRPCHealthService: grpc.health.v1.Health, which Kubernetes' grpc
// probes, grpc_health_probe and proxies call, answers the server's
// readiness for the empty service name, without the token, as GET /readyz
// does (before, the service was not served, and such a probe never saw the
// server ready). Watch needs the token, outlives --read-timeout, and sees
// the drain: NOT_SERVING, then the call ends UNAVAILABLE, while the call
// under way is answered.
func TestGRPCHealthService(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "sleep:2s,0", "--max-latency", "1ms", "--grpc-listen", addr,
		"--auth-token", "s3cret-s3cret-s3cret", "--read-timeout", "1s")
	s.token = "s3cret-s3cret-s3cret"
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)
	ctx := callCtx(t)
	check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	waitFor(t, "the server ready to a health check without the token", 10*time.Second, func() bool {
		st, err := check("")
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	})
	for _, service := range []string{"readiness", "liveness", "inference.GRPCInferenceService"} {
		if st, err := check(service); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q): %v %v; want SERVING", service, st, err)
		}
	}
	_, err = check("nope")
	wantCode(t, "Check of a service the server does not know", err, codes.NotFound, `"nope"`, `"liveness"`)
	list, err := health.List(ctx, &healthpb.HealthListRequest{})
	if err != nil || len(list.GetStatuses()) != 4 || list.GetStatuses()["liveness"].GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("List: %v %v; want four services, liveness SERVING", list, err)
	}

	anonymous, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = anonymous.Recv()
	}
	wantCode(t, "Watch without the token", err, codes.Unauthenticated)

	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret-s3cret-s3cret")
	unknown, err := health.Watch(authed, &healthpb.HealthCheckRequest{Service: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := unknown.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Errorf("Watch of a service the server does not know: %v %v; want SERVICE_UNKNOWN", first, err)
	}
	watch, err := health.Watch(authed, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch's first status: %v %v; want SERVING", first, err)
	}
	// A call under way keeps the drain going while the watcher looks.
	done := make(chan error, 1)
	go func() {
		_, err := pb.NewGRPCInferenceServiceClient(conn).ModelInfer(authed, &pb.ModelInferRequest{ModelName: "sleep", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("slow")}},
		}}})
		done <- err
	}()
	waitFor(t, "the call to be admitted", 5*time.Second, func() bool { return s.stats(t).Submitted > 0 })
	// Past --read-timeout: the watch, whose message came long ago, stays.
	<-time.After(1500 * time.Millisecond)
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if next, err := watch.Recv(); err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch's status after SIGTERM: %v %v; want NOT_SERVING", next, err)
	}
	_, err = watch.Recv()
	wantCode(t, "Watch once the server drains", err, codes.Unavailable, "shutting down")
	if err := <-done; err != nil {
		t.Errorf("the call under way at SIGTERM: %v", err)
	}
	if code, err := s.wait(15 * time.Second); err != nil || code != 0 {
		t.Fatalf("exit %d %v, want 0", code, err)
	}
}

// TestGRPCKeepalivePingsAreTaken: a client that pings every few seconds,
// as clients and proxies keeping their connections alive do, keeps its
// connection, with or without calls under way. Before, grpc-go's default
// policy (a ping every 5 minutes at most, none without a call) closed it
// with GOAWAY "too_many_pings" at the third ping, failing its calls.
func TestGRPCKeepalivePingsAreTaken(t *testing.T) {
	addr := freePort(t)
	startServer(t, "--model", "echo", "--grpc-listen", addr, "--idle-timeout", "1m")
	_, fr := rawConn(t, addr)
	acks, goaway := make(chan struct{}, 8), make(chan string, 1)
	writes := make(chan func() error, 8) // the framer writes from one goroutine
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				if f.IsAck() {
					acks <- struct{}{}
				} else {
					data := f.Data
					writes <- func() error { return fr.WritePing(true, data) }
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					writes <- fr.WriteSettingsAck
				}
			case *http2.GoAwayFrame:
				goaway <- f.ErrCode.String() + " " + string(f.DebugData())
				return
			}
		}
	}()
	const pings, every = 4, grpcMinPingInterval + 200*time.Millisecond
	next := time.After(0)
	for sent := 0; sent < pings; {
		select {
		case write := <-writes:
			if err := write(); err != nil {
				t.Fatal(err)
			}
		case <-next:
			if err := fr.WritePing(false, [8]byte{byte(sent)}); err != nil {
				t.Fatal(err)
			}
			sent++
			select {
			case <-acks:
			case why := <-goaway:
				t.Fatalf("the server sent GOAWAY (%s) at ping %d of one every %s", why, sent, every)
			case <-time.After(5 * time.Second):
				t.Fatalf("ping %d was not answered", sent)
			}
			next = time.After(every)
		case why := <-goaway:
			t.Fatalf("the server sent GOAWAY (%s) after %d pings of one every %s", why, sent, every)
		}
	}
	// The GOAWAY for a ping comes behind its answer.
	select {
	case why := <-goaway:
		t.Fatalf("the server sent GOAWAY (%s) after %d pings of one every %s", why, pings, every)
	case <-time.After(time.Second):
	}
}
