package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/supervisor"
)

// waiting registers calls with fe, as PredictRequest does before it hands
// them to the writer: the writer admits only calls still waiting.
func waiting(fe *FrontEnd, calls ...*call) []*call {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	for _, c := range calls {
		fe.calls[c.seq] = c
	}
	return calls
}

// The requests a front end admits together go on the stream in one
// command, so a node blocked on the stream wakes once and reads them all;
// with a command each, it woke for the first alone and read the others a
// round trip later, which splits the batch the first would have shared. A
// request that would take the backlog past its bound is refused whole, and
// the others of its batch are admitted.
func TestRequestsAdmittedTogetherWakeABlockedReaderOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reader := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { _ = reader.Close() })
	woke := make(chan []redis.XMessage, 1)
	go func() {
		streams, err := reader.XRead(ctx, &redis.XReadArgs{Streams: []string{fe.k.items, "$"}, Count: 100, Block: 5 * time.Second}).Result()
		if err != nil {
			t.Error(err)
		}
		var msgs []redis.XMessage
		for _, st := range streams {
			msgs = append(msgs, st.Messages...)
		}
		woke <- msgs
	}()
	for !strings.Contains(rs.Do(t, "INFO", "clients"), "blocked_clients:1") {
		if ctx.Err() != nil {
			t.Fatal("the reader never blocked on the stream")
		}
	}

	request := func(seq uint64, items ...string) *call {
		c := &call{seq: seq, admitted: make(chan error, 1)}
		for _, it := range items {
			c.items = append(c.items, []byte(it))
		}
		return c
	}
	// The third is past the bound, no larger than most: refused, and the
	// fourth, which fits, is admitted.
	rs.Do(t, "SET", fe.k.sizes, "102400")
	batch := []*call{request(1, "a", "b"), request(2, "c"), request(3, "d", "e"), request(4, "f")}
	fe.admit(waiting(fe, batch...))
	for i, want := range []error{nil, nil, supervisor.ErrOverloaded, nil} {
		if err := <-batch[i].admitted; !errors.Is(err, want) && err != want {
			t.Errorf("request %d: verdict %v; want %v", batch[i].seq, err, want)
		}
	}
	if len(batch[0].ids) != 2 || len(batch[1].ids) != 1 || len(batch[2].ids) != 0 || len(batch[3].ids) != 1 {
		t.Errorf("ids %q, %q, %q, %q; want 2, 1, none and 1", batch[0].ids, batch[1].ids, batch[2].ids, batch[3].ids)
	}

	msgs := <-woke
	var got []string
	for _, m := range msgs {
		hd, ok := parseHeader(str(m.Values, fieldHeader))
		if !ok || hd.front != fe.id {
			t.Fatalf("entry %s: header %q does not read, or names another front end than %s", m.ID, str(m.Values, fieldHeader), fe.id)
		}
		got = append(got, hd.seq+":"+hd.index+"="+str(m.Values, fieldValue))
	}
	if want := "1:0=a 1:1=b 2:0=c 4:0=f"; strings.Join(got, " ") != want {
		t.Fatalf("the blocked reader woke with %q; want all the admitted items at once, in order: %s", got, want)
	}
}

