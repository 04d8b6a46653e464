package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// TestANodeBeatsEverySecond: with the default claim idle, a node's
// heartbeats in Redis are a second apart, not two (front ends take a node
// silent for three for gone, so one lost beat must not make it look gone).
// The scores are Redis's clock in milliseconds; the gaps' median is
// judged, so that one late tick on a loaded machine does not decide.
func TestANodeBeatsEverySecond(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.ClaimIdle = broker.DefaultClaimIdle })

	var beats []int64
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(10 * time.Second); len(beats) < 6; <-poll.C {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, heartbeats at %v ms; want 6", beats)
		}
		score, err := strconv.ParseInt(rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()), 10, 64)
		if err != nil {
			t.Fatalf("the node's heartbeat: %v", err)
		}
		if len(beats) == 0 || score != beats[len(beats)-1] {
			beats = append(beats, score)
		}
	}
	gaps := make([]int64, 0, len(beats)-2)
	for i := 2; i < len(beats); i++ { // the first seen may be Start's own
		gaps = append(gaps, beats[i]-beats[i-1])
	}
	slices.Sort(gaps)
	if median := gaps[len(gaps)/2]; median > 1300 {
		t.Errorf("heartbeats %d ms apart on the median (gaps %v ms); want about 1000", median, gaps)
	}
}

// The keys only running nodes prune (the lists of nodes and their
// streams, a node's own stream, the quarantine) carry a time to live that
// each heartbeat renews: once no node runs, they go by themselves.
func TestTheNodesKeysGoWhenNoNodeRuns(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, nil)
	rs.Do(t, "ZADD", "streamer:poison", strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10), "a-hash")
	rs.Do(t, "ZADD", "streamer:leaving", strconv.FormatInt(time.Now().UnixMilli(), 10), "another")
	ttls := map[string]time.Duration{
		"streamer:nodes": time.Hour, "streamer:leaving": time.Hour, "streamer:streams": time.Hour,
		"streamer:items:" + n.Name(): time.Hour, "streamer:poison": 10*time.Minute + time.Second,
	}
	for key, want := range ttls {
		eventually(t, key+" to carry a time to live", func() bool { return rs.Do(t, "PTTL", key) != "-1" })
		ttl, err := strconv.ParseInt(rs.Do(t, "PTTL", key), 10, 64)
		if got := time.Duration(ttl) * time.Millisecond; err != nil || got <= 0 || got > want {
			t.Errorf("%s: PTTL %v, %v; want at most %s", key, got, err, want)
		}
	}
}

// A node's own stream and the list of streams carry their time to live as
// soon as the node has joined, not from its next beat: a node killed in
// between (one crash-looping at start, say) left them for good.
func TestANodesStreamExpiresFromItsJoin(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { broker.SlowBeats(c, time.Hour) })
	for _, key := range []string{"streamer:items:" + n.Name(), "streamer:streams"} {
		ttl, err := strconv.ParseInt(rs.Do(t, "PTTL", key), 10, 64)
		if got := time.Duration(ttl) * time.Millisecond; err != nil || got <= 0 || got > time.Hour {
			t.Errorf("%s right after the node started: PTTL %v, %v; want an hour at most", key, got, err)
		}
	}
}

