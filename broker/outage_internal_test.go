package broker

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// A node logs an outage of Redis once, and its end once. The Redis client
// hands the failure of its last dial to the commands of a pool whose dials
// all failed until one of its own, once a second, goes through: such a
// failure just after Redis answered again is no news of Redis, and was
// logged as a new outage, followed by its end, each time Redis came back,
// so that alerts on errors fired for nothing. A dial refused later is an
// outage again.
func TestANodeTakesNoFailedDialJustAfterRedisCameBackForAnOutage(t *testing.T) {
	var logs syncbuf.Buffer
	n := &Node{beatSoon: make(chan struct{}, 1), where: "127.0.0.1:1"}
	n.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	refused := fmt.Errorf("redis at 127.0.0.1:1: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	count := func() (down, back int) {
		return strings.Count(logs.String(), "redis does not serve this node"), strings.Count(logs.String(), "redis serves this node again")
	}

	n.warn("read items", refused)
	n.warn("heartbeat", refused)
	if down, back := count(); down != 1 || back != 0 {
		t.Fatalf("an outage logged %d times, its end %d times; want once, none", down, back)
	}
	n.reachable()
	n.warn("heartbeat", refused) // a pool the client has not dialled again yet
	if down, back := count(); down != 1 || back != 1 {
		t.Fatalf("a failed dial of the client's just after Redis came back: the outage logged %d times, its end %d times; want once each:\n%s", down, back, logs.String())
	}
	n.back.Store(n.sinceBorn() - int64(2*dialGrace))
	n.warn("heartbeat", refused)
	if down, _ := count(); down != 2 {
		t.Fatalf("a dial refused %s after Redis came back: the outage logged %d times in all; want twice, a new outage", 2*dialGrace, down)
	}
}
