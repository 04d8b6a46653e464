package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// The plugin tests' servers listen on loopback ports of their own range, so
// that they never take a port another test run on this machine expects.
const (
	pluginPortFirst = 47000
	pluginPortLast  = 47999
)

// pluginPort returns a loopback address in the plugin tests' range whose
// port was free a moment ago.
func pluginPort(t *testing.T) string {
	t.Helper()
	start := rand.IntN(pluginPortLast - pluginPortFirst + 1)
	for i := range pluginPortLast - pluginPortFirst + 1 {
		port := pluginPortFirst + (start+i)%(pluginPortLast-pluginPortFirst+1)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatalf("no free loopback port in %d-%d", pluginPortFirst, pluginPortLast)
	return ""
}

// startPluginServer is startServer on a port of the plugin tests' range.
func startPluginServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerOn(t, pluginPort, args...)
}

// launchPluginServer is launchServer on a port of the plugin tests' range.
func launchPluginServer(t *testing.T, args ...string) *server {
	t.Helper()
	return launchServerOn(t, pluginPort, args...)
}
