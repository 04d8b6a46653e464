package onnx_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/demo"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// The models of these tests have interfaces none of the committed models
// has; each is written into the test's own folder.

const f32 = onnxpb.TensorProto_FLOAT

// openCustom writes c and opens a runner on it.
func openCustom(t *testing.T, c onnxtest.Custom, pad map[string]float64) *onnx.Runner {
	t.Helper()
	path, err := c.Write(t.TempDir(), "custom")
	if err != nil {
		t.Fatal(err)
	}
	return open(t, onnx.Settings{Path: path, IntraOpThreads: 1, Pad: pad})
}

// unbatchedWeights adds an unbatched input w [1, k, m], summed over k, to
// each item's x [batch, 2].
var unbatchedWeights = onnxtest.Custom{
	Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 2}}, {Name: "w", DType: f32, Dims: []any{1, "k", "m"}}},
	Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 2}}},
	Nodes: []onnxtest.Node{
		{Op: "ReduceSum", Inputs: []string{"w", "axis1"}, Output: "ws", Ints: map[string]int64{"keepdims": 0}},
		{Op: "Add", Inputs: []string{"x", "ws"}, Output: "y"},
	},
	Int64s: map[string][]int64{"axis1": {1}},
}

// Two items whose unbatched input has the same bytes in other shapes are
// in one batch; each must get its own answer.
func TestUnbatchedInputsOfOtherShapesNeverShareARun(t *testing.T) {
	r := openCustom(t, unbatchedWeights, nil)
	outs := predict(t, r, encode(t, r,
		`{"x": [1, 1], "w": [[[1, 2]]]}`,
		`{"x": [1, 1], "w": [[[1], [2]]]}`,
	))
	near(t, "w [1, 1, 2]", values(t, outs[0][0]), []float64{2, 3})
	near(t, "w [1, 2, 1]", values(t, outs[1][0]), []float64{4, 4})
}

// A time-major model sums over its leading axis, the sequence: were items
// stacked along it, each would get the sum of all. Items run one by one,
// each taken whole.
func TestTimeMajorModelRunsItemsWhole(t *testing.T) {
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"seq", "batch", 2}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"seq", "batch", 2}}},
		Nodes:   []onnxtest.Node{{Op: "CumSum", Inputs: []string{"x", "axis0"}, Output: "y"}},
		Int64s:  map[string][]int64{"axis0": {0}},
	}, nil)
	outs := predict(t, r, encode(t, r, `[[[1, 2]], [[3, 4]]]`, `[[[10, 20]], [[30, 40]]]`))
	near(t, "item 0", values(t, outs[0][0]), []float64{1, 2, 4, 6})
	near(t, "item 1", values(t, outs[1][0]), []float64{10, 20, 40, 60})
	if !equalShape(outs[0][0].Shape, 2, 1, 2) {
		t.Errorf("item 0's shape %v, want [2 1 2]", outs[0][0].Shape)
	}
}

// An output declared [three, batch] is not cut along its leading axis:
// each item gets its own column.
func TestTransposedOutputGoesWholeToEachItem(t *testing.T) {
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 3}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"three", "batch"}}},
		Nodes:   []onnxtest.Node{{Op: "Transpose", Inputs: []string{"x"}, Output: "y", IntLists: map[string][]int64{"perm": {1, 0}}}},
	}, nil)
	outs := predict(t, r, encode(t, r, `[1, 2, 3]`, `[4, 5, 6]`))
	for i, want := range [][]float64{{1, 2, 3}, {4, 5, 6}} {
		near(t, "item", values(t, outs[i][0]), want)
		if !equalShape(outs[i][0].Shape, 3, 1) {
			t.Errorf("item %d's shape %v, want [3 1]", i, outs[i][0].Shape)
		}
	}
}

// Items padded along two axes, [1 × n] and [n × 1], would make a run of n ×
// n each: they run apart, and a third item that pads little with the first
// shares its run.
func TestPaddingNeverMakesARunFarLargerThanItsItems(t *testing.T) {
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", "h", "w"}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", "h", "w"}}},
		Nodes:   []onnxtest.Node{{Op: "Identity", Inputs: []string{"x"}, Output: "y"}},
	}, map[string]float64{"x": 0})
	const n = 2000
	row := make([]float32, n)
	for i := range row {
		row[i] = float32(i)
	}
	wide := "[" + floatsJSON(row) + "]"
	column := make([]string, n)
	for i := range column {
		column[i] = "[" + strconv.Itoa(i) + "]"
	}
	tall := "[" + strings.Join(column, ",") + "]"
	outs := predict(t, r, encode(t, r, wide, tall, `[[1, 2, 3]]`))
	for i, want := range [][]int64{{1, n}, {n, 1}, {1, 3}} {
		if !equalShape(outs[i][0].Shape, want...) {
			t.Errorf("item %d's shape %v, want %v", i, outs[i][0].Shape, want)
		}
	}
	near(t, "the tall item's last rows", values(t, outs[1][0])[n-2:], []float64{n - 2, n - 1})
	if got := r.Runs(); got != 2 {
		t.Errorf("%d runs; want 2: the wide and short items together, the tall one apart", got)
	}
}

