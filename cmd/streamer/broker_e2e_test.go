package main

// End-to-end tests of the many-machine mode: front ends (--workers 0) and
// GPU nodes as real processes on one real redis-server, killed, starved and
// cut off from Redis as machines in a cluster are.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// brokerResult is what one client of brokerLoad saw.
type brokerResult struct {
	item   string
	status int   // 0 when the request failed in transport
	err    error // a transport error, or an answer that is not the documented JSON
	output any   // the one output of a 200
}

// brokerLoadTimeout bounds one request of brokerLoad: each takes well under a
// second, or, when its node died, about --claim-idle more. An item lost in
// Redis shows as a client timeout.
const brokerLoadTimeout = 10 * time.Second

// brokerLoad is clients goroutines sending one-item requests with unique
// items to one server until stopped. A client stops early at its first
// answer other than 200, or transport error: its server is going or gone.
type brokerLoad struct {
	timeout time.Duration // bounds each request
	ok      atomic.Int64  // the 200s so far
	stopped chan struct{}
	stop    func() // stops the clients and waits for them; idempotent

	mu      sync.Mutex
	results []brokerResult
}

// startBrokerLoad starts clients clients sending requests named name-…
// to s, each bounded by timeout (zero: brokerLoadTimeout). The load stops
// when the test ends, at the latest, before the servers do.
func startBrokerLoad(t *testing.T, s *server, name string, clients int, timeout time.Duration) *brokerLoad {
	l := &brokerLoad{timeout: cmp.Or(timeout, brokerLoadTimeout), stopped: make(chan struct{})}
	var wg sync.WaitGroup
	l.stop = sync.OnceFunc(func() {
		close(l.stopped)
		wg.Wait()
	})
	t.Cleanup(l.stop)
	for c := range clients {
		wg.Go(func() {
			for r := 0; ; r++ {
				select {
				case <-l.stopped:
					return
				default:
				}
				if !l.send(s, fmt.Sprintf("%s-c%02d-r%05d", name, c, r)) {
					return
				}
			}
		})
	}
	return l
}

// send sends one request of item and reports whether it was answered 200.
func (l *brokerLoad) send(s *server, item string) bool {
	p, err := predictWithin(s, l.timeout, 0, item)
	res := brokerResult{item: item, status: p.Status, err: err}
	ok := err == nil && p.Status == http.StatusOK
	if ok && len(p.Outputs) == 1 {
		res.output = p.Outputs[0]
	}
	l.mu.Lock()
	l.results = append(l.results, res)
	l.mu.Unlock()
	if ok {
		l.ok.Add(1)
	}
	return ok
}

// all returns every answer so far; once the load is stopped, every answer.
func (l *brokerLoad) all() []brokerResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.results)
}

// TestBrokerKilledNodeAndFrontEndLoseNoAdmittedRequest: two front ends and
// two GPU nodes on one Redis, under load through both front ends. One node
// and one front end are killed with SIGKILL, workers and all, while the
// killed node holds items of the live front end. Every request to the live
// front end is answered 200 with its own input, those that were on the
// killed node too (the other node claims them); requests to the killed
// front end either got their own answer or failed in transport. The live
// front end answered each of its items once, and Redis is left with no
// item waiting.
func TestBrokerKilledNodeAndFrontEndLoseNoAdmittedRequest(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// A --claim-idle long enough that the survivor claims nothing before
	// the test has counted what the killed node held (a few round trips
	// after the freeze, longer on a loaded machine).
	node := []string{"--workers", "2", "--model", "sleep:40ms,0s", "--max-latency", "5ms", "--claim-idle", "3s"}
	// Named, so that the test sees when Redis is done with its connections.
	victimNode := startBrokerNodeAt(t, rs.URL()+"?client_name=victim", node...)
	survivor := startBrokerNode(t, rs, node...)
	victimName := brokerLogField(t, victimNode, "node serving items from redis", "node")
	live := startBrokerFront(t, rs)
	doomed := startBrokerFront(t, rs)
	liveID := brokerLogField(t, live, "front end sending requests through redis", "front")
	waitReadyz(t, live, http.StatusOK)
	waitReadyz(t, doomed, http.StatusOK)
	// A request's items spread over both nodes come back in its order,
	// through a front end and through a node's own HTTP alike.
	const many = 32
	for _, s := range []*server{live, survivor} {
		inputs := make([]any, many)
		for i := range inputs {
			inputs[i] = fmt.Sprint("many-", i)
		}
		if p, err := predictWithin(s, requestTimeout, 0, inputs...); err != nil || p.Status != http.StatusOK || !slices.Equal(p.Outputs, inputs) {
			t.Fatalf("%d items through %s: %s, %v; want them back in order", many, s.addr, p, err)
		}
	}

	liveLoad := startBrokerLoad(t, live, "live", 16, 0)
	doomedLoad := startBrokerLoad(t, doomed, "doomed", 16, 0)
	waitFor(t, "load through both front ends", brokerWait, func() bool {
		return liveLoad.ok.Load() >= 50 && doomedLoad.ok.Load() >= 50
	})

	// Kill the node while it holds items of the live front end: frozen
	// (SIGSTOP) while they are counted, so that it answers none between
	// the count and the kill.
	// A write it sent just before it stopped may still be on its way to
	// Redis: two counts alike say none was.
	waitFor(t, "the node to be killed to hold items of the live front end", brokerWait, func() bool {
		freezeGroup(t, victimNode)
		held := len(heldItemsOf(t, rs, victimName, liveID))
		if held >= 2 && len(heldItemsOf(t, rs, victimName, liveID)) == held {
			return true
		}
		signalGroup(t, victimNode, syscall.SIGCONT)
		return false
	})
	if !strings.Contains(rs.Do(t, "CLIENT", "LIST"), " name=victim ") {
		t.Fatal("redis lists no connection named victim: the wait below would prove nothing")
	}
	sigkillGroup(t, victimNode)
	sigkillGroup(t, doomed)
	// Redis may not have run yet a write of answers the node sent just
	// before it froze, which acknowledges items (on a loaded machine, the
	// two counts above can both come first): once Redis has dropped the
	// node's connections, it has run all they brought.
	waitFor(t, "redis to drop the killed node's connections", brokerWait, func() bool {
		return !strings.Contains(rs.Do(t, "CLIENT", "LIST"), " name=victim ")
	})
	// Those it held at its death, unanswered: the survivor must answer them.
	orphans := heldItemsOf(t, rs, victimName, liveID)
	if len(orphans) == 0 {
		t.Fatal("the killed node had answered every item of the live front end: nothing left to claim")
	}
	killedAt := liveLoad.ok.Load()
	t.Logf("killed the node holding %d unanswered items of the live front end", len(orphans))

	waitFor(t, "the survivor to claim the killed node's items", brokerWait, func() bool {
		return len(redisPending(t, rs, victimName)) == 0
	})
	// It logs the claim just after Redis has moved the items.
	survivorName := brokerLogField(t, survivor, "node serving items from redis", "node")
	waitFor(t, "the surviving node to say it claimed the killed node's items", brokerWait, func() bool {
		return strings.Contains(survivor.logs(), "claimed items their node kept no more")
	})
	if !regexp.MustCompile(`claimed items their node kept no more[^\n]*` + regexp.QuoteMeta(survivorName)).MatchString(survivor.logs()) {
		t.Errorf("the claim's line does not name the node that claimed (%s):\n%s", survivorName, survivor.logs())
	}
	// Its /v1/stats counts them too.
	var bst struct {
		Broker struct {
			FrontEnd struct {
				RedisUp bool  `json:"redis_up"`
				Nodes   int64 `json:"nodes"`
			} `json:"front_end"`
			Node struct {
				Claimed uint64 `json:"claimed"`
			} `json:"node"`
		} `json:"broker"`
	}
	if status, body, err := survivor.get("/v1/stats"); err != nil || status != http.StatusOK || json.Unmarshal(body, &bst) != nil {
		t.Fatalf("GET /v1/stats of the survivor: %d %v %s", status, err, body)
	}
	if bst.Broker.Node.Claimed < uint64(len(orphans)) || !bst.Broker.FrontEnd.RedisUp || bst.Broker.FrontEnd.Nodes < 1 {
		t.Errorf("the survivor's broker stats %+v: want at least %d claimed, redis up, a node alive", bst.Broker, len(orphans))
	}
	waitFor(t, "more load through the live front end after the kill", brokerWait, func() bool {
		return liveLoad.ok.Load() >= killedAt+100
	})
	liveLoad.stop()
	doomedLoad.stop()

	liveResults := liveLoad.all()
	answered := checkBrokerLoad(t, "live", liveResults, false)
	for _, item := range orphans {
		if !answered[item] {
			t.Errorf("item %q of the live front end, held by the killed node, was not answered 200", item)
		}
	}
	checkBrokerLoad(t, "doomed", doomedLoad.all(), true)

	st, want := live.stats(t), uint64(many+len(liveResults))
	if st.Submitted != want || st.Answered != want || st.Failed != 0 || st.Queued != 0 {
		t.Errorf("live front end stats: %d submitted, %d answered, %d failed, %d waiting; want %d submitted and answered, none failed or waiting",
			st.Submitted, st.Answered, st.Failed, st.Queued, want)
	}
	waitFor(t, "every item on the stream answered", brokerWait, func() bool {
		return redisItems(t, rs) == 0
	})
}

// heldItemsOf returns the values of the items that consumer holds, read but
// not acknowledged, that the front end front asked for.
func heldItemsOf(t *testing.T, rs *redistest.Server, consumer, front string) []string {
	t.Helper()
	items := redisStreamItems(t, rs)
	var held []string
	for _, id := range redisPending(t, rs, consumer) {
		if it, ok := items[id]; ok && it.front == front && it.value != "" {
			// The value is the item's msgpack: a one-byte header, then the
			// string.
			held = append(held, it.value[1:])
		}
	}
	return held
}

// checkBrokerLoad checks the answers a front end gave: each 200 is the request's
// own item; with mayFail, transport errors are allowed (the front end was
// killed), and otherwise nothing but 200s. It returns the items answered
// 200.
func checkBrokerLoad(t *testing.T, name string, results []brokerResult, mayFail bool) map[string]bool {
	t.Helper()
	answered := map[string]bool{}
	var transport int
	for _, r := range results {
		switch {
		case r.status == 0 && mayFail:
			transport++
		case r.err != nil:
			t.Errorf("%s front end, item %q: %v", name, r.item, r.err)
		case r.status != http.StatusOK:
			t.Errorf("%s front end, item %q: status %d", name, r.item, r.status)
		case r.output != r.item:
			t.Errorf("%s front end, item %q: answered %v, another request's output", name, r.item, r.output)
		case answered[r.item]:
			t.Errorf("%s front end, item %q: answered twice", name, r.item)
		default:
			answered[r.item] = true
		}
	}
	t.Logf("%s front end: %d requests, %d answered 200, %d failed in transport", name, len(results), len(answered), transport)
	return answered
}

