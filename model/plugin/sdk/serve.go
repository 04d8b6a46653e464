package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamer-dev/streamer/internal/idlemem"
	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

// Serve runs m as a streamer plugin: it answers the handshake of the worker
// that started this process, then serves Init and Predict until the worker
// stops it. Call it from main, last. A program started by hand rather than by
// a streamer worker gets a message saying so and exits with status 1.
func Serve(m Model) {
	if os.Getenv(pluginpb.MagicCookieKey) != pluginpb.MagicCookieValue {
		fmt.Fprintf(os.Stderr, "%s is a streamer model plugin: a streamer worker starts it.\nServe it with: streamer serve --plugin %[1]s\n", os.Args[0])
		os.Exit(1)
	}
	srv := &server{model: m, logs: os.Stderr}
	ignoreTerminate()
	// After a batch of large items or outputs the plugin would hold its
	// garbage for minutes, as its worker would: give it back once idle.
	go idlemem.Release(context.Background(), srv.progress, nil)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  pluginpb.ProtocolVersion,
			MagicCookieKey:   pluginpb.MagicCookieKey,
			MagicCookieValue: pluginpb.MagicCookieValue,
		},
		Plugins:    goplugin.PluginSet{pluginpb.PluginName: &grpcPlugin{server: srv}},
		GRPCServer: newGRPCServer,
		// go-plugin's own lines: only what is worth a look in the server log.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "go-plugin", Level: hclog.Warn, Output: os.Stderr}),
	})
	if c, ok := m.(io.Closer); ok {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "close model: %v\n", err)
		}
	}
}

// ignoreTerminate has SIGTERM and SIGHUP, which are the server's, logged
// and ignored: a plugin is stopped by its worker once its batches are
// answered, and one that died of a signal sent to every process of the
// service (systemd's stop, `systemctl kill -s HUP`, a terminal that hangs
// up) would die as a crash, its worker's batches run again and its model
// loaded anew. (go-plugin ignores SIGINT.) They are caught rather than set
// to be ignored, which what the model starts would inherit. Once its
// worker is gone (it has another parent), nothing would stop it: a signal
// then ends it.
func ignoreTerminate() {
	worker := os.Getppid()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for sig := range signals {
			if os.Getppid() != worker {
				signal.Reset(sig)
				if self, err := os.FindProcess(os.Getpid()); err == nil {
					_ = self.Signal(sig)
				}
				continue
			}
			name := "SIGTERM"
			if sig == syscall.SIGHUP {
				name = "SIGHUP"
			}
			fmt.Fprintf(os.Stderr, "%s ignored: a plugin is stopped by its worker, which the streamer server stops; signal the server (pid %d is the worker)\n", name, worker)
		}
	}()
}

// windowSize is the HTTP/2 flow control window. A fixed window also turns
// off gRPC's bandwidth estimation, whose pings would cost system calls on
// every batch.
const windowSize = 16 << 20

// newGRPCServer lifts gRPC's default 4 MiB message limit: a batch is as large
// as the server's batch byte limit allows.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize))
	return grpc.NewServer(opts...)
}

// grpcPlugin registers the model service with go-plugin's gRPC server.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	server *server
}

// GRPCServer registers the model service.
func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterModelServer(s, p.server)
	return nil
}

// GRPCClient is the host's side; a plugin never dispenses itself.
func (p *grpcPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: the model service is dispensed by the streamer worker, not by the plugin")
}

// server adapts a Model to the gRPC service.
type server struct {
	pluginpb.UnimplementedModelServer
	model Model
	logs  *os.File // the process's stderr, as it was before go-plugin replaced it

	mu     sync.Mutex
	inited bool

	// answered counts the batches answered and running says whether one
	// runs now, for the memory watch (see progress).
	answered atomic.Uint64
	running  atomic.Bool
}

// progress is the plugin's work as idlemem.Release reads it.
func (s *server) progress() (uint64, bool) { return s.answered.Load(), s.running.Load() }

// Init points stdout at stderr, then initialises the model once.
func (s *server) Init(ctx context.Context, req *pluginpb.InitRequest) (*pluginpb.InitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inited {
		return nil, status.Error(codes.FailedPrecondition, "the model is already initialised")
	}
	redirectOutput(s.logs)
	info, err := s.model.Init(ctx, Config{Args: req.GetArgs(), Device: req.GetDevice()})
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	s.inited = true
	return &pluginpb.InitResponse{Name: info.Name, Device: info.Device}, nil
}

// Predict answers the batches of one stream, one at a time and in order.
func (s *server) Predict(stream pluginpb.Model_PredictServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.running.Store(true)
		resp := s.predict(stream.Context(), req.GetItems())
		resp.Id = req.GetId() // the worker checks that each answer is its batch's
		err = stream.Send(resp)
		s.running.Store(false)
		s.answered.Add(1)
		if err != nil {
			return err
		}
	}
}

// predict runs one batch and turns the model's results into outputs. It does
// not check their number: the worker does, and fails the batch with a clear
// error when it is wrong. The lock keeps the model to one batch at a time
// even if the worker gave up on a stream whose batch still runs.
func (s *server) predict(ctx context.Context, raw [][]byte) *pluginpb.PredictResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inited {
		return &pluginpb.PredictResponse{Error: "Predict before Init"}
	}
	items := make([]Item, len(raw))
	for i, b := range raw {
		items[i] = b
	}
	results, err := s.model.Predict(ctx, items)
	if err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "the batch failed"
		}
		return &pluginpb.PredictResponse{Error: msg}
	}
	return toResponse(results)
}

// A Result with neither an output nor an error is the plugin's bug, not
// the item's: it fails the batch (a 500 to its callers), where an item's
// error would tell its caller the item was refused (a 422).
func toResponse(results []Result) *pluginpb.PredictResponse {
	for i, r := range results {
		if r.Output == nil && r.Err == nil {
			return &pluginpb.PredictResponse{Error: fmt.Sprintf("the plugin's Predict left result %d of %d empty: each needs an Output (sdk.OK) or an Err (sdk.Fail)", i, len(results))}
		}
	}
	resp := &pluginpb.PredictResponse{Outputs: make([][]byte, len(results))}
	fail := func(i int, msg string) {
		if resp.ItemErrors == nil {
			resp.ItemErrors = map[uint32]string{}
		}
		resp.ItemErrors[uint32(i)] = msg
	}
	for i, r := range results {
		switch {
		case r.Err != nil && r.Err.Error() == "":
			fail(i, "the item failed, with an empty error")
		case r.Err != nil:
			fail(i, r.Err.Error())
		default:
			resp.Outputs[i] = r.Output
		}
	}
	return resp
}