// Requests of more items than one run of the script takes are admitted in
// several runs of one round trip, in their order.
func TestManyItemsAreAdmittedInChunksInOrder(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	var batch []*call
	for seq, n := range []int{admitChunk - 1, 2, admitChunk + 1, 1} {
		c := &call{seq: uint64(seq), admitted: make(chan error, 1), items: make([][]byte, n)}
		for i := range c.items {
			c.items[i] = []byte(strconv.Itoa(seq))
		}
		batch = append(batch, c)
	}
	fe.admit(waiting(fe, batch...))
	var want []string
	for _, c := range batch {
		if err := <-c.admitted; err != nil || len(c.ids) != len(c.items) {
			t.Fatalf("request %d of %d items: %v, %d ids", c.seq, len(c.items), err, len(c.ids))
		}
		want = append(want, c.ids...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, err := fe.rdb.XRange(ctx, fe.k.items, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if i >= len(want) || m.ID != want[i] {
			t.Fatalf("stream entry %d is %s; want the ids in the requests' order", i, m.ID)
		}
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d entries on the stream; want %d", len(msgs), len(want))
	}
}

// The front end waits for the callers it answered until most of them are
// usually back (the delay by which nine in ten came back, learnt), never
// past comebackMaxWait nor a quarter of the time a request is out, and not
// at all once they are all back.
func TestComebacksAreWaitedForBriefly(t *testing.T) {
	var b comebacks
	t0 := time.Unix(1000, 0)
	if _, ok := b.due(t0); ok {
		t.Fatal("nobody answered, yet a wait")
	}
	// Callers who come back 1.5ms after their answer, nine in ten of them;
	// one in ten 6ms after it.
	at := t0
	for i := range 200 {
		at = at.Add(comebackHorizon)
		b.answered(answerer{node: "a"}, 1, 1, 20*time.Millisecond, at)
		delay := 1500 * time.Microsecond
		if i%10 == 0 {
			delay = 6 * time.Millisecond
		}
		b.cameBack(newCalls(1), at.Add(delay))
	}
	at = at.Add(comebackHorizon)
	b.answered(answerer{node: "a"}, 1, 3, 20*time.Millisecond, at)
	b.cameBack(newCalls(1), at.Add(100*time.Microsecond))
	until, ok := b.due(at.Add(100 * time.Microsecond))
	if want := at.Add(1600 * time.Microsecond); !ok || until != want {
		t.Fatalf("after one of three back: wait until %v after the answer (%v); want %v, when nine in ten were back", until.Sub(at), ok, want.Sub(at))
	}
	b.cameBack(newCalls(2), at.Add(150*time.Microsecond))
	if _, ok := b.due(at.Add(150 * time.Microsecond)); ok {
		t.Fatal("all three back, yet a wait")
	}

	// Requests out for 4ms: the wait is at most a quarter of that.
	at = at.Add(comebackHorizon)
	b.flight = 4 * time.Millisecond
	b.answered(answerer{node: "a"}, 1, 2, 4*time.Millisecond, at)
	if until, ok := b.due(at); !ok || until != at.Add(time.Millisecond) {
		t.Fatalf("requests out 4ms: wait until %v after the answer (%v); want 1ms", until.Sub(at), ok)
	}
	b.flight = 20 * time.Millisecond

	// Callers who come back later than the wait still teach the delay, and
	// the wait grows with it, up to comebackMaxWait.
	for range 8 * comebackMemory {
		at = at.Add(comebackHorizon)
		b.answered(answerer{node: "a"}, 1, 1, 20*time.Millisecond, at)
		b.cameBack(newCalls(1), at.Add(comebackHorizon-time.Microsecond))
	}
	at = at.Add(comebackHorizon)
	b.answered(answerer{node: "a"}, 1, 2, 20*time.Millisecond, at)
	if until, ok := b.due(at); !ok || until != at.Add(comebackMaxWait) {
		t.Fatalf("callers %s away: wait until %v after the answer (%v); want %s", comebackHorizon, until.Sub(at), ok, comebackMaxWait)
	}
	// An answer whose callers never come is forgotten after the horizon.
	if _, ok := b.due(at.Add(comebackMaxWait)); ok {
		t.Fatal("a wait past comebackMaxWait")
	}
	b.cameBack(newCalls(1), at.Add(comebackHorizon))
	if len(b.answers) != 0 {
		t.Fatalf("%d answers remembered past the horizon", len(b.answers))
	}
}

func newCalls(n int) []*call {
	calls := make([]*call, n)
	for i := range calls {
		calls[i] = &call{}
	}
	return calls
}

// A request counted against an answer is routed to the node that gave it;
// one counted against none goes to the shared stream.
func TestComebacksAreRoutedToTheNodeThatAnswered(t *testing.T) {
	var b comebacks
	t0 := time.Unix(1000, 0)
	b.answered(answerer{node: "a"}, 1, 2, 20*time.Millisecond, t0)
	b.answered(answerer{node: "b"}, 1, 1, 20*time.Millisecond, t0.Add(time.Microsecond))
	calls := newCalls(4)
	b.cameBack(calls, t0.Add(time.Millisecond))
	var routes []string
	for _, c := range calls {
		routes = append(routes, c.route)
	}
	if want := []string{"a", "a", "b", ""}; !slices.Equal(routes, want) {
		t.Fatalf("routes %q; want %q", routes, want)
	}
}

// The callers of a node that answered while it had no idle worker (it
// was saturated) are not routed back to it: their next requests go to the
// shared stream, where whichever node reads first takes them. The front end
// waits for them to come back all the same, so that they go there together.
func TestCallersOfABusyNodeAreNotRoutedBackButWaitedFor(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1", 0)
	answer := func(seq uint64, node, busy string) redis.XMessage {
		c := &call{seq: seq, got: make([]bool, 1), outputs: make([][]byte, 1), left: 1, over: make(chan struct{}), sent: time.Now()}
		fe.calls[seq] = c
		return redis.XMessage{ID: "1-" + strconv.FormatUint(seq, 10), Values: map[string]any{
			fieldSeq: strconv.FormatUint(seq, 10), fieldIndex: "0", fieldOutput: "y",
			fieldNode: node, fieldWorkers: "2", fieldBusy: busy,
		}}
	}
	// Counted back at the time of the answers: a test held up for longer
	// than comebackHorizon must not see them forgotten.
	at := time.Now()
	fe.deliver([]redis.XMessage{answer(1, "a", "0"), answer(2, "b", "1"), answer(3, "a", "0")})
	if len(fe.calls) != 0 {
		t.Fatalf("%d calls left unanswered", len(fe.calls))
	}
	calls := newCalls(3)
	fe.back.cameBack(calls, at)
	got := routes(calls)
	slices.Sort(got)
	if want := []string{"", "a", "a"}; !slices.Equal(got, want) {
		t.Fatalf("routes %q; want %q (b answered busy)", got, want)
	}
	// They are waited for before what came is admitted, until the delay
	// learnt (1ms here) has passed, as an idle node's are.
	var b comebacks
	t0 := time.Unix(1000, 0)
	b.answered(answerer{node: "a"}, 1, 1, 20*time.Millisecond, t0)
	b.cameBack(newCalls(1), t0.Add(time.Millisecond)) // callers come back after 1ms
	busyAt := t0.Add(2 * time.Millisecond)
	b.answered(answerer{node: "b", busy: true}, 1, 1, 20*time.Millisecond, busyAt)
	if until, ok := b.due(busyAt.Add(100 * time.Microsecond)); !ok || until.After(busyAt.Add(2*time.Millisecond)) {
		t.Fatalf("due = %v, %v; want a wait of about the 1ms learnt for the callers of a busy node", until.Sub(busyAt), ok)
	}
	if _, ok := b.due(busyAt.Add(3 * time.Millisecond)); ok {
		t.Fatal("still waits for the callers of a busy node after the delay learnt")
	}
}

// A request whose caller a node just answered goes to that node's own
// stream only while the node is alive and lists its stream, while no item
// waits unread on the shared stream (which it would pass), and while none
// waits unread on the node's own (the node is behind); otherwise it goes
// to the shared stream.
func TestARoutedRequestGoesToItsNodeOnlyWhenItPassesNobody(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 0)
	own := fe.k.nodeItems("a")
	rs.Do(t, "XGROUP", "CREATE", fe.k.items, nodeGroup, "0", "MKSTREAM")
	rs.Do(t, "XGROUP", "CREATE", own, nodeGroup, "0", "MKSTREAM")
	alive := func() { rs.Do(t, "ZADD", fe.k.nodes, strconv.FormatInt(time.Now().UnixMilli(), 10), "a") }
	admit := func(route string) string {
		t.Helper()
		c := &call{items: [][]byte{[]byte("x")}, route: route, admitted: make(chan error, 1)}
		fe.admit(waiting(fe, c))
		if err := <-c.admitted; err != nil {
			t.Fatal(err)
		}
		return c.stream
	}
	readAll := func() { rs.Do(t, "XREADGROUP", "GROUP", nodeGroup, "b", "STREAMS", fe.k.items, own, ">", ">") }

	alive()
	for _, step := range []struct {
		what, route, want string
		before            func()
	}{
		{"a stranger", "", fe.k.items, readAll},
		{"a node that lists no stream", "a", fe.k.items, readAll},
		{"its node, alive and listed", "a", own, func() { readAll(); rs.Do(t, "SADD", fe.k.streams, own) }},
		{"its node while its own stream holds an item unread", "a", fe.k.items, func() {}},
		{"its node while an item waits unread on the shared stream", "a", fe.k.items, func() { admit("") }},
		{"its node once nothing waits", "a", own, readAll},
		{"a node not heard from", "a", fe.k.items, func() {
			readAll()
			rs.Do(t, "ZADD", fe.k.nodes, strconv.FormatInt(time.Now().Add(-2*nodeSilence).UnixMilli(), 10), "a")
		}},
		{"a node that is gone", "a", fe.k.items, func() { readAll(); rs.Do(t, "ZREM", fe.k.nodes, "a") }},
	} {
		step.before()
		if got := admit(step.route); got != step.want {
			t.Errorf("%s: went to %s; want %s", step.what, got, step.want)
		}
	}
}

// A node that holds more than its share of the callers (its share of the
// workers of the nodes that answer) by half again has part of its next
// answer's callers routed, together, to the node furthest below its share;
// the rest go back to the node that answered them. Once within the margin,
// callers stay where they are.
func TestComebacksAreBalancedByTheNodesWorkers(t *testing.T) {
	var b comebacks
	now := time.Unix(1000, 0)
	workers := map[string]int{"a": 1, "b": 3}
	// 24 callers in a closed loop: 20 start on a's one worker, 4 on b's
	// three. Each turn, every node answers the callers routed to it, and
	// they all come back 1ms later.
	held := map[string][]*call{"a": newCalls(20), "b": newCalls(4)}
	var split []map[string]int
	for turn := range 100 {
		var back []*call
		fromB := len(held["b"])
		for _, node := range []string{"b", "a"} {
			for _, c := range held[node] {
				b.settled(c)
			}
			b.answered(answerer{node: node}, workers[node], len(held[node]), 10*time.Millisecond, now)
			back = append(back, newCalls(len(held[node]))...) // their next requests
			now = now.Add(10 * time.Microsecond)
		}
		now = now.Add(time.Millisecond)
		b.cameBack(back, now)
		held = map[string][]*call{}
		for _, c := range back {
			held[c.route] = append(held[c.route], c)
		}
		// Within a's answer, those moved to b come first, together.
		ofA := routes(back[fromB:])
		if i := slices.Index(ofA, "a"); i >= 0 && slices.Contains(ofA[i:], "b") {
			t.Fatalf("turn %d: a's callers routed %v; want those moved to b first, together", turn, ofA)
		}
		split = append(split, map[string]int{"a": len(held["a"]), "b": len(held["b"])})
		now = now.Add(10 * time.Millisecond)
	}
	// 24 callers on 4 workers: 6 for a's one, 18 for b's three, within
	// half again.
	last := split[len(split)-1]
	if last["a"] > 9 || last["a"]+last["b"] != 24 {
		t.Fatalf("after 100 turns a holds %d callers and b %d; want a within half again of its 6", last["a"], last["b"])
	}
	for i := len(split) / 2; i < len(split); i++ {
		if split[i]["a"] != last["a"] {
			t.Fatalf("the split still moves in turn %d: %v, then %v", i, split[i], last)
		}
	}
	t.Logf("split after 1, 10 and 100 turns: %v, %v, %v", split[0], split[9], last)
}

func routes(calls []*call) []string {
	var r []string
	for _, c := range calls {
		r = append(r, c.route)
	}
	return r
}

// TestKeyedAndPlainRequestsShareAnAdmission: requests with batch keys and
// without, one of them refused, in one run of the admission script: each
// item goes on the stream with its own header, key and value.
func TestKeyedAndPlainRequestsShareAnAdmission(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 5)
	rs.Do(t, "SET", fe.k.sizes, "102400") // none is larger than most: none has room kept
	request := func(seq uint64, keys []string, items ...string) *call {
		c := &call{seq: seq, keys: keys, admitted: make(chan error, 1)}
		for _, it := range items {
			c.items = append(c.items, []byte(it))
		}
		return c
	}
	batch := []*call{
		request(1, []string{"k1", "k2"}, "a", "b"),
		request(2, nil, "c"),
		request(3, []string{""}, "g"),
		request(4, nil, "h"),
		request(5, []string{"k3", "k4"}, "d", "e"), // past the bound of 5
	}
	fe.admit(waiting(fe, batch...))
	for i, c := range batch {
		err := <-c.admitted
		if refused := i == 4; refused != errors.Is(err, supervisor.ErrOverloaded) || (!refused && err != nil) {
			t.Errorf("request %d: verdict %v", c.seq, err)
		}
	}
	ctx := context.Background()
	msgs, err := fe.rdb.XRange(ctx, fe.k.items, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		hd, ok := parseHeader(str(m.Values, fieldHeader))
		key, keyed := m.Values[fieldKey].(string)
		if !ok || hd.front != fe.id || hd.ttl != fe.cfg.ReplyTTL || hd.deadline != 0 {
			t.Fatalf("entry %s: header %q", m.ID, str(m.Values, fieldHeader))
		}
		entry := hd.seq + ":" + hd.index + "=" + str(m.Values, fieldValue)
		if keyed {
			entry += "/" + key
		}
		got = append(got, entry)
	}
	if want := "1:0=a/k1 1:1=b/k2 2:0=c 3:0=g/ 4:0=h"; strings.Join(got, " ") != want {
		t.Fatalf("the stream holds %q; want %s", got, want)
	}
}