// TestBrokerNodeSIGTERMUnderLoadHandsOverCleanly: a node stopped by
// SIGTERM under load, as in a rolling restart, answers the items it holds
// before it exits: every request through the front end is answered 200
// with its own input, and the other node has nothing to claim.
func TestBrokerNodeSIGTERMUnderLoadHandsOverCleanly(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := []string{"--workers", "2", "--model", "sleep:40ms,0s", "--max-latency", "5ms", "--claim-idle", "1s"}
	leaving := startBrokerNode(t, rs, node...)
	staying := startBrokerNode(t, rs, node...)
	leavingName := brokerLogField(t, leaving, "node serving items from redis", "node")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)

	load := startBrokerLoad(t, front, "roll", 16, 0)
	waitFor(t, "load, with items held by the node to stop", brokerWait, func() bool {
		return load.ok.Load() >= 50 && len(redisPending(t, rs, leavingName)) > 0
	})
	if err := leaving.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := leaving.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("the node's exit on SIGTERM: code %d, %v; want 0", code, err)
	}
	after := load.ok.Load()
	waitFor(t, "load served by the other node", brokerWait, func() bool { return load.ok.Load() >= after+100 })
	load.stop()

	checkBrokerLoad(t, "front", load.all(), false)
	if held := redisPending(t, rs, leavingName); len(held) != 0 {
		t.Errorf("the stopped node left %d items unanswered", len(held))
	}
	if strings.Contains(staying.logs(), "claimed items their node kept no more") {
		t.Error("the other node had to claim items the stopped node left")
	}
	if left := brokerLogField(t, leaving, "node left", "left_to_other_nodes"); left != "0" {
		t.Errorf("the stopped node says it left %s items to other nodes; want none", left)
	}
	waitFor(t, "every item on the stream answered", brokerWait, func() bool {
		return redisItems(t, rs) == 0
	})
}

// TestBrokerLastNodeSIGTERMAnswersWhatItHolds: the only node, stopped by
// SIGTERM while its model runs an item, finishes it, and its caller gets
// 200 though the front end sees no live node for longer than its outage
// allowance (a second); a new request meanwhile gets 503 at once, as no
// node would read it.
func TestBrokerLastNodeSIGTERMAnswersWhatItHolds(t *testing.T) {
	node, front, held := oneItemHeld(t, "sleep:2500ms,0s")
	if err := node.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, front, http.StatusServiceUnavailable)
	if p, err := predictWithin(front, 2*time.Second, 0, "new"); err != nil || p.Status != http.StatusServiceUnavailable {
		t.Errorf("a new request while the only node leaves: %s, %v; want 503 at once", p, err)
	}
	if a := <-held; a.err != nil || a.p.Status != http.StatusOK || len(a.p.Outputs) != 1 || a.p.Outputs[0] != "held" {
		t.Errorf("the caller of the item the leaving node held: %s, %v; want 200 with its input", a.p, a.err)
	}
	if code, err := node.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("the node's exit on SIGTERM: code %d, %v; want 0", code, err)
	}
}

// TestBrokerFrontEndSIGTERMAnswersWhatItAdmitted: a front end stopped by
// SIGTERM under load answers every request it admitted with its output and
// refuses the others with 503 (or, once closed, the connection); it deletes
// its reply stream on the way out rather than leave it to expire.
func TestBrokerFrontEndSIGTERMAnswersWhatItAdmitted(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startBrokerNode(t, rs, "--workers", "2", "--model", "sleep:40ms,0s", "--max-latency", "5ms")
	front := startBrokerFront(t, rs)
	reply := brokerReplyKeys + brokerLogField(t, front, "front end sending requests through redis", "front")
	waitReadyz(t, front, http.StatusOK)

	// Requests take about 40ms: one with no answer in 3s was dropped.
	load := startBrokerLoad(t, front, "drain", 16, 3*time.Second)
	waitFor(t, "load through the front end", brokerWait, func() bool { return load.ok.Load() >= 50 })
	if err := front.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signaled := time.Now()
	// Its requests are answered within 40ms or so: the drain is quick,
	// though a loaded machine's Redis may take a while to say so.
	if _, err := front.wait(5 * time.Second); err != nil {
		t.Errorf("the front end still draining 5s after SIGTERM: its admitted requests are not answered")
	}
	if code, err := front.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("the front end's exit on SIGTERM: code %d, %v; want 0", code, err)
	}
	t.Logf("the front end exited %s after SIGTERM", time.Since(signaled).Round(time.Millisecond))
	load.stop() // every client has stopped at its first answer other than 200
	if n := redisInt(t, rs, "EXISTS", reply); n != 0 {
		t.Errorf("the stopped front end's reply stream %s is still there", reply)
	}

	var answered, refused, closed int
	var unanswered []string
	for _, r := range load.all() {
		switch {
		case r.status == 0 && errors.Is(r.err, context.DeadlineExceeded):
			unanswered = append(unanswered, r.item)
		case r.status == 0:
			closed++
		case r.status == http.StatusOK && r.output == r.item:
			answered++
		case r.status == http.StatusServiceUnavailable && r.err == nil:
			refused++
		default:
			t.Errorf("item %q: status %d, output %v, %v; want its own output, or 503 while draining", r.item, r.status, r.output, r.err)
		}
	}
	if len(unanswered) > 0 {
		t.Errorf("%d admitted requests got no answer within %s while the front end drained: %q", len(unanswered), load.timeout, unanswered)
	}
	t.Logf("%d answered, %d refused while draining, %d failed in transport once closed", answered, refused, closed)
	waitFor(t, "every item on the stream answered", brokerWait, func() bool {
		return redisItems(t, rs) == 0
	})
}

// TestBrokerRedisRestartFailsFastThenServesAgain: with Redis killed, a
// request waiting for its answer and new requests get 503 naming Redis
// within about a second, and /readyz says not ready; once Redis is back
// (empty), the same processes are ready and serve again.
func TestBrokerRedisRestartFailsFastThenServesAgain(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// An item runs long enough that Redis dies while it runs, however
	// slow the machine.
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:2s,0s")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "before"); err != nil || p.Status != http.StatusOK {
		t.Fatalf("before the outage: %s, %v", p, err)
	}

	inFlight := predictLater(front, 5*time.Second, "in flight")
	waitFor(t, "the item in flight on the stream", brokerWait, func() bool {
		return redisItems(t, rs) == 1
	})
	killed := time.Now()
	rs.Kill()
	a := <-inFlight
	p := a.p
	if a.err != nil {
		t.Errorf("a request waiting when Redis died: %v; want a 503", a.err)
	} else if took := time.Since(killed); p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Error, "redis") || took > 3*time.Second {
		t.Errorf("a request waiting when Redis died: %s after %s; want 503 naming redis within about a second", p, took)
	}

	start := time.Now()
	p, err := predictWithin(front, 3*time.Second, 0, "during")
	if err != nil {
		t.Fatalf("a request while Redis is down: %v (want a quick 503, not a client timeout)", err)
	}
	if took := time.Since(start); p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Error, "redis") || took > 2*time.Second {
		t.Errorf("a request while Redis is down: %s after %s; want 503 naming redis at once", p, took)
	}
	waitReadyz(t, front, 0)

	rs.Restart(t)
	waitReadyz(t, front, http.StatusOK)
	for i := range 3 {
		item := fmt.Sprintf("after-%d", i)
		p, err := predictWithin(front, 10*time.Second, 0, item)
		if err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != item {
			t.Fatalf("request %d after Redis came back: %s, %v; want 200 with its input", i, p, err)
		}
	}
	// The node said that Redis was gone, and that it was back, rather than
	// a warning from each of its loops every quarter second. (Its loops
	// may see Redis back at slightly different moments, as it comes.)
	down := strings.Count(node.logs(), "redis does not serve this node")
	back := strings.Count(node.logs(), "redis serves this node again")
	warns := strings.Count(node.logs(), `"level":"WARN"`)
	if down < 1 || down > 3 || back != down || warns > 2 {
		t.Errorf("the node logged the outage %d times, its end %d times, and %d warnings; want once or so, as often, and next to none:\n%s", down, back, warns, node.logs())
	}
	// The Redis client's own complaints through the outage went to the
	// log in its format, if at all.
	for _, s := range []*server{node, front} {
		for line := range strings.Lines(s.logs()) {
			if !json.Valid([]byte(line)) {
				t.Errorf("a log line that is not JSON, with --log-format json: %q", line)
			}
		}
	}
}

// TestBrokerQuickRedisRestartTellsTheCallersItLost: Redis restarted
// without its data faster than a front end counts an outage loses the
// items waiting in it; the front end notices the loss (the epoch key) and
// answers their callers 503 saying so, without waiting for an outage or
// the client's timeout. Here the only node is frozen, so that the item
// waits unread.
func TestBrokerQuickRedisRestartTellsTheCallersItLost(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:1ms,0s")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	freezeGroup(t, node)
	waiting := predictLater(front, 10*time.Second, "lost")
	waitFor(t, "the item waiting on the stream", brokerWait, func() bool { return redisItems(t, rs) == 1 })
	rs.Restart(t)
	a := <-waiting
	if a.err != nil || a.p.Status != http.StatusServiceUnavailable || !strings.Contains(a.p.Error, "lost its data") {
		t.Errorf("the caller whose item Redis lost: %s, %v; want 503 saying Redis lost its data", a.p, a.err)
	}
	signalGroup(t, node, syscall.SIGCONT)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, 10*time.Second, 0, "after"); err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "after" {
		t.Errorf("after the restart: %s, %v; want 200 with its input", p, err)
	}
}

// TestBrokerFrontEndTellsTheCallerWhoseItemRedisLost: Redis loses one
// waiting item and keeps the rest, epoch included, as a replica promoted
// without the master's last writes does. The front end, which sees a node
// alive (a heartbeat put there by hand, so that the item waits), finds the
// item gone and answers its caller 503 saying so.
func TestBrokerFrontEndTellsTheCallerWhoseItemRedisLost(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "ZADD", brokerNodesKey, strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "elsewhere")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	waiting := predictLater(front, brokerWait, "gone")
	waitFor(t, "the item on the stream", brokerWait, func() bool { return redisItems(t, rs) == 1 })
	id, _, _ := strings.Cut(rs.Do(t, "XRANGE", brokerItemsKey, "-", "+", "COUNT", "1"), "\n")
	rs.Do(t, "XDEL", brokerItemsKey, id)
	a := <-waiting
	if a.err != nil || a.p.Status != http.StatusServiceUnavailable || !strings.Contains(a.p.Error, "lost the request's items") {
		t.Errorf("the caller whose item Redis lost: %s, %v; want 503 saying Redis lost its items", a.p, a.err)
	}
	wantMetrics(t, front, "streamer_broker_lost_items_total 1")
	// Its clock and Redis's are one: the offset measured is well under a
	// second.
	_, body, err := front.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(body), "\nstreamer_broker_clock_offset_seconds ")
	value, _, _ := strings.Cut(rest, "\n")
	if offset, err := strconv.ParseFloat(value, 64); !found || err != nil || math.Abs(offset) >= 1 {
		t.Errorf("/metrics: streamer_broker_clock_offset_seconds %q (found %v); want an offset under a second", value, found)
	}
}

