package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// recorder is an in-process model that answers each item with itself and
// remembers what it ran, in order. Items named in hold wait for release;
// items named in fail are refused by the model; an item "panic" panics.
type recorder struct {
	mu      sync.Mutex
	ran     []string
	hold    map[string]bool
	release chan struct{}
}

func newRecorder() *recorder { return &recorder{hold: map[string]bool{}, release: make(chan struct{})} }

func (r *recorder) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	errs := make([]error, len(items))
	failed := false
	for i, it := range items {
		s := string(it)
		r.mu.Lock()
		r.ran = append(r.ran, s)
		held := r.hold[s]
		r.mu.Unlock()
		switch {
		case s == "panic":
			panic("the model cannot take this item")
		case strings.HasPrefix(s, "bad"):
			errs[i], failed = fmt.Errorf("item %q is not valid", s), true
		}
		if held {
			select {
			case <-r.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if failed {
		return items, &model.ItemErrors{Errs: errs}
	}
	return items, nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) runs(item string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.ran {
		if s == item {
			n++
		}
	}
	return n
}

func (r *recorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// startNode runs a node with an in-process streamer around m.
func startNode(t *testing.T, rs *redistest.Server, m model.Model, batch int, tweak func(*broker.NodeConfig)) *broker.Node {
	t.Helper()
	return startNodeOn(t, rs, supervisor.Config{InProcess: m, Workers: 1, BatchSize: batch, MaxLatency: time.Millisecond}, tweak)
}

// startNodeOn starts a node on a streamer of its own set up by sc, with a
// capacity of two batches.
func startNodeOn(t *testing.T, rs *redistest.Server, sc supervisor.Config, tweak func(*broker.NodeConfig)) *broker.Node {
	t.Helper()
	st := startStreamer(t, sc)
	cfg := broker.NodeConfig{Config: broker.Config{URL: rs.URL(), ClaimIdle: 400 * time.Millisecond}, Streamer: st, Capacity: 2 * sc.BatchSize}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := broker.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the node stops before its streamer.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

// startStreamer starts an in-process streamer for cfg, shut down when the
// test ends.
func startStreamer(t testing.TB, cfg supervisor.Config) *supervisor.Streamer {
	t.Helper()
	st, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.Shutdown(ctx)
	})
	return st
}

func startFront(t *testing.T, rs *redistest.Server, tweak func(*broker.FrontEndConfig)) *broker.FrontEnd {
	t.Helper()
	cfg := broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}}
	if tweak != nil {
		tweak(&cfg)
	}
	fe, err := broker.NewFrontEnd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fe.Close(ctx)
	})
	return fe
}

// eventually polls cond until it holds, failing the test after 30s: a
// whole race-detector run of every package loads a small machine enough
// that a node's start and four requests through Redis once took more than
// 10s. A wait that holds returns as soon as it does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// oneRunning starts a node with room for one item and a front end, and
// sends item, which the node runs until the recorder's release is closed:
// what is sent next waits unread in Redis.
func oneRunning(t *testing.T, rs *redistest.Server, item string) (*recorder, *broker.FrontEnd, <-chan answer) {
	t.Helper()
	rec := newRecorder()
	rec.hold[item] = true
	startNode(t, rs, rec, 1, func(c *broker.NodeConfig) { c.Capacity = 1 })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, item)
	eventually(t, "the node runs "+item, func() bool { return rec.runs(item) == 1 })
	return rec, fe, later
}

// runningThrough starts a node and a front end that reach rs through url
// (a Sentinel, a proxy), has a first request answered, and sends
// "running", which the node runs until the recorder's release is closed.
func runningThrough(t *testing.T, rs *redistest.Server, url string) (*recorder, *broker.FrontEnd, <-chan answer) {
	t.Helper()
	rec := newRecorder()
	rec.hold["running"] = true
	startNode(t, rs, rec, 4, func(c *broker.NodeConfig) { c.URL = url })
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.URL = url })
	eventually(t, "front end ready", fe.Ready)
	if out, err := predict(t, fe, "before"); err != nil || string(out[0]) != "before" {
		t.Fatalf("a first request: %q, %v", out, err)
	}
	running := predictLater(t, fe, "running")
	eventually(t, "the node runs the item", func() bool { return rec.runs("running") == 1 })
	return rec, fe, running
}

// runningEnds returns the outcome of runningThrough's call once its item
// is released, which must come within 10 s: its own output, or
// ErrUnavailable naming Redis. during says what its item ran through.
func runningEnds(t *testing.T, running <-chan answer, during string) answer {
	t.Helper()
	a := answerWithin(t, running, 10*time.Second, "the call whose item ran "+during+" is still waiting 10s after")
	if a.err != nil && (!errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "redis")) {
		t.Errorf("the call whose item ran %s: %v; want its answer or ErrUnavailable naming Redis", during, a.err)
	}
	if a.err == nil && string(a.out[0]) != "running" {
		t.Errorf("the call whose item ran %s: %q; want its own input", during, a.out)
	}
	return a
}

// startNodeFailing starts a node for cfg whose Redis does not serve it yet,
// and returns it with the error of its start, which it requires. The
// node runs on, retrying, until the test ends.
func startNodeFailing(t *testing.T, cfg broker.NodeConfig) (*broker.Node, error) {
	t.Helper()
	n, err := broker.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	err = n.Start(context.Background())
	if err == nil {
		t.Fatal("the node started without an error, though its Redis does not serve it")
	}
	return n, err
}

// fakeNode makes front ends see a live node, so that items wait in Redis
// for a real node started later.
func fakeNode(t *testing.T, rs *redistest.Server) {
	rs.Do(t, "ZADD", "streamer:nodes", strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "fake")
}

// answersEventually waits until fe answers a request of item with item
// (what is the test's wait, for its message).
func answersEventually(t *testing.T, fe *broker.FrontEnd, item, what string) {
	t.Helper()
	eventually(t, what, func() bool {
		out, err := predict(t, fe, item)
		return err == nil && string(out[0]) == item
	})
}

// answerWithin returns the answer that comes on later within d, or fails
// the test with late, the message of one that did not come.
func answerWithin(t *testing.T, later <-chan answer, d time.Duration, late string) answer {
	t.Helper()
	select {
	case a := <-later:
		return a
	case <-time.After(d):
		t.Fatal(late)
		return answer{}
	}
}

// onStream waits until the shared stream holds n items (what is the
// test's wait, for its message).
func onStream(t *testing.T, rs *redistest.Server, n int, what string) {
	t.Helper()
	eventually(t, what, func() bool { return rs.Do(t, "XLEN", "streamer:items") == strconv.Itoa(n) })
}

// frontWithoutNodes starts a Redis where a node seems alive and no node
// reads (fakeGroup: items wait there, and can be withdrawn), and a front
// end set up by tweak, ready.
func frontWithoutNodes(t *testing.T, tweak func(*broker.FrontEndConfig)) (*redistest.Server, *broker.FrontEnd) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	fakeGroup(t, rs)
	fe := startFront(t, rs, tweak)
	eventually(t, "front end ready", fe.Ready)
	return rs, fe
}

// fakeGroup is fakeNode with the nodes' group on the shared stream, as a
// node makes it: withdrawals, and reads a test makes by hand, work before
// any real node runs.
func fakeGroup(t *testing.T, rs *redistest.Server) {
	fakeNode(t, rs)
	rs.Do(t, "XGROUP", "CREATE", "streamer:items", "nodes", "0", "MKSTREAM")
}

// answer is one request's outcome, for a request sent from a goroutine.
type answer struct {
	out [][]byte
	err error
}

// predictLater sends items from a goroutine; the answer comes on the channel.
func predictLater(t *testing.T, fe *broker.FrontEnd, items ...string) <-chan answer {
	later := make(chan answer, 1)
	go func() {
		out, err := predict(t, fe, items...)
		later <- answer{out, err}
	}()
	return later
}

func predict(t *testing.T, fe *broker.FrontEnd, items ...string) ([][]byte, error) {
	t.Helper()
	raw := make([][]byte, len(items))
	for i, s := range items {
		raw[i] = []byte(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return fe.Predict(ctx, raw)
}

// seenWorking has the nodes behind fe answer 30 requests of one good item
// each, so that an item that then crashes their workers alone is told from
// a model that crashes whatever it runs: a model seen answering 30 batches
// convicts a bad item in two runs alone.
func seenWorking(t *testing.T, fe *broker.FrontEnd) {
	t.Helper()
	for i := range 30 {
		if _, err := predict(t, fe, fmt.Sprint("warm", i)); err != nil {
			t.Fatalf("warming up, request %d: %v", i, err)
		}
	}
}

// TestNoItemIsCountedAnsweredBeforeSubmitted: a node may answer a request
// before the front end's writer reads Redis's verdict on it; the items
// count as submitted then, not after their answers (a run saw 6 answered
// of 3 submitted once a request had returned).
func TestNoItemIsCountedAnsweredBeforeSubmitted(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 8, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	const callers, each = 4, 100
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				if _, err := predict(t, fe, "a", "b"); err != nil {
					t.Errorf("predict: %v", err)
					return
				}
				if st := fe.Stats(); st.Answered > st.Submitted {
					t.Errorf("%d items answered of %d submitted", st.Answered, st.Submitted)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := fe.Stats(); st.Submitted != 2*callers*each || st.Answered != st.Submitted {
		t.Errorf("%d submitted and %d answered; want %d of each", st.Submitted, st.Answered, 2*callers*each)
	}
}

func TestAnswersComeBackInOrderWithTheirErrors(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 8, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)

	out, err := predict(t, fe, "a", "b", "c")
	if err != nil || len(out) != 3 || string(out[0]) != "a" || string(out[1]) != "b" || string(out[2]) != "c" {
		t.Fatalf("got %q, %v; want a b c", out, err)
	}
	out, err = predict(t, fe, "x", "bad-1", "y")
	var ie *supervisor.ItemError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.Is(err, supervisor.ErrModel) || !strings.Contains(err.Error(), `"bad-1" is not valid`) {
		t.Fatalf("error %v; want item 1 refused by the model, with its message", err)
	}
	if string(out[0]) != "x" || string(out[2]) != "y" {
		t.Errorf("the other outputs: %q; want x and y", out)
	}
	if st := fe.Stats(); st.Submitted != 6 || st.Answered != 6 || st.Failed != 1 || st.Queued != 0 {
		t.Errorf("stats %+v; want 6 submitted and answered, 1 failed, none queued", st)
	}
	if n := rs.Do(t, "XLEN", "streamer:items"); n != "0" {
		t.Errorf("%s items left on the stream; want none once answered", n)
	}
}

// failing is a model whose every batch fails as a whole.
type failing struct{}

func (failing) Predict(context.Context, [][]byte) ([][]byte, error) {
	return nil, errors.New("the model is down")
}

func (failing) Close() error { return nil }

// A request whose every item failed with the one error (their batch
// failed as a whole) gets, through Redis, the error a local Streamer
// gives: an ItemError with Every set. Before, the front end said "item 0"
// with Every false, though its items had failed alike.
func TestAWholeBatchsFailureIsEveryItemsAsOnALocalServer(t *testing.T) {
	cfg := supervisor.Config{InProcess: failing{}, Workers: 1, BatchSize: 4, MaxLatency: 50 * time.Millisecond}
	rs := redistest.Start(t, redistest.Options{})
	startNodeOn(t, rs, cfg, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	items := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, local := startStreamer(t, cfg).Predict(ctx, items)
	_, remote := fe.Predict(ctx, items)
	var want, got *supervisor.ItemError
	if !errors.As(local, &want) || !want.Every {
		t.Fatalf("the local Streamer's error: %v; want an ItemError of every item", local)
	}
	if !errors.As(remote, &got) || !got.Every || got.Index != 0 || remote.Error() != local.Error() || !errors.Is(remote, supervisor.ErrModelFailed) {
		t.Errorf("the front end's error: %v (%+v); want %v, Every set, as the local Streamer's", remote, got, local)
	}
}

// TestLargeAnswersComeBackWhole: a batch's answers, packed into reply
// entries of a bounded size, reach their callers whole and in place.
func TestLargeAnswersComeBackWhole(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 8, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)

	items := make([]string, 7)
	for i := range items {
		items[i] = strings.Repeat(string(rune('a'+i)), 150<<10)
	}
	items[3] = "bad-3"
	out, err := predict(t, fe, items...)
	var ie *supervisor.ItemError
	if !errors.As(err, &ie) || ie.Index != 3 || !errors.Is(err, supervisor.ErrModel) {
		t.Fatalf("error %v; want item 3 refused by the model", err)
	}
	for i, o := range out {
		if i != 3 && string(o) != items[i] {
			t.Errorf("output %d: %d bytes starting %q; want the %d bytes of its item", i, len(o), o[:min(len(o), 8)], len(items[i]))
		}
	}
}

// A batch of large answers goes back in several writes, each small enough
// to go through within the client's write timeout on a slow link; before,
// a batch of 64 answers of some megabytes went in one write that could
// never finish within it, retried for ever.
func TestABatchOfLargeAnswersGoesInSeveralWrites(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	big := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = bytes.Repeat(it, 3<<20) // 3 MiB each
		}
		return out, nil
	})
	startNodeOn(t, rs, supervisor.Config{InProcess: big, Workers: 1, BatchSize: 4, MaxLatency: 50 * time.Millisecond}, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	rs.Do(t, "CONFIG", "RESETSTAT")
	out, err := predict(t, fe, "a", "b", "c", "d")
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if len(o) != 3<<20 || o[0] != "abcd"[i] {
			t.Errorf("output %d: %d bytes; want 3 MiB of %c", i, len(o), "abcd"[i])
		}
	}
	// One acknowledgement per write: four answers of 3 MiB, 4 MiB a write.
	stats := rs.Do(t, "INFO", "commandstats")
	if !strings.Contains(stats, "cmdstat_xack:calls=4,") {
		t.Errorf("acknowledgements: %q; want 4 calls, a write per answer", grepLine(stats, "cmdstat_xack"))
	}
}