// A model whose output is a scalar although it declares [batch], or
// declares no shape, fails each item with an error that says so; the
// runner does not panic, and serves on.
func TestScalarOutputDeclaredBatchedFailsClearly(t *testing.T) {
	for _, tt := range []struct {
		name string
		out  onnxtest.Value
		want string
	}{
		{"declared [batch]", onnxtest.Value{Name: "total", DType: f32, Dims: []any{"batch"}}, `output "total": the model produced a scalar, but declares [batch]`},
		{"no declared shape", onnxtest.Value{Name: "total", DType: f32, NoShape: true}, `output "total": the model produced a scalar, but declares no shape`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := openCustom(t, onnxtest.Custom{
				Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 3}}},
				Outputs: []onnxtest.Value{tt.out},
				Nodes:   []onnxtest.Node{{Op: "ReduceSum", Inputs: []string{"x"}, Output: "total", Ints: map[string]int64{"keepdims": 0}}},
			}, nil)
			for range 2 {
				_, err := r.Predict(context.Background(), encode(t, r, `[1, 2, 3]`, `[4, 5, 6]`))
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v, want one containing %q", err, tt.want)
				}
			}
		})
	}
}

// A float16 output the runner allocates, [batch, 2^20, n] with n taken from
// the input, is checked before it is allocated: an item whose answer would
// be beyond what a worker can send back fails, saying so, and a small item
// is answered.
func TestFloat16OutputsBeyondAnAnswerAreNotAllocated(t *testing.T) {
	f16 := onnxpb.TensorProto_FLOAT16
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", "n"}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f16, Dims: []any{"batch", 1 << 20, "n"}}},
		Nodes: []onnxtest.Node{
			{Op: "Unsqueeze", Inputs: []string{"x", "axis1"}, Output: "x3"},
			{Op: "Expand", Inputs: []string{"x3", "shape"}, Output: "y"},
		},
		Int64s: map[string][]int64{"axis1": {1}, "shape": {1, 1 << 20, 1}},
	}, nil)
	small := predict(t, r, encode(t, r, `[1, 2]`))
	if !equalShape(small[0][0].Shape, 1<<20, 2) {
		t.Fatalf("small item's shape %v", small[0][0].Shape)
	}
	long := make([]float32, 200)
	_, err := r.Predict(context.Background(), encode(t, r, floatsJSON(long)))
	if err == nil || !strings.Contains(err.Error(), `output "y": a run of 1 items would take 4.19e+08 bytes, beyond the 256 MiB`) {
		t.Fatalf("error %v, want one saying the output is too large", err)
	}
}

