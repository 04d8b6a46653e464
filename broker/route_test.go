package broker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
)

// handNode plays a node by hand, with its own stream listed for front ends
// to route to: it reads from the shared stream or its own, and answers or
// sits on what it read.
type handNode struct {
	t    *testing.T
	rdb  *redis.Client
	name string
}

func newHandNode(t *testing.T, rs *redistest.Server, name string) *handNode {
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &handNode{t: t, rdb: rdb, name: name}
	h.beat(time.Hour)
	for _, key := range []string{"streamer:items", h.stream()} {
		if err := rdb.XGroupCreateMkStream(context.Background(), key, "nodes", "0").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			t.Fatal(err)
		}
	}
	if err := rdb.SAdd(context.Background(), "streamer:streams", h.stream()).Err(); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *handNode) stream() string { return "streamer:items:" + h.name }

// beat says the node was alive at now + ahead.
func (h *handNode) beat(ahead time.Duration) {
	at := strconv.FormatInt(time.Now().Add(ahead).UnixMilli(), 10)
	if err := h.rdb.Do(context.Background(), "ZADD", "streamer:nodes", at, h.name).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// read takes the next item of stream, as this node.
func (h *handNode) read(stream string) redis.XMessage {
	h.t.Helper()
	got, err := h.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: "nodes", Consumer: h.name, Streams: []string{stream, ">"}, Count: 1, Block: 5 * time.Second,
	}).Result()
	if err != nil || len(got) != 1 || len(got[0].Messages) != 1 {
		h.t.Fatalf("read %s: %v, %v", stream, got, err)
	}
	return got[0].Messages[0]
}

// answer answers m, read from stream, with output, as a node does.
func (h *handNode) answer(stream string, m redis.XMessage, output string) {
	h.t.Helper()
	ctx := context.Background()
	// The header: front end, request number, place, deadline, reply TTL.
	header := strings.Fields(m.Values["h"].(string))
	if len(header) != 5 {
		h.t.Fatalf("item %s: header %q; want five fields", m.ID, m.Values["h"])
	}
	reply := "streamer:reply:" + header[0]
	pipe := h.rdb.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: reply, Values: []any{"q", header[1], "i", header[2], "n", h.name, "o", output}})
	pipe.XAck(ctx, stream, "nodes", m.ID)
	pipe.XDel(ctx, stream, m.ID)
	if _, err := pipe.Exec(ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *handNode) xlen(stream string) int64 {
	n, err := h.rdb.XLen(context.Background(), stream).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// answeredOnceBy starts a Redis, a front end and a node played by hand,
// named name, which answers the front end's first caller from the shared
// stream.
func answeredOnceBy(t *testing.T, name string) (*redistest.Server, *handNode, *broker.FrontEnd) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	h := newHandNode(t, rs, name)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	first := predictLater(t, fe, "first")
	h.answer("streamer:items", h.read("streamer:items"), "first done")
	if a := <-first; a.err != nil || string(a.out[0]) != "first done" {
		t.Fatalf("first: %q, %v", a.out, a.err)
	}
	return rs, h, fe
}

// comesBack sends item as the caller that h has just answered, and returns
// once the request is on h's own stream. A caller counts as coming back
// only within a few milliseconds of its answer, which a loaded machine may
// miss: a request that came too late, to the shared stream, h answers
// there, and the caller comes back again.
func comesBack(t *testing.T, fe *broker.FrontEnd, h *handNode, item string) <-chan answer {
	t.Helper()
	for range 20 {
		later := predictLater(t, fe, item)
		shared := false
		eventually(t, item+" on a stream", func() bool {
			if h.xlen(h.stream()) == 1 {
				return true
			}
			shared = h.xlen("streamer:items") == 1
			return shared
		})
		if !shared {
			return later
		}
		h.answer("streamer:items", h.read("streamer:items"), item)
		if a := <-later; a.err != nil {
			t.Fatalf("%s, answered from the shared stream: %v", item, a.err)
		}
	}
	t.Fatalf("20 times, %s came back too late to be routed to the node that answered it", item)
	return nil
}

