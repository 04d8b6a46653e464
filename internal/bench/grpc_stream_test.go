package bench

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// endingStreams answers the first two requests of its first streaming
// call in reverse, and ends that call at its third request, unanswered,
// as a server that drains or loses the connection does; it answers those
// of later calls as they come.
type endingStreams struct {
	pb.UnimplementedGRPCInferenceServiceServer
	calls atomic.Int64
}

func (s *endingStreams) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	answer := func(id string) error {
		return stream.Send(&pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{Id: id}})
	}
	if s.calls.Add(1) > 1 {
		for {
			req, err := stream.Recv()
			if err != nil {
				return err
			}
			if err := answer(req.Id); err != nil {
				return err
			}
		}
	}
	a, err := stream.Recv()
	if err != nil {
		return err
	}
	b, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := answer(b.Id); err != nil {
		return err
	}
	if err := answer(a.Id); err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// A streamMux tells each request its own answer, whatever their order;
// fails a request under way when its call ends, as for a connection lost;
// and opens a new call for the next request.
func TestStreamMuxAnswersByIDAndOpensAnewAfterAnEnd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &endingStreams{}
	server := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(server, srv)
	go func() { _ = server.Serve(l) }()
	defer server.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := &streamMux{client: pb.NewGRPCInferenceServiceClient(conn), req: &pb.ModelInferRequest{ModelName: "m"}}
	defer m.close()
	ctx := context.Background()
	results := make(chan error, 2)
	for range 2 { // answered together, the second's answer first
		go func() {
			kind, err := m.call(ctx, time.Minute)
			if kind != "" && err == nil {
				err = context.Canceled
			}
			results <- err
		}()
	}
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("a request of the two answered in reverse: %v", err)
		}
	}
	if kind, err := m.call(ctx, time.Minute); kind != kindConnection || err == nil {
		t.Errorf("the third request, whose call ended: %q %v; want a connection error", kind, err)
	}
	if kind, err := m.call(ctx, time.Minute); kind != "" || err != nil {
		t.Errorf("a request after the call ended: %q %v; want it answered on a new call", kind, err)
	}
	if n := srv.calls.Load(); n != 2 {
		t.Errorf("%d calls made, want 2", n)
	}
}