// unstartedFront makes a front end on url with the backlog bound maxBacklog
// (0: the default), not started, closed when the test ends.
// A refusal tells the front end that the backlog is full for requests
// like the one refused, and it refuses them unread for a while (see
// Full): one of a single item, or no larger than most, marks it full; one
// larger than most does not, as smaller requests may fit.
func TestARefusalOfASmallRequestMarksTheBacklogFull(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 3)
	request := func(seq uint64, n int) *call {
		c := &call{seq: seq, admitted: make(chan error, 1), items: make([][]byte, n)}
		for i := range c.items {
			c.items[i] = []byte(fmt.Sprint(seq, ":", i))
		}
		return c
	}
	fillers := []*call{request(1, 1), request(2, 1)}
	fe.admit(waiting(fe, fillers...))
	for _, c := range fillers {
		if err := <-c.admitted; err != nil {
			t.Fatal(err)
		}
	}
	// Room kept for another front end's request of 3 items; requests of
	// 2 items are larger than most.
	rs.Do(t, "SET", fe.k.room, "3 elsewhere 9", "PX", "60000")
	rs.Do(t, "SET", fe.k.sizes, "1024")
	fe.sharedMean.Store(1024)
	fe.fullSeen.Store(0)

	large := request(3, 2)
	fe.admit(waiting(fe, large))
	if err := <-large.admitted; !errors.Is(err, supervisor.ErrOverloaded) {
		t.Fatalf("a 2-item request with room kept for 3: %v; want ErrOverloaded", err)
	}
	if seen := fe.fullSeen.Load(); seen != 0 {
		t.Error("a request larger than most, refused, marked the backlog full for every request")
	}
	small := request(4, 1)
	fe.admit(waiting(fe, small))
	if err := <-small.admitted; !errors.Is(err, supervisor.ErrOverloaded) {
		t.Fatalf("a 1-item request with room kept for 3 on a backlog of 2, limit 3: %v; want ErrOverloaded", err)
	}
	if seen := fe.fullSeen.Load(); seen == 0 {
		t.Error("a one-item request refused did not mark the backlog full")
	}
}

