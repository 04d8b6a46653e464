package supervisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// Items are counted by what their callers got: an item answered after its
// deadline passed counts as expired, as its caller had its deadline error
// by then (before, it counted as answered well); one whose caller left
// before it ran counts as canceled, apart from the model's failures.
func TestItemsAreCountedByWhatTheirCallersGot(t *testing.T) {
	g := newGate(false)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), MaxLatency: time.Hour})
	// Its deadline passes as it runs; a shorter one could pass before the
	// batch leaves on a loaded machine, and the model never start.
	slow, err := s.SubmitRequest(context.Background(), supervisor.Request{Items: items("slow"), Deadline: time.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	gone, err := s.Submit(ctx, items("gone"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := slow.Result(context.Background()); !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("the slow item's caller got %v; want ErrDeadline", err)
	}
	g.release()
	<-gone.Done()
	if _, err := s.Predict(context.Background(), items("fine")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Predict(context.Background(), items("bad1")); err == nil {
		t.Fatal("bad1 was answered well; want the model's error")
	}
	waitFor(t, "four items answered", func() bool { return s.Stats().Answered == 4 })
	st := s.Stats()
	if st.Answered-st.Failed != 1 || st.Failed != 3 || st.Expired != 1 || st.Canceled != 1 || st.Poisoned != 0 {
		t.Errorf("counted ok %d, failed %d (expired %d, canceled %d, poisoned %d); want 1, 3 (1, 1, 0)",
			st.Answered-st.Failed, st.Failed, st.Expired, st.Canceled, st.Poisoned)
	}
}

// A slot's counts go on across a reload: the slot that takes the place of
// another counts from where it left off, so that the per-slot counters
// /metrics serves never go back (before, a reload set them to zero, and a
// crash between two scrapes was never seen).
func TestSlotCountsGoOnAcrossAReload(t *testing.T) {
	g := newGate(true)
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn), BackoffMin: time.Millisecond})
	seenWorking(t, s)
	if _, err := s.Predict(context.Background(), items("boom")); !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("boom: %v; want ErrPoison", err)
	}
	waitFor(t, "the slot ready again", func() bool { return s.Slots()[0].State == supervisor.SlotReady })
	before := s.Slots()[0]
	if before.Crashes != 2 || before.Restarts != 2 || before.Batches != wellSeen {
		t.Fatalf("before the reload: %+v; want 2 crashes, 2 restarts, %d batches", before, wellSeen)
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Predict(context.Background(), items("fine")); err != nil {
		t.Fatal(err)
	}
	after := s.Slots()
	if len(after) != 1 || after[0].Crashes != 2 || after[0].Restarts != 2 || after[0].Batches != wellSeen+1 {
		t.Errorf("after the reload: %+v; want one slot with 2 crashes, 2 restarts, %d batches", after, wellSeen+1)
	}
}