// A spec records the model's inputs and outputs; once the file on disk has
// others, a worker refuses to open it, saying how to serve it, even with
// the spec refreshed as a reload does, while a new file with the same
// inputs and outputs (new weights) opens with the refreshed spec.
func TestWorkersRefuseAModelWhoseInterfaceChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.onnx")
	build := func(name string) { writeBuilt(t, path, name) }
	build(onnxtest.MLP)
	spec, settings := specOf(t, path)
	if want := "inputs features float32 [batch, 4]; outputs probs float32 [batch, 3]"; settings.Signature != want {
		t.Fatalf("signature %q, want %q", settings.Signature, want)
	}

	build(onnxtest.Seq)
	// The file changed since the spec was made: the refusal is a stale
	// spec's, which a worker restarted after a crash backs off from, not
	// a crash of its own that counts towards giving its slot up.
	if _, err := onnx.OpenSpec(context.Background(), spec); !errors.Is(err, onnx.ErrSignatureChanged) || !errors.Is(err, model.ErrStale) ||
		!strings.Contains(err.Error(), "it now has inputs x float32 [batch, seq, 3]") || !strings.Contains(err.Error(), "restart the server") {
		t.Fatalf("open after the inputs changed: %v; want ErrSignatureChanged and ErrStale", err)
	}
	if _, _, err := onnx.Codec(settings); !errors.Is(err, onnx.ErrSignatureChanged) {
		t.Fatalf("codec after the inputs changed: %v", err)
	}
	refreshed, err := onnx.Refresh(spec)
	if err != nil {
		t.Fatal(err)
	}
	// Refreshed, as a reload's is, the spec is the file's: the refusal is
	// the model's, which a reload reports.
	if _, err := onnx.OpenSpec(context.Background(), refreshed); !errors.Is(err, onnx.ErrSignatureChanged) || errors.Is(err, model.ErrStale) {
		t.Fatalf("open after the inputs changed, the spec refreshed: %v; want ErrSignatureChanged, not ErrStale", err)
	}

	build(onnxtest.Demo)
	if refreshed, err = onnx.Refresh(spec); err != nil {
		t.Fatal(err)
	}
	m, err := onnx.OpenSpec(context.Background(), refreshed)
	if err != nil {
		t.Fatalf("open a model of the same inputs and outputs: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// A model file still being written when a worker restarts does not parse:
// the refusal is a stale spec's, as for a file replaced whole, so that the
// worker backs off and tries again rather than count a crash.
func TestAModelFileCutShortIsStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.onnx")
	whole := writeBuilt(t, path, onnxtest.MLP)
	spec, _ := specOf(t, path)
	if err := os.WriteFile(path, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := onnx.OpenSpec(context.Background(), spec); err == nil || !errors.Is(err, model.ErrStale) || !strings.Contains(err.Error(), "the file changed since it was loaded") {
		t.Fatalf("open of the file cut short: %v; want ErrStale saying the file changed", err)
	}
	if err := os.WriteFile(path, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := onnx.OpenSpec(context.Background(), spec)
	if err != nil {
		t.Fatalf("open of the file whole again: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// A spec records the SHA-256 of the model file it was made from. A worker
// handed it refuses the file once it holds other weights (a worker
// restarted after the file was replaced without a reload must not serve
// them beside the others' old ones), saying both checksums and that a
// reload serves the new file; the spec Refresh makes, as a reload does,
// opens it. The embedded demo, which cannot change, records none.
func TestWorkersRefuseAModelFileReplacedWithoutAReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.onnx")
	build := func(name string) string {
		sum := sha256.Sum256(writeBuilt(t, path, name))
		return hex.EncodeToString(sum[:])
	}
	mlpSum := build(onnxtest.MLP)
	spec, settings := specOf(t, path)
	if settings.SHA256 != mlpSum {
		t.Fatalf("the spec records sha256 %q, want the file's %s", settings.SHA256, mlpSum)
	}
	if _, desc, err := onnx.Codec(settings); err != nil || desc.SHA256 != mlpSum {
		t.Fatalf("description of the file as loaded: %+v, %v; want sha256 %s", desc, err, mlpSum)
	}

	demoSum := build(onnxtest.Demo) // the same inputs and outputs, other weights
	_, err := onnx.OpenSpec(context.Background(), spec)
	if !errors.Is(err, onnx.ErrModelChanged) ||
		!strings.Contains(err.Error(), "sha256 "+mlpSum+", now "+demoSum) || !strings.Contains(err.Error(), "reload to serve the new one") {
		t.Fatalf("open after the file was replaced: %v; want %v naming both checksums and the reload", err, onnx.ErrModelChanged)
	}
	if _, _, err := onnx.Codec(settings); !errors.Is(err, onnx.ErrModelChanged) {
		t.Fatalf("codec after the file was replaced: %v", err)
	}

	refreshed, err := onnx.Refresh(spec)
	if err != nil {
		t.Fatal(err)
	}
	if after, err := onnx.SettingsOf(refreshed); err != nil || after.SHA256 != demoSum || after.Signature != settings.Signature {
		t.Fatalf("refreshed settings %+v, %v: want sha256 %s and the signature kept", after, err, demoSum)
	}
	m, err := onnx.OpenSpec(context.Background(), refreshed)
	if err != nil {
		t.Fatalf("open the replaced file with the refreshed spec: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	demoSpec, err := onnx.Settings{Path: demo.Name}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := onnx.SettingsOf(demoSpec); err != nil || s.SHA256 != "" {
		t.Fatalf("the embedded demo's settings %+v, %v: want no checksum", s, err)
	}
}

// Infinities and NaN are fair padding values (-Inf before a max): they
// travel to the worker in the spec, pad items there, and GET /v1/models
// spells them.
func TestNonFinitePaddingTravelsInTheSpec(t *testing.T) {
	for _, pad := range []float64{math.Inf(-1), math.Inf(1), math.NaN()} {
		settings := modelSpec(t, onnxtest.Seq)
		settings.Pad = map[string]float64{"x": pad}
		spec, err := settings.Spec()
		if err != nil {
			t.Fatalf("pad %g: %v", pad, err)
		}
		back, err := onnx.SettingsOf(spec)
		if err != nil || len(back.Pad) != 1 || math.Float64bits(back.Pad["x"]) != math.Float64bits(pad) {
			t.Fatalf("pad %g: round trip %v, %v", pad, back.Pad, err)
		}
		m, err := onnx.OpenSpec(context.Background(), spec)
		if err != nil {
			t.Fatalf("pad %g: %v", pad, err)
		}
		r := m.(*onnx.Runner)
		rng := rand.New(rand.NewPCG(5, 5))
		short, shortSteps := sequence(rng, 1)
		long, longSteps := sequence(rng, 3)
		outs := predict(t, r, encode(t, r, short, long))
		for i, steps := range [][][]float32{shortSteps, longSteps} {
			var want []float64
			for _, step := range reference(t, onnxtest.Seq).Seq(steps) {
				want = append(want, step...)
			}
			near(t, fmt.Sprintf("pad %g, item %d", pad, i), values(t, outs[i][0]), want)
		}
		if r.Runs() != 1 {
			t.Errorf("pad %g: %d runs, want 1", pad, r.Runs())
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		_, desc, err := onnx.Codec(back)
		if err != nil {
			t.Fatal(err)
		}
		text, err := json.Marshal(desc)
		if want := fmt.Sprintf(`"pad":{"x":"%s"}`, strconv.FormatFloat(pad, 'g', -1, 64)); err != nil || !strings.Contains(string(text), want) {
			t.Errorf("pad %g: description %s (%v), want %s", pad, text, err, want)
		}
	}
}

// writeBuilt writes the test model name, built, to path, and returns its
// bytes.
// The supervisor reads a model file once for its settings, its check and
// its codec, where it read and hashed it three times; a file written again
// in place meanwhile, to the same size and modification time (as cp -p
// does), is still read again and refused.
func TestAFileWrittenAgainInPlaceIsReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.onnx")
	data := writeBuilt(t, path, onnxtest.MLP)
	_, settings := specOf(t, path)
	if _, _, err := onnx.Codec(settings); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// The last weight's last byte: the same inputs and outputs, other
	// content.
	data[len(data)-1] ^= 0x01
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[len(data)-1:], int64(len(data)-1)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := onnx.Codec(settings); !errors.Is(err, onnx.ErrModelChanged) {
		t.Fatalf("codec of the file written again in place: %v; want %v", err, onnx.ErrModelChanged)
	}
}

func writeBuilt(t *testing.T, path, name string) []byte {
	t.Helper()
	data, err := onnxtest.Build(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

const i64 = onnxpb.TensorProto_INT64

// An output whose leading axis has a made-up name, as exporters write for
// an axis nobody named, is what is left of a reduction over the batch.
// Stacked, each of three items got the sum of all three (its length, 3,
// happened to be the number of items). A run of ones at start finds its
// length is not the number of items, so items run one by one.
func TestReductionOverTheBatchRunsItemsAlone(t *testing.T) {
	r := openCustom(t, onnxtest.SumOverBatch, nil)
	if d := r.Describe(); !strings.Contains(d, `one item per run: output "y" declares [unk__9], and a run of 2 items of ones gave it the shape [3]`) {
		t.Errorf("description %q does not say why items run one by one", d)
	}
	outs := predict(t, r, encode(t, r, `[1, 1, 1]`, `[2, 2, 2]`, `[5, 5, 5]`))
	for i, want := range []float64{1, 2, 5} {
		near(t, fmt.Sprintf("item %d", i), values(t, outs[i][0]), []float64{want, want, want})
	}
	if r.Runs() != 3 {
		t.Errorf("%d runs for 3 items, want 3 (the probe's not counted)", r.Runs())
	}
}

// nonZeroOutput is a model whose output's leading axis counts what the
// data holds (as detections do), declared with a made-up name: the
// positions of x's positive elements, [count, 2].
var nonZeroOutput = onnxtest.Custom{
	Inputs:  []onnxtest.Value{{Name: "x", DType: i64, Dims: []any{"unk__0", 4}}},
	Outputs: []onnxtest.Value{{Name: "y", DType: i64, Dims: []any{"unk__5", 2}}},
	Nodes: []onnxtest.Node{
		{Op: "Greater", Inputs: []string{"x", "zero"}, Output: "positive"},
		{Op: "NonZero", Inputs: []string{"positive"}, Output: "at"},
		{Op: "Transpose", Inputs: []string{"at"}, Output: "y"},
	},
	Int64s: map[string][]int64{"zero": {0}},
}

// Stacked, an item with no positive element got the other item's second
// position. Each item gets the positions of its own, found alone.
func TestCountedOutputsRunItemsAlone(t *testing.T) {
	r := openCustom(t, nonZeroOutput, nil)
	outs := predict(t, r, encode(t, r, `[1, 0, 1, 0]`, `[0, 0, 0, 0]`))
	near(t, "item 0", values(t, outs[0][0]), []float64{0, 0, 0, 2})
	if !equalShape(outs[0][0].Shape, 2, 2) || !equalShape(outs[1][0].Shape, 0, 2) {
		t.Errorf("shapes %v and %v, want [2 2] and [0 2]", outs[0][0].Shape, outs[1][0].Shape)
	}
}

// A run of ones cannot tell that this output's leading axis is not the
// batch axis: rows whose largest element is under 2, which ones all are.
// The first run whose output does not lead with its items tells: from
// then on items run one by one. Before, the item with no such row failed,
// and two items of zeros each got one of the run's two rows.
func TestAnOutputFoundNotToLeadWithTheBatchRunsItemsAlone(t *testing.T) {
	r := openCustom(t, onnxtest.RowsUnderTwo, nil)
	if strings.Contains(r.Describe(), "one item per run") {
		t.Fatalf("description %q: the probe of ones should find nothing", r.Describe())
	}
	outs := predict(t, r, encode(t, r, `[2, 2]`, `[0, 0]`))
	if !equalShape(outs[0][0].Shape, 0, 1) || !equalShape(outs[1][0].Shape, 1, 1) {
		t.Errorf("shapes %v and %v, want [0 1] and [1 1]", outs[0][0].Shape, outs[1][0].Shape)
	}
	outs = predict(t, r, encode(t, r, `[0, 0]`, `[0, 0]`))
	for i := range outs {
		near(t, fmt.Sprintf("zeros %d", i), values(t, outs[i][0]), []float64{0})
	}
}

// An item whose input is larger than any batch may carry is not probed:
// the model is judged by its runs. Before, an item of 3037000500 ×
// 3037000500 elements overflowed the count, and the probe panicked at
// load (the worker died, and the server with it).
func TestTheProbeLeavesItemsLargerThanABatchAlone(t *testing.T) {
	const side = 3037000500
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"rows", side, side}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"unk__3"}}},
		Nodes:   []onnxtest.Node{{Op: "ReduceSum", Inputs: []string{"x", "axes"}, Output: "y", Ints: map[string]int64{"keepdims": 0}}},
		Int64s:  map[string][]int64{"axes": {1, 2}},
	}, nil)
	if d := r.Describe(); strings.Contains(d, "items of ones") {
		t.Errorf("description %q: the probe ran on items larger than a batch", d)
	}
}

// The probe at load must not end the worker, nor take a batched output
// for one that is not. An integer division by the input ended the worker
// on a probe of zeros (SIGFPE), so the model could not be served at all;
// a Squeeze without axes takes away a batch axis of length 1, so a probe
// of one item had its items run one by one.
func TestTheProbeLeavesBatchedModelsStacked(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    onnxtest.Custom
		item string
		want []float64
	}{
		{"integer division by the input", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: i64, Dims: []any{"unk__0", 2}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: i64, Dims: []any{"unk__7", 2}}},
			Nodes:   []onnxtest.Node{{Op: "Div", Inputs: []string{"hundred", "x"}, Output: "y"}},
			Int64s:  map[string][]int64{"hundred": {100}},
		}, `[4, 5]`, []float64{25, 20}},
		{"a squeeze of every axis of length 1", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: i64, Dims: []any{"unk__0", 1, 2}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: i64, Dims: []any{"unk__2", 2}}},
			Nodes:   []onnxtest.Node{{Op: "Squeeze", Inputs: []string{"x"}, Output: "y"}},
		}, `[[4, 5]]`, []float64{4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openCustom(t, tc.c, nil)
			if d := r.Describe(); strings.Contains(d, "one item per run") {
				t.Fatalf("description %q: want items stacked", d)
			}
			outs := predict(t, r, encode(t, r, tc.item, tc.item, tc.item))
			for i := range outs {
				near(t, fmt.Sprintf("item %d", i), values(t, outs[i][0]), tc.want)
			}
			if r.Runs() != 1 {
				t.Errorf("%d runs for 3 items, want 1", r.Runs())
			}
		})
	}
}

