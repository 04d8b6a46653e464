// Command wrongversion is a plugin for tests that passes the magic cookie
// check but speaks a streamer plugin protocol version no host speaks.
package main

import (
	"context"
	"errors"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

type modelPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (modelPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error { return nil }

func (modelPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("not a host")
}

func main() {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  pluginpb.ProtocolVersion + 98,
			MagicCookieKey:   pluginpb.MagicCookieKey,
			MagicCookieValue: pluginpb.MagicCookieValue,
		},
		Plugins:    goplugin.PluginSet{pluginpb.PluginName: modelPlugin{}},
		GRPCServer: goplugin.DefaultGRPCServer,
	})
}
