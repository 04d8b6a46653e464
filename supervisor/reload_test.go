package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/supervisor"
)

// load keeps clients closed-loop clients predicting on s until stopped,
// each checking that every answer is the echo of its own item. stop
// returns how many answers came and the failures seen.
func load(t *testing.T, s *supervisor.Streamer, clients int) (stop func() (int, []error)) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
		answered atomic.Int64
		done     = make(chan struct{})
	)
	for c := range clients {
		wg.Go(func() {
			for r := 0; ; r++ {
				select {
				case <-done:
					return
				default:
				}
				// A msgpack string, as the echo model answers it back.
				text := fmt.Sprintf("c%d-r%d", c, r)
				in := append([]byte{0xa0 | byte(len(text))}, text...)
				out, err := s.Predict(context.Background(), [][]byte{in})
				if err == nil && string(out[0]) != string(in) {
					err = fmt.Errorf("answer %q to %q", out[0], in)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					continue
				}
				answered.Add(1)
			}
		})
	}
	return func() (int, []error) {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return int(answered.Load()), failures
	}
}

// answersMore waits until the load has answered more than it had.
func answersMore(t *testing.T, s *supervisor.Streamer) {
	t.Helper()
	before := s.Stats().Answered
	waitFor(t, "answers to the load", func() bool { return s.Stats().Answered > before+10 })
}

func pids(slots []supervisor.SlotStatus) []int {
	var out []int
	for _, st := range slots {
		out = append(out, st.PID)
	}
	return out
}

// checkNoFailures stops the load and fails the test on any failed answer.
func checkNoFailures(t *testing.T, stop func() (int, []error)) {
	t.Helper()
	n, failures := stop()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed, the first: %v", len(failures), n+len(failures), failures[0])
	}
	if n == 0 {
		t.Fatal("the load got no answer at all")
	}
}

func TestReloadReplacesEveryWorkerWithoutLosingARequest(t *testing.T) {
	cfg := processConfig("echo", 2, 8)
	cfg.Process.CUDADevices = []string{"7", "9"}
	s := start(t, cfg)
	waitFor(t, "two ready workers", func() bool { return readyCount(s) == 2 })
	before := s.Slots()
	stop := load(t, s, 8)
	answersMore(t, s)
	if err := s.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	answersMore(t, s)
	checkNoFailures(t, stop)

	after := s.Slots()
	if len(after) != 2 {
		t.Fatalf("after Reload: slots %+v, want 2", after)
	}
	for i, st := range after {
		if st.Slot != i || st.State != supervisor.SlotReady || st.CUDA != before[i].CUDA {
			t.Errorf("slot %d after Reload: %+v, want ready with CUDA %q", i, st, before[i].CUDA)
		}
		if slices.Contains(pids(before), st.PID) || st.PID == 0 {
			t.Errorf("slot %d after Reload has pid %d; the pids before were %v", i, st.PID, pids(before))
		}
	}
	if c := s.Stats().Crashes; c != 0 {
		t.Errorf("Reload counted %d crashes", c)
	}
	for _, pid := range pids(before) {
		if slices.Contains(children(t), pid) {
			t.Errorf("old worker %d still runs after Reload returned", pid)
		}
	}
}

// workerScript makes an executable script that runs this test binary as
// a worker, unless told otherwise by what is in dir, and returns its path.
func workerScript(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "worker.sh")
	script := "#!/bin/sh\n" + strings.ReplaceAll(body, "$DIR", dir) + "\nexec " + os.Args[0] + ` "$@"` + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A new worker that fails to start ends the reload at its slot: the slots
