//go:build unix

package main

import (
	"net"
	"syscall"
)

// bytesWaiting reports whether conn has bytes received that no read has
// taken yet, as the kernel holds them: a peek that neither waits nor
// takes them. Over TLS (a *tls.Conn, or a connection that wraps one, as
// httpsConn does) it looks at the connection beneath.
func bytesWaiting(conn net.Conn) bool {
	if t, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = t.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	})
	return waiting
}
