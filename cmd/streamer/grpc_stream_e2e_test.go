package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// sleepRequest is a ModelInfer request of one BYTES item for the sleep
// model, which answers each item with itself.
func sleepRequest(id, item string) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{Id: id, ModelName: "sleep", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1},
		Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte(item)}},
	}}}
}

// TestGRPCStreamInfer: Triton's streaming call carries many requests at
// once on one call, so that one client fills batches: 20 requests sent
// one after another without waiting run in two or three batches of a 1 s
// model, where one at a time would take 20. Each request gets one answer
// with its id, its item back; one for a model the server does not serve,
// and one refused as it is read, get their errors with their ids, and the
// call goes on. Once the client has
// sent its last, the call ends OK after the last answer.
func TestGRPCStreamInfer(t *testing.T) {
	s, c := startGRPC(t, "--model", "sleep:1s,0", "--workers", "1", "--max-latency", "1ms")
	stream, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := stream.Send(sleepRequest(fmt.Sprint("r", i), fmt.Sprint("item ", i))); err != nil {
			t.Fatal(err)
		}
	}
	wrong := sleepRequest("wrong", "x")
	wrong.ModelName = "nonesuch"
	if err := stream.Send(wrong); err != nil {
		t.Fatal(err)
	}
	// Refused as it is read, over the bound on entries: by its id too.
	tooMany := sleepRequest("too many", "x")
	for range 4097 {
		tooMany.Outputs = append(tooMany.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: "output"})
	}
	if err := stream.Send(tooMany); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the stream ended with %v after %d answers; want OK after %d", err, len(got), n+2)
		}
		id := msg.GetInferResponse().GetId()
		if _, twice := got[id]; twice {
			t.Fatalf("request %q answered twice", id)
		}
		if msg.ErrorMessage != "" {
			got[id] = "error: " + msg.ErrorMessage
			continue
		}
		if out := msg.InferResponse.RawOutputContents; len(out) == 1 {
			got[id] = strings.Join(bytesElementsOf(t, out[0]), ",")
		} else {
			got[id] = fmt.Sprintf("%d outputs", len(out))
		}
	}
	for i := range n {
		if id, want := fmt.Sprint("r", i), fmt.Sprint("item ", i); got[id] != want {
			t.Errorf("request %s: answered %q, want %q", id, got[id], want)
		}
	}
	if answer := got["wrong"]; !strings.HasPrefix(answer, "error: ") || !strings.Contains(answer, "nonesuch") {
		t.Errorf("the request for another model: answered %q, want its error naming the model", answer)
	}
	if answer := got["too many"]; !strings.HasPrefix(answer, "error: ") || !strings.Contains(answer, "over the 4096") {
		t.Errorf("the request over the bound on entries: answered %q, want its refusal", answer)
	}
	if len(got) != n+2 {
		t.Errorf("%d answers, want %d", len(got), n+2)
	}
	if st := s.stats(t); st.Batches > 3 || st.Answered != n {
		t.Errorf("stats %+v: want the %d items answered in 3 batches at most", st, n)
	}
	if v := metricValue(t, s, `streamer_requests_total{outcome="ok"}`); v != n {
		t.Errorf("%v requests counted ok, want %d", v, n)
	}
}

// TestGRPCStreamInferRefusesWithoutTheToken: the streaming call needs the
// token, as ModelInfer does.
func TestGRPCStreamInferRefusesWithoutTheToken(t *testing.T) {
	_, c := startGRPC(t, "--model", "sleep:1ms,0", "--auth-token", "stream-test-token-0123")
	stream, err := c.ModelStreamInfer(callCtx(t))
	if err == nil {
		if err = stream.Send(sleepRequest("r", "x")); err == nil {
			_, err = stream.Recv()
		}
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without the token: %v, want UNAUTHENTICATED", err)
	}
}

// TestGRPCStreamInferThroughADrain: at SIGTERM, the request under way on
// an open stream is answered on it; a request sent during the drain gets
// its refusal; the stream, which its client never closes, does not hold
// the server, which exits 0.
func TestGRPCStreamInferThroughADrain(t *testing.T) {
	s, c := startGRPC(t, "--model", "sleep:1s,0", "--max-latency", "1ms")
	stream, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(sleepRequest("before", "slow")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request to be admitted", readyTimeout, func() bool { return s.stats(t).Submitted > 0 })
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitLogged(t, "signal received: draining")
	if err := stream.Send(sleepRequest("during", "late")); err != nil {
		t.Fatal(err)
	}
	answers := map[string]*pb.ModelStreamInferResponse{}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if st := status.Code(err); st == codes.OK {
				t.Errorf("the stream ended OK, though its client never closed it")
			}
			break
		}
		answers[msg.GetInferResponse().GetId()] = msg
	}
	if a := answers["before"]; a == nil || a.ErrorMessage != "" || len(a.InferResponse.RawOutputContents) != 1 {
		t.Errorf("the request under way at SIGTERM: answered %v; want its answer", a)
	}
	if a := answers["during"]; a != nil && a.ErrorMessage == "" {
		t.Errorf("a request sent during the drain was run: %v", a)
	}
	if code, err := s.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("exit %d %v after SIGTERM with a stream open, want 0", code, err)
	}
}