// After Redis froze (here paused) for longer than the nodes' claim idle,
// the items every node holds have been idle that long on Redis's clock,
// and the nodes silent (a trial saw a node delete a live one's stream): a node takes none of another's items, nor its
// stream, until the other has had the time to keep them and beat. The
// item is run once, by the node that held it.
func TestNodesTakeNothingOfEachOtherAsRedisComesBackFromAFreeze(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	recs := []*recorder{newRecorder(), newRecorder()}
	var nodes []*broker.Node
	for _, rec := range recs {
		rec.hold["held"] = true
		nodes = append(nodes, startNode(t, rs, rec, 4, func(c *broker.NodeConfig) { c.ClaimIdle = 500 * time.Millisecond }))
	}
	// A front end whose callers wait through the freeze.
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Outage = time.Minute })
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "held")
	eventually(t, "a node runs the item", func() bool { return recs[0].runs("held")+recs[1].runs("held") == 1 })
	members := func() string {
		got := strings.Split(rs.Do(t, "SMEMBERS", "streamer:streams"), "\n")
		slices.Sort(got)
		return strings.Join(got, " ")
	}
	streams := members()
	rs.Do(t, "CLIENT", "PAUSE", "3500", "ALL")
	<-time.After(3500 * time.Millisecond) // the freeze, as Redis's clock goes on
	// The claims a node would make, many times over.
	eventually(t, "redis serves again", func() bool { return rs.Do(t, "PING") == "PONG" })
	<-time.After(2 * time.Second)
	for _, rec := range recs {
		close(rec.release)
	}
	if a := answerWithin(t, later, 10*time.Second, "the held item's caller got no answer"); a.err != nil {
		t.Errorf("the held item's caller: %v", a.err)
	}
	if runs := recs[0].runs("held") + recs[1].runs("held"); runs != 1 {
		t.Errorf("the item ran %d times; want once", runs)
	}
	for i, n := range nodes {
		if c := n.Stats().Claimed; c != 0 {
			t.Errorf("node %d claimed %d items of a live node; want none", i, c)
		}
	}
	if got := members(); got != streams {
		t.Errorf("the nodes' streams %q after the freeze; want them all still, %q", got, streams)
	}
}

// TestAClaimRedisFrozeUnderTakesNothing: a claim whose round trips Redis
// froze through takes none of the items it finds idle past --claim-idle:
// the nodes holding them could not keep them meanwhile (the test above
// failed one run in thirty or so where a claim went out as Redis froze).
// It takes them once their nodes have had the time to, if they are idle
// still. Here the item is read by a consumer that never keeps it, just
// before Redis freezes for longer than --claim-idle, and the node claims
// as the freeze begins.
func TestAClaimRedisFrozeUnderTakesNothing(t *testing.T) {
	rs, n, rec, busy, later := anItemNobodyKeeps(t)
	// Within the client's read timeout; the node has room for the item
	// once its batch ends.
	rs.Do(t, "CLIENT", "PAUSE", "1800", "ALL")
	close(rec.release)
	if err := broker.ClaimNow(n); err != nil {
		t.Fatalf("the claim: %v", err)
	}
	if c := n.Stats().Claimed; c != 0 {
		t.Errorf("a claim Redis froze under took %d items; want none", c)
	}
	claimedOnce(t, n, rec, busy, later)
}

// anItemNobodyKeeps starts a front end and a node (--claim-idle 1s) with
// room for one item, running an item until rec's release is closed, and
// sends a second item, which a consumer that never keeps it reads: the
// callers of both wait on busy and later.
func anItemNobodyKeeps(t *testing.T) (rs *redistest.Server, n *broker.Node, rec *recorder, busy, later <-chan answer) {
	t.Helper()
	rs = redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Outage = time.Minute })
	rec = newRecorder()
	rec.hold["busy"] = true
	n = startNodeOn(t, rs, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 1, PipelineDepth: 1, MaxLatency: time.Millisecond},
		func(c *broker.NodeConfig) { c.ClaimIdle = time.Second })
	eventually(t, "front end ready", fe.Ready)
	busy = predictLater(t, fe, "busy")
	eventually(t, "the node runs its item", func() bool { return rec.runs("busy") == 1 })
	later = predictLater(t, fe, "later") // no room for it: it waits unread
	onStream(t, rs, 2, "the second item on the stream")
	rs.Do(t, "XREADGROUP", "GROUP", "nodes", "other", "COUNT", "1", "STREAMS", "streamer:items", ">")
	return rs, n, rec, busy, later
}

