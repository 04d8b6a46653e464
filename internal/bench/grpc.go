package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// ProtocolGRPC calls the Open Inference Protocol's gRPC service
// (ModelInfer), its inputs as raw contents, as tritonclient sends them.
const ProtocolGRPC = "grpc"

// grpcCallsPerConn is how many of the load's clients share one gRPC
// connection: the server takes 256 calls at once on one, and a client
// library's channel is commonly shared by a few dozen callers.
const grpcCallsPerConn = 64

// grpcTarget returns the address of the gRPC service to load: the one
// given with the target, or a free loopback port the server bench starts
// is told to serve it on.
func (cfg *Config) grpcTarget() (string, error) {
	if cfg.GRPCTarget != "" || cfg.Target != "" {
		if cfg.GRPCTarget == "" {
			return "", errors.New("--protocol grpc with --target: give the target's gRPC address with --grpc-target (its --grpc-listen)")
		}
		return cfg.GRPCTarget, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port for the server's gRPC service: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg.Server.Args = append(cfg.Server.Args, "--grpc-listen", addr)
	return addr, nil
}

// grpcSender calls ModelInfer at addr with the request the model's v2
// metadata (read from base over http) and item make, over one connection
// for every grpcCallsPerConn clients. The returned func closes them.
func (cfg *Config) grpcSender(client *http.Client, base, addr string, item any) (sender, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec, err := cfg.v2Spec(ctx, client, base)
	if err != nil {
		return nil, nil, err
	}
	values, err := v2Values(spec, item)
	if err != nil {
		return nil, nil, fmt.Errorf("--input: %w", err)
	}
	req := &pb.ModelInferRequest{ModelName: cfg.ModelName}
	n := cfg.ItemsPerRequest
	for i, in := range spec.Inputs {
		shape, flat, err := flatten(values[i], in.Datatype)
		if err != nil {
			return nil, nil, fmt.Errorf("--input: input %q: %w", in.Name, err)
		}
		data := make([]any, 0, n*len(flat))
		for range n {
			data = append(data, flat...)
		}
		raw, err := appendBinary(nil, in.Datatype, data)
		if err != nil {
			return nil, nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
			Name: in.Name, Datatype: in.Datatype, Shape: append([]int64{int64(n)}, shape...)})
		req.RawInputContents = append(req.RawInputContents, raw)
	}
	conns := make([]*grpc.ClientConn, (cfg.Concurrency+grpcCallsPerConn-1)/grpcCallsPerConn)
	clients := make([]pb.GRPCInferenceServiceClient, len(conns))
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}
	creds := insecure.NewCredentials()
	if IsHTTPS(base) {
		// The gRPC service of a server that serves HTTPS is served over
		// TLS with the same certificate, checked as for the http requests.
		creds = credentials.NewTLS(cfg.tlsConfig())
	}
	for i := range conns {
		// Answers as large as the server sends: grpc-go's client takes
		// 4 MiB by default, and a larger answer would count as the
		// server's refusal.
		if conns[i], err = grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32))); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("--grpc-target %s: %w", addr, err)
		}
		clients[i] = pb.NewGRPCInferenceServiceClient(conns[i])
	}
	var md metadata.MD
	if cfg.Token != "" {
		md = metadata.Pairs("authorization", "Bearer "+cfg.Token)
	}
	var next atomic.Uint64
	timeout := cfg.RequestTimeout
	if cfg.GRPCStream {
		muxes := make([]*streamMux, len(clients))
		for i, c := range clients {
			muxes[i] = &streamMux{client: c, md: md, req: req}
		}
		send := func(ctx context.Context) (string, error) {
			return muxes[next.Add(1)%uint64(len(muxes))].call(ctx, timeout)
		}
		return send, func() {
			for _, m := range muxes {
				m.close()
			}
			closeAll()
		}, nil
	}
	send := func(ctx context.Context) (string, error) {
		c := clients[next.Add(1)%uint64(len(clients))]
		call, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if md != nil {
			call = metadata.NewOutgoingContext(call, md)
		}
		_, err := c.ModelInfer(call, req)
		if err == nil {
			return "", nil
		}
		code := status.Code(err)
		switch {
		case ctx.Err() != nil:
			return "", nil // the load ended under it
		case code == codes.DeadlineExceeded && call.Err() != nil:
			return kindTimeout, err
		case code == codes.Unavailable && !serverSaidUnavailable(err):
			return kindConnection, err
		}
		return "grpc " + code.String(), errors.New(status.Convert(err).Message())
	}
	return send, closeAll, nil
}

