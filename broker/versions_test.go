package broker_test

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// The log lines of a mix of versions beginning and ending, and of a front
// end of a version no node runs.
const (
	mixBegins   = "the nodes under this key prefix run more than one version of the model"
	mixEnds     = "the nodes under this key prefix no longer run more than one version of the model"
	otherFronts = "this front end's model is another version than every node's"
)

// TestNodesOfTwoVersionsServeAndAreCounted: two nodes of one model (wire
// and name) but two versions (other weights, other plugin arguments)
// both serve under one prefix, as a rolling upgrade needs, and every
// node and front end counts two versions, warns once as the mix begins,
// naming the versions and their nodes, and says when it ends: the count
// goes back to one once a node leaves, its entry gone with it.
func TestNodesOfTwoVersionsServeAndAreCounted(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	model := func(version string) broker.ModelID {
		return broker.ModelID{Wire: "generic", Name: "recorder", Label: "recorder", Version: version}
	}
	var logsA, logsB, logsFront syncbuf.Buffer
	// Each takes one item at a time, and holds "held" until released: a
	// request that finds one node holding it is run by the other.
	old, upgraded := newRecorder(), newRecorder()
	old.hold["held"], upgraded.hold["held"] = true, true
	startNode(t, rs, old, 1, func(c *broker.NodeConfig) {
		c.Name, c.Model, c.Capacity = "node-a", model("aaaa"), 1
		c.Logger = slog.New(slog.NewTextHandler(&logsA, nil))
	})
	nodeB := startNode(t, rs, upgraded, 1, func(c *broker.NodeConfig) {
		c.Name, c.Model, c.Capacity = "node-b", model("bbbb"), 1
		c.Logger = slog.New(slog.NewTextHandler(&logsB, nil))
	})
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Model = model("aaaa")
		c.Logger = slog.New(slog.NewTextHandler(&logsFront, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	eventually(t, "the front end to count both nodes", func() bool { return fe.FrontEndStats().Nodes == 2 })
	// Both serve: one runs "held", the other the next request.
	held := predictLater(t, fe, "held")
	eventually(t, "a node to run the held item", func() bool { return old.runs("held")+upgraded.runs("held") == 1 })
	if out, err := predict(t, fe, "next"); err != nil || string(out[0]) != "next" {
		t.Fatalf("a request while one node holds an item: %q, %v", out, err)
	}
	close(old.release)
	close(upgraded.release)
	if a := <-held; a.err != nil {
		t.Fatalf("the held item: %v", a.err)
	}
	if len(old.order()) == 0 || len(upgraded.order()) == 0 {
		t.Fatalf("the node of version aaaa ran %q and that of bbbb %q; want both to serve", old.order(), upgraded.order())
	}
	eventually(t, "the front end to count two versions", func() bool { return fe.FrontEndStats().ModelVersions == 2 })
	eventually(t, "the node of bbbb to count two versions", func() bool { return nodeB.Stats().ModelVersions == 2 })
	if st := nodeB.Stats(); st.Refused != "" {
		t.Errorf("the node of bbbb is refused: %s", st.Refused)
	}
	// The front ends warn; nodes count, and say nothing that the front
	// end of their own process would say again.
	eventually(t, "the front end to warn of two versions", func() bool { return strings.Contains(logsFront.String(), mixBegins) })
	line := lastLogLine(logsFront.String(), mixBegins)
	for _, want := range []string{"level=WARN", "count=2", "aaaa (node-a)", "bbbb (node-b)", "rolling upgrade"} {
		if !strings.Contains(line, want) {
			t.Errorf("the front end's warning %q; want it to say %q", line, want)
		}
	}
	if strings.Contains(logsFront.String(), otherFronts) || fe.FrontEndStats().OtherVersion {
		t.Errorf("the front end of aaaa, which node-a runs, says it runs another version:\n%s", logsFront.String())
	}
	// Once, not at every beat or check: wait until node-a has beaten
	// three more times (its entry's time moved on by as much).
	first := entryTime(t, rs, "node-a")
	eventually(t, "node-a to beat three more times", func() bool { return entryTime(t, rs, "node-a") >= first+3000 })
	if n := strings.Count(logsFront.String(), mixBegins); n != 1 {
		t.Errorf("the front end warned %d times of two versions; want once:\n%s", n, logsFront.String())
	}
	for who, logs := range map[string]*syncbuf.Buffer{"node-a": &logsA, "node-b": &logsB} {
		if strings.Contains(logs.String(), mixBegins) {
			t.Errorf("%s warned of two versions, which its front end says:\n%s", who, logs.String())
		}
	}

	if err := nodeB.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := rs.Do(t, "HEXISTS", "streamer:versions", "node-b"); got != "0" {
		t.Errorf("node-b left, and its version's entry is still there (HEXISTS %s)", got)
	}
	eventually(t, "the front end to count one version", func() bool { return fe.FrontEndStats().ModelVersions == 1 })
	eventually(t, "the front end to say the mix ended", func() bool { return strings.Contains(logsFront.String(), mixEnds) })
	if line := lastLogLine(logsFront.String(), mixEnds); !strings.Contains(line, "level=INFO") || !strings.Contains(line, "aaaa (node-a)") {
		t.Errorf("the front end's line %q; want INFO naming the one version left", line)
	}
}

// entryTime is when the named node last wrote its entry in the versions
// key, in Redis's milliseconds.
func entryTime(t *testing.T, rs *redistest.Server, node string) int64 {
	t.Helper()
	ms, _, _ := strings.Cut(rs.Do(t, "HGET", "streamer:versions", node), " ")
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		t.Fatalf("node %s's entry in streamer:versions: %v", node, err)
	}
	return at
}

// TestAFrontEndOfAVersionNoNodeRunsSaysSo: a front end whose model is of
// another version than every node's (another file of the same inputs)
// serves, but warns once, and says so in its stats, while one of no
// version (an embedder's, or a front end without the model's file)
// compares nothing. A node of no version publishes none. The entries of
// nodes silent for 3 s (killed, not gone through Shutdown) are not
// counted, and those silent for 30 s are deleted.
func TestAFrontEndOfAVersionNoNodeRunsSaysSo(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	secs, _, _ := strings.Cut(rs.Do(t, "TIME"), "\n")
	redisNow, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	rs.Do(t, "HSET", "streamer:versions", "silent", strconv.FormatInt((redisNow-10)*1000, 10)+" dddd",
		"gone", strconv.FormatInt((redisNow-60)*1000, 10)+" eeee")
	model := func(version string) broker.ModelID {
		return broker.ModelID{Wire: "generic", Name: "recorder", Version: version}
	}
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Name, c.Model = "node-a", model("aaaa") })
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Name, c.Model = "plain", model("") })
	var logs, plainLogs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Model = model("cccc")
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	plain := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Model = model("")
		c.Logger = slog.New(slog.NewTextHandler(&plainLogs, nil))
	})
	answersEventually(t, fe, "hi", "a request through the front end of another version")
	eventually(t, "the front end to say its version is none of the nodes'", func() bool { return fe.FrontEndStats().OtherVersion })
	eventually(t, "the front end to warn that its version is none of the nodes'", func() bool { return strings.Contains(logs.String(), otherFronts) })
	line := lastLogLine(logs.String(), otherFronts)
	for _, want := range []string{"level=WARN", "front_end=cccc", "aaaa (node-a)", "--model"} {
		if !strings.Contains(line, want) {
			t.Errorf("the warning %q; want it to say %q", line, want)
		}
	}
	eventually(t, "both nodes counted", func() bool { return fe.FrontEndStats().Nodes == 2 && plain.FrontEndStats().Nodes == 2 })
	if st := fe.FrontEndStats(); st.ModelVersions != 1 {
		t.Errorf("the front end counts %d versions; want 1: a node of no version is not counted", st.ModelVersions)
	}
	if got := rs.Do(t, "HEXISTS", "streamer:versions", "plain"); got != "0" {
		t.Errorf("a node of no version has an entry (HEXISTS %s)", got)
	}
	first := entryTime(t, rs, "node-a")
	eventually(t, "node-a to beat twice more", func() bool { return entryTime(t, rs, "node-a") >= first+2000 })
	if st := fe.FrontEndStats(); st.ModelVersions != 1 {
		t.Errorf("the front end counts %d versions; want 1: nodes silent for 3 s are not counted", st.ModelVersions)
	}
	if got := rs.Do(t, "HEXISTS", "streamer:versions", "gone"); got != "0" {
		t.Errorf("the entry of a node silent for a minute is still there (HEXISTS %s)", got)
	}
	if got := rs.Do(t, "HEXISTS", "streamer:versions", "silent"); got != "1" {
		t.Errorf("the entry of a node silent for 10 s is gone (HEXISTS %s); want it kept 30 s", got)
	}
	if n := strings.Count(logs.String(), otherFronts); n != 1 {
		t.Errorf("warned %d times; want once:\n%s", n, logs.String())
	}
	if plain.FrontEndStats().OtherVersion || strings.Contains(plainLogs.String(), otherFronts) {
		t.Errorf("a front end of no version says it is another:\n%s", plainLogs.String())
	}
}
