package main

// ONNX integration tests: the real binary serves the generated test models
// (testdata/models, and the embedded demo) with real workers running ONNX
// Runtime, and every answer is compared with a plain-Go computation over the
// same weights. They need the ONNX Runtime library: `make onnxruntime`.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// onnxTolerance is how far a served output may be from the reference.
const onnxTolerance = 1e-5

// onnxModel returns the path of a test model and its reference, failing the
// test at once, with the fix, when the runtime library is missing.
func onnxModel(t *testing.T, name string) (string, *onnxtest.Reference) {
	t.Helper()
	path, err := onnxtest.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := onnx.Check(onnx.Settings{Path: path}); err != nil {
		t.Fatal(err) // for a missing library: run make onnxruntime
	}
	ref, err := onnxtest.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if name == onnxtest.Demo {
		path = "demo"
	}
	return path, ref
}

// startONNX serves a test model with one intra-op thread per worker: the
// test machines have two cores.
func startONNX(t *testing.T, name string, args ...string) (*server, *onnxtest.Reference) {
	t.Helper()
	path, ref := onnxModel(t, name)
	return startServer(t, append([]string{"--model", path, "--intra-op-threads", "1"}, args...)...), ref
}

// nearJSON compares a JSON output (nested arrays of numbers) with want.
func nearJSON(got any, want []float64) error {
	flat := flatten(got, nil)
	if len(flat) != len(want) {
		return fmt.Errorf("%d values %v, want %d %v", len(flat), got, len(want), want)
	}
	for i := range flat {
		if math.Abs(flat[i]-want[i]) > onnxTolerance {
			return fmt.Errorf("value %d is %v, want %v (±%g)", i, flat[i], want[i], onnxTolerance)
		}
	}
	return nil
}

func flatten(v any, out []float64) []float64 {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			out = flatten(e, out)
		}
	case float64:
		out = append(out, v)
	case bool:
		out = append(out, map[bool]float64{false: 0, true: 1}[v])
	default:
		out = append(out, math.NaN())
	}
	return out
}

func features(rng *rand.Rand) []float32 {
	x := make([]float32, 4)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 2)
	}
	return x
}

func TestONNXDemoServesOutOfTheBox(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Demo)
	p := s.predictJSON(t, []float32{5.1, 3.5, 1.4, 0.2}, []float32{6.7, 3.0, 5.2, 2.3})
	if p.Status != http.StatusOK || len(p.Outputs) != 2 {
		t.Fatalf("demo: %s", p)
	}
	for i, x := range [][]float32{{5.1, 3.5, 1.4, 0.2}, {6.7, 3.0, 5.2, 2.3}} {
		if err := nearJSON(p.Outputs[i], ref.Demo(x)); err != nil {
			t.Errorf("output %d: %v", i, err)
		}
	}

	var desc struct {
		Model, Runner, Device string
		Inputs, Outputs       []struct {
			Name    string
			DType   string `json:"dtype"`
			Shape   []any
			Batched bool
		}
		Batching struct{ Mode, Key string }
	}
	s.getJSON(t, "/v1/models", &desc)
	in, out := desc.Inputs, desc.Outputs
	if desc.Runner != "onnx" || desc.Device != "cpu" || len(in) != 1 || len(out) != 1 ||
		in[0].DType != "float32" || fmt.Sprint(in[0].Shape) != "[batch 4]" || !in[0].Batched ||
		out[0].DType != "float32" || fmt.Sprint(out[0].Shape) != "[batch 3]" || desc.Batching.Mode != "stacked" {
		t.Errorf("GET /v1/models: %+v", desc)
	}
}