// withExternalWeights adds its weight w, kept in the file w.bin beside the
// model, to each item's x [batch, 2].
var withExternalWeights = onnxtest.Custom{
	Inputs:   []onnxtest.Value{{Name: "x", DType: i64, Dims: []any{"batch", 2}}},
	Outputs:  []onnxtest.Value{{Name: "y", DType: i64, Dims: []any{"batch", 2}}},
	Nodes:    []onnxtest.Node{{Op: "Add", Inputs: []string{"x", "w"}, Output: "y"}},
	Int64s:   map[string][]int64{"w": {1, 2}},
	External: map[string]string{"w": "w.bin"},
}

// A model's weights kept in a file of their own count in its SHA-256 as
// the model file's do: a worker restarted after that file was replaced
// without a reload refuses it, where it served the new weights beside the
// others' old ones; a reload takes it. A weights file missing is named at
// the check, before any worker starts.
func TestExternalWeightsCountInTheModelsChecksum(t *testing.T) {
	dir := t.TempDir()
	path, err := withExternalWeights.Write(dir, "model")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := specOf(t, path)
	r := openSpec(t, spec)
	near(t, "with the weights loaded", values(t, predict(t, r, encode(t, r, `[10, 20]`))[0][0]), []float64{11, 22})

	weights := filepath.Join(dir, "w.bin")
	next := filepath.Join(dir, "w.bin.new")
	if err := os.WriteFile(next, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 100), 200), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, weights); err != nil {
		t.Fatal(err)
	}
	if _, err := onnx.OpenSpec(context.Background(), spec); !errors.Is(err, onnx.ErrModelChanged) {
		t.Fatalf("open after the weights file was replaced: %v; want %v", err, onnx.ErrModelChanged)
	}
	refreshed, err := onnx.Refresh(spec)
	if err != nil {
		t.Fatal(err)
	}
	r = openSpec(t, refreshed)
	near(t, "with the new weights, reloaded", values(t, predict(t, r, encode(t, r, `[10, 20]`))[0][0]), []float64{110, 220})

	if err := os.Remove(weights); err != nil {
		t.Fatal(err)
	}
	if err := onnx.Check(onnx.Settings{Path: path}); err == nil || !strings.Contains(err.Error(), `the file of its external weights "w.bin"`) {
		t.Fatalf("check with the weights file missing: %v; want an error naming it", err)
	}
	// The model file is the one loaded: a worker restarted with its
	// weights file gone says that, and not that the file changed (the
	// sums are not comparable), and it counts as a failure to start.
	if _, err := onnx.OpenSpec(context.Background(), refreshed); err == nil || errors.Is(err, model.ErrStale) ||
		!strings.Contains(err.Error(), `the file of its external weights "w.bin"`) || strings.Contains(err.Error(), "the file changed") {
		t.Fatalf("open with the weights file missing: %v; want an error naming it, not ErrStale", err)
	}
}

