// Command unruly is a model plugin for tests that breaks the Predict
// stream's contract on purpose, as a plugin written without the SDK can. It
// echoes its items, and each batch's id unless the plugin-arg echo-ids is
// "no" (as a plugin built before ids were added).
//
// Triggers (items that are msgpack strings):
//
//	double     answer the batch twice
//	wrong-id   answer with another batch's id
//	empty-item-error   fail the item with an empty message
//	empty-output       answer the batch's first item with no bytes, and no error
//	stdout:N   write a line of N KiB on its stdout first
//
// Whatever it answers, it logs "unruly: answered batch ID" on stderr.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

type server struct {
	pluginpb.UnimplementedModelServer
	echoIDs bool
}

func (s *server) Init(_ context.Context, req *pluginpb.InitRequest) (*pluginpb.InitResponse, error) {
	s.echoIDs = req.GetArgs()["echo-ids"] != "no"
	return &pluginpb.InitResponse{Name: "unruly", Device: "cpu"}, nil
}

func (s *server) Predict(stream pluginpb.Model_PredictServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		resp := &pluginpb.PredictResponse{Outputs: req.GetItems()}
		if s.echoIDs {
			resp.Id = req.GetId()
		}
		answers, late := 1, time.Duration(0)
		for _, item := range req.GetItems() {
			var trigger string
			_ = msgpack.Unmarshal(item, &trigger)
			verb, arg, _ := strings.Cut(trigger, ":")
			switch verb {
			case "stdout":
				kib, _ := strconv.Atoi(arg)
				// The process's own stdout, not go-plugin's os.Stdout.
				line := append(bytes.Repeat([]byte{'p'}, kib<<10), '\n')
				if _, err := syscall.Write(1, line); err != nil {
					return err
				}
			case "empty-item-error":
				resp.ItemErrors = map[uint32]string{0: ""}
			case "empty-output":
				resp.Outputs = slices.Clone(resp.Outputs)
				resp.Outputs[0] = nil
			case "double":
				answers = 2
			case "late": // answers, then again after the duration
				late, _ = time.ParseDuration(arg)
				answers = 2
			case "wrong-id":
				resp.Id = req.GetId() + 100
			case "end": // ends the stream without an answer
				return nil
			case "status": // fails the stream with that gRPC code
				code, _ := strconv.Atoi(arg)
				return status.Errorf(codes.Code(code), "unruly: failing the stream with code %d", code)
			}
		}
		for i := range answers {
			if i > 0 {
				time.Sleep(late)
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "unruly: answered batch %d\n", req.GetId())
	}
}

type plugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (plugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterModelServer(s, &server{})
	return nil
}

func (plugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("unruly: a plugin is not dispensed by itself")
}

func main() {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  pluginpb.ProtocolVersion,
			MagicCookieKey:   pluginpb.MagicCookieKey,
			MagicCookieValue: pluginpb.MagicCookieValue,
		},
		Plugins:    goplugin.PluginSet{pluginpb.PluginName: plugin{}},
		GRPCServer: goplugin.DefaultGRPCServer,
	})
}