// grepLine returns the line of text that begins with prefix.
func grepLine(text, prefix string) string {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestMalformedItemsAreDroppedAndServingGoesOn: an entry on the items
// stream whose header does not read, or that has no value, is never run:
// it is answered with an error when its header names a front end, and
// acknowledged and deleted in any case, and the node goes on serving.
func TestMalformedItemsAreDroppedAndServingGoesOn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	startNode(t, rs, rec, 8, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)

	rs.Do(t, "XADD", "streamer:items", "*", "h", "not a header", "v", "garbage")
	rs.Do(t, "XADD", "streamer:items", "*", "h", "front 1 0 0 60000")
	rs.Do(t, "XADD", "streamer:items", "*", "v", "no header")
	// One that names this front end is answered, with an error: the
	// front end, which sent no request 999, counts a stray answer.
	rs.Do(t, "XADD", "streamer:items", "*", "h", fe.ID()+" 999 0 soon 60000", "v", "bad deadline")
	eventually(t, "the malformed item naming the front end to be answered", func() bool { return fe.Duplicates() == 1 })
	out, err := predict(t, fe, "fine")
	if err != nil || len(out) != 1 || string(out[0]) != "fine" {
		t.Fatalf("a request after the malformed items: %q, %v; want fine", out, err)
	}
	eventually(t, "the malformed items to leave the stream", func() bool {
		return rs.Do(t, "XLEN", "streamer:items") == "0"
	})
	if got := rec.order(); len(got) != 1 || got[0] != "fine" {
		t.Errorf("the model ran %q; want only the request's item", got)
	}
}

func TestItemsAreServedInArrivalOrderAcrossFrontEnds(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	fronts := []*broker.FrontEnd{startFront(t, rs, nil), startFront(t, rs, nil)}
	for _, fe := range fronts {
		eventually(t, "front end ready", fe.Ready)
	}
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		fe := fronts[i%2]
		wg.Go(func() { _, errs[i] = predict(t, fe, fmt.Sprint(i)) })
		// The next is sent once this one is on the stream: the arrival
		// order is known.
		eventually(t, "item on the stream", func() bool { return rs.Do(t, "XLEN", "streamer:items") == fmt.Sprint(i+1) })
	}
	rec := newRecorder()
	startNode(t, rs, rec, 1, nil)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	if got := rec.order(); !slices.Equal(got, want) {
		t.Errorf("ran in order %v; want %v", got, want)
	}
}

func TestASilentNodesItemsAreClaimedAndAnsweredOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	stuck := newRecorder()
	stuck.hold["slow"] = true
	a := startNode(t, rs, stuck, 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)

	later := predictLater(t, fe, "slow")
	eventually(t, "the first node holds the item", func() bool { return stuck.runs("slow") == 1 })
	// The node goes silent: it stops reading, keeping and writing, and
	// leaves its item unacknowledged, as a node killed would.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Shutdown(ctx); err == nil {
		t.Fatal("the node's shutdown left nothing to claim")
	}
	other := newRecorder()
	b := startNode(t, rs, other, 4, nil)
	if a := <-later; a.err != nil || string(a.out[0]) != "slow" {
		t.Fatalf("got %q, %v; want the item answered by the other node", a.out, a.err)
	}
	if other.runs("slow") != 1 || b.Stats().Claimed != 1 {
		t.Errorf("the other node ran the item %d times and claimed %d; want 1 and 1", other.runs("slow"), b.Stats().Claimed)
	}
	// The first node's model finishes late; nobody writes its answer, and
	// a second answer would be dropped anyway.
	close(stuck.release)
	if n := rs.Do(t, "XLEN", "streamer:items"); n != "0" {
		t.Errorf("%s items left on the stream; want none", n)
	}
}

func TestADuplicateAnswerIsDropped(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "q")
	onStream(t, rs, 1, "item on the stream")
	reply := "streamer:reply:" + fe.ID()
	// Two nodes answer the same item: the first answer counts.
	rs.Do(t, "XADD", reply, "*", "q", "1", "i", "0", "o", "first")
	rs.Do(t, "XADD", reply, "*", "q", "1", "i", "0", "o", "second")
	if a := <-later; a.err != nil || string(a.out[0]) != "first" {
		t.Fatalf("got %q, %v; want the first answer", a.out, a.err)
	}
	eventually(t, "the second answer dropped", func() bool { return fe.Duplicates() == 1 })
}

func TestTheSharedBacklogIsBounded(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.MaxBacklog = 4 })
	eventually(t, "front end ready", fe.Ready)
	var wg sync.WaitGroup
	// The four wait until the test is done with them: one given up sooner
	// would take its item off the stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range 4 {
		wg.Go(func() { _, _ = fe.Predict(ctx, [][]byte{[]byte(fmt.Sprint(i))}) })
	}
	onStream(t, rs, 4, "4 items on the stream")
	_, err := predict(t, fe, "one too many")
	if !errors.Is(err, supervisor.ErrOverloaded) {
		t.Fatalf("error %v; want ErrOverloaded", err)
	}
	if !fe.FullWhenSeen() {
		t.Error("Full is false after a one-item request was refused")
	}
	// Past the hold, with no check since, the backlog may have room that
	// the nodes freed: requests are read and sent again, and the first
	// refused tells.
	if fe.FullPastHold() {
		t.Error("Full is still true past the hold since the backlog was seen full: requests would be refused unread until the next check, while the nodes free room")
	}
}

// A request of more items than the shared backlog may ever hold is too
// large (413), not a reason to retry later (429); one that fits the bound
// but not the backlog waits for its room, and small requests are refused
// meanwhile, unread (Full), as a local server refuses them.
func TestARequestLargerThanTheBacklogIsTooLarge(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.MaxBacklog = 4 })
	eventually(t, "front end ready", fe.Ready)
	if _, err := predict(t, fe, "1", "2", "3", "4", "5"); !errors.Is(err, supervisor.ErrTooLarge) {
		t.Fatalf("5 items, backlog limit 4: %v; want ErrTooLarge", err)
	}
	waiting := predictLater(t, fe, "a")
	onStream(t, rs, 1, "1 item on the stream")
	four := predictLater(t, fe, "1", "2", "3", "4")
	eventually(t, "room kept for 4 items on a backlog of 1, limit 4", func() bool { return strings.HasPrefix(rs.Do(t, "GET", "streamer:room"), "4 ") })
	eventually(t, "the front end full for small requests, with room kept for 4 on a backlog of 1, limit 4", fe.FullWhenSeen)
	startNode(t, rs, newRecorder(), 4, nil)
	if a := <-waiting; a.err != nil {
		t.Errorf("the waiting request: %v", a.err)
	}
	if a := <-four; a.err != nil || len(a.out) != 4 {
		t.Errorf("the 4-item request, once the node ran the first: %q, %v; want its 4 answers", a.out, a.err)
	}
}

// Larger than most is judged by the requests every front end admitted of
// late: a front end that carries only large requests keeps room for them,
// rather than take their size for the common one and see them refused for
// ever while another front end's small ones fill every place that frees.
func TestRoomIsKeptByTheSizesOfEveryFrontEnd(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	bound := func(c *broker.FrontEndConfig) { c.MaxBacklog = 40 }
	smalls, larges := startFront(t, rs, bound), startFront(t, rs, bound)
	eventually(t, "front ends ready", func() bool { return smalls.Ready() && larges.Ready() })

	first := predictLater(t, larges, "1", "2", "3", "4")
	onStream(t, rs, 4, "the first large request on the stream")
	singles := make([]<-chan answer, 36)
	for i := range singles {
		singles[i] = predictLater(t, smalls, strconv.Itoa(i))
	}
	onStream(t, rs, 40, "the backlog full of one-item requests")
	mean, err := strconv.Atoi(rs.Do(t, "GET", "streamer:sizes"))
	if err != nil || mean <= 1024 || mean >= 1536 {
		t.Fatalf("the mean size kept is %d/1024 items (%v); want between 1 and 1.5 after a request of 4 items and 36 of one", mean, err)
	}

	// The backlog is full for the front end of small requests, whose
	// callers' requests are refused unread over HTTP, and not for the one
	// whose requests are larger than most: they have room kept for them.
	eventually(t, "both front ends seeing the backlog full", func() bool {
		return smalls.FrontEndStats().Backlog == 40 && larges.FrontEndStats().Backlog == 40
	})
	eventually(t, "the front end of small requests full", smalls.FullWhenSeen)
	if larges.FullWhenSeen() {
		t.Error("the front end of large requests is full: it would refuse them unread")
	}

	// Three items, more than twice the mean: room is kept for them, though
	// their front end has seen nothing smaller.
	next := predictLater(t, larges, "a", "b", "c")
	eventually(t, "room kept for the 3-item request", func() bool { return strings.HasPrefix(rs.Do(t, "GET", "streamer:room"), "3 ") })
	startNode(t, rs, newRecorder(), 4, nil)
	for i, c := range singles {
		if a := <-c; a.err != nil {
			t.Errorf("one-item request %d: %v", i, a.err)
		}
	}
	for _, c := range []<-chan answer{first, next} {
		if a := <-c; a.err != nil {
			t.Errorf("a large request: %v", a.err)
		}
	}
}

// A node that read the item died with it: the front end, whose caller gave
// up, leaves it to the node that claims it (see withdrawScript), which must
// not run it.
// redis7 says whether rs is Redis 7.0 or later, whose scripts know
// redis.REDIS_VERSION_NUM, and whose claims pass over deleted entries: a
// front end withdraws the items a node holds only there.
func redis7(t *testing.T, rs *redistest.Server) bool {
	t.Helper()
	return rs.Do(t, "EVAL", "return redis.REDIS_VERSION_NUM or 0", "0") != "0"
}

// needsRedis7 skips a test of what a front end does only with Redis 7.0
// or later (see redis7), against an older one.
func needsRedis7(t *testing.T, rs *redistest.Server) {
	t.Helper()
	if !redis7(t, rs) {
		t.Skip("a front end withdraws the items a node holds from Redis 7.0 on; this Redis is older")
	}
}

// heldByADeadNode sends item with a deadline a second away, and has a
// node that then dies (a consumer that reads it and does no more) hold
// it. The call's error comes on the channel once its deadline passes.
func heldByADeadNode(t *testing.T, rs *redistest.Server, fe *broker.FrontEnd, item string) <-chan error {
	t.Helper()
	late := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := fe.Predict(ctx, [][]byte{[]byte(item)})
		late <- err
	}()
	onStream(t, rs, 1, "the item on the stream")
	if rs.Do(t, "XREADGROUP", "GROUP", "nodes", "dead", "STREAMS", "streamer:items", ">") == "" {
		t.Fatal("the dead node read nothing")
	}
	return late
}