// TestBrokerDeadFrontEndsKeysExpire: a front end killed under load leaves
// its reply stream behind, which expires --reply-ttl (1s, on every process
// here) after the last answer written to it; the items it had sent are
// answered (to nobody) and leave the stream. Redis ends up holding the
// shared keys only.
func TestBrokerDeadFrontEndsKeysExpire(t *testing.T) {
	deadFrontEndKeysExpire(t, "--reply-ttl", "1s")
}

// TestBrokerReplyTTLOfTheFrontEndBoundsItsKeys: as above with --reply-ttl
// given to the front end alone, as its help says it is the front end's
// setting ("how long a front end's answers stay in Redis ... when the front
// end died"): the dead front end's reply stream must go within about that
// second, whatever the nodes were started with.
func TestBrokerReplyTTLOfTheFrontEndBoundsItsKeys(t *testing.T) {
	deadFrontEndKeysExpire(t)
}

// deadFrontEndKeysExpire runs one node with nodeArgs and a front end with
// --reply-ttl 1s, kills the front end under load, and checks that what
// Redis holds for it goes within a few seconds.
func deadFrontEndKeysExpire(t *testing.T, nodeArgs ...string) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, append([]string{"--workers", "2", "--model", "sleep:20ms,0s", "--max-latency", "5ms"}, nodeArgs...)...)
	front := startBrokerFront(t, rs, "--reply-ttl", "1s")
	reply := brokerReplyKeys + brokerLogField(t, front, "front end sending requests through redis", "front")
	waitReadyz(t, front, http.StatusOK)

	load := startBrokerLoad(t, front, "gone", 16, 0)
	waitFor(t, "load through the front end", brokerWait, func() bool { return load.ok.Load() >= 100 })
	if n := redisInt(t, rs, "EXISTS", reply); n != 1 {
		t.Fatalf("EXISTS %s: %d under load; want the front end's reply stream there", reply, n)
	}
	sigkillGroup(t, front)
	killed := time.Now()
	load.stop() // every client has stopped at its first transport error
	checkBrokerLoad(t, "killed", load.all(), true)

	const bound = 5 * time.Second // the TTL, after the answers to the items it left
	if !holdsWithin(bound, func() bool { return redisInt(t, rs, "EXISTS", reply) == 0 }) {
		t.Fatalf("%s still there %s after its front end died, expiring in %ss (--reply-ttl 1s)", reply, time.Since(killed).Round(time.Millisecond), rs.Do(t, "TTL", reply))
	}
	t.Logf("the reply stream expired %s after the kill", time.Since(killed).Round(time.Millisecond))
	waitFor(t, "the stream of items to drain", brokerWait, func() bool {
		return redisItems(t, rs) == 0
	})
	own := brokerItemsKey + ":" + brokerLogField(t, node, "node serving items from redis", "node")
	name := "streamer:name:" + strings.TrimPrefix(own, brokerItemsKey+":")
	if keys := redisKeys(t, rs, "*"); strings.Join(keys, " ") != strings.Join([]string{brokerEpochKey, brokerItemsKey, own, brokerModelKey, name, brokerNodesKey, brokerSizesKey, brokerStreamsKey, brokerVersionsKey}, " ") {
		t.Errorf("Redis holds %q; want only the epoch, the shared stream, the node's own, the model, the node's name, the live nodes, the mean size of the requests, the list of node streams and the versions of the nodes' model", keys)
	}
}

// TestBrokerLargeRequestsOfAFrontEndOfTheirOwnAreServed: the clients of
// one front end keep a shared backlog full of one-item requests; those of
// another send only requests of 4 items. Larger than most is judged by what
// every front end admits, so the second front end reads its requests
// rather than refuse them unread, and has room kept for each in turn:
// judged by its own, they were refused for ever.
func TestBrokerLargeRequestsOfAFrontEndOfTheirOwnAreServed(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startBrokerNode(t, rs, "--workers", "1", "--batch-size", "4", "--model", "sleep:20ms,0s")
	smalls := startBrokerFront(t, rs, "--max-queue", "16")
	larges := startBrokerFront(t, rs, "--max-queue", "16")
	waitReadyz(t, smalls, http.StatusOK)
	waitReadyz(t, larges, http.StatusOK)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	var smallOK atomic.Int64
	for i := range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if p, err := predictWithin(smalls, requestTimeout, 0, fmt.Sprint("small-", i)); err == nil && p.Status == http.StatusOK {
					smallOK.Add(1)
				}
			}
		})
	}
	waitFor(t, "the shared backlog full of one-item requests", brokerWait, func() bool { return redisItems(t, rs) >= 16 })

	inputs := []any{"a", "b", "c", "d"}
	for i := range 5 {
		p, err := predictWithin(larges, requestTimeout, 0, inputs...)
		if err != nil || p.Status != http.StatusOK || !slices.Equal(p.Outputs, inputs) {
			t.Fatalf("large request %d, with the backlog kept full by another front end's small ones: %s, %v; want its 4 answers", i, p, err)
		}
	}
	if smallOK.Load() == 0 {
		t.Error("no small request was answered meanwhile")
	}
}

// TestBrokerNodeShowsTheRoomKept: a node that takes HTTP requests keeps
// room in the shared backlog for a large one of its callers, and its
// /v1/stats and /metrics say so, as a front end's do, rather than show
// its local queue's, which keeps none.
func TestBrokerNodeShowsTheRoomKept(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--batch-size", "1", "--max-queue", "8", "--model", "sleep:20s,0s", "--grace", "1s")
	waitReadyz(t, node, http.StatusOK)
	// The callers are left waiting: the server's stop ends their calls.
	// (A large request's body is read while the backlog is full only
	// when it is twice the size of those read of late: short smalls.)
	for range 10 {
		go func() { _, _ = predictWithin(node, requestTimeout, 0, "s") }()
	}
	waitFor(t, "the shared backlog full of one-item requests", brokerWait, func() bool { return redisItems(t, rs) >= 8 })
	go func() { _, _ = predictWithin(node, requestTimeout, 0, "a", "b", "c", "d", "e", "f") }()
	waitFor(t, "the node to show room kept for the 6-item request", brokerWait, func() bool { return node.stats(t).RoomKept == 6 })
	wantMetrics(t, node, "streamer_queue_room_kept_items 6")
}

// TestBrokerNodeTimesItsOwnCallers: a node that takes HTTP requests times
// its callers' items from end to end, through Redis, as it counts them;
// its queue wait and compute time are its workers', of every front end's
// items. (Before, its end-to-end time was its workers' too: not what its
// callers saw, and a sum over front ends and nodes counted items twice.)
func TestBrokerNodeTimesItsOwnCallers(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "echo")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "a", "b", "c"); err != nil || p.Status != http.StatusOK {
		t.Fatalf("through the front end: %s, %v", p, err)
	}
	if p, err := predictWithin(node, requestTimeout, 0, "d"); err != nil || p.Status != http.StatusOK {
		t.Fatalf("through the node's own port: %s, %v", p, err)
	}
	wantMetrics(t, node, `streamer_items_total{outcome="ok"} 1`, "streamer_end_to_end_seconds_count 1", "streamer_queue_wait_seconds_count 4", "streamer_compute_seconds_count 4")
	if st := node.stats(t); st.Latency.EndToEnd.Count() != 1 {
		t.Errorf("the node's /v1/stats end to end counts %d items, want its one caller's", st.Latency.EndToEnd.Count())
	}
}

// TestBrokerFullBacklogAnswers429: with a shared backlog of 4 in front of
// one slow worker, a burst of requests gets 4 admitted and answered and the
// rest refused with 429 and Retry-After.
func TestBrokerFullBacklogAnswers429(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// Each item runs 2 s, so that the whole burst reaches the front end
	// before the first answer frees a place, even on a loaded machine.
	node := startBrokerNode(t, rs, "--workers", "1", "--batch-size", "1", "--model", "sleep:2s,0s")
	front := startBrokerFront(t, rs, "--max-queue", "4")
	waitReadyz(t, front, http.StatusOK)

	const burst = 12
	answers := make([]prediction, burst)
	errs := make([]error, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() { answers[i], errs[i] = predictWithin(front, requestTimeout, 0, fmt.Sprint("burst-", i)) })
	}
	wg.Wait()
	var ok, refused int
	for i, p := range answers {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d: %v", i, errs[i])
		case p.Status == http.StatusOK && len(p.Outputs) == 1 && p.Outputs[0] == fmt.Sprint("burst-", i):
			ok++
		case p.Status == http.StatusTooManyRequests && p.Header.Get("Retry-After") != "":
			refused++
		default:
			t.Errorf("request %d: %s, Retry-After %q; want 200 with its input or 429 with Retry-After", i, p, p.Header.Get("Retry-After"))
		}
	}
	if ok != 4 || refused != burst-4 {
		t.Errorf("%d answered and %d refused; want 4 (the backlog) and %d", ok, refused, burst-4)
	}
	if p, err := predictWithin(front, requestTimeout, 0, "after"); err != nil || p.Status != http.StatusOK {
		t.Errorf("once the backlog drained: %s, %v", p, err)
	}
	// The broker's side in /metrics: the front end's view of Redis, and the
	// node's items (the node counts an answer once Redis has taken it).
	wantMetrics(t, front, "streamer_broker_redis_up 1", "streamer_broker_max_backlog_items 4", "streamer_broker_nodes 1", "streamer_broker_withdrawn_items_total 0")
	waitFor(t, "the node's 5 answers in its metrics", 10*time.Second, func() bool {
		_, body, err := node.get("/metrics")
		return err == nil && strings.Contains(string(body), `streamer_broker_node_items_total{event="answered"} 5`)
	})
	wantMetrics(t, node, `streamer_broker_node_items_total{event="read"} 5`, `streamer_broker_node_items_total{event="claimed"} 0`,
		"streamer_broker_node_held_items 0", "streamer_broker_node_write_failures_total 0", "streamer_broker_node_refused 0")
}

// waitMetrics waits until s's /metrics has every line of want.
func waitMetrics(t *testing.T, s *server, want ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("/metrics to have %q", want), brokerWait, func() bool {
		status, body, err := s.get("/metrics")
		if err != nil || status != http.StatusOK {
			return false
		}
		lines := strings.Split(string(body), "\n")
		for _, w := range want {
			if !slices.Contains(lines, w) {
				return false
			}
		}
		return true
	})
}

// wantMetrics fails unless s's /metrics has every line of want.
func wantMetrics(t *testing.T, s *server, want ...string) {
	t.Helper()
	status, body, err := s.get("/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", status, err)
	}
	lines := strings.Split(string(body), "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("/metrics lacks the line %q", w)
		}
	}
}

