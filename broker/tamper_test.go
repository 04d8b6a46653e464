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

// lastLogLine is the last line of logs that contains text, or "".
func lastLogLine(logs, text string) string {
	var last string
	for line := range strings.Lines(logs) {
		if strings.Contains(line, text) {
			last = line
		}
	}
	return last
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

// replaceWithHash, a script run on one key, makes it a hash of one field
// "zz", whatever it held.
const replaceWithHash = "redis.call('DEL', KEYS[1]); return redis.call('HSET', KEYS[1], 'zz', 'b')"

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
			rs.Do(t, "EVAL", replaceWithHash, "1", own)
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
			replaced := lastLogLine(logs.String(), "the node's own stream held another type than a stream: replaced by a new stream")
			if !strings.Contains(replaced, "level=ERROR") || !strings.Contains(replaced, `held="a hash of 1 field: \"zz\" \"b\""`) {
				t.Errorf("the log's line of the replacement: %q; want it saying what the key held:\n%s", replaced, logs.String())
			}
			// The read blocked on the stream as it went was ended with
			// UNBLOCKED: the key's doing, not an outage of Redis.
			if strings.Contains(logs.String(), "redis does not serve this node") {
				t.Errorf("the node took its stream's replacement for an outage:\n%s", logs.String())
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
	rs.Do(t, "EVAL", replaceWithHash, "1", "streamer:items")
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
	const deleted = "the own stream of a node gone held another type than a stream: deleted it, and what it held"
	// The node logs the deletion once Redis has told it of it: after the
	// key is gone.
	eventually(t, "the gone node's key deleted and unlisted, and that logged", func() bool {
		return rs.Do(t, "EXISTS", ghost) == "0" && rs.Do(t, "SISMEMBER", "streamer:streams", ghost) == "0" && logLines(logs.String(), "ERROR", deleted) > 0
	})
	if got := logLines(logs.String(), "ERROR", deleted); got != 1 {
		t.Errorf("%d errors say the key was deleted; want one:\n%s", got, logs.String())
	}
}

// TestAdmissionsRedisFailsAreLoggedAndNotReady: admissions that Redis
// failed (of a third of the requests, under load, when it was the list of
// the nodes' streams that was of another type) left the front end ready,
// logging nothing. It now logs the failure, at once and then now and
// then, naming the key, and is not ready until an admission goes through;
// then it is ready by itself.
func TestAdmissionsRedisFailsAreLoggedAndNotReady(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	eventually(t, "front end ready", fe.Ready)
	answersEventually(t, fe, "before", "a first answer")
	rs.Do(t, "EVAL", replaceWithHash, "1", "streamer:items")
	const why = "streamer:items holds a hash, where streamer keeps a stream"
	for i := range 50 {
		if _, err := predict(t, fe, "item"+strconv.Itoa(i)); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), why) {
			t.Fatalf("request %d: %v; want ErrUnavailable naming the key", i, err)
		}
	}
	if err := fe.NotReady(); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("the front end's readiness: %v; want not ready, naming the key", err)
	}
	const msg = "redis fails this front end's admissions of requests: it is not ready, and the requests whose admission meets the fault get 503, until an admission goes through"
	if got := logLines(logs.String(), "ERROR", msg); got < 1 || got > 2 {
		t.Errorf("%d errors logged for 50 failed admissions; want one (two on a slow machine: one every 5 s):\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), why) {
		t.Errorf("the log does not name the key:\n%s", logs.String())
	}
	rs.Do(t, "DEL", "streamer:items")
	eventually(t, "the front end ready once the key is deleted", fe.Ready)
	for i := range 10 {
		if _, err := predict(t, fe, "after"+strconv.Itoa(i)); err != nil {
			t.Fatalf("request %d once the key is deleted: %v", i, err)
		}
	}
}

