//go:build unix

package main

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// bytesWaiting sees bytes the kernel holds for a connection, over TLS too
// (the records beneath, as the HTTPS listener's connections hold them),
// without taking them.
func TestBytesWaiting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client := dialRaw(t, ln.Addr().String())
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if bytesWaiting(server) {
		t.Fatal("bytes waiting before any was sent")
	}
	if _, err := client.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bytes sent to wait", requestTimeout, func() bool { return bytesWaiting(server) })
	got := make([]byte, 3)
	if _, err := io.ReadFull(server, got); err != nil || string(got) != "GET" {
		t.Fatalf("read after the peek: %q, %v; want the bytes, untaken", got, err)
	}
	if bytesWaiting(server) {
		t.Error("bytes waiting once every one was read")
	}
	over := &httpsConn{tls.Server(server, &tls.Config{})} // as the HTTPS listener hands it out
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a byte to wait beneath TLS", requestTimeout, func() bool { return bytesWaiting(over) })
}
