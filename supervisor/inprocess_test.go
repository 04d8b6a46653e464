package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// errOwn and shapeError are a model's own errors, which its callers branch on.
var errOwn = errors.New("the model's own sentinel")

type shapeError struct{ want int }

func (e *shapeError) Error() string { return fmt.Sprintf("want %d values", e.want) }

// answerBoth runs items through s both ways a caller can: Predict, and
// Submit then Result.
func answerBoth(t *testing.T, s *supervisor.Streamer, items [][]byte) map[string]error {
	t.Helper()
	_, predictErr := s.Predict(context.Background(), items)
	f, err := s.Submit(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	_, resultErr := f.Result(context.Background())
	return map[string]error{"Predict": predictErr, "Future.Result": resultErr}
}

func TestInProcessBatchErrorKeepsItsType(t *testing.T) {
	fn := func(context.Context, [][]byte) ([][]byte, error) {
		return nil, fmt.Errorf("load weights: %w; %w", errOwn, &shapeError{want: 3})
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn)})
	for how, err := range answerBoth(t, s, items("a", "b")) {
		var shape *shapeError
		switch {
		case !errors.Is(err, errOwn):
			t.Errorf("%s: %v does not wrap the model's own sentinel", how, err)
		case !errors.As(err, &shape) || shape.want != 3:
			t.Errorf("%s: %v does not wrap the model's own error type", how, err)
		case !errors.Is(err, supervisor.ErrModelFailed):
			t.Errorf("%s: %v does not wrap ErrModelFailed", how, err)
		case errors.Is(err, supervisor.ErrModel):
			t.Errorf("%s: %v wraps ErrModel, which is for one item's fault", how, err)
		}
	}
}

func TestInProcessItemErrorKeepsItsType(t *testing.T) {
	fn := func(_ context.Context, items [][]byte) ([][]byte, error) {
		errs := make([]error, len(items))
		errs[1] = fmt.Errorf("item b: %w", errOwn)
		return items, &model.ItemErrors{Errs: errs}
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn)})
	for how, err := range answerBoth(t, s, items("a", "b", "c")) {
		var itemErr *supervisor.ItemError
		switch {
		case !errors.Is(err, errOwn):
			t.Errorf("%s: %v does not wrap the model's own sentinel", how, err)
		case !errors.Is(err, supervisor.ErrModel):
			t.Errorf("%s: %v does not wrap ErrModel", how, err)
		case !errors.As(err, &itemErr) || itemErr.Index != 1:
			t.Errorf("%s: %v is not item 1's error", how, err)
		case err.Error() != "item 1: model error: item b: the model's own sentinel":
			t.Errorf("%s: error text %q changed", how, err)
		}
	}
}

// panicOnBoom is a model that panics on the item "boom"; the test looks for
// its name in the logged stack.
func panicOnBoom(_ context.Context, items [][]byte) ([][]byte, error) {
	for _, it := range items {
		if string(it) == "boom" {
			panic("boom item")
		}
	}
	return items, nil
}

func TestInProcessPanicLogsItsStack(t *testing.T) {
	var logs syncbuf.Buffer
	s := start(t, supervisor.Config{
		InProcess:  model.Func(panicOnBoom),
		BackoffMin: time.Millisecond,
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	seenWorking(t, s)
	_, err := s.Predict(context.Background(), items("boom"))
	if !errors.Is(err, supervisor.ErrPoison) || !strings.Contains(err.Error(), "panic in the model: boom item") {
		t.Fatalf("got %v, want ErrPoison naming the panic", err)
	}
	if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "goroutine") || len(err.Error()) > 200 {
		t.Errorf("the caller's error carries the stack: %q", err)
	}
	panics := 0
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg   string
			Slot  *int
			Panic string
			Stack string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not one JSON record: %v", line, err)
		}
		if rec.Msg != "panic in the in-process model" {
			continue
		}
		panics++
		if rec.Slot == nil || *rec.Slot != 0 || rec.Panic != "boom item" {
			t.Errorf("panic line %s lacks slot 0 or the panic value", line)
		}
		if !strings.Contains(rec.Stack, "panicOnBoom") {
			t.Errorf("logged stack does not name the panicking function:\n%s", rec.Stack)
		}
	}
	// The item killed the worker twice before it was taken for poison.
	if panics != 2 {
		t.Errorf("%d panic lines logged, want 2:\n%s", panics, logs.String())
	}
}

// closeCounter is a model that counts the calls to its Close.
type closeCounter struct {
	model.Func
	closed atomic.Int32
}

func (m *closeCounter) Close() error {
	m.closed.Add(1)
	return nil
}

func TestShutdownLeavesTheInProcessModelOpen(t *testing.T) {
	m := &closeCounter{Func: func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }}
	s := start(t, supervisor.Config{InProcess: m, Workers: 2})
	if _, err := s.Predict(context.Background(), items("a")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := m.closed.Load(); n != 0 {
		t.Fatalf("the streamer closed the caller's model %d times; its owner closes it", n)
	}
}