// before it keep their new workers, it and those after keep their old
// ones, and the error says which slot and why.
func TestReloadStopsAtTheFirstWorkerThatFailsToStart(t *testing.T) {
	// Once armed, each start takes a token, and fails as a broken model
	// file would when none is left.
	script := workerScript(t, `if [ -e $DIR/armed ]; then
  token=$(ls $DIR | grep '^ok' | head -n 1)
  if [ -z "$token" ] || ! rm "$DIR/$token"; then echo "model file is garbage" >&2; exit 3; fi
fi`)
	dir := filepath.Dir(script)
	cfg := processConfig("echo", 3, 8)
	cfg.Process.Path = script
	s := start(t, cfg)
	waitFor(t, "three ready workers", func() bool { return readyCount(s) == 3 })
	before := s.Slots()
	for _, name := range []string{"armed", "ok1"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stop := load(t, s, 4)
	err := s.Reload(context.Background())
	checkNoFailures(t, stop)
	if !errors.Is(err, supervisor.ErrStartFailed) || !errors.Is(err, supervisor.ErrNotWorker) {
		t.Fatalf("Reload: %v, want ErrStartFailed wrapping ErrNotWorker", err)
	}
	for _, want := range []string{"slot 1:", "new worker failed to start", "model file is garbage"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Reload: %q does not say %q", err, want)
		}
	}
	after := s.Slots()
	if len(after) != 3 {
		t.Fatalf("after a failed Reload: slots %+v, want 3", after)
	}
	if after[0].PID == before[0].PID {
		t.Errorf("slot 0 kept pid %d: its reload succeeded and should have replaced it", after[0].PID)
	}
	for i := 1; i < 3; i++ {
		if after[i].PID != before[i].PID || after[i].State != supervisor.SlotReady {
			t.Errorf("slot %d after the failed Reload: %+v, want its old worker %d ready", i, after[i], before[i].PID)
		}
	}
	if _, err := s.Predict(context.Background(), [][]byte{{0xa1, 'x'}}); err != nil {
		t.Fatalf("Predict after a failed Reload: %v", err)
	}
}

func readyCount(s *supervisor.Streamer) int {
	n := 0
	for _, st := range s.Slots() {
		if st.State == supervisor.SlotReady {
			n++
		}
	}
	return n
}

// holder is an in-process model that holds the items named "hold" until
// released, answering every item with itself.
type holder struct {
	held    chan struct{} // receives one value per batch holding
	release chan struct{}
}