// claimedOnce checks that both callers of anItemNobodyKeeps are answered,
// the second item claimed by n and run once.
func claimedOnce(t *testing.T, n *broker.Node, rec *recorder, busy, later <-chan answer) {
	t.Helper()
	for _, a := range []<-chan answer{busy, later} {
		if got := answerWithin(t, a, 15*time.Second, "a caller got no answer"); got.err != nil {
			t.Errorf("a caller: %v", got.err)
		}
	}
	if c := n.Stats().Claimed; c != 1 {
		t.Errorf("the node claimed %d items; want the one nobody kept, by a claim", c)
	}
	if r := rec.runs("later"); r != 1 {
		t.Errorf("the item nobody kept ran %d times; want once", r)
	}
}

// TestAClaimsLateTakingIsNotRecoveredAsAFailedReadsWhileClaimsAreHeldOff:
// a claim sent as Redis froze for longer than the client waits fails, and
// Redis runs it as the freeze ends: the items it took from a live node are
// pending to this node, unknown to it, as those of a read that failed
// are, and a read that failed through the freeze has the node look for
// those. It leaves the ones delivered more than once (claims) while claims
// are held off: their node takes them back as it keeps them, and a claim
// takes them once idle past --claim-idle if no node did. Here the late
// claim is made by hand, of an item read by a consumer that never keeps
// it.
func TestAClaimsLateTakingIsNotRecoveredAsAFailedReadsWhileClaimsAreHeldOff(t *testing.T) {
	rs, n, rec, busy, later := anItemNobodyKeeps(t)
	id, _, _ := strings.Cut(rs.Do(t, "XPENDING", "streamer:items", "nodes", "-", "+", "1", "other"), "\n")
	rs.Do(t, "XCLAIM", "streamer:items", "nodes", n.Name(), "0", id)
	broker.HoldOffClaims(n)
	broker.MarkLost(n)
	close(rec.release) // room: the node looks for what a failed read left
	claimedOnce(t, n, rec, busy, later)
}

// A node beats as soon as Redis serves it again after an outage, not at
// its next heartbeat: a Redis restarted without its data has no list of
// nodes, and front ends answer 503 until one beats. Here the node's
// heartbeats are an hour apart.
func TestANodeBeatsAsSoonAsRedisServesItAgain(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var logs syncbuf.Buffer
	n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) {
		broker.SlowBeats(c, time.Hour)
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()) == "" {
		t.Fatal("the node did not beat as it started")
	}
	rs.Kill()
	eventually(t, "the node finds redis down", func() bool { return strings.Contains(logs.String(), "redis does not serve this node") })
	rs.Restart(t) // without its data
	eventually(t, "the node beats again", func() bool { return rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()) != "" })
}

// TestShutdownCalledTogetherLeavesOnce: callers that shut a node down at
// the same moment neither panic nor return before it has left, both the
// list of live nodes and that of nodes leaving.
func TestShutdownCalledTogetherLeavesOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := make(chan struct{})
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			<-start
			errs <- n.Shutdown(ctx)
		}()
	}
	close(start)
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for _, list := range []string{"streamer:nodes", "streamer:leaving"} {
			if score := rs.Do(t, "ZSCORE", list, n.Name()); score != "" {
				t.Fatalf("a Shutdown returned while the node was still in %s (heartbeat %s)", list, score)
			}
		}
	}
}