// specOf is the spec of the model at path, as the server makes it, and
// the settings it carries.
func specOf(t *testing.T, path string) (model.Spec, onnx.Settings) {
	t.Helper()
	spec, err := onnx.Settings{Path: path, IntraOpThreads: 1}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	settings, err := onnx.SettingsOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec, settings
}

// openSpec opens a runner on spec, closed when the test ends.
func openSpec(t *testing.T, spec model.Spec) *onnx.Runner {
	t.Helper()
	m, err := onnx.OpenSpec(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m.(*onnx.Runner)
}

// A model that mixes the items of a run (here each item less the mean of
// the run, as a normalisation over the batch axis does) gave a caller an
// answer made of other callers' inputs: stacked beside [1000, 1000], an
// item [0, 0] got [-500, -500], and told of it. The probe at load finds
// that an item's answer changes with the item beside it, and items run
// one by one, each getting what it gives alone.
func TestAModelThatMixesItemsRunsThemAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		node onnxtest.Node
		want [][]float64
	}{
		{"less the run's mean", onnxtest.Node{Op: "ReduceMean", Inputs: []string{"x"}, Output: "mean", Ints: map[string]int64{"keepdims": 1}, IntLists: map[string][]int64{"axes": {0}}},
			[][]float64{{0, 0}, {0, 0}, {0, 0}}},
		// Alone, an item's softmax over the run is 1.
		{"less a softmax over the run", onnxtest.Node{Op: "Softmax", Inputs: []string{"x"}, Output: "mean", Ints: map[string]int64{"axis": 0}},
			[][]float64{{-1, -1}, {999, 999}, {2, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openCustom(t, onnxtest.Custom{
				Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 2}}},
				Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 2}}},
				Nodes:   []onnxtest.Node{tc.node, {Op: "Sub", Inputs: []string{"x", "mean"}, Output: "y"}},
			}, nil)
			if d := r.Describe(); !strings.Contains(d, `one item per run: output "y" of an item of ones changed when the item beside it in the run was made twos`) {
				t.Errorf("description %q does not say why items run one by one", d)
			}
			outs := predict(t, r, encode(t, r, `[0, 0]`, `[1000, 1000]`, `[3, 3]`))
			for i, want := range tc.want {
				near(t, fmt.Sprintf("item %d", i), values(t, outs[i][0]), want)
			}
		})
	}
}