func unstartedFront(t *testing.T, url string, maxBacklog int) *FrontEnd {
	t.Helper()
	fe, err := NewFrontEnd(FrontEndConfig{Config: Config{URL: url}, MaxBacklog: maxBacklog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.rdb.Close() })
	return fe
}

// A call that ended before the writer routed it (failed by an outage, or
// given up while it waited for the writer) counts for no node afterwards:
// the balance would otherwise see it there for good.
func TestACallEndedBeforeItIsRoutedCountsForNoNode(t *testing.T) {
	var b comebacks
	now := time.Unix(1000, 0)
	b.answered(answerer{node: "a"}, 1, 2, 10*time.Millisecond, now)
	calls := newCalls(2)
	b.settled(calls[0])
	b.cameBack(calls, now.Add(time.Millisecond))
	if calls[1].route != "a" {
		t.Fatalf("the live call went to %q; want a", calls[1].route)
	}
	if got := b.nodes["a"].inFlight; got != 1 {
		t.Errorf("a counts %d calls in flight; want 1, the live one", got)
	}
}

// queuedForTheWriter starts a call of n items on a front end whose loops
// do not run, so that its writer's queue is full and the call waits to
// hand itself to the writer, and returns once it waits; the call's error
// comes on ended.
func queuedForTheWriter(t *testing.T, ctx context.Context, n int) (fe *FrontEnd, ended <-chan error) {
	return queuedForTheWriterWithin(t, func() context.Context { return ctx }, n)
}

