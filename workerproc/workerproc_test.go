package workerproc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/workerproc"
	"github.com/vmihailenco/msgpack/v5"
)

// waitLimit bounds every wait in these tests; nothing should take close.
const waitLimit = 10 * time.Second

// worker is workerproc.Run serving in a goroutine, seen from the supervisor's
// end of two OS pipes.
type worker struct {
	t       *testing.T
	toIn    *os.File // the supervisor's end of the worker's input
	send    *ipc.Writer
	msgs    chan ipc.Message // every frame the worker wrote, in order
	readErr chan error       // why the stream from the worker ended
	done    chan error       // Run's result
}

// startWorker runs workerproc.Run with cfg, its In and Out set to fresh
// pipes, and answers its hello with spec, as a supervisor does.
func startWorker(t *testing.T, spec model.Spec, cfg workerproc.Config) *worker {
	t.Helper()
	w := startRaw(t, cfg)
	w.hello()
	w.init(spec)
	return w
}

// startRaw runs workerproc.Run with cfg, its In and Out set to fresh pipes,
// and leaves the handshake to the test. Unless the test stops it, the
// worker is told to go away (its input closed) when the test ends, and Run
// must return.
func startRaw(t *testing.T, cfg workerproc.Config) *worker {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cfg.In, cfg.Out = inR, outW
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Hour // only the heartbeat test wants them
	}
	w := &worker{
		t: t, toIn: inW, send: ipc.NewWriter(inW, cfg.MaxFrame),
		msgs: make(chan ipc.Message, 100), readErr: make(chan error, 1), done: make(chan error, 1),
	}
	go func() {
		err := workerproc.Run(t.Context(), cfg)
		// The process would exit here: its end of both pipes closes.
		inR.Close()
		outW.Close()
		w.done <- err
	}()
	go func() {
		r := ipc.NewReader(outR, cfg.MaxFrame)
		for {
			m, err := r.Read()
			if err != nil {
				w.readErr <- err
				close(w.msgs)
				return
			}
			w.msgs <- m
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-w.done:
		case <-time.After(waitLimit):
			t.Errorf("Run did not return within %s of its input closing", waitLimit)
		}
		outR.Close()
	})
	return w
}

// next returns the next frame from the worker, heartbeats skipped.
func (w *worker) next() ipc.Message {
	w.t.Helper()
	return w.nextOf(func(k ipc.Kind) bool { return k != ipc.KindHeartbeat })
}

// nextOf returns the next frame from the worker whose kind wants accepts.
func (w *worker) nextOf(wants func(ipc.Kind) bool) ipc.Message {
	w.t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				w.t.Fatalf("the worker's output ended (%v) while a frame was awaited", <-w.readErr)
			}
			if wants(m.Kind) {
				return m
			}
		case <-deadline:
			w.t.Fatalf("no frame from the worker within %s", waitLimit)
		}
	}
}

// hello reads the first frame and requires it to be a worker's hello.
func (w *worker) hello() *ipc.Ready {
	w.t.Helper()
	m := w.nextOf(func(ipc.Kind) bool { return true })
	if m.Kind != ipc.KindHello || m.Ready == nil {
		w.t.Fatalf("first frame is %s (ready %+v), want hello", m.Kind, m.Ready)
	}
	return m.Ready
}

// init sends the model spec, as the supervisor answers a hello.
func (w *worker) init(spec model.Spec) {
	w.t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		w.t.Fatal(err)
	}
	w.write(ipc.Message{Kind: ipc.KindInit, Spec: raw})
}

// builtinSpec is the spec of a built-in model, as streamer serve parses it.
func builtinSpec(t *testing.T, name string) model.Spec {
	t.Helper()
	spec, ok, err := builtin.Parse(name)
	if !ok || err != nil {
		t.Fatalf("%s: built-in %v, %v", name, ok, err)
	}
	return spec
}

// fakeSpec names a model the test's own opener serves.
var fakeSpec = model.Spec{Runner: "fake"}

// ready reads the next frame and requires it to be the ready message.
func (w *worker) ready() *ipc.Ready {
	w.t.Helper()
	m := w.nextOf(func(ipc.Kind) bool { return true })
	if m.Kind != ipc.KindReady || m.Ready == nil {
		w.t.Fatalf("first frame is %s (ready %+v), want ready", m.Kind, m.Ready)
	}
	return m.Ready
}