// A model that does not mix its items keeps them stacked: the probe takes
// rounding for no change.
func TestTheProbeLeavesModelsThatKeepItemsApartStacked(t *testing.T) {
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 3}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 3}}},
		Nodes:   []onnxtest.Node{{Op: "Softmax", Inputs: []string{"x"}, Output: "y", Ints: map[string]int64{"axis": 1}}},
	}, nil)
	if d := r.Describe(); strings.Contains(d, "one item per run") {
		t.Fatalf("description %q: a softmax over each item's own axis does not mix items", d)
	}
	predict(t, r, encode(t, r, `[1, 2, 3]`, `[3, 2, 1]`))
	if r.Runs() != 1 {
		t.Errorf("%d runs for 2 items, want 1 (stacked; the probe's not counted)", r.Runs())
	}
}

// An output that declares the inputs' batch axis but does not lead with
// it (a sum over the batch that keeps its axis, rows made twice over):
// before, each batch ran stacked, failed its cut and ran again item by
// item, on every batch and without a word; and the rows made twice failed
// every request. The probe finds it, and each item gets what it gives
// alone, in one run.
func TestADeclaredBatchAxisThatIsNotOneRunsItemsAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  onnxtest.Node
		shape string
		want  [][]float64
	}{
		{"a sum over the batch, kept", onnxtest.Node{Op: "ReduceSum", Inputs: []string{"x", "axis0"}, Output: "y", Ints: map[string]int64{"keepdims": 1}},
			"[1, 2]", [][]float64{{1, 2}, {3, 4}}},
		{"rows twice over", onnxtest.Node{Op: "Concat", Inputs: []string{"x", "x"}, Output: "y", Ints: map[string]int64{"axis": 0}},
			"[4, 2]", [][]float64{{1, 2, 1, 2}, {3, 4, 3, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openCustom(t, onnxtest.Custom{
				Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 2}}},
				Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 2}}},
				Nodes:   []onnxtest.Node{tc.node},
				Int64s:  map[string][]int64{"axis0": {0}},
			}, nil)
			want := `one item per run: output "y" declares [batch, 2], and a run of 2 items of ones gave it the shape ` + tc.shape + `, so its leading axis is not the batch axis; re-export it declaring the shape it has`
			if d := r.Describe(); !strings.Contains(d, want) {
				t.Errorf("description %q; want it to say %q", d, want)
			}
			outs := predict(t, r, encode(t, r, `[1, 2]`, `[3, 4]`))
			for i, w := range tc.want {
				near(t, fmt.Sprintf("item %d", i), values(t, outs[i][0]), w)
			}
			if r.Runs() != 2 {
				t.Errorf("%d runs for 2 items, want 2", r.Runs())
			}
		})
	}
}