// TestASilentNodesItemsAreLeftToAnIdleNode: a node whose only worker is
// busy, with no room to form a batch ahead, does not claim a silent node's
// items into its queue, where they would wait behind its batch: it leaves
// them for a node with an idle worker, which claims and runs them all.
func TestASilentNodesItemsAreLeftToAnIdleNode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	busy := newRecorder()
	busy.hold["busy"] = true
	a := startNodeOn(t, rs, supervisor.Config{InProcess: busy, Workers: 1, BatchSize: 1, PipelineDepth: 1, MaxLatency: time.Millisecond}, nil)
	eventually(t, "front end ready", fe.Ready)
	held := predictLater(t, fe, "busy")
	eventually(t, "the busy node runs its item", func() bool { return busy.runs("busy") == 1 })

	// A node reads eight items and dies: they stay pending to it.
	orphans := predictLater(t, fe, "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8")
	onStream(t, rs, 9, "the orphans on the stream")
	rs.Do(t, "XREADGROUP", "GROUP", "nodes", "dead", "COUNT", "8", "STREAMS", "streamer:items", ">")
	if got := rs.Do(t, "XPENDING", "streamer:items", "nodes"); !strings.HasPrefix(got, "9\n") || !strings.Contains(got, "\ndead\n8\n") {
		t.Fatalf("XPENDING says %q; want the busy item and the 8 orphans pending to the node that died", got)
	}
	// Claimable for twice the claim idle: the busy node has looked at them
	// four times or more, unless it claimed them.
	eventually(t, "the orphans claimable for twice the claim idle", func() bool {
		idle := rs.Do(t, "XPENDING", "streamer:items", "nodes", "IDLE", "800", "-", "+", "10", "dead")
		return strings.Count(idle, "dead") == 8 || a.Stats().Claimed > 0
	})
	if c := a.Stats().Claimed; c != 0 {
		t.Fatalf("the busy node claimed %d items; want none, as no worker of it could run them", c)
	}

	idle := newRecorder()
	b := startNodeOn(t, rs, supervisor.Config{InProcess: idle, Workers: 1, BatchSize: 8, MaxLatency: time.Millisecond}, nil)
	if got := <-orphans; got.err != nil || len(got.out) != 8 {
		t.Fatalf("the orphans: %q, %v; want their 8 answers", got.out, got.err)
	}
	if c := b.Stats().Claimed; c != 8 {
		t.Errorf("the idle node claimed %d items; want all 8", c)
	}
	close(busy.release)
	if got := <-held; got.err != nil {
		t.Errorf("the busy node's item: %v", got.err)
	}
}