// An item whose deadline passed while a node that then died held it is
// dropped by the node that claims it, never run. (Its front end withdraws
// the items of a call past its deadline, from Redis 7.0 on those a node
// holds too; this one cannot, its XDEL refused, as a front end cut off
// from Redis could not either.)
func TestItemsWhoseDeadlinePassedInRedisNeverRun(t *testing.T) {
	var logs syncbuf.Buffer
	rs, fe := frontWithoutNodes(t, func(c *broker.FrontEndConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	late := heldByADeadNode(t, rs, fe, "late")
	withdraws := redis7(t, rs)
	if withdraws {
		rs.Do(t, "ACL", "SETUSER", "default", "-xdel")
	}
	if err := <-late; !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("error %v; want ErrDeadline", err)
	}
	if withdraws {
		eventually(t, "the front end's withdrawal, refused", func() bool {
			return strings.Contains(logs.String(), "withdraw the items of requests no longer waiting")
		})
		rs.Do(t, "ACL", "SETUSER", "default", "+xdel")
	}
	rec := newRecorder()
	n := startNode(t, rs, rec, 4, nil)
	eventually(t, "the item dropped by the node", func() bool { return n.Stats().Expired == 1 })
	if rec.runs("late") != 0 {
		t.Error("the model ran an item whose deadline had passed")
	}
	onStream(t, rs, 0, "the stream empty")
}

// The items of a call given up (here past its deadline) are withdrawn even
// while a node holds them, from Redis 7.0 on: that node runs them still,
// but should it die, no claim runs them again for nobody, and they free
// their memory at once.
func TestItemsANodeHoldsAreWithdrawnWhenTheirCallerGivesUp(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	needsRedis7(t, rs)
	late := heldByADeadNode(t, rs, fe, "given up")
	if err := <-late; !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("error %v; want ErrDeadline", err)
	}
	onStream(t, rs, 0, "the item withdrawn, though a node holds it")
	rec := newRecorder()
	n := startNode(t, rs, rec, 4, nil)
	if out, err := predict(t, fe, "next"); err != nil || string(out[0]) != "next" {
		t.Fatalf("a request after: %q, %v", out, err)
	}
	eventually(t, "the dead node's claims to go", func() bool { return strings.HasPrefix(rs.Do(t, "XPENDING", "streamer:items", "nodes"), "0") })
	if rec.runs("given up") != 0 || n.Stats().Expired != 0 {
		t.Errorf("the withdrawn item ran %d times, expired %d; want neither", rec.runs("given up"), n.Stats().Expired)
	}
}

func TestAPoisonItemIsRefusedByEveryNode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	first := newRecorder()
	a := startNode(t, rs, first, 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	seenWorking(t, fe)
	if _, err := predict(t, fe, "panic"); !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("error %v; want ErrPoison from the first node", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	second := newRecorder()
	b := startNode(t, rs, second, 4, nil)
	// The front end hears of the new node at its next check: until then
	// it says no node is alive, the first having left.
	eventually(t, "front end ready: the second node heard from", fe.Ready)
	if _, err := predict(t, fe, "panic"); !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("error %v; want ErrPoison from the second node", err)
	}
	if second.runs("panic") != 0 || b.Stats().Quarantined != 1 {
		t.Errorf("the second node ran the poison item %d times, quarantined %d; want 0 and 1", second.runs("panic"), b.Stats().Quarantined)
	}
	if out, err := predict(t, fe, "fine"); err != nil || string(out[0]) != "fine" {
		t.Errorf("after the poison item: %q, %v", out, err)
	}
}

// The quarantine holds an item for PoisonTTL, on the node that found it as
// in Redis: after that the item runs again (and here crashes the model
// again, rather than being refused unrun).
func TestTheQuarantineEndsAfterItsTime(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	// The streamer remembers the item for as long, on its own. Long
	// enough for the second request to come within it on a loaded
	// machine, short enough for the wait below.
	const ttl = 3 * time.Second
	n := startNodeOn(t, rs, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 4, MaxLatency: time.Millisecond, PoisonTTL: ttl},
		func(c *broker.NodeConfig) { c.PoisonTTL = ttl })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	seenWorking(t, fe)
	if _, err := predict(t, fe, "panic"); !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("error %v; want ErrPoison", err)
	}
	runs := rec.runs("panic") // the streamer runs it again alone to find it
	_, err := predict(t, fe, "panic")
	if !errors.Is(err, supervisor.ErrPoison) || !strings.Contains(err.Error(), "quarantined") || rec.runs("panic") != runs {
		t.Fatalf("error %v, runs %d; want the item refused unrun as quarantined", err, rec.runs("panic")-runs)
	}
	eventually(t, "the item runs again once its quarantine is over", func() bool {
		_, err := predict(t, fe, "panic")
		return errors.Is(err, supervisor.ErrPoison) && !strings.Contains(err.Error(), "quarantined")
	})
	if rec.runs("panic") == runs || n.Stats().Quarantined == 0 {
		t.Errorf("the item ran %d times more, and was refused %d times; want it run again, and refused in between", rec.runs("panic")-runs, n.Stats().Quarantined)
	}
}

// An item put in the quarantine a moment ago is refused at once by a node
// already running, whose own copy of the quarantine (read at its
// heartbeats) does not hold it yet: with a small quarantine, read with the
// items in one round trip; with one larger than that read takes, asked of
// Redis for the items read.
func TestAnItemQuarantinedJustNowIsRefusedByARunningNode(t *testing.T) {
	for _, others := range []int{0, 300} {
		t.Run(fmt.Sprintf("%d others", others), func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			rec := newRecorder()
			n := startNode(t, rs, rec, 4, nil)
			fe := startFront(t, rs, nil)
			eventually(t, "front end ready", fe.Ready)
			if _, err := predict(t, fe, "first"); err != nil {
				t.Fatal(err)
			}
			until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
			for i := range others {
				rs.Do(t, "ZADD", "streamer:poison", until, fmt.Sprint("other", i))
			}
			// Last by its expiry, so that a quarantine too large for the
			// read with the items leaves it out of that read.
			later := strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMilli(), 10)
			rs.Do(t, "ZADD", "streamer:poison", later, broker.PoisonHash("", []byte("bad")))
			if _, err := predict(t, fe, "bad"); !errors.Is(err, supervisor.ErrPoison) {
				t.Fatalf("error %v; want ErrPoison", err)
			}
			if rec.runs("bad") != 0 || n.Stats().Quarantined != 1 {
				t.Errorf("the node ran the quarantined item %d times, refused %d; want 0 and 1", rec.runs("bad"), n.Stats().Quarantined)
			}
			if out, err := predict(t, fe, "fine"); err != nil || string(out[0]) != "fine" {
				t.Errorf("after the quarantined item: %q, %v", out, err)
			}
		})
	}
}

func TestRedisDownFailsFastAndServingResumesWhenItReturns(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	if _, err := predict(t, fe, "before"); err != nil {
		t.Fatal(err)
	}
	rs.Kill()
	eventually(t, "front end not ready", func() bool { return !fe.Ready() })
	if st := fe.FrontEndStats(); st.RedisUp || st.Nodes != 0 {
		t.Errorf("while redis is down: redis up %v, %d nodes heard from; want down, none", st.RedisUp, st.Nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := fe.Predict(ctx, [][]byte{[]byte("during")})
	if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), rs.Addr()) {
		t.Fatalf("error %v; want ErrUnavailable naming redis at %s", err, rs.Addr())
	}
	rs.Restart(t)
	eventually(t, "front end ready again", fe.Ready)
	answersEventually(t, fe, "after", "served again")
}