// TestONNXConcurrentLoadMatchesReference sends single items and then
// concurrent requests of one to three items to two workers; every answer
// must be the reference's for that item.
func TestONNXConcurrentLoadMatchesReference(t *testing.T) {
	s, ref := startONNX(t, onnxtest.MLP, "--workers", "2", "--batch-size", "16", "--max-latency", "2ms")
	rng := rand.New(rand.NewPCG(11, 11))
	for i := range 3 {
		x := features(rng)
		p := s.predictJSON(t, x)
		if p.Status != http.StatusOK {
			t.Fatalf("single item %d: %s", i, p)
		}
		if err := nearJSON(p.Outputs[0], ref.MLP(x)); err != nil {
			t.Fatalf("single item %d: %v", i, err)
		}
	}

	const clients, requests = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, clients*requests)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 99))
			for range requests {
				items := make([]any, 1+rng.IntN(3))
				xs := make([][]float32, len(items))
				for i := range items {
					xs[i] = features(rng)
					items[i] = xs[i]
				}
				p, err := s.tryPredictJSON(map[string]any{"inputs": items})
				if err == nil && (p.Status != http.StatusOK || len(p.Outputs) != len(items)) {
					err = fmt.Errorf("%s", p)
				}
				for i := 0; err == nil && i < len(items); i++ {
					err = nearJSON(p.Outputs[i], ref.MLP(xs[i]))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := s.stats(t); st.Failed != 0 || st.Crashes != 0 {
		t.Errorf("stats after the load: %d failed items, %d crashes", st.Failed, st.Crashes)
	}
}

// seqItem is a sequence of n steps of 3 values.
func seqItem(rng *rand.Rand, n int) [][]float32 {
	steps := make([][]float32, n)
	for i := range steps {
		steps[i] = []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())}
	}
	return steps
}

