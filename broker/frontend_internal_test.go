package broker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/supervisor"
)

// A round trip of admissions carries up to admitTripBytes, in runs of the
// script of up to admitChunk items and admitChunkBytes; a request larger
// than a bound goes alone.
func TestAdmissionsAreSplitByItemsAndBytes(t *testing.T) {
	// sized makes a call of n items of size bytes each (their header
	// counted: see callBytes).
	sized := func(n, size int) *call {
		c := &call{items: make([][]byte, n)}
		for i := range c.items {
			c.items[i] = make([]byte, size-32)
		}
		return c
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		calls []*call
		want  [][]int // the calls of each round trip, by chunk
	}{
		{"small requests, one chunk", []*call{sized(1, 100), sized(2, 100), sized(3, 100)}, [][]int{{3}}},
		{"a chunk's items", []*call{sized(admitChunk-1, 100), sized(2, 100), sized(1, 100)}, [][]int{{1, 2}}},
		{"a chunk's bytes", []*call{sized(1, mib/2), sized(1, mib/2), sized(1, mib/2)}, [][]int{{2, 1}}},
		{"a round trip's bytes", []*call{sized(1, mib), sized(1, mib), sized(1, mib), sized(1, mib), sized(1, mib)}, [][]int{{1, 1, 1, 1}, {1}}},
		{"a request larger than a chunk goes alone", []*call{sized(1, 100), sized(1, 2*mib), sized(1, 100)}, [][]int{{1, 1, 1}}},
		{"a request larger than a round trip goes alone", []*call{sized(1, 100), sized(1, 5*mib), sized(1, 100)}, [][]int{{1}, {1}, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]int
			for batch := tc.calls; len(batch) > 0; {
				var chunks [][]*call
				chunks, batch = nextTrip(batch)
				var trip []int
				for _, chunk := range chunks {
					trip = append(trip, len(chunk))
				}
				got = append(got, trip)
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("round trips of chunks of %v calls; want %v", got, tc.want)
			}
		})
	}
}

// splitFirst is a hook that splits the first pipeline of admissions
// after its first command and calls between then, as another client's
// command would come between the two.
type splitFirst struct {
	between func(context.Context)
	done    atomic.Bool
}

func (h *splitFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *splitFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *splitFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || cmds[0].Name() != "evalsha" || !h.done.CompareAndSwap(false, true) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[:1])
		h.between(ctx)
		return errors.Join(err, next(ctx, cmds[1:]))
	}
}

