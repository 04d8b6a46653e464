package main

// ONNX integration tests of models with odd interfaces, written for each
// test with onnxtest.Custom: the real binary serves them, and each answer
// must be the item's own.

import (
	"net/http"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

const f32 = onnxpb.TensorProto_FLOAT

// customModel writes c into the test's folder and returns its path, failing
// the test at once when the runtime library is missing.
func customModel(t *testing.T, c onnxtest.Custom) string {
	t.Helper()
	path, err := c.Write(t.TempDir(), "custom")
	if err != nil {
		t.Fatal(err)
	}
	if err := onnx.Check(onnx.Settings{Path: path}); err != nil {
		t.Fatal(err) // for a missing library: run make onnxruntime
	}
	return path
}

// TestONNXUnbatchedInputsOfOtherShapesGetTheirOwnAnswers sends two items
// whose unbatched input w has the same values in other shapes, in one
// request: y = x + the sum of w over its second axis differs for them.
func TestONNXUnbatchedInputsOfOtherShapesGetTheirOwnAnswers(t *testing.T) {
	path := customModel(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 2}}, {Name: "w", DType: f32, Dims: []any{1, "k", "m"}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 2}}},
		Nodes: []onnxtest.Node{
			{Op: "ReduceSum", Inputs: []string{"w", "axis1"}, Output: "ws", Ints: map[string]int64{"keepdims": 0}},
			{Op: "Add", Inputs: []string{"x", "ws"}, Output: "y"},
		},
		Int64s: map[string][]int64{"axis1": {1}},
	})
	s := startServer(t, "--model", path, "--intra-op-threads", "1", "--max-latency", "50ms")
	p := s.predictJSON(t,
		map[string]any{"x": []float32{1, 1}, "w": [][][]float32{{{1, 2}}}},
		map[string]any{"x": []float32{1, 1}, "w": [][][]float32{{{1}, {2}}}},
	)
	if p.Status != http.StatusOK || len(p.Outputs) != 2 {
		t.Fatalf("%s", p)
	}
	for i, want := range [][]float64{{2, 3}, {4, 4}} {
		if err := nearJSON(p.Outputs[i], want); err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
}

// TestONNXTimeMajorModelRunsItemsOneByOne serves a model whose leading axis
// is the sequence ([seq, batch, 2], summed along seq): items of one request
// must not be stacked along it, and the log says at start why they run one
// by one.
func TestONNXTimeMajorModelRunsItemsOneByOne(t *testing.T) {
	path := customModel(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"seq", "batch", 2}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"seq", "batch", 2}}},
		Nodes:   []onnxtest.Node{{Op: "CumSum", Inputs: []string{"x", "axis0"}, Output: "y"}},
		Int64s:  map[string][]int64{"axis0": {0}},
	})
	s := startServer(t, "--model", path, "--intra-op-threads", "1", "--max-latency", "50ms")
	p := s.predictJSON(t, [][][]float32{{{1, 2}}, {{3, 4}}}, [][][]float32{{{10, 20}}, {{30, 40}}})
	if p.Status != http.StatusOK || len(p.Outputs) != 2 {
		t.Fatalf("%s", p)
	}
	for i, want := range [][]float64{{1, 2, 4, 6}, {10, 20, 40, 60}} {
		if err := nearJSON(p.Outputs[i], want); err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
	// One line says why the model runs items one by one.
	s.waitLog(t, "runs items one by one: input \\\"x\\\"'s axis 1 is named batch, but its leading axis is seq", 1)
}