// A float16 output is allocated in its declared shape (see float16.go):
// one whose declared shape is not the one the model makes failed every
// request with ONNX Runtime's words on a shape check, while the server said
// it was ready. It is refused at load, naming the output and both shapes,
// in both of the ways ONNX Runtime words it: naming the node that makes the
// output as it runs, where two outputs planned alike may be either; or, where
// its shape inference knows the output's shape, naming the output.
func TestAFloat16OutputInAnotherShapeThanDeclaredIsRefused(t *testing.T) {
	f16 := onnxpb.TensorProto_FLOAT16
	for _, tc := range []struct {
		name string
		c    onnxtest.Custom
		want string
	}{
		{"twice the input's axis it is named after", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", "n"}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: f16, Dims: []any{"batch", "n"}}},
			Nodes:   []onnxtest.Node{{Op: "Concat", Inputs: []string{"x", "x"}, Output: "y", Ints: map[string]int64{"axis": 1}}},
		}, `output "y" declares [batch, n], which is [2, 1] in a run of 2 items, but the model makes it [2, 2] (at node "Concat_0"): re-export it declaring the shape it has`},
		{"beside an output planned alike", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", 2}}},
			Outputs: []onnxtest.Value{{Name: "a", DType: f16, Dims: []any{"batch", 2}}, {Name: "b", DType: f16, Dims: []any{"batch", 2}}},
			Nodes: []onnxtest.Node{
				{Op: "Identity", Inputs: []string{"x"}, Output: "a"},
				{Op: "Concat", Inputs: []string{"x", "x"}, Output: "b", Ints: map[string]int64{"axis": 1}},
			},
		}, `one of the outputs "a", "b" declares its shape, which is [2, 2] in a run of 2 items, but the model makes it [2, 4] (at node "Concat_1")`},
		// Whatever the length of x: ONNX Runtime knows y's shape before
		// any run.
		{"a shape the runtime infers, of an input whose length varies", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", "n"}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: f16, Dims: []any{"batch", 4}}},
			Nodes:   []onnxtest.Node{{Op: "ReduceSum", Inputs: []string{"x", "axis1"}, Output: "y", Ints: map[string]int64{"keepdims": 1}}},
			Int64s:  map[string][]int64{"axis1": {1}},
		}, `output "y" declares [batch, 4], which is [2, 4] in a run of 2 items, but the model makes it [2, 1]`},
		{"a shape the runtime infers", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", 2}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: f16, Dims: []any{"batch", 2}}},
			Nodes:   []onnxtest.Node{{Op: "ReduceSum", Inputs: []string{"x", "axis1"}, Output: "y", Ints: map[string]int64{"keepdims": 1}}},
			Int64s:  map[string][]int64{"axis1": {1}},
		}, `output "y" declares [batch, 2], which is [2, 2] in a run of 2 items, but the model makes it [2, 1]: re-export it declaring the shape it has`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := tc.c.Write(t.TempDir(), "custom")
			if err != nil {
				t.Fatal(err)
			}
			r, err := onnx.Open(context.Background(), onnx.Settings{Path: path, IntraOpThreads: 1})
			if err == nil {
				_ = r.Close()
				t.Fatal("opened; want the model refused")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refusal %q; want it to say %q", err, tc.want)
			}
		})
	}
}