// TestBrokerExpiredItemNeverRuns: an item whose deadline passes while it
// waits in Redis (no node reads yet) is answered 504 at its deadline, and
// the node that reads it later never runs it: its model would crash on it.
func TestBrokerExpiredItemNeverRuns(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// A node that says it is alive and reads nothing, so that the front
	// end admits the request and the item waits.
	rs.Do(t, "ZADD", brokerNodesKey, fmt.Sprint(time.Now().Add(time.Hour).UnixMilli()), "silent")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)

	// Time enough to be put on the stream before its deadline, even on
	// a loaded machine: one that passes first is never put there.
	start := time.Now()
	p, err := predictWithin(front, 10*time.Second, 1500, "late")
	if took := time.Since(start); err != nil || p.Status != http.StatusGatewayTimeout || took > 4*time.Second {
		t.Fatalf("timeout_ms 1500 with no node reading: %s, %v after %s; want 504 at the deadline", p, err, took)
	}
	if n := redisInt(t, rs, "XLEN", brokerItemsKey); n != 1 {
		t.Fatalf("%d items on the stream; want the expired one, still waiting", n)
	}
	// Counted as a local server counts an item it answers 504, once
	// Redis's verdict on its admission is in.
	waitMetrics(t, front, `streamer_items_total{outcome="ok"} 0`, `streamer_items_total{outcome="timed_out"} 1`)

	node := startBrokerNode(t, rs, "--workers", "1", "--model", "chaos:crash=late")
	waitFor(t, "the node to drop the expired item", brokerWait, func() bool {
		return redisItems(t, rs) == 0
	})
	if st := node.stats(t); st.Batches != 0 || st.Crashes != 0 {
		t.Errorf("node stats %+v: the expired item ran (want no batch, no crash)", st)
	}
	if p, err := predictWithin(front, requestTimeout, 0, "fresh"); err != nil || p.Status != http.StatusOK {
		t.Errorf("a fresh item: %s, %v", p, err)
	}
	if st := node.stats(t); st.Batches != 1 || st.Crashes != 0 {
		t.Errorf("node stats %+v: want the fresh item's batch alone", st)
	}
	wantMetrics(t, front, `streamer_items_total{outcome="ok"} 1`, `streamer_items_total{outcome="timed_out"} 1`)
}

// TestBrokerPoisonFoundByOneNodeIsRefusedByTheOther: two nodes whose model
// crashes on an item, both up. Once one node has found it poison (422), the
// other, left alone at once, refuses it on sight with 422 without running
// it: none of its workers crashes.
func TestBrokerPoisonFoundByOneNodeIsRefusedByTheOther(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := []string{"--workers", "2", "--model", "chaos:crash=boom", "--max-latency", "5ms"}
	nodes := []*server{startBrokerNode(t, rs, node...), startBrokerNode(t, rs, node...)}
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	for _, n := range nodes {
		n.seenWorking(t)
	}

	if p, err := predictWithin(front, requestTimeout, 0, "boom"); err != nil || p.Status != http.StatusUnprocessableEntity {
		t.Fatalf("the poison item: %s, %v; want 422", p, err)
	}
	finder, other := nodes[0], nodes[1]
	if finder.stats(t).Crashes == 0 {
		finder, other = other, finder
	}
	if finder.stats(t).Crashes == 0 {
		t.Fatal("neither node's workers crashed on the poison item")
	}
	// The finder goes, so that the item lands on the other node.
	sigkillGroup(t, finder)
	batchesBefore := other.stats(t).Batches
	if p, err := predictWithin(front, requestTimeout, 0, "boom"); err != nil || p.Status != http.StatusUnprocessableEntity {
		t.Errorf("the poison item again: %s, %v; want 422", p, err)
	}
	if st := other.stats(t); st.Crashes != 0 || st.Batches != batchesBefore {
		t.Errorf("the other node ran the known poison item: %d crashes, %d poisoned, %d batches after %d; want none", st.Crashes, st.Poisoned, st.Batches, batchesBefore)
	}
	if p, err := predictWithin(front, requestTimeout, 0, "fine"); err != nil || p.Status != http.StatusOK {
		t.Errorf("after the poison item: %s, %v", p, err)
	}
	// The front end counts both 422s as poisoned items, as a local server
	// counts the one it finds, and so does a node for its own callers.
	wantMetrics(t, front, `streamer_items_total{outcome="poisoned"} 2`, `streamer_items_total{outcome="failed"} 0`, `streamer_items_total{outcome="ok"} 1`)
	if p, err := predictWithin(other, requestTimeout, 0, "boom"); err != nil || p.Status != http.StatusUnprocessableEntity {
		t.Errorf("the poison item through the other node's own port: %s, %v; want 422", p, err)
	}
	wantMetrics(t, other, `streamer_items_total{outcome="poisoned"} 1`, `streamer_items_total{outcome="failed"} 0`)
	// The front end's latency is its items' whole time, through Redis.
	wantMetrics(t, front, "streamer_end_to_end_seconds_count 3", "streamer_queue_wait_seconds_count 0")
}

// TestBrokerPoisonRefusedAfterAGracefulStop: a node started after another
// found an item poison takes the shared quarantine with it: once the finder
// is stopped by SIGTERM, as in a rolling restart, the newcomer refuses the
// item with 422 without running it.
func TestBrokerPoisonRefusedAfterAGracefulStop(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	finder := startBrokerNode(t, rs, "--workers", "2", "--model", "chaos:crash=boom")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	finder.seenWorking(t)
	if p, err := predictWithin(front, requestTimeout, 0, "boom"); err != nil || p.Status != http.StatusUnprocessableEntity {
		t.Fatalf("the poison item: %s, %v; want 422", p, err)
	}
	other := startBrokerNode(t, rs, "--workers", "2", "--model", "chaos:crash=boom")
	if err := finder.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := finder.wait(stopTimeout); err != nil || code != 0 {
		t.Fatalf("the finder's exit on SIGTERM: code %d, %v", code, err)
	}
	if p, err := predictWithin(front, requestTimeout, 0, "boom"); err != nil || p.Status != http.StatusUnprocessableEntity {
		t.Errorf("the poison item again: %s, %v; want 422", p, err)
	}
	if st := other.stats(t); st.Crashes != 0 || st.Batches != 0 {
		t.Errorf("the other node ran the known poison item: %d crashes, %d batches; want none", st.Crashes, st.Batches)
	}
}

// TestBrokerReadyzKeepsRedisFromProbes: with --auth-token, a front end
// whose Redis is down answers /readyz, open to probes, 503 without naming
// Redis's address, and tells a caller with the token why.
func TestBrokerReadyzKeepsRedisFromProbes(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Kill()
	front := startBrokerFront(t, rs, "--auth-token", "tok")
	waitReadyz(t, front, http.StatusServiceUnavailable)
	status, body, _, err := front.do(context.Background(), http.MethodGet, "/readyz", "", nil)
	if err != nil || status != http.StatusServiceUnavailable || strings.Contains(string(body), rs.Addr()) || !strings.Contains(string(body), "not ready") {
		t.Errorf("GET /readyz without the token: %d %s, %v; want 503 saying not ready, without %s", status, body, err, rs.Addr())
	}
	status, body, _, err = front.do(context.Background(), http.MethodGet, "/readyz", "", nil, "Authorization", "Bearer tok")
	if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(string(body), rs.Addr()) {
		t.Errorf("GET /readyz with the token: %d %s, %v; want 503 naming Redis at %s", status, body, err, rs.Addr())
	}
}

// TestBrokerStartsBeforeRedis: a node and a front end started while Redis
// is down keep trying rather than exit, are not ready meanwhile, and serve
// once Redis is up, without a restart.
func TestBrokerStartsBeforeRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Kill()
	node := launchBroker(t, rs.URL(), "--workers", "1")
	front := startBrokerFront(t, rs)
	for _, s := range []*server{node, front} {
		if status, _, err := s.get("/readyz"); err != nil || status == http.StatusOK {
			t.Errorf("GET /readyz on %s with Redis down: %d, %v; want not ready", s.addr, status, err)
		}
	}
	if p, err := predictWithin(front, 3*time.Second, 0, "early"); err != nil || p.Status != http.StatusServiceUnavailable {
		t.Errorf("a request with Redis down: %s, %v; want 503", p, err)
	}
	rs.Restart(t)
	waitReadyz(t, node, http.StatusOK)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "late"); err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "late" {
		t.Errorf("once Redis is up: %s, %v; want 200 with the input", p, err)
	}
}

// TestBrokerStreamPrefixKeepsModelsApart: clusters with different
// --stream-prefix share one Redis without seeing each other: a front end
// is not ready while only another prefix has a node, and its requests run
// only on its own prefix's node.
func TestBrokerStreamPrefixKeepsModelsApart(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	one := startBrokerNode(t, rs, "--workers", "1", "--stream-prefix", "one")
	front := startBrokerFront(t, rs, "--stream-prefix", "two")
	if p, err := predictWithin(front, 3*time.Second, 0, "x"); err != nil || p.Status != http.StatusServiceUnavailable {
		t.Errorf("with a node of another prefix only: %s, %v; want 503", p, err)
	}
	two := startBrokerNode(t, rs, "--workers", "1", "--stream-prefix", "two")
	waitReadyz(t, front, http.StatusOK)
	for i := range 3 {
		if p, err := predictWithin(front, requestTimeout, 0, fmt.Sprint("two-", i)); err != nil || p.Status != http.StatusOK {
			t.Fatalf("through prefix two: %s, %v", p, err)
		}
	}
	if b1, b2 := one.stats(t).Batches, two.stats(t).Batches; b1 != 0 || b2 != 3 {
		t.Errorf("batches run: %d on prefix one's node, %d on prefix two's; want 0 and 3", b1, b2)
	}
	nodeOne, nodeTwo := brokerLogField(t, one, "node serving items from redis", "node"), brokerLogField(t, two, "node serving items from redis", "node")
	want := []string{"one:epoch", "one:items", "one:items:" + nodeOne, "one:model", "one:name:" + nodeOne, "one:nodes", "one:streams", "one:versions", "two:epoch", "two:items", "two:items:" + nodeTwo, "two:model", "two:name:" + nodeTwo, "two:nodes",
		"two:reply:" + brokerLogField(t, front, "front end sending requests through redis", "front"), "two:sizes", "two:streams", "two:versions"}
	if keys := redisKeys(t, rs, "*"); strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("Redis holds %q; want each prefix's own keys", keys)
	}
}

