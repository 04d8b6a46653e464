package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// A look for lost items reads no item a node holds (pending in the
// group: it is there), and reads the others, whole, for at most
// lostLookBytes of them a look; those past the bound are judged by a
// later one. The look read every item whole: with a few dozen items of 4
// MB under way it held Redis for over a second (a review measured 415 ms
// and 1.2 s), and the front ends and nodes took Redis for down, failing
// the requests under way.
func TestALookForLostItemsReadsBoundedBytes(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	rs.Do(t, "XGROUP", "CREATE", fe.k.items, nodeGroup, "$", "MKSTREAM")
	big := strings.Repeat("x", lostLookBytes*3/4)
	add := func() string {
		return rs.Do(t, "XADD", fe.k.items, "*", fieldHeader, fe.id+" 1 0 0 60000", fieldValue, big)
	}
	held := add()
	rs.Do(t, "XREADGROUP", "GROUP", nodeGroup, "node", "COUNT", "1", "STREAMS", fe.k.items, ">")
	unread := []string{add(), add(), add()}
	gone := add()
	rs.Do(t, "XDEL", fe.k.items, gone)
	ids := append([]string{held, gone}, unread...)
	c := &call{
		seq: 1, items: make([][]byte, len(ids)), ids: ids, stream: fe.k.items,
		sent: time.Now().Add(-time.Minute), outputs: make([][]byte, len(ids)), got: make([]bool, len(ids)), left: len(ids),
		over: make(chan struct{}), counted: true,
	}
	fe.mu.Lock()
	fe.calls[c.seq] = c
	fe.mu.Unlock()
	fe.noteRefreshed(time.Now()) // as its checks do: its answers would be there

	// Each command Redis runs, those of scripts too, a line.
	lines := rs.Monitor(t)
	// reads counts the reads of each item until Redis runs marker.
	reads := func(marker string) map[string]int {
		got := map[string]int{}
		for lines.Scan() {
			// +1700000000.123456 [0 lua] "XRANGE" "stream" "id" "id"
			f := strings.Fields(lines.Text())
			if len(f) >= 4 && strings.Trim(f[3], `"`) == marker {
				return got
			}
			if len(f) >= 6 && f[2] == "lua]" && strings.EqualFold(strings.Trim(f[3], `"`), "XRANGE") {
				got[strings.Trim(f[5], `"`)]++
			}
		}
		t.Fatalf("MONITOR's connection ended: %v", lines.Err())
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for look := 1; ; look++ {
		if err := fe.lookForLost(ctx, lostLookAge); err != nil {
			t.Fatal(err)
		}
		rs.Do(t, "ECHO", "looked")
		got := reads("ECHO")
		if got[held] != 0 {
			t.Fatalf("look %d read the item a node holds", look)
		}
		if n := got[unread[0]] + got[unread[1]] + got[unread[2]]; n > 2 {
			t.Fatalf("look %d read %d items of %d bytes; want 2 at most, for a bound of %d bytes", look, n, len(big), lostLookBytes)
		}
		select {
		case <-c.over:
		default:
			if look == 50 {
				t.Fatal("after 50 looks, the call whose item is gone still waits")
			}
			continue
		}
		break
	}
	if !strings.Contains(c.failure.Error(), "lost the request's items") {
		t.Errorf("the call failed with %v; want Redis said to have lost its items", c.failure)
	}
}
