package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/supervisor"
	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// TestGRPCStreamInferBoundsTheRequestsUnderWay: a client that sends more
// requests on one ModelStreamInfer call than streamInFlight has at most
// that many under way at once, the rest read as earlier ones are
// answered; every request is answered once, with its id and its own item.
func TestGRPCStreamInferBoundsTheRequestsUnderWay(t *testing.T) {
	const sent = streamInFlight*2 + 44
	var underWay, most atomic.Int64
	full, release := make(chan struct{}), make(chan struct{})
	var fullOnce sync.Once
	backend := &fakeBackend{ready: true, submit: func(ctx context.Context, req supervisor.Request) (*answer, error) {
		n := underWay.Add(1)
		defer underWay.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n == streamInFlight {
			fullOnce.Do(func() { close(full) })
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return echoAnswer(req), nil
	}}
	h := newV2(echoModel(spec("t", "INT8", true, -1, -1)), backend).(*handler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := serveGRPC(t, h).ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sendErr := make(chan error, 1)
	go func() {
		for i := range sent {
			req := &pb.ModelInferRequest{Id: fmt.Sprint(i), ModelName: "m",
				Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", "INT8", 1, 1)}, RawInputContents: [][]byte{{byte(i)}}}
			if err := stream.Send(req); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- stream.CloseSend()
	}()
	select {
	case <-full:
	case <-ctx.Done():
		t.Fatalf("%d requests never came under way at once", streamInFlight)
	}
	close(release)
	seen := map[string]bool{}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d answers: %v", len(seen), err)
		}
		id := msg.GetInferResponse().GetId()
		if msg.ErrorMessage != "" || seen[id] {
			t.Fatalf("request %s: error %q, answered before: %v", id, msg.ErrorMessage, seen[id])
		}
		seen[id] = true
		if raw := msg.InferResponse.RawOutputContents; len(raw) != 1 || len(raw[0]) != 1 || raw[0][0] != byte(atoi(t, id)) {
			t.Fatalf("request %s answered %v", id, raw)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if len(seen) != sent {
		t.Errorf("%d requests answered, want %d", len(seen), sent)
	}
	if m := most.Load(); m > streamInFlight {
		t.Errorf("%d requests of one call under way at once, want %d at most", m, streamInFlight)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A request the codec refuses keeps the names it came with, as far as they
// are well formed, so that a refusal on a stream is answered with the id
// the client gave it: over the bound on entries, and malformed after its
// names. A name that is not UTF-8 is left out, as no answer could hold it.
func TestGRPCRefusedRequestKeepsItsNames(t *testing.T) {
	codec := NewGRPC(New(Config{Backend: &fakeBackend{ready: true}})).Codec()
	names := func(b []byte, model, version, id string) []byte {
		b = protowire.AppendString(protowire.AppendTag(b, fieldModelName, protowire.BytesType), model)
		b = protowire.AppendString(protowire.AppendTag(b, fieldModelVersion, protowire.BytesType), version)
		return protowire.AppendString(protowire.AppendTag(b, fieldID, protowire.BytesType), id)
	}
	tooMany := &pb.ModelInferRequest{ModelName: "m", ModelVersion: "2", Id: "many",
		Outputs: make([]*pb.ModelInferRequest_InferRequestedOutputTensor, maxTensorEntries+1)}
	for i := range tooMany.Outputs {
		tooMany.Outputs[i] = &pb.ModelInferRequest_InferRequestedOutputTensor{}
	}
	large, err := proto.Marshal(tooMany)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name               string
		wire               []byte
		field              protowire.Number
		model, version, id string
	}{
		{"too many entries", large, fieldTooLarge, "m", "2", "many"},
		{"malformed after its names", append(names(nil, "m", "1", "bad"), 0xff), fieldMalformed, "m", "1", "bad"},
		{"an id not UTF-8", names(nil, "m", "1", "\xff"), fieldMalformed, "m", "1", ""},
	} {
		req := new(pb.ModelInferRequest)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.wire)}, req); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if _, field := codecRefusal(req); field != tt.field {
			t.Errorf("%s: refusal field %d, want %d", tt.name, field, tt.field)
		}
		if req.ModelName != tt.model || req.ModelVersion != tt.version || req.Id != tt.id {
			t.Errorf("%s: refused request named model %q version %q id %q, want %q %q %q", tt.name, req.ModelName, req.ModelVersion, req.Id, tt.model, tt.version, tt.id)
		}
		if len(req.Outputs) != 0 || len(req.Inputs) != 0 {
			t.Errorf("%s: a refused request kept its tensors", tt.name)
		}
	}
}