func (w *worker) write(m ipc.Message) {
	w.t.Helper()
	if err := w.send.Write(&m); err != nil {
		w.t.Fatalf("send %s to the worker: %v", m.Kind, err)
	}
}

func (w *worker) batch(id uint64, items ...[]byte) {
	w.t.Helper()
	w.write(ipc.Message{Kind: ipc.KindBatch, BatchID: id, Items: items})
}

// result waits for the next result and requires it to answer batch id.
func (w *worker) result(id uint64) ipc.Message {
	w.t.Helper()
	m := w.next()
	if m.Kind != ipc.KindResult || m.BatchID != id {
		w.t.Fatalf("got %s for batch %d (error %q), want the result of batch %d", m.Kind, m.BatchID, m.Error, id)
	}
	return m
}

// exit waits for Run to return and gives its error.
func (w *worker) exit() error {
	w.t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup
		return err
	case <-time.After(waitLimit):
		w.t.Fatalf("Run did not return within %s", waitLimit)
		return nil
	}
}

// fake is a model whose Predict the test writes.
type fake struct {
	predict func(ctx context.Context, items [][]byte) ([][]byte, error)
	closed  atomic.Int32
}

func (f *fake) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	return f.predict(ctx, items)
}

func (f *fake) Close() error {
	f.closed.Add(1)
	return nil
}

// opens returns an Open func that hands out m.
func opens(m model.Model) func(context.Context, model.Spec) (model.Model, error) {
	return func(context.Context, model.Spec) (model.Model, error) { return m, nil }
}

// upper is a fake model that upper-cases each item, so outputs are visibly
// the model's work and not the inputs echoed.
func upper() *fake {
	return &fake{predict: func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = []byte(strings.ToUpper(string(it)))
		}
		return out, nil
	}}
}