// A request is refused at once, answering nothing, when its context is
// canceled already, or its deadline has passed, its items counted as the
// request is (canceled, expired), and before Start with an error that
// says so rather than "still starting".
func TestRequestsRefusedBeforeTheyAreQueued(t *testing.T) {
	g := newGate(true)
	idle, err := supervisor.New(supervisor.Config{InProcess: model.Func(g.fn)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Predict(context.Background(), items("a")); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "not started") {
		t.Errorf("Predict before Start: %v; want ErrUnavailable saying it is not started", err)
	}
	s := start(t, supervisor.Config{InProcess: model.Func(g.fn)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f, err := s.Submit(ctx, items("a"))
	if f != nil || !errors.Is(err, supervisor.ErrCanceled) {
		t.Errorf("Submit with a canceled context: %v, %v; want it refused with ErrCanceled", f, err)
	}
	// Its item counts as its request does, canceled, and as answered so.
	if st := s.Stats(); st.Submitted != 1 || st.Canceled != 1 || st.Answered != 1 || st.Rejected != 0 {
		t.Errorf("counted %d submitted, %d canceled, %d answered, %d rejected; want 1, 1, 1 and 0", st.Submitted, st.Canceled, st.Answered, st.Rejected)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := s.Predict(ctx, items("b", "c")); !errors.Is(err, supervisor.ErrDeadline) {
		t.Errorf("Predict past its deadline: %v; want ErrDeadline", err)
	}
	if st := s.Stats(); st.Submitted != 3 || st.Expired != 2 || st.Answered != 3 || st.Rejected != 0 {
		t.Errorf("counted %d submitted, %d expired, %d answered, %d rejected; want 3, 2, 3 and 0", st.Submitted, st.Expired, st.Answered, st.Rejected)
	}
}

// New refuses a field set below zero, naming it, rather than take it for
// the default; one past its bound (a BatchSize of 1<<30 took all memory
// at the first batch, and a HeartbeatTimeout under a worker's beat had
// every worker killed as silent); and a nil model.Func, which no item
// could run.
func TestNewRefusesNegativesAndANilFunc(t *testing.T) {
	echo := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })
	for _, tt := range []struct {
		name string
		cfg  supervisor.Config
		want string
	}{
		{"MaxLatency", supervisor.Config{InProcess: echo, MaxLatency: -time.Millisecond}, "MaxLatency must not be negative"},
		{"PipelineDepth and MaxRestarts", supervisor.Config{InProcess: echo, PipelineDepth: -1, MaxRestarts: -1}, "PipelineDepth, MaxRestarts must not be negative"},
		{"WorkerTimeout", supervisor.Config{InProcess: echo, WorkerTimeout: -time.Second}, "WorkerTimeout must not be negative"},
		{"a nil model.Func", supervisor.Config{InProcess: model.Func(nil)}, "nil model.Func"},
		{"a nil pointer", supervisor.Config{InProcess: (*closeCounter)(nil)}, "InProcess is a nil *supervisor_test.closeCounter"},
		{"BatchSize", supervisor.Config{InProcess: echo, BatchSize: 1 << 30}, "BatchSize 1073741824: want at most 65536"},
		{"Workers", supervisor.Config{InProcess: echo, Workers: 1 << 20}, "Workers 1048576: want at most 1024"},
		{"PipelineDepth", supervisor.Config{InProcess: echo, PipelineDepth: 1 << 62}, "PipelineDepth 4611686018427387904: want at most 1024"},
		{"HeartbeatTimeout", supervisor.Config{Process: supervisor.ProcessConfig{Path: "streamer", Model: model.Spec{Runner: "builtin"}, HeartbeatTimeout: 200 * time.Millisecond}},
			"Process.HeartbeatTimeout 200ms: want at least 3s"},
	} {
		if _, err := supervisor.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New: %v; want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// A batch that fails as a whole fails each of its items with the same
// error, which the request's error says of every item, not of item 0.
func TestABatchFailedWholeIsSaidOfEveryItem(t *testing.T) {
	fn := func(_ context.Context, items [][]byte) ([][]byte, error) {
		if len(items) == 1 {
			return nil, errors.New("the batch broke")
		}
		return items[:1], nil // too few outputs
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn)})
	_, err := s.Predict(context.Background(), items("a", "b", "c"))
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || !itemErr.Every || !errors.Is(err, supervisor.ErrModelFailed) || !strings.HasPrefix(err.Error(), "every item: ") {
		t.Errorf("got %v; want an ItemError of every item wrapping ErrModelFailed", err)
	}
	_, err = s.Predict(context.Background(), items("alone"))
	if !errors.As(err, &itemErr) || itemErr.Every || !strings.HasPrefix(err.Error(), "item 0: ") {
		t.Errorf("a request of one item: %v; want it said of item 0", err)
	}
}

// A snapshot taken under load never has more items answered than
// submitted. Before, Stats read Submitted before the outcomes, so that the
// items answered in between counted in Answered alone: many with a large
// BatchSize, whose list of batch sizes Stats makes in between. (An item
// was also counted submitted only once the lock that queued it was let
// go, when it could have been answered already.)
func TestStatsNeverAnswerMoreThanSubmitted(t *testing.T) {
	echo := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })
	s := start(t, supervisor.Config{InProcess: echo, Workers: 2, BatchSize: 4096, Batching: supervisor.BatchingGreedy})
	stop := make(chan struct{})
	var clients sync.WaitGroup
	defer func() {
		close(stop)
		clients.Wait()
	}()
	for range 4 {
		clients.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Predict(context.Background(), items("x")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 500 {
		if st := s.Stats(); st.Answered > st.Submitted {
			t.Fatalf("snapshot %d: %d items answered, %d submitted", i, st.Answered, st.Submitted)
		}
	}
}

// A worker that dies as it starts counts as a crash, as one that dies
// running does: a slot whose model crashes as it loads shows in the
// crashes, not only in the restarts (before, only deaths of ready workers
// counted, and an alert on crashes never saw a slot failing to start).
func TestAWorkerThatDiesStartingCountsAsACrash(t *testing.T) {
	// With the file fail there, the next start fails once, as a model
	// that crashes as it loads.
	script := workerScript(t, `if rm $DIR/fail 2>/dev/null; then echo "the model crashed as it loaded" >&2; exit 3; fi`)
	cfg := processConfig("echo", 1, 8)
	cfg.Process.Path = script
	cfg.BackoffMin = time.Millisecond
	s := start(t, cfg)
	pid := s.Slots()[0].PID
	if err := os.WriteFile(filepath.Join(filepath.Dir(script), "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := os.FindProcess(pid); err != nil {
		t.Fatal(err)
	} else if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new worker ready", func() bool {
		sl := s.Slots()[0]
		return sl.State == supervisor.SlotReady && sl.PID != pid && sl.PID != 0
	})
	sl, st := s.Slots()[0], s.Stats()
	if sl.Restarts != 2 || sl.Crashes != 2 || st.Crashes != 2 {
		t.Errorf("after a worker killed and a start that failed: slot %d restarts, %d crashes, %d crashes in all; want 2, 2, 2", sl.Restarts, sl.Crashes, st.Crashes)
	}
}
