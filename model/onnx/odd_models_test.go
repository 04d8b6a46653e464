package onnx_test

import (
	"testing"

	"github.com/streamer-dev/streamer/model/onnx"
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