// After an outage longer than a node's silence, the nodes alive before it
// still count while they have not had the time to beat again (they dial
// Redis again at their pace): a front end takes requests as soon as Redis
// is back rather than answering 503 "no node is alive" meanwhile. Here a
// node's heartbeat is written by hand, as a node would, and stops with
// the outage.
func TestNodesAliveBeforeAnOutageCountAsItEnds(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{Persist: true})
	rs.Do(t, "XGROUP", "CREATE", "streamer:items", "nodes", "0", "MKSTREAM")
	beat := func() time.Time {
		now := time.Now()
		rs.Do(t, "ZADD", "streamer:nodes", strconv.FormatInt(now.UnixMilli(), 10), "beating")
		return now
	}
	lastBeat := beat()
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", func() bool {
		lastBeat = beat()
		return fe.Ready()
	})
	rs.Kill()
	eventually(t, "front end not ready", func() bool { return !fe.Ready() })
	// The node's beat is older than its silence by the time Redis is back.
	<-time.After(time.Until(lastBeat.Add(3500 * time.Millisecond)))
	rs.Restart(t)
	eventually(t, "front end sees redis again", func() bool { return fe.FrontEndStats().RedisUp })
	if err := fe.NotReady(); err != nil {
		t.Errorf("once redis is back, before the node beat again: not ready: %v; want ready, the node counted", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := fe.Predict(ctx, [][]byte{[]byte("waits")}); !errors.Is(err, supervisor.ErrDeadline) {
		t.Errorf("a request then: %v; want it admitted and waiting for the node until its deadline", err)
	}
}

// A Redis that takes seconds to answer (here paused) does not keep a
// request past its deadline, or its caller after it left: the wait for the
// admission ends with them. Items admitted after their caller left are
// withdrawn before any node reads them.
// A Redis that hangs (frozen, or cut off without a reset) is found out by
// the front end's next two checks, within their half second each, not
// after the client's 2 s read timeout: the front end says it is not ready
// while Redis is paused for less than two of those timeouts.
func TestAHungRedisIsFoundOutByTheNextCheck(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	// Two checks in a row run out of time before Redis is taken for down
	// (see TestOneLateCheckIsNotAnOutage): up to 1.25 s into the pause,
	// and well before the 4 s that two read timeouts would take.
	pause := 3500 * time.Millisecond
	rs.Do(t, "CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
	end := time.Now().Add(pause)
	for fe.Ready() {
		if time.Now().After(end) {
			t.Fatalf("the front end was ready all through a pause of Redis of %s", pause)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if found := pause - time.Until(end); found > 2*time.Second {
		t.Errorf("the hang was found out %s into it, as late as the client's read timeout; want about a second", found.Round(time.Millisecond))
	}
	if _, err := predict(t, fe, "x"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "does not serve: no answer within 500ms") {
		t.Errorf("a request while Redis hangs: %v; want ErrUnavailable saying Redis does not serve, with no answer within the check's time", err)
	}
	eventually(t, "ready again once Redis answers", fe.Ready)
}

// TestOneLateCheckIsNotAnOutage: a check that runs out of time once, as
// on a loaded machine or a slow link, is made again before Redis is taken
// for down: taking it for down turned every new request away with 503
// until the next check. Redis pauses for 900 ms (940 to 990 ms in effect,
// as Redis ends a pause on its 100 ms clock): past the 500 ms of a check
// begun in its first 400 ms, which the checks every 250 ms are, and short
// of the second check's end, a second after the first began, unless the
// first began just before the pause (then the test fails wrongly; none did
// in 110 runs, under the race detector and busy loops among them).
func TestOneLateCheckIsNotAnOutage(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	eventually(t, "front end ready", fe.Ready)
	pause := 900 * time.Millisecond
	rs.Do(t, "CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
	end := time.Now().Add(pause + 500*time.Millisecond)
	for time.Now().Before(end) {
		if !fe.Ready() {
			t.Fatalf("the front end was not ready during a pause of Redis of %s; its log:\n%s", pause, logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "a check of redis ran out of time; checking again") {
		t.Fatalf("no check ran out of time in a pause of %s, so the test tested nothing; the log:\n%s", pause, logs.String())
	}
	if strings.Contains(logs.String(), "redis does not serve") {
		t.Errorf("the front end took Redis for down after one late check; its log:\n%s", logs.String())
	}
}

// A request failed because no node has been heard from has its items
// withdrawn: they must not run when a node comes, nor fill the backlog
// until then.
func TestItemsOfRequestsFailedForWantOfANodeAreWithdrawn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// A node heard from now, and never again.
	rs.Do(t, "ZADD", "streamer:nodes", strconv.FormatInt(time.Now().UnixMilli(), 10), "gone")
	rs.Do(t, "XGROUP", "CREATE", "streamer:items", "nodes", "0", "MKSTREAM")
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	if _, err := predict(t, fe, "x", "y"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "no node") {
		t.Fatalf("a request with no node alive: %v; want ErrUnavailable saying no node was heard from", err)
	}
	eventually(t, "the items withdrawn, and counted", func() bool {
		return rs.Do(t, "XLEN", "streamer:items") == "0" && fe.FrontEndStats().Withdrawn == 2
	})
}

// A request failed by an outage while it waited for the writer is not put
// on the stream once Redis answers again: its caller was told no.
func TestARequestFailedBeforeItsAdmissionIsNotAdmitted(t *testing.T) {
	rs, fe := frontWithoutNodes(t, func(c *broker.FrontEndConfig) { c.Outage = 300 * time.Millisecond })
	// Redis hangs for writes: the first request's admission waits in it,
	// the second waits for the writer, and the outage fails both. It
	// hangs until the test has seen that (a pause of a fixed length could
	// end first on a loaded machine: the outage takes two checks of 500 ms).
	rs.Do(t, "CLIENT", "PAUSE", "30000", "WRITE")
	first := predictLater(t, fe, "first")
	eventually(t, "the first admission waiting in Redis", func() bool {
		return strings.Contains(rs.Do(t, "CLIENT", "LIST"), "cmd=evalsha")
	})
	second := predictLater(t, fe, "second")
	for _, a := range []answer{<-first, <-second} {
		if !errors.Is(a.err, supervisor.ErrUnavailable) {
			t.Errorf("a request through the outage: %q, %v; want ErrUnavailable", a.out, a.err)
		}
	}
	// Neither is counted before the writer's verdict: the first's
	// admission is under way in Redis.
	if st := fe.Stats(); st.Rejected+st.Failed+st.Submitted != 0 {
		t.Errorf("rejected %d, failed %d, submitted %d before the verdicts; want none yet", st.Rejected, st.Failed, st.Submitted)
	}
	rs.Do(t, "CLIENT", "UNPAUSE")
	// Each item counts once: the first as admitted and failed (Redis ran
	// its admission as it resumed, and its item was on the stream), the
	// second as rejected (never sent), as a local server rejects items
	// while it is unavailable.
	eventually(t, "both items counted", func() bool {
		st := fe.Stats()
		return st.Rejected+st.Submitted == 2
	})
	if st := fe.Stats(); st.Rejected != 1 || st.Submitted != 1 || st.Failed != 1 || st.Answered != 1 {
		t.Errorf("rejected %d, submitted %d, failed %d, answered %d; want 1 rejected, and 1 submitted and failed", st.Rejected, st.Submitted, st.Failed, st.Answered)
	}
	// Once Redis resumes, the writer takes the second call, and then a
	// third, admitted: by its item on the stream the second's turn passed.
	eventually(t, "front end ready again", fe.Ready)
	third := predictLater(t, fe, "third")
	eventually(t, "the third request admitted", func() bool { return itemsAdded(t, rs) == 2 })
	if got := itemsAdded(t, rs); got != 2 {
		t.Errorf("%d items put on the stream; want the first, whose admission Redis ran as it resumed, and the third", got)
	}
	startNode(t, rs, newRecorder(), 4, nil)
	if a := <-third; a.err != nil || string(a.out[0]) != "third" {
		t.Errorf("the request after the outage: %q, %v; want its answer", a.out, a.err)
	}
}

// A call failed by an outage while Redis hangs on its admission past the
// client's read timeout ends with the outage, and counts once, when its
// admission fails in turn.
func TestACallFailedWhileItsAdmissionHangsCountsOnce(t *testing.T) {
	rs, fe := frontWithoutNodes(t, func(c *broker.FrontEndConfig) { c.Outage = 300 * time.Millisecond })
	rs.Do(t, "CLIENT", "PAUSE", "3000", "WRITE")
	if _, err := predict(t, fe, "x", "y"); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Fatalf("a request through the outage: %v; want ErrUnavailable", err)
	}
	// Counted once the admission's verdict comes: its time runs out.
	eventually(t, "the items counted", func() bool { return fe.Stats().Failed+fe.Stats().Rejected > 0 })
	if st := fe.Stats(); st.Failed+st.Rejected != 2 {
		t.Errorf("failed %d and rejected %d; want each of the 2 items counted once", st.Failed, st.Rejected)
	}
}

// Close ends in about its context's time even while Redis hangs: no read
// of the front end's waits for the client's own bound on a blocking read
// (its block and 10 s).
func TestCloseWhileRedisHangsEndsInItsTime(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	rs.Do(t, "CLIENT", "PAUSE", "6000", "ALL")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_ = fe.Close(ctx)
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Close with a second to go took %s while Redis hung", took)
	}
}

// A request given up while Redis hangs cannot have its items withdrawn at
// once: they are withdrawn once Redis answers again.
func TestItemsOfARequestGivenUpWhileRedisHangsAreWithdrawnLater(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	given := make(chan error, 1)
	go func() {
		_, err := fe.Predict(ctx, [][]byte{[]byte("given up")})
		given <- err
	}()
	onStream(t, rs, 1, "the item on the stream")
	rs.Do(t, "CLIENT", "PAUSE", "1800", "ALL")
	cancel()
	if err := <-given; !errors.Is(err, supervisor.ErrCanceled) {
		t.Errorf("the request given up: %v; want ErrCanceled", err)
	}
	eventually(t, "the item withdrawn once Redis answers", func() bool {
		return rs.Do(t, "XLEN", "streamer:items") == "0" && fe.FrontEndStats().Withdrawn == 1
	})
}

// A request given up while its front end closes (its client left, or its
// deadline passed, during the drain) has its items withdrawn by Close: no
// node runs them later.
func TestItemsOfRequestsGivenUpWhileClosingAreWithdrawn(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	given := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := fe.Predict(ctx, [][]byte{[]byte("given up")})
		given <- err
	}()
	onStream(t, rs, 1, "the item on the stream")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fe.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-given; !errors.Is(err, supervisor.ErrDeadline) {
		t.Errorf("the request given up: %v; want ErrDeadline", err)
	}
	if got := rs.Do(t, "XLEN", "streamer:items"); got != "0" {
		t.Errorf("%s items on the stream after Close; want the one given up withdrawn", got)
	}
	if got := fe.FrontEndStats().Withdrawn; got != 1 {
		t.Errorf("FrontEndStats().Withdrawn = %d, want 1", got)
	}
}

// Items that were admitted and then left unanswered (their deadline
// passed, their caller left) count as a local server counts them: answered
// with an error, expired for a deadline. So Answered - Failed, the items
// answered well, never goes below zero, and Submitted meets Answered once
// nothing waits.
func TestItemsLeftUnansweredCountAsALocalServerCountsThem(t *testing.T) {
	_, fe := frontWithoutNodes(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := fe.Predict(ctx, [][]byte{[]byte("a"), []byte("b")}); !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("a request nobody answers: %v; want ErrDeadline", err)
	}
	given, giveUp := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := fe.Predict(given, [][]byte{[]byte("c")})
		left <- err
	}()
	eventually(t, "the third item admitted", func() bool { return fe.Stats().Submitted == 3 })
	giveUp()
	if err := <-left; !errors.Is(err, supervisor.ErrCanceled) {
		t.Fatalf("a request given up: %v; want ErrCanceled", err)
	}
	want := supervisor.Stats{Submitted: 3, Answered: 3, Failed: 3, Expired: 2}
	if st := fe.Stats(); st.Submitted != want.Submitted || st.Answered != want.Answered || st.Failed != want.Failed || st.Expired != want.Expired || st.Rejected != 0 {
		t.Errorf("submitted %d, answered %d, failed %d, expired %d, rejected %d; want %d, %d, %d, %d and none",
			st.Submitted, st.Answered, st.Failed, st.Expired, st.Rejected, want.Submitted, want.Answered, want.Failed, want.Expired)
	}
}

func TestASlowRedisKeepsNoRequestPastItsDeadline(t *testing.T) {
	// No node reads yet: what the paused Redis admits later waits unread,
	// to be withdrawn.
	rs, fe := frontWithoutNodes(t, nil)
	// Shorter than the client's 2 s timeout: the admission goes through
	// once the pause ends, after its callers have left.
	rs.Do(t, "CLIENT", "PAUSE", "1500", "ALL")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			if i%2 == 1 { // no deadline: the caller leaves
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			defer cancel()
			_, errs[i] = fe.Predict(ctx, [][]byte{[]byte(fmt.Sprint("slow ", i))})
		})
	}
	wg.Wait()
	if took := time.Since(start); took > time.Second {
		t.Errorf("requests that gave up after 200ms returned after %s, with Redis paused for 1.5s", took)
	}
	for i, err := range errs {
		want := supervisor.ErrDeadline
		if i%2 == 1 {
			want = supervisor.ErrCanceled
		}
		if !errors.Is(err, want) {
			t.Errorf("request %d: %v; want %v", i, err, want)
		}
	}
	rs.Do(t, "CLIENT", "UNPAUSE")
	// The requests of the admission under way when Redis paused are
	// admitted as it ends, and withdrawn; those that waited for the writer
	// behind it are never admitted.
	eventually(t, "the items admitted after their callers left withdrawn", func() bool {
		return fe.FrontEndStats().Withdrawn >= 1 && rs.Do(t, "XLEN", "streamer:items") == "0"
	})
	startNode(t, rs, newRecorder(), 4, nil)
	answersEventually(t, fe, "after", "served again")
}

// A Redis restarted without its data faster than a front end counts an
// outage loses the items that waited in it. Their callers are told so at
// once, with 503, rather than wait for answers that will never come (for
// ever, without a deadline); the item a node held as it happened may still
// be answered.
func TestCallersOfItemsLostInAQuickRedisRestartAreTold(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec, fe, held := oneRunning(t, rs, "held")
	waiting := make(chan error, 1)
	go func() {
		_, err := fe.Predict(context.Background(), [][]byte{[]byte("waiting")}) // no deadline
		waiting <- err
	}()
	onStream(t, rs, 2, "the second item waits on the stream")
	// Its admission's answer read too: a restart under it would fail it
	// as an admission Redis did not answer.
	eventually(t, "both calls admitted", func() bool { return fe.Stats().Submitted == 2 })
	rs.Restart(t)
	close(rec.release)
	select {
	case err := <-waiting:
		if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "lost its data") {
			t.Errorf("the caller whose item Redis lost: %v; want ErrUnavailable saying Redis lost its data", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller whose item Redis lost is still waiting 5s after the restart")
	}
	if a := <-held; a.err != nil && !errors.Is(a.err, supervisor.ErrUnavailable) {
		t.Errorf("the caller whose item the node held: %q, %v; want its answer or ErrUnavailable", a.out, a.err)
	}
	answersEventually(t, fe, "after", "served again")
}

// A call admitted after Redis lost its data, before the front end's next
// check found the loss, has its items in Redis: it is answered, while the
// call admitted before the loss is failed.
func TestACallAdmittedJustAfterRedisLostItsDataIsAnswered(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec, fe, before := oneRunning(t, rs, "before")
	name := rs.Do(t, "ZRANGE", "streamer:nodes", "0", "0")
	// The data goes, and the node's heartbeat is back at once, so that the
	// front end's next check finds a node alive whenever it comes.
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	pipe := rdb.TxPipeline()
	pipe.FlushAll(context.Background())
	pipe.ZAdd(context.Background(), "streamer:nodes", redis.Z{Score: float64(time.Now().UnixMilli()), Member: name})
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := predictLater(t, fe, "after")
	a := answerWithin(t, before, 5*time.Second, "the call admitted before the loss is still waiting 5s after it")
	if !errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "lost its data") {
		t.Errorf("the call admitted before the loss: %q, %v; want ErrUnavailable saying Redis lost its data", a.out, a.err)
	}
	// The check that found the loss has run: the node, which held the
	// first item through it, may take the second.
	close(rec.release)
	a = answerWithin(t, after, 5*time.Second, "the call admitted after the loss is not answered 5s after the node was free")
	if a.err != nil || string(a.out[0]) != "after" {
		t.Errorf("the call admitted after the loss: %q, %v; want its answer", a.out, a.err)
	}
}

