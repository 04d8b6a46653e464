package onnx

import (
	"fmt"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// onnxruntime_go has no Go type for float16, so float16 tensors travel as
// CustomDataTensors of bytes. Two limits follow, and a model that meets one
// is refused by Check and Open, naming the value:
//
//   - a CustomDataTensor has at least one axis, and ONNX Runtime refuses a
//     rank-1 tensor for a rank-0 value: float16 scalars cannot be passed at all;
//   - onnxruntime_go copies one byte per element of a float16 tensor that
//     ONNX Runtime allocates, so the runner allocates float16 outputs
//     itself, and must know their shapes before the run: each axis is fixed,
//     the batch axis, or named like an input axis, whose length it takes.

// outputAxis says where one axis length of a float16 output comes from.
type outputAxis struct {
	size  int64 // a fixed length; 0 when the length comes from below
	batch bool  // the number of items in the run
	input int   // else the length of this input's stacked tensor
	axis  int   // along this axis
}

// float16Outputs plans the shapes of the model's float16 outputs, by output
// index, and refuses float16 values the runner cannot pass.
func float16Outputs(sig *onnxio.Signature) (map[int][]outputAxis, error) {
	for _, p := range sig.Inputs {
		if p.DType == onnxio.Float16 && len(p.Shape) == 0 {
			return nil, fmt.Errorf("input %q: %s", p.Name, errFloat16Scalar)
		}
	}
	plans := map[int][]outputAxis{}
	for k, p := range sig.Outputs {
		if p.DType != onnxio.Float16 {
			continue
		}
		switch {
		case p.Shape == nil:
			return nil, fmt.Errorf("output %q: a float16 output needs a declared shape: %s", p.Name, float16Why)
		case len(p.Shape) == 0:
			return nil, fmt.Errorf("output %q: %s", p.Name, errFloat16Scalar)
		}
		plan := make([]outputAxis, len(p.Shape))
		for a, d := range p.Shape {
			var ok bool
			if plan[a], ok = planAxis(sig, p, a, d); !ok {
				return nil, fmt.Errorf("output %q: axis %d (%s) of a float16 output must be fixed, the batch axis, or named like an input axis: %s", p.Name, a, d, float16Why)
			}
		}
		plans[k] = plan
	}
	return plans, nil
}

const (
	errFloat16Scalar = "a float16 scalar (rank 0) cannot be passed to or from ONNX Runtime through onnxruntime_go; export the value with shape [1]"
	float16Why       = "onnxruntime_go cannot return float16 tensors that ONNX Runtime allocates, so streamer allocates them before the run"
)

func planAxis(sig *onnxio.Signature, p onnxio.Port, a int, d onnxio.Dim) (outputAxis, bool) {
	switch {
	case !d.Dynamic():
		return outputAxis{size: d.Size}, true
	case a == 0 && p.Batched:
		return outputAxis{batch: true}, true
	case d.Param == "":
		return outputAxis{}, false
	}
	for j, in := range sig.Inputs {
		for b, id := range in.Shape {
			if id.Param == d.Param {
				return outputAxis{input: j, axis: b}, true
			}
		}
	}
	return outputAxis{}, false
}

// outputShape is the shape a planned output has in a run of items whose
// stacked inputs have the given shapes. An input's declared axes and its
// stacked tensor's line up: a batched input's stack leads with the batch
// axis its declaration has, an unbatched input is taken whole.
func outputShape(plan []outputAxis, inputs [][]int64, items int) []int64 {
	shape := make([]int64, len(plan))
	for a, src := range plan {
		switch {
		case src.size > 0:
			shape[a] = src.size
		case src.batch:
			shape[a] = int64(items)
		default:
			shape[a] = inputs[src.input][src.axis]
		}
	}
	return shape
}