// TestASilentNodesItemsAreClaimedByABusyNode: a node killed under load
// leaves its items to nodes whose workers are all busy. Such a node has
// room only as one of its batches ends, and it had filled that room with
// new items each time, leaving the silent node's to wait, behind newer
// ones, for as long as the load lasted (20 s and more through the CLI). It
// claims them at that room first.
func TestASilentNodesItemsAreClaimedByABusyNode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	batchCost := model.Func(func(ctx context.Context, items [][]byte) ([][]byte, error) {
		select {
		case <-time.After(20 * time.Millisecond):
			return items, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	// Room for the batch it runs and the next: 8 items.
	n := startNodeOn(t, rs, supervisor.Config{InProcess: batchCost, Workers: 1, BatchSize: 4, MaxLatency: time.Millisecond}, nil)
	eventually(t, "front end ready", fe.Ready)

	// A closed loop of 48 callers keeps the worker busy and items waiting.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 48 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				item := fmt.Sprintf("%d-%d", c, i)
				if out, err := predict(t, fe, item); err != nil || len(out) != 1 || string(out[0]) != item {
					t.Errorf("%s: %q, %v; want it back", item, out, err)
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	eventually(t, "items waiting on the stream", func() bool {
		waiting, err := strconv.Atoi(rs.Do(t, "XLEN", "streamer:items"))
		return err == nil && waiting >= 32
	})

	// A node reads 16 of them and dies.
	rs.Do(t, "XREADGROUP", "GROUP", "nodes", "dead", "COUNT", "16", "STREAMS", "streamer:items", ">")
	if got := rs.Do(t, "XPENDING", "streamer:items", "nodes", "-", "+", "100", "dead"); strings.Count(got, "dead") != 16 {
		t.Fatalf("XPENDING for the dead node says %q; want 16 items", got)
	}
	// Claimable after 400 ms, found within 100 ms more, and claimed 4 at
	// a time as batches of 20 ms end: well within 3 s.
	deadline := time.Now().Add(3 * time.Second)
	for n.Stats().Claimed < 16 {
		if time.Now().After(deadline) {
			t.Fatalf("the busy node claimed %d of the silent node's 16 items in 3 s, while the load lasted; want all", n.Stats().Claimed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := rs.Do(t, "XPENDING", "streamer:items", "nodes", "-", "+", "100", "dead"); got != "" {
		t.Errorf("XPENDING for the dead node says %q after the claims; want nothing", got)
	}
	if d := fe.Duplicates(); d != 0 {
		t.Errorf("the front end dropped %d duplicate answers; want none", d)
	}
}

// TestASecondStartIsRefused: a front end or a node started twice, or after
// its Close or Shutdown, refuses with supervisor's errors for a Streamer
// alike, rather than run its loops twice (a front end's second set closed
// a closed channel at Close) or over a closed client.
func TestASecondStartIsRefused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := startNode(t, rs, newRecorder(), 4, nil)
	fe := startFront(t, rs, nil)
	if err := n.Start(ctx); !errors.Is(err, supervisor.ErrStarted) {
		t.Errorf("a node's second Start: %v; want ErrStarted", err)
	}
	if err := fe.Start(ctx); !errors.Is(err, supervisor.ErrStarted) {
		t.Errorf("a front end's second Start: %v; want ErrStarted", err)
	}
	eventually(t, "front end ready", fe.Ready)
	if out, err := predict(t, fe, "x"); err != nil || string(out[0]) != "x" {
		t.Errorf("a request after the second Starts: %q, %v; want its answer", out, err)
	}
	if err := fe.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := fe.Start(ctx); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Errorf("a front end's Start after Close: %v; want ErrShuttingDown", err)
	}
	if err := n.Start(ctx); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Errorf("a node's Start after Shutdown: %v; want ErrShuttingDown", err)
	}
}

// Items that Redis gave a node in a read whose answer the node never got
// (its connection closed under the read, or the read ran out of time as
// the node stalled) are pending to it in Redis, unknown to it: the node
// takes them as soon as it reads again, rather than leave them for a
// claim --claim-idle later.
func TestItemsOfAReadLostOnItsWayAreTakenAtOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["held"] = true
	node := startNode(t, rs, rec, 1, func(c *broker.NodeConfig) {
		c.Capacity = 1            // holding one item, the node reads none
		c.ClaimIdle = time.Minute // no claim answers within the test
	})
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	held := predictLater(t, fe, "held")
	eventually(t, "the node runs the held item", func() bool { return rec.runs("held") == 1 })
	lost := predictLater(t, fe, "lost")
	eventually(t, "the second item on the stream", func() bool { return rs.Do(t, "XLEN", "streamer:items") == "2" })
	// Redis gives it to the node, whose answer is lost on the way.
	if got := rs.Do(t, "XREADGROUP", "GROUP", "nodes", node.Name(), "COUNT", "1", "STREAMS", "streamer:items", ">"); !strings.Contains(got, "lost") {
		t.Fatalf("XREADGROUP for the node: %q; want the second item", got)
	}
	close(rec.release)
	answerWithin(t, held, 10*time.Second, "the held item unanswered 10s after its release")
	// The node reads again, blocked: its connection closes under the read.
	eventually(t, "the node's read cut", func() bool {
		for line := range strings.Lines(rs.Do(t, "CLIENT", "LIST")) {
			if strings.Contains(line, "cmd=xreadgroup") && strings.Contains(line, "flags=b") {
				id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
				_, err := rs.DoErr(context.Background(), "CLIENT", "KILL", "ID", id)
				return err == nil
			}
		}
		return false
	})
	if a := answerWithin(t, lost, 10*time.Second, "the item of the lost read unanswered 10s after the read failed (a claim would take a minute)"); a.err != nil || string(a.out[0]) != "lost" {
		t.Errorf("the item of the lost read: %q, %v; want its answer", a.out, a.err)
	}
	if n := rec.runs("lost"); n != 1 {
		t.Errorf("the item of the lost read ran %d times; want once", n)
	}
}

// A node of a --claim-idle longer than the default keeps the items it
// holds from claims at the default's pace too: a node of the default does
// not take its live items (which would run twice).
func TestANodeOfALongClaimIdleKeepsItsItemsFromANodeOfTheDefault(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["long"] = true
	startNode(t, rs, rec, 1, func(c *broker.NodeConfig) { c.ClaimIdle = time.Hour })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	long := predictLater(t, fe, "long")
	eventually(t, "the first node runs the item", func() bool { return rec.runs("long") == 1 })
	other := startNode(t, rs, newRecorder(), 1, func(c *broker.NodeConfig) { c.ClaimIdle = broker.DefaultClaimIdle })
	// Past the other's claim idle, the item still running on the first.
	<-time.After(broker.DefaultClaimIdle + 2*time.Second)
	if c := other.Stats().Claimed; c != 0 {
		t.Errorf("the node of the default claimed %d items of the live node; want none", c)
	}
	close(rec.release)
	if a := answerWithin(t, long, 10*time.Second, "the long item unanswered 10s after its release"); a.err != nil || string(a.out[0]) != "long" {
		t.Errorf("the long item: %q, %v; want its answer", a.out, a.err)
	}
}

// TestAClaimIsLateByTheFreezeItWaitedIn: a claim sent as Redis freezes is
// run as the freeze ends, and found late by about as long, on Redis's
// clock; one sent to a Redis that serves is not.
func TestAClaimIsLateByTheFreezeItWaitedIn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, nil)
	if late, err := broker.AutoClaimLate(n); err != nil || late > 400*time.Millisecond {
		t.Errorf("a claim to a Redis that serves: late by %v, %v; want far less than a freeze", late, err)
	}
	rs.Do(t, "CLIENT", "PAUSE", "1000", "ALL")
	if late, err := broker.AutoClaimLate(n); err != nil || late < 900*time.Millisecond {
		t.Errorf("a claim sent as Redis froze for 1s: late by %v, %v; want about 1s", late, err)
	}
}

