package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// A binary that is not a streamer worker fails Start with ErrNotWorker,
// naming the binary, whether it exits, stays silent or writes something
// else on the worker pipe; and it never serves anything.
func TestStartRefusesABinaryThatIsNotAWorker(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   string
	}{
		{"exits at once", "exit 0", "ended before the handshake"},
		{"prints a usage and fails", "echo 'usage: tool [flags]' >&2; exit 2", "usage: tool"},
		// A panic's message, not the last line of its stack.
		{"panics", "echo 'panic: no model here' >&2; printf '\\tmain.go:86 +0x55\\n' >&2; exit 2", "its last words: panic: no model here"},
		{"stays silent", "exec sleep 60", "said nothing on the worker pipe within"},
		{"writes something else", "echo 'hello, world' >&4; exec sleep 60", "not a worker's frame"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Short only where the timeout is what is tested: elsewhere a
			// shell slow to start on a loaded machine must not run out
			// of it before it says what it says.
			handshake := 10 * time.Second
			if tc.name == "stays silent" {
				handshake = 300 * time.Millisecond
			}
			s := failedStart(t, supervisor.Config{
				Workers: 2,
				Process: supervisor.ProcessConfig{
					Model:            model.Spec{Runner: "echo"},
					Path:             "/bin/sh",
					Args:             []string{"-c", tc.script},
					HandshakeTimeout: handshake,
				},
			}, supervisor.ErrNotWorker, "/bin/sh", tc.want)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := s.Predict(ctx, [][]byte{{0x01}}); err == nil {
				t.Fatal("a streamer whose workers never started answered a request")
			}
			// Nothing is left starting workers for want of a Shutdown.
			for _, sl := range s.Slots() {
				if sl.State != supervisor.SlotStopped || sl.PID != 0 {
					t.Errorf("after the failed Start, slot %d is %s with pid %d; want it stopped", sl.Slot, sl.State, sl.PID)
				}
			}
		})
	}
}

// A worker killed by a signal the server did not send (the OOM killer, an
// operator) before its handshake is said to be so, not taken for a binary
// that is no worker: the binary is fine, and the start fails for now.
func TestAWorkerKilledBeforeItsHandshakeIsNotCalledNoWorker(t *testing.T) {
	failedStart(t, supervisor.Config{
		Workers: 1,
		Process: supervisor.ProcessConfig{
			Model: model.Spec{Runner: "echo"},
			Path:  "/bin/sh",
			Args:  []string{"-c", "kill -KILL $$"},
		},
	}, nil, "/bin/sh was ended by a signal (killed) before its handshake, not sent by this server")
}

// Start with a context that has ended already starts nothing and says so;
// the Streamer can be started later. (Before, it raced the first worker's
// start: nil or the context's error, by chance.)
func TestStartWithAnEndedContextStartsNothing(t *testing.T) {
	s, err := supervisor.New(supervisor.Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })})
	if err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if err := s.Start(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with an ended context: %v; want context.Canceled", err)
	}
	if slots := s.Slots(); len(slots) != 1 || slots[0].State != supervisor.SlotStarting || slots[0].PID != 0 {
		t.Errorf("after Start with an ended context: %+v; want its slot not started", slots)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start after one with an ended context: %v", err)
	}
	defer shutdown(t, s)
	if out, err := s.Predict(ctx, [][]byte{[]byte("x")}); err != nil || string(out[0]) != "x" {
		t.Fatalf("Predict: %q, %v", out, err)
	}
}

// A worker told a model it cannot read (a misspelt setting, a runner it
// does not have) says why, and Start reports it instead of serving some
// default model.
func TestStartReportsAModelTheWorkerCannotOpen(t *testing.T) {
	tests := []struct {
		name string
		spec model.Spec
		want []string
	}{
		{"misspelt setting", model.Spec{Runner: "sleep", Settings: []byte(`{"fixd":1000}`)}, []string{"worker gave up", "unknown field", "fixd"}},
		{"unknown runner", model.Spec{Runner: "tpu-magic"}, []string{"worker gave up", "tpu-magic"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := processConfig("echo", 1, 8)
			cfg.Process.Model = tc.spec
			s, err := supervisor.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = s.Start(ctx)
			defer shutdown(t, s)
			if err == nil {
				t.Fatal("Start succeeded with a model the worker cannot open")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start: %q does not say %q", err, want)
				}
			}
		})
	}
}

// failingStarts is the config of one slot whose worker fails to start
// (its model's file gone) once the file at weightsGone exists, restarted
// without end, UnavailableAfter and the longest back-off as given.
func failingStarts(t *testing.T, unavailableAfter, backoffMax time.Duration) (weightsGone string, cfg supervisor.Config) {
	weightsGone = filepath.Join(t.TempDir(), "weights-gone")
	cfg = processConfig("chaos:crash=die", 1, 8)
	cfg.Process.Env = []string{failOpenEnv + "=" + weightsGone}
	cfg.UnavailableAfter = unavailableAfter
	cfg.BackoffMin, cfg.BackoffMax = time.Millisecond, backoffMax
	cfg.MaxRestarts = 1000
	return weightsGone, cfg
}