func newHolder() *holder {
	return &holder{held: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *holder) fn(ctx context.Context, items [][]byte) ([][]byte, error) {
	for _, it := range items {
		if string(it) == "hold" {
			h.held <- struct{}{}
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return items, nil
}

// While a reload waits for an old worker to finish its batch, another
// Reload or SetWorkers is refused with ErrBusy; the held batch is answered
// by the old worker once it may finish, and new work meanwhile goes to the
// new worker.
func TestReloadWaitsForTheOldWorkersBatchAndRefusesASecond(t *testing.T) {
	h := newHolder()
	s := start(t, supervisor.Config{InProcess: model.Func(h.fn), Workers: 1, BatchSize: 1})
	heldAnswer := make(chan error, 1)
	go func() {
		out, err := s.Predict(context.Background(), items("hold"))
		if err == nil && string(out[0]) != "hold" {
			err = fmt.Errorf("answer %q", out[0])
		}
		heldAnswer <- err
	}()
	<-h.held
	reloaded := make(chan error, 1)
	go func() { reloaded <- s.Reload(context.Background()) }()
	waitFor(t, "the old slot to be draining", func() bool {
		slots := s.Slots()
		return len(slots) == 2 && slots[1].State == supervisor.SlotDraining && slots[1].InFlight == 1
	})
	if err := s.Reload(context.Background()); !errors.Is(err, supervisor.ErrBusy) {
		t.Errorf("a second Reload: %v, want ErrBusy", err)
	}
	if err := s.SetWorkers(context.Background(), 2); !errors.Is(err, supervisor.ErrBusy) {
		t.Errorf("SetWorkers during a Reload: %v, want ErrBusy", err)
	}
	// The new worker serves while the old one holds its batch.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := s.Predict(ctx, items("meanwhile")); err != nil || string(out[0]) != "meanwhile" {
		t.Fatalf("Predict during the drain: %q, %v", out, err)
	}
	select {
	case err := <-reloaded:
		t.Fatalf("Reload returned (%v) before the old worker's batch was answered", err)
	default:
	}
	close(h.release)
	if err := <-heldAnswer; err != nil {
		t.Fatalf("the batch held by the old worker: %v", err)
	}
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if slots := s.Slots(); len(slots) != 1 || slots[0].State != supervisor.SlotReady {
		t.Fatalf("slots after Reload: %+v, want one ready", slots)
	}
	if st := s.Stats(); st.Crashes != 0 || st.Failed != 0 {
		t.Fatalf("stats after Reload: %d crashes, %d failed", st.Crashes, st.Failed)
	}
}

func TestSetWorkersScalesUpAndDownWithoutLosingARequest(t *testing.T) {
	cfg := processConfig("echo", 1, 8)
	cfg.Process.CUDADevices = []string{"0", "1"}
	s := start(t, cfg)
	stop := load(t, s, 8)
	answersMore(t, s)
	if err := s.SetWorkers(context.Background(), 3); err != nil {
		t.Fatalf("SetWorkers(3): %v", err)
	}
	up := s.Slots()
	if len(up) != 3 || s.Workers() != 3 {
		t.Fatalf("after SetWorkers(3): %d workers, slots %+v", s.Workers(), up)
	}
	for i, st := range up {
		want := []string{"0", "1", "0"}[i]
		if st.Slot != i || st.State != supervisor.SlotReady || st.CUDA != want || st.PID == 0 {
			t.Errorf("slot %d: %+v, want ready on CUDA %s", i, st, want)
		}
	}
	answersMore(t, s)
	if err := s.SetWorkers(context.Background(), 1); err != nil {
		t.Fatalf("SetWorkers(1): %v", err)
	}
	answersMore(t, s)
	checkNoFailures(t, stop)
	down := s.Slots()
	if len(down) != 1 || down[0].PID != up[0].PID || s.Workers() != 1 {
		t.Fatalf("after SetWorkers(1): slots %+v, want slot 0 alone, pid %d", down, up[0].PID)
	}
	for _, st := range up[1:] {
		if slices.Contains(children(t), st.PID) {
			t.Errorf("worker %d of a removed slot still runs after SetWorkers returned", st.PID)
		}
	}
	if c := s.Stats().Crashes; c != 0 {
		t.Errorf("scaling counted %d crashes", c)
	}
}

// What Reload and SetWorkers say when they cannot run.
func TestReloadAndSetWorkersRefusals(t *testing.T) {
	fresh := func(t *testing.T) *supervisor.Streamer {
		s, err := supervisor.New(supervisor.Config{InProcess: model.Func(newHolder().fn)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	shutDown := func(t *testing.T) *supervisor.Streamer {
		s := start(t, supervisor.Config{InProcess: model.Func(newHolder().fn)})
		shutdown(t, s)
		return s
	}
	tests := []struct {
		name string
		make func(*testing.T) *supervisor.Streamer
		call func(*supervisor.Streamer) error
		want error
	}{
		{"Reload before Start", fresh, func(s *supervisor.Streamer) error { return s.Reload(context.Background()) }, supervisor.ErrNotStarted},
		{"SetWorkers before Start", fresh, func(s *supervisor.Streamer) error { return s.SetWorkers(context.Background(), 2) }, supervisor.ErrNotStarted},
		{"Reload after Shutdown", shutDown, func(s *supervisor.Streamer) error { return s.Reload(context.Background()) }, supervisor.ErrShuttingDown},
		{"SetWorkers after Shutdown", shutDown, func(s *supervisor.Streamer) error { return s.SetWorkers(context.Background(), 2) }, supervisor.ErrShuttingDown},
		{"SetWorkers(0)", func(t *testing.T) *supervisor.Streamer {
			return start(t, supervisor.Config{InProcess: model.Func(newHolder().fn)})
		}, func(s *supervisor.Streamer) error { return s.SetWorkers(context.Background(), 0) }, supervisor.ErrBadRequest},
		{"SetWorkers past MaxWorkers", func(t *testing.T) *supervisor.Streamer {
			return start(t, supervisor.Config{InProcess: model.Func(newHolder().fn)})
		}, func(s *supervisor.Streamer) error { return s.SetWorkers(context.Background(), supervisor.MaxWorkers+1) }, supervisor.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.make(t)
			before := s.Workers()
			if err := tc.call(s); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if s.Workers() != before {
				t.Fatalf("a refused call changed the workers from %d to %d", before, s.Workers())
			}
		})
	}
}

// A Reload whose context ends while a new worker starts returns the
// context's error at once, stops the worker it was starting, and leaves
// the old worker serving.
func TestReloadWhoseContextEndsStopsTheWorkerItStarts(t *testing.T) {
	// Once armed, a start hangs silently, as a stuck model would.
	script := workerScript(t, `if [ -e $DIR/armed ]; then exec sleep 60; fi`)
	cfg := processConfig("echo", 1, 8)
	cfg.Process.Path = script
	// Past the test's wait: the hung start is stopped because the reload
	// gave up, not because it ran out of time.
	cfg.Process.HandshakeTimeout, cfg.InitTimeout = time.Minute, time.Minute
	s := start(t, cfg)
	before := s.Slots()
	if err := os.WriteFile(filepath.Join(filepath.Dir(script), "armed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := s.Reload(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "slot 0") {
		t.Fatalf("Reload: %v, want slot 0 and the context's deadline", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("Reload took %s to see its context end", took)
	}
	waitFor(t, "the worker being started to be stopped", func() bool {
		return slices.Equal(children(t), pids(before))
	})
	if after := s.Slots(); len(after) != 1 || after[0].PID != before[0].PID || after[0].State != supervisor.SlotReady {
		t.Fatalf("slots after the abandoned Reload: %+v, want the old worker %d ready", after, before[0].PID)
	}
	if _, err := s.Predict(context.Background(), [][]byte{{0xa1, 'x'}}); err != nil {
		t.Fatalf("Predict after the abandoned Reload: %v", err)
	}
}

// ProcessConfig.Refresh makes the spec a Reload's workers open: Model
// says it, the new workers open it, and so does a worker restarted after
// a crash in a reloaded slot, rather than the spec the streamer began
// with. A Refresh that fails ends the Reload before any worker is
// replaced.
func TestReloadOpensTheModelRefreshMakes(t *testing.T) {
	cfg := processConfig("chaos:reject=old", 2, 8)
	newSpec, _, err := builtin.Parse("chaos:reject=new")
	if err != nil {
		t.Fatal(err)
	}
	var refreshes atomic.Int32
	cfg.Process.Refresh = func(_ context.Context, spec model.Spec) (model.Spec, error) {
		if refreshes.Add(1) == 1 {
			return model.Spec{}, errors.New("the model file cannot be read")
		}
		if !reflect.DeepEqual(spec, cfg.Process.Model) {
			return model.Spec{}, fmt.Errorf("refresh of %v, want the spec the workers open, %v", spec, cfg.Process.Model)
		}
		return newSpec, nil
	}
	s := start(t, cfg)
	waitFor(t, "two ready workers", func() bool { return readyCount(s) == 2 })
	before := s.Slots()
	// Each answer comes from whichever worker is free: several show them all.
	rejectsOnly := func(rejected, accepted string) {
		t.Helper()
		for range 8 {
			for _, text := range []string{rejected, accepted} {
				_, err := s.Predict(context.Background(), [][]byte{append([]byte{0xa0 | byte(len(text))}, text...)})
				if text == rejected && !errors.Is(err, supervisor.ErrModel) || text == accepted && err != nil {
					t.Fatalf("Predict %q: %v; want the workers to reject %q alone", text, err, rejected)
				}
			}
		}
	}
	rejectsOnly("old", "new")

	err = s.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the model file cannot be read") {
		t.Fatalf("Reload with a failing Refresh: %v, want its error", err)
	}
	if after := s.Slots(); !slices.Equal(pids(after), pids(before)) {
		t.Fatalf("a Reload whose Refresh failed replaced workers: pids %v, were %v", pids(after), pids(before))
	}
	if st := s.Stats(); st.ReloadFailures != 1 || !strings.Contains(st.LastReloadError, "cannot be read") {
		t.Errorf("stats after a Reload whose Refresh failed: %d failures, last %q", st.ReloadFailures, st.LastReloadError)
	}
	if got := s.Model(); !reflect.DeepEqual(got, cfg.Process.Model) {
		t.Errorf("Model after a failed Reload: %v, want %v", got, cfg.Process.Model)
	}
	rejectsOnly("old", "new")

	if err := s.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := s.Model(); !reflect.DeepEqual(got, newSpec) {
		t.Errorf("Model after the Reload: %v, want %v", got, newSpec)
	}
	rejectsOnly("new", "old")

	reloaded := s.Slots()
	crashed, err := os.FindProcess(reloaded[1].PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := crashed.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed worker's restart", func() bool {
		st := s.Slots()
		return readyCount(s) == 2 && st[1].PID != reloaded[1].PID && st[1].PID != 0
	})
	rejectsOnly("new", "old")
}

// Scaling down to slots that have all been given up leaves the streamer
// unable to run anything, as when its last slot is given up: Fatal says
// so by the time SetWorkers returns. Before, SetWorkers drained the slot
// that served, leaving the one given up, and Fatal never came: every
// request failed with ErrUnavailable for good.
func TestScalingDownToSlotsGivenUpIsFatal(t *testing.T) {
	weightsGone := filepath.Join(t.TempDir(), "weights-gone")
	cfg := processConfig("echo", 2, 8)
	cfg.Process.Env = []string{failOpenEnv + "=" + weightsGone}
	cfg.BackoffMin, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	cfg.MaxRestarts = 2
	s := start(t, cfg)
	waitFor(t, "both workers ready", func() bool { return readyCount(s) == 2 })
	if err := os.WriteFile(weightsGone, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	worker, err := os.FindProcess(s.Slots()[0].PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "slot 0 given up", func() bool { return s.Slots()[0].State == supervisor.SlotFailed })
	select {
	case err := <-s.Fatal():
		t.Fatalf("Fatal while slot 1 serves: %v", err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.SetWorkers(ctx, 1); err != nil {
		t.Fatalf("SetWorkers(1): %v", err)
	}
	select {
	case err := <-s.Fatal():
		if !strings.Contains(err.Error(), "every slot") || !strings.Contains(err.Error(), "cannot load weights") {
			t.Errorf("Fatal: %v; want it to say every slot was given up, and why", err)
		}
	default:
		t.Fatalf("no Fatal once SetWorkers left only a slot given up; slots %+v", s.Slots())
	}
}

// A reload does not wait on a slot whose worker is restarting: the new
// worker takes the slot at once, and the restart, hung opening its model,
// is stopped rather than waited for until the init timeout.
func TestReloadDoesNotWaitForARestartThatHangs(t *testing.T) {
	script := workerScript(t, `if [ -e $DIR/hang ]; then echo $$ > $DIR/hung.tmp; mv $DIR/hung.tmp $DIR/hung; exec sleep 300; fi`)
	dir := filepath.Dir(script)
	cfg := processConfig("echo", 2, 8)
	cfg.Process.Path = script
	cfg.Process.HandshakeTimeout = 5 * time.Minute
	cfg.InitTimeout = 5 * time.Minute
	s := start(t, cfg)
	waitFor(t, "two ready workers", func() bool { return readyCount(s) == 2 })
	if err := os.WriteFile(filepath.Join(dir, "hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	killed := s.Slots()[0].PID
	worker, err := os.FindProcess(killed)
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Kill(); err != nil {
		t.Fatal(err)
	}
	var hungPID int
	waitFor(t, "slot 0's restart hung", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "hung"))
		if err != nil {
			return false
		}
		hungPID, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	if err := os.Remove(filepath.Join(dir, "hang")); err != nil {
		t.Fatal(err)
	}

	// Well short of the init timeout: a reload that waited for the hung
	// start would end with its context.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Reload(ctx); err != nil {
		t.Fatalf("Reload with slot 0's worker hung in its restart: %v; want the slot replaced without waiting for it", err)
	}
	after := s.Slots()
	if len(after) != 2 || readyCount(s) != 2 || after[0].PID == killed || after[0].PID == hungPID {
		t.Errorf("after the reload: slots %+v, want two ready workers, slot 0's new", after)
	}
	hung, err := os.FindProcess(hungPID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hung restart stopped", func() bool { return hung.Signal(syscall.Signal(0)) != nil })
	if _, err := s.Predict(context.Background(), [][]byte{{0xa1, 'x'}}); err != nil {
		t.Fatalf("Predict after the reload: %v", err)
	}
}

// A slot scaled away while its worker answers a batch is logged with that
// worker's pid, as every lifecycle line names the worker it is about.
func TestScalingDownLogsTheDrainingWorker(t *testing.T) {
	h := newHolder()
	var logs syncbuf.Buffer
	s := start(t, supervisor.Config{
		InProcess: model.Func(h.fn), Workers: 2, BatchSize: 1, PipelineDepth: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	answers := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.Predict(context.Background(), items("hold"))
			answers <- err
		}()
	}
	<-h.held
	<-h.held // one batch on each slot: the pipeline holds one per worker
	scaled := make(chan error, 1)
	go func() { scaled <- s.SetWorkers(context.Background(), 1) }()
	line := regexp.MustCompile(`msg="draining slot" slot=1 (pid=\d+ )?reason="scaled down"`)
	var m []string
	waitFor(t, "the draining slot's log line", func() bool {
		m = line.FindStringSubmatch(logs.String())
		return m != nil
	})
	if m[1] != fmt.Sprintf("pid=%d ", os.Getpid()) {
		t.Errorf("the draining slot's line %q names no worker, want pid=%d (in process)", m[0], os.Getpid())
	}
	close(h.release)
	for range 2 {
		if err := <-answers; err != nil {
			t.Errorf("a held request: %v", err)
		}
	}
	if err := <-scaled; err != nil {
		t.Fatalf("SetWorkers: %v", err)
	}
}

// A reload that a shutdown cuts short says so, and is no failed reload:
// not counted, and not the last reload error.
func TestAReloadCutShortByShutdownIsNoFailure(t *testing.T) {
	script := workerScript(t, `if [ -e $DIR/hang ]; then touch $DIR/hung; exec sleep 300; fi`)
	dir := filepath.Dir(script)
	cfg := processConfig("echo", 1, 8)
	cfg.Process.Path = script
	cfg.Process.HandshakeTimeout = 5 * time.Minute
	cfg.InitTimeout = 5 * time.Minute
	s, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan error, 1)
	go func() { reloaded <- s.Reload(context.Background()) }()
	waitFor(t, "the reload's new worker to hang starting", func() bool {
		_, err := os.Stat(filepath.Join(dir, "hung"))
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	err = <-reloaded
	if !errors.Is(err, supervisor.ErrShuttingDown) || errors.Is(err, supervisor.ErrStartFailed) || strings.Contains(err.Error(), "failed") {
		t.Errorf("Reload cut short by Shutdown: %v, want ErrShuttingDown and no word of a failed start", err)
	}
	if st := s.Stats(); st.ReloadFailures != 0 || st.LastReloadError != "" {
		t.Errorf("stats: %d reload failures, last error %q; want none", st.ReloadFailures, st.LastReloadError)
	}
}

// A worker that a scaling retired, holding a batch sent ahead behind one
// that runs late, gives the batch back to a worker on time, as a ready
// one would: the scaling waits for the late batch, the caller of the one
// ahead does not.
func TestARetiredWorkerRunningLateGivesBackTheBatchAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first two items wait to be told their cost, once the test
		// has seen which slot runs each.
		costs := map[string]chan time.Duration{"p": make(chan time.Duration, 1), "q": make(chan time.Duration, 1)}
		m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			cost := 10 * time.Millisecond
			if c, ok := costs[string(items[0])]; ok {
				cost = <-c
			}
			time.Sleep(cost)
			return items, nil
		})
		s := start(t, supervisor.Config{InProcess: m, Workers: 2, BatchSize: 1, Batching: supervisor.BatchingGreedy})
		for range 8 {
			if _, err := s.Predict(context.Background(), items("warm")); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		// p and q start on one slot each; a and b are sent ahead, one to each.
		names := []string{"p", "q", "a", "b"}
		futs := make([]*supervisor.Future, len(names))
		onSlot1 := ""
		for i, name := range names {
			f, err := s.Submit(context.Background(), items(name))
			if err != nil {
				t.Fatal(err)
			}
			futs[i] = f
			synctest.Wait()
			if i == 0 {
				onSlot1 = "q"
				if s.Slots()[1].InFlight == 1 {
					onSlot1 = "p"
				}
			}
		}
		if st := s.Slots(); st[0].InFlight != 2 || st[1].InFlight != 2 {
			t.Fatalf("slots hold %d and %d batches; want 2 each, one running and one ahead", st[0].InFlight, st[1].InFlight)
		}
		// Slot 1, which the scaling retires, runs late; slot 0 on time
		// (30ms: under twice the 10ms measured and the margin).
		for name, c := range costs {
			if name == onSlot1 {
				c <- 4 * time.Second
			} else {
				c <- 30 * time.Millisecond
			}
		}
		begin := time.Now()
		scaled := make(chan error, 1)
		go func() { scaled <- s.SetWorkers(context.Background(), 1) }()
		for i, name := range names {
			if name == onSlot1 {
				continue
			}
			if _, err := futs[i].Result(context.Background()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if d := time.Since(begin); d > time.Second {
				t.Errorf("%s answered after %s; want well under the slow batch's 4s: the batch ahead on the retired worker should have been given back", name, d)
			}
		}
		if err := <-scaled; err != nil {
			t.Fatalf("SetWorkers: %v", err)
		}
		if st := s.Stats(); st.Dispatch.Recalled != 1 {
			t.Errorf("%d batches recalled (dispatch %+v); want 1, the one ahead on the retired worker", st.Dispatch.Recalled, st.Dispatch)
		}
	})
}