func mp(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadyMessage(t *testing.T) {
	tests := []struct {
		name      string
		spec      model.Spec
		open      func(context.Context, model.Spec) (model.Model, error)
		wantModel string
	}{
		{"echo", builtinSpec(t, "echo"), load.Open, "echo"},
		{"sleep describes its cost", builtinSpec(t, "sleep:10ms,100us"), load.Open, "sleep:10ms,100µs"},
		{"chaos", builtinSpec(t, "chaos:reject=x"), load.Open, "chaos"},
		{"no Describe: the spec names it", model.Spec{Runner: "my-model"}, opens(upper()), "my-model"},
		{"plugin spec", model.Spec{Runner: "plugin", Settings: []byte(`{"path":"/opt/m/plugin"}`)}, opens(upper()), `plugin {"path":"/opt/m/plugin"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorker(t, tc.spec, workerproc.Config{Open: tc.open, Device: "cuda:0 (CUDA_VISIBLE_DEVICES=3)"})
			got := w.ready()
			want := ipc.Ready{Version: ipc.Version, PID: os.Getpid(), Device: "cuda:0 (CUDA_VISIBLE_DEVICES=3)", Model: tc.wantModel}
			if *got != want {
				t.Fatalf("ready = %+v, want %+v", *got, want)
			}
		})
	}
}

func TestBatchRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		spec  model.Spec
		open  func(context.Context, model.Spec) (model.Model, error)
		items [][]byte
		want  [][]byte
	}{
		{"fake model", model.Spec{Runner: "upper"}, opens(upper()), [][]byte{[]byte("abc"), []byte("xyz")}, [][]byte{[]byte("ABC"), []byte("XYZ")}},
		{"echo", builtinSpec(t, "echo"), load.Open, [][]byte{{0xa1, 'a'}, {0x01}, {}}, [][]byte{{0xa1, 'a'}, {0x01}, {}}},
		{"sleep", builtinSpec(t, "sleep:0s,0s"), load.Open, [][]byte{{0x02}}, [][]byte{{0x02}}},
		{"chaos without triggers", builtinSpec(t, "chaos:reject=no"), load.Open, [][]byte{{0x03}, {0x04}}, [][]byte{{0x03}, {0x04}}},
		{"empty batch", builtinSpec(t, "echo"), load.Open, [][]byte{}, [][]byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorker(t, tc.spec, workerproc.Config{Open: tc.open})
			w.ready()
			// Several batches in a row: each is answered, in order, under its own id.
			for id := uint64(10); id < 13; id++ {
				w.batch(id, tc.items...)
			}
			for id := uint64(10); id < 13; id++ {
				res := w.result(id)
				if res.Error != "" || res.ItemErrors != nil {
					t.Fatalf("batch %d: error %q, item errors %q", id, res.Error, res.ItemErrors)
				}
				if !slices.EqualFunc(res.Items, tc.want, func(a, b []byte) bool { return string(a) == string(b) }) {
					t.Fatalf("batch %d: outputs %q, want %q", id, res.Items, tc.want)
				}
			}
		})
	}
}

func TestItemErrors(t *testing.T) {
	items := [][]byte{[]byte("good"), []byte("bad"), []byte("fine")}
	failSecond := &fake{predict: func(_ context.Context, items [][]byte) ([][]byte, error) {
		return items, &model.ItemErrors{Errs: []error{nil, errors.New("shape [3] does not match [4]"), nil}}
	}}
	w := startWorker(t, model.Spec{Runner: "picky"}, workerproc.Config{Open: opens(failSecond)})
	w.ready()
	w.batch(1, items...)
	res := w.result(1)
	if res.Error != "" {
		t.Fatalf("whole batch failed with %q, want per-item errors", res.Error)
	}
	if want := []string{"", "shape [3] does not match [4]", ""}; !slices.Equal(res.ItemErrors, want) {
		t.Fatalf("item errors %q, want %q", res.ItemErrors, want)
	}
	if len(res.Items) != 3 || string(res.Items[0]) != "good" || string(res.Items[2]) != "fine" {
		t.Fatalf("outputs %q: the items that succeeded lost their answers", res.Items)
	}
}

func TestChaosRejectsOneItem(t *testing.T) {
	w := startWorker(t, builtinSpec(t, "chaos:reject=poison"), workerproc.Config{Open: load.Open})
	w.ready()
	w.batch(5, mp(t, "ok"), mp(t, "poison"), mp(t, 7))
	res := w.result(5)
	if res.Error != "" || len(res.ItemErrors) != 3 {
		t.Fatalf("error %q, item errors %q: want three item errors", res.Error, res.ItemErrors)
	}
	if res.ItemErrors[0] != "" || res.ItemErrors[2] != "" || !strings.Contains(res.ItemErrors[1], "poison") {
		t.Fatalf("item errors %q: want only item 1 rejected, naming it", res.ItemErrors)
	}
}

func TestBatchErrors(t *testing.T) {
	three := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	tests := []struct {
		name    string
		predict func(context.Context, [][]byte) ([][]byte, error)
		want    []string // all must appear in the batch error
	}{
		{"model error", func(context.Context, [][]byte) ([][]byte, error) {
			return nil, errors.New("CUDA out of memory")
		}, []string{"CUDA out of memory"}},
		{"too few outputs", func(_ context.Context, items [][]byte) ([][]byte, error) {
			return items[:2], nil
		}, []string{"2 outputs", "3 items"}},
		{"too many outputs", func(_ context.Context, items [][]byte) ([][]byte, error) {
			return append(items, []byte("extra")), nil
		}, []string{"4 outputs", "3 items"}},
		{"item errors of the wrong length", func(_ context.Context, items [][]byte) ([][]byte, error) {
			return items, &model.ItemErrors{Errs: []error{errors.New("odd item")}}
		}, []string{"odd item"}},
		{"item errors and too few outputs", func(_ context.Context, items [][]byte) ([][]byte, error) {
			return items[:1], &model.ItemErrors{Errs: []error{nil, errors.New("bad"), nil}}
		}, []string{"1 outputs", "3 items"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(&fake{predict: tc.predict})})
			w.ready()
			w.batch(9, three...)
			res := w.result(9)
			for _, s := range tc.want {
				if !strings.Contains(res.Error, s) {
					t.Fatalf("batch error %q does not say %q", res.Error, s)
				}
			}
			if res.Items != nil || res.ItemErrors != nil {
				t.Fatalf("a failed batch carried outputs %q and item errors %q", res.Items, res.ItemErrors)
			}
			// The worker goes on serving after a failed batch.
			w.batch(10, three...)
			w.result(10)
		})
	}
}

// gatedModel is a model that says which batch it took, by its first item,
// on started, and answers it once release lets it, or fails it as its
// context ends.
func gatedModel(started chan<- string, release <-chan struct{}) *fake {
	return &fake{predict: func(ctx context.Context, items [][]byte) ([][]byte, error) {
		started <- string(items[0])
		select {
		case <-release:
			return items, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
}

// TestStopFinishesSentBatches sends two batches and Stop while the first is
// still running: both are answered, then Run returns nil and closes the model.
func TestStopFinishesSentBatches(t *testing.T) {
	started := make(chan string, 2)
	release := make(chan struct{})
	gated := gatedModel(started, release)
	w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(gated)})
	w.ready()
	w.batch(1, []byte("one"))
	w.batch(2, []byte("two"))
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatal("batch 1 never reached the model")
	}
	w.write(ipc.Message{Kind: ipc.KindStop})
	close(release)
	if res := w.result(1); string(res.Items[0]) != "one" {
		t.Fatalf("batch 1 answered %q", res.Items)
	}
	if res := w.result(2); string(res.Items[0]) != "two" {
		t.Fatalf("batch 2 answered %q", res.Items)
	}
	if err := w.exit(); err != nil {
		t.Fatalf("Run after Stop: %v, want nil", err)
	}
	if n := gated.closed.Load(); n != 1 {
		t.Fatalf("model closed %d times, want once", n)
	}
	// Nothing but heartbeats may follow the last result.
	for m := range w.msgs {
		if m.Kind != ipc.KindHeartbeat {
			t.Fatalf("unexpected %s after Stop", m.Kind)
		}
	}
	if err := <-w.readErr; err != io.EOF {
		t.Fatalf("the worker's output ended with %v, want a clean io.EOF", err)
	}
}

// A batch the supervisor asks back before the model took it is given back
// unrun, which the worker says; one asked back once the model took it is
// answered as usual, with no word of the recall. The batches behind a
// recalled one run in order.
func TestARecalledBatchIsGivenBackUnlessRunning(t *testing.T) {
	started := make(chan string, 4)
	release := make(chan struct{}, 4)
	gated := gatedModel(started, release)
	w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(gated)})
	w.ready()
	w.batch(1, []byte("one"))
	w.batch(2, []byte("two"))
	w.batch(3, []byte("three"))
	if got := <-started; got != "one" {
		t.Fatalf("the model took %q first, want one", got)
	}
	w.write(ipc.Message{Kind: ipc.KindRecall, BatchID: 2})
	if m := w.next(); m.Kind != ipc.KindRecalled || m.BatchID != 2 {
		t.Fatalf("after a recall of batch 2, waiting behind the one running: %s of batch %d, want recalled of 2", m.Kind, m.BatchID)
	}
	// The running batch cannot be given back: the recall goes unanswered.
	w.write(ipc.Message{Kind: ipc.KindRecall, BatchID: 1})
	release <- struct{}{}
	if res := w.result(1); string(res.Items[0]) != "one" {
		t.Fatalf("batch 1 answered %q", res.Items)
	}
	if got := <-started; got != "three" {
		t.Fatalf("after batch 1 the model took %q, want three: two was given back", got)
	}
	release <- struct{}{}
	if res := w.result(3); string(res.Items[0]) != "three" {
		t.Fatalf("batch 3 answered %q", res.Items)
	}
	// A recall of a batch already answered, or never sent, is no error.
	w.write(ipc.Message{Kind: ipc.KindRecall, BatchID: 3})
	w.write(ipc.Message{Kind: ipc.KindRecall, BatchID: 99})
	w.batch(4, []byte("four"))
	release <- struct{}{}
	if res := w.result(4); string(res.Items[0]) != "four" {
		t.Fatalf("batch 4 answered %q", res.Items)
	}
	if got := <-started; got != "four" {
		t.Fatalf("the model took %q, want four", got)
	}
}

func TestSupervisorGoneStopsRun(t *testing.T) {
	m := upper()
	w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(m)})
	w.ready()
	w.batch(1, []byte("x"))
	w.result(1)
	w.toIn.Close()
	if err := w.exit(); !errors.Is(err, workerproc.ErrStopped) {
		t.Fatalf("Run after its input closed: %v, want ErrStopped", err)
	}
	if m.closed.Load() != 1 {
		t.Fatal("the model was not closed")
	}
}

func TestContextCancelStopsRun(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	defer inW.Close()
	done := make(chan error, 1)
	go func() {
		done <- workerproc.Run(ctx, workerproc.Config{Open: opens(upper()), In: inR, Out: io.Discard})
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("Run still waiting %s after its context was cancelled", waitLimit)
	}
}

func TestOpenFailureSendsFatal(t *testing.T) {
	errNoWeights := errors.New("weights.onnx: no such file")
	tests := []struct {
		name string
		spec model.Spec
		open func(context.Context, model.Spec) (model.Model, error)
		want []string
		is   error
	}{
		{"fake", model.Spec{Runner: "onnx", Settings: []byte(`{"path":"resnet.onnx"}`)}, func(context.Context, model.Spec) (model.Model, error) {
			return nil, errNoWeights
		}, []string{"resnet.onnx", "weights.onnx: no such file"}, errNoWeights},
		{"chaos init-fail", builtinSpec(t, "chaos:init-fail"), load.Open, []string{"chaos", "init failed"}, nil},
		// Settings of hundreds of bytes, as a plugin's are, come after the
		// cause: /readyz and 503s say the first 300 bytes alone.
		{"long settings", model.Spec{Runner: "plugin", Settings: []byte(`{"path":"/opt/models/` + strings.Repeat("p", 400) + `"}`)}, func(context.Context, model.Spec) (model.Model, error) {
			return nil, errNoWeights
		}, []string{"open model plugin: weights.onnx: no such file (its settings: {\"path\":\"/opt/models/ppp"}, errNoWeights},
		{"unknown model", model.Spec{Runner: "nope"}, load.Open, []string{"nope", "unknown model"}, model.ErrUnknownModel},
		// An opener that returns no model, and no error: every batch
		// would crash the worker.
		{"no model", fakeSpec, func(context.Context, model.Spec) (model.Model, error) {
			return nil, nil
		}, []string{"neither a model nor an error"}, nil},
		{"a nil pointer", fakeSpec, func(context.Context, model.Spec) (model.Model, error) {
			return (*fake)(nil), nil
		}, []string{"a nil *workerproc_test.fake"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorker(t, tc.spec, workerproc.Config{Open: tc.open})
			m := w.nextOf(func(ipc.Kind) bool { return true })
			if m.Kind != ipc.KindFatal {
				t.Fatalf("first frame is %s, want fatal", m.Kind)
			}
			for _, s := range tc.want {
				if !strings.Contains(m.Error, s) {
					t.Fatalf("fatal message %q does not say %q", m.Error, s)
				}
			}
			err := w.exit()
			if err == nil || err.Error() != m.Error {
				t.Fatalf("Run returned %v; want the error the fatal message carried (%q)", err, m.Error)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Run returned %v, which does not wrap %v", err, tc.is)
			}
		})
	}
}

// TestHeartbeats waits for heartbeats while idle and while a batch runs: the
// supervisor tells a slow batch from a dead worker by them.
func TestHeartbeats(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	slow := &fake{predict: func(_ context.Context, items [][]byte) ([][]byte, error) {
		close(started)
		<-release
		return items, nil
	}}
	w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(slow), HeartbeatInterval: 5 * time.Millisecond})
	w.ready()
	isHeartbeat := func(k ipc.Kind) bool { return k == ipc.KindHeartbeat }
	w.nextOf(isHeartbeat)

	w.batch(1, []byte("x"))
	<-started
	for range 3 {
		if m := w.nextOf(func(ipc.Kind) bool { return true }); m.Kind != ipc.KindHeartbeat {
			t.Fatalf("got %s while the batch was still running, want heartbeats", m.Kind)
		}
	}
	close(release)
	w.result(1)
}

func TestBadFramesFromSupervisor(t *testing.T) {
	tests := []struct {
		name string
		send func(w *worker)
		want string
		is   error
	}{
		{"unexpected kind", func(w *worker) {
			w.write(ipc.Message{Kind: ipc.KindResult, BatchID: 1})
		}, "unexpected result", nil},
		{"corrupt frame", func(w *worker) {
			if _, err := w.toIn.Write([]byte{0, 0, 0, 2, 0x91, 0x01}); err != nil {
				w.t.Fatal(err)
			}
		}, "corrupt", ipc.ErrCorruptFrame},
		{"oversized frame", func(w *worker) {
			if _, err := w.toIn.Write([]byte{0x7f, 0xff, 0xff, 0xff}); err != nil {
				w.t.Fatal(err)
			}
		}, "too large", ipc.ErrFrameTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(upper()), MaxFrame: 1 << 20})
			w.ready()
			tc.send(w)
			err := w.exit()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run returned %v, want an error saying %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Run returned %v, which does not wrap %v", err, tc.is)
			}
		})
	}
}

// TestLargeResultGoesInParts has the model answer a batch whose outputs
// together exceed a frame, though each fits alone: the answer comes in
// several frames, parts then a result, which together hold every output
// intact. An output too large for any frame fails its item alone, with an
// error naming the limit, and the worker keeps serving.
func TestLargeResultGoesInParts(t *testing.T) {
	const limit = 64 << 10
	sized := &fake{predict: func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i, it := range items {
			n, err := strconv.Atoi(string(it))
			if err != nil {
				return nil, err
			}
			out[i] = bytes.Repeat([]byte{byte('a' + i)}, n)
		}
		return out, nil
	}}
	w := startWorker(t, fakeSpec, workerproc.Config{Open: opens(sized), MaxFrame: limit})
	w.ready()
	sizes := []int{40 << 10, 40 << 10, 2 * limit, 40 << 10, 10, 40 << 10}
	items := make([][]byte, len(sizes))
	for i, n := range sizes {
		items[i] = []byte(strconv.Itoa(n))
	}
	w.batch(1, items...)
	res, parts := w.answer(1)
	if parts < 2 {
		t.Errorf("the answer came in %d parts, want at least 2 for %d bytes of outputs under a limit of %d", parts, 160<<10, limit)
	}
	if res.Error != "" || len(res.Items) != len(sizes) || len(res.ItemErrors) != len(sizes) {
		t.Fatalf("joined answer: error %q, %d outputs, %d item errors; want %d of each", res.Error, len(res.Items), len(res.ItemErrors), len(sizes))
	}
	for i, n := range sizes {
		want := bytes.Repeat([]byte{byte('a' + i)}, n)
		switch {
		case n > limit && (res.Items[i] != nil || !strings.Contains(res.ItemErrors[i], strconv.Itoa(limit))):
			t.Errorf("item %d of %d bytes: output of %d bytes, error %q; want no output and an error naming the limit", i, n, len(res.Items[i]), res.ItemErrors[i])
		case n <= limit && (!bytes.Equal(res.Items[i], want) || res.ItemErrors[i] != ""):
			t.Errorf("item %d: %d bytes, error %q; want its own %d bytes", i, len(res.Items[i]), res.ItemErrors[i], n)
		}
	}
	w.batch(2, []byte("3"))
	if res := w.result(2); res.Error != "" || len(res.Items) != 1 || string(res.Items[0]) != "aaa" {
		t.Fatalf("the batch after: error %q, outputs %q", res.Error, res.Items)
	}
}

// answer reads the answer to batch id, in as many parts as it comes, and
// returns it joined, with the number of frames it took.
func (w *worker) answer(id uint64) (ipc.Message, int) {
	w.t.Helper()
	var joined ipc.Message
	for frames := 1; ; frames++ {
		m := w.next()
		if (m.Kind != ipc.KindResult && m.Kind != ipc.KindResultPart) || m.BatchID != id {
			w.t.Fatalf("got %s for batch %d (error %q), want the answer to batch %d", m.Kind, m.BatchID, m.Error, id)
		}
		if m.ItemErrors == nil {
			m.ItemErrors = make([]string, len(m.Items))
		}
		for _, e := range m.Expired {
			joined.Expired = append(joined.Expired, len(joined.Items)+e)
		}
		joined.Items = append(joined.Items, m.Items...)
		joined.ItemErrors = append(joined.ItemErrors, m.ItemErrors...)
		if m.Kind == ipc.KindResult {
			joined.Kind, joined.BatchID, joined.Error = m.Kind, m.BatchID, m.Error
			return joined, frames
		}
	}
}

func ExampleRun() {
	// A worker process serves the echo model over its protocol pipes; here
	// the supervisor's side is simulated with in-memory pipes.
	toWorker, fromSupervisor := io.Pipe()
	fromWorker, toSupervisor := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- workerproc.Run(context.Background(), workerproc.Config{
			Open: load.Open,
			In:   toWorker, Out: toSupervisor, Device: "cpu",
		})
		toSupervisor.Close()
	}()
	send := ipc.NewWriter(fromSupervisor, 0)
	recv := ipc.NewReader(fromWorker, 0)

	hello, _ := recv.Read()
	fmt.Println(hello.Kind, hello.Ready.Magic)
	_ = send.Write(&ipc.Message{Kind: ipc.KindInit, Spec: []byte(`{"runner":"echo"}`)})
	ready, _ := recv.Read()
	fmt.Println(ready.Kind, ready.Ready.Model, ready.Ready.Device)
	_ = send.Write(&ipc.Message{Kind: ipc.KindBatch, BatchID: 1, Items: [][]byte{{0xa2, 'h', 'i'}}})
	res, _ := recv.Read()
	fmt.Println(res.Kind, res.BatchID, string(res.Items[0][1:]))
	_ = send.Write(&ipc.Message{Kind: ipc.KindStop})
	fmt.Println(<-done)
	// Output:
	// hello streamer-worker
	// ready echo cpu
	// result 1 hi
	// <nil>
}

// TestExpiredItemsAreNotRun: items whose time was up when their batch
// reached the model are answered as expired and never shown to it; the
// others keep their places in the answer.
func TestExpiredItemsAreNotRun(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string
	release := make(chan struct{})
	m := upper()
	inner := m.predict
	m.predict = func(ctx context.Context, items [][]byte) ([][]byte, error) {
		names := make([]string, len(items))
		for i, it := range items {
			names[i] = string(it)
		}
		mu.Lock()
		seen = append(seen, names)
		mu.Unlock()
		if names[0] == "slow" {
			<-release // held until batch 2 was read and its 20ms are up
		}
		return inner(ctx, items)
	}
	w := startWorker(t, model.Spec{Runner: "upper"}, workerproc.Config{Open: opens(m)})
	w.ready()
	w.batch(1, []byte("slow"))
	// Sent while the first runs: two items with 20ms left, one with an
	// hour, one with no deadline. When it reaches the model, 100ms on, the
	// first two are expired.
	w.write(ipc.Message{Kind: ipc.KindBatch, BatchID: 2,
		Items: [][]byte{[]byte("late"), []byte("keep"), []byte("late too"), []byte("free")},
		TTLs:  []int64{int64(20 * time.Millisecond), int64(time.Hour), int64(20 * time.Millisecond), 0}})
	// A batch whose items are all expired never reaches the model.
	w.write(ipc.Message{Kind: ipc.KindBatch, BatchID: 3, Items: [][]byte{[]byte("gone")}, TTLs: []int64{1}})
	// The worker reads in order: once it gives back batch 4, it has read
	// (and timed) batches 2 and 3.
	w.batch(4, []byte("marker"))
	w.write(ipc.Message{Kind: ipc.KindRecall, BatchID: 4})
	if m := w.next(); m.Kind != ipc.KindRecalled || m.BatchID != 4 {
		t.Fatalf("got %s of batch %d, want recalled of 4", m.Kind, m.BatchID)
	}
	time.Sleep(40 * time.Millisecond) // past the 20ms TTLs, however late batch 2 was read
	close(release)
	w.result(1)
	res := w.result(2)
	if res.Error != "" || !slices.Equal(res.Expired, []int{0, 2}) {
		t.Fatalf("batch 2: error %q, expired %v; want items 0 and 2 expired", res.Error, res.Expired)
	}
	want := []string{"", "KEEP", "", "FREE"}
	for i, out := range res.Items {
		if string(out) != want[i] {
			t.Fatalf("batch 2 outputs %q, want %q", res.Items, want)
		}
	}
	if res := w.result(3); !slices.Equal(res.Expired, []int{0}) || len(res.Items) != 1 {
		t.Fatalf("batch 3: %+v, want its one item expired", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, [][]string{{"slow"}, {"keep", "free"}}) {
		t.Fatalf("the model saw %q; want only the live items", seen)
	}
}

// TestHandshake: a worker's first frame proves it is one, before it knows
// its model; and a worker given no usable model spec says why and exits,
// never falling back to some default model.
func TestHandshake(t *testing.T) {
	w := startRaw(t, workerproc.Config{Open: load.Open})
	if h := w.hello(); h.Magic != ipc.Magic || h.Version != ipc.Version || h.PID != os.Getpid() {
		t.Fatalf("hello %+v", h)
	}
	tests := []struct {
		name string
		init ipc.Message
		want string
	}{
		{"no spec", ipc.Message{Kind: ipc.KindInit}, "names no model"},
		{"not JSON", ipc.Message{Kind: ipc.KindInit, Spec: []byte("echo")}, "invalid character"},
		{"unknown spec field", ipc.Message{Kind: ipc.KindInit, Spec: []byte(`{"runner":"echo","name":"sleep"}`)}, `unknown field "name"`},
		{"no runner", ipc.Message{Kind: ipc.KindInit, Spec: []byte(`{"settings":{}}`)}, "names no runner"},
		{"a batch before init", ipc.Message{Kind: ipc.KindBatch, BatchID: 1, Items: [][]byte{{1}}}, "batch before init"},
		{"unknown setting", ipc.Message{Kind: ipc.KindInit, Spec: []byte(`{"runner":"sleep","settings":{"fixed":1,"jitter":2}}`)}, `unknown field "jitter"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := startRaw(t, workerproc.Config{Open: load.Open})
			w.hello()
			w.write(tc.init)
			m := w.nextOf(func(ipc.Kind) bool { return true })
			if m.Kind != ipc.KindFatal || !strings.Contains(m.Error, tc.want) {
				t.Fatalf("answer to %s: %s %q, want fatal saying %q", tc.name, m.Kind, m.Error, tc.want)
			}
			if err := w.exit(); err == nil || err.Error() != m.Error {
				t.Fatalf("Run returned %v, want the fatal's error", err)
			}
		})
	}
}