// While the restarts of the only slot's worker fail, the callers' 503 and
// NotReady (the /readyz reason) say why, not only that no worker is able
// to run: before, only the slot's status had the cause.
func TestUnavailableSaysWhyWorkersFailToStart(t *testing.T) {
	weightsGone, cfg := failingStarts(t, 50*time.Millisecond, 20*time.Millisecond)
	s := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.NotReady(); err != nil {
		t.Fatalf("NotReady with a worker ready: %v", err)
	}
	if err := os.WriteFile(weightsGone, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The item that ends the worker waits for a worker to run it again
	// until its deadline, while the restarts fail.
	die, _ := msgpack.Marshal("die")
	dying, err := s.SubmitRequest(ctx, supervisor.Request{Items: [][]byte{die}, Deadline: time.Now().Add(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart failed, and requests refused as no worker can run", func() bool {
		return !s.Available() && strings.Contains(s.Slots()[0].LastErr, "cannot load weights")
	})
	ok, _ := msgpack.Marshal("ok")
	_, err = s.Predict(ctx, [][]byte{ok})
	if !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "cannot load weights") {
		t.Errorf("Predict while the restarts fail: %v; want ErrUnavailable saying why", err)
	}
	if err := s.NotReady(); err == nil || !strings.Contains(err.Error(), "no worker is ready") || !strings.Contains(err.Error(), "cannot load weights") {
		t.Errorf("NotReady while the restarts fail: %v; want it to say why", err)
	}
	if _, err := dying.Result(ctx); err == nil {
		t.Fatal("the item that ends the worker was answered")
	}
	if err := os.Remove(weightsGone); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a worker ready again", func() bool { return s.NotReady() == nil })
	if _, err := s.Predict(ctx, [][]byte{ok}); err != nil {
		t.Fatalf("Predict once a worker started again: %v", err)
	}
}

// Between the failed starts of its worker, a slot waits in backoff, not
// starting: said to be starting, it kept the queue waiting for its worker
// to come up, and an item admitted with no deadline waited as long as the
// failures went on, where queued items get ErrUnavailable once no worker
// has been able to run for UnavailableAfter.
func TestAQueuedItemIsRefusedWhileTheRestartsFail(t *testing.T) {
	// Starts fail within UnavailableAfter, and most of the time between
	// them is spent waiting.
	weightsGone, cfg := failingStarts(t, 200*time.Millisecond, 50*time.Millisecond)
	s, dying := queueWhileStartsFail(t, weightsGone, cfg)
	waitFor(t, "the slot waiting in backoff after a failed start", func() bool {
		st := s.Slots()[0]
		return st.State == supervisor.SlotBackoff && strings.Contains(st.LastErr, "cannot load weights")
	})
	wantRefused(t, "the queued item while the restarts fail", dying)
}

// A model that takes longer to fail its start than the slot's backoff:
// the dispatcher looked at the slots every UnavailableAfter, each look most
// likely found the slot starting again, and the queued item waited on,
// for ever without a deadline. The slot's entering backoff has it look.
func TestAQueuedItemIsRefusedWhileSlowStartsFail(t *testing.T) {
	weightsGone, cfg := failingStarts(t, 100*time.Millisecond, time.Millisecond)
	cfg.Process.Env = append(cfg.Process.Env, failSlowlyEnv+"=500ms")
	_, dying := queueWhileStartsFail(t, weightsGone, cfg)
	wantRefused(t, "the queued item while slow restarts fail", dying)
}

// queueWhileStartsFail starts a streamer of cfg, has its worker's restarts
// fail (weightsGone), and queues an item with no deadline that ends the
// worker.
func queueWhileStartsFail(t *testing.T, weightsGone string, cfg supervisor.Config) (*supervisor.Streamer, *supervisor.Future) {
	t.Helper()
	s := start(t, cfg)
	if err := os.WriteFile(weightsGone, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	die, _ := msgpack.Marshal("die")
	dying, err := s.SubmitRequest(context.Background(), supervisor.Request{Items: [][]byte{die}}) // no deadline
	if err != nil {
		t.Fatal(err)
	}
	return s, dying
}

// wantRefused wants the queued item refused as unavailable, saying why.
func wantRefused(t *testing.T, what string, f *supervisor.Future) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Result(ctx); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "cannot load weights") {
		t.Fatalf("%s: %v; want ErrUnavailable saying why", what, err)
	}
}

// The model a worker serves is the one ProcessConfig.Model names, carried
// over the pipe: a chaos model that rejects one item proves the settings
// arrived.
func TestWorkersOpenTheModelTheConfigNames(t *testing.T) {
	s, err := supervisor.New(processConfig("chaos:reject=nope", 1, 8))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	good, bad := []byte{0xa2, 'o', 'k'}, []byte{0xa4, 'n', 'o', 'p', 'e'}
	_, err = s.Predict(ctx, [][]byte{good, bad})
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, supervisor.ErrModel) {
		t.Fatalf("Predict: %v, want item 1 rejected by the chaos model", err)
	}
	if status := s.Slots(); len(status) != 1 || status[0].PID == os.Getpid() {
		t.Fatalf("workers %+v: want one child process", status)
	}
}

