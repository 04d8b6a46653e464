package broker

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A read or claim that ran out of time halves what the next ask for, down
// to one, and marks the node's reads lost; reads that bring all they ask
// for under the bound double it back, fetchCapGrow at a time, until it is
// lifted: a Redis that froze a while costs the node's reads nothing after.
func TestTheBoundOnAReadFallsWithTimeoutsAndGrowsBack(t *testing.T) {
	n := &Node{cfg: NodeConfig{Config: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}}
	timeout := fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	n.fetched(64, 0, redis.Nil)
	if n.fetchCap.Load() != 0 || n.lost.Load() {
		t.Fatalf("after a read that found nothing: bound %d, lost %v; want none", n.fetchCap.Load(), n.lost.Load())
	}
	n.fetched(128, 0, timeout)
	n.fetched(64, 0, timeout)
	if n.fetchCap.Load() != 32 || !n.lost.Load() {
		t.Fatalf("after two reads that ran out of time: bound %d, lost %v; want 32, lost", n.fetchCap.Load(), n.lost.Load())
	}
	n.fetched(1, 0, timeout)
	if n.fetchCap.Load() != 1 {
		t.Fatalf("bound %d after a read of one ran out of time; want 1", n.fetchCap.Load())
	}
	for range fetchCapGrow - 1 {
		n.fetched(1, 1, nil)
	}
	n.fetched(1, 0, redis.Nil) // not all it asked for: does not count
	if n.fetchCap.Load() != 1 {
		t.Fatalf("bound %d before %d full reads; want 1", n.fetchCap.Load(), fetchCapGrow)
	}
	n.fetched(1, 1, nil)
	if n.fetchCap.Load() != 2 {
		t.Fatalf("bound %d after %d full reads; want 2", n.fetchCap.Load(), fetchCapGrow)
	}
	reads := fetchCapGrow
	for n.fetchCap.Load() != 0 {
		c := int(n.fetchCap.Load())
		n.fetched(c, c, nil)
		if reads++; reads > 20*fetchCapGrow {
			t.Fatalf("bound %d after %d full reads; want it lifted", n.fetchCap.Load(), reads)
		}
	}
	if reads != 13*fetchCapGrow { // 1 to 4096 in twelve doublings, then lifted
		t.Errorf("the bound lifted after %d full reads; want %d", reads, 13*fetchCapGrow)
	}
	n.fetched(64, 0, timeout)
	if n.fetchBound() != 32 {
		t.Fatalf("bound %d after a read of 64 ran out of time; want 32", n.fetchBound())
	}
	n.fetchCapSet.Add(-int64(fetchCapLast))
	if n.fetchBound() != 0 {
		t.Fatalf("bound %d %s after it was set; want it lifted", n.fetchBound(), fetchCapLast)
	}
	n.lost.Store(false)
	// A connection closed under a read falls as one that ran out of time:
	// Redis closes a client whose answer passes its
	// client-output-buffer-limit, and the same read would be closed again.
	n.fetched(8, 0, fmt.Errorf("read tcp: %w", io.EOF))
	if n.fetchCap.Load() != 4 || !n.lost.Load() {
		t.Errorf("after a read of 8 whose connection closed: bound %d, lost %v; want 4, lost", n.fetchCap.Load(), n.lost.Load())
	}
}