// Through Sentinel, front ends and nodes follow a failover: when the master
// is gone, the replica the Sentinel promotes serves them, without a
// restart. The call whose item was running as the master went gets its
// answer or a 503 naming Redis, never a hang.
func TestAFailoverToTheReplicaIsFollowed(t *testing.T) {
	master, replica, sentinel := redistest.StartFailover(t, "main", "s3cret")
	rec, fe, running := runningThrough(t, master, sentinel.FailoverURL())
	master.AwaitReplicated(t, replica)

	master.Vanish(t)
	promoted := strings.Replace(replica.Addr(), ":", "\n", 1)
	eventually(t, "the sentinel promotes the replica", func() bool {
		return sentinel.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main") == promoted
	})
	close(rec.release)
	runningEnds(t, running, "through the failover")
	answersEventually(t, fe, "after", "served by the promoted replica")
	if got := replica.Do(t, "XLEN", "streamer:items"); got != "0" {
		t.Errorf("%s items left on the promoted replica's stream; want none", got)
	}
}

// A front end whose connections close under it (a failover: the client
// closes those to the old master, and the new one may lack the last
// writes) looks for every waiting call's items at its next check, as after
// an outage, rather than at the next periodic look, which looks only at
// calls older than 2 s, every 2 s: the call whose item is gone is told
// within a check or two (0.3 s measured), not after 2 to 4.
func TestCallsWhoseItemsAreGoneAfterAConnectionClosedAreToldSoon(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	lost := predictLater(t, fe, "lost")
	onStream(t, rs, 1, "the item on the stream")
	id, _, _ := strings.Cut(rs.Do(t, "XREVRANGE", "streamer:items", "+", "-", "COUNT", "1"), "\n")
	if got := rs.Do(t, "XDEL", "streamer:items", id); got != "1" {
		t.Fatalf("XDEL %s: %s", id, got)
	}
	rs.Do(t, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	a := answerWithin(t, lost, 1500*time.Millisecond, "the call whose item is gone is still waiting 1.5s after its connections closed")
	if !errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "lost the request's items") {
		t.Errorf("the call whose item is gone: %q, %v; want ErrUnavailable saying Redis lost its items", a.out, a.err)
	}
}

// A Redis that loses some items and keeps its other data (a failover to a
// replica that lacked them, a restart that lost its last writes) keeps its
// epoch: the front end finds the calls whose items are gone by looking for
// them, and fails those alone.
func TestCallsWhoseItemsRedisLostAreTold(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	kept := predictLater(t, fe, "kept")
	onStream(t, rs, 1, "the first item on the stream")
	lost := predictLater(t, fe, "lost")
	onStream(t, rs, 2, "the second item on the stream")
	id, _, _ := strings.Cut(rs.Do(t, "XREVRANGE", "streamer:items", "+", "-", "COUNT", "1"), "\n")
	if got := rs.Do(t, "XDEL", "streamer:items", id); got != "1" {
		t.Fatalf("XDEL %s: %s", id, got)
	}

	a := answerWithin(t, lost, 8*time.Second, "the call whose item Redis lost is still waiting 8s after the loss")
	if !errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "lost the request's items") {
		t.Errorf("the call whose item Redis lost: %q, %v; want ErrUnavailable saying Redis lost its items", a.out, a.err)
	}
	if got := fe.FrontEndStats().Lost; got != 1 {
		t.Errorf("FrontEndStats().Lost = %d, want 1", got)
	}
	// The look that found the second item gone looked for the first, older.
	select {
	case a := <-kept:
		t.Fatalf("the call whose item waits in Redis ended: %q, %v", a.out, a.err)
	default:
	}
	startNode(t, rs, newRecorder(), 4, nil)
	if a := <-kept; a.err != nil || string(a.out[0]) != "kept" {
		t.Errorf("the call whose item waited in Redis: %q, %v; want its answer", a.out, a.err)
	}
}

func TestRedisWithAPasswordAndTLS(t *testing.T) {
	for _, opt := range []redistest.Options{{Password: "s3cret"}, {User: "streamer", UserPassword: "pw"}, {TLS: true}} {
		t.Run(fmt.Sprintf("%+v", opt), func(t *testing.T) {
			rs := redistest.Start(t, opt)
			tweakNode := func(c *broker.NodeConfig) {}
			tweakFront := func(c *broker.FrontEndConfig) {}
			if opt.TLS {
				tweakNode = func(c *broker.NodeConfig) { c.TLS = &tls.Config{RootCAs: rs.CACertPool()} }
				tweakFront = func(c *broker.FrontEndConfig) { c.TLS = &tls.Config{RootCAs: rs.CACertPool()} }
			}
			startNode(t, rs, newRecorder(), 4, tweakNode)
			fe := startFront(t, rs, tweakFront)
			eventually(t, "front end ready", fe.Ready)
			if out, err := predict(t, fe, "hi"); err != nil || string(out[0]) != "hi" {
				t.Fatalf("got %q, %v", out, err)
			}
		})
	}
}

// A node's start on a Redis that speaks otherwise than its URL says
// (plain TCP to a TLS port, TLS to a plain one) fails saying what to
// check, as a front end's checks do: it had said only EOF, or that the
// deadline passed.
func TestANodesStartSaysWhatToCheckOfTLS(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  redistest.Options
		url  func(*redistest.Server) string
		want string
	}{
		{"plain tcp to a tls port", redistest.Options{TLS: true}, func(rs *redistest.Server) string { return "redis://" + rs.Addr() + "/0" }, "a TLS port reached without rediss://"},
		{"tls to a redis without it", redistest.Options{}, func(rs *redistest.Server) string { return "rediss://" + rs.Addr() + "/0" }, "does Redis speak TLS at that address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := redistest.Start(t, c.opt)
			_, err := startNodeFailing(t, broker.NodeConfig{Config: broker.Config{URL: c.url(rs)}, Streamer: startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4})})
			if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("the node's start: %v; want ErrUnavailable saying %q", err, c.want)
			}
		})
	}
}

// A node whose user may not write the reply streams cannot answer: it
// leaves its items to a node that can, takes none until its writes go
// through, and takes items again once they do.
func TestANodeRedisRefusesToAnswerLeavesItsItemsToAnother(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// Every key but the reply streams.
	rs.Do(t, "ACL", "SETUSER", "noreply", "on", ">pw", "~streamer:items*", "~streamer:nodes", "~streamer:leaving",
		"~streamer:poison", "~streamer:streams", "~streamer:epoch", "&*", "+@all")
	limited := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.URL = "redis://noreply:pw@" + rs.Addr() + "/0" })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "x")
	eventually(t, "the node says Redis refuses its answers", func() bool { return strings.Contains(limited.Stats().Refused, "NOPERM") })

	startNode(t, rs, newRecorder(), 4, nil)
	a := answerWithin(t, later, 10*time.Second, "no answer 10s after a node that may write it started")
	if a.err != nil || string(a.out[0]) != "x" {
		t.Fatalf("got %q, %v; want the answer of the node that may write it", a.out, a.err)
	}

	rs.Do(t, "ACL", "SETUSER", "noreply", "allkeys")
	eventually(t, "the node takes items again once Redis takes its answers", func() bool {
		s := limited.Stats()
		return s.Refused == "" && s.Held == 0
	})
}

// A node whose user may not XCLAIM cannot keep the items it runs from
// other nodes' claims, which ran them again: it says so at its start, as a
// refused permission, takes no items (another node that may claim runs
// them, once), and takes items again once it may claim.
func TestANodeThatMayNotClaimTakesNoItems(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "ACL", "SETUSER", "noclaim", "on", ">pw", "~*", "&*", "+@all", "-xclaim")
	rec := newRecorder()
	limited, err := startNodeFailing(t, broker.NodeConfig{
		Config:   broker.Config{URL: "redis://noclaim:pw@" + rs.Addr() + "/0", ClaimIdle: 400 * time.Millisecond},
		Streamer: startStreamer(t, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 4, MaxLatency: time.Millisecond}),
		Capacity: 8,
	})
	if !errors.Is(err, broker.ErrPermission) || !strings.Contains(err.Error(), "XCLAIM") {
		t.Fatalf("the start of a node that may not XCLAIM: %v; want ErrPermission naming XCLAIM", err)
	}
	if why := limited.Stats().Refused; !strings.Contains(why, "XCLAIM") {
		t.Errorf("the node's stats say %q; want the refused XCLAIM", why)
	}
	// Off the list of nodes, so that front ends refuse requests no node
	// would take rather than leave them waiting.
	eventually(t, "the node that may not claim off the list of nodes", func() bool { return rs.Do(t, "ZCARD", "streamer:nodes") == "0" })
	fe := startFront(t, rs, nil)
	if _, err := predict(t, fe, "alone"); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Errorf("a request with only the node that may not claim: %v; want ErrUnavailable at once", err)
	}
	fakeNode(t, rs)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "x")
	startNode(t, rs, newRecorder(), 4, nil)
	if a := answerWithin(t, later, 10*time.Second, "no answer 10s after a node that may claim started"); a.err != nil || string(a.out[0]) != "x" {
		t.Fatalf("got %q, %v; want the answer of the node that may claim", a.out, a.err)
	}
	if rec.runs("x") != 0 {
		t.Error("the node that may not claim ran the item")
	}

	rs.Do(t, "ACL", "SETUSER", "noclaim", "+xclaim")
	eventually(t, "the node takes items again once it may claim", func() bool { return limited.Stats().Refused == "" })
}

// A node whose user may not read items (XREADGROUP taken from it) takes
// itself off the lists of nodes: front ends answer new requests 503 at
// once, and fail those waiting for items it will not read, rather than
// leave their callers waiting to their deadlines. It says why in its
// stats, and takes items again once it may read.
func TestANodeRedisWillNotLetReadCountsAsNoNode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "ACL", "SETUSER", "noread", "on", ">pw", "~*", "&*", "+@all")
	rec := newRecorder()
	rec.hold["busy"] = true
	limited := startNodeOn(t, rs, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 1, PipelineDepth: 1, MaxLatency: time.Millisecond}, func(c *broker.NodeConfig) {
		c.URL = "redis://noread:pw@" + rs.Addr() + "/0"
		c.Capacity = 1
	})
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	busy := predictLater(t, fe, "busy")
	eventually(t, "the node runs its item", func() bool { return rec.runs("busy") == 1 })
	// Admitted while the node has no room to read it; then the node may
	// read no more.
	waiting := predictLater(t, fe, "waiting")
	onStream(t, rs, 2, "the waiting item on the stream")
	rs.Do(t, "ACL", "SETUSER", "noread", "-xreadgroup")
	close(rec.release)
	if a := answerWithin(t, busy, 5*time.Second, "the item the node ran was not answered"); a.err != nil {
		t.Errorf("the item the node ran: %v; want its answer", a.err)
	}
	a := answerWithin(t, waiting, 5*time.Second, "the request waiting for a node that may not read was not failed")
	if !errors.Is(a.err, supervisor.ErrUnavailable) {
		t.Fatalf("the request waiting for a node that may not read: %q, %v; want ErrUnavailable", a.out, a.err)
	}
	if !strings.Contains(limited.Stats().Refused, "NOPERM") {
		t.Errorf("the node's stats say %q; want Redis's refusal of its reads", limited.Stats().Refused)
	}
	began := time.Now()
	if _, err := predict(t, fe, "new"); !errors.Is(err, supervisor.ErrUnavailable) || time.Since(began) > time.Second {
		t.Errorf("a request while the only node may not read: %v after %s; want ErrUnavailable at once", err, time.Since(began))
	}

	rs.Do(t, "ACL", "SETUSER", "noread", "+xreadgroup")
	eventually(t, "the node takes items again once it may read", func() bool {
		out, err := predict(t, fe, "z")
		return err == nil && string(out[0]) == "z"
	})
	if r := limited.Stats().Refused; r != "" {
		t.Errorf("the node's stats say %q once it reads again; want nothing refused", r)
	}
}