// TestALargeItemIsClaimedThoughItsAnswerIsLongToCome: a claim is judged
// late by when Redis ran it, not by how long its answer took: a silent
// node's item of 1.8 MB over a link of 2 MB/s takes 0.9 s to come, and a
// claim judged by its round trip took nothing, each time, for ever (the
// item was made new at each try, and claimed again ClaimIdle later).
func TestALargeItemIsClaimedThoughItsAnswerIsLongToCome(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	const size = 18 << 20 / 10
	later := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		out, err := fe.Predict(ctx, [][]byte{bytes.Repeat([]byte{'a'}, size)})
		later <- answer{out, err}
	}()
	onStream(t, rs, 1, "the item on the stream")
	rs.Do(t, "XREADGROUP", "GROUP", "nodes", "dead", "COUNT", "1", "STREAMS", "streamer:items", ">")
	proxy := redistest.StartProxy(t, rs)
	proxy.Throttle(2 << 20)
	rec := newRecorder()
	n := startNode(t, rs, rec, 1, func(c *broker.NodeConfig) { c.URL = proxy.URL(); c.ClaimIdle = 2 * time.Second })
	if a := answerWithin(t, later, 30*time.Second, "the silent node's large item was never answered"); a.err != nil || len(a.out) != 1 || len(a.out[0]) != size {
		t.Fatalf("the large item: %d outputs, %v; want it back", len(a.out), a.err)
	}
	if c := n.Stats().Claimed; c != 1 {
		t.Errorf("the node claimed %d items; want the silent node's one", c)
	}
}

