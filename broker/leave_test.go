package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/supervisor"
)

// consumers lists the consumers of the nodes' group on the shared stream.
func consumers(t *testing.T, rs *redistest.Server) []string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer func() { _ = rdb.Close() }()
	list, err := rdb.XInfoConsumers(context.Background(), "streamer:items", "nodes").Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list {
		names = append(names, c.Name)
	}
	return names
}

// A node whose streamer refuses items leaves them in the group for another
// node. Leaving cleanly afterwards must not take them along: Redis drops a
// consumer's pending items when the consumer is deleted, and nothing could
// claim them then.
func TestItemsANodeReleasedAreClaimedAfterItLeavesCleanly(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["a"] = true
	// A queue of one: of the four items read at once for the idle worker's
	// batch, the queue takes one and refuses the rest.
	st := startStreamer(t, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 4, MaxQueue: 1, MaxLatency: time.Millisecond, Batching: supervisor.BatchingGreedy})
	n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL(), ClaimIdle: 400 * time.Millisecond}, Streamer: st, Capacity: 8, Name: "leaving"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "a", "b", "c", "d")
	eventually(t, "the node released items", func() bool { return n.Stats().Released > 0 })
	close(rec.release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if got := consumers(t, rs); !slices.Contains(got, "leaving") {
		t.Errorf("consumers after the node left: %q; want its own kept while items are pending to it", got)
	}
	other := newRecorder()
	startNode(t, rs, other, 4, nil)
	a := <-later
	if a.err != nil || len(a.out) != 4 || string(a.out[2]) != "c" || string(a.out[3]) != "d" {
		t.Fatalf("got %q, %v; want all four items answered", a.out, a.err)
	}
	if n := rs.Do(t, "XLEN", "streamer:items"); n != "0" {
		t.Errorf("%s items left on the stream; want none", n)
	}
}

// A node that leaves with nothing pending takes its consumer along; one
// that is killed leaves its consumer, which another node deletes once it
// has claimed the items and the consumer has been idle for a while. The
// heir keeps serving meanwhile.
func TestConsumersOfNodesThatAreGoneAreDeleted(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	idle := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Name = "idle" })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	if _, err := predict(t, fe, "first"); err != nil {
		t.Fatal(err)
	}
	if got := consumers(t, rs); !slices.Equal(got, []string{"idle"}) {
		t.Fatalf("consumers after a read: %q; want the node's", got)
	}
	if err := idle.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := consumers(t, rs); len(got) != 0 {
		t.Errorf("consumers after the node left with nothing pending: %q; want none", got)
	}

	stuck := newRecorder()
	stuck.hold["slow"] = true
	killed := startNode(t, rs, stuck, 4, func(c *broker.NodeConfig) { c.Name = "killed" })
	// The idle node left: the front end may have counted no node since.
	eventually(t, "front end ready: the new node heard from", fe.Ready)
	later := predictLater(t, fe, "slow")
	eventually(t, "the node holds the item", func() bool { return stuck.runs("slow") == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := killed.Shutdown(ctx); err == nil {
		t.Fatal("the node's shutdown left nothing to claim")
	}
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Name = "heir" })
	if a := <-later; a.err != nil || string(a.out[0]) != "slow" {
		t.Fatalf("got %q, %v; want the item answered by the other node", a.out, a.err)
	}
	// A live node's consumer that holds nothing may go too (Redis makes it
	// anew at its next read): only the killed node's is certain to.
	eventually(t, "the killed node's consumer deleted", func() bool {
		return !slices.Contains(consumers(t, rs), "killed")
	})
	if out, err := predict(t, fe, "after"); err != nil || string(out[0]) != "after" {
		t.Errorf("after the consumers were pruned: %q, %v", out, err)
	}
	close(stuck.release)
}