// When Redis runs some runs of the admission script of a round trip and
// not others, as it lacks the script (restarted, or its scripts flushed)
// for some of them only, those it did not run are run again once the
// script is loaded, and only those: each request is admitted once.
func TestAdmissionsRunAgainOnlyWhereRedisLackedTheScript(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flushed bool // the scripts flushed before the round trip
		between func(context.Context, *redis.Client) error
	}{
		{"loaded after the first", true, func(ctx context.Context, other *redis.Client) error {
			return admitScript.Load(ctx, other).Err()
		}},
		{"flushed after the first", false, func(ctx context.Context, other *redis.Client) error {
			return other.ScriptFlush(ctx).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			fe := unstartedFront(t, rs.URL(), 0)
			other := redis.NewClient(&redis.Options{Addr: rs.Addr()}) // another front end's
			t.Cleanup(func() { _ = other.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := fe.check(ctx); err != nil { // the epoch, which admissions carry
				t.Fatal(err)
			}
			if err := admitScript.Load(ctx, fe.rdb).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.flushed {
				rs.Do(t, "SCRIPT", "FLUSH")
			}
			fe.rdb.AddHook(&splitFirst{between: func(ctx context.Context) {
				if err := tc.between(ctx, other); err != nil {
					t.Error(err)
				}
			}})
			// Two runs of the script: a chunk's worth of items, then one.
			batch := []*call{{seq: 1, items: make([][]byte, admitChunk)}, {seq: 2, items: make([][]byte, 1)}}
			for _, c := range batch {
				c.admitted = make(chan error, 1)
				for i := range c.items {
					c.items[i] = []byte("x")
				}
			}
			fe.admit(waiting(fe, batch...))
			for _, c := range batch {
				if err := <-c.admitted; err != nil {
					t.Errorf("request %d: %v; want it admitted", c.seq, err)
				}
			}
			msgs, err := fe.rdb.XRange(ctx, fe.k.items, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, m := range msgs {
				hd, _ := parseHeader(str(m.Values, fieldHeader))
				count[hd.seq+":"+hd.index]++
			}
			for _, c := range batch {
				for i := range c.items {
					if n := count[strconv.FormatUint(c.seq, 10)+":"+strconv.Itoa(i)]; n != 1 {
						t.Fatalf("request %d's item %d is %d times on the stream; want once", c.seq, i, n)
					}
				}
			}
			if len(msgs) != admitChunk+1 {
				t.Errorf("%d items on the stream; want %d", len(msgs), admitChunk+1)
			}
		})
	}
}

// The look for the items of an admission that got no answer withdraws,
// from the shared stream and the node streams its calls were routed to,
// the items of those calls alone that no node has read: not those of
// other requests, of other front ends, or older than the admission by
// more than the margin.
func TestTheLookForAnUnansweredAdmissionWithdrawsItsUnreadItemsAlone(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	own := fe.k.nodeItems("a")
	rs.Do(t, "XGROUP", "CREATE", fe.k.items, nodeGroup, "0", "MKSTREAM")
	add := func(stream, id, front string, seq int) string {
		t.Helper()
		return rs.Do(t, "XADD", stream, id, fieldHeader, front+" "+strconv.Itoa(seq)+" 0 0 60000", fieldValue, "x")
	}
	old := add(fe.k.items, "1000-0", fe.id, 7) // long before the admission
	start := time.Now()
	read := add(fe.k.items, "*", fe.id, 7)
	rs.Do(t, "XREADGROUP", "GROUP", nodeGroup, "b", "STREAMS", fe.k.items, ">") // a node holds it
	rs.Do(t, "XACK", fe.k.items, nodeGroup, old)                                // and the old one no more
	keep := []string{
		old, read,
		add(fe.k.items, "*", fe.id, 8),       // another request
		add(fe.k.items, "*", "elsewhere", 7), // another front end's
		add(fe.k.items, "*", fe.id, 70),      // another request
	}
	gone := []string{add(fe.k.items, "*", fe.id, 7), add(own, "*", fe.id, 9), add(fe.k.items, "*", fe.id, 9)}
	fe.noteUnanswered([]*call{{seq: 7}, {seq: 9, route: "a"}}, start)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fe.withdrawUnanswered(ctx)
	var left []string
	for _, stream := range []string{fe.k.items, own} {
		msgs, err := fe.rdb.XRange(ctx, stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			left = append(left, m.ID)
		}
	}
	slices.Sort(keep)
	slices.Sort(left)
	if !slices.Equal(left, keep) {
		t.Errorf("left %v; want %v (withdrawn: %v)", left, keep, gone)
	}
	if got := fe.stats.withdrawn.Load(); got != uint64(len(gone)) {
		t.Errorf("withdrawn = %d; want %d", got, len(gone))
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if len(fe.unanswered) != 1 || fe.unanswered[0].looks != 1 {
		t.Errorf("after a look, %+v remembered; want the admission, looked at once, for the next checks", fe.unanswered)
	}
}

// An unanswered admission's items are found however many other clients'
// items came between the look's first id and them: each look goes on
// where the last stopped, its budget spent, and only looks that read to
// the stream's end count.
func TestTheLookForAnUnansweredAdmissionGoesOnPastItsBudget(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	rs.Do(t, "XGROUP", "CREATE", fe.k.items, nodeGroup, "0", "MKSTREAM")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	// Other front ends' items admitted within the margin before this
	// admission ran, more than a look reads.
	pipe := fe.rdb.Pipeline()
	for i := range 5000 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: fe.k.items, Values: []any{fieldHeader, "other " + strconv.Itoa(i) + " 0 0 60000", fieldValue, "x"}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	ours := rs.Do(t, "XADD", fe.k.items, "*", fieldHeader, fe.id+" 7 0 0 60000", fieldValue, "x")
	fe.noteUnanswered([]*call{{seq: 7}}, start)
	for range 3 {
		fe.withdrawUnanswered(ctx)
	}
	if left, err := fe.rdb.XRange(ctx, fe.k.items, ours, ours).Result(); err != nil || len(left) != 0 {
		t.Fatalf("the item of the unanswered admission, behind 5000 others, is still on the stream after 3 looks (%v): a node will run it", err)
	}
	if got := fe.stats.withdrawn.Load(); got != 1 {
		t.Errorf("withdrawn = %d; want 1", got)
	}
	if got := rs.Do(t, "XLEN", fe.k.items); got != "5000" {
		t.Errorf("%s items left on the stream; want the others' 5000", got)
	}
	// Admitted once Redis resumes, after the looks reached the end.
	late := rs.Do(t, "XADD", fe.k.items, "*", fieldHeader, fe.id+" 7 1 0 60000", fieldValue, "x")
	fe.withdrawUnanswered(ctx)
	if left, err := fe.rdb.XRange(ctx, fe.k.items, late, late).Result(); err != nil || len(left) != 0 {
		t.Fatalf("an item of the admission added after the looks reached the stream's end is still there (%v)", err)
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if len(fe.unanswered) != 1 || fe.unanswered[0].looks != 2 || fe.unanswered[0].tries != 4 {
		t.Errorf("after 4 looks, %+v remembered; want the admission, with 2 looks to the end", fe.unanswered)
	}
}

// A call sent before a span without refreshes longer than the reply TTL
// (the front end stalled) whose items are found gone unanswered is told
// that its answers may have expired, not that Redis lost them: also at a
// look after the first one that follows the span, which misses the calls
// whose admission's verdict the stalled front end had not read yet.
func TestItemsGoneAfterAStallAreNotCountedLost(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	stalled := time.Now().Add(-10 * time.Second)
	fe.noteRefreshed(stalled)
	fe.noteRefreshed(stalled.Add(DefaultReplyTTL + time.Second))
	fe.unrefreshed.Store(nil) // as a look at every call does once done
	c := &call{
		seq: 1, items: [][]byte{[]byte("x")}, ids: []string{"1-1"}, stream: fe.k.items,
		sent: stalled.Add(time.Second), outputs: make([][]byte, 1), got: make([]bool, 1), left: 1,
		over: make(chan struct{}), counted: true,
	}
	fe.mu.Lock()
	fe.calls[c.seq] = c
	fe.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fe.lookForLost(ctx, lostLookAge); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.over:
	default:
		t.Fatal("the call whose item is gone still waits")
	}
	if !errors.Is(c.failure, supervisor.ErrUnavailable) || !strings.Contains(c.failure.Error(), "answers may have expired") {
		t.Errorf("the call failed with %v; want its answers said to have expired", c.failure)
	}
	if got := fe.stats.lost.Load(); got != 0 {
		t.Errorf("%d items counted lost; want none, as Redis lost nothing", got)
	}
}