// grpcKind is the kind of error of a call that failed with err: a
// timeout, a connection lost or refused, or the server's refusal by its
// code.
func grpcKind(err error) (string, error) {
	code := status.Code(err)
	switch {
	case errors.Is(err, errStreamEnded):
		return kindConnection, err
	case code == codes.DeadlineExceeded:
		return kindTimeout, err
	case code == codes.Unavailable && !serverSaidUnavailable(err):
		return kindConnection, err
	}
	return "grpc " + code.String(), errors.New(status.Convert(err).Message())
}

// streamMux carries the requests of the clients that share a connection
// on one ModelStreamInfer call, each told its answer by the id it was
// sent with. A call that ends (its connection lost, the server's drain)
// fails the requests under way on it, and the next request opens
// another.
type streamMux struct {
	client pb.GRPCInferenceServiceClient
	md     metadata.MD
	req    *pb.ModelInferRequest // each request is this one under its own id

	mu      sync.Mutex // the stream takes one message at a time
	stream  pb.GRPCInferenceService_ModelStreamInferClient
	cancel  context.CancelFunc
	waiting map[string]chan streamAnswer
	next    uint64
	closed  bool
}

// errStreamEnded fails the requests under way on a streaming call that
// the server ended without their answers.
var errStreamEnded = errors.New("the server ended the streaming call with requests under way")

// streamAnswer is a request's answer, or the end of its call.
type streamAnswer struct {
	msg *pb.ModelStreamInferResponse
	err error
}

// call sends one request and waits for its answer, for timeout at most.
func (m *streamMux) call(ctx context.Context, timeout time.Duration) (string, error) {
	answer := make(chan streamAnswer, 1)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return "", nil // the load ended
	}
	if m.stream == nil {
		if err := m.openLocked(); err != nil {
			m.mu.Unlock()
			return grpcKind(err)
		}
	}
	m.next++
	id := strconv.FormatUint(m.next, 10)
	m.waiting[id] = answer
	err := m.stream.Send(&pb.ModelInferRequest{Id: id, ModelName: m.req.ModelName, Inputs: m.req.Inputs, RawInputContents: m.req.RawInputContents})
	m.mu.Unlock()
	if err != nil {
		// The call ended: its reader fails what waits on it, this too.
		err = (<-answer).err
		return grpcKind(err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-answer:
		switch {
		case a.err != nil && ctx.Err() != nil:
			return "", nil // the load ended under it
		case a.err != nil:
			return grpcKind(a.err)
		case a.msg.ErrorMessage != "":
			return "grpc stream refusal", errors.New(a.msg.ErrorMessage)
		}
		return "", nil
	case <-t.C:
		m.forget(id)
		return kindTimeout, fmt.Errorf("no answer on the stream within %s", timeout)
	case <-ctx.Done():
		m.forget(id)
		return "", nil
	}
}

// openLocked opens a call, and its reader. It requires that m.mu is held.
func (m *streamMux) openLocked() error {
	ctx, cancel := context.WithCancel(context.Background())
	if m.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, m.md)
	}
	stream, err := m.client.ModelStreamInfer(ctx)
	if err != nil {
		cancel()
		return err
	}
	m.stream, m.cancel, m.waiting = stream, cancel, map[string]chan streamAnswer{}
	go m.read(stream, m.waiting)
	return nil
}

// read hands each answer of stream to the request of its id, among
// waiting, until the call ends; then it fails those left.
func (m *streamMux) read(stream pb.GRPCInferenceService_ModelStreamInferClient, waiting map[string]chan streamAnswer) {
	for {
		msg, err := stream.Recv()
		m.mu.Lock()
		if err != nil {
			if err == io.EOF {
				err = errStreamEnded
			}
			for id, answer := range waiting {
				answer <- streamAnswer{err: err}
				delete(waiting, id)
			}
			if m.stream == stream {
				m.stream = nil
				m.cancel()
			}
			m.mu.Unlock()
			return
		}
		answer, ok := waiting[msg.GetInferResponse().GetId()]
		delete(waiting, msg.GetInferResponse().GetId())
		m.mu.Unlock()
		if ok {
			answer <- streamAnswer{msg: msg}
		}
	}
}

// forget stops waiting for the answer of request id.
func (m *streamMux) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.waiting, id)
}

// close ends the call under way, if any; no request is sent after.
func (m *streamMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.stream != nil {
		m.cancel()
	}
}

// serverSaidUnavailable tells the server's UNAVAILABLE (no worker able to
// run, a drain) from one the client reports for a connection it could not
// make or lost: the server's carries its reason, which a transport's
// failure does not start with.
func serverSaidUnavailable(err error) bool {
	msg := status.Convert(err).Message()
	for _, prefix := range []string{"connection error", "error reading from server", "transport is closing", "name resolver", "invalid target address"} {
		if len(msg) >= len(prefix) && msg[:len(prefix)] == prefix {
			return false
		}
	}
	return true
}