// A node whose Redis comes back not knowing XREADGROUP (renamed away in
// its new configuration) takes itself off the lists of nodes, as one that
// may not read: front ends answer 503 at once. Before, the node did not
// take Redis's "ERR unknown command" for what it is (go-redis matches
// prefixes after "ERR "), went on beating, and its callers waited to their
// deadlines while /readyz said ready.
func TestANodeWhoseRedisNoLongerKnowsHowToReadCountsAsNoNode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, echoItems, 4, nil)
	fe := startFront(t, rs, nil)
	answersEventually(t, fe, "before", "a request answered before the restart")

	rs.RestartRenamingAway(t, "XREADGROUP")
	eventually(t, "the node says Redis refuses its reads", func() bool { return strings.Contains(n.Stats().Refused, "unknown command") })
	// Until the front end sees Redis serve again, it refuses for that.
	eventually(t, "the front end to see Redis serve again", func() bool { return fe.FrontEndStats().RedisUp })
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := fe.Predict(ctx, [][]byte{[]byte("after")})
	if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "no node is alive") || time.Since(began) > 2*time.Second {
		t.Errorf("a request while the only node cannot read: %v after %s; want ErrUnavailable at once, for want of a node", err, time.Since(began))
	}
}

// A stream of a node gone that is gone too (deleted, evicted) has nothing
// to claim: it is no error. Before, Redis's "ERR no such key" was not
// taken for that (the same prefix mistake), and each claim that met one
// logged a failure and skipped the other streams of nodes gone.
func TestAStreamGoneHasNothingToClaim(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, echoItems, 4, nil)
	if unread, err := broker.Unread(n, "streamer:items:gone"); unread || err != nil {
		t.Errorf("a stream that is not there: unread %v, %v; want nothing, and no error", unread, err)
	}
}

// Answers Redis refuses for want of memory are kept and retried until it
// takes them; the node logs the refusal once, as an error, however many
// retries fail, and once that it takes answers again.
func TestAnswersAreKeptUntilRedisHasRoomForThem(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{}) // noeviction: Redis's default
	held := newRecorder()
	held.hold["slow"] = true
	var logs syncbuf.Buffer
	n := startNode(t, rs, held, 4, func(c *broker.NodeConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "slow")
	eventually(t, "the item running", func() bool { return held.runs("slow") == 1 })
	rs.Do(t, "CONFIG", "SET", "maxmemory", "1") // Redis is full: it refuses every write

	if _, err := predict(t, fe, "more"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a request while Redis is full: %v; want ErrUnavailable saying why", err)
	}
	if err := fe.NotReady(); fe.Ready() || err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("the front end's readiness while Redis refuses its writes: %v; want not ready, saying why", err)
	}
	close(held.release)
	eventually(t, "the answer refused by Redis, and retried", func() bool { return n.Stats().WriteFailures > 2 })
	if got := rs.Do(t, "XLEN", "streamer:items"); got != "1" {
		t.Fatalf("%s items on the stream; want the item kept until its answer is written", got)
	}
	rs.Do(t, "CONFIG", "SET", "maxmemory", "0")
	if a := <-later; a.err != nil || string(a.out[0]) != "slow" {
		t.Fatalf("got %q, %v; want the answer once Redis had room", a.out, a.err)
	}
	eventually(t, "the node's log of Redis taking answers again", func() bool {
		return strings.Contains(logs.String(), "redis takes this node's answers again")
	})
	if got := strings.Count(logs.String(), "level=ERROR msg=\"redis is out of memory"); got != 1 || strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the refusals for want of memory logged as %d errors; want one, and no warning for each retry:\n%s", got, logs.String())
	}
}

// A Redis filled by items whose answers it then refuses frees itself once
// their callers have failed for want of memory: their front end withdraws
// the items, those that nodes hold too, and it serves again without an
// operator; the node drops the answers of the items withdrawn rather than
// retry them for nobody (they would not fit). Before, the items, held
// until answered, kept Redis full for good.
func TestAFullRedisFreesItselfOfItemsNobodyWaitsFor(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{}) // noeviction: Redis's default
	needsRedis7(t, rs)
	held := newRecorder()
	items := make([]string, 4)
	for i := range items {
		items[i] = strings.Repeat(strconv.Itoa(i), 2<<20)
		held.hold[items[i]] = true
	}
	n := startNode(t, rs, held, 4, nil)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Outage = 300 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	base := usedMemory(t, rs)
	later := predictLater(t, fe, items...)
	eventually(t, "the items running", func() bool { return held.runs(items[0]) == 1 })
	// Full with the items, 8 MiB and more, there; without them, room for
	// small requests, but not for a write of the answers (4 MiB, which
	// Redis takes about a third more to read).
	rs.Do(t, "CONFIG", "SET", "maxmemory", strconv.Itoa(base+3<<20))
	close(held.release)
	select {
	case a := <-later:
		if !errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "OOM") {
			t.Fatalf("the caller while Redis is full: %d answers, %v; want ErrUnavailable saying Redis is out of memory", len(a.out), a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller got no answer within 10s while Redis was full")
	}
	eventually(t, "Redis to serve again by itself", func() bool {
		out, err := predict(t, fe, "small")
		return err == nil && string(out[0]) == "small"
	})
	if got := rs.Do(t, "XLEN", "streamer:items"); got != "0" {
		t.Errorf("%s items on the stream once Redis serves again; want none", got)
	}
	eventually(t, "the front end's log that Redis takes writes again", func() bool {
		return strings.Contains(logs.String(), "redis takes writes again")
	})
	// Once for each time its memory went over the bound, not for each
	// refusal, and checks that found it serving between refusals are no
	// outage. (On a loaded machine the memory may go over again just after
	// it came back, as the node's large write of the answers is read in.)
	if full := strings.Count(logs.String(), `msg="redis is out of memory`); full < 1 || full > 3 || strings.Contains(logs.String(), "redis does not serve") {
		t.Errorf("the front end logged Redis full %d times, or as not serving; want once or so, as full:\n%s", full, logs.String())
	}
	eventually(t, "the node to let the withdrawn items go", func() bool { return n.Stats().Held == 0 })
	if st := n.Stats(); st.Withdrawn != uint64(len(items)) || st.Answered != 1 {
		t.Errorf("the node's stats: %+v; want the %d items withdrawn, and the small one answered", st, len(items))
	}
}

// While Redis refuses answers for want of memory, a node lets go, without
// an answer, the items withdrawn meanwhile (their callers gone): their
// answers would take memory for nobody.
func TestAFullRedisTakesNoAnswersOfWithdrawnItems(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{}) // noeviction: Redis's default
	held := newRecorder()
	held.hold["slow"] = true
	n := startNode(t, rs, held, 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	predictLater(t, fe, "slow")
	eventually(t, "the item running", func() bool { return held.runs("slow") == 1 })
	rs.Do(t, "CONFIG", "SET", "maxmemory", "1") // Redis is full: it refuses every write
	// Its caller gives up, and its front end withdraws it: here by hand.
	rs.Do(t, "EVAL", "for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do redis.call('XDEL', KEYS[1], e[1]) end", "1", "streamer:items")
	close(held.release)
	eventually(t, "the node to let the item go", func() bool { return n.Stats().Held == 0 })
	st := n.Stats()
	if st.WriteFailures == 0 || st.Answered != 0 || st.Withdrawn != 1 {
		t.Errorf("the node's stats: %+v; want its answer refused, never written, and counted withdrawn", st)
	}
	if got := rs.Do(t, "XPENDING", "streamer:items", "nodes"); !strings.HasPrefix(got, "0") {
		t.Errorf("XPENDING: %s; want the item acknowledged", got)
	}
	rs.Do(t, "CONFIG", "SET", "maxmemory", "0")
}

// usedMemory is Redis's used_memory, in bytes.
func usedMemory(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	return int(rs.InfoInt(t, "memory", "used_memory"))
}