// The items of a dead node behind many items of live nodes in the pending
// list are claimed all the same, by a node with room for few: XAUTOCLAIM
// looks at ten entries per item asked for, so a claim that stopped at the
// first page of live items never reached them; and one claim looks at 16
// pages at most, so the next must go on where it stopped.
func TestADeadNodesItemsBehindLiveOnesAreClaimed(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeGroup(t, rs)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	read := func(consumer string, count int) []string {
		t.Helper()
		eventually(t, fmt.Sprintf("%d items on the stream for %s", count, consumer), func() bool {
			return rs.Do(t, "XLEN", "streamer:items") == fmt.Sprint(count+pendingCount(t, rdb))
		})
		got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "nodes", Consumer: consumer, Streams: []string{"streamer:items", ">"}, Count: int64(count)}).Result()
		if err != nil || len(got[0].Messages) != count {
			t.Fatalf("%s read %v, %v; want %d items", consumer, got, err, count)
		}
		var ids []string
		for _, m := range got[0].Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	// 200 items held by a live node, then two by a dead one.
	liveCtx, leave := context.WithCancel(ctx)
	defer leave()
	for i := range 200 {
		go func() { _, _ = fe.Predict(liveCtx, [][]byte{fmt.Appendf(nil, "live %d", i)}) }()
	}
	live := read("live", 200)
	dead := []<-chan answer{predictLater(t, fe, "dead 0"), predictLater(t, fe, "dead 1")}
	read("dead", 2)
	// The live node keeps its items, as a node does, until the test ends.
	stop := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: "streamer:items", Group: "nodes", Consumer: "live", Messages: live})
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-kept }()
	// Room for one item: each XAUTOCLAIM looks at ten entries.
	heir := startNode(t, rs, newRecorder(), 1, func(c *broker.NodeConfig) { c.Capacity = 1 })
	for i, later := range dead {
		if a := <-later; a.err != nil || string(a.out[0]) != fmt.Sprint("dead ", i) {
			t.Errorf("the dead node's item %d: %q, %v; want it claimed and answered", i, a.out, a.err)
		}
	}
	if got := heir.Stats().Claimed; got < 2 {
		t.Errorf("the node claimed %d items; want the dead node's 2", got)
	}
}

// pendingCount is how many items of the shared stream are pending to a
// consumer.
func pendingCount(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	p, err := rdb.XPending(context.Background(), "streamer:items", "nodes").Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(p.Count)
}

// A node leaving finishes the items it holds, and their callers get the
// answers: front ends still count it while it drains (it is the only one
// at first, and they would otherwise fail its callers after Outage),
// though they admit no new request for it alone, and the node that comes
// meanwhile claims none of its items.
// The waits are times that must pass: the front end's Outage, then the
// items' ClaimIdle, several times over.
func TestALeavingNodesCallersAreAnswered(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["slow"] = true
	n := startNode(t, rs, rec, 4, func(c *broker.NodeConfig) { c.Name = "leaving" })
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Outage = 200 * time.Millisecond })
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "slow")
	eventually(t, "the node runs the item", func() bool { return rec.runs("slow") == 1 })
	left := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		left <- n.Shutdown(ctx)
	}()
	eventually(t, "the node off the list routes go by", func() bool { return rs.Do(t, "ZSCORE", "streamer:nodes", "leaving") == "" })
	// The list of nodes leaving, made by this one's beats as it leaves,
	// goes by itself should every node die now.
	eventually(t, "the node in the list of nodes leaving", func() bool { return rs.Do(t, "ZSCORE", "streamer:leaving", "leaving") != "" })
	if ttl := rs.Do(t, "TTL", "streamer:leaving"); ttl == "-1" {
		t.Error("the list of nodes leaving has no time to live")
	}
	// No node would read a new request: it is refused at once.
	eventually(t, "the front end not ready with only a node leaving", func() bool { return !fe.Ready() })
	if _, err := predict(t, fe, "new"); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Errorf("a new request while the only node leaves: %v; want ErrUnavailable", err)
	}
	<-time.After(5 * 200 * time.Millisecond)
	select {
	case a := <-later:
		t.Fatalf("the caller got %q, %v while its item ran; want to wait for it", a.out, a.err)
	default:
	}
	other := newRecorder()
	heir := startNode(t, rs, other, 4, nil)
	<-time.After(3 * 400 * time.Millisecond)
	close(rec.release)
	if a := <-later; a.err != nil || string(a.out[0]) != "slow" {
		t.Errorf("the caller got %q, %v; want the answer of the node that left", a.out, a.err)
	}
	if err := <-left; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if other.runs("slow") != 0 || heir.Stats().Claimed != 0 {
		t.Errorf("the other node ran the item %d times and claimed %d; want neither", other.runs("slow"), heir.Stats().Claimed)
	}
	if got := rs.Do(t, "ZRANGE", "streamer:nodes", "0", "-1") + rs.Do(t, "ZRANGE", "streamer:leaving", "0", "-1"); strings.Contains(got, "leaving") {
		t.Errorf("nodes, live or leaving, after the node left: %q", got)
	}
}