// queuedForTheWriterWithin is queuedForTheWriter with the call's context
// made by mkctx once Redis runs, so that a deadline counts from the call.
func queuedForTheWriterWithin(t *testing.T, mkctx func() context.Context, n int) (fe *FrontEnd, ended <-chan error) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	ctx := mkctx()
	fe = unstartedFront(t, rs.URL(), 100)
	fe.started.Store(true)
	close(fe.firstLook)
	fe.up.Store(true)
	fe.nodes.Store(1)
	for len(fe.submits) < cap(fe.submits) {
		fe.submits <- &call{}
	}
	items := make([][]byte, n)
	for i := range items {
		items[i] = []byte{'a' + byte(i)}
	}
	errs := make(chan error, 1)
	go func() {
		_, err := fe.PredictRequest(ctx, supervisor.Request{Items: items})
		errs <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fe.mu.Lock()
		waiting := len(fe.calls)
		fe.mu.Unlock()
		if waiting == 1 {
			return fe, errs
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never waited for the writer")
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitEnd waits for the error of a call queued for the writer (see
// queuedForTheWriter), which must be want, after what ended it.
func awaitEnd(t *testing.T, ended <-chan error, want error, after string) {
	t.Helper()
	select {
	case err := <-ended:
		if !errors.Is(err, want) {
			t.Errorf("the call ended with %v; want %v", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the call still waits for the writer 10s after %s", after)
	}
}

// A call failed (by an outage) while it waits to hand itself to the
// writer, whose queue is full behind a hung admission, ends with that
// failure, counted once (rejected, as it was never admitted), rather than
// when the writer is free again.
func TestACallFailedWhileQueuedForTheWriterEnds(t *testing.T) {
	fe, ended := queuedForTheWriter(t, context.Background(), 1)
	outage := errors.New("the outage")
	fe.mu.Lock()
	fe.failAllLocked(outage)
	fe.mu.Unlock()
	awaitEnd(t, ended, outage, "the outage")
	if st := fe.Stats(); st.Rejected != 1 || st.Failed != 0 {
		t.Errorf("rejected %d, failed %d; want the item counted once, as rejected", st.Rejected, st.Failed)
	}
}

// A call whose caller leaves, or whose deadline passes, while it waits to
// hand itself to the writer (behind a hung admission: Redis slow) counts
// its items as its request ends, canceled or expired, as a Streamer
// counts them, not rejected.
func TestACallGivenUpWhileQueuedForTheWriterCountsAsItEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fe, ended := queuedForTheWriter(t, ctx, 2)
	cancel()
	awaitEnd(t, ended, supervisor.ErrCanceled, "the caller left")
	if st := fe.Stats(); st.Canceled != 2 || st.Submitted != 2 || st.Answered != 2 || st.Rejected != 0 {
		t.Errorf("canceled %d, submitted %d, answered %d, rejected %d; want the 2 items canceled", st.Canceled, st.Submitted, st.Answered, st.Rejected)
	}
	fe, ended = queuedForTheWriterWithin(t, func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		t.Cleanup(cancel)
		return ctx
	}, 3)
	awaitEnd(t, ended, supervisor.ErrDeadline, "the deadline")
	if st := fe.Stats(); st.Expired != 3 || st.Submitted != 3 || st.Answered != 3 || st.Rejected != 0 {
		t.Errorf("expired %d, submitted %d, answered %d, rejected %d; want the 3 items expired", st.Expired, st.Submitted, st.Answered, st.Rejected)
	}
}

// A call that the front end's close turns away while it waits to hand
// itself to the writer counts as rejected: it was counted nowhere.
func TestACallTurnedAwayByTheCloseCountsAsRejected(t *testing.T) {
	fe, ended := queuedForTheWriter(t, context.Background(), 2)
	// Close's first steps, without the failing of the calls left that
	// follows them.
	fe.closed.Store(true)
	close(fe.closing)
	awaitEnd(t, ended, supervisor.ErrShuttingDown, "the close")
	if st := fe.Stats(); st.Rejected != 2 || st.Failed != 0 {
		t.Errorf("rejected %d, failed %d; want the two items counted as rejected", st.Rejected, st.Failed)
	}
}

// A connection closed under the check's commands (a reset while Redis
// serves) is no outage: the check runs once more, on another connection.
func TestACheckWhoseConnectionClosesUnderItRunsAgain(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	proxy := redistest.StartProxy(t, rs)
	fe := unstartedFront(t, proxy.URL(), 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fe.check(ctx); err != nil {
		t.Fatal(err)
	}
	// The one connection the check used, idle in the pool, closes under
	// the next check's commands.
	if n := proxy.CloseOnNextCommand(); n != 1 {
		t.Fatalf("%s: %d connections marked; want the check's one", proxy, n)
	}
	if err := fe.check(ctx); err != nil || !fe.up.Load() {
		t.Errorf("a check whose connection closed under it: %v, up %v; want it run again on another, and Redis up", err, fe.up.Load())
	}
}

// An admission whose connection closed under it fails its calls with 503
// saying so, and that the request may be sent again: Redis may have run
// it, and its items are withdrawn rather than admitted twice.
func TestAnAdmissionWhoseConnectionClosedSaysSo(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
	c := &call{items: [][]byte{[]byte("x")}, admitted: make(chan error, 1)}
	cmd := redis.NewCmd(context.Background())
	cmd.SetErr(io.EOF)
	fe.tell([]*call{c}, cmd, "", time.Now())
	err := <-c.admitted
	if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "the connection closed under the request's admission (EOF)") {
		t.Errorf("the call's verdict: %v; want ErrUnavailable saying the connection closed under its admission", err)
	}
}

// An admission whose time ran out because the front end did not run (its
// stall watch saw a gap: a SIGSTOP, a paused machine) fails its calls
// saying so, and leaves Redis taken for up; one whose time ran out while
// the front end ran, even long past the command's bound (Redis hung, the
// client library waited for a connection), takes Redis for down.
func TestAnAdmissionTimedOutByAStallBlamesTheFrontEnd(t *testing.T) {
	for _, tt := range []struct {
		name    string
		took    time.Duration
		ran     bool // the front end ran meanwhile: its watch looked every tick
		wantMsg string
		wantUp  bool
	}{
		{"a stall", admitTimeout + 3*time.Second, false, "this front end did not run for 5", true},
		{"redis silent", admitTimeout, true, "redis at 127.0.0.1:1: read tcp: i/o timeout", false},
		{"redis silent, long past the bound", admitTimeout + 3*time.Second, true, "redis at 127.0.0.1:1: read tcp: i/o timeout", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
			fe.up.Store(true)
			c := &call{items: [][]byte{[]byte("x")}, admitted: make(chan error, 1)}
			cmd := redis.NewCmd(context.Background())
			cmd.SetErr(fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded))
			began := time.Now().Add(-tt.took)
			fe.stalls.look(began)
			for at := began; tt.ran && at.Before(time.Now()); at = at.Add(stallTick) {
				fe.stalls.look(at)
			}
			fe.tell([]*call{c}, cmd, "", began)
			err := <-c.admitted
			if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("the call's verdict: %v; want ErrUnavailable saying %q", err, tt.wantMsg)
			}
			if fe.up.Load() != tt.wantUp {
				t.Errorf("redis taken for up: %v; want %v", fe.up.Load(), tt.wantUp)
			}
		})
	}
}

