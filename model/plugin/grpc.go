package plugin

import (
	"context"
	"errors"
	"runtime"
	"sync"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

// grpcPlugin is the host's side of the model service in go-plugin's terms.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

// GRPCServer is the plugin's side; the host never serves the model.
func (grpcPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("plugin: the model service is served by the plugin binary, not by its host")
}

// GRPCClient returns the connection to the model service. go-plugin cancels
// ctx when the plugin process exits.
func (grpcPlugin) GRPCClient(ctx context.Context, _ *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &conn{rpc: pluginpb.NewModelClient(cc), cc: cc, exited: ctx.Done()}, nil
}

// conn is what the host dispenses: the service, its connection and the
// process's end.
type conn struct {
	rpc    pluginpb.ModelClient
	cc     *grpc.ClientConn
	exited <-chan struct{}
}

// startOnLockedThread starts the plugin from an OS thread that stays locked
// to its goroutine until release is called. On Linux the plugin's parent
// death signal fires when the thread that started it ends, not the process:
// a thread the Go runtime might retire meanwhile would kill a healthy plugin.
// release is never nil.
func startOnLockedThread(client *goplugin.Client) (*conn, func(), error) {
	type result struct {
		c   *conn
		err error
	}
	done := make(chan result, 1)
	hold := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c, err := dispense(client)
		done <- result{c, err}
		if err == nil {
			<-hold
		}
	}()
	r := <-done
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	return r.c, release, r.err
}

func dispense(client *goplugin.Client) (*conn, error) {
	rpcClient, err := client.Client()
	if err != nil {
		return nil, err
	}
	raw, err := rpcClient.Dispense(pluginpb.PluginName)
	if err != nil {
		return nil, err
	}
	c, ok := raw.(*conn)
	if !ok {
		return nil, errors.New("plugin: dispensed an unexpected type")
	}
	return c, nil
}