func TestCloseWaitsForTheAnswersThenRefuses(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	held := newRecorder()
	held.hold["slow"] = true
	startNode(t, rs, held, 4, nil)
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "slow")
	eventually(t, "the item running", func() bool { return held.runs("slow") == 1 })
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- fe.Close(ctx)
	}()
	eventually(t, "the front end closing", func() bool { return !fe.Ready() })
	if _, err := predict(t, fe, "late"); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Fatalf("a request after Close: %v; want ErrShuttingDown", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a request waited for its answer", err)
	default:
	}
	close(held.release)
	if a := <-later; a.err != nil {
		t.Fatalf("the request admitted before Close: %v", a.err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := rs.Do(t, "EXISTS", "streamer:reply:"+fe.ID()); n != "0" {
		t.Error("the closed front end's reply stream is still in Redis")
	}
}

// A call failed by an outage while Close waits for the answers is told
// the outage's cause, as it would be without Close: ErrShuttingDown is for
// what Close itself fails or refuses. Before, every node gone while Close
// drained read as "shutting down", hiding that no node was alive.
func TestAnOutageWhileClosingFailsCallsWithItsCause(t *testing.T) {
	rs, fe := frontWithoutNodes(t, func(c *broker.FrontEndConfig) { c.Outage = 300 * time.Millisecond })
	later := predictLater(t, fe, "x")
	onStream(t, rs, 1, "the item on the stream")
	closed := make(chan error, 1)
	go func() { closed <- fe.Close(context.Background()) }()
	eventually(t, "the front end closing", func() bool { return !fe.Ready() })
	rs.Do(t, "ZREM", "streamer:nodes", "fake") // the only node goes
	a := answerWithin(t, later, 10*time.Second, "the call still waits 10s after its only node went")
	if !errors.Is(a.err, supervisor.ErrUnavailable) || errors.Is(a.err, supervisor.ErrShuttingDown) || !strings.Contains(a.err.Error(), "no node is alive") {
		t.Errorf("the call waiting as its only node went, during Close: %v; want ErrUnavailable saying no node is alive", a.err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close, its one call failed by the outage: %v", err)
	}
}

// A Close made while another drains waits for that one to end, bounded by
// its own context, and returns nil; one after it has ended returns nil at
// once. Before, a second Close returned nil at once, the first still
// waiting for a request's answer: its caller took the front end for
// closed.
func TestASecondCloseWaitsForTheFirst(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	held := newRecorder()
	held.hold["slow"] = true
	startNode(t, rs, held, 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	later := predictLater(t, fe, "slow")
	eventually(t, "the item running", func() bool { return held.runs("slow") == 1 })
	closeLater := func() <-chan error {
		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			closed <- fe.Close(ctx)
		}()
		return closed
	}
	first := closeLater()
	eventually(t, "the front end closing", func() bool { return !fe.Ready() })
	second := closeLater()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := fe.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a Close whose context ended while the first drained: %v; want its context's error", err)
	}
	for name, closed := range map[string]<-chan error{"first": first, "second": second} {
		select {
		case err := <-closed:
			t.Fatalf("the %s Close returned (%v) while a request waited for its answer", name, err)
		default:
		}
	}
	close(held.release)
	if a := <-later; a.err != nil {
		t.Fatalf("the request admitted before Close: %v", a.err)
	}
	for name, closed := range map[string]<-chan error{"first": first, "second": second} {
		if err := <-closed; err != nil {
			t.Errorf("the %s Close: %v", name, err)
		}
	}
	if n := rs.Do(t, "EXISTS", "streamer:reply:"+fe.ID()); n != "0" {
		t.Error("the front end's reply stream is still in Redis after the second Close returned")
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := fe.Close(ctx); err != nil {
		t.Errorf("a Close after the first ended: %v; want nil", err)
	}
}

func TestANodeTakesOnlyWhatItCanRunSoon(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	busy := newRecorder()
	for i := range 20 {
		busy.hold[fmt.Sprint(i)] = true
	}
	a := startNode(t, rs, busy, 2, nil) // capacity 4
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range 20 {
		wg.Go(func() { _, errs[i] = predict(t, fe, fmt.Sprint(i)) })
	}
	eventually(t, "20 items on the stream", func() bool { return rs.Do(t, "XLEN", "streamer:items") == "20" })
	// The first node's one worker is busy with what it read first: it takes
	// no more than a batch ahead, and never more than its capacity. The
	// rest waits in Redis for a node that can run it, and is answered there.
	eventually(t, "the first node running", func() bool { return a.Stats().Held > 0 })
	idle := newRecorder()
	b := startNode(t, rs, idle, 8, nil)
	var held int
	eventually(t, "the second node serving the rest", func() bool {
		held = a.Stats().Held
		return int(b.Stats().Answered)+held == 20
	})
	if held > 4 {
		t.Fatalf("the first node held %d items; want at most its capacity, 4", held)
	}
	if got := rs.Do(t, "XPENDING", "streamer:items", "nodes"); !strings.HasPrefix(got, fmt.Sprint(held, "\n")) {
		t.Fatalf("XPENDING says %q; want the %d items the first node holds", got, held)
	}
	close(busy.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
	// The node counts its answers once Redis has taken them, which the
	// front end may see first.
	eventually(t, "the first node's items answered", func() bool { return int(a.Stats().Answered) == held })
}

// A node whose one worker is busy takes the items that arrive meanwhile,
// up to a batch's worth, one after another as they come, so that its next
// batch is ready when the worker frees: no node was idle to take them, and
// in Redis they would wait for this one. It used to read ahead only after
// a read that took all it asked for; once a look ahead found nothing, the
// items that came later waited in Redis until the worker freed.
func TestABusyNodeTakesItsNextBatchAhead(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["first"] = true
	// 1 worker, batch 2, pipeline depth 2: a batch of one is not formed
	// ahead before its MaxLatency, so the worker has room ahead until the
	// node has read two more items.
	n := startNodeOn(t, rs, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 2, MaxLatency: time.Minute, Batching: supervisor.BatchingGreedy}, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	first := predictLater(t, fe, "first")
	eventually(t, "the first item running", func() bool { return rec.runs("first") == 1 })
	var later []<-chan answer
	for i, item := range []string{"second", "third"} {
		later = append(later, predictLater(t, fe, item))
		eventually(t, item+" taken while the worker is busy", func() bool { return n.Stats().Held == 2+i })
	}
	if got := rs.Do(t, "XPENDING", "streamer:items", "nodes"); !strings.HasPrefix(got, "3\n") {
		t.Fatalf("XPENDING says %q; want the 3 items the node holds", got)
	}
	if rec.runs("second")+rec.runs("third") != 0 {
		t.Fatal("the next batch ran while the first held the worker")
	}
	close(rec.release)
	for _, later := range append(later, first) {
		if a := <-later; a.err != nil {
			t.Fatal(a.err)
		}
	}
}

// A node that kept an item too late (it stalled past ClaimIdle, or its
// keep failed) finds it among the idle items it claims: it runs it once,
// where it is running, rather than a second time beside it.
func TestANodeClaimingItsOwnItemBackRunsItOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["first"] = true
	// Room for one more item, so that it claims; a ClaimIdle so long that
	// the node keeps no item during the test.
	n := startNode(t, rs, rec, 1, func(c *broker.NodeConfig) { c.Capacity, c.ClaimIdle = 2, time.Minute })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	first := predictLater(t, fe, "first")
	eventually(t, "the item running", func() bool { return rec.runs("first") == 1 })
	pending := strings.Split(rs.Do(t, "XPENDING", "streamer:items", "nodes", "-", "+", "10"), "\n")
	if len(pending) != 4 || pending[1] != n.Name() {
		t.Fatalf("XPENDING says %q; want the one item the node holds", pending)
	}
	id := pending[0]
	// What a stall leaves in Redis: the node's item, idle for two minutes.
	rs.Do(t, "XCLAIM", "streamer:items", "nodes", n.Name(), "0", id, "IDLE", "120000", "JUSTID")
	eventually(t, "the node's claim taking the item back", func() bool {
		got := strings.Split(rs.Do(t, "XPENDING", "streamer:items", "nodes", "-", "+", "10"), "\n")
		return len(got) == 4 && got[3] == "2" // delivered twice
	})
	// The heartbeat after that claim's: the claim is done with the item.
	beat := rs.Do(t, "ZSCORE", "streamer:nodes", n.Name())
	eventually(t, "the node's next heartbeat", func() bool { return rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()) != beat })
	if st := n.Stats(); st.Read != 1 || st.Claimed != 0 {
		t.Fatalf("the node read %d items and claimed %d; want the one it read, claimed from none", st.Read, st.Claimed)
	}
	close(rec.release)
	if a := <-first; a.err != nil || string(a.out[0]) != "first" {
		t.Fatalf("the item's answer: %q, %v", a.out, a.err)
	}
	if got := rec.runs("first"); got != 1 {
		t.Errorf("the item ran %d times; want once", got)
	}
}

// A node that reads a batch for its idle worker, whose batches take long
// (a second here), reads no batch ahead before that one nears its end:
// the items left in Redis meanwhile go to another node that frees sooner,
// or are withdrawn unread when their caller leaves. The node took the
// queued batch's worker for idle, and read a second batch at once, before
// the first was sent, which ran for a caller long gone (a review saw it
// in 8 of 8 tries).
func TestANodeReadsNoBatchAheadOfALongOneAboutToStart(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	const cost = time.Second
	rec := newRecorder()
	slowFirst := model.Func(func(ctx context.Context, items [][]byte) ([][]byte, error) {
		if string(items[0]) == "slow" {
			time.Sleep(cost) // the model's cost, which the streamer measures
		}
		return rec.Predict(ctx, items)
	})
	n := startNodeOn(t, rs, supervisor.Config{InProcess: slowFirst, Workers: 1, BatchSize: 4, MaxLatency: time.Millisecond}, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	if _, err := predict(t, fe, "slow"); err != nil {
		t.Fatal(err)
	}
	items := []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}
	rec.hold["a0"] = true
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		raw := make([][]byte, len(items))
		for i, s := range items {
			raw[i] = []byte(s)
		}
		_, err := fe.Predict(ctx, raw)
		gaveUp <- err
	}()
	eventually(t, "the request's first batch running", func() bool { return rec.runs("a0") == 1 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, supervisor.ErrCanceled) {
		t.Fatalf("canceled request: %v; want ErrCanceled", err)
	}
	eventually(t, "the items of the batch after it withdrawn unread", func() bool { return fe.FrontEndStats().Withdrawn == 4 })
	close(rec.release)
	eventually(t, "the running batch's answers dropped", func() bool { return fe.Duplicates() == 4 })
	if st := n.Stats(); st.Read != 5 {
		t.Errorf("the node read %d items; want 5, the first and the batch that ran", st.Read)
	}
	for _, item := range items[4:] {
		if rec.runs(item) != 0 {
			t.Errorf("%s ran for a caller gone", item)
		}
	}
}

func TestACanceledRequestsItemsAreWithdrawnBeforeAnyNodeRunsThem(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	busy, fe, first := oneRunning(t, rs, "first")
	// The node's one place is taken: these wait in Redis, unread, until
	// their callers give up.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := fe.Predict(ctx, [][]byte{[]byte("given up 1"), []byte("given up 2")})
		gaveUp <- err
	}()
	onStream(t, rs, 3, "3 items on the stream")
	cancel()
	if err := <-gaveUp; !errors.Is(err, supervisor.ErrCanceled) {
		t.Fatalf("canceled request: %v; want ErrCanceled", err)
	}
	eventually(t, "the given-up items withdrawn", func() bool { return fe.FrontEndStats().Withdrawn == 2 })
	if got := rs.Do(t, "XLEN", "streamer:items"); got != "1" {
		t.Fatalf("XLEN %s after the withdrawal; want 1, the item running", got)
	}
	close(busy.release)
	if a := <-first; a.err != nil {
		t.Fatal(a.err)
	}
	// A later request runs; the withdrawn ones never did.
	if _, err := predict(t, fe, "after"); err != nil {
		t.Fatal(err)
	}
	if busy.runs("given up 1")+busy.runs("given up 2") != 0 {
		t.Fatalf("the node ran withdrawn items: %q", busy.ran)
	}
}

// The answers of one batch go back in a write or two, so that its callers
// come back together: 200 one-item requests that wait behind a running
// batch run as one batch, and their answers take a few entries on the
// front end's reply stream (one to three as a rule: a writer waits while a
// batch is being answered, and a race detector or a loaded machine can
// slow that past a cut; the bound allows ten), where an entry per answer
// would be 201.
func TestABatchsAnswersGoBackInOneWrite(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["first"] = true
	var st *supervisor.Streamer
	startNodeOn(t, rs, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 256, MaxLatency: time.Minute, Batching: supervisor.BatchingGreedy},
		func(c *broker.NodeConfig) { st = c.Streamer })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	first := predictLater(t, fe, "first")
	eventually(t, "the first item running", func() bool { return rec.runs("first") == 1 })
	var later []<-chan answer
	for i := range 200 {
		later = append(later, predictLater(t, fe, fmt.Sprintf("item-%d", i)))
	}
	eventually(t, "the 200 items queued while the worker is busy", func() bool { return st.Stats().Queued == 200 })
	close(rec.release)
	for _, later := range append(later, first) {
		if a := <-later; a.err != nil {
			t.Fatal(a.err)
		}
	}
	if got := st.Stats().BatchSizes[200]; got != 1 {
		t.Fatalf("%d batches of 200 ran; want the 200 items in one", got)
	}
	info := rs.Do(t, "XINFO", "STREAM", "streamer:reply:"+fe.ID())
	_, added, _ := strings.Cut(info, "entries-added\n")
	added, _, _ = strings.Cut(added, "\n")
	if n, err := strconv.Atoi(added); err != nil || n < 1 || n > 10 {
		t.Fatalf("XINFO STREAM of the reply stream:\n%s\nwant entries-added 1 to 10 for 201 answers", info)
	}
}

// A connection that goes silent without a reset (a firewall or a NAT that
// forgot it, a peer gone from the network) is dropped by the read or
// command waiting on it, within its bound, and front ends and nodes go on
// over new connections: every connection both hold is cut at once, the
// reader of answers and the node's blocked read of items among them.
func TestConnectionsGoneSilentAreDroppedAndServingGoesOn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	proxy := redistest.StartProxy(t, rs)
	rec, fe, running := runningThrough(t, rs, proxy.URL())

	cut := time.Now()
	if n := proxy.Cut(); n == 0 {
		t.Fatalf("%s: no connection to cut", proxy)
	}
	close(rec.release)
	a := runningEnds(t, running, "as its connections went silent")
	answersEventually(t, fe, "after", "served again over new connections")
	t.Logf("served again %s after the cut; the running call: %v", time.Since(cut), a.err)
}

// Front ends and nodes whose clocks differ by far more than a heartbeat
// or a deadline still agree: the times one writes for another (heartbeats,
// deadlines, the quarantine's expiries) are on Redis's clock. A node
// behind would otherwise be taken for gone, and one ahead would drop
// every item as past its deadline; a front end likewise.
func TestMachinesWhoseClocksDifferAgree(t *testing.T) {
	const off = 30 * time.Second
	for _, tc := range []struct {
		name        string
		node, front time.Duration
	}{
		{"node behind", -off, 0},
		{"node ahead", off, 0},
		{"front end behind", 0, -off},
		{"front end ahead", 0, off},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			rec := newRecorder()
			var logs syncbuf.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			n := startNode(t, rs, rec, 4, func(c *broker.NodeConfig) {
				broker.SkewClock(&c.Config, tc.node)
				c.Logger = logger
			})
			fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
				broker.SkewClock(&c.Config, tc.front)
				c.Logger = logger
			})
			eventually(t, "front end ready: a node heard from", fe.Ready)
			if got := strings.Count(logs.String(), "clock is off"); got != 1 {
				t.Errorf("the clock off logged %d times; want once, by the machine whose clock is off:\n%s", got, logs.String())
			}
			if got, want := fe.FrontEndStats().ClockOffsetMs, -tc.front.Milliseconds(); got < want-1000 || got > want+1000 {
				t.Errorf("the front end's clock offset: %d ms; want about %d", got, want)
			}
			// predict's requests have a deadline 10 s away.
			if out, err := predict(t, fe, "x"); err != nil || string(out[0]) != "x" {
				t.Fatalf("a request with a deadline: %q, %v; want its answer", out, err)
			}
			if got := n.Stats().Expired; got != 0 {
				t.Errorf("the node dropped %d items as past their deadline; want none", got)
			}
			// The node drops the item past its deadline alone.
			pastAndFuture(t, rs)
			eventually(t, "both items settled", func() bool { return rec.runs("future") == 1 && n.Stats().Expired == 1 })
			if rec.runs("past") != 0 {
				t.Error("the node ran an item whose deadline had passed on Redis's clock")
			}
		})
	}
}

// nobody is the id of a front end that no test runs, for items a test
// writes by hand as a front end elsewhere would.
const nobody = "0123456789abcdef"