// A call's items are counted by the writer's verdict on them, whenever the
// call ends: admitted, they count as submitted (and, left unanswered, as
// failed, as on a local server), even when a node answered them before the
// writer read the verdict, or the caller gave up while Redis admitted them
// (they may well run); refused or never sent, as rejected, unless their
// caller had left or their deadline passed first: then as the request
// counts, canceled or expired.
func TestItemsAreCountedByTheirAdmissionWhenTheCallEndsBeforeIt(t *testing.T) {
	admitted := func() *redis.Cmd {
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal([]any{[]any{"streamer:items", "1-0", "1-1"}})
		return cmd
	}
	unanswered := func() *redis.Cmd { // the admission's reply lost
		cmd := redis.NewCmd(context.Background())
		cmd.SetErr(io.EOF)
		return cmd
	}
	refused := func() *redis.Cmd {
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal([]any{int64(-1)})
		return cmd
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	gone, expire := context.WithDeadline(context.Background(), time.Now())
	defer expire()
	for _, tt := range []struct {
		name string
		end  func(*FrontEnd, *call) // before the verdict
		cmd  func() *redis.Cmd
		want supervisor.Stats
	}{
		{"answered first", answerAll, admitted, supervisor.Stats{Submitted: 2, Answered: 2}},
		{"given up, then admitted", giveUp(canceled), admitted, supervisor.Stats{Submitted: 2, Answered: 2, Failed: 2, Canceled: 2}},
		{"past its deadline, then admitted", giveUp(gone), admitted, supervisor.Stats{Submitted: 2, Answered: 2, Failed: 2, Expired: 2}},
		{"given up, then refused", giveUp(canceled), refused, supervisor.Stats{Submitted: 2, Answered: 2, Failed: 2, Canceled: 2}},
		{"past its deadline, then refused", giveUp(gone), refused, supervisor.Stats{Submitted: 2, Answered: 2, Failed: 2, Expired: 2}},
		{"answered first, its admission's reply lost", answerAll, unanswered, supervisor.Stats{Submitted: 2, Answered: 2}},
		{"given up, its admission's reply lost", giveUp(canceled), unanswered, supervisor.Stats{Submitted: 2, Answered: 2, Failed: 2, Canceled: 2}},
		{"failed by an outage, then admitted", func(fe *FrontEnd, c *call) {
			fe.mu.Lock()
			defer fe.mu.Unlock()
			fe.failAllLocked(unavailablef("outage"))
		}, admitted, supervisor.Stats{Submitted: 2, Answered: 2, Failed: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
			c := registeredCall(fe, 2)
			tt.end(fe, c)
			if st := fe.Stats(); st.Submitted+st.Rejected+st.Failed != 0 {
				t.Fatalf("counted before the verdict: %+v", st)
			}
			fe.tell([]*call{c}, tt.cmd(), "", time.Now())
			st := fe.Stats()
			if st.Submitted != tt.want.Submitted || st.Answered != tt.want.Answered || st.Failed != tt.want.Failed || st.Expired != tt.want.Expired ||
				st.Canceled != tt.want.Canceled || st.Rejected != tt.want.Rejected {
				t.Errorf("submitted %d, answered %d, failed %d, expired %d, canceled %d, rejected %d; want %+v",
					st.Submitted, st.Answered, st.Failed, st.Expired, st.Canceled, st.Rejected, tt.want)
			}
		})
	}
}

// The calls a stopping writer leaves unread count as rejected: none was
// admitted. One whose caller had left counts as its request does,
// canceled.
func TestCallsLeftToAStoppedWriterCountAsRejected(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
	left, given := registeredCall(fe, 2), registeredCall(fe, 3)
	fe.submits <- left
	fe.submits <- given
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	giveUp(canceled)(fe, given)
	fe.stopWriting()
	close(fe.writerDone)
	if err := fe.verdict(context.Background(), left, nil); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Fatalf("the verdict of a call left unread: %v; want ErrShuttingDown", err)
	}
	if st := fe.Stats(); st.Rejected != 2 || st.Submitted != 3 || st.Canceled != 3 || st.Failed != 3 {
		t.Errorf("rejected %d, submitted %d, canceled %d, failed %d; want 2 rejected and 3 canceled", st.Rejected, st.Submitted, st.Canceled, st.Failed)
	}
}