// An item that a node took from another, live, node's own stream (see
// steal) and then died with is claimed like any other: it is pending on
// that stream, not on the shared one, to a consumer that is gone.
func TestAnItemTakenFromALiveNodesStreamIsClaimedWhenItsTakerDies(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Name = "x" })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	own := "streamer:items:x"
	eventually(t, "the node's own stream listed", func() bool { return rs.Do(t, "SISMEMBER", "streamer:streams", own) == "1" })
	// A taker that dies as soon as it has read: a consumer that never
	// comes back. The item's header names a front end nobody reads for.
	pipe := rdb.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: own, Values: []any{"h", nobody + " 1 0 0 0", "v", "taken"}})
	pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "nodes", Consumer: "taker", Streams: []string{own, ">"}, Count: 1, Block: -1})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the item claimed and answered", func() bool {
		return rs.Do(t, "XLEN", own) == "0" && rs.Do(t, "XLEN", "streamer:reply:"+nobody) == "1"
	})
}

// A node whose workers cannot run (here its streamer is shut down, and
// drains the item it runs) keeps the items it holds, and their callers
// get the answers; but nobody reads what waits on the stream, and its
// caller gets ErrUnavailable about Outage after no node takes requests,
// as from a local server whose workers cannot run, rather than wait for
// its deadline (or for ever, without one).
func TestCallersOfItemsNoNodeWillTakeFailWhenNoWorkerCanRun(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["running"] = true
	st := startStreamer(t, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 1, MaxLatency: time.Millisecond})
	n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL(), ClaimIdle: 400 * time.Millisecond}, Streamer: st, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	// Before the node's shutdown and the streamer's, which wait for the
	// item it runs.
	release := sync.OnceFunc(func() { close(rec.release) })
	t.Cleanup(release)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	running := predictLater(t, fe, "running")
	eventually(t, "the node runs the item", func() bool { return rec.runs("running") == 1 })
	// The node has no room: this one waits unread.
	waiting := predictLater(t, fe, "waiting")
	onStream(t, rs, 2, "the second item on the stream")

	drained := make(chan error, 1)
	go func() { drained <- st.Shutdown(context.Background()) }()
	eventually(t, "the front end to find no node that takes requests", func() bool { return fe.NotReady() != nil })
	a := answerWithin(t, waiting, 5*time.Second, "the caller of the item no node reads is still waiting 5s after no node took requests")
	if !errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "no node takes requests") {
		t.Errorf("the caller of the item no node reads: %q, %v; want ErrUnavailable saying no node takes requests", a.out, a.err)
	}
	select {
	case a := <-running:
		t.Fatalf("the caller of the item the node runs got %q, %v; want to wait for it", a.out, a.err)
	default:
	}
	release()
	if a := answerWithin(t, running, 5*time.Second, "no answer for the item the node ran"); a.err != nil || string(a.out[0]) != "running" {
		t.Errorf("the caller of the item the node ran: %q, %v; want its answer", a.out, a.err)
	}
	if err := <-drained; err != nil {
		t.Errorf("the streamer's shutdown: %v", err)
	}
	eventually(t, "the stream empty: the failed call's item withdrawn", func() bool { return rs.Do(t, "XLEN", "streamer:items") == "0" })
}