func shutdown(t *testing.T, s *supervisor.Streamer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, supervisor.ErrShuttingDown) {
		t.Errorf("Shutdown: %v", err)
	}
}

// forgetfulEnv, in a worker's environment, makes this test binary a
// program whose main forgot workerproc.Main: it makes a Streamer of the
// same binary (ProcessConfig.Path empty) and starts it.
const forgetfulEnv = "SUPERVISOR_TEST_FORGETFUL"

// forgetfulMain is main of a program that forgot workerproc.Main; it exits
// 1 saying why its Streamer did not start, or 0 if it started one.
func forgetfulMain() {
	s, err := supervisor.New(supervisor.Config{
		Workers: 2,
		Process: supervisor.ProcessConfig{
			Model:            model.Spec{Runner: "echo"},
			Args:             []string{"-test.run=^$"},
			HandshakeTimeout: 2 * time.Second,
		},
	})
	if err == nil {
		err = s.Start(context.Background())
		_ = s.Shutdown(context.Background())
	}
	if err != nil {
		// A test binary says a test's failure on stdout.
		out := os.Stderr
		if os.Getenv(forgetfulEnv) == "stdout" {
			out = os.Stdout
		}
		fmt.Fprintln(out, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// A program started as its own worker whose main does not call
// workerproc.Main cannot start workers of its own, which would be copies of
// it that each start more: its Streamer refuses to be made, and the
// supervisor that started it reports it as no worker, with its reason,
// before its handshake's time is up.
// That holds for a program that says the refusal on stdout, as a test
// binary says a failed test: the refusal is said on stderr as well.
func TestAWorkerThatForgotWorkerprocMainStartsNoWorkers(t *testing.T) {
	for _, says := range []string{"stderr", "stdout"} {
		t.Run("says it on "+says, func(t *testing.T) {
			failedStart(t, supervisor.Config{
				Workers: 1,
				Process: supervisor.ProcessConfig{
					Model:            model.Spec{Runner: "echo"},
					Path:             os.Args[0],
					Args:             []string{"-test.run=^$"},
					Env:              []string{forgetfulEnv + "=" + says},
					HandshakeTimeout: time.Minute,
				},
			}, supervisor.ErrNotWorker, "ended before the handshake", "its last words", "started as a streamer worker", "workerproc.Main")
		})
	}
}

// failedStart makes a Streamer of cfg and starts it, which must fail with
// an error that wraps sentinel (nil: any) and says each of wants. It
// returns the streamer, shut down when the test ends.
func failedStart(t *testing.T, cfg supervisor.Config, sentinel error, wants ...string) *supervisor.Streamer {
	t.Helper()
	s, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	err = s.Start(ctx)
	t.Cleanup(func() { shutdown(t, s) })
	if err == nil || sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("Start: %v, want it to fail with %v", err, sentinel)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start: %q does not say %q", err, want)
		}
	}
	return s
}

// A worker's own Streamer is refused only while the cookie says this
// process was started as a worker; in-process models start nothing and
// are not refused.
func TestNewRefusesWorkerProcessesInAProcessStartedAsAWorker(t *testing.T) {
	t.Setenv(ipc.WorkerEnv, ipc.WorkerCookie)
	_, err := supervisor.New(supervisor.Config{Process: supervisor.ProcessConfig{Model: model.Spec{Runner: "echo"}}})
	if err == nil || !strings.Contains(err.Error(), ipc.WorkerEnv+" is set") {
		t.Fatalf("New with process workers in a process started as a worker: %v, want a refusal naming %s", err, ipc.WorkerEnv)
	}
	if _, err := supervisor.New(supervisor.Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })}); err != nil {
		t.Fatalf("New with an in-process model in a process started as a worker: %v", err)
	}
}

// A worker whose model is still opening at the init timeout fails its
// start saying so, and naming the runner.
func TestAWorkerPastTheInitTimeoutSaysWhy(t *testing.T) {
	cfg := processConfig("chaos:init-delay=30s", 1, 1)
	// Long enough for a test binary under -race on a loaded machine to
	// say hello first; far shorter than the model's opening.
	cfg.InitTimeout = 5 * time.Second
	failedStart(t, cfg, nil, "worker did not become ready within 5s, the init timeout: its chaos model was still opening")

	// One that never said hello was never sent the model.
	failedStart(t, supervisor.Config{
		InitTimeout: 300 * time.Millisecond,
		Process:     supervisor.ProcessConfig{Model: model.Spec{Runner: "echo"}, Path: "/bin/sh", Args: []string{"-c", "exec sleep 60"}},
	}, supervisor.ErrNotWorker, "said nothing on the worker pipe within 300ms, the init timeout")
}