// TestBrokerAnotherModelUnderTheSamePrefixIsRefused: the nodes under a
// key prefix serve one model. A node of another refuses to start, before
// its workers load the model (it would answer the items it read with its
// own answers), as does a front
// end that writes items otherwise than the nodes read them (an ONNX
// model's tensors to a generic model); one that started before the nodes
// takes no requests, saying why, while they disagree. Front ends of
// models that write alike (the default echo, before sleep nodes) serve.
func TestBrokerAnotherModelUnderTheSamePrefixIsRefused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	demoFront := startBrokerFront(t, rs, "--model", "demo") // before any node
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:1ms,0s")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "x"); err != nil || p.Status != http.StatusOK {
		t.Fatalf("through a front end of the default model: %s, %v; want 200", p, err)
	}
	base := []string{"--broker", rs.URL(), "--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"a node of an ONNX model", []string{"--workers", "1", "--model", "demo"}, []string{
			`serve "sleep:1ms,0s"; this node serves "demo" (the nodes write items as "generic", this node as "onnx {`,
			`; the nodes' model is named "sleep", this node's "onnx")`, `: give it another key prefix (--stream-prefix`}},
		{"a node of another generic model", []string{"--workers", "1", "--model", "echo"}, []string{
			`this node serves "echo" (the nodes' model is named "sleep", this node's "echo"): `}},
		// Before its workers load the model, which takes them an hour
		// here: it was told once they had.
		{"a node of a model slow to load", []string{"--workers", "1", "--model", "chaos:init-delay=1h", "--init-timeout", "2h"}, []string{
			`this node serves "chaos:init-delay=1h" (the nodes' model is named "sleep", this node's "chaos"): `}},
		{"a front end of an ONNX model", []string{"--workers", "0", "--model", "demo"}, []string{
			`this front end serves "demo" (the nodes write items as "generic", this front end as "onnx {`, `: give it the nodes' model (--model`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := refusedAtStart(t, append(slices.Clone(base), tc.args...))
			for _, want := range append([]string{"another model is served under this key prefix"}, tc.want...) {
				if !strings.Contains(got, want) {
					t.Errorf("it says %q; want a refusal saying %q", got, want)
				}
			}
		})
	}
	waitFor(t, "the demo front end to say why it is not ready", brokerWait, func() bool {
		status, body, err := demoFront.get("/readyz")
		return err == nil && status == http.StatusServiceUnavailable && strings.Contains(string(body), "give it the nodes' model (--model")
	})
	if p, err := predictWithin(demoFront, requestTimeout, 0, []any{5.1, 3.5, 1.4, 0.2}); err != nil || p.Status != http.StatusServiceUnavailable || !strings.Contains(string(p.Body), "sleep:1ms,0s") {
		t.Errorf("through the demo front end: %s, %v; want 503 naming the nodes' model", p, err)
	}
	if st := node.stats(t); st.Batches != 1 {
		t.Errorf("the node ran %d batches; want the one of the front end of its model", st.Batches)
	}
}

// TestBrokerAnotherVersionUnderThePrefixIsRefused: under a prefix whose
// model is kept by nodes of an older streamer (its key as this version
// writes it, but for the layout of the entries, which versions before
// layouts were numbered did not write), a node and a front end of this
// version exit 1 at start, naming the version and what mends it. Once the
// key holds this version's layout, they serve.
func TestBrokerAnotherVersionUnderThePrefixIsRefused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	model := []string{"--model", "sleep:1ms,0s"}
	startBrokerNode(t, rs, append([]string{"--workers", "1", "--stream-prefix", "now"}, model...)...)
	// The wire field ends with the entries' layout, which versions from
	// before layouts were numbered did not write.
	wire, layout, marked := strings.Cut(rs.Do(t, "HGET", "now:model", "wire"), " @layout ")
	if !marked || layout == "" {
		t.Fatalf("the node of this version keeps its model as %q, without the entries' layout", rs.Do(t, "HGETALL", "now:model"))
	}
	rs.Do(t, "COPY", "now:model", "old:model")
	rs.Do(t, "HSET", "old:model", "wire", wire)
	rs.Do(t, "PEXPIRE", "old:model", "120000")
	base := append([]string{"--broker", rs.URL(), "--listen", "127.0.0.1:0", "--stream-prefix", "old"}, model...)
	for _, who := range []string{"node", "front end"} {
		workers := "1"
		if who == "front end" {
			workers = "0"
		}
		got := refusedAtStart(t, append(slices.Clone(base), "--workers", workers))
		for _, want := range []string{
			"another version of streamer serves this key prefix", `the nodes under the key prefix "old"`,
			"this " + who + ` serves "sleep:1ms,0s" (the nodes' entries are laid out by an older version of streamer, of no layout number, this ` + who + `'s as "` + layout + `")`,
			"must run one version of streamer: upgrade them together (the prefix keeps the model of the nodes there 30s after the last one has gone), or run the new version under another key prefix (--stream-prefix",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("a %s: it says %q; want a refusal saying %q", who, got, want)
			}
		}
	}
	rs.Do(t, "HSET", "old:model", "wire", wire+" @layout "+layout)
	startBrokerNode(t, rs, append([]string{"--workers", "1", "--stream-prefix", "old"}, model...)...)
	front := startBrokerFront(t, rs, append([]string{"--stream-prefix", "old"}, model...)...)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "x"); err != nil || p.Status != http.StatusOK {
		t.Fatalf("under the prefix of this version's layout: %s, %v; want 200", p, err)
	}
}

// TestBrokerFlagsAndConnections: a front end needs --broker; Redis with a
// password, an ACL user and TLS (trusting the CA given by --broker-ca)
// serve, and a certificate signed by a CA the front end does not trust is
// answered 503 saying so.
func TestBrokerFlagsAndConnections(t *testing.T) {
	t.Run("workers 0 without broker", func(t *testing.T) {
		t.Setenv("STREAMER_BROKER", "")
		os.Unsetenv("STREAMER_BROKER") // restored by Setenv's cleanup
		s := launchServer(t, "--workers", "0")
		code, err := s.wait(readyTimeout)
		if err != nil || code == 0 || !strings.Contains(s.logs(), "--broker") {
			t.Errorf("exit code %d, %v; want non-zero with an error naming --broker:\n%s", code, err, s.logs())
		}
	})
	for _, tc := range []struct {
		name       string
		env        string // $STREAMER_BROKER
		args, want []string
	}{
		{"broker flags without broker", "", []string{"--claim-idle", "2s", "--stream-prefix", "m"}, []string{"--stream-prefix, --claim-idle needs --broker"}},
		{"empty prefix", "", []string{"--broker", "redis://127.0.0.1:1/0", "--stream-prefix", ""}, []string{"--stream-prefix is empty"}},
		{"negative workers", "", []string{"--broker", "redis://127.0.0.1:1/0", "--workers", "-1"}, []string{"--workers -1: want at least 1, or 0 for a front end alone"}},
		{"claim idle of zero", "", []string{"--broker", "redis://127.0.0.1:1/0", "--claim-idle", "0s"}, []string{"--claim-idle 0s: want 100ms to 1h"}},
		{"claim idle of a typo", "", []string{"--broker", "redis://127.0.0.1:1/0", "--claim-idle", "1000h"}, []string{"--claim-idle 1000h0m0s: want 100ms to 1h"}},
		{"reply ttl past its bound", "", []string{"--broker", "redis://127.0.0.1:1/0", "--reply-ttl", "48h"}, []string{"--reply-ttl 48h0m0s: want 1s to 24h0m0s"}},
		{"CA without TLS", "", []string{"--broker", "redis://127.0.0.1:1/0", "--broker-ca", "ca.pem"}, []string{"--broker-ca needs a rediss:// URL in --broker"}},
		{"bad URL from the environment", "redis://u:s3cret@127.0.0.1:abc/0", nil, []string{"$STREAMER_BROKER", "redis://…", "is the port a number"}},
		{"an empty URL from the environment", " ", nil, []string{"$STREAMER_BROKER is set but empty: give a redis:// URL, or unset it to serve alone"}},
		// Leaving the flag out would not serve alone: the advice says how.
		{"an empty --broker beside the variable", "redis://127.0.0.1:1/0", []string{"--broker", ""}, []string{"--broker is empty: give a redis:// URL; leaving the flag out takes $STREAMER_BROKER", "env -u STREAMER_BROKER"}},
		{"an empty --broker on a front end", "", []string{"--broker", "", "--workers", "0"}, []string{"streamer: --broker is empty: give a redis:// URL\n"}},
		{"an empty --broker beside an empty variable", " ", []string{"--broker", ""}, []string{"--broker is empty: give a redis:// URL; $STREAMER_BROKER is set but empty too: unset it and leave the flag out to serve alone"}},
		{"no scheme", "", []string{"--broker", "127.0.0.1:6379"}, []string{"--broker", "the scheme must be redis://"}},
		{"an option streamer sets", "", []string{"--broker", "redis://127.0.0.1:1/0?read_timeout=30s"}, []string{"--broker", "query option read_timeout: streamer sets it itself"}},
		{"a sentinel password that does not decode", "", []string{"--broker", "redis://127.0.0.1:1/0?master_name=m&sentinel_password=s3cret%zz"}, []string{"--broker", "query option sentinel_password does not parse"}},
		{"skip_verify", "", []string{"--broker", "rediss://127.0.0.1:1/0?skip_verify=true"}, []string{"--broker", "query option skip_verify", "--broker-ca"}},
		{"admin on a front end", "", []string{"--broker", "redis://127.0.0.1:1/0", "--workers", "0", "--admin", "--auth-token", "t"}, []string{"--admin needs workers of this server's own"}},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			t.Setenv("STREAMER_BROKER", tc.env)
			if tc.env == "" {
				os.Unsetenv("STREAMER_BROKER") // restored by Setenv's cleanup
			}
			s := launchServer(t, append([]string{"--workers", "1", "--model", "echo"}, tc.args...)...)
			code, err := s.wait(readyTimeout)
			if err != nil || code == 0 {
				t.Fatalf("exit code %d, %v; want the server refused at start:\n%s", code, err, s.logs())
			}
			for _, w := range tc.want {
				if !strings.Contains(s.logs(), w) {
					t.Errorf("the error lacks %q:\n%s", w, s.logs())
				}
			}
			if strings.Contains(s.logs(), "s3cret") {
				t.Errorf("the error shows the password:\n%s", s.logs())
			}
		})
	}
	t.Run("refused: a redis cluster", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{Cluster: true})
		for _, workers := range []string{"0", "1"} {
			s := launchServer(t, "--broker", rs.URL(), "--workers", workers, "--model", "echo")
			code, err := s.wait(readyTimeout)
			if err != nil || code == 0 || !strings.Contains(s.logs(), "--broker: unsupported redis: redis at "+rs.Addr()+" runs as a cluster") {
				t.Errorf("--workers %s: exit code %d, %v; want the server refused at start, saying Redis runs as a cluster:\n%s", workers, code, err, s.logs())
			}
		}
	})
	t.Run("help hides the broker from the environment", func(t *testing.T) {
		t.Setenv("STREAMER_BROKER", "redis://u:s3cret@127.0.0.1:6379/0")
		out, err := exec.Command(streamerBin, "serve", "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "$STREAMER_BROKER") || strings.Contains(string(out), "s3cret") {
			t.Errorf("serve --help: %v; want the flag's help naming $STREAMER_BROKER without its value:\n%s", err, out)
		}
	})
	t.Run("password", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{Password: "s3cret"})
		serveThrough(t, rs)
	})
	t.Run("acl user", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{User: "streamer", UserPassword: "pw"})
		serveThrough(t, rs)
	})
	t.Run("acl user without TIME", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{User: "streamer", UserPassword: "pw"})
		rs.Do(t, "ACL", "SETUSER", "streamer", "-time")
		serveThrough(t, rs)
	})
	t.Run("tls", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{TLS: true})
		serveThrough(t, rs, "--broker-ca", rs.CAFile())
	})
	t.Run("tls to a redis without it", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{})
		refusedThrough(t, strings.Replace(rs.URL(), "redis://", "rediss://", 1), []string{"does Redis speak TLS"})
	})
	t.Run("plain tcp to a tls port", func(t *testing.T) {
		rs := redistest.Start(t, redistest.Options{TLS: true})
		refusedThrough(t, strings.Replace(rs.URL(), "rediss://", "redis://", 1), []string{"a TLS port reached without rediss://"})
	})
	t.Run("tls with an untrusted certificate", func(t *testing.T) {
		// Refused at start, as a wrong password is: no retry mends it.
		rs := redistest.Start(t, redistest.Options{TLS: true})
		for _, workers := range []string{"0", "1"} {
			last := refusedAtStart(t, []string{"--workers", workers, "--model", "echo", "--broker", rs.URL()})
			if !strings.Contains(last, "--broker: redis's certificate is not trusted (is --broker-ca the CA that signed it, or the system's?)") || !strings.Contains(last, "x509") {
				t.Errorf("--workers %s, a certificate signed by a CA not trusted: %q; want it refused at start, saying why", workers, last)
			}
		}
	})
}