// A node whose Streamer is shut down before it (the wrong order) says so,
// and is listed as no node, alive or leaving, once it holds nothing: it
// will never run an item again. Before, it beat as leaving for ever, and
// NotReady said nothing: front ends kept their callers waiting for it, up
// to ClaimIdle for the items it read and let go; and it said so only at
// its next heartbeat, up to a second later, admitting requests meanwhile.
// NotReady also says when a node or a front end is not started, or the
// node shut down.
func TestANodeWhoseStreamerIsShutDownSaysSoAndCountsAsNoNode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	st := startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 1, MaxLatency: time.Millisecond})
	cfg := broker.NodeConfig{Config: broker.Config{URL: rs.URL(), ClaimIdle: 400 * time.Millisecond}, Streamer: st, Capacity: 1}
	// Its beats come from its start and its events alone: the Streamer's
	// shutdown must be one, not wait for the next heartbeat.
	broker.SlowBeats(&cfg, time.Hour)
	n, err := broker.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Close(context.Background()) })
	for name, err := range map[string]error{"node": n.NotReady(), "front end": fe.NotReady()} {
		if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "not started") {
			t.Errorf("the %s's NotReady before Start: %v; want ErrUnavailable saying it is not started", name, err)
		}
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := fe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "front end ready", fe.Ready)
	if err := n.NotReady(); err != nil {
		t.Fatalf("the node's NotReady, started: %v", err)
	}

	if err := st.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node to say its Streamer is shut down", func() bool {
		err := n.NotReady()
		return errors.Is(err, supervisor.ErrUnavailable) && strings.Contains(err.Error(), "Streamer is shut down")
	})
	eventually(t, "the node listed neither alive nor leaving", func() bool {
		return rs.Do(t, "ZCARD", "streamer:nodes") == "0" && rs.Do(t, "ZCARD", "streamer:leaving") == "0"
	})
	eventually(t, "the front end to find no node alive", func() bool {
		err := fe.NotReady()
		return err != nil && strings.Contains(err.Error(), "no node is alive")
	})
	if _, err := predict(t, fe, "x"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "no node is alive") {
		t.Errorf("a request with the only node's Streamer shut down: %v; want ErrUnavailable saying no node is alive", err)
	}

	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.NotReady(); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Errorf("the node's NotReady after Shutdown: %v; want ErrShuttingDown", err)
	}
}

// With only nodes that take no requests, a front end fails the calls whose
// items none holds: those left unread, and those a node took and let go
// (idle for ClaimIdle, as a node that cannot run them leaves them for
// another's claim). It does not fail a call whose item a node holds and
// keeps, however long it runs.
func TestOnlyCallsWhoseItemsNoNodeHoldsFailWhileNoNodeTakesRequests(t *testing.T) {
	rs, fe := frontWithoutNodes(t, func(c *broker.FrontEndConfig) {
		c.Outage = 200 * time.Millisecond
		c.ClaimIdle = 400 * time.Millisecond
	})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	kept := predictLater(t, fe, "kept")
	onStream(t, rs, 1, "the first item on the stream")
	dropped := predictLater(t, fe, "dropped")
	onStream(t, rs, 2, "the second item on the stream")
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "nodes", Consumer: "fake", Streams: []string{"streamer:items", ">"}, Count: 2}).Result()
	if err != nil || len(got[0].Messages) != 2 {
		t.Fatalf("read %v, %v; want both items", got, err)
	}
	keptID := got[0].Messages[0].ID
	unread := predictLater(t, fe, "unread")
	onStream(t, rs, 3, "the third item on the stream")
	// The node keeps the first item, as a live one does, until the test
	// ends, and lets the second go.
	stop := make(chan struct{})
	keeping := make(chan struct{})
	go func() {
		defer close(keeping)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: "streamer:items", Group: "nodes", Consumer: "fake", Messages: []string{keptID}})
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-keeping }()
	// It takes requests no more, and beats on as leaving.
	rs.Do(t, "ZREM", "streamer:nodes", "fake")
	rs.Do(t, "ZADD", "streamer:leaving", strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "fake")
	for what, later := range map[string]<-chan answer{"unread": unread, "let go": dropped} {
		a := answerWithin(t, later, 5*time.Second, "the caller of the item "+what+" is still waiting 5s after no node took requests")
		if !errors.Is(a.err, supervisor.ErrUnavailable) {
			t.Errorf("the caller of the item %s: %q, %v; want ErrUnavailable", what, a.out, a.err)
		}
	}
	<-time.After(5 * 400 * time.Millisecond)
	select {
	case a := <-kept:
		t.Fatalf("the caller of the item kept got %q, %v; want to wait for it", a.out, a.err)
	default:
	}
	// Once no node is left at all, it fails too.
	rs.Do(t, "ZREM", "streamer:leaving", "fake")
	a := answerWithin(t, kept, 5*time.Second, "the caller of the item kept is still waiting 5s after every node had gone")
	if !errors.Is(a.err, supervisor.ErrUnavailable) {
		t.Errorf("the caller of the item kept, once no node is left: %q, %v; want ErrUnavailable", a.out, a.err)
	}
}