// pastAndFuture puts on the shared stream, as a front end elsewhere would,
// an item "past" whose deadline, on Redis's clock, passed a second ago,
// and an item "future" whose deadline is twenty seconds away.
func pastAndFuture(t *testing.T, rs *redistest.Server) {
	t.Helper()
	secs, _, _ := strings.Cut(rs.Do(t, "TIME"), "\n")
	redisNow, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for item, deadline := range map[string]int64{"past": redisNow - 1, "future": redisNow + 20} {
		rs.Do(t, "XADD", "streamer:items", "*", "h", nobody+" 1 0 "+strconv.FormatInt(deadline*1e6, 10)+" 60000", "v", item)
	}
}

// A Redis user whose ACL leaves out TIME serves all the same, on the
// machines' own clocks: the refusal is logged once, and fails nothing.
func TestARedisUserWithoutTimeServes(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "ACL", "SETUSER", "notime", "on", ">pw", "~*", "&*", "+@all", "-time")
	u, err := url.Parse(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("notime", "pw")
	var logs syncbuf.Buffer
	asUser := func(c *broker.Config) {
		c.URL = u.String()
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { asUser(&c.Config) })
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { asUser(&c.Config) })
	eventually(t, "front end ready", fe.Ready)
	if out, err := predict(t, fe, "x"); err != nil || string(out[0]) != "x" {
		t.Fatalf("a request: %q, %v; want its answer", out, err)
	}
	if got := strings.Count(logs.String(), "redis refuses TIME"); got != 2 {
		t.Errorf("the refusal of TIME logged %d times; want once by the node and once by the front end:\n%s", got, logs.String())
	}
}

// A Redis that can never serve, a cluster, is refused with a message that
// says so: by a node and a front end as they start, and by a node that
// finds out only once Redis answers.
func TestARedisClusterIsRefused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{Cluster: true})
	n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL()}, Streamer: startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4})})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, broker.ErrUnsupportedRedis) || !strings.Contains(err.Error(), "runs as a cluster") {
		t.Errorf("a node's start on a cluster: %v; want ErrUnsupportedRedis saying Redis runs as a cluster", err)
	}
	_ = n.Shutdown(context.Background())
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Close(context.Background()) })
	if err := fe.Start(context.Background()); !errors.Is(err, broker.ErrUnsupportedRedis) {
		t.Errorf("a front end's start on a cluster: %v; want ErrUnsupportedRedis", err)
	}
	if _, err := predict(t, fe, "x"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "runs as a cluster") {
		t.Errorf("a request: %v; want ErrUnavailable saying Redis runs as a cluster", err)
	}

	// Down as the node starts, a cluster when it answers.
	rs.Kill()
	late, err := startNodeFailing(t, broker.NodeConfig{Config: broker.Config{URL: rs.URL()}, Streamer: startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4})})
	if errors.Is(err, broker.ErrUnsupportedRedis) {
		t.Fatalf("a node's start while Redis is down: %v; want the error of a Redis that does not answer", err)
	}
	rs.Restart(t)
	eventually(t, "the node refused, saying why", func() bool { return strings.Contains(late.Stats().Refused, "runs as a cluster") })
}

// A Redis that lacks a command streamer needs (an operator renamed it
// away) is refused as a node and a front end start, naming the command:
// a node without XREADGROUP had started, looked alive, and left its
// callers waiting; one without XAUTOCLAIM, served and never claimed.
func TestARedisWithoutACommandStreamerNeedsIsRefused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{RenameAway: []string{"XAUTOCLAIM", "XREADGROUP"}})
	n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL()}, Streamer: startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	if err := n.Start(context.Background()); !errors.Is(err, broker.ErrUnsupportedRedis) || !strings.Contains(err.Error(), "XREADGROUP, XAUTOCLAIM") {
		t.Errorf("a node's start on a Redis without XAUTOCLAIM and XREADGROUP: %v; want ErrUnsupportedRedis naming both", err)
	}
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Close(context.Background()) })
	if err := fe.Start(context.Background()); !errors.Is(err, broker.ErrUnsupportedRedis) || !strings.Contains(err.Error(), "rename-command") {
		t.Errorf("a front end's start on a Redis without XAUTOCLAIM and XREADGROUP: %v; want ErrUnsupportedRedis naming rename-command", err)
	}
}

// A Redis that refuses INFO too is still asked which commands it knows.
// Before, a refused INFO had it served as fit, unasked: a node without
// XREADGROUP started, looked alive, and left its callers waiting.
func TestARedisThatRefusesInfoIsStillAskedForTheCommands(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{RenameAway: []string{"INFO", "XREADGROUP"}})
	n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL()}, Streamer: startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	if err := n.Start(context.Background()); !errors.Is(err, broker.ErrUnsupportedRedis) || !strings.Contains(err.Error(), "does not know the command XREADGROUP") {
		t.Errorf("a node's start on a Redis without INFO and XREADGROUP: %v; want ErrUnsupportedRedis naming XREADGROUP", err)
	}
}

// A node that starts while Redis is down reads no item before it knows
// Redis's clock, on which the items' deadlines are: an item waiting in
// Redis as it comes back is neither dropped as late by a node whose clock
// is ahead, nor run late by one behind.
func TestANodeStartedWhileRedisIsDownReadsOnRedissClock(t *testing.T) {
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{Persist: true})
			rs.Do(t, "XGROUP", "CREATE", "streamer:items", "nodes", "0", "MKSTREAM")
			pastAndFuture(t, rs)
			rs.Kill()
			rec := newRecorder()
			cfg := broker.NodeConfig{Config: broker.Config{URL: rs.URL(), ClaimIdle: 400 * time.Millisecond}, Streamer: startStreamer(t, supervisor.Config{InProcess: rec, Workers: 1, BatchSize: 4, MaxLatency: time.Millisecond}), Capacity: 8}
			broker.SkewClock(&cfg.Config, skew)
			n, _ := startNodeFailing(t, cfg)
			rs.Restart(t)
			eventually(t, "both items settled", func() bool { return rec.runs("future") == 1 && n.Stats().Expired == 1 })
			if rec.runs("past") != 0 {
				t.Error("the node ran an item whose deadline had passed on Redis's clock")
			}
		})
	}
}

// Connections closed under a front end and a node while Redis serves (an
// operator's CLIENT KILL, a proxy that resets them) cost new connections,
// not an outage: the front end does not take Redis for down, and requests
// go on.
func TestConnectionsKilledUnderAFrontEndAreNoOutage(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var logs syncbuf.Buffer
	startNode(t, rs, newRecorder(), 4, nil)
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	eventually(t, "front end ready", fe.Ready)
	if out, err := predict(t, fe, "before"); err != nil || string(out[0]) != "before" {
		t.Fatalf("before: %q, %v", out, err)
	}
	// The reader's blocked read among them: its connection is in use.
	eventually(t, "the reader blocked on its stream", func() bool {
		return strings.Contains(rs.Do(t, "CLIENT", "LIST"), "cmd=xread ")
	})
	if got := rs.Do(t, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); got == "0" {
		t.Fatal("CLIENT KILL closed no connection")
	}
	for i := range 20 {
		if out, err := predict(t, fe, "after"); err != nil || string(out[0]) != "after" {
			t.Fatalf("request %d after the connections were killed: %q, %v", i, out, err)
		}
	}
	if strings.Contains(logs.String(), "redis does not serve") {
		t.Errorf("the front end took Redis for down:\n%s", logs.String())
	}
}

// A Redis whose every new connection closes at once (plain TCP to a TLS
// port, its maxclients, a proxy without its backend) is an outage to a
// node, logged as one, not a connection closed now and then.
func TestANodeWhoseConnectionsAllCloseReportsAnOutage(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{TLS: true})
	var logs syncbuf.Buffer
	cfg := broker.NodeConfig{
		Config:   broker.Config{URL: "redis://" + rs.Addr() + "/0", ClaimIdle: 400 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		Streamer: startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4}),
		Capacity: 8,
	}
	startNodeFailing(t, cfg)
	eventually(t, "the outage logged", func() bool { return strings.Contains(logs.String(), "redis does not serve this node") })
	if got := strings.Count(logs.String(), "a connection to redis closed"); got > 1 {
		t.Errorf("%d lines say a connection closed; want at most one before the outage:\n%s", got, logs.String())
	}
}

// A front end logs when no node has taken requests for a few seconds,
// and when one does again: an operator can tell from its log how long
// requests got 503 for want of a node.
func TestAFrontEndLogsWhenNoNodeTakesRequests(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	const none, again = "no node takes requests", "a node takes requests again"
	eventually(t, "the front end's log that no node takes requests", func() bool { return strings.Contains(logs.String(), none) })
	n := startNode(t, rs, newRecorder(), 4, nil)
	eventually(t, "front end ready", fe.Ready)
	eventually(t, "the front end's log that a node takes requests", func() bool { return strings.Contains(logs.String(), again) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the front end's log that no node takes requests, once the node left", func() bool {
		return strings.Count(logs.String(), none) == 2
	})
	if got := strings.Count(logs.String(), again); got != 1 {
		t.Errorf("%d lines say a node takes requests again; want one:\n%s", got, logs.String())
	}
}

// TestALargeRequestWaitsForTheRoomItLacks: a request larger than most that
// finds no room in the shared backlog has room kept for it in Redis, for
// every front end, and its front end sends it again until it fits; small
// requests are refused meanwhile, naming the room, where before they
// filled each gap first.
func TestALargeRequestWaitsForTheRoomItLacks(t *testing.T) {
	rs, fe := frontWithoutNodes(t, func(c *broker.FrontEndConfig) { c.MaxBacklog = 6 })
	other := startFront(t, rs, func(c *broker.FrontEndConfig) { c.MaxBacklog = 6 })
	eventually(t, "second front end ready", other.Ready)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	later := func(fe *broker.FrontEnd, items ...string) <-chan answer {
		a := make(chan answer, 1)
		go func() {
			raw := make([][]byte, len(items))
			for i, it := range items {
				raw[i] = []byte(it)
			}
			out, err := fe.Predict(ctx, raw)
			a <- answer{out, err}
		}()
		return a
	}
	held := make([]context.CancelFunc, 5)
	for i := range held {
		var hold context.Context
		hold, held[i] = context.WithCancel(ctx)
		go func() { _, _ = fe.Predict(hold, [][]byte{[]byte(fmt.Sprint("small", i))}) }()
	}
	onStream(t, rs, 5, "5 items on the stream")
	big := later(fe, "big0", "big1", "big2")
	eventually(t, "room kept in redis for the large request", func() bool { return strings.HasPrefix(rs.Do(t, "GET", "streamer:room"), "3 ") })
	eventually(t, "the room kept in the other front end's stats", func() bool { return other.Stats().RoomKept == 3 && other.FrontEndStats().RoomKept == 3 })
	_, err := predict(t, other, "small5")
	if !errors.Is(err, supervisor.ErrOverloaded) || !strings.Contains(err.Error(), "keeps room for 3 for a request that waits for it") {
		t.Fatalf("1 item on another front end, with 5 of 6 places taken and room kept for 3: %v; want ErrOverloaded naming the room kept", err)
	}
	// Two callers give up; their items are withdrawn, and the large
	// request, sent again, takes their places.
	for _, give := range held[:2] {
		give()
	}
	onStream(t, rs, 6, "the large request's items on the stream")
	if got := rs.Do(t, "EXISTS", "streamer:room"); got != "0" {
		t.Error("room still kept in redis once the large request took it") // by the admission that took it
	}
	select {
	case a := <-big:
		t.Fatalf("the large request returned before its answer: %q, %v", a.out, a.err)
	default:
	}
	// The front end counts the items once it has the verdict, which may
	// come a moment after Redis ran the admission.
	eventually(t, "the large request's items counted as submitted", func() bool { return fe.Stats().Submitted >= 8 })
	if st := fe.Stats(); st.Submitted != 8 || st.Rejected != 0 {
		t.Errorf("front end: submitted %d, rejected %d; want its 8 items admitted once (2 withdrawn since) and none refused", st.Submitted, st.Rejected)
	}
	cancel()
	if a := answerWithin(t, big, 10*time.Second, "the large request given up did not return"); !errors.Is(a.err, supervisor.ErrCanceled) {
		t.Errorf("the large request given up: %v; want ErrCanceled", a.err)
	}
}