// WaitModel tells an owner when the in-process model may be closed: not
// while a call that Shutdown abandoned (its context ended; the model
// ignores its own) is still running, and at once when it has returned or
// none was made.
func TestWaitModelWaitsForAbandonedCalls(t *testing.T) {
	release, begun := make(chan struct{}), make(chan struct{}, 1)
	m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		begun <- struct{}{}
		<-release // ignoring its canceled context
		return items, nil
	})
	s := start(t, supervisor.Config{InProcess: m, Workers: 1})
	if _, err := s.Submit(context.Background(), items("stuck")); err != nil {
		t.Fatal(err)
	}
	<-begun
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.WaitModel(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitModel before Shutdown: %v, want it to wait for Shutdown", err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if err := s.Shutdown(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown with an ended context: %v, want context.Canceled", err)
	}
	short, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.WaitModel(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitModel while the abandoned call runs: %v, want it to wait", err)
	}
	close(release)
	long, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitModel(long); err != nil {
		t.Fatalf("WaitModel once the call returned: %v", err)
	}

	// A streamer shut down before it started: WaitModel waiting already
	// returns, as does one called after.
	never, err := supervisor.New(supervisor.Config{InProcess: m})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- never.WaitModel(long) }()
	if err := never.Shutdown(long); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitModel waiting as a streamer was shut down before it started: %v", err)
	}
	if err := never.WaitModel(long); err != nil {
		t.Fatalf("WaitModel of a streamer shut down before it started: %v", err)
	}
}

// A shutdown right after Start, which returns once one worker is ready,
// must also stop the workers still coming up.
func TestShutdownRightAfterStartStopsWorkersStillStarting(t *testing.T) {
	m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })
	for i := range 200 {
		s, err := supervisor.New(supervisor.Config{InProcess: m, Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.Start(ctx); err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Shutdown(ctx) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: Shutdown did not return within 10s", i)
		}
		cancel()
	}
}

// A model that ends its goroutine with runtime.Goexit (t.Fatal in a test's
// model does) has its worker die at once, as a panic would: the item is
// isolated and the others answered, rather than all of them waiting for
// the worker timeout (an hour here).
func TestInProcessGoexitIsADeath(t *testing.T) {
	fn := func(_ context.Context, items [][]byte) ([][]byte, error) {
		for _, it := range items {
			if string(it) == "exit" {
				runtime.Goexit()
			}
		}
		return items, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), BackoffMin: time.Millisecond, WorkerTimeout: time.Hour})
	seenWorking(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := s.Predict(ctx, items("fine", "exit"))
	if !errors.Is(err, supervisor.ErrPoison) || !strings.Contains(err.Error(), "runtime.Goexit") {
		t.Fatalf("got %v; want ErrPoison naming runtime.Goexit", err)
	}
	if string(out[0]) != "fine" {
		t.Errorf("the good item was answered %q; want fine", out[0])
	}
}

// A Reload forgets the items found to be poison: the model they crashed
// may be mended, and the new one runs them.
func TestReloadForgetsThePoison(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	fn := func(_ context.Context, items [][]byte) ([][]byte, error) {
		if broken.Load() {
			return panicOnBoom(context.Background(), items)
		}
		return items, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), BackoffMin: time.Millisecond})
	seenWorking(t, s)
	if _, err := s.Predict(context.Background(), items("boom")); !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("boom while broken: %v; want ErrPoison", err)
	}
	broken.Store(false)
	if _, err := s.Predict(context.Background(), items("boom")); !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("boom before the reload: %v; want it refused on sight", err)
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Predict(context.Background(), items("boom")); err != nil || string(out[0]) != "boom" {
		t.Fatalf("boom after the reload: %q, %v; want it answered", out, err)
	}
}

// A Reload forgets the old model's record: new weights that crash on every
// batch fail each item as the model's fault, rather than have the items
// convicted on the record of the weights that answered. (Before, every
// item was taken for poison after two runs alone.)
func TestReloadForgetsTheCrashRecord(t *testing.T) {
	var broken atomic.Bool
	fn := func(_ context.Context, items [][]byte) ([][]byte, error) {
		if broken.Load() {
			panic("the new weights crash on everything")
		}
		return items, nil
	}
	s := start(t, supervisor.Config{InProcess: model.Func(fn), MaxRestarts: 1000, BackoffMin: time.Millisecond})
	for i := range 64 {
		if _, err := s.Predict(context.Background(), items(fmt.Sprint("fine", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	for i := range 5 {
		_, err := s.Predict(context.Background(), items(fmt.Sprint("innocent", i)))
		if !errors.Is(err, supervisor.ErrModelFailed) {
			t.Fatalf("request %d after the reload: %v; want ErrModelFailed", i, err)
		}
	}
	if n := s.Stats().Poisoned; n != 0 {
		t.Errorf("%d innocent items taken for poison", n)
	}
}

// A worker killed for running past WorkerTimeout, its call stuck in the
// model for good, lets go of its batch: the batch is answered by the
// worker that replaces it and reused, while the dead goroutine reads
// nothing of it. Before, the goroutine read the batch's id and items
// after taking it, unlocked, when a kill could give the batch away
// meanwhile; the race detector saw those reads race with its reuse, in
// most rounds, so a few rounds, each with a streamer of its own, make it
// all but certain.
func TestAKilledInProcessWorkerLetsGoOfItsBatch(t *testing.T) {
	for round := range 3 {
		// A fresh channel, and streamer, each round: a channel touched
		// again would order the dead goroutine's reads before the reuse.
		hang, stuck := make(chan struct{}, 1), make(chan struct{})
		defer close(stuck)
		hang <- struct{}{}
		fn := func(_ context.Context, items [][]byte) ([][]byte, error) {
			select {
			case <-hang: // the first call never returns while the test runs
				<-stuck
			default:
			}
			return items, nil
		}
		s := start(t, supervisor.Config{InProcess: model.Func(fn), WorkerTimeout: 50 * time.Millisecond, BackoffMin: time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 2 {
			out, err := s.Predict(ctx, items("x"))
			if err != nil || string(out[0]) != "x" {
				t.Fatalf("round %d, request %d: %q, %v; want x answered by the worker that replaced the stuck one", round, i, out, err)
			}
		}
		if n := s.Stats().Crashes; n != 1 {
			t.Errorf("round %d: %d crashes; want the one worker killed", round, n)
		}
	}
}