// TestBrokerFrontEndChecksItsFlagsAsALocalServerDoes: a front end
// (--workers 0) refuses the batching and queue flags' values that a local
// server refuses, with the same message, naming the flag rather than
// --broker or the Go fields it sets.
func TestBrokerFrontEndChecksItsFlagsAsALocalServerDoes(t *testing.T) {
	t.Setenv("STREAMER_BROKER", "")
	os.Unsetenv("STREAMER_BROKER") // restored by Setenv's cleanup
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--max-queue", "-1"}, "--max-queue"},
		{[]string{"--max-items", "-1"}, "--max-items"},
		{[]string{"--max-items", "0"}, "--max-items"},
		{[]string{"--batch-size", "0"}, "--batch-size"},
		{[]string{"--max-batch-bytes", "0"}, "--max-batch-bytes"},
		{[]string{"--max-batch-bytes", "300000000"}, "--max-batch-bytes"},
		{[]string{"--batch-size", "20000000"}, "--batch-size"},
		{[]string{"--batch-size", "65537"}, "--batch-size"},
		{[]string{"--batching", "bogus"}, "--batching"},
		{[]string{"--cuda", "0,,1"}, "--cuda"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			local := refusedAtStart(t, append([]string{"--workers", "1", "--model", "echo"}, tc.args...))
			front := refusedAtStart(t, append([]string{"--workers", "0", "--broker", "redis://127.0.0.1:1/0"}, tc.args...))
			if !strings.HasPrefix(local, "streamer: "+tc.flag+" ") {
				t.Errorf("a local server says %q; want an error naming %s", local, tc.flag)
			}
			if front != local {
				t.Errorf("a front end says %q; want what a local server says, %q", front, local)
			}
		})
	}
}

// TestBrokerFrontEndRefusesAnItemOverItsMaxBatchBytes: a front end answers
// a request with an item over its --max-batch-bytes 413, naming the item,
// as a local server does, and none of the request's items enters Redis
// (nodes' own bound is larger: before, they ran the others).
func TestBrokerFrontEndRefusesAnItemOverItsMaxBatchBytes(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1")
	front := startBrokerFront(t, rs, "--max-batch-bytes", "100")
	local := startServer(t, "--workers", "1", "--max-batch-bytes", "100")
	waitReadyz(t, front, http.StatusOK)
	body := []byte(`{"inputs": ["a", "` + strings.Repeat("y", 200) + `", "b"]}`)
	var answers []string
	for _, s := range []*server{front, local} {
		status, got, _, err := s.tryPost("application/json", body)
		if err != nil || status != http.StatusRequestEntityTooLarge {
			t.Fatalf("an item over --max-batch-bytes: %d %s, %v; want 413", status, got, err)
		}
		answers = append(answers, string(got))
	}
	if answers[0] != answers[1] || !strings.Contains(answers[0], "item 1: ") {
		t.Errorf("the front end says %s; want what a local server says, naming item 1: %s", answers[0], answers[1])
	}
	if n := rs.Do(t, "XLEN", "streamer:items"); n != "0" {
		t.Errorf("%s items on the stream; want none", n)
	}
	wantMetrics(t, node, `streamer_broker_node_items_total{event="read"} 0`)
	wantMetrics(t, front, `streamer_items_total{outcome="rejected"} 3`)
}

// refusedAtStart runs streamer serve with args, which it must refuse, and
// returns its last line, the error.
func refusedAtStart(t *testing.T, args []string) string {
	t.Helper()
	s := launchServer(t, args...)
	code, err := s.wait(readyTimeout)
	if err != nil || code != 1 {
		t.Fatalf("streamer serve %s: exit code %d, %v; want 1, refused at start:\n%s", strings.Join(args, " "), code, err, s.logs())
	}
	lines := strings.Split(strings.TrimSpace(s.logs()), "\n")
	return lines[len(lines)-1]
}

// TestBrokerRefusedAtStartExits: a front end or a node whose --broker
// user, password or database Redis refuses exits 1 at start saying so, as
// no retry mends it, a node before its workers load the model (before,
// once they had: minutes later for a large model); a Redis that does not
// answer at all is retried, and the front end does not claim to send
// through it meanwhile.
func TestBrokerRefusedAtStartExits(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{Password: "s3cret", User: "alice", UserPassword: "pw"})
	for _, tc := range []struct{ url, why string }{
		{"redis://:wrong@" + rs.Addr() + "/0", "WRONGPASS"},
		{"redis://alice:wrong@" + rs.Addr() + "/0", "WRONGPASS"},
		{"redis://" + rs.Addr() + "/0", "NOAUTH"},
		{"redis://alice:pw@" + rs.Addr() + "/99", "DB index is out of range"},
	} {
		for _, workers := range []string{"0", "1"} {
			// A model whose load outlasts the wait.
			s := launchServer(t, "--broker", tc.url, "--workers", workers, "--model", "chaos:init-delay=1m")
			code, err := s.wait(readyTimeout)
			logs := s.logs()
			if strings.Contains(logs, "worker started") {
				t.Errorf("%s, --workers %s: a worker started before Redis was asked:\n%s", tc.url, workers, logs)
			}
			if err != nil || code != 1 || !strings.Contains(logs, "streamer: --broker: redis refuses this client") || !strings.Contains(logs, tc.why) {
				t.Errorf("%s, --workers %s: exit code %d, %v; want 1, saying Redis refuses it (%s):\n%s", tc.url, workers, code, err, tc.why, logs)
			}
			if strings.Contains(logs, "msg=serving") || strings.Contains(logs, "through redis") || strings.Contains(logs, "wrong") {
				t.Errorf("%s, --workers %s: the log says it serves, or shows the password:\n%s", tc.url, workers, logs)
			}
		}
	}
	t.Run("redis down", func(t *testing.T) {
		front := launchBroker(t, "redis://127.0.0.1:1/0", "--workers", "0")
		brokerLogField(t, front, "serving", "level")
		if _, ok := jsonLogAttr(front.logs(), "front end started without redis; retrying", "front"); !ok || strings.Contains(front.logs(), "front end sending requests through redis") {
			t.Errorf("a front end with Redis down: want it started, retrying, without saying it sends through Redis:\n%s", front.logs())
		}
		if front.exited() {
			t.Errorf("a front end with Redis down exited; want it retrying:\n%s", front.logs())
		}
	})
}

// TestBrokerAServerThatIsNotRedisEndsTheStart: a --broker that names a
// server of another protocol (here an HTTP server) ends streamer serve at
// start, exit 1, saying what the server answered, as a wrong password
// does: it served for ever as not ready. A port that accepts and answers
// nothing is retried, as a Redis that hangs looks the same, saying what
// the front end waits for.
func TestBrokerAServerThatIsNotRedisEndsTheStart(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	for _, workers := range []string{"0", "1"} {
		last := refusedAtStart(t, []string{"--broker", "redis://" + web.Listener.Addr().String() + "/0", "--workers", workers, "--model", "echo"})
		want := "--broker: unsupported redis: the server at " + web.Listener.Addr().String() + ` does not speak the Redis protocol: it answered \"HTTP/1.1 400 Bad Request\"`
		if !strings.Contains(last, want) && !strings.Contains(last, strings.ReplaceAll(want, `\"`, `"`)) {
			t.Errorf("--workers %s: the error %q; want it saying what the server answered", workers, last)
		}
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	front := launchBroker(t, "redis://"+silent.Addr().String()+"/0", "--workers", "0")
	if err, _ := jsonLogAttr(front.logs(), "front end started without redis; retrying", "err"); !strings.Contains(err, "the connection was accepted, and nothing answered") {
		t.Errorf("a front end whose broker accepts and answers nothing: its start says %q; want what it waits for", err)
	}
	if front.exited() {
		t.Errorf("a front end whose broker accepts and answers nothing exited; want it retrying:\n%s", front.logs())
	}
}

// TestBrokerAPermissionRefusedAtStartIsSaidSo: a front end or a node whose
// user Redis refuses a permission at start runs on, retrying, as an
// operator may grant it, and says that Redis refuses it a permission
// rather than that it started without Redis.
func TestBrokerAPermissionRefusedAtStartIsSaidSo(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// The front end's checks refresh its reply stream's time to live; a
	// node's join lists its stream.
	for _, tc := range []struct{ less, workers, who string }{{"-expire", "0", "front end"}, {"-sadd", "1", "node"}} {
		rs.Do(t, "ACL", "SETUSER", "limited", "reset", "on", ">pw", "~*", "&*", "+@all", tc.less)
		s := launchBroker(t, "redis://limited:pw@"+rs.Addr()+"/0", "--workers", tc.workers, "--model", "echo")
		msg := tc.who + " started, but redis refuses its user a permission; retrying until it is granted (the README's \"Many machines\" lists what the user needs)"
		if err := brokerLogField(t, s, msg, "err"); !strings.Contains(err, "NOPERM") {
			t.Errorf("%s, its user %s: the start's refusal says %q; want Redis's NOPERM", tc.who, tc.less, err)
		}
		if strings.Contains(s.logs(), tc.who+" started without redis") || s.exited() {
			t.Errorf("%s, its user %s: it says it started without redis, or exited:\n%s", tc.who, tc.less, s.logs())
		}
	}
}

// TestBrokerPasswordChangedWhileServing: a front end whose password Redis
// stops taking once it serves answers 503, naming WRONGPASS, rather than
// exiting: the password may be set back, or the server restarted with the
// new one, as an operator sees fit.
func TestBrokerPasswordChangedWhileServing(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{User: "alice", UserPassword: "pw"})
	node := startBrokerNode(t, rs, "--workers", "1")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	rs.Do(t, "ACL", "SETUSER", "alice", "resetpass", ">rotated")
	rs.Do(t, "CLIENT", "KILL", "USER", "alice")
	var last prediction
	waitFor(t, "a request refused naming WRONGPASS", brokerWait, func() bool {
		p, err := predictWithin(front, requestTimeout, 0, "hi")
		last = p
		return err == nil && p.Status == http.StatusServiceUnavailable && strings.Contains(p.Error, "WRONGPASS")
	})
	if front.exited() {
		t.Errorf("the front end exited once Redis took its password no more (%s); want it answering 503:\n%s", last, front.logs())
	}
	// The node's loops, refused several times a second, log the outage
	// once, as an outage (an error), and not a warning at every refusal.
	waitFor(t, "the node's heartbeats refused for a while", brokerWait, func() bool {
		return strings.Count(node.logs(), "WRONGPASS") > 0 && strings.Contains(node.logs(), "redis refuses this node's authentication")
	})
	rs.Do(t, "ACL", "SETUSER", "alice", ">pw")
	waitReadyz(t, front, http.StatusOK)
	for line := range strings.Lines(node.logs()) {
		if strings.Contains(line, "WRONGPASS") && strings.Contains(line, `"level":"WARN"`) {
			t.Errorf("the node warned of a refusal of the outage: %s", line)
		}
	}
}

