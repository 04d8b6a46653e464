package broker_test

// Tests of front ends and nodes whose Redis holds, under their prefix,
// keys of another type than theirs: written by hand, or by another
// program that shares the Redis.

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/supervisor"
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

// TestANodesOwnStreamOfAnotherTypeIsReplaced: a node's own stream, which
// only it reads, replaced by a key of another type stopped the node for
// good (it reads both streams in one command, which failed), while it beat
// as alive: with no other node, every caller waited for its deadline. The
// node now replaces the key with a new stream, saying what the key held,
// and serves on; should Redis refuse the replacement, it reads the shared
// stream alone, its own off the list front ends route by, until it may.
func TestANodesOwnStreamOfAnotherTypeIsReplaced(t *testing.T) {
	for _, refused := range []bool{false, true} {
		name := "replaced"
		if refused {
			name = "redis refuses the replacement for a while"
		}
		t.Run(name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			url := rs.URL()
			if refused {
				// The node's user may run no script: it may not replace
				// the key in one step.
				rs.Do(t, "ACL", "SETUSER", "node", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval")
				url = "redis://node:pw@" + rs.Addr() + "/0"
			}
			var logs syncbuf.Buffer
			n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) {
				c.URL = url
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			fe := startFront(t, rs, nil)
			eventually(t, "front end ready", fe.Ready)
			answersEventually(t, fe, "before", "a first answer")
			own := "streamer:items:" + n.Name()
			if rs.Do(t, "SISMEMBER", "streamer:streams", own) != "1" {
				t.Fatalf("the node's own stream %s is not listed", own)
			}
			rs.Do(t, "EVAL", "redis.call('DEL', KEYS[1]); return redis.call('HSET', KEYS[1], 'zz', 'b')", "1", own)
			if refused {
				eventually(t, "the node's own stream taken off the list", func() bool { return rs.Do(t, "SISMEMBER", "streamer:streams", own) == "0" })
			} else {
				eventually(t, "the node's own stream replaced by a stream", func() bool { return rs.Do(t, "TYPE", own) == "stream" })
			}
			for i := range 20 {
				item := "item" + strconv.Itoa(i)
				if out, err := predict(t, fe, item); err != nil || string(out[0]) != item {
					t.Fatalf("request %d after the node's own stream was replaced by a hash: %q, %v; want its input back", i, out, err)
				}
			}
			if refused {
				if got := logLines(logs.String(), "ERROR", "the node's own stream holds another type than a stream, and redis refuses to replace it: the node reads the shared stream alone, and front ends route it no callers, until it is mended (delete the key)"); got != 1 {
					t.Errorf("%d errors say the node could not replace its stream; want one:\n%s", got, logs.String())
				}
				rs.Do(t, "ACL", "SETUSER", "node", "+evalsha", "+eval")
				eventually(t, "the node's own stream replaced once redis lets it", func() bool { return rs.Do(t, "TYPE", own) == "stream" })
				eventually(t, "the node's own stream listed again", func() bool { return rs.Do(t, "SISMEMBER", "streamer:streams", own) == "1" })
				answersEventually(t, fe, "after", "an answer once the stream is mended")
			}
			replaced := ""
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, "level=ERROR") && strings.Contains(line, "the node's own stream held another type than a stream: replaced by a new stream") {
					replaced = line
				}
			}
			if !strings.Contains(replaced, `held="a hash of 1 field: \"zz\" \"b\""`) {
				t.Errorf("the log's line of the replacement: %q; want it saying what the key held:\n%s", replaced, logs.String())
			}
		})
	}
}

// TestASharedStreamOfAnotherTypeStopsTheNodesAndSaysWhy: the shared
// stream, which front ends write and nodes read, of another type is left
// to an operator: front ends refuse requests at once naming the key, and
// nodes take no items, saying why, and count as no node, until it is a
// stream again; then they serve by themselves.
func TestASharedStreamOfAnotherTypeStopsTheNodesAndSaysWhy(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	answersEventually(t, fe, "before", "a first answer")
	rs.Do(t, "EVAL", "redis.call('DEL', KEYS[1]); return redis.call('HSET', KEYS[1], 'zz', 'b')", "1", "streamer:items")
	const why = "streamer:items holds a hash, where streamer keeps"
	eventually(t, "the node saying why it takes no items", func() bool {
		err := n.NotReady()
		return err != nil && errors.Is(err, supervisor.ErrUnavailable) && strings.Contains(err.Error(), why) && strings.Contains(n.Stats().Refused, why)
	})
	eventually(t, "the node listed as neither alive nor leaving", func() bool {
		return rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()) == "" && rs.Do(t, "ZSCORE", "streamer:leaving", n.Name()) == ""
	})
	eventually(t, "the front end's readiness naming the key", func() bool {
		err := fe.NotReady()
		return err != nil && strings.Contains(err.Error(), why)
	})
	began := time.Now()
	if _, err := predict(t, fe, "refused"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), why) || time.Since(began) > time.Second {
		t.Errorf("a request while the shared stream is a hash: %v after %s; want ErrUnavailable at once, naming the key", err, time.Since(began).Round(time.Millisecond))
	}
	rs.Do(t, "DEL", "streamer:items")
	answersEventually(t, fe, "after", "an answer once the key is deleted")
	if err := n.NotReady(); err != nil || n.Stats().Refused != "" {
		t.Errorf("the node once it serves again: %v, refused %q; want it ready", err, n.Stats().Refused)
	}
}

// TestAGoneNodesStreamOfAnotherTypeIsDropped: the own stream of a node
// that is gone, of another type, which no node replaces, is deleted and
// unlisted as an empty one is: the nodes' reads of each other's streams,
// several in one command, failed for it, for ever.
func TestAGoneNodesStreamOfAnotherTypeIsDropped(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var logs syncbuf.Buffer
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	const ghost = "streamer:items:ghost"
	rs.Do(t, "HSET", ghost, "zz", "b")
	rs.Do(t, "SADD", "streamer:streams", ghost)
	eventually(t, "the gone node's key deleted and unlisted", func() bool {
		return rs.Do(t, "EXISTS", ghost) == "0" && rs.Do(t, "SISMEMBER", "streamer:streams", ghost) == "0"
	})
	if got := logLines(logs.String(), "ERROR", "the own stream of a node gone held another type than a stream: deleted it, and what it held"); got != 1 {
		t.Errorf("%d errors say the key was deleted; want one:\n%s", got, logs.String())
	}
}