// TestItemsTooLargeToReadInTimeAreTakenFewAtATime: a node's read of items
// too large to come within a read's bound over its link (four of 1.2 MiB,
// 4.8 MiB at 2 MiB/s, against 2 s) runs out of time after Redis handed them
// to it; its look for them asks for fewer, down to one at a time (0.6 s,
// room for a busy machine's slower link), and takes them. Before, the look
// asked for as many, ran out of time too, for
// ever, and made the items new to Redis each time, so that no other node
// claimed them either.
func TestItemsTooLargeToReadInTimeAreTakenFewAtATime(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	proxy := redistest.StartProxy(t, rs)
	sizes := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = []byte(strconv.Itoa(len(it)))
		}
		return out, nil
	})
	startNode(t, rs, sizes, 4, func(c *broker.NodeConfig) {
		c.URL = proxy.URL()
		c.ClaimIdle = time.Minute // no claim answers within the test
	})
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	proxy.Throttle(2 << 20)
	const size = 12 << 20 / 10
	// Each look that runs out of time costs its bound, and a busy machine
	// slows the proxy's link: room for many.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	items := make([][]byte, 4)
	for i := range items {
		items[i] = bytes.Repeat([]byte{'a' + byte(i)}, size)
	}
	out, err := fe.Predict(ctx, items)
	if err != nil || len(out) != 4 || slices.ContainsFunc(out, func(o []byte) bool { return string(o) != strconv.Itoa(size) }) {
		t.Fatalf("four items of %d bytes: %q, %v; want their sizes", size, out, err)
	}
}

// TestALiveNodesStreamIsSweptByAFewNodesNotAll: in a fleet of five live
// nodes, each node looks at the shared stream for items to claim, and at
// its own; a live node's own stream is looked at by its node and
// broker's few sweepers, not by every node: an idle fleet's claims grow
// with its nodes, not with their square. (Read from Redis's MONITOR: the
// consumer that each XAUTOCLAIM names.)
func TestALiveNodesStreamIsSweptByAFewNodesNotAll(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	const count = 5
	names := map[string]bool{}
	for range count {
		names[startNode(t, rs, newRecorder(), 4, nil).Name()] = true
	}
	eventually(t, "every node to be listed live", func() bool { return rs.Do(t, "ZCARD", "streamer:nodes") == strconv.Itoa(count) })

	// Each command Redis runs, a line.
	read := rs.Monitor(t)
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		for read.Scan() {
			lines <- read.Text()
		}
	}()

	claims := map[string]map[string]int{} // stream: each node's claims on it
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for !cond() {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatal("MONITOR's connection closed")
				}
				// +1700000000.123456 [0 127.0.0.1:5000] "XAUTOCLAIM" "stream" "group" "consumer" ...
				fields := strings.Fields(line)
				if len(fields) < 7 || !strings.EqualFold(strings.Trim(fields[3], `"`), "XAUTOCLAIM") {
					continue
				}
				stream, consumer := strings.Trim(fields[4], `"`), strings.Trim(fields[6], `"`)
				if claims[stream] == nil {
					claims[stream] = map[string]int{}
				}
				claims[stream][consumer]++
			case <-deadline:
				t.Fatalf("after 30s, claims seen %v; want %s", claims, what)
			}
		}
	}
	until("every node's on the shared stream and on its own", func() bool {
		for name := range names {
			if claims["streamer:items"][name] == 0 || claims["streamer:items:"+name][name] == 0 {
				return false
			}
		}
		return true
	})
	// Two passes more begun by each node: one whole pass seen since.
	begun := maps.Clone(claims["streamer:items"])
	until("two passes more of every node", func() bool {
		for name := range names {
			if claims["streamer:items"][name] < begun[name]+2 {
				return false
			}
		}
		return true
	})
	for name := range names {
		by := claims["streamer:items:"+name]
		if len(by) > 1+broker.Sweepers {
			t.Errorf("the stream of live node %s was looked at by %d nodes (%v); want its own and at most %d others", name, len(by), slices.Sorted(maps.Keys(by)), broker.Sweepers)
		}
	}
}