// TestBrokerNodeThatMayNotAnswerLeavesItsItemsToAnother: a node whose Redis
// user may not write the reply streams logs Redis's refusal and says so in
// /metrics; the item it held is answered by a node that may write, started
// after it, once --claim-idle has passed.
func TestBrokerNodeThatMayNotAnswerLeavesItsItemsToAnother(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "ACL", "SETUSER", "noreply", "on", ">pw", "~"+brokerItemsKey+"*", "~"+brokerNodesKey, "~streamer:leaving",
		"~streamer:poison", "~"+brokerStreamsKey, "~"+brokerEpochKey, "&*", "+@all")
	node := []string{"--workers", "1", "--model", "sleep:1ms,0s", "--claim-idle", "1s"}
	limited := launchBroker(t, "redis://noreply:pw@"+rs.Addr()+"/0", node...)
	brokerLogField(t, limited, "node serving items from redis", "node")
	// Its user, as one written for an earlier version, may not touch the
	// model's key: the node serves without that check, saying so.
	if err := brokerLogField(t, limited, "redis refuses the model's check: the check that the front ends and nodes under this prefix serve one model, of one version of streamer, is off (let the user run scripts, EVALSHA and EVAL, and read and write "+brokerModelKey+")", "err"); !strings.Contains(err, "NOPERM") {
		t.Errorf("the refusal of the model's key logged with %q; want Redis's NOPERM", err)
	}
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	waiting := predictLater(front, brokerWait, "x")
	why := brokerLogField(t, limited, "redis refuses this node's answers: its user lacks a permission; it takes no items and leaves those it holds to other nodes until a write goes through", "err")
	if !strings.Contains(why, "NOPERM") {
		t.Errorf("the node's log says %q; want Redis's NOPERM", why)
	}
	wantMetrics(t, limited, "streamer_broker_node_refused 1")
	startBrokerNode(t, rs, node...)
	if a := <-waiting; a.err != nil || a.p.Status != http.StatusOK || len(a.p.Outputs) != 1 || a.p.Outputs[0] != "x" {
		t.Errorf("the item the refused node held: %s, %v; want 200 with its input, from the other node", a.p, a.err)
	}
}

// sentinelFleet starts a master, its replica and a Sentinel watching them
// as "main", a node of workers workers of the sleep model and a front end
// given the Sentinel's URL, and returns once the front end is ready.
func sentinelFleet(t *testing.T, workers int) (master, replica, sentinel *redistest.Server, front *server) {
	t.Helper()
	master, replica, sentinel = redistest.StartFailover(t, "main", "s3cret")
	url := sentinel.FailoverURL()
	node := launchBroker(t, url, "--workers", strconv.Itoa(workers), "--model", "sleep:1ms,0s")
	brokerLogField(t, node, "node serving items from redis", "node")
	front = launchBroker(t, url, "--workers", "0")
	waitReadyz(t, front, http.StatusOK)
	return master, replica, sentinel, front
}

// awaitPromoted waits for sentinel to name replica the master of "main".
func awaitPromoted(t *testing.T, sentinel, replica *redistest.Server) {
	t.Helper()
	promoted := strings.Replace(replica.Addr(), ":", "\n", 1)
	waitFor(t, "the sentinel to promote the replica", brokerWait, func() bool {
		return sentinel.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main") == promoted
	})
}

// TestBrokerFollowsASentinelFailover: a front end and a node given a
// Sentinel's URL (?master_name=) serve through the master it names, and,
// once that master's machine is gone and the Sentinel has promoted the
// replica, through the replica, without a restart.
func TestBrokerFollowsASentinelFailover(t *testing.T) {
	master, replica, sentinel, front := sentinelFleet(t, 1)
	if p, err := predictWithin(front, requestTimeout, 0, "before"); err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "before" {
		t.Fatalf("through the first master: %s, %v; want 200 with its input", p, err)
	}

	master.Vanish(t)
	awaitPromoted(t, sentinel, replica)
	waitFor(t, "a request answered through the promoted replica", brokerWait, func() bool {
		p, err := predictWithin(front, requestTimeout, 0, "after")
		return err == nil && p.Status == http.StatusOK && len(p.Outputs) == 1 && p.Outputs[0] == "after"
	})
	if n := redisItems(t, replica); n != 0 {
		t.Errorf("%d items left on the promoted replica's stream; want none", n)
	}
}

// TestBrokerAPlannedSentinelFailoverFailsFew: under load, a planned
// failover (SENTINEL FAILOVER) fails at most the requests whose commands
// were on the old master's connections as the client closed them, not
// every request until the front end's next check: go-redis closes its
// connections to the old master, those in use too, and the front end took
// "use of closed network connection" for Redis down (a review counted 199
// and 497 requests answered 503 in 100 to 250 ms, with the new master
// serving). The load goes on through the new master.
func TestBrokerAPlannedSentinelFailoverFailsFew(t *testing.T) {
	master, replica, sentinel, front := sentinelFleet(t, 2)

	const clients = 8
	var answered, unavailable atomic.Int64
	var others, refusals []string
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				in := fmt.Sprint(c, "-", i)
				p, err := predictWithin(front, requestTimeout, 0, in)
				switch {
				case err == nil && p.Status == http.StatusOK && len(p.Outputs) == 1 && p.Outputs[0] == in:
					answered.Add(1)
				case err == nil && p.Status == http.StatusServiceUnavailable:
					if unavailable.Add(1) <= 3 {
						mu.Lock()
						refusals = append(refusals, p.Error)
						mu.Unlock()
					}
				default:
					mu.Lock()
					others = append(others, fmt.Sprintf("%s: %s, %v", in, p, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	waitFor(t, "the load to flow", brokerWait, func() bool { return answered.Load() >= 100 })
	// SENTINEL FAILOVER does not wait for the replica: one that lags
	// (a machine short of CPU) is promoted without the master's last
	// writes, which the front end rightly fails requests for. Here it
	// lacks at most what came in the moment before.
	master.AwaitReplicated(t, replica)
	sentinel.Do(t, "SENTINEL", "FAILOVER", "main")
	awaitPromoted(t, sentinel, replica)
	after := answered.Load()
	waitFor(t, "requests answered after the switch", brokerWait, func() bool { return answered.Load() >= after+300 })
	close(stop)
	wg.Wait()
	if len(others) > 0 {
		t.Errorf("requests neither answered nor refused 503: %q", others)
	}
	// Those under way as the client closed the connections, each client's
	// one, and perhaps its next on a connection closed too.
	if n := unavailable.Load(); n > 2*clients {
		t.Errorf("%d requests answered 503 through the failover (the first: %q), %d answered; want no more than two a client, those under way as the connections closed", n, refusals, answered.Load())
	}
	t.Logf("%d requests answered, %d answered 503", answered.Load(), unavailable.Load())
}

// TestBrokerSentinelOverTLSChecksEachHostsCertificate: given a rediss://
// Sentinel URL and no --broker-ca (the test's CA trusted as the system's),
// a node and a front end check each certificate against the host they
// dial: the Sentinel's against its name, localhost, and the master's
// against the address the Sentinel names, 127.0.0.1, which its certificate
// names alone.
func TestBrokerSentinelOverTLSChecksEachHostsCertificate(t *testing.T) {
	master := redistest.Start(t, redistest.Options{TLS: true})
	sentinel := redistest.Start(t, redistest.Options{TLS: true, Watch: master, MasterName: "main"})
	t.Setenv("SSL_CERT_FILE", master.CAFile()) // the system's CAs, for the processes started below
	url := sentinel.FailoverURL()
	node := startBrokerNodeAt(t, url, "--workers", "1", "--model", "echo")
	front := launchBroker(t, url, "--workers", "0")
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "hi"); err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "hi" {
		t.Errorf("through %s: %s, %v; want 200 with its input", url, p, err)
	}
	if logs := node.logs() + front.logs(); strings.Contains(logs, "x509") {
		t.Errorf("a certificate was refused:\n%s", logs)
	}
}

// TestBrokerSentinelMistakesAreRefusedAtStart: given a Sentinel's URL with
// a wrong sentinel_password, serve exits 1 at start, naming the Sentinels'
// password (not the master's, nor the wrong one itself); so it does with a
// master_name the Sentinel does not know, and with a Sentinel's address
// and no master_name. With the right URL, a node and a front end serve.
func TestBrokerSentinelMistakesAreRefusedAtStart(t *testing.T) {
	master := redistest.Start(t, redistest.Options{Password: "m4ster"})
	sentinel := redistest.Start(t, redistest.Options{Watch: master, MasterName: "main", Password: "watch3r"})
	url := sentinel.FailoverURL()
	wrong := strings.Replace(url, "watch3r", "wr0ng", 1)
	if wrong == url {
		t.Fatalf("the Sentinel's URL %s lacks its password", url)
	}
	for _, workers := range []string{"0", "1"} {
		last := refusedAtStart(t, []string{"--workers", workers, "--model", "echo", "--broker", wrong})
		if !strings.Contains(last, "the Sentinels' user and password") || strings.Contains(last, "wr0ng") {
			t.Errorf("--workers %s, a wrong sentinel_password: %q; want the Sentinels' password named, and not shown", workers, last)
		}
	}
	for _, tc := range []struct{ name, url, want string }{
		{"an unknown master_name", strings.Replace(url, "master_name=main", "master_name=mian", 1), "the Sentinels know no master of the URL's master_name"},
		{"no master_name", "redis://:watch3r@" + sentinel.Addr() + "/0", "is a Sentinel, which keeps no data: name the master it watches in the URL, ?master_name=NAME"},
		// Without its password, the Sentinel refuses INFO, and says it
		// knows no data command.
		{"no master_name nor password", "redis://" + sentinel.Addr() + "/0", "is it a Sentinel (then name the master it watches, ?master_name=NAME)"},
	} {
		if last := refusedAtStart(t, []string{"--workers", "0", "--broker", tc.url}); !strings.Contains(last, tc.want) {
			t.Errorf("%s: %q; want it saying %q", tc.name, last, tc.want)
		}
	}
	startBrokerNodeAt(t, url, "--workers", "1", "--model", "echo")
	front := launchBroker(t, url, "--workers", "0")
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "hi"); err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "hi" {
		t.Errorf("with the Sentinels' password: %s, %v; want 200 with its input", p, err)
	}
}

// TestBrokerStatusCommand: `streamer status` shows what a front end and a
// node know of Redis and did through it, and why a front end is not ready.
func TestBrokerStatusCommand(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, 0)
	out, err := runStatus(t, front.URL())
	if err != nil || !regexp.MustCompile(`(?m)^ready +no: unavailable: no node is alive on redis`).MatchString(out) {
		t.Errorf("streamer status of a front end with no node: %v; want it not ready, saying why:\n%s", err, out)
	}
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "echo")
	waitReadyz(t, front, http.StatusOK)
	for i := range 3 {
		if p, err := predictWithin(front, requestTimeout, 0, fmt.Sprint("s", i)); err != nil || p.Status != http.StatusOK {
			t.Fatalf("request %d: %s, %v", i, p, err)
		}
	}
	out, err = runStatus(t, front.URL())
	for _, want := range []string{`(?m)^ready +yes$`, `(?m)^redis +up, nodes heard from 1, backlog 0 of \d+ items$`, `(?m)^front end +answers dropped 0 \(late, or second: a claim, a write retried\), withdrawn 0, lost 0$`,
		`(?m)^items +answered 3 \(ok 3, `, `(?m)^mean latency +end to end \d+\.\d+ ms$`, `(?m)^workers +none of its own, a front end: its nodes form the batches`} {
		if err != nil || !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("streamer status of the front end: %v; lacks %s:\n%s", err, want, out)
		}
	}
	// It forms no batches and has no slots: no empty figures of them.
	for _, unwanted := range []string{"SLOT", "mean batch size", "dispatch reasons", "batch cost"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("streamer status of the front end says %q:\n%s", unwanted, out)
		}
	}
	out, err = runStatus(t, node.URL())
	if err != nil || !regexp.MustCompile(`(?m)^node +read 3, claimed 0, answered 3, `).MatchString(out) {
		t.Errorf("streamer status of the node: %v; want its traffic, 3 items read and answered:\n%s", err, out)
	}
	// Its workers' items waited and ran; it had no callers of its own.
	if want := `(?m)^mean latency +queue wait \d+\.\d+ ms, compute \d+\.\d+ ms, of its workers' items; end to end -, of its callers' through redis$`; !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("streamer status of the node lacks %s:\n%s", want, out)
	}
}

