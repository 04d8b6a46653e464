package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// gate is a model function the test steers: every batch is recorded, and
// batches block while the gate is closed.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	batches [][]string
	started chan int // receives each batch's size as it starts
}

// heldBy starts a streamer of cfg whose in-process model is a closed gate,
// and has its worker take a batch of the one item block, which holds it
// until the gate is released.
func heldBy(t *testing.T, cfg supervisor.Config, block string) (*gate, *supervisor.Streamer) {
	t.Helper()
	g := newGate(false)
	cfg.InProcess = model.Func(g.fn)
	s := start(t, cfg)
	if _, err := s.Submit(context.Background(), items(block)); err != nil {
		t.Fatal(err)
	}
	<-g.started
	return g, s
}

func newGate(open bool) *gate {
	g := &gate{open: make(chan struct{}), started: make(chan int, 1000)}
	if open {
		close(g.open)
	}
	return g
}

func (g *gate) release() { close(g.open) }

func (g *gate) fn(ctx context.Context, items [][]byte) ([][]byte, error) {
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = string(it)
	}
	g.mu.Lock()
	g.batches = append(g.batches, names)
	g.mu.Unlock()
	g.started <- len(items)
	for _, n := range names {
		switch {
		case n == "boom":
			panic("boom item")
		case n == "hang":
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([][]byte, len(items))
	var errs []error
	for i, it := range items {
		out[i] = append([]byte("out:"), it...)
		if strings.HasPrefix(string(it), "bad") {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = fmt.Errorf("%s is not acceptable", it)
		}
	}
	if errs != nil {
		return out, &model.ItemErrors{Errs: errs}
	}
	return out, nil
}

func (g *gate) seen() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

func start(t *testing.T, cfg supervisor.Config) *supervisor.Streamer {
	t.Helper()
	s, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

func items(names ...string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = []byte(n)
	}
	return out
}

// wellSeen is how many batches a model must have answered for an item
// that then crashes two workers alone to be taken for poison: with fewer,
// the item might be innocent and the model one that crashes at random.
const wellSeen = 30

// seenWorking has s answer wellSeen batches, each of one item, so that a
// bad item is told from a model that crashes whatever it runs.
func seenWorking(t *testing.T, s *supervisor.Streamer) {
	t.Helper()
	for i := range wellSeen {
		if _, err := s.Predict(context.Background(), items(fmt.Sprint("warm", i))); err != nil {
			t.Fatalf("warming up, batch %d: %v", i, err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPredictKeepsOrderUnderConcurrency(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), Workers: 3, BatchSize: 8})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 16 {
		wg.Go(func() {
			for r := range 20 {
				in := []string{fmt.Sprintf("c%d-r%d-a", c, r), fmt.Sprintf("c%d-r%d-b", c, r), fmt.Sprintf("c%d-r%d-c", c, r)}
				out, err := s.Predict(context.Background(), items(in...))
				if err != nil {
					errs <- err
					return
				}
				for i := range in {
					if string(out[i]) != "out:"+in[i] {
						errs <- fmt.Errorf("output %d = %q, want %q", i, out[i], "out:"+in[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.Stats()
	if st.Answered != 16*20*3 || st.Failed != 0 {
		t.Errorf("stats: answered %d failed %d, want %d and 0", st.Answered, st.Failed, 16*20*3)
	}
}

// Predict reuses its Futures. A caller that gave up must not have its
// Future reused while its items are still queued or running, and the
// outputs a caller got must stay its own after later calls.
func TestPredictOutputsStayTheCallersOwn(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), Workers: 2, BatchSize: 4, MaxLatency: time.Millisecond})
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := s.Predict(ctx, items(fmt.Sprintf("abandoned-%d", i)))
		cancel()
		if !errors.Is(err, supervisor.ErrDeadline) {
			t.Fatalf("abandoned call %d: %v, want ErrDeadline", i, err)
		}
	}
	g.release()
	const callers, calls = 16, 50
	got := make([][][]byte, callers*calls)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for r := range calls {
				out, err := s.Predict(context.Background(), items(fmt.Sprintf("c%d-r%d", c, r)))
				if err != nil {
					t.Error(err)
					return
				}
				got[c*calls+r] = out
			}
		})
	}
	wg.Wait()
	for c := range callers {
		for r := range calls {
			want := fmt.Sprintf("out:c%d-r%d", c, r)
			if out := got[c*calls+r]; len(out) != 1 || string(out[0]) != want {
				t.Fatalf("caller %d call %d kept %q, want [%q]", c, r, out, want)
			}
		}
	}
	// An abandoned call may have been refused before it was queued (its
	// deadline passed first); every one that was queued is answered.
	waitFor(t, "the abandoned items to be answered", func() bool {
		st := s.Stats()
		return st.Submitted >= callers*calls && st.Answered == st.Submitted
	})
}

// A caller woken by its answer finds it counted in Stats.
func TestAnswerIsCountedBeforeTheCallerWakes(t *testing.T) {
	echo := func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }
	s := start(t, supervisor.Config{InProcess: model.Func(echo), Workers: 1, BatchSize: 1})
	for i := range 5000 {
		if _, err := s.Predict(context.Background(), items("x")); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().Answered; got != uint64(i+1) {
			t.Fatalf("after %d answers Stats counts %d", i+1, got)
		}
	}
}

func TestLoneRequestDoesNotWaitForMaxLatency(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxLatency: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := s.Predict(ctx, items("alone"))
	if err != nil {
		t.Fatalf("a lone request must run at once on an idle worker: %v", err)
	}
	if string(out[0]) != "out:alone" {
		t.Fatalf("got %q", out[0])
	}
}

func TestBusyWorkerGetsWhatQueuedWhenItFrees(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxLatency: time.Hour, BatchSize: 64})
	first, err := s.Submit(context.Background(), items("first"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	var rest []*supervisor.Future
	for i := range 10 {
		f, err := s.Submit(context.Background(), items(fmt.Sprint("later", i)))
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, f)
	}
	g.release()
	for _, f := range append(rest, first) {
		if _, err := f.Result(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sizes := []int{}
	for _, b := range g.seen() {
		sizes = append(sizes, len(b))
	}
	if !slices.Equal(sizes, []int{1, 10}) {
		t.Fatalf("batch sizes %v, want [1 10]: the ten items should wait for the busy worker and go together", sizes)
	}
}

func TestFullBatchIsPrefetchedForABusyWorker(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxLatency: time.Hour, BatchSize: 4})
	first, err := s.Submit(context.Background(), items("a"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	second, err := s.Submit(context.Background(), items("b", "c", "d", "e"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second batch in flight", func() bool { return s.Slots()[0].InFlight == 2 })
	g.release()
	for _, f := range []*supervisor.Future{first, second} {
		if _, err := f.Result(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.seen(); !reflect.DeepEqual(got, [][]string{{"a"}, {"b", "c", "d", "e"}}) {
		t.Fatalf("batches %q, want [a] then the prefetched full batch [b c d e]", got)
	}
}

func TestKeysNeverShareABatch(t *testing.T) {
	g, s := heldBy(t, supervisor.Config{MaxLatency: time.Hour}, "x-block")
	var futures []*supervisor.Future
	for i := range 12 {
		key := []string{"k1", "k2", "k3"}[i%3]
		f, err := s.SubmitRequest(context.Background(), supervisor.Request{Items: items(key + "-" + fmt.Sprint(i)), Keys: []string{key}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	g.release()
	for _, f := range futures {
		if _, err := f.Result(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range g.seen()[1:] {
		key, _, _ := strings.Cut(b[0], "-")
		for _, name := range b {
			if !strings.HasPrefix(name, key+"-") {
				t.Fatalf("batch %v mixes keys", b)
			}
		}
		if len(b) != 4 {
			t.Errorf("batch %v: want the 4 items of its key together", b)
		}
	}
}

func TestPoisonItemIsIsolatedAndRemembered(t *testing.T) {
	g, s := heldBy(t, supervisor.Config{MaxLatency: time.Hour, BackoffMin: time.Millisecond}, "block")
	var good []*supervisor.Future
	for i := range 15 {
		f, err := s.Submit(context.Background(), items(fmt.Sprint("good", i)))
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, f)
	}
	bad, err := s.Submit(context.Background(), items("fine", "boom"))
	if err != nil {
		t.Fatal(err)
	}
	g.release()
	for i, f := range good {
		out, err := f.Result(context.Background())
		if err != nil || string(out[0]) != fmt.Sprint("out:good", i) {
			t.Fatalf("good item %d: %q, %v", i, out, err)
		}
	}
	_, err = bad.Result(context.Background())
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("poison request: %v, want ItemError index 1 wrapping ErrPoison", err)
	}
	crashes := s.Stats().Crashes
	_, err = s.Submit(context.Background(), items("boom"))
	if !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("a known poison item must be refused on sight, got %v", err)
	}
	if got := s.Stats().Crashes; got != crashes {
		t.Fatalf("crashes went from %d to %d: the known poison item reached a worker", crashes, got)
	}
}

func TestHangingBatchTimesOutAndIsIsolated(t *testing.T) {
	g := newGate(true)
	// A WorkerTimeout well past a stall of a loaded machine: the items that
	// run alone after the split must not time out too.
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), WorkerTimeout: 500 * time.Millisecond, BackoffMin: time.Millisecond, Workers: 2})
	f, err := s.Submit(context.Background(), items("ok1", "hang", "ok2"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Result(context.Background())
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("got %v, want item 1 poison", err)
	}
	if string(out[0]) != "out:ok1" || string(out[2]) != "out:ok2" {
		t.Fatalf("batch-mates of the hanging item: %q", out)
	}
	if _, err := s.Predict(context.Background(), items("after")); err != nil {
		t.Fatalf("streamer must keep serving: %v", err)
	}
}

// TestItemsWhoseCallerLeftLeaveTheQueueAtOnce: a Predict call that ends
// before its answer (its deadline, its caller gone) leaves its items
// queued no longer than a sweep takes: they held their bytes and their
// places until a batch reached them, which a busy worker can put off for
// as long as its run takes. A client that set short deadlines on large
// items kept the server's memory that way.
func TestItemsWhoseCallerLeftLeaveTheQueueAtOnce(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), BatchSize: 1, MaxLatency: time.Hour, PipelineDepth: 1})
	running, err := s.Submit(context.Background(), items("running"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := s.Predict(ctx, items(fmt.Sprint(i)))
		cancel()
		if !errors.Is(err, supervisor.ErrDeadline) {
			t.Fatalf("a call past its deadline: %v, want ErrDeadline", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := s.Predict(ctx, items("left"))
		left <- err
	}()
	waitFor(t, "the call that will leave queued", func() bool { return s.Stats().Queued > 0 })
	cancel()
	if err := <-left; !errors.Is(err, supervisor.ErrCanceled) {
		t.Fatalf("a call whose caller left: %v, want ErrCanceled", err)
	}
	waitFor(t, "the queue emptied of the items whose callers left, while the worker still runs", func() bool { return s.Stats().Queued == 0 })
	g.release()
	if _, err := running.Result(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestABatchSentAheadWhoseCallersLeftDoesNotRun: a worker process is sent
// its next batch while it runs one. When every caller of that batch
// leaves, the batch is asked back and dropped, counted canceled, however
// many items wait behind it, and whether the caller called Predict or
// Submit and Result; before, the worker ran it for nobody, and its items
// counted ok.
func TestABatchSentAheadWhoseCallersLeftDoesNotRun(t *testing.T) {
	for _, c := range []struct {
		name   string
		queued int
		submit bool
	}{{"predict", 0, false}, {"predict, a queue behind", 16, false}, {"submit, a queue behind", 16, true}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := processConfig("sleep:300ms,0", 1, 8)
			cfg.MaxLatency = time.Millisecond
			s := start(t, cfg)
			var others sync.WaitGroup
			call := func(name string) {
				others.Add(1)
				go func() {
					defer others.Done()
					if _, err := s.Predict(context.Background(), items(name)); err != nil {
						t.Error(err)
					}
				}()
			}
			call("running")
			waitFor(t, "a batch running", func() bool { return s.Slots()[0].InFlight == 1 })
			ctx, cancel := context.WithCancel(context.Background())
			left := make(chan error, 1)
			go func() {
				if c.submit {
					f, err := s.Submit(ctx, items("left"))
					if err == nil {
						<-ctx.Done()
						_, err = f.Result(ctx)
					}
					left <- err
					return
				}
				_, err := s.Predict(ctx, items("left"))
				left <- err
			}()
			waitFor(t, "a batch sent ahead", func() bool { return s.Slots()[0].InFlight == 2 })
			for i := range c.queued {
				call(fmt.Sprint("queued", i))
			}
			waitFor(t, "the callers queued", func() bool { return s.Stats().Queued == c.queued })
			cancel()
			if err := <-left; !errors.Is(err, supervisor.ErrCanceled) {
				t.Fatalf("a call whose caller left: %v, want ErrCanceled", err)
			}
			others.Wait()
			waitFor(t, "the worker's pipeline empty", func() bool { return s.Slots()[0].InFlight == 0 })
			st := s.Stats()
			if ok := st.Answered - st.Failed; ok != uint64(1+c.queued) || st.Canceled != 1 {
				t.Errorf("items ok %d, canceled %d; want %d and 1 (the batch whose caller left ran)", ok, st.Canceled, 1+c.queued)
			}
		})
	}
}

func TestOverloadIsRefusedAtOnce(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxQueue: 3, BatchSize: 1, MaxLatency: time.Hour, PipelineDepth: 1})
	// One batch runs; the queue holds three more; the rest are refused.
	running, err := s.Submit(context.Background(), items("running"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	var accepted []*supervisor.Future
	for i := range 10 {
		f, err := s.Submit(context.Background(), items(fmt.Sprint(i)))
		switch {
		case i < 3 && err != nil:
			t.Fatalf("request %d refused with %d of 3 places taken: %v", i, i, err)
		case i >= 3 && !errors.Is(err, supervisor.ErrOverloaded):
			t.Fatalf("request %d with the queue full: got %v, want ErrOverloaded", i, err)
		case err == nil:
			accepted = append(accepted, f)
		}
	}
	if st := s.Stats(); st.Rejected != 7 || st.Queued != 3 {
		t.Fatalf("stats %+v: want 7 rejected and 3 queued", st)
	}
	g.release()
	for i, f := range append(accepted, running) {
		if _, err := f.Result(context.Background()); err != nil {
			t.Fatalf("accepted request %d must be answered: %v", i, err)
		}
	}
	if _, err := s.Predict(context.Background(), items("after")); err != nil {
		t.Fatalf("with the queue empty again: %v", err)
	}
}

// TestRoomHeldByExpiredItemsIsGivenBack: a queue full of items whose
// deadline passed refuses at once, without walking the queue, and then gives
// their room back, answering them expired, without any of them running.
func TestRoomHeldByExpiredItemsIsGivenBack(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxQueue: 4, BatchSize: 1, MaxLatency: time.Hour, PipelineDepth: 1})
	if _, err := s.Submit(context.Background(), items("running")); err != nil {
		t.Fatal(err)
	}
	<-g.started
	// Time enough for the four to be queued before it passes.
	deadline := time.Now().Add(300 * time.Millisecond)
	var doomed []*supervisor.Future
	for i := range 4 {
		f, err := s.SubmitRequest(context.Background(), supervisor.Request{Items: items(fmt.Sprint("doomed", i)), Deadline: deadline})
		if err != nil {
			t.Fatal(err)
		}
		doomed = append(doomed, f)
	}
	for _, f := range doomed {
		if _, err := f.Result(context.Background()); !errors.Is(err, supervisor.ErrDeadline) {
			t.Fatalf("doomed item: %v, want ErrDeadline", err)
		}
	}
	// Their callers are answered; their room is taken back after the next
	// refusal asks for a sweep.
	waitFor(t, "room for a new item", func() bool {
		_, err := s.Submit(context.Background(), items("fresh"))
		return err == nil
	})
	if st := s.Stats(); st.Expired != 4 {
		t.Fatalf("stats %+v: want the 4 doomed items counted expired", st)
	}
	g.release()
	for _, batch := range g.seen() {
		for _, name := range batch {
			if strings.HasPrefix(name, "doomed") {
				t.Fatalf("expired item %s reached the model", name)
			}
		}
	}
}

func TestExpiredItemsNeverReachTheModel(t *testing.T) {
	g, s := heldBy(t, supervisor.Config{MaxLatency: time.Hour}, "block")
	late, err := s.SubmitRequest(context.Background(), supervisor.Request{Items: items("late"), Deadline: time.Now().Add(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Result(context.Background()); !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("got %v, want ErrDeadline at the deadline", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone, err := s.Submit(ctx, items("gone"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	g.release()
	<-late.Done()
	<-gone.Done()
	if _, err := gone.Result(context.Background()); !errors.Is(err, supervisor.ErrCanceled) {
		t.Fatalf("canceled item: %v, want ErrCanceled", err)
	}
	if _, err := s.Predict(context.Background(), items("after")); err != nil {
		t.Fatal(err)
	}
	for _, b := range g.seen() {
		if slices.Contains(b, "late") || slices.Contains(b, "gone") {
			t.Fatalf("batch %v holds an item whose deadline passed or whose caller left", b)
		}
	}
}

// A request that runs out of time says whose deadline it was: the
// request's own, or its caller's context's when that came first.
func TestTheDeadlineThatPassedIsNamed(t *testing.T) {
	g, s := heldBy(t, supervisor.Config{MaxLatency: time.Hour}, "block")
	defer g.release()
	const soon, later = 20 * time.Millisecond, time.Hour
	tests := []struct {
		name          string
		ctx, deadline time.Duration // from now; zero: none
		want          string
	}{
		{"the request's alone", 0, soon, "the request's deadline"},
		{"the caller's alone", soon, 0, "the caller's deadline"},
		{"the caller's first", soon, later, "the caller's deadline"},
		{"the request's first", later, soon, "the request's deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, req := context.Background(), supervisor.Request{Items: items("late")}
			if tc.ctx != 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			if tc.deadline != 0 {
				req.Deadline = time.Now().Add(tc.deadline)
			}
			_, err := s.PredictRequest(ctx, req)
			if !errors.Is(err, supervisor.ErrDeadline) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrDeadline naming %s", err, tc.want)
			}
		})
	}
}

func TestItemErrorsFailOnlyTheirItem(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn)})
	out, err := s.Predict(context.Background(), items("ok", "bad-one", "ok2"))
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, supervisor.ErrModel) {
		t.Fatalf("got %v, want item 1 ErrModel", err)
	}
	if string(out[0]) != "out:ok" || string(out[2]) != "out:ok2" {
		t.Fatalf("outputs %q", out)
	}
}

func TestWrongOutputCountFailsTheBatchClearly(t *testing.T) {
	fn := func(_ context.Context, items [][]byte) ([][]byte, error) { return items[:1], nil }
	s := start(t, supervisor.Config{InProcess: model.Func(fn)})
	_, err := s.Predict(context.Background(), items("a", "b"))
	if !errors.Is(err, supervisor.ErrModelFailed) || !strings.Contains(err.Error(), "1 outputs for a batch of 2") {
		t.Fatalf("got %v", err)
	}
}

func TestShutdownDrainsAdmittedWork(t *testing.T) {
	g := newGate(false)
	s, err := supervisor.New(supervisor.Config{InProcess: model.Func(g.fn), BatchSize: 2, MaxLatency: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var futures []*supervisor.Future
	for i := range 7 {
		f, err := s.Submit(context.Background(), items(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	waitFor(t, "draining", func() bool { return !s.Ready() })
	if _, err := s.Submit(context.Background(), items("new")); !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Fatalf("submit while draining: %v, want ErrShuttingDown", err)
	}
	g.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, f := range futures {
		out, err := f.Result(context.Background())
		if err != nil || string(out[0]) != fmt.Sprint("out:", i) {
			t.Fatalf("item %d: %q %v", i, out, err)
		}
	}
}

func TestShutdownPastGraceAnswersEverything(t *testing.T) {
	g := newGate(false)
	s, err := supervisor.New(supervisor.Config{InProcess: model.Func(g.fn), BatchSize: 1, MaxLatency: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var futures []*supervisor.Future
	for i := range 4 {
		f, err := s.Submit(context.Background(), items(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Fatal("shutdown past its grace must say so")
	}
	for i, f := range futures {
		select {
		case <-f.Done():
		default:
			t.Fatalf("item %d was not answered by Shutdown", i)
		}
		if _, err := f.Result(context.Background()); !errors.Is(err, supervisor.ErrShuttingDown) {
			t.Fatalf("item %d: %v, want ErrShuttingDown", i, err)
		}
	}
	g.release()
}

// TestShutdownPastGraceWaitsForTheAnswerUnderWay: a Shutdown whose context
// has ended kills an in-process worker that is completing the Futures of
// the batch it answered; it returns only once they are all completed, as
// it promises. (Before, the worker's death was heard at once, and
// Shutdown returned while the worker went on completing them.) The first
// Future's OnDone holds the worker in the middle of the answer, for a
// while, or until Shutdown returned.
func TestShutdownPastGraceWaitsForTheAnswerUnderWay(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), Workers: 2, Batching: supervisor.BatchingGreedy})
	// A batch that runs until its worker is killed keeps the drain from
	// ending: Shutdown kills the workers for its ended context.
	if _, err := s.Submit(context.Background(), items("hang")); err != nil {
		t.Fatal(err)
	}
	<-g.started
	futs, errs := s.SubmitRequests(context.Background(), []supervisor.Request{{Items: items("a")}, {Items: items("b")}})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := <-g.started; n != 2 {
		t.Fatalf("a batch of %d items; want a and b together", n)
	}
	delivering, returned := make(chan struct{}), make(chan struct{})
	futs[0].OnDone(func() {
		close(delivering)
		select {
		case <-returned:
		case <-time.After(500 * time.Millisecond):
		}
	})
	g.release()
	<-delivering
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Shutdown(ended)
	var answered bool
	select {
	case <-futs[1].Done():
		answered = true
	default:
	}
	close(returned)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown: %v; want its context's error", err)
	}
	if !answered {
		t.Fatal("Shutdown returned before the second item of the batch under way was answered")
	}
	for i, want := range []string{"out:a", "out:b"} {
		if out, err := futs[i].Result(context.Background()); err != nil || string(out[0]) != want {
			t.Errorf("request %d answered %q, %v; want %s", i, out, err, want)
		}
	}
}

func TestNoWorkerMeansQuickUnavailable(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), BackoffMin: time.Hour, BackoffMax: time.Hour, UnavailableAfter: 50 * time.Millisecond})
	f, err := s.Submit(context.Background(), items("boom"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Result(context.Background()); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Fatalf("queued item with no worker: %v, want ErrUnavailable", err)
	}
	if _, err := s.Submit(context.Background(), items("x")); !errors.Is(err, supervisor.ErrUnavailable) {
		t.Fatalf("new item with no worker: %v, want ErrUnavailable", err)
	}
	if s.Ready() {
		t.Fatal("Ready must be false with no worker")
	}
}

func TestEverySlotFailingIsFatal(t *testing.T) {
	var calls atomic.Int32
	fn := func(context.Context, [][]byte) ([][]byte, error) {
		calls.Add(1)
		panic("always")
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), MaxRestarts: 2, BackoffMin: time.Millisecond, Workers: 2})
	// Each item kills a worker once as a fresh batch (which counts towards
	// MaxRestarts) and once more alone before it is isolated (which does not):
	// 2 slots × 3 counted restarts need 6 items.
	for i := range 6 {
		if f, err := s.Submit(context.Background(), items(fmt.Sprint(i))); err == nil {
			<-f.Done()
		}
	}
	select {
	case err := <-s.Fatal():
		// Given up at a death after its second restart: its third at
		// least (a hunt's deaths may be counted together).
		var deaths int
		if _, scanErr := fmt.Sscanf(err.Error(), "every slot given up: the last one's worker died %d times within 1m0s, past the 2 restarts allowed", &deaths); scanErr != nil || deaths < 3 {
			t.Fatalf("fatal error %q, want it to say every slot was given up after 3 deaths or more, past 2 restarts", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no fatal error after %d crashes; slots %+v", calls.Load(), s.Slots())
	}
}

// TestBadItemsAmongGoodOnesDoNotUseUpTheRestarts: a client sending item
// after item that crashes the model, each in a batch with good items,
// does not have the server give up its slot: the hunt that isolates each
// one answers the good items, which shows the model sound, and the death
// the bad item caused is not counted. (Before, MaxRestarts + 1 of them in
// a minute took a slot down, and with every slot down the server exited.)
func TestBadItemsAmongGoodOnesDoNotUseUpTheRestarts(t *testing.T) {
	fn := func(_ context.Context, batch [][]byte) ([][]byte, error) {
		for _, it := range batch {
			if strings.HasPrefix(string(it), "bad") {
				panic("bad item " + string(it))
			}
		}
		return batch, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), Workers: 1, BatchSize: 8, MaxRestarts: 1, BackoffMin: time.Millisecond})
	for round := range 4 {
		names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		names[5] = fmt.Sprint("bad", round)
		f, err := s.Submit(context.Background(), items(names...))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		out, err := f.Result(context.Background())
		var itemErr *supervisor.ItemError
		if !errors.As(err, &itemErr) || itemErr.Index != 5 || !errors.Is(err, supervisor.ErrPoison) {
			t.Fatalf("round %d: %v; want the bad item, 5, refused as poison", round, err)
		}
		for i, name := range names {
			if i != 5 && string(out[i]) != name {
				t.Fatalf("round %d: item %d answered %q", round, i, out[i])
			}
		}
	}
	select {
	case err := <-s.Fatal():
		t.Fatalf("the server gave up: %v", err)
	default:
	}
	waitFor(t, "the worker ready again", func() bool { return s.Slots()[0].State == supervisor.SlotReady })
}

// TestPoisonFirstInAFullBatchWithOneWorker is the hardest case for the hunt:
// the bad item always lands in the half that runs first, so the one worker
// dies again and again in a row. The hunt must not slow its own restarts
// into the unavailable window, and every other item must be answered.
func TestPoisonFirstInAFullBatchWithOneWorker(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), Workers: 1, BatchSize: 64})
	names := []string{"boom"}
	for i := 1; i < 64; i++ {
		names = append(names, fmt.Sprint("ok", i))
	}
	out, err := s.Predict(context.Background(), items(names...))
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 0 || !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("got %v, want item 0 isolated as poison", err)
	}
	for i := 1; i < 64; i++ {
		if string(out[i]) != "out:"+names[i] {
			t.Fatalf("item %d: %q, want it answered", i, out[i])
		}
	}
	if st := s.Slots()[0]; st.State == supervisor.SlotFailed {
		t.Fatalf("the hunt for one bad item gave up the slot: %+v", st)
	}
}

// TestAModelCrashingOnEveryBatchIsNotBlamedOnItems: a model that panics
// whatever it runs fails each caller with ErrModelFailed, quarantines
// nothing, and its deaths count towards MaxRestarts, so that the server
// gives up. (Before, each lone item crashed two workers and was refused as
// poison, then on sight, and the hunt's second death was not counted.)
func TestAModelCrashingOnEveryBatchIsNotBlamedOnItems(t *testing.T) {
	fn := func(context.Context, [][]byte) ([][]byte, error) { panic("crashes on everything") }
	s := start(t, supervisor.Config{InProcess: model.Func(fn), Workers: 1, MaxRestarts: 5, BackoffMin: time.Millisecond})
	for i := 0; ; i++ {
		select {
		case <-s.Fatal():
			if i > 3 {
				t.Fatalf("the server gave up after %d requests; want each to use up two restarts of 5", i)
			}
			return
		default:
		}
		_, err := s.Predict(context.Background(), items(fmt.Sprint("innocent", i)))
		switch {
		case errors.Is(err, supervisor.ErrPoison):
			t.Fatalf("request %d: %v; want the model, not the item, blamed", i, err)
		case errors.Is(err, supervisor.ErrModelFailed) && !strings.Contains(err.Error(), "crashes on every batch"):
			t.Fatalf("request %d: %v; want it to say the model crashes on every batch", i, err)
		case err != nil && !errors.Is(err, supervisor.ErrModelFailed) && !errors.Is(err, supervisor.ErrUnavailable):
			t.Fatalf("request %d: %v; want ErrModelFailed", i, err)
		case i > 10:
			t.Fatalf("no fatal error after %d requests that crashed the model; slots %+v", i, s.Slots())
		}
		if errors.Is(err, supervisor.ErrUnavailable) {
			waitFor(t, "the server to give up", func() bool { return len(s.Fatal()) > 0 })
		}
		// The item is answered before its slot's restarts are looked at:
		// the next request is sent once the slot is restarted or given up.
		waitFor(t, "the slot restarted or given up", func() bool {
			return len(s.Fatal()) > 0 || s.Slots()[0].State == supervisor.SlotReady
		})
	}
}

// TestAModelTurningToCrashOnEveryBatchIsBlamed: a model seen answering
// that then crashes on every batch (its device went bad) may have the
// first item it crashed on taken for poison, but no other: with no batch
// answered since that verdict, its deaths are not put down to the item,
// and the next lone item to crash is the model's fault. (Before, each
// conviction hid its own deaths from the next verdict, and every innocent
// item was taken for poison.)
func TestAModelTurningToCrashOnEveryBatchIsBlamed(t *testing.T) {
	var broken atomic.Bool
	fn := func(_ context.Context, batch [][]byte) ([][]byte, error) {
		if broken.Load() {
			panic("the device went bad")
		}
		return batch, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), Workers: 1, MaxRestarts: 1000, BackoffMin: time.Millisecond})
	for i := range 64 {
		if _, err := s.Predict(context.Background(), items(fmt.Sprint("fine", i))); err != nil {
			t.Fatal(err)
		}
	}
	broken.Store(true)
	for i := range 10 {
		_, err := s.Predict(context.Background(), items(fmt.Sprint("innocent", i)))
		if i > 0 && !errors.Is(err, supervisor.ErrModelFailed) {
			t.Errorf("request %d after the model turned bad: %v; want ErrModelFailed", i, err)
		}
	}
	if n := s.Stats().Poisoned; n > 1 {
		t.Errorf("%d innocent items taken for poison; want at most the first", n)
	}
}