// A worker binary run by hand, or by anything but a supervisor, says what
// it is instead of waiting on descriptors it does not have.
func TestServeOutsideASupervisor(t *testing.T) {
	for _, cookie := range []string{"", "some-other-value"} {
		t.Setenv(ipc.WorkerEnv, cookie)
		if workerproc.Started() {
			t.Fatalf("Started with %s=%q", ipc.WorkerEnv, cookie)
		}
		err := workerproc.Serve(t.Context(), load.Open)
		if !errors.Is(err, workerproc.ErrNotStarted) || !strings.Contains(err.Error(), ipc.WorkerEnv) {
			t.Fatalf("Serve: %v, want ErrNotStarted naming %s", err, ipc.WorkerEnv)
		}
	}
}

// A program that is its own worker asks Started first thing in main: a
// supervisor set the cookie, so this process serves the model it is sent
// and exits, never reaching the program's own code.
func ExampleMain() {
	if workerproc.Started() {
		workerproc.Main(load.Open) // or an OpenFunc of your own
	}
	// … the program proper: a supervisor.Streamer whose ProcessConfig.Path
	// is empty starts this same binary as its workers.
}

// TestModelsLastWordsReachTheSupervisor: a model that ends the worker on
// its own (a plugin that died) says why through the last words its Open
// was given, and the supervisor reads them as a Fatal message.
func TestModelsLastWordsReachTheSupervisor(t *testing.T) {
	var say func(string)
	open := func(ctx context.Context, _ model.Spec) (model.Model, error) {
		say = model.LastWords(ctx)
		return upper(), nil
	}
	w := startWorker(t, fakeSpec, workerproc.Config{Open: open})
	w.ready()
	say("plugin x (pid 7): plugin process exited: exit status 2")
	if m := w.next(); m.Kind != ipc.KindFatal || m.Error != "plugin x (pid 7): plugin process exited: exit status 2" {
		t.Fatalf("got %s %q, want a Fatal message with the model's last words", m.Kind, m.Error)
	}
}
