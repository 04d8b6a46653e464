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

	"github.com/streamer-dev/streamer/supervisor/httpapi"
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
// another. Messages go out through one sender per call: a request waits
// for its turn no longer than its timeout, even while the server, its
// 256 requests of the call under way, reads no more (a call cannot cancel
// one request, so those that time out stay under way there).
type streamMux struct {
	client pb.GRPCInferenceServiceClient
	md     metadata.MD
	req    *pb.ModelInferRequest // each request is this one under its own id

	mu      sync.Mutex
	current *muxCall // the call under way; nil for none
	next    uint64
	closed  bool
}

// muxCall is one ModelStreamInfer call of a streamMux.
type muxCall struct {
	stream  pb.GRPCInferenceService_ModelStreamInferClient
	cancel  context.CancelFunc
	sends   chan *pb.ModelInferRequest // to the call's sender
	ended   chan struct{}              // closed once the call has ended
	mu      sync.Mutex
	waiting map[string]chan streamAnswer // nil once the call has ended
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
	var c *muxCall
	var id string
	for tries := 0; ; tries++ {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return "", nil // the load ended
		}
		c = m.current
		if c == nil {
			var err error
			if c, err = m.open(); err != nil {
				m.mu.Unlock()
				return grpcKind(err)
			}
			m.current = c
		}
		m.next++
		id = strconv.FormatUint(m.next, 10)
		m.mu.Unlock()
		if c.wait(id, answer) {
			break
		}
		// The call ended as it was taken, before its reader let it go:
		// the request goes on a new one, once.
		m.mu.Lock()
		if m.current == c {
			m.current = nil
		}
		m.mu.Unlock()
		if tries == 1 {
			return kindConnection, errStreamEnded
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	req := &pb.ModelInferRequest{Id: id, ModelName: m.req.ModelName, Inputs: m.req.Inputs, RawInputContents: m.req.RawInputContents}
	select {
	case c.sends <- req:
	case a := <-answer: // the call ended before its turn
		return grpcKind(a.err)
	case <-t.C:
		c.forget(id)
		return kindTimeout, fmt.Errorf("not sent on the stream within %s", timeout)
	case <-ctx.Done():
		c.forget(id)
		return "", nil
	}
	select {
	case a := <-answer:
		switch {
		case a.err != nil && ctx.Err() != nil:
			return "", nil // the load ended under it
		case a.err != nil:
			return grpcKind(a.err)
		case a.msg.ErrorMessage != "":
			return streamRefusal(a.msg)
		}
		return "", nil
	case <-t.C:
		c.forget(id)
		return kindTimeout, fmt.Errorf("no answer on the stream within %s", timeout)
	case <-ctx.Done():
		c.forget(id)
		return "", nil
	}
}

// streamRefusal is the kind of a request's failure on a stream: the
// gRPC code the server gives it (httpapi.StreamErrorCode), as ModelInfer
// would have ended its call with.
func streamRefusal(msg *pb.ModelStreamInferResponse) (string, error) {
	err := errors.New(msg.ErrorMessage)
	p, ok := msg.GetInferResponse().GetParameters()[httpapi.StreamErrorCode]
	if !ok {
		return "grpc stream refusal", err
	}
	return "grpc " + codes.Code(p.GetInt64Param()).String(), err
}

// open opens a call, with its sender and its reader.
func (m *streamMux) open() (*muxCall, error) {
	ctx, cancel := context.WithCancel(context.Background())
	if m.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, m.md)
	}
	stream, err := m.client.ModelStreamInfer(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	c := &muxCall{stream: stream, cancel: cancel, sends: make(chan *pb.ModelInferRequest), ended: make(chan struct{}),
		waiting: map[string]chan streamAnswer{}}
	go c.send()
	go c.read(m)
	return c, nil
}

// send sends the requests handed to it until the call ends.
func (c *muxCall) send() {
	for {
		select {
		case req := <-c.sends:
			if c.stream.Send(req) != nil {
				return // the reader hears why, and fails what waits
			}
		case <-c.ended:
			return
		}
	}
}

// read hands each answer to the request of its id until the call ends;
// then it fails those left, and m opens another call for the next.
func (c *muxCall) read(m *streamMux) {
	for {
		msg, err := c.stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = errStreamEnded
			}
			c.mu.Lock()
			waiting := c.waiting
			c.waiting = nil
			c.mu.Unlock()
			for _, answer := range waiting {
				answer <- streamAnswer{err: err}
			}
			close(c.ended)
			c.cancel()
			m.mu.Lock()
			if m.current == c {
				m.current = nil
			}
			m.mu.Unlock()
			return
		}
		id := msg.GetInferResponse().GetId()
		c.mu.Lock()
		answer, ok := c.waiting[id]
		delete(c.waiting, id)
		c.mu.Unlock()
		if ok {
			answer <- streamAnswer{msg: msg}
		}
	}
}

// wait makes answer the channel of request id's answer; false once the
// call has ended.
func (c *muxCall) wait(id string, answer chan streamAnswer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting == nil {
		return false
	}
	c.waiting[id] = answer
	return true
}

// forget stops waiting for the answer of request id.
func (c *muxCall) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, id)
}

// close ends the call under way, if any; no request is sent after.
func (m *streamMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.current != nil {
		m.current.cancel()
	}
}

// serverSaidUnavailable tells the server's UNAVAILABLE (no worker able to
// run, a drain) from one the client reports for a connection it could not
// make or lost: the server's carries its reason, which a transport's
// failure does not start with.
func serverSaidUnavailable(err error) bool {
	msg := status.Convert(err).Message()
	for _, prefix := range []string{"connection error", "error reading from server", "transport is closing", "closing transport due to", "name resolver", "invalid target address"} {
		if len(msg) >= len(prefix) && msg[:len(prefix)] == prefix {
			return false
		}
	}
	return true
}
