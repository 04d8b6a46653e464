package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// TestTwoLiveNodesMayNotShareAName: a node started under the name of a
// live node (an embedder's fixed NodeConfig.Name, given to two replicas)
// would share its consumer and its own stream, each taking the other's
// items for its own. Its Start fails with ErrNameTaken, naming the name,
// once it has waited the name's lapse out (the live node keeps it); its
// Shutdown leaves the live node listed; once the live node has left, the
// name is free at once.
func TestTwoLiveNodesMayNotShareAName(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	// It beats at its start and events alone: anything the second
	// node's start or shutdown undid of its listing would stay undone.
	live := startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) {
		c.Name = "twin"
		broker.SlowBeats(c, time.Hour)
	})
	answersEventually(t, fe, "first", "a request answered by the live node")

	var logs syncbuf.Buffer
	n := newTwin(t, rs.URL(), echoItems, &logs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := n.Start(ctx)
	if !errors.Is(err, broker.ErrNameTaken) || !strings.Contains(err.Error(), `a node named "twin" beats under the key prefix "streamer"`) || !strings.Contains(err.Error(), "two live nodes must not share a name") {
		t.Fatalf("the second node's start: %v; want ErrNameTaken naming the name", err)
	}
	if !strings.Contains(logs.String(), "waiting for it to lapse") {
		t.Errorf("the second node's start did not wait for the name to lapse:\n%s", logs.String())
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("the second node's shutdown: %v", err)
	}
	if rs.Do(t, "ZSCORE", "streamer:nodes", "twin") == "" {
		t.Error("the live node is no longer listed as alive after the second one's shutdown")
	}
	if got := rs.Do(t, "ZSCORE", "streamer:leaving", "twin"); got != "" {
		t.Errorf("the live node is listed as leaving (%s) after the second one's shutdown", got)
	}
	if st := n.Stats(); st.Read != 0 || st.Claimed != 0 {
		t.Errorf("the second node read %d and claimed %d items; want none", st.Read, st.Claimed)
	}

	// A start given less time than the name takes to lapse ends with its
	// context's error, the node refused and running (it would take the
	// name once lapsed); its shutdown too leaves the live node listed.
	var shortLogs syncbuf.Buffer
	short := newTwin(t, rs.URL(), echoItems, &shortLogs)
	sctx, scancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- short.Start(sctx) }()
	eventually(t, "the short start waiting for the name", func() bool { return strings.Contains(shortLogs.String(), "waiting for it to lapse") })
	scancel()
	err = <-started
	if !errors.Is(err, context.Canceled) || errors.Is(err, broker.ErrNameTaken) {
		t.Errorf("a start cut short while the name is another's: %v; want its context's error", err)
	}
	if !strings.Contains(short.Stats().Refused, "two live nodes must not share a name") {
		t.Errorf("the node whose start was cut short says %q; want it refused for its name", short.Stats().Refused)
	}
	if err := short.Shutdown(ctx); err != nil {
		t.Errorf("the shutdown of the node whose start was cut short: %v", err)
	}
	if rs.Do(t, "ZSCORE", "streamer:nodes", "twin") == "" {
		t.Error("the live node is no longer listed as alive after the shutdown of the node whose start was cut short")
	}

	// A name kept without a time to live was set by hand: no wait frees it.
	rs.Do(t, "SET", "streamer:name:forever", "a-token")
	_, err = startNodeFailing(t, broker.NodeConfig{
		Config:   broker.Config{URL: rs.URL()},
		Streamer: startStreamer(t, supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4}),
		Name:     "forever",
	})
	if !errors.Is(err, broker.ErrNameTaken) || !strings.Contains(err.Error(), "the key streamer:name:forever on redis at "+rs.Addr()+", which keeps the name of the live node named so, has no time to live") {
		t.Errorf("a start under a name kept for ever: %v; want ErrNameTaken naming the key as set by hand", err)
	}

	if err := live.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var after syncbuf.Buffer
	startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) {
		c.Name = "twin"
		c.Logger = slog.New(slog.NewTextHandler(&after, nil))
	})
	if strings.Contains(after.String(), "waiting for it to lapse") {
		t.Errorf("a node started under the name of one that left waited for it:\n%s", after.String())
	}
	answersEventually(t, fe, "third", "a request answered by a node of the name of one that left")
}