// serveThrough runs a node and a front end on rs, both with extra flags,
// and checks a request is answered.
func serveThrough(t *testing.T, rs *redistest.Server, extra ...string) {
	t.Helper()
	startBrokerNode(t, rs, append([]string{"--workers", "1"}, extra...)...)
	front := startBrokerFront(t, rs, extra...)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "hi"); err != nil || p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != "hi" {
		t.Fatalf("through %s: %s, %v", rs.URL(), p, err)
	}
}

// refusedThrough runs a front end on url that Redis refuses, and checks
// that requests get 503 with a message holding one of why.
func refusedThrough(t *testing.T, url string, why []string) {
	t.Helper()
	front := launchBroker(t, url, "--workers", "0")
	p, err := predictWithin(front, 3*time.Second, 0, "hi")
	if err != nil {
		t.Fatal(err)
	}
	said := false
	for _, w := range why {
		said = said || strings.Contains(p.Error, w)
	}
	if p.Status != http.StatusServiceUnavailable || !said {
		t.Errorf("%s; want 503 saying why (one of %q)", p, why)
	}
	status, body, err := front.get("/readyz")
	said = false
	for _, w := range why {
		said = said || strings.Contains(string(body), w)
	}
	if err != nil || status == http.StatusOK || !said {
		t.Errorf("GET /readyz: %d %s, %v; want not ready, saying why (one of %q)", status, body, err, why)
	}
}

// TestBrokerConnectionsGoneSilent: every connection of a front end and a
// node to Redis goes silent at once, neither closed nor answered (a
// firewall or a NAT that forgot them), while the node runs an item: the
// item's caller gets its answer or a 503 naming Redis, never a hang, and
// both processes go on over new connections.
func TestBrokerConnectionsGoneSilent(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	proxy := redistest.StartProxy(t, rs)
	node := launchBroker(t, proxy.URL(), "--workers", "1", "--model", "sleep:1s,0s")
	name := brokerLogField(t, node, "node serving items from redis", "node")
	waitReadyz(t, node, http.StatusOK)
	front := launchBroker(t, proxy.URL(), "--workers", "0")
	waitReadyz(t, front, http.StatusOK)
	running := predictLater(front, brokerWait, "running")
	waitFor(t, "the node to hold the item", brokerWait, func() bool { return len(redisPending(t, rs, name)) == 1 })

	if n := proxy.Cut(); n < 2 {
		t.Fatalf("%s: %d connections cut; want the front end's and the node's", proxy, n)
	}
	a := <-running
	if a.err != nil {
		t.Fatalf("the request running as its connections went silent: %v; want an answer", a.err)
	}
	t.Logf("the request running as its connections went silent: %d", a.p.Status)
	if a.p.Status != http.StatusOK && (a.p.Status != http.StatusServiceUnavailable || !strings.Contains(a.p.Error, "redis")) {
		t.Errorf("the request running as its connections went silent: %s; want 200, or 503 naming Redis", a.p)
	}
	waitFor(t, "served again over new connections", brokerWait, func() bool {
		p, err := predictWithin(front, brokerWait, 0, "after")
		return err == nil && p.Status == http.StatusOK && len(p.Outputs) == 1 && p.Outputs[0] == "after"
	})
}

// TestBrokerFrontEndStalledPastItsReplyTTL: a front end stopped (SIGSTOP)
// for longer than its --reply-ttl while a node answers its request finds
// the answer expired unread when it resumes, and tells its caller so with
// 503, rather than blaming Redis for losing the item.
func TestBrokerFrontEndStalledPastItsReplyTTL(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// The item runs long enough that the front end is stopped before its
	// answer comes, however slow the machine.
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:3s,0s")
	name := brokerLogField(t, node, "node serving items from redis", "node")
	front := startBrokerFront(t, rs, "--reply-ttl", "1s")
	waitReadyz(t, front, http.StatusOK)
	waiting := predictLater(front, brokerWait, "stalled")
	waitFor(t, "the node to hold the item", brokerWait, func() bool { return len(redisPending(t, rs, name)) == 1 })
	if err := front.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The node answers after its 3 s, and the answer expires a second
	// after that.
	waitFor(t, "the answer written and expired", brokerWait, func() bool {
		return len(redisPending(t, rs, name)) == 0 && len(redisKeys(t, rs, brokerReplyKeys+"*")) == 0
	})
	if err := front.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a := <-waiting
	if a.err != nil || a.p.Status != http.StatusServiceUnavailable || !strings.Contains(a.p.Error, "answers may have expired") || !strings.Contains(a.p.Error, "reply TTL of 1s") {
		t.Errorf("the caller whose answer expired while its front end stalled: %s, %v; want 503 saying the answer may have expired", a.p, a.err)
	}
	// Redis lost nothing.
	wantMetrics(t, front, "streamer_broker_lost_items_total 0")
}

// TestBrokerFrontEndServesOnThroughSIGHUP: SIGHUP, which reloads a
// server's workers, leaves a front end, which has none, serving: the
// request it holds is answered, it says why it did nothing, and it takes
// new requests. SIGHUP's default would end the process.
func TestBrokerFrontEndServesOnThroughSIGHUP(t *testing.T) {
	_, front, held := oneItemHeld(t, "sleep:1500ms,0s")
	if err := front.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the front end to log the SIGHUP", brokerWait, func() bool {
		if front.exited() {
			t.Fatalf("the front end exited on SIGHUP:\n%s", front.logs())
		}
		return strings.Contains(front.logs(), "SIGHUP: a front end has no workers to reload")
	})
	if a := <-held; a.err != nil || a.p.Status != http.StatusOK || len(a.p.Outputs) != 1 || a.p.Outputs[0] != "held" {
		t.Errorf("the request held through SIGHUP: %s, %v; want 200 with its input", a.p, a.err)
	}
	if p, err := predictWithin(front, 10*time.Second, 0, "after"); err != nil || p.Status != http.StatusOK {
		t.Errorf("a request after SIGHUP: %s, %v; want 200", p, err)
	}
	if front.exited() {
		t.Fatalf("the front end exited:\n%s", front.logs())
	}
}

// oneItemHeld runs a node of one worker of model, and a front end, on a
// Redis of their own, and sends the item "held" (its outcome comes on
// held); it returns once the node holds the item.
func oneItemHeld(t *testing.T, model string) (node, front *server, held <-chan predicted) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	node = startBrokerNode(t, rs, "--workers", "1", "--model", model)
	name := brokerLogField(t, node, "node serving items from redis", "node")
	front = startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	held = predictLater(front, 10*time.Second, "held")
	waitFor(t, "the node to hold the item", brokerWait, func() bool { return len(redisPending(t, rs, name)) == 1 })
	return node, front, held
}

// TestBrokerANodeScaledUpReadsForItsNewWorkers: a node scaled up with
// POST /admin/workers reads as many items as its new workers can run soon,
// not only what its workers at start could (workers × batch × pipeline,
// 8 here): otherwise its new workers get a share of the load, in small
// batches.
func TestBrokerANodeScaledUpReadsForItsNewWorkers(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--model", "sleep:1s,0s", "--workers", "1", "--batch-size", "4", "--admin", "--auth-token", adminToken)
	node.token = adminToken
	front := startBrokerFront(t, rs, "--model", "sleep:1s,0s", "--batch-size", "4")
	waitReadyz(t, front, http.StatusOK)
	if status, answer := node.admin(t, "/admin/workers", `{"workers": 4}`); status != http.StatusOK {
		t.Fatalf("POST /admin/workers to the node: %d %v", status, answer)
	}
	const clients = 32
	answers := make(chan error, clients)
	for i := range clients {
		go func() {
			p, err := predictWithin(front, brokerWait, 0, fmt.Sprint("item ", i))
			if err == nil && p.Status != http.StatusOK {
				err = fmt.Errorf("status %d: %s", p.Status, p.Error)
			}
			answers <- err
		}()
	}
	most := 0
	waitFor(t, "the scaled node to hold more items than its one worker could", brokerWait, func() bool {
		var st struct {
			Broker struct {
				Node struct {
					Held int `json:"held"`
				} `json:"node"`
			} `json:"broker"`
		}
		if status, body, err := node.get("/v1/stats"); err != nil || status != http.StatusOK || json.Unmarshal(body, &st) != nil {
			return false
		}
		most = max(most, st.Broker.Node.Held)
		return most > 8
	})
	for range clients {
		if err := <-answers; err != nil {
			t.Errorf("a request through the front end: %v", err)
		}
	}
}