// registeredCall is a call of n items, waiting for its verdict.
func registeredCall(fe *FrontEnd, n int) *call {
	c := &call{
		items: make([][]byte, n), admitted: make(chan error, 1),
		outputs: make([][]byte, n), got: make([]bool, n), left: n, over: make(chan struct{}),
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.seq++
	c.seq = fe.seq
	fe.calls[c.seq] = c
	fe.held += n
	return c
}

// answerAll answers every item of c, as the reader does.
func answerAll(fe *FrontEnd, c *call) {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.stats.ok.Add(uint64(c.left))
	fe.held -= c.left
	c.left = 0
	delete(fe.calls, c.seq)
	close(c.over)
}

// giveUp has c's caller leave as it waits for the verdict, as ctx ends.
func giveUp(ctx context.Context) func(*FrontEnd, *call) {
	return func(fe *FrontEnd, c *call) {
		if err := fe.verdict(ctx, c, nil); err == nil {
			panic("a verdict with no admission")
		}
	}
}

// A request that comes as the front end starts waits for its first look at
// Redis, rather than be refused blaming a Redis never asked: from before
// Start is called (a server listens first), and during Start's look.
func TestARequestAsTheFrontEndStartsWaitsForItsFirstLook(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
	looked := make(chan error, 1)
	go func() { looked <- fe.awaitFirstLook(context.Background()) }()
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- fe.awaitFirstLook(ctx) }()
	select {
	case err := <-looked:
		t.Fatalf("before Start: %v; want a wait for its first look", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, supervisor.ErrCanceled) {
		t.Errorf("a caller that left before Start: %v; want ErrCanceled", err)
	}
	fe.started.Store(true) // as Start does before its look
	select {
	case err := <-looked:
		t.Fatalf("during the first look: %v; want a wait for its end", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(fe.firstLook)
	if err := <-looked; err != nil {
		t.Errorf("once the first look ended: %v; want nil", err)
	}
}

// A Redis at its maxmemory refuses writes while its memory is over the
// bound and serves as it dips under: for an Outage after each refusal the
// front end takes no request, saying Redis is full (not that no node is
// alive: their heartbeats are refused too), whatever a check found since.
func TestARedisOutOfMemoryIsSaidSoForAnOutage(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
	fe.up.Store(true)
	fe.nodes.Store(1)
	if err := fe.unavailable(); err != nil {
		t.Fatalf("before any refusal: %v; want nil", err)
	}
	fe.noteDown(busyError("OOM command not allowed when used memory > 'maxmemory'."))
	if err := fe.unavailable(); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("after a refusal for want of memory: %v; want ErrUnavailable saying Redis is out of memory", err)
	}
	fe.nodes.Store(0) // the nodes' heartbeats refused
	if err := fe.unavailable(); err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("with no node heard from: %v; want Redis out of memory named", err)
	}
	fe.nodes.Store(1)
	fe.fullAt.Add(-int64(fe.cfg.Outage))
	if err := fe.unavailable(); err != nil {
		t.Errorf("an Outage after the last refusal: %v; want nil", err)
	}
}

// A call a node has answered in part as its admission's reply is lost was
// admitted: its items count once, as submitted, the answered one as
// answered and the other as failed, not also as rejected.
func TestACallAnsweredInPartAsItsAdmissionsReplyIsLostCountsOnce(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
	c := registeredCall(fe, 2)
	fe.mu.Lock()
	c.got[0] = true
	c.left--
	fe.held--
	fe.stats.ok.Add(1)
	fe.mu.Unlock()
	cmd := redis.NewCmd(context.Background())
	cmd.SetErr(io.EOF)
	fe.tell([]*call{c}, cmd, "", time.Now())
	if err := fe.verdict(context.Background(), c, nil); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Fatalf("the verdict: %v; want ErrUnavailable", err)
	}
	if st := fe.Stats(); st.Submitted != 2 || st.Answered != 2 || st.Failed != 1 || st.Rejected != 0 {
		t.Errorf("submitted %d, answered %d, failed %d, rejected %d; want 2, 2, 1 and none", st.Submitted, st.Answered, st.Failed, st.Rejected)
	}
}

// A call whose admission's reply is lost, answered in part before its
// caller is told, was admitted all the same: its items count as
// submitted from that answer on, never as rejected, and no read of the
// stats has more answered than submitted.
func TestACallAnsweredAfterItsAdmissionsReplyIsLostCountsOnce(t *testing.T) {
	fe := unstartedFront(t, "redis://127.0.0.1:1/0", 100)
	c := registeredCall(fe, 2)
	cmd := redis.NewCmd(context.Background())
	cmd.SetErr(io.EOF)
	fe.tell([]*call{c}, cmd, "", time.Now())
	fe.deliver([]redis.XMessage{{ID: "1-1", Values: map[string]any{
		fieldSeq: strconv.FormatUint(c.seq, 10), fieldIndex: "0", fieldOutput: "y", fieldNode: "a", fieldWorkers: "1", fieldBusy: "0",
	}}})
	if st := fe.Stats(); st.Submitted != 2 || st.Answered != 1 {
		t.Errorf("after the answer: submitted %d, answered %d; want 2 and 1", st.Submitted, st.Answered)
	}
	if err := fe.verdict(context.Background(), c, nil); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Fatalf("the verdict: %v; want ErrUnavailable", err)
	}
	if st := fe.Stats(); st.Submitted != 2 || st.Answered != 2 || st.Failed != 1 || st.Rejected != 0 {
		t.Errorf("submitted %d, answered %d, failed %d, rejected %d; want 2, 2, 1 and none", st.Submitted, st.Answered, st.Failed, st.Rejected)
	}
}

