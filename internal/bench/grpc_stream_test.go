package bench

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/streamer-dev/streamer/supervisor/httpapi"
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
	srv := &endingStreams{}
	m := muxOn(t, srv, 0)
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

// stalledStreams reads the first request of a call and then neither reads
// nor answers, as a server whose requests under way on the call fill its
// bound; refusingStreams refuses each request with the code given, if
// any, in httpapi.StreamErrorCode.
type stalledStreams struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

func (stalledStreams) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

type refusingStreams struct {
	pb.UnimplementedGRPCInferenceServiceServer
	code *int64
}

func (s refusingStreams) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		resp := &pb.ModelInferResponse{Id: req.Id}
		if s.code != nil {
			resp.Parameters = map[string]*pb.InferParameter{httpapi.StreamErrorCode: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: *s.code}}}
		}
		if err := stream.Send(&pb.ModelStreamInferResponse{ErrorMessage: "no room", InferResponse: resp}); err != nil {
			return err
		}
	}
}

// muxOn serves srv on a loopback port until the test ends, and returns a
// streamMux of requests of size bytes on a client of it.
func muxOn(t *testing.T, srv pb.GRPCInferenceServiceServer, size int) *streamMux {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(server, srv)
	go func() { _ = server.Serve(l) }()
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := &streamMux{client: pb.NewGRPCInferenceServiceClient(conn),
		req: &pb.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{make([]byte, size)}}}
	t.Cleanup(m.close)
	return m
}

// A request times out at its timeout even while the call's sends are held
// up by HTTP/2's flow control, the server reading no more: before, a
// request blocked in its send held every other, and the load ran on
// until the server answered.
func TestStreamMuxRequestsTimeOutWhileTheServerReadsNoMore(t *testing.T) {
	m := muxOn(t, stalledStreams{}, 1<<20) // a few fill the windows
	results := make(chan string, 8)
	for range cap(results) {
		go func() {
			kind, _ := m.call(context.Background(), 200*time.Millisecond)
			results <- kind
		}()
	}
	for range cap(results) {
		if kind := <-results; kind != kindTimeout {
			t.Errorf("a request to a server that reads no more: %q, want %q", kind, kindTimeout)
		}
	}
}

// A request refused on a stream counts as the kind its code gives, as a
// call's would; without the code, as a refusal on a stream.
func TestStreamMuxRefusalsByTheirCode(t *testing.T) {
	unavailable := int64(codes.Unavailable)
	for _, tt := range []struct {
		code *int64
		want string
	}{{&unavailable, "grpc Unavailable"}, {nil, "grpc stream refusal"}} {
		kind, err := muxOn(t, refusingStreams{code: tt.code}, 1).call(context.Background(), time.Minute)
		if kind != tt.want || err == nil || err.Error() != "no room" {
			t.Errorf("a refusal with code %v: %q %v, want %q with its message", tt.code, kind, err, tt.want)
		}
	}
}