// A caller that a node answered comes back to that node's own stream; a
// node with nothing to do takes it from there when its node leaves it
// waiting, and answers it.
func TestAReturningCallerGoesToItsNodeAndAnIdleNodeTakesItIfLeft(t *testing.T) {
	rs, busy, fe := answeredOnceBy(t, "busy")
	// The same caller comes back: its request goes to the node that
	// answered it, which leaves it there.
	second := comesBack(t, fe, busy, "second")
	if n := busy.xlen("streamer:items"); n != 0 {
		t.Fatalf("%d items on the shared stream; want the request on the node's own", n)
	}
	// A node with an idle worker takes it once it has had nothing else to
	// do for a moment.
	idle := newRecorder()
	b := startNode(t, rs, idle, 4, nil)
	if a := <-second; a.err != nil || string(a.out[0]) != "second" {
		t.Fatalf("second: %q, %v; want it answered by the idle node", a.out, a.err)
	}
	if idle.runs("second") != 1 {
		t.Errorf("the idle node ran it %d times; want once", idle.runs("second"))
	}
	// The node counts its answer once Redis has taken it, which the front
	// end may see first.
	eventually(t, "the idle node's answer counted", func() bool { return b.Stats().Answered == 1 })
	if n := busy.xlen(busy.stream()); n != 0 {
		t.Errorf("%d items left on the busy node's stream", n)
	}
}

// A node that is gone (killed, or left) may leave items on its own stream,
// read and unanswered: another node claims them after ClaimIdle, answers
// them, and deletes the stream and its listing once it is empty.
func TestAGoneNodesOwnStreamIsAdoptedThenDropped(t *testing.T) {
	rs, gone, fe := answeredOnceBy(t, "gone")
	second := comesBack(t, fe, gone, "second")
	gone.read(gone.stream()) // and never answers
	if err := gone.rdb.ZRem(context.Background(), "streamer:nodes", gone.name).Err(); err != nil {
		t.Fatal(err)
	}
	other := newRecorder()
	b := startNode(t, rs, other, 4, nil)
	if a := <-second; a.err != nil || string(a.out[0]) != "second" {
		t.Fatalf("second: %q, %v; want it answered by the node that adopted it", a.out, a.err)
	}
	if other.runs("second") != 1 || b.Stats().Claimed != 1 {
		t.Errorf("the other node ran it %d times and claimed %d; want 1 and 1", other.runs("second"), b.Stats().Claimed)
	}
	eventually(t, "the gone node's stream deleted and unlisted", func() bool {
		return rs.Do(t, "EXISTS", gone.stream()) == "0" && rs.Do(t, "SISMEMBER", "streamer:streams", gone.stream()) == "0"
	})
}

// readAny takes the next item of the shared stream or of the node's own,
// and says which it came from.
func (h *handNode) readAny() (string, redis.XMessage) {
	h.t.Helper()
	got, err := h.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: "nodes", Consumer: h.name, Streams: []string{"streamer:items", h.stream(), ">", ">"}, Count: 1, Block: 5 * time.Second,
	}).Result()
	for _, st := range got {
		if len(st.Messages) == 1 {
			return st.Stream, st.Messages[0]
		}
	}
	h.t.Fatalf("read: %v, %v", got, err)
	return "", redis.XMessage{}
}

// TestLargeAnswersAreTrimmedOnceRead: answers the front end has read are
// trimmed from its reply stream once they add up to a MiB, not only each
// second: a second of large answers held most of Redis's memory after
// their callers had them.
func TestLargeAnswersAreTrimmedOnceRead(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	h := newHandNode(t, rs, "hand")
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	output := strings.Repeat("x", 300<<10)
	reply := ""
	for i := range 30 {
		got := predictLater(t, fe, "item")
		stream, m := h.readAny()
		reply = "streamer:reply:" + strings.Fields(m.Values["h"].(string))[0]
		h.answer(stream, m, output)
		if a := <-got; a.err != nil || len(a.out) != 1 || len(a.out[0]) != len(output) {
			t.Fatalf("request %d: %d outputs, %v", i, len(a.out), a.err)
		}
	}
	// Each trim comes once four answers of 300 KiB are read: what is left
	// is what came since the last.
	if n := h.xlen(reply); n > 4 {
		t.Errorf("%d answers of 300 KiB left on the reply stream once read; want at most 4", n)
	}
}

// TestReadsShrinkWhenRedisClosesLargeAnswers: Redis closes a client whose
// answer passes its client-output-buffer-limit. A node's read of many
// large items, or a front end's of many large answers, asked again as it
// was, was closed again, for ever, and every request timed out. A read
// closed under it now asks for fewer, as one that ran out of time does.
func TestReadsShrinkWhenRedisClosesLargeAnswers(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.ConfigSet(context.Background(), "client-output-buffer-limit", "normal 256kb 128kb 1").Err(); err != nil {
		t.Fatal(err)
	}
	startNode(t, rs, newRecorder(), 8, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	item := strings.Repeat("x", 100<<10)
	var got []<-chan answer
	for range 8 {
		got = append(got, predictLater(t, fe, item, item))
	}
	for i, later := range got {
		if a := <-later; a.err != nil || len(a.out) != 2 || string(a.out[0]) != item || string(a.out[1]) != item {
			t.Errorf("request %d: %d outputs, %v", i, len(a.out), a.err)
		}
	}
}