// A float16 output declared fixed, [batch, 4], as an export traced at that
// length leaves it, of an input whose length varies: items of length 4
// make it so, and the probe's items of length 1 do not. The model is
// served, with a warning; an item of another length fails, naming the
// output.
func TestAFloat16OutputTracedAtOneLengthServesThatLength(t *testing.T) {
	f16 := onnxpb.TensorProto_FLOAT16
	r := openCustom(t, onnxtest.Custom{
		Inputs:  []onnxtest.Value{{Name: "x", DType: f16, Dims: []any{"batch", "n"}}},
		Outputs: []onnxtest.Value{{Name: "y", DType: f16, Dims: []any{"batch", 4}}},
		Nodes:   []onnxtest.Node{{Op: "Identity", Inputs: []string{"x"}, Output: "y"}},
	}, nil)
	outs := predict(t, r, encode(t, r, `[1, 2, 3, 4]`))
	near(t, "the item of length 4", values(t, outs[0][0]), []float64{1, 2, 3, 4})
	_, err := r.Predict(context.Background(), encode(t, r, `[1, 2]`))
	if err == nil || !strings.Contains(err.Error(), `output "y" declares [batch, 4], which is [1, 4] in a run of 1 item, but the model makes it [1, 2]`) {
		t.Errorf("an item of length 2: %v; want it failed, naming the output and both shapes", err)
	}
}

// A model with a random op answers the same items otherwise at each run:
// that is no mixing of the items of a run, and it stays stacked. Before,
// the probe took its noise for the mark of items mixed, and ran them one
// by one. (And a model that refuses the probe's two items of ones, but
// not ones beside twos, is left as it is: it proves nothing; before, the
// worker panicked at load.)
func TestTheProbeLeavesRandomAndRefusingModelsStacked(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    onnxtest.Custom
	}{
		{"noise added", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 2}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 2}}},
			Nodes: []onnxtest.Node{
				{Op: "RandomUniformLike", Inputs: []string{"x"}, Output: "noise"},
				{Op: "Add", Inputs: []string{"x", "noise"}, Output: "y"},
			},
		}},
		// Gather at (the run's largest element) - 3 from a table of one:
		// index -2 for ones, out of range; -1 for twos.
		{"ones refused", onnxtest.Custom{
			Inputs:  []onnxtest.Value{{Name: "x", DType: f32, Dims: []any{"batch", 2}}},
			Outputs: []onnxtest.Value{{Name: "y", DType: f32, Dims: []any{"batch", 2}}},
			Nodes: []onnxtest.Node{
				{Op: "ReduceMax", Inputs: []string{"x"}, Output: "top", Ints: map[string]int64{"keepdims": 0}},
				{Op: "Cast", Inputs: []string{"top"}, Output: "whole", Ints: map[string]int64{"to": int64(i64)}},
				{Op: "Sub", Inputs: []string{"whole", "three"}, Output: "at"},
				{Op: "Gather", Inputs: []string{"table", "at"}, Output: "picked"},
				{Op: "Cast", Inputs: []string{"picked"}, Output: "shift", Ints: map[string]int64{"to": int64(f32)}},
				{Op: "Add", Inputs: []string{"x", "shift"}, Output: "y"},
			},
			Int64s: map[string][]int64{"three": {3}, "table": {7}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openCustom(t, tc.c, nil)
			if d := r.Describe(); strings.Contains(d, "one item per run") {
				t.Errorf("description %q; want items stacked", d)
			}
		})
	}
}