// A large request refused for want of room has room kept for it in Redis,
// under its own name: another as large is refused for it, and a larger one
// takes it over. It comes back asking whether it fits, without its items,
// and sends them once it does. Room kept for a request that no longer
// comes for it (its caller left, or it waited its longest) is given back
// at once, not left to lapse.
func TestRoomKeptIsAskedForTakenOverAndGivenBack(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := unstartedFront(t, rs.URL(), 4)
	fe.roomLapse = time.Minute // only a release lets it go within a test
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	request := func(seq uint64, n int) *call {
		c := &call{seq: seq, admitted: make(chan error, 1), items: make([][]byte, n)}
		for i := range c.items {
			c.items[i] = []byte(fmt.Sprint(seq, ":", i))
		}
		return c
	}
	verdict := func(c *call) error {
		t.Helper()
		select {
		case err := <-c.admitted:
			return err
		default:
			t.Fatalf("request %d has no verdict", c.seq)
			return nil
		}
	}
	// back takes from the writer's queue the call of seq, sent back to
	// come again for its room.
	queued := map[uint64]*call{}
	back := func(seq uint64) *call {
		t.Helper()
		for queued[seq] == nil {
			select {
			case c := <-fe.submits:
				queued[c.seq] = c
			case <-ctx.Done():
				t.Fatalf("request %d never came back for its room", seq)
			}
		}
		c := queued[seq]
		delete(queued, seq)
		return c
	}
	room := func() string { return rs.Do(t, "GET", fe.k.room) }
	refusedFor := func(c *call, kept int) {
		t.Helper()
		if err := verdict(c); !errors.Is(err, supervisor.ErrOverloaded) || !strings.Contains(err.Error(), fmt.Sprintf("keeps room for %d ", kept)) {
			t.Fatalf("request %d of %d items: %v; want ErrOverloaded naming the room kept for %d", c.seq, len(c.items), err, kept)
		}
	}

	filler := request(1, 3)
	fe.admit(waiting(fe, filler))
	if err := verdict(filler); err != nil {
		t.Fatal(err)
	}
	rs.Do(t, "SET", fe.k.sizes, "1024") // requests of 2 items are twice the mean
	big := request(2, 2)
	fe.admit(waiting(fe, big))
	if want := "2 " + fe.id + " 2"; room() != want {
		t.Fatalf("room kept %q; want %q", room(), want)
	}
	if c := back(2); !c.asks || len(fe.admitArgs([]*call{c}, "e")) != 6+4 {
		t.Fatalf("the large request comes back with its items (asks %v, %d arguments)", c.asks, len(fe.admitArgs([]*call{c}, "e")))
	}
	// The mean rises past it meanwhile: the room stays its own.
	rs.Do(t, "SET", fe.k.sizes, "102400")
	small, same := request(3, 1), request(4, 2)
	fe.admit(waiting(fe, big, small, same))
	refusedFor(small, 2)
	refusedFor(same, 2)
	if want := "2 " + fe.id + " 2"; room() != want {
		t.Fatalf("room kept %q after another request as large, and a mean past it; want it kept for the first: %q", room(), want)
	}
	// Its room lapses (Redis stalled past roomKeep): asking again, it has
	// it kept again, as found larger than most when it first came.
	rs.Do(t, "DEL", fe.k.room)
	fe.admit([]*call{back(2)})
	if want := "2 " + fe.id + " 2"; room() != want {
		t.Fatalf("room kept %q once the request's room lapsed and it asked again; want %q", room(), want)
	}
	rs.Do(t, "SET", fe.k.sizes, "1024")

	// A place is freed: the large request, asking, learns that it fits,
	// and sends its items, which take the room.
	if err := fe.rdb.XDel(ctx, fe.k.items, filler.ids[0]).Err(); err != nil {
		t.Fatal(err)
	}
	fe.admit([]*call{back(2)})
	sent := back(2)
	if sent.asks {
		t.Fatal("the large request that fits asks again, rather than send its items")
	}
	fe.admit([]*call{sent})
	if err := verdict(big); err != nil || len(big.ids) != 2 {
		t.Fatalf("the large request: %v, %d ids; want admitted", err, len(big.ids))
	}
	if got := rs.Do(t, "EXISTS", fe.k.room); got != "0" {
		t.Fatalf("room still kept once its request was admitted: %q", room())
	}

	// The backlog is full: a larger request takes over the room of a
	// smaller one, which is then refused for it; the larger one's caller
	// leaves, and the room goes with it.
	rs.Do(t, "SET", fe.k.sizes, "1024") // as it was before the admission moved it
	two, three := request(5, 2), request(6, 3)
	fe.admit(waiting(fe, two))
	fe.admit(waiting(fe, three))
	if want := "3 " + fe.id + " 6"; room() != want {
		t.Fatalf("room kept %q; want it taken over by the larger request: %q", room(), want)
	}
	fe.admit([]*call{back(5)})
	refusedFor(two, 3)
	c := back(6)
	fe.mu.Lock()
	c.gaveUp = true
	fe.mu.Unlock()
	fe.admit([]*call{c})
	fe.done.Wait() // the release, the writer's only other work here
	if got := rs.Do(t, "EXISTS", fe.k.room); got != "0" {
		t.Fatalf("room still kept after its caller left: %q", room())
	}

	// One that waited its longest is refused, and its room given back.
	last := request(7, 2)
	fe.admit(waiting(fe, last))
	if want := "2 " + fe.id + " 7"; room() != want {
		t.Fatalf("room kept %q; want %q", room(), want)
	}
	c = back(7)
	c.roomSince = time.Now().Add(-roomWaitMax)
	fe.admit([]*call{c})
	if err := verdict(last); !errors.Is(err, supervisor.ErrOverloaded) || !strings.Contains(err.Error(), "within") {
		t.Fatalf("a large request past its longest wait: %v; want ErrOverloaded saying it waited", err)
	}
	fe.done.Wait()
	if got := rs.Do(t, "EXISTS", fe.k.room); got != "0" {
		t.Fatalf("room still kept after its request waited its longest: %q", room())
	}
}