// TestANodeStartedAgainUnderItsNameWaitsOutItsPredecessor: the name of a
// node killed outright stays kept for it for a few seconds; a node
// started again under it (a replica of a fixed name, restarted) waits
// that out in its Start, and serves.
func TestANodeStartedAgainUnderItsNameWaitsOutItsPredecessor(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	rs.Do(t, "SET", "streamer:name:phoenix", "the-token-of-a-node-killed", "PX", "1500")
	var logs syncbuf.Buffer
	startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) {
		c.Name = "phoenix"
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if !strings.Contains(logs.String(), "waiting for it to lapse") {
		t.Errorf("the node did not say it waited for its name:\n%s", logs.String())
	}
	if got := rs.Do(t, "GET", "streamer:name:phoenix"); got == "" || got == "the-token-of-a-node-killed" {
		t.Errorf("the name is kept as %q; want the new node's token", got)
	}
	answersEventually(t, fe, "x", "a request answered by the node started again")
}

// TestANodeWhoseNameAnotherKeepsTakesNoItemsUntilItIsItsOwn: a running
// node that finds its name kept by another (one started under it while
// the name had lapsed, the node having stalled) takes no items and says
// why, in its stats and its log, until the other gives the name up and it
// is its own again: a request admitted meanwhile is answered after.
func TestANodeWhoseNameAnotherKeepsTakesNoItemsUntilItIsItsOwn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// The front end admits requests while the node, refused, beats no
	// more: on a busy machine its last beat may be more than a node's
	// silence old by then.
	fakeNode(t, rs)
	fe := startFront(t, rs, nil)
	var logs syncbuf.Buffer
	node := startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) {
		c.Name = "kept"
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	answersEventually(t, fe, "before", "a request answered")
	rs.Do(t, "SET", "streamer:name:kept", "another-nodes-token", "PX", "60000")
	eventually(t, "the node to find its name kept by another", func() bool {
		return strings.Contains(node.Stats().Refused, "two live nodes must not share a name")
	})
	// A blocking read sent before the node found its name taken may yet
	// bring the next item: it is waited out (no new read goes out).
	eventually(t, "the node's blocking read to end", func() bool { return !blockedOn(t, rs, "xreadgroup") })
	read := node.Stats().Read
	later := predictLater(t, fe, "meanwhile")
	// On the shared stream, or the node's own (its caller was answered by
	// it just before).
	eventually(t, "the request admitted", func() bool {
		select {
		case a := <-later:
			t.Fatalf("the request ended before it was admitted: %q, %v", a.out, a.err)
		default:
		}
		return rs.Do(t, "XLEN", "streamer:items") == "1" || rs.Do(t, "XLEN", "streamer:items:kept") == "1"
	})
	rs.Do(t, "DEL", "streamer:name:kept")
	eventually(t, "the name to be the node's own again", func() bool { return node.Stats().Refused == "" })
	if a := <-later; a.err != nil || string(a.out[0]) != "meanwhile" {
		t.Fatalf("a request admitted while the name was another's: %q, %v; want its answer", a.out, a.err)
	}
	if got := node.Stats().Read; got <= read {
		t.Errorf("the node read %d items in all, %d before; want the request's read once its name was its own", got, read)
	}
	for _, want := range []string{"level=ERROR msg=\"this node takes no items\"", "no other live node has this node's name now; it takes items"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
}

// TestANodeStartedWhileRedisWasDownReadsNothingUnderALiveNodesName: a
// node started while it cannot reach Redis has not checked its name when
// Redis comes back; it reads nothing before it has, and so nothing under
// the name of the live node that has it.
func TestANodeStartedWhileRedisWasDownReadsNothingUnderALiveNodesName(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	// One item at a time, held: the requests after it wait unread.
	busy := newRecorder()
	busy.hold["slow"] = true
	startNode(t, rs, busy, 4, func(c *broker.NodeConfig) {
		c.Name = "twin"
		c.Capacity = 1
	})
	answersEventually(t, fe, "first", "a request answered by the live node")
	slow := predictLater(t, fe, "slow")
	eventually(t, "the live node to hold the slow item", func() bool { return busy.runs("slow") == 1 })
	var waiting []<-chan answer
	for _, item := range []string{"a", "b", "c"} {
		waiting = append(waiting, predictLater(t, fe, item))
	}
	// On the shared stream or the node's own, beside the slow one.
	eventually(t, "three requests waiting unread", func() bool {
		shared, _ := strconv.Atoi(rs.Do(t, "XLEN", "streamer:items"))
		own, _ := strconv.Atoi(rs.Do(t, "XLEN", "streamer:items:twin"))
		return shared+own == 4
	})

	other := newRecorder()
	n := twinStartedWhileRedisIsDown(t, rs, other)
	eventually(t, "the node started while Redis was down to find its name taken", func() bool {
		return strings.Contains(n.Stats().Refused, "two live nodes must not share a name")
	})
	if st := n.Stats(); st.Read != 0 || len(other.order()) != 0 {
		t.Errorf("the node of the taken name read %d items and ran %q; want none", st.Read, other.order())
	}
	close(busy.release)
	for i, later := range append(waiting, slow) {
		if a := <-later; a.err != nil {
			t.Errorf("request %d: %v; want its answer from the live node", i, a.err)
		}
	}
	if len(other.order()) != 0 {
		t.Errorf("the node of the taken name ran %q; want nothing", other.order())
	}
}

// TestANodeCutOffFromRedisTakesUpNoItemsOfTheNodeThatTookItsName: a node
// cut off from Redis for longer than its name is kept (a partition, a
// stalled host) finds, once back, its reads failed and another node under
// its name, holding items that are pending to that name too: it takes
// none of them for the items of its own failed reads, which would run
// them twice, and takes items again once the other has left.
func TestANodeCutOffFromRedisTakesUpNoItemsOfTheNodeThatTookItsName(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	p := redistest.StartProxy(t, rs)
	first := newRecorder()
	cutOff := startNodeOn(t, rs, supervisor.Config{InProcess: first, Workers: 1, BatchSize: 4, MaxLatency: time.Millisecond}, func(c *broker.NodeConfig) {
		c.URL = p.URL()
		c.Name = "twin"
	})
	answersEventually(t, fe, "first", "a request answered by the first node")
	p.Refuse(true)
	p.Cut()
	eventually(t, "the cut-off node's name to lapse", func() bool { return rs.Do(t, "EXISTS", "streamer:name:twin") == "0" })
	eventually(t, "a read of the cut-off node to fail", func() bool { return broker.Lost(cutOff) })

	second := newRecorder()
	var held []<-chan answer
	for _, item := range []string{"h0", "h1", "h2", "h3"} {
		second.hold[item] = true
	}
	// A worker for each, so that it holds them all however they batch.
	taker := startNodeOn(t, rs, supervisor.Config{InProcess: second, Workers: 4, BatchSize: 4, MaxLatency: time.Millisecond}, func(c *broker.NodeConfig) {
		c.Name = "twin"
		c.ClaimIdle = time.Minute
	})
	// The cut-off node went silent seconds ago: the front end may have
	// counted no node since, until it has heard the taker.
	eventually(t, "front end ready: the taker heard from", fe.Ready)
	for _, item := range []string{"h0", "h1", "h2", "h3"} {
		held = append(held, predictLater(t, fe, item))
	}
	eventually(t, "the node that took the name to hold the items", func() bool { return taker.Stats().Held == 4 })
	read := cutOff.Stats().Read
	p.Refuse(false)
	// As its read loop would, were it first to reach Redis: the items
	// pending to its name are the other's.
	if err := broker.RecoverLost(cutOff); err != nil {
		t.Fatalf("the cut-off node's look for the items of its failed reads: %v", err)
	}
	// And as its claim would, once the items have been idle past its
	// --claim-idle (the other keeps them a quarter of a minute apart).
	eventually(t, "the held items idle past the cut-off node's claim idle", func() bool {
		return rs.Do(t, "XPENDING", "streamer:items", "nodes", "IDLE", "500", "-", "+", "10") != "" ||
			rs.Do(t, "XPENDING", "streamer:items:twin", "nodes", "IDLE", "500", "-", "+", "10") != ""
	})
	if err := broker.ClaimNow(cutOff); err != nil {
		t.Fatalf("the cut-off node's claim: %v", err)
	}
	eventually(t, "the node cut off to find its name taken", func() bool {
		return strings.Contains(cutOff.Stats().Refused, "two live nodes must not share a name")
	})
	for _, item := range []string{"h0", "h1", "h2", "h3"} {
		if n := first.runs(item); n != 0 {
			t.Errorf("the node cut off ran %s, held by the node that took its name, %d times; want none", item, n)
		}
	}
	if got := cutOff.Stats().Read; got != read {
		t.Errorf("the node cut off read %d items once back; want none", got-read)
	}
	close(second.release)
	for i, later := range held {
		if a := <-later; a.err != nil {
			t.Errorf("held request %d: %v; want its answer", i, a.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := taker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node cut off to have its name again", func() bool { return cutOff.Stats().Refused == "" })
	answersEventually(t, fe, "after", "a request answered once the name is the first node's again")
}

// blockedOn says whether a client of rs is blocked in the command cmd.
func blockedOn(t *testing.T, rs *redistest.Server, cmd string) bool {
	for line := range strings.Lines(rs.Do(t, "CLIENT", "LIST")) {
		fields := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if fields["cmd"] == cmd && strings.Contains(fields["flags"], "b") {
			return true
		}
	}
	return false
}

// TestANodeThatNeverKeptItsNameLeavesTheLiveOnesListingAsItLeaves: a node
// started while Redis could not be reached, under the name of a live node,
// and shut down as soon as Redis answers, before it has kept or checked
// its name, leaves the live node listed and its name its own.
func TestANodeThatNeverKeptItsNameLeavesTheLiveOnesListingAsItLeaves(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// It beats at its start and events alone: what the other's shutdown
	// undid of its listing would stay undone.
	startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) {
		c.Name = "twin"
		broker.SlowBeats(c, time.Hour)
	})
	token := rs.Do(t, "GET", "streamer:name:twin")
	n := twinStartedWhileRedisIsDown(t, rs, echoItems)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("the shutdown: %v", err)
	}
	if rs.Do(t, "ZSCORE", "streamer:nodes", "twin") == "" {
		t.Error("the live node is no longer listed as alive after the other's shutdown")
	}
	if got := rs.Do(t, "GET", "streamer:name:twin"); got != token {
		t.Errorf("the name is kept as %q after the other's shutdown; want the live node's %q", got, token)
	}
}

// newTwin makes, and does not start, a node named "twin" on url running
// m, logging to logs when given; it is shut down when the test ends.
func newTwin(t *testing.T, url string, m model.Model, logs *syncbuf.Buffer) *broker.Node {
	t.Helper()
	cfg := broker.NodeConfig{
		Config:   broker.Config{URL: url},
		Streamer: startStreamer(t, supervisor.Config{InProcess: m, Workers: 1, BatchSize: 4}),
		Name:     "twin",
	}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	n, err := broker.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	return n
}

// twinStartedWhileRedisIsDown starts a node named "twin" running m while a
// proxy in front of rs refuses its connections, then lets them through:
// the node runs, and has neither kept nor checked its name yet.
func twinStartedWhileRedisIsDown(t *testing.T, rs *redistest.Server, m model.Model) *broker.Node {
	t.Helper()
	p := redistest.StartProxy(t, rs)
	p.Refuse(true)
	n := newTwin(t, p.URL(), m, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Fatalf("a start while Redis cannot be reached: %v; want ErrUnavailable", err)
	}
	p.Refuse(false)
	return n
}
