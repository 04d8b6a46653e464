package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
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
	n, err := broker.NewNode(broker.NodeConfig{
		Config:   broker.Config{URL: rs.URL(), Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		Streamer: startStreamer(t, supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4}),
		Name:     "twin",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = n.Start(ctx)
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
	read := node.Stats().Read
	later := predictLater(t, fe, "meanwhile")
	// On the shared stream, or the node's own (its caller was answered by
	// it just before).
	eventually(t, "the request admitted", func() bool {
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
