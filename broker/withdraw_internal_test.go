package broker

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// Withdrawals of many items go in runs of withdrawChunk, and all of them
// are withdrawn.
func TestManyItemsAreWithdrawnInRuns(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	rs.Do(t, "XGROUP", "CREATE", fe.k.items, nodeGroup, "0", "MKSTREAM")
	n := 2*withdrawChunk + 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pipe := fe.rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: fe.k.items, Values: []any{"v", strconv.Itoa(i)}})
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cmds {
		ids = append(ids, c.(*redis.StringCmd).Val())
	}
	if left := fe.withdrawAll(ctx, map[string][]string{fe.k.items: ids}); len(left) != 0 {
		t.Fatalf("withdrawAll left %v unreached", left)
	}
	if got := rs.Do(t, "XLEN", fe.k.items); got != "0" {
		t.Errorf("%s items left on the stream; want all %d withdrawn", got, n)
	}
	if got := fe.stats.withdrawn.Load(); got != uint64(n) {
		t.Errorf("withdrawn = %d, want %d", got, n)
	}
}

// What is queued for a later withdrawal stays bounded, by stream, by the
// backlog's bound, keeping the last queued.
func TestItemsQueuedForWithdrawalAreBounded(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 3)
	fe.requeue(map[string][]string{"s": {"1-1", "1-2"}})
	fe.requeue(map[string][]string{"s": {"1-3", "1-4", "1-5"}, "t": {"2-1"}})
	got := fe.takeToWithdraw()
	if !slices.Equal(got["s"], []string{"1-3", "1-4", "1-5"}) || !slices.Equal(got["t"], []string{"2-1"}) {
		t.Errorf("queued %v; want the last 3 of s and the one of t", got)
	}
	if left := fe.takeToWithdraw(); len(left) != 0 {
		t.Errorf("queued after a take: %v; want nothing", left)
	}
}