// TestONNXReductionOverTheBatchRunsItemsOneByOne serves a model that sums
// its input over the batch, its output's axis named as exporters name the
// axes nobody named: stacked, each of three items got the sum of all
// three. The worker finds at start that the output does not lead with the
// batch, and says so.
func TestONNXReductionOverTheBatchRunsItemsOneByOne(t *testing.T) {
	path := customModel(t, onnxtest.SumOverBatch)
	s := startServer(t, "--model", path, "--intra-op-threads", "1", "--max-latency", "50ms")
	p := s.predictJSON(t, []float32{1, 1, 1}, []float32{2, 2, 2}, []float32{5, 5, 5})
	if p.Status != http.StatusOK || len(p.Outputs) != 3 {
		t.Fatalf("%s", p)
	}
	for i, want := range [][]float64{{1, 1, 1}, {2, 2, 2}, {5, 5, 5}} {
		if err := nearJSON(p.Outputs[i], want); err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
	// One line says why the model runs items one by one.
	s.waitLog(t, "one item per run: output \\\"y\\\" declares [unk__9], and a run of 2 items of ones gave it the shape [3]", 1)
	// And /v1/workers, where the log alone said it: /v1/models gives what
	// the file declares.
	if w := s.workers(t); len(w) != 1 || !strings.Contains(w[0].Model, `one item per run: output "y" declares [unk__9], and a run of 2 items of ones gave it the shape [3]`) {
		t.Errorf("/v1/workers: %+v; want the slot's model to say why its items run one by one", w)
	}
}

// TestONNXOutputFoundNotToLeadWithTheBatchWarns serves a model whose
// output counts rows of its input (those whose largest element is under 2),
// which a probe of ones cannot tell from a batch axis: the first run whose
// output does not lead with its items has items run one by one, each
// getting its own rows, and the worker says so as a warning, which
// --log-level warn shows (it was logged at INFO, in the log package's form).
func TestONNXOutputFoundNotToLeadWithTheBatchWarns(t *testing.T) {
	path := customModel(t, onnxtest.RowsUnderTwo)
	s := startServer(t, "--model", path, "--intra-op-threads", "1", "--max-latency", "50ms")
	p := s.predictJSON(t, []int{2, 2}, []int{0, 0})
	if p.Status != http.StatusOK || len(p.Outputs) != 2 {
		t.Fatalf("%s", p)
	}
	if err := nearJSON(p.Outputs[0], nil); err != nil {
		t.Errorf("item 0: %v", err)
	}
	if err := nearJSON(p.Outputs[1], []float64{0}); err != nil {
		t.Errorf("item 1: %v", err)
	}
	// The worker's line, logged by the supervisor at the level it says.
	var lines []string
	s.waitFor(t, "the worker to say the model runs items one by one", readyTimeout, func() bool {
		lines = rawLinesContaining(s.logs(), "items run one by one from now on")
		return len(lines) > 0
	})
	if len(lines) != 1 || !strings.Contains(lines[0], `level=WARN msg="worker output"`) || !strings.Contains(lines[0], `line="time=`) {
		t.Errorf("want one warning of the worker's, in slog's form, logged as a warning: %q", lines)
	}
}

// TestONNXScalarOutputDeclaredBatchedFailsWithoutCrashing serves a model
// whose output declared [batch] is a scalar: each request fails, saying so,
// and the worker serves on.
func TestONNXScalarOutputDeclaredBatchedFailsWithoutCrashing(t *testing.T) {
	path := customModel(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 3}}},
		Outputs: []onnxtest.Value{{Name: "loss", DType: f32, Dims: []any{"batch"}}},
		Nodes:   []onnxtest.Node{{Op: "ReduceSum", Inputs: []string{"x"}, Output: "loss", Ints: map[string]int64{"keepdims": 0}}},
	})
	s := startServer(t, "--model", path, "--intra-op-threads", "1")
	before := s.waitAllReady(t, 1)
	for i := range 3 {
		status, data, _ := s.post(t, "application/json", []byte(`{"inputs": [[1, 2, 3]]}`))
		if status == http.StatusOK || !strings.Contains(string(data), `output \"loss\": the model produced a scalar, but declares [batch]`) {
			t.Fatalf("request %d: status %d, body %s; want the model's failure, saying why", i, status, data)
		}
	}
	if after := s.waitAllReady(t, 1); after[0].PID != before[0].PID {
		t.Errorf("worker pid %d became %d: the worker crashed", before[0].PID, after[0].PID)
	}
	if st := s.stats(t); st.Crashes != 0 {
		t.Errorf("stats: %d crashes, want 0", st.Crashes)
	}
}