// TestTheListOfNodeStreamsOfAnotherTypeIsReplaced: the list of the nodes'
// own streams, which an admission routed to a node reads, of another type
// failed those admissions (a third of the requests, under load) until an
// operator deleted it. Such a request now goes to the shared stream, and
// the front end's check replaces the key, saying what it held; the node
// lists its stream again, and callers are routed back to it.
func TestTheListOfNodeStreamsOfAnotherTypeIsReplaced(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, nil)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	eventually(t, "front end ready", fe.Ready)
	answersEventually(t, fe, "before", "a first answer")
	rs.Do(t, "EVAL", replaceWithHash, "1", "streamer:streams")
	for i := range 50 {
		// Each comes back to the node that answered the last: routed.
		item := "item" + strconv.Itoa(i)
		if out, err := predict(t, fe, item); err != nil || string(out[0]) != item {
			t.Fatalf("request %d while the list of the nodes' streams is a hash: %q, %v; want its input back", i, out, err)
		}
	}
	own := "streamer:items:" + n.Name()
	eventually(t, "the list replaced, with the node's own stream on it", func() bool {
		return rs.Do(t, "TYPE", "streamer:streams") == "set" && rs.Do(t, "SISMEMBER", "streamer:streams", own) == "1"
	})
	line := lastLogLine(logs.String(), "the list of the nodes' own streams held another type")
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, `held="a hash of 1 field: \"zz\" \"b\""`) {
		t.Errorf("the log's line of the list's key: %q; want an error saying what the key held:\n%s", line, logs.String())
	}
	if err := fe.NotReady(); err != nil {
		t.Errorf("the front end once the list is replaced: %v; want it ready", err)
	}
}

// TestTheRoomKeptOfAnotherTypeIsReplaced: every admission reads the room
// kept in the backlog and the mean size of the requests admitted of late;
// either key of another type failed them all. The front end's keys to
// keep (the room expires within a second, and is kept again at the next
// try of a large request; the mean is set again by the next admission),
// the key is deleted, saying what it held, and requests are served again
// at once.
func TestTheRoomKeptOfAnotherTypeIsReplaced(t *testing.T) {
	for _, c := range []struct{ key, line string }{
		{"streamer:room", "the key of the room kept in the backlog held another type"},
		{"streamer:sizes", "the key of the mean size of the requests admitted of late held another type"},
	} {
		t.Run(c.key, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			startNode(t, rs, newRecorder(), 4, nil)
			var logs syncbuf.Buffer
			fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
			eventually(t, "front end ready", fe.Ready)
			rs.Do(t, "SADD", c.key, "x")
			// The first admission that fails has the front end's next
			// check look, within a quarter second.
			began := time.Now()
			answersEventually(t, fe, "after", "an answer once the key is deleted")
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("requests were served again %s after the key was made a set; want within a check or two", took.Round(time.Millisecond))
			}
			if typ := rs.Do(t, "TYPE", c.key); typ == "set" {
				t.Errorf("%s is a %s once requests are served", c.key, typ)
			}
			eventually(t, "the front end ready", fe.Ready)
			line := lastLogLine(logs.String(), c.line)
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, `held="a set of 1 member: \"x\""`) {
				t.Errorf("the log's line of %s: %q; want an error saying what the key held:\n%s", c.key, line, logs.String())
			}
		})
	}
}

// TestItemsWrittenByHandMakeNoReplyStreamsOfTheirOwn: an item's header
// names where its answer goes, and for how long it stays: one written by
// hand made a reply stream of any name (PREFIX:reply:garbage), kept as
// long as it asked (years). A node now answers only front ends' ids of
// the form front ends write, and keeps an answer at most MaxReplyTTL.
func TestItemsWrittenByHandMakeNoReplyStreamsOfTheirOwn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	startNode(t, rs, rec, 4, nil)
	for _, h := range []string{"garbage", "deadbeef2 1 0 0 999999999999999", nobody + " 1 0 0 999999999999999"} {
		rs.Do(t, "XADD", "streamer:items", "*", "h", h, "v", "x")
	}
	eventually(t, "the items taken", func() bool { return rs.Do(t, "XLEN", "streamer:items") == "0" })
	for _, key := range []string{"streamer:reply:garbage", "streamer:reply:deadbeef2"} {
		if rs.Do(t, "EXISTS", key) != "0" {
			t.Errorf("%s exists; want no reply stream for an id no front end has", key)
		}
	}
	ttl, err := strconv.ParseInt(rs.Do(t, "PTTL", "streamer:reply:"+nobody), 10, 64)
	if err != nil || ttl <= 0 || ttl > broker.MaxReplyTTL.Milliseconds() {
		t.Errorf("the reply stream of an item asking to be kept for years lives %d ms, %v; want at most %s", ttl, err, broker.MaxReplyTTL)
	}
	if got := rec.runs("x"); got != 1 {
		t.Errorf("the model ran %d of the items; want the one whose header reads", got)
	}
}
