package onnxtest

import "github.com/streamer-dev/streamer/model/onnx/onnxpb"

// Models whose output leads with an axis named as exporters name the axes
// nobody named, which is not the batch axis: items stacked into one run
// would get what the model made of the whole run.
var (
	// SumOverBatch sums x [unk__0, 3] over the batch into y [unk__9].
	SumOverBatch = Custom{
		Inputs:  []Value{{Name: "x", DType: onnxpb.TensorProto_FLOAT, Dims: []any{"unk__0", 3}}},
		Outputs: []Value{{Name: "y", DType: onnxpb.TensorProto_FLOAT, Dims: []any{"unk__9"}}},
		Nodes:   []Node{{Op: "ReduceSum", Inputs: []string{"x", "axis0"}, Output: "y", Ints: map[string]int64{"keepdims": 0}}},
		Int64s:  map[string][]int64{"axis0": {0}},
	}
	// RowsUnderTwo answers, as y [unk__5, 1], the places of the rows of x
	// [unk__0, 2] whose largest element is under 2: its leading axis
	// counts what the data holds, and a run of ones cannot tell it from a
	// batch axis.
	RowsUnderTwo = Custom{
		Inputs:  []Value{{Name: "x", DType: onnxpb.TensorProto_INT64, Dims: []any{"unk__0", 2}}},
		Outputs: []Value{{Name: "y", DType: onnxpb.TensorProto_INT64, Dims: []any{"unk__5", 1}}},
		Nodes: []Node{
			{Op: "ReduceMax", Inputs: []string{"x"}, Output: "top", Ints: map[string]int64{"keepdims": 0}, IntLists: map[string][]int64{"axes": {1}}},
			{Op: "Less", Inputs: []string{"top", "two"}, Output: "small"},
			{Op: "NonZero", Inputs: []string{"small"}, Output: "at"},
			{Op: "Transpose", Inputs: []string{"at"}, Output: "y"},
		},
		Int64s: map[string][]int64{"two": {2}},
	}
)