// TestONNXHugeFixedOutputRefusedAtStart: a model whose output is declared
// float16 [batch, 2^40] would need 2 TiB per item; serve refuses it at
// start, in one line, before any worker allocates it.
func TestONNXHugeFixedOutputRefusedAtStart(t *testing.T) {
	f16 := onnxpb.TensorProto_FLOAT16
	modelRefusedAtStart(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", 2}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f16, Dims: []any{"batch", int64(1) << 40}}},
		Nodes:   []onnxtest.Node{{Op: "Identity", Inputs: []string{"x"}, Output: "y"}},
	}, `output "y" (float16 [1099511627776]): one item's answer would take 2.2e+12 bytes, beyond the 256 MiB a worker sends back in one answer`)
}

// modelRefusedAtStart serves model, with args, and checks that serve exits
// 1 at start, its last line saying want.
func modelRefusedAtStart(t *testing.T, model onnxtest.Custom, want string, args ...string) {
	t.Helper()
	path, err := model.Write(t.TempDir(), "refused")
	if err != nil {
		t.Fatal(err)
	}
	if line := refusedAtStart(t, append([]string{"--model", path}, args...)); !strings.Contains(line, want) {
		t.Errorf("want the last line to say %q, got %s", want, line)
	}
}

// TestONNXPadRefusedForAnOutputItCannotCrop: padded items of several
// lengths would share a run whose output axis, named by no input (here as
// TensorFlow names what it was not told of), keeps the longest item's
// length: each item's answer would depend on its batch-mates. serve
// refuses to pad that model at start, naming the output.
func TestONNXPadRefusedForAnOutputItCannotCrop(t *testing.T) {
	modelRefusedAtStart(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", "seq", 2}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", "unk__7", 2}}},
		Nodes:   []onnxtest.Node{{Op: "Relu", Inputs: []string{"x"}, Output: "y"}},
	}, `output "y" (float32 [unk__7, 2]): its axis 1, the dynamic axis "unk__7", is shared by no input axis`, "--pad", "x=0")
}

// TestONNXPadWithNegativeInfinity serves the sequence model padded with
// -inf: items of other lengths share runs and get their own answers, and
// GET /v1/models spells the value.
func TestONNXPadWithNegativeInfinity(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Seq, "--pad", "x=-inf", "--max-latency", "50ms")
	short := [][]float32{{0.5, -1, 2}}
	long := [][]float32{{1, 2, 3}, {-0.5, 0.25, 1}, {0, 0, 1}}
	p := s.predictJSON(t, short, long)
	if p.Status != http.StatusOK || len(p.Outputs) != 2 {
		t.Fatalf("%s", p)
	}
	for i, steps := range [][][]float32{short, long} {
		var want []float64
		for _, step := range ref.Seq(steps) {
			want = append(want, step...)
		}
		if err := nearJSON(p.Outputs[i], want); err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
	var desc struct{ Batching struct{ Pad map[string]any } }
	s.getJSON(t, "/v1/models", &desc)
	if desc.Batching.Pad["x"] != "-Inf" {
		t.Errorf("/v1/models batching pad %v, want x: -Inf", desc.Batching.Pad)
	}
}

// TestONNXZeroLengthAxisRefusedAtStart: an input declared [batch, 0] could
// take no item; serve refuses it at start, in one line, rather than read the
// axis as dynamic.
func TestONNXZeroLengthAxisRefusedAtStart(t *testing.T) {
	modelRefusedAtStart(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 0}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 0}}},
		Nodes:   []onnxtest.Node{{Op: "Identity", Inputs: []string{"x"}, Output: "y"}},
	}, `input "x": axis 1 is declared 0 long (dim_value 0)`)
}