// TestGRPCStreamInferEndsAtAMessageOverTheLimit: a message over the limit
// ends the call RESOURCE_EXHAUSTED at once: grpc-go ends it as it refuses
// the message, so the request under way on it is canceled, and counted
// so; the message is counted rejected, as on a call of its own. The
// server serves the next call.
func TestGRPCStreamInferEndsAtAMessageOverTheLimit(t *testing.T) {
	s, c := startGRPC(t, "--model", "sleep:1s,0", "--max-latency", "1ms", "--max-body", "1024")
	stream, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(sleepRequest("small", "x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the small request to be admitted", readyTimeout, func() bool { return s.stats(t).Submitted == 1 })
	if err := stream.Send(sleepRequest("large", strings.Repeat("x", 64<<10))); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("after a message over the limit: %v %v; want the stream ended RESOURCE_EXHAUSTED", msg, err)
	}
	waitFor(t, "the small request counted canceled, the large one rejected", readyTimeout, func() bool {
		return metricValue(t, s, `streamer_requests_total{outcome="canceled"}`) == 1 &&
			metricValue(t, s, `streamer_requests_total{outcome="rejected"}`) == 1
	})
	next, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Send(sleepRequest("next", "y")); err != nil {
		t.Fatal(err)
	}
	if msg, err := next.Recv(); err != nil || msg.ErrorMessage != "" || msg.GetInferResponse().GetId() != "next" {
		t.Errorf("the call after: %v %v; want its answer", msg, err)
	}
}

// TestGRPCStreamInferHoldsItsConnectionOnlyWhileBusy: at
// --max-connections, a streaming call keeps its connection from being
// reclaimed while it has a request under way; once its answers are out,
// held open with nothing under way, its connection gives its place to a
// new one as an idle connection does, and the call ends UNAVAILABLE.
// Before, a client held its connection for good with one stream open.
func TestGRPCStreamInferHoldsItsConnectionOnlyWhileBusy(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "sleep:5s,0", "--max-latency", "1ms", "--grpc-listen", addr, "--max-connections", "1")
	stream, err := grpcClient(t, addr, nil).ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(sleepRequest("busy", "x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request to be admitted", readyTimeout, func() bool { return s.stats(t).Submitted == 1 })
	live := func(ctx context.Context, c pb.GRPCInferenceServiceClient) error {
		_, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
		return err
	}
	if callsOnANewConnection(t, addr, live) {
		t.Fatal("a new connection took the place of one whose stream had a request under way")
	}
	if msg, err := stream.Recv(); err != nil || msg.ErrorMessage != "" {
		t.Fatalf("the request under way: %v %v", msg, err)
	}
	waitFor(t, "a new connection to take the place of the one whose stream is idle", 15*time.Second, func() bool {
		return callsOnANewConnection(t, addr, live)
	})
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the idle stream after its connection was reclaimed: %v; want UNAVAILABLE", err)
	}
	if n := metricValue(t, s, `streamer_connections_reclaimed_total{protocol="grpc"}`); n != 1 {
		t.Errorf("%v connections counted reclaimed, want 1", n)
	}
}

// TestGRPCStreamInferRefusalsCarryTheirCode: a request refused on a
// stream carries the gRPC code its call would have ended with, in the
// streamer_error_code parameter: INVALID_ARGUMENT for a wrong input,
// NOT_FOUND for another model.
func TestGRPCStreamInferRefusalsCarryTheirCode(t *testing.T) {
	_, c := startGRPC(t, "--model", "sleep:1ms,0")
	stream, err := c.ModelStreamInfer(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	wrongType := sleepRequest("type", "x")
	wrongType.Inputs[0].Datatype = "FP32"
	other := sleepRequest("model", "x")
	other.ModelName = "nonesuch"
	for _, req := range []*pb.ModelInferRequest{wrongType, other} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	want := map[string]codes.Code{"type": codes.InvalidArgument, "model": codes.NotFound}
	for range want {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		resp := msg.GetInferResponse()
		code, ok := resp.GetParameters()["streamer_error_code"]
		if msg.ErrorMessage == "" || !ok || codes.Code(code.GetInt64Param()) != want[resp.GetId()] {
			t.Errorf("request %q: %v; want its error with code %s", resp.GetId(), msg, want[resp.GetId()])
		}
	}
}