// TestONNXMixedShapesNeverMix sends sequences of many lengths at once, with
// and without --pad; each answer must have its own length and equal what the
// item gives alone.
func TestONNXMixedShapesNeverMix(t *testing.T) {
	for _, pad := range []bool{false, true} {
		t.Run(fmt.Sprintf("pad=%v", pad), func(t *testing.T) {
			args := []string{"--batch-size", "32", "--max-latency", "20ms"}
			if pad {
				args = append(args, "--pad", "x=0")
			}
			s, ref := startONNX(t, onnxtest.Seq, args...)
			const clients, requests = 6, 10
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(c), 7))
					for range requests {
						items := make([]any, 2+rng.IntN(3))
						steps := make([][][]float32, len(items))
						for i := range items {
							steps[i] = seqItem(rng, 1+rng.IntN(6))
							items[i] = steps[i]
						}
						p, err := s.tryPredictJSON(map[string]any{"inputs": items})
						if err == nil && (p.Status != http.StatusOK || len(p.Outputs) != len(items)) {
							err = fmt.Errorf("%s", p)
						}
						for i := 0; err == nil && i < len(items); i++ {
							var want []float64
							for _, step := range ref.Seq(steps[i]) {
								want = append(want, step...)
							}
							if rows, ok := p.Outputs[i].([]any); !ok || len(rows) != len(steps[i]) {
								err = fmt.Errorf("item of %d steps answered %v", len(steps[i]), p.Outputs[i])
							} else {
								err = nearJSON(p.Outputs[i], want)
							}
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestONNXSeveralInputsAndDtypes(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Multi, "--pad", "ids=0", "--pad", "mask=0", "--max-latency", "20ms")
	type item struct {
		IDs    []int64 `json:"ids"`
		Mask   []bool  `json:"mask"`
		Scale  float64 `json:"scale"`
		Offset int32   `json:"offset"`
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var items []any
	var sent []item
	for i := range 10 {
		it := item{Scale: []float64{0.5, 3}[i%2], Offset: int32(rng.IntN(5))}
		for range 1 + rng.IntN(5) {
			it.IDs = append(it.IDs, int64(rng.IntN(onnxtest.Vocabulary)))
			it.Mask = append(it.Mask, rng.IntN(3) != 0)
		}
		items, sent = append(items, it), append(sent, it)
	}
	p := s.predictJSON(t, items...)
	if p.Status != http.StatusOK {
		t.Fatalf("%s", p)
	}
	for i, it := range sent {
		want := ref.Multi(it.IDs, it.Mask, it.Scale, it.Offset)
		got, ok := p.Outputs[i].(map[string]any)
		if !ok {
			t.Fatalf("output %d is %v, want an object by output name", i, p.Outputs[i])
		}
		above := 0.0
		if want.Above {
			above = 1
		}
		for name, w := range map[string][]float64{
			"pooled": want.Pooled, "count": {float64(want.Count)}, "scaled": {want.Scaled},
			"above": {above}, "next": {float64(want.Next)},
		} {
			if err := nearJSON(got[name], w); err != nil {
				t.Errorf("item %d output %s: %v", i, name, err)
			}
		}
		if _, isBool := got["above"].(bool); !isBool {
			t.Errorf("item %d: above is %v, want a JSON boolean", i, got["above"])
		}
	}

	// The same model through msgpack, with ids as a raw little-endian tensor.
	ids := make([]byte, 0, 24)
	for _, id := range []int64{4, 2, 7} {
		ids = binary.LittleEndian.AppendUint64(ids, uint64(id))
	}
	body, err := msgpack.Marshal(map[string]any{"inputs": []any{map[string]any{
		"ids":    map[string]any{"dtype": "int64", "shape": []int{3}, "data": ids},
		"mask":   []bool{true, false, true},
		"scale":  2.5,
		"offset": 1,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	status, data, _ := s.post(t, "application/msgpack", body)
	var answer struct {
		Outputs []map[string]struct {
			DType string  `msgpack:"dtype"`
			Shape []int64 `msgpack:"shape"`
			Data  []byte  `msgpack:"data"`
		} `msgpack:"outputs"`
	}
	if status != http.StatusOK || msgpack.Unmarshal(data, &answer) != nil || len(answer.Outputs) != 1 {
		t.Fatalf("msgpack: status %d, body %x", status, data)
	}
	want := ref.Multi([]int64{4, 2, 7}, []bool{true, false, true}, 2.5, 1)
	pooled := answer.Outputs[0]["pooled"]
	if pooled.DType != "float32" || fmt.Sprint(pooled.Shape) != "[4]" || len(pooled.Data) != 16 {
		t.Fatalf("msgpack pooled: %+v", pooled)
	}
	for j := range 4 {
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(pooled.Data[4*j:])))
		if math.Abs(v-want.Pooled[j]) > onnxTolerance {
			t.Errorf("msgpack pooled[%d] = %v, want %v", j, v, want.Pooled[j])
		}
	}
	if c := answer.Outputs[0]["count"]; c.DType != "int64" || int64(binary.LittleEndian.Uint64(c.Data)) != want.Count {
		t.Errorf("msgpack count: %+v, want %d", c, want.Count)
	}
}

func TestONNXBatchAxisFixedAtOne(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Fixed, "--workers", "2", "--max-latency", "20ms")
	s.waitAllReady(t, 2)
	rng := rand.New(rand.NewPCG(1, 1))
	var items []any
	var xs [][]float32
	for range 6 {
		x := features(rng)
		items, xs = append(items, x), append(xs, x)
	}
	p := s.predictJSON(t, items...)
	if p.Status != http.StatusOK {
		t.Fatalf("%s", p)
	}
	for i, x := range xs {
		y, energy := ref.Fixed(x)
		got, _ := p.Outputs[i].(map[string]any)
		if err := nearJSON(got["y"], y); err != nil {
			t.Errorf("item %d y: %v", i, err)
		}
		if err := nearJSON(got["energy"], []float64{energy}); err != nil {
			t.Errorf("item %d energy: %v", i, err)
		}
	}
	var desc struct{ Batching struct{ Mode, Why string } }
	s.getJSON(t, "/v1/models", &desc)
	if desc.Batching.Mode != "one-by-one" || !strings.Contains(desc.Batching.Why, "fixed at 1") {
		t.Errorf("/v1/models batching: %+v", desc.Batching)
	}
	s.waitLog(t, "runs items one by one", 1) // logged once, at start
}

// TestONNXBadInputsAnswered400 sends every kind of bad item; each is refused
// with 400 and a message naming the input, what it wants and what came, and
// the next good request still succeeds, from the same worker.
func TestONNXBadInputsAnswered400(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Multi)
	good := `{"inputs": [{"ids": [1, 2], "mask": [true, false], "scale": 0.5, "offset": 1}]}`
	pids := func() []int {
		var out []int
		for _, w := range s.waitAllReady(t, 1) {
			out = append(out, w.PID)
		}
		return out
	}
	before := pids()
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"wrong name", `{"inputs": [{"idz": [1], "mask": [true], "scale": 1, "offset": 1}]}`, []string{"item 0", `unknown input "idz"`, "ids (int64 [seq])"}},
		{"missing input", `{"inputs": [{"ids": [1], "scale": 1, "offset": 1}]}`, []string{`missing input "mask" (bool [seq])`}},
		{"wrong rank", `{"inputs": [{"ids": [[1]], "mask": [true], "scale": 1, "offset": 1}]}`, []string{`input "ids"`, "want int64 [seq] (rank 1", "got shape [1, 1]"}},
		{"scalar sent as vector", `{"inputs": [{"ids": [1], "mask": [true], "scale": [1, 2], "offset": 1}]}`, []string{`input "scale"`, "want float64 []", "got shape [2]"}},
		{"value does not fit int64", `{"inputs": [{"ids": [1, 2.5], "mask": [true, true], "scale": 1, "offset": 1}]}`, []string{`input "ids"`, "want int64 [seq]", "got 2.5 at [1], which does not fit int64"}},
		{"value does not fit bool", `{"inputs": [{"ids": [1], "mask": [3], "scale": 1, "offset": 1}]}`, []string{`input "mask"`, "got 3 at [0], which does not fit bool"}},
		{"value does not fit int32", `{"inputs": [{"ids": [1], "mask": [true], "scale": 1, "offset": 1e12}]}`, []string{`input "offset"`, "want int32 []", "got 1e12, which does not fit int32"}},
		{"shared axis differs", `{"inputs": [{"ids": [1, 2], "mask": [true], "scale": 1, "offset": 1}]}`, []string{`input "mask": axis 0 (seq) is 1 long, but input "ids" has seq = 2`}},
		{"second item bad", `{"inputs": [{"ids": [1], "mask": [true], "scale": 1, "offset": 1}, [1, 2]]}`, []string{"item 1", "the model has 4 inputs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, data, _ := s.post(t, "application/json", []byte(tt.body))
			var answer struct{ Error string }
			if status != http.StatusBadRequest || json.Unmarshal(data, &answer) != nil {
				t.Fatalf("status %d, body %s; want 400", status, data)
			}
			for _, w := range tt.want {
				if !strings.Contains(answer.Error, w) {
					t.Errorf("error %q lacks %q", answer.Error, w)
				}
			}
			if status, data, _ := s.post(t, "application/json", []byte(good)); status != http.StatusOK {
				t.Fatalf("good request after a bad one: status %d, body %s", status, data)
			}
		})
	}

	// A fixed axis of the wrong size, and msgpack tensors that lie.
	mlp, _ := startONNX(t, onnxtest.MLP)
	tensor := func(dtype string, shape []int, data []byte) []byte {
		b, err := msgpack.Marshal(map[string]any{"inputs": []any{map[string]any{"dtype": dtype, "shape": shape, "data": data}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tt := range []struct {
		name        string
		contentType string
		body        []byte
		want        string
	}{
		{"fixed axis too short", "application/json", []byte(`{"inputs": [[1, 2, 3]]}`), `input "features": want float32 [4] (rank 1, every axis at least 1 long); got shape [3]`},
		{"msgpack dtype", "application/msgpack", tensor("float64", []int{4}, make([]byte, 32)), `input "features": want float32 [4]; got dtype float64`},
		{"msgpack data length", "application/msgpack", tensor("float32", []int{4}, make([]byte, 12)), "data has 12 bytes, but shape [4] of float32 needs 16"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, data, _ := mlp.post(t, tt.contentType, tt.body)
			var answer struct{ Error string }
			if status != http.StatusBadRequest || json.Unmarshal(data, &answer) != nil || !strings.Contains(answer.Error, tt.want) {
				t.Fatalf("status %d, body %s; want 400 with %q", status, data, tt.want)
			}
			if p := mlp.predictJSON(t, []float32{1, 2, 3, 4}); p.Status != http.StatusOK {
				t.Fatalf("good request after a bad one: %s", p)
			}
		})
	}

	if after := pids(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("worker pids %v became %v: a bad item reached a worker", before, after)
	}
	if st := s.stats(t); st.Failed != 0 || st.Crashes != 0 {
		t.Errorf("stats: %d failed items and %d crashes; bad items must be refused before they are queued", st.Failed, st.Crashes)
	}
}

// TestONNXServeFailsFast checks the supervisor refuses to start, in one line
// saying what it looked for and how to fix it, before any worker starts.
func TestONNXServeFailsFast(t *testing.T) {
	mlp, _ := onnxModel(t, onnxtest.MLP)
	notes := t.TempDir() + "/notes.onnx"
	if err := os.WriteFile(notes, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  string
		want []string
	}{
		{"missing model", []string{"--model", "testdata/models/none.onnx"}, "", []string{"model testdata/models/none.onnx: no such file"}},
		{"not ONNX", []string{"--model", notes}, "", []string{"not an ONNX model"}},
		{"missing library", []string{"--model", mlp, "--ort-lib", "/no/such/libonnxruntime.so"}, "", []string{"the library path names /no/such/libonnxruntime.so, which does not exist", "make onnxruntime", "--ort-lib"}},
		{"missing library from the environment", []string{"--model", mlp}, "/no/such/dir/libonnxruntime.so", []string{"$STREAMER_ORT_LIB names /no/such/dir/libonnxruntime.so", "make onnxruntime"}},
		{"bad pad", []string{"--model", mlp, "--pad", "features=0"}, "", []string{`pad features=0: input "features" (float32 [4]) has no dynamic axis`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(onnx.EnvLibrary, tt.env)
			}
			s := launchServer(t, tt.args...)
			code, err := s.wait(readyTimeout)
			if err != nil || code != 1 {
				t.Fatalf("exit code %d (%v), want 1", code, err)
			}
			out := strings.TrimSpace(s.logs())
			if strings.Contains(out, "\n") || strings.Contains(out, "starting workers") {
				t.Errorf("want one line before any worker starts, got:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output %q lacks %q", out, w)
				}
			}
		})
	}
}

// TestONNXCUDAWithoutProviderNeverFallsBack asks for CUDA from the CPU build
// of ONNX Runtime: the worker must fail at start, saying so, and no request
// may be served on the CPU instead.
func TestONNXCUDAWithoutProviderNeverFallsBack(t *testing.T) {
	mlp, _ := onnxModel(t, onnxtest.MLP)
	s := launchServer(t, "--model", mlp, "--device", "cuda", "--max-restarts", "1")
	const reason = "has no usable CUDA execution provider"
	waitFor(t, "the worker to report the missing CUDA provider", readyTimeout, func() bool {
		if strings.Contains(s.logs(), reason) {
			return true
		}
		// Bounded: a server that accepts connections before it serves
		// them must not stall the wait.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		status, body, _, err := s.do(ctx, http.MethodGet, "/v1/workers", "", nil)
		return err == nil && status == http.StatusOK && strings.Contains(string(body), reason)
	})
	if s.exited() {
		return
	}
	// Watch for a second: readiness would mean a CPU fall-back.
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for end := time.Now().Add(time.Second); time.Now().Before(end) && !s.exited(); <-tick.C {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		status, _, _, err := s.do(ctx, http.MethodGet, "/readyz", "", nil)
		cancel()
		if err == nil && status == http.StatusOK {
			t.Fatal("/readyz is 200 with --device cuda and no CUDA provider: the model fell back to the CPU")
		}
	}
}

func TestCodecForPicksTheModelsCodec(t *testing.T) {
	fixed, _ := onnxModel(t, onnxtest.Fixed)
	spec := func(o serveOptions) model.Spec {
		t.Helper()
		o.device = "cpu"
		s, err := o.spec("")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tt := range []struct {
		spec model.Spec
		onnx bool
	}{
		{spec(serveOptions{model: "echo"}), false},
		{spec(serveOptions{model: "sleep:1ms,1us"}), false},
		{spec(serveOptions{model: "demo"}), true},
		{spec(serveOptions{model: fixed}), true},
		{spec(serveOptions{model: fixed, plugin: "/bin/plugin"}), false},
	} {
		codec, info, err := codecFor(tt.spec, "m")
		if err != nil {
			t.Fatalf("%+v: %v", tt.spec, err)
		}
		_, isONNX := info.(*onnx.Description)
		if _, generic := codec.(httpapi.Generic); isONNX != tt.onnx || generic == tt.onnx {
			t.Errorf("%+v: codec %T, description %T; want ONNX: %v", tt.spec, codec, info, tt.onnx)
		}
	}
	if _, info, _ := codecFor(spec(serveOptions{model: "sleep:1ms,1us"}), "sleep:1ms,1us"); info.(map[string]any)["model"] != "sleep:1ms,1us" || info.(map[string]any)["runner"] != "sleep" {
		t.Errorf("a built-in's description %v: want its name and runner", info)
	}
	if _, _, err := codecFor(spec(serveOptions{model: "missing.onnx"}), "missing.onnx"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing model file: %v", err)
	}

	_, info, err := codecFor(spec(serveOptions{model: fixed}), fixed)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	announceModel(info, 32, 5*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	desc := info.(*onnx.Description)
	if desc.Batching.BatchSize != 32 || desc.Batching.MaxLatency != "5ms" {
		t.Errorf("batching %+v, want batch size 32 and max latency 5ms", desc.Batching)
	}
	if n := strings.Count(logs.String(), "runs items one by one: the model's batch axis is fixed at 1"); n != 1 {
		t.Errorf("announced %q, want one line saying the model runs items one by one", logs.String())
	}
}

// TestONNXEveryDtypeEndToEnd serves the dtypes model and sends the extremes
// of every served dtype, float16 included, as JSON and as msgpack tensor
// maps (with the infinities and NaNs JSON cannot carry); every answer must
// be exact: JSON text for text, msgpack bytes for bytes.
func TestONNXEveryDtypeEndToEnd(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Dtypes, "--max-latency", "20ms", "--pad", "in_fp16=0")
	cases := onnxtest.DtypeCases()
	// pick returns, of each input's values, those at the given positions
	// (modulo their number); none: all of them.
	pick := func(positions ...int) [][]onnxtest.DtypeValue {
		item := make([][]onnxtest.DtypeValue, len(cases))
		for j, c := range cases {
			if len(positions) == 0 {
				item[j] = c.Values
			}
			for _, p := range positions {
				item[j] = append(item[j], c.Values[p%len(c.Values)])
			}
		}
		return item
	}
	items := [][][]onnxtest.DtypeValue{pick(), pick(0), pick(1, 0), pick(3)}
	var sent, want []string
	for _, item := range items {
		var in, out []string
		for j, c := range cases {
			texts, answers := make([]string, len(item[j])), make([]string, len(item[j]))
			for k, v := range item[j] {
				texts[k], answers[k] = v.JSON, v.Answer
			}
			in = append(in, fmt.Sprintf("%q: [%s]", c.Input, strings.Join(texts, ", ")))
			out = append(out, fmt.Sprintf("%q:[%s]", c.Output, strings.Join(answers, ",")))
		}
		sent = append(sent, "{"+strings.Join(in, ", ")+"}")
		want = append(want, "{"+strings.Join(out, ",")+"}")
	}
	status, data, _ := s.post(t, "application/json", []byte(`{"inputs": [`+strings.Join(sent, ", ")+`]}`))
	var answer struct{ Outputs []json.RawMessage }
	if status != http.StatusOK || json.Unmarshal(data, &answer) != nil || len(answer.Outputs) != len(items) {
		t.Fatalf("JSON: status %d, body %s", status, data)
	}
	for i, got := range answer.Outputs {
		if string(got) != want[i] {
			t.Errorf("JSON item %d:\n got %s\nwant %s", i, got, want[i])
		}
	}

	// msgpack: every input as a tensor map, the float inputs carrying
	// infinities and NaNs with payloads; each output must be its input's
	// bytes, dtype and shape.
	nonFinite := map[string][]uint64{
		"float16": {0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x7bff},
		"float32": {0x7f800000, 0xff800000, 0x7fc00000, 0xffc00123},
		"float64": {0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000001},
	}
	type tensorMap struct {
		DType string  `msgpack:"dtype"`
		Shape []int64 `msgpack:"shape"`
		Data  []byte  `msgpack:"data"`
	}
	var packed []any
	var wantMaps []map[string]tensorMap
	for _, item := range [][][]onnxtest.DtypeValue{pick(), pick(2, 1)} {
		in, out := map[string]any{}, map[string]tensorMap{}
		for j, c := range cases {
			values := item[j]
			if bits, ok := nonFinite[c.DType]; ok && len(item[j]) > 2 {
				values = nil
				for _, b := range bits {
					values = append(values, onnxtest.DtypeValue{Bits: b})
				}
			}
			tm := tensorMap{DType: c.DType, Shape: []int64{int64(len(values))}, Data: c.Bytes(values)}
			in[c.Input], out[c.Output] = tm, tm
		}
		packed, wantMaps = append(packed, in), append(wantMaps, out)
	}
	body, err := msgpack.Marshal(map[string]any{"inputs": packed})
	if err != nil {
		t.Fatal(err)
	}
	status, data, _ = s.post(t, "application/msgpack", body)
	var packedAnswer struct {
		Outputs []map[string]tensorMap `msgpack:"outputs"`
	}
	if status != http.StatusOK || msgpack.Unmarshal(data, &packedAnswer) != nil || len(packedAnswer.Outputs) != len(packed) {
		t.Fatalf("msgpack: status %d, body %x", status, data)
	}
	for i, outs := range packedAnswer.Outputs {
		for _, c := range cases {
			got, w := outs[c.Output], wantMaps[i][c.Output]
			if got.DType != w.DType || fmt.Sprint(got.Shape) != fmt.Sprint(w.Shape) || string(got.Data) != string(w.Data) {
				t.Errorf("msgpack item %d %s: %s %v %x, want %s %v %x", i, c.Output, got.DType, got.Shape, got.Data, w.DType, w.Shape, w.Data)
			}
		}
	}

	var desc struct {
		Inputs, Outputs []struct {
			Name  string
			DType string `json:"dtype"`
			Shape []any
		}
	}
	s.getJSON(t, "/v1/models", &desc)
	if len(desc.Inputs) != len(cases) || len(desc.Outputs) != len(cases) || desc.Inputs[0].Name != "in_fp16" || desc.Inputs[0].DType != "float16" ||
		desc.Outputs[0].Name != "out_fp16" || desc.Outputs[0].DType != "float16" || fmt.Sprint(desc.Outputs[0].Shape) != "[batch n_fp16]" {
		t.Errorf("GET /v1/models: %+v", desc)
	}
	if st := s.stats(t); st.Failed != 0 || st.Crashes != 0 {
		t.Errorf("stats: %d failed items, %d crashes", st.Failed, st.Crashes)
	}
}