// TestAModelCrashingAtRandomIsNotBlamedOnItems: a model that crashes on
// two batches of three whatever they hold, among callers sending items
// at once, fails some of them with ErrModelFailed and answers the others,
// but refuses none as poison: two deaths alone are what such a model does
// to any item. (Before, an item alone in the batches that crashed twice
// was quarantined.)
func TestAModelCrashingAtRandomIsNotBlamedOnItems(t *testing.T) {
	var calls atomic.Int64
	fn := func(_ context.Context, batch [][]byte) ([][]byte, error) {
		if calls.Add(1)%3 != 0 {
			panic("crashes at random")
		}
		return batch, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), Workers: 2, BatchSize: 4, MaxRestarts: 1000, BackoffMin: time.Millisecond})
	var futures []*supervisor.Future
	for i := range 40 {
		f, err := s.Submit(context.Background(), items(fmt.Sprint("innocent", i)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	failed := 0
	for i, f := range futures {
		out, err := f.Result(context.Background())
		switch {
		case errors.Is(err, supervisor.ErrModelFailed):
			failed++
		case err != nil:
			t.Errorf("item %d: %v; want its output or ErrModelFailed", i, err)
		case string(out[0]) != fmt.Sprint("innocent", i):
			t.Errorf("item %d answered %q", i, out[0])
		}
	}
	if failed == 0 {
		t.Errorf("no item failed although the model crashed on two batches of three")
	}
	if st := s.Stats(); st.Poisoned != 0 {
		t.Errorf("%d items taken for poison", st.Poisoned)
	}
	if _, err := s.Submit(context.Background(), items("innocent0")); errors.Is(err, supervisor.ErrPoison) {
		t.Errorf("an innocent item is refused on sight: %v", err)
	}
}

// TestARequestSentAgainAndAgainIsNotBlamedForAModelCrashingAtRandom: many
// callers sending the same request to a model that crashes on one batch
// of three have every batch that dies hold a copy of its items, but the
// model answers copies too, so that the items are run again rather than
// taken for poison. (Before, the deaths of every batch holding a copy
// were left out of the model's record as the items', the model seemed to
// answer everything else, and the items were convicted and refused on
// sight: hundreds of requests answered 422 by a server whose model had
// answered two batches of three.)
func TestARequestSentAgainAndAgainIsNotBlamedForAModelCrashingAtRandom(t *testing.T) {
	var calls atomic.Int64
	fn := func(_ context.Context, batch [][]byte) ([][]byte, error) {
		if calls.Add(1)%3 == 0 {
			panic("crashes at random")
		}
		return batch, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), Workers: 2, BatchSize: 8, MaxRestarts: 1 << 20, BackoffMin: time.Millisecond})
	var (
		wg             sync.WaitGroup
		answered, lost atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for range 400 {
				out, err := s.Predict(context.Background(), items("a", "b", "c"))
				switch {
				case errors.Is(err, supervisor.ErrModelFailed):
					lost.Add(1) // five crashes alone in a row: it may be
				case err != nil:
					t.Errorf("the request failed: %v; want it answered", err)
					return
				case string(out[0]) != "a" || string(out[2]) != "c":
					t.Errorf("answered %q", out)
				default:
					answered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.Poisoned != 0 {
		t.Errorf("%d items taken for poison", st.Poisoned)
	}
	if n := lost.Load(); n > 16 {
		t.Errorf("%d requests failed with ErrModelFailed of %d; want few: an item is run alone again until the model answers it, five times", n, n+answered.Load())
	}
	t.Logf("%d answered, %d failed, %d deaths", answered.Load(), lost.Load(), st.Crashes)
}

// everyOtherBatch is a model that crashes on every other batch it is given,
// the first included, whatever the batch holds: a model that crashes at
// random, made deterministic.
func everyOtherBatch() model.Func {
	var calls atomic.Int64
	return func(_ context.Context, batch [][]byte) ([][]byte, error) {
		if calls.Add(1)%2 == 1 {
			panic("crashes at random")
		}
		return batch, nil
	}
}

// TestAModelCrashingAtRandomUsesUpItsRestarts: a model crashing on every
// other batch has each request of four hunted for a bad item that is not
// there: the batch dies, one half is answered and the other dies, and of
// its halves one is answered and the other dies once, then is answered.
// The hunt ends with no verdict, and its three deaths count towards
// MaxRestarts: the slot is given up at its 11th death, or at most two
// later, as the deaths of a hunt under way count when it ends. (Before,
// only the first death of each hunt counted, and the slot was given up at
// its 31st.)
func TestAModelCrashingAtRandomUsesUpItsRestarts(t *testing.T) {
	const maxRestarts = 10
	s := start(t, supervisor.Config{InProcess: everyOtherBatch(), Workers: 1, BatchSize: 4, MaxRestarts: maxRestarts, BackoffMin: time.Millisecond})
	for round := 0; round < 3*maxRestarts; round++ {
		f, err := s.Submit(context.Background(), items("a", "b", "c", "d"))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		select {
		case <-f.Done():
			if out, err := f.Result(context.Background()); err != nil || string(out[3]) != "d" {
				t.Fatalf("round %d: %q, %v; want every item answered, by the model that answers every other batch", round, out, err)
			}
		case <-s.Fatal():
			deaths := s.Stats().Crashes
			if deaths <= maxRestarts || deaths > maxRestarts+3 {
				t.Fatalf("the slot was given up at its death %d, in round %d; want it given up at a death from %d to %d, with MaxRestarts %d",
					deaths, round, maxRestarts+1, maxRestarts+3, maxRestarts)
			}
			return
		}
	}
	t.Fatalf("the slot was not given up after %d deaths, with MaxRestarts %d; slots %+v", s.Stats().Crashes, maxRestarts, s.Slots())
}

// TestAHuntGoesOnWhenItsCallerLeaves: the pieces of a hunt run though the
// caller of their items has left, so that the bad item is found: it is
// convicted, refused on sight afterwards, and the deaths it caused do not
// count towards MaxRestarts. (Before, the pieces were dropped with their
// caller, the hunt ended with no verdict, and a client giving up on
// requests that carry a bad item had its first deaths counted until the
// slots were given up.)
func TestAHuntGoesOnWhenItsCallerLeaves(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int64
	fn := func(ctx context.Context, batch [][]byte) ([][]byte, error) {
		runs.Add(1)
		for _, it := range batch {
			if string(it) != "bad" {
				continue
			}
			if len(batch) == 1 {
				<-release // its caller leaves meanwhile
			}
			panic("crashes on a bad item")
		}
		return batch, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), Workers: 1, BatchSize: 2, MaxRestarts: 1, BackoffMin: time.Millisecond})
	seenWorking(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.Submit(ctx, items("bad", "good")); err != nil {
		t.Fatal(err)
	}
	// The batch died, and its half holding the bad item runs alone.
	waitFor(t, "the bad item running alone", func() bool { return s.Stats().Crashes == 1 && s.Slots()[0].InFlight == 1 })
	cancel()
	close(release)
	waitFor(t, "the bad item convicted", func() bool { return s.Stats().Poisoned == 1 })
	// Its batch-mate ran in the other half, its caller gone.
	waitFor(t, "the good item answered", func() bool { return s.Stats().Answered == s.Stats().Submitted })
	if st := s.Stats(); st.Canceled != 1 {
		t.Errorf("%d items counted canceled; want the good one, whose caller left before it ran", st.Canceled)
	}
	if _, err := s.Submit(context.Background(), items("bad")); !errors.Is(err, supervisor.ErrPoison) {
		t.Errorf("the bad item sent again: %v; want it refused on sight with ErrPoison", err)
	}
	if out, err := s.Predict(context.Background(), items("after")); err != nil || len(out) != 1 || string(out[0]) != "after" {
		t.Fatalf("the item after the hunt: %q, %v; want it answered, the deaths of the hunt forgiven", out, err)
	}
	select {
	case err := <-s.Fatal():
		t.Fatalf("the slot was given up: %v", err)
	default:
	}
}

// TestASlotOverItsRestartsIsNotGivenUpAtShutdown: a slot that a hunt
// ended without a verdict puts over MaxRestarts, while its worker
// answers, is given up at its next death, not when its worker stops with
// the streamer: Shutdown is no crash loop.
func TestASlotOverItsRestartsIsNotGivenUpAtShutdown(t *testing.T) {
	s := start(t, supervisor.Config{InProcess: everyOtherBatch(), Workers: 1, BatchSize: 4, MaxRestarts: 2, BackoffMin: time.Millisecond})
	// Three deaths, the last two counted as the hunt ends with the answer.
	if _, err := s.Predict(context.Background(), items("a", "b", "c", "d")); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Crashes != 3 {
		t.Fatalf("%d deaths; the test wants the request to cost three", st.Crashes)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.Fatal():
		t.Fatalf("Shutdown gave the slot up: %v", err)
	default:
	}
	if st := s.Slots()[0].State; st != supervisor.SlotStopped {
		t.Fatalf("slot %s after Shutdown; want %s", st, supervisor.SlotStopped)
	}
}

// echoProcess is a worker configuration that New accepts.
var echoProcess = supervisor.ProcessConfig{Model: model.Spec{Runner: "echo"}}

func TestBatchBytesMustFitTheFrame(t *testing.T) {
	tests := []struct {
		name    string
		cfg     supervisor.Config
		wantErr string
	}{
		{"default fits", supervisor.Config{Process: echoProcess}, ""},
		{"over the default frame", supervisor.Config{MaxBatchBytes: 300 << 20, Process: echoProcess}, "does not fit the pipe's frame limit"},
		{"over a small frame", supervisor.Config{MaxBatchBytes: 1 << 20, Process: supervisor.ProcessConfig{Model: echoProcess.Model, MaxFrame: 1 << 20}}, "does not fit"},
		{"within a small frame", supervisor.Config{MaxBatchBytes: 1 << 19, Process: supervisor.ProcessConfig{Model: echoProcess.Model, MaxFrame: 1 << 20}}, ""},
		{"no model for the workers", supervisor.Config{}, "names no runner"},
		{"settings that are not JSON", supervisor.Config{Process: supervisor.ProcessConfig{Model: model.Spec{Runner: "sleep", Settings: []byte("{fixed")}}}, "not JSON"},
		{"in-process has no frame", supervisor.Config{MaxBatchBytes: 300 << 20, InProcess: model.Func(newGate(true).fn)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := supervisor.New(tc.cfg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestItemOverTheBatchByteLimitIsTooLarge(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxBatchBytes: 10})
	_, err := s.Predict(context.Background(), items("small", strings.Repeat("x", 11)))
	var itemErr *supervisor.ItemError
	if !errors.Is(err, supervisor.ErrTooLarge) || !errors.As(err, &itemErr) || itemErr.Index != 1 {
		t.Fatalf("got %v, want ErrTooLarge for item 1", err)
	}
	if len(g.seen()) != 0 {
		t.Fatalf("the model ran %v; the request must be refused whole", g.seen())
	}
}

// TestBatchFormedAheadDropsWhatExpiredMeanwhile: a full batch formed ahead
// for a busy worker whose items' deadline passes before the worker takes
// it is answered expired, and its items never reach the model.
func TestBatchFormedAheadDropsWhatExpiredMeanwhile(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), BatchSize: 2, MaxLatency: time.Hour})
	running, err := s.Submit(context.Background(), items("running"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	ahead, err := s.SubmitRequest(context.Background(), supervisor.Request{Items: items("ahead1", "ahead2"), Deadline: time.Now().Add(30 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the full batch to be formed ahead", func() bool { return s.Stats().Queued == 0 })
	if _, err := ahead.Result(context.Background()); !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("items formed ahead: %v, want ErrDeadline", err)
	}
	g.release()
	if _, err := running.Result(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the expired items counted", func() bool { return s.Stats().Expired == 2 })
	for _, batch := range g.seen() {
		if slices.Contains(batch, "ahead1") || slices.Contains(batch, "ahead2") {
			t.Fatalf("the model ran %v after their deadline", batch)
		}
	}
	if st := s.Stats(); st.Batches != 1 {
		t.Fatalf("stats %+v: only the running batch reached the model", st)
	}
}

func TestRoomCountsIdleWorkersAndTheirPipelines(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), Workers: 2, BatchSize: 4, PipelineDepth: 2, MaxLatency: time.Hour})
	waitFor(t, "both workers ready", func() bool {
		for _, sl := range s.Slots() {
			if sl.State != supervisor.SlotReady {
				return false
			}
		}
		return true
	})
	if now, ahead := s.Room(); now != 8 || ahead != 8 {
		t.Fatalf("idle: Room() = %d, %d; want 8 to start now (a batch per worker) and 8 ahead", now, ahead)
	}
	first, err := s.Submit(context.Background(), items("a"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	// One worker runs a batch of one: the other can start a batch, and each
	// can take one batch ahead.
	if now, ahead := s.Room(); now != 4 || ahead != 8 {
		t.Fatalf("one busy: Room() = %d, %d; want 4 now and 8 ahead", now, ahead)
	}
	second, err := s.Submit(context.Background(), items("b"))
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	if now, ahead := s.Room(); now != 0 || ahead != 8 {
		t.Fatalf("both busy: Room() = %d, %d; want 0 now and 8 ahead", now, ahead)
	}
	third, err := s.Submit(context.Background(), items("c", "d", "e"))
	if err != nil {
		t.Fatal(err)
	}
	// Queued items (held back for a fuller batch, as MaxLatency allows)
	// take from what is left ahead.
	if now, ahead := s.Room(); now != 0 || ahead != 5 {
		t.Fatalf("both busy, 3 queued: Room() = %d, %d; want 0 now and 5 ahead", now, ahead)
	}
	g.release()
	for _, f := range []*supervisor.Future{first, second, third} {
		if _, err := f.Result(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker whose batches take long (half a second here) counts no room
// ahead until its batch nears its end: a feeder (a broker node) would
// otherwise hold a batch of items for the whole run, while a faster worker
// elsewhere could have run them. RoomAheadIn says when the room opens.
func TestRoomAheadWaitsForTheEndOfALongBatch(t *testing.T) {
	// In a bubble: the cost measured is the cost, whatever the load of
	// the machine running the test.
	synctest.Test(t, func(t *testing.T) {
		const cost = 500 * time.Millisecond
		slow := model.Func(func(ctx context.Context, items [][]byte) ([][]byte, error) {
			select {
			case <-time.After(cost):
				return items, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		s := start(t, supervisor.Config{InProcess: slow, Workers: 1, BatchSize: 4, PipelineDepth: 2, MaxLatency: time.Millisecond})
		// One batch tells its cost.
		if _, err := s.Predict(context.Background(), items("first")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, ahead := s.Room(); now != 4 || ahead != 4 || s.RoomAheadIn() != 0 {
			t.Fatalf("idle: Room() = %d, %d, RoomAheadIn() = %s; want 4 now, 4 ahead and nothing to wait for", now, ahead, s.RoomAheadIn())
		}
		f, err := s.Submit(context.Background(), items("second"))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the batch runs
		if now, ahead := s.Room(); now != 0 || ahead != 0 {
			t.Errorf("at the start of a batch of %s: Room() = %d, %d; want none now, and none ahead until it nears its end", cost, now, ahead)
		}
		in := s.RoomAheadIn()
		if in <= 0 || in >= cost {
			t.Fatalf("at the start of a batch of %s: RoomAheadIn() = %s; want the time until it nears its end", cost, in)
		}
		time.Sleep(in)
		if _, ahead := s.Room(); ahead != 4 {
			t.Errorf("after RoomAheadIn (%s): %d ahead; want 4", in, ahead)
		}
		if _, err := f.Result(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// Requests submitted together share the batch an idle worker starts; one
// that is refused is answered by its own error, and the others run.
func TestSubmitRequestsQueuesThemTogether(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), Workers: 1, BatchSize: 8, MaxQueue: 4, Batching: supervisor.BatchingGreedy})
	reqs := []supervisor.Request{
		{Items: items("a")}, {Items: nil}, {Items: items("b"), Keys: []string{""}}, {Items: items("c", "d")}, {Items: items("e")},
	}
	futs, errs := s.SubmitRequests(context.Background(), reqs)
	wantErr := []error{nil, supervisor.ErrBadRequest, nil, nil, supervisor.ErrOverloaded}
	for i, f := range futs {
		if (f == nil) != (wantErr[i] != nil) || !errors.Is(errs[i], wantErr[i]) {
			t.Fatalf("request %d: future %v, error %v; want error %v", i, f != nil, errs[i], wantErr[i])
		}
		if f == nil {
			continue
		}
		out, err := f.Result(context.Background())
		if want := "out:" + string(reqs[i].Items[0]); err != nil || string(out[0]) != want {
			t.Errorf("request %d answered %q, %v; want %s", i, out, err, want)
		}
	}
	if got := g.seen(); !reflect.DeepEqual(got, [][]string{{"a", "b", "c", "d"}}) {
		t.Errorf("batches %q; want the four items queued together in one", got)
	}
	if st := s.Stats(); st.Submitted != 4 || st.Rejected != 1 {
		t.Errorf("stats: %d items submitted, %d rejected; want 4, and the one over MaxQueue", st.Submitted, st.Rejected)
	}
}

// A streamer shutting down refuses every request submitted together.
func TestSubmitRequestsAfterShutdown(t *testing.T) {
	s := start(t, supervisor.Config{InProcess: model.Func(newGate(true).fn), Workers: 1})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	futs, errs := s.SubmitRequests(context.Background(), []supervisor.Request{{Items: items("a")}, {Items: items("b")}})
	for i := range futs {
		if futs[i] != nil || !errors.Is(errs[i], supervisor.ErrShuttingDown) {
			t.Errorf("request %d: future %v, error %v; want ErrShuttingDown", i, futs[i] != nil, errs[i])
		}
	}
}

// gatedEcho is a model that says on started how many items each batch
// has, and answers it with its items once step lets it (or fails it when
// its context ends).
func gatedEcho() (echo model.Func, step chan struct{}, started chan int) {
	step, started = make(chan struct{}), make(chan int, 100)
	echo = func(ctx context.Context, items [][]byte) ([][]byte, error) {
		started <- len(items)
		select {
		case <-step:
			return items, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return echo, step, started
}

// TestARequestThatGivesUpWaitingForRoomCountsAsItEnds: a request whose
// deadline passes, or whose caller leaves, while it waits for room counts
// its items as the request ends, expired or canceled, not rejected: the
// item counts and the request counts agree.
func TestARequestThatGivesUpWaitingForRoomCountsAsItEnds(t *testing.T) {
	echo, step, started := gatedEcho()
	s := start(t, supervisor.Config{InProcess: echo, MaxQueue: 4, BatchSize: 1, MaxLatency: time.Hour, PipelineDepth: 1})
	defer close(step)
	var admitted []*supervisor.Future
	for i := range 5 { // one running, four queued
		f, err := s.Submit(context.Background(), items(fmt.Sprint("small", i)))
		if err != nil {
			t.Fatalf("small request %d: %v", i, err)
		}
		admitted = append(admitted, f)
		if i == 0 {
			<-started
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Predict(ctx, items("a", "b", "c"))
		done <- err
	}()
	waitFor(t, "room kept for the 3 items", func() bool { return s.Stats().RoomKept == 3 })
	cancel()
	if err := <-done; !errors.Is(err, supervisor.ErrCanceled) {
		t.Fatalf("the caller left while waiting for room: %v; want ErrCanceled", err)
	}
	if st := s.Stats(); st.Canceled != 3 || st.Rejected != 0 {
		t.Errorf("after 3 items given up waiting for room: %d canceled, %d rejected; want 3 and 0", st.Canceled, st.Rejected)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Predict(ctx, items("d", "e")); !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("a deadline that passed while waiting for room: %v; want ErrDeadline", err)
	}
	if st := s.Stats(); st.Expired != 2 || st.Rejected != 0 || st.Submitted-st.Answered != uint64(len(admitted)) {
		t.Errorf("after 2 items expired waiting for room: %d expired, %d rejected, %d submitted, %d answered; want 2, 0 and %d unanswered (those admitted)",
			st.Expired, st.Rejected, st.Submitted, st.Answered, len(admitted))
	}
}

// TestALargeRequestWaitsForTheRoomItLacks: a request that finds no room
// in the queue has room kept for it and waits for it, admitted as soon as
// a batch leaves enough, where before small requests, each of which would
// fit, filled every gap first; the bound itself never moves.
func TestALargeRequestWaitsForTheRoomItLacks(t *testing.T) {
	echo, step, started := gatedEcho()
	s := start(t, supervisor.Config{InProcess: echo, MaxQueue: 6, BatchSize: 2, MaxLatency: time.Hour, PipelineDepth: 1})
	var admitted []*supervisor.Future
	var want [][]string
	submit := func(names ...string) error {
		t.Helper()
		f, err := s.Submit(context.Background(), items(names...))
		if err == nil {
			admitted, want = append(admitted, f), append(want, names)
		}
		return err
	}
	if err := submit("running"); err != nil {
		t.Fatal(err)
	}
	<-started
	for i := range 5 {
		if err := submit(fmt.Sprint("small", i)); err != nil {
			t.Fatalf("small request %d with %d of 6 places taken: %v", i, i, err)
		}
	}
	large := make(chan error, 1)
	go func() { large <- submit("large0", "large1", "large2") }()
	waitFor(t, "room kept for the large request", func() bool { return s.Stats().RoomKept == 3 })
	// One place is free, but the room is kept for the 3 items waiting.
	err := submit("small5")
	if !errors.Is(err, supervisor.ErrOverloaded) || !strings.Contains(err.Error(), "room for 3 kept for a request that waits for it") {
		t.Fatalf("1 item with 5 of 6 places taken and room kept for 3: %v; want ErrOverloaded naming the room kept", err)
	}
	// A batch of 2 leaves: 3 places free, and the large request takes them.
	step <- struct{}{}
	if n := <-started; n != 2 {
		t.Fatalf("a batch of %d, want 2", n)
	}
	if err := <-large; err != nil {
		t.Fatalf("the large request, with room made for it: %v", err)
	}
	if kept := s.Stats().RoomKept; kept != 0 {
		t.Errorf("room kept %d once the large request took it; want 0", kept)
	}
	// The queue is full, and says so plainly.
	err = submit("small6")
	if !errors.Is(err, supervisor.ErrOverloaded) || strings.Contains(err.Error(), "kept") {
		t.Fatalf("1 item with the queue full: %v; want ErrOverloaded for the full queue", err)
	}
	close(step)
	for i, f := range admitted {
		out, err := f.Result(context.Background())
		if err != nil {
			t.Fatalf("admitted request %v: %v", want[i], err)
		}
		for j, o := range out {
			if string(o) != want[i][j] {
				t.Fatalf("admitted request %v: answer %q", want[i], out)
			}
		}
	}
	if st := s.Stats(); st.Rejected != 2 {
		t.Errorf("%d items refused, want 2", st.Rejected)
	}
}

// TestTheRoomKeptGoesToALargerRequestAndLapses: a request waiting for
// room is refused when a larger one takes the room over, and the larger
// one when none frees within RoomHold; a smaller one is refused at once.
func TestTheRoomKeptGoesToALargerRequestAndLapses(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(func(ctx context.Context, in [][]byte) ([][]byte, error) {
		if string(in[0]) == "quick" {
			return in, nil
		}
		return g.fn(ctx, in)
	}), MaxQueue: 4, BatchSize: 1, MaxLatency: time.Hour, PipelineDepth: 1})
	// A batch answered tells what one costs, and so how long a request
	// waits for room without one (see RoomHold).
	if _, err := s.Predict(context.Background(), items("quick")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), items("running")); err != nil {
		t.Fatal(err)
	}
	<-g.started
	for i := range 3 {
		if _, err := s.Submit(context.Background(), items(fmt.Sprint("queued", i))); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(names ...string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := s.Submit(context.Background(), items(names...))
			done <- err
		}()
		return done
	}
	two := wait("a", "b")
	waitFor(t, "room kept for 2", func() bool { return s.Stats().RoomKept == 2 })
	if _, err := s.Submit(context.Background(), items("c", "d")); !errors.Is(err, supervisor.ErrOverloaded) {
		t.Fatalf("2 items beside room kept for 2: %v; want ErrOverloaded at once", err)
	}
	began := time.Now()
	three := wait("e", "f", "g")
	if err := <-two; !errors.Is(err, supervisor.ErrOverloaded) || !strings.Contains(err.Error(), "went to a larger request") {
		t.Fatalf("the request waiting for room kept for 2, when 3 came: %v; want ErrOverloaded naming the larger request", err)
	}
	if err := <-three; !errors.Is(err, supervisor.ErrOverloaded) || !strings.Contains(err.Error(), "no room for 3 items, limit 4, and no batch answered for") {
		t.Fatalf("3 items waiting with no batch leaving: %v; want ErrOverloaded once RoomHold passed", err)
	}
	if waited := time.Since(began); waited < supervisor.RoomHold {
		t.Errorf("the request waited %s for room; want RoomHold, %s", waited, supervisor.RoomHold)
	}
	if kept := s.Stats().RoomKept; kept != 0 {
		t.Errorf("room kept %d after its request gave up; want 0", kept)
	}
	g.release()
}

// TestAWaitForRoomHasTheQueueSwept: a request waiting for room has the
// queue swept of items whose callers have gone, as a refusal would: the
// room they held is its own at once, while the worker is still busy.
func TestAWaitForRoomHasTheQueueSwept(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxQueue: 4, BatchSize: 1, MaxLatency: time.Hour, PipelineDepth: 1})
	defer g.release()
	if _, err := s.Submit(context.Background(), items("running")); err != nil {
		t.Fatal(err)
	}
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 4 {
		if _, err := s.Submit(ctx, items(fmt.Sprint("gone", i))); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if _, err := s.Submit(context.Background(), items("a", "b")); err != nil {
		t.Fatalf("2 items beside 4 whose callers have gone: %v; want them queued once those are swept", err)
	}
}

// TestAWaitForRoomGoesOnWhileBatchesLeave: a request waiting for room waits
// past RoomHold while batches are answered, as room is being made for it:
// a request of many items may need more than a second of batches.
func TestAWaitForRoomGoesOnWhileBatchesLeave(t *testing.T) {
	s := fullOfSlowBatches(t, 400*time.Millisecond, 1)
	began := time.Now()
	// Three batches of 400 ms must leave before its 3 items fit.
	f, err := s.Submit(context.Background(), items("a", "b", "c"))
	if err != nil {
		t.Fatalf("3 items waiting for room as batches left: %v", err)
	}
	if waited := time.Since(began); waited <= supervisor.RoomHold {
		t.Errorf("admitted after %s; the test needs more than RoomHold, %s, of batches", waited, supervisor.RoomHold)
	}
	if out, err := f.Result(context.Background()); err != nil || len(out) != 3 || string(out[2]) != "c" {
		t.Errorf("the large request: %q, %v; want its items", out, err)
	}
}

// TestAWaitForRoomOutlastsASlowBatch: a request waiting for room waits
// through a batch that takes longer than RoomHold, as the room comes when
// it ends.
func TestAWaitForRoomOutlastsASlowBatch(t *testing.T) {
	s := fullOfSlowBatches(t, 1300*time.Millisecond, 4)
	if _, err := s.Submit(context.Background(), items("a", "b", "c")); err != nil {
		t.Fatalf("3 items waiting for room through a batch of 1.3 s: %v; want them queued as it ends", err)
	}
}

// fullOfSlowBatches starts a streamer of one worker whose batches of up to
// batchSize items take cost each, a queue of 4, and fills it: one item
// runs, four wait.
func fullOfSlowBatches(t *testing.T, cost time.Duration, batchSize int) *supervisor.Streamer {
	t.Helper()
	slow := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		time.Sleep(cost) // the model's cost
		return items, nil
	})
	s := start(t, supervisor.Config{InProcess: slow, MaxQueue: 4, BatchSize: batchSize, MaxLatency: time.Hour, PipelineDepth: 1})
	if _, err := s.Submit(context.Background(), items("running")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first batch running", func() bool { return s.Stats().Queued == 0 })
	for i := range 4 {
		if _, err := s.Submit(context.Background(), items(fmt.Sprint("queued", i))); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
