package broker_test

// Tests of front ends and nodes whose Redis holds, under their prefix,
// keys of another type than theirs: written by hand, or by another
// program that shares the Redis.

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// logLines counts the lines of logs (slog's text) at level whose message
// is msg.
func logLines(logs, level, msg string) int {
	want := "msg=" + msg + " "
	if strings.ContainsAny(msg, " =\"") {
		want = "msg=" + strconv.Quote(msg) + " "
	}
	n := 0
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "level="+level+" ") && strings.Contains(line, want) {
			n++
		}
	}
	return n
}

// commandCalls is how many times Redis ran the command name since its
// statistics were last reset.
func commandCalls(t *testing.T, rs *redistest.Server, name string) int {
	t.Helper()
	for line := range strings.Lines(rs.Do(t, "INFO", "commandstats")) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.Atoi(calls)
			if err != nil {
				t.Fatalf("INFO commandstats: %q", line)
			}
			return n
		}
	}
	return 0
}

// TestAQuarantineOfAnotherTypeIsWarnedOfNowAndThen: a node reads the
// quarantine with every read of items; a key of another type in its
// place is warned of once, not at every read (hundreds of lines a second
// under load), nor asked about again for the items of each read, and the
// node beats and serves on.
func TestAQuarantineOfAnotherTypeIsWarnedOfNowAndThen(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var logs syncbuf.Buffer
	n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	rs.Do(t, "SET", "streamer:poison", "not a sorted set")
	beat := rs.Do(t, "ZSCORE", "streamer:nodes", n.Name())
	rs.Do(t, "CONFIG", "RESETSTAT")
	for i := range 100 {
		item := "item" + strconv.Itoa(i)
		if out, err := predict(t, fe, item); err != nil || string(out[0]) != item {
			t.Fatalf("request %d with the quarantine of another type: %q, %v; want its input back", i, out, err)
		}
	}
	eventually(t, "the node to beat again", func() bool { return rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()) != beat })
	if got := logLines(logs.String(), "WARN", "read the quarantine"); got < 1 || got > 2 {
		t.Errorf("%d warnings of the quarantine for 100 reads; want one (or two, on a slow machine: one every 5 s):\n%s", got, logs.String())
	}
	if calls := commandCalls(t, rs, "zmscore"); calls > 2 {
		t.Errorf("the node asked Redis about the quarantine %d times for 100 reads; want it to ask no more once refused", calls)
	}
	if got := logLines(logs.String(), "WARN", "heartbeat"); got > 0 {
		t.Errorf("the node's heartbeats failed for the quarantine's sake:\n%s", logs.String())
	}
}
