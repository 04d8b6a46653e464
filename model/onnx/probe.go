//go:build cgo

package onnx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// maxProbeBytes bounds an input of the probe's items: the default bound
// of a batch's bytes, which no item past it could be sent in.
const maxProbeBytes = 64 << 20

// probe runs a stacked model at load on small items, to find what its
// file does not say truly:
//   - an output whose leading axis is not the batch axis: a run of two
//     items of ones, then of three, must give each batched output as many
//     rows as items, or that output is unbatched (see unbatch). Ones, not
//     zeros, which an integer division by them would end the worker on;
//     and not one item alone, whose batch axis of length 1 an op such as
//     Squeeze takes away.
//   - a model that mixes the items of a run (a reduction or a
//     normalisation over the batch axis, BatchNormalization exported in
//     training mode): an item of ones beside another item of ones, then
//     beside an item of twos, must get the same outputs, or items run one
//     by one (see crossTalk). Only floating-point inputs are made twos: an
//     integer input may be an index, which 2 could take out of its table.
//   - a float16 output whose declared shape is not the one the model
//     makes: the runner allocates those in their declared shape (see
//     float16Outputs), and every run would fail; the model is refused
//     (see float16Mismatch). Where the axes that differ are declared
//     fixed, and an input has a dynamic axis besides the batch axis, the
//     probe's items (of length 1) may be what the declared shape does not
//     fit (an export traced at one length, that left the output's axis
//     fixed): then it warns, and each run that fails says so; unless
//     ONNX Runtime inferred the shape before the run, which no length
//     then changes.
//
// A model that refuses the probe otherwise proves nothing here: its runs
// check each output's leading length as they cut it (see split).
func (r *Runner) probe() error {
	if r.sig.Mode != onnxio.Stacked {
		return nil
	}
	ones, twos := r.probeItems()
	if ones == nil {
		return nil
	}
	defer r.runs.Store(0) // the probe's runs serve no item
	var beside [][]byte   // the first item's outputs in the run of two
	for n := 2; n <= 3 && r.sig.Mode == onnxio.Stacked; n++ {
		run := slices.Repeat([][]onnxio.Tensor{ones}, n)
		err := r.execute(run, func(outs []onnxio.Tensor) error {
			for k, t := range outs {
				if r.sig.Outputs[k].Batched && (len(t.Shape) == 0 || t.Shape[0] != int64(n)) {
					r.unbatch(k, fmt.Sprintf("a run of %d items of ones gave it the shape %s", n, shapeText(t.Shape)))
				}
			}
			if n == 2 {
				beside = firstRows(outs)
			}
			return nil
		})
		if f16 := (*float16ShapeError)(nil); errors.As(err, &f16) {
			if !f16.otherLengthsMayFit {
				return err // every run would fail: the model is refused
			}
			slog.Warn("onnx: requests whose lengths give a float16 output another shape than it declares will fail", "probe", err.Error())
		}
		if err != nil {
			break
		}
	}
	if twos != nil && beside != nil && r.sig.Mode == onnxio.Stacked {
		r.crossTalk(ones, twos, beside)
	}
	return nil
}

// lengthsVary reports whether some input has a dynamic axis besides the
// batch axis: items of other lengths than the probe's then run otherwise.
func (r *Runner) lengthsVary() bool {
	for _, p := range r.sig.Inputs {
		for _, d := range p.ItemShape {
			if d.Dynamic() {
				return true
			}
		}
	}
	return false
}

// probeItems makes the probe's items: one of ones, and one like it whose
// floating-point batched inputs are twos (nil when it has none). Both are
// nil when an input has a type the probe cannot fill, or would be larger
// than a batch may carry.
func (r *Runner) probeItems() (ones, twos []onnxio.Tensor) {
	ones = make([]onnxio.Tensor, len(r.sig.Inputs))
	twos = make([]onnxio.Tensor, len(r.sig.Inputs))
	differ := false
	for j, p := range r.sig.Inputs {
		one := onnxio.One(p.DType)
		if one == nil {
			return nil, nil
		}
		t := onnxio.Tensor{DType: p.DType, Shape: make([]int64, len(p.ItemShape))}
		n := int64(1)
		for a, d := range p.ItemShape {
			t.Shape[a] = max(d.Size, 1) // a dynamic axis of length 1
			if n > maxProbeBytes/int64(len(one))/t.Shape[a] {
				// An item larger than a batch may carry: the probe would
				// cost more than any run, or overflow; the runs judge.
				return nil, nil
			}
			n *= t.Shape[a]
		}
		t.Data = bytes.Repeat(one, int(n))
		ones[j], twos[j] = t, t
		if two := onnxio.Two(p.DType); p.Batched && two != nil {
			twos[j].Data = bytes.Repeat(two, int(n))
			differ = true
		}
	}
	if !differ {
		twos = nil
	}
	return ones, twos
}

// firstRows copies the first item's rows of each batched output of a
// run (nil for an output without a batch axis), which are the runtime's
// only while the run's outputs are used.
func firstRows(outs []onnxio.Tensor) [][]byte {
	rows := make([][]byte, len(outs))
	for k, t := range outs {
		if len(t.Shape) == 0 || t.Shape[0] == 0 {
			continue
		}
		rows[k] = slices.Clone(t.Data[:int64(len(t.Data))/t.Shape[0]])
	}
	return rows
}

// crossTalk runs an item of ones beside an item of twos, and compares the
// first item's outputs with those it got beside an item of ones (beside).
// Where one differs, the model mixes the items of a run, and a caller's
// answer would depend on the inputs of others (and tell of them): items
// run one by one from then on. Both runs have two items, so the runtime
// takes the same kernels for both, and their answers differ only by
// rounding where its kernels are not deterministic (sameOutput allows
// for that). A model whose answers differ from run to run anyway (a
// random op: noise sampled in a decoder) is not judged: the ones beside
// ones run again, and when they too differ, nothing is concluded. A model
// that refuses the twos proves nothing.
func (r *Runner) crossTalk(ones, twos []onnxio.Tensor, beside [][]byte) {
	changed := r.firstItemChanged([][]onnxio.Tensor{ones, twos}, beside)
	if changed < 0 {
		return
	}
	if again := r.firstItemChanged([][]onnxio.Tensor{ones, ones}, beside); again != -1 {
		slog.Info("onnx: the model answers the same items otherwise from run to run, so whether it mixes the items of a run was not judged", "output", r.sig.Outputs[changed].Name)
		return
	}
	r.sig.Mode = onnxio.OneByOne
	r.sig.Why = fmt.Sprintf("output %q of an item of ones changed when the item beside it in the run was made twos: the model mixes the items of a run (a reduction or a normalisation over the batch axis, such as BatchNormalization exported in training mode), so a caller's answer would depend on other callers' inputs", r.sig.Outputs[changed].Name)
	slog.Warn("onnx: this model's items run one by one", "why", r.sig.Why)
}

// firstItemChanged runs two items and returns the first batched output in
// which the first item's answer differs from beside, -1 where none does,
// or -2 where the run failed.
func (r *Runner) firstItemChanged(run [][]onnxio.Tensor, beside [][]byte) int {
	changed := -1
	err := r.execute(run, func(outs []onnxio.Tensor) error {
		for k, t := range outs {
			if !r.sig.Outputs[k].Batched || beside[k] == nil {
				continue
			}
			if len(t.Shape) == 0 || t.Shape[0] != 2 || !sameOutput(t.DType, beside[k], t.Data[:len(t.Data)/2]) {
				changed = k
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return -2
	}
	return changed
}

// sameOutput reports whether two encodings of one output are the same
// answer: byte for byte, or for floating-point ones within a few units in
// the last place of the largest element (as a kernel that sums in another
// order may differ), NaN matching NaN.
func sameOutput(d onnxio.DType, a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var at func([]byte, int) float64
	var tolerance float64
	switch d {
	case onnxio.Float16:
		at = func(x []byte, i int) float64 { return onnxio.Float16Frombits(binary.LittleEndian.Uint16(x[2*i:])) }
		tolerance = 4e-3
	case onnxio.Float32:
		at = func(x []byte, i int) float64 {
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:])))
		}
		tolerance = 1e-5
	case onnxio.Float64:
		at = func(x []byte, i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(x[8*i:])) }
		tolerance = 1e-12
	default:
		return bytes.Equal(a, b)
	}
	n := len(a) / d.Size()
	scale := 0.0
	for i := range n {
		for _, v := range []float64{at(a, i), at(b, i)} {
			if !math.IsInf(v, 0) && !math.IsNaN(v) {
				scale = max(scale, math.Abs(v))
			}
		}
	}
	for i := range n {
		x, y := at(a, i), at(b, i)
		switch {
		case x == y, math.IsNaN(x) && math.IsNaN(y):
		case math.IsInf(x, 0) || math.IsInf(y, 0) || math.IsNaN(x) || math.IsNaN(y):
			return false
		case math.Abs(x-y) > tolerance*max(scale, math.SmallestNonzeroFloat32):
			return false
		}
	}
	return true
}

// float16ShapeError is a run that failed for a float16 output whose
// declared shape is not the one the model makes. otherLengthsMayFit says
// that only axes the output declares fixed differ, while the inputs' item
// lengths vary: items of other lengths may make it in its declared shape.
type float16ShapeError struct {
	msg                string
	otherLengthsMayFit bool
}

func (e *float16ShapeError) Error() string { return e.msg }

// ONNX Runtime refuses an output allocated in another shape than the
// model makes in one of two ways: where its own shape inference knew the
// output's shape, before the run, naming the output and the axes that
// differ ("Got invalid dimensions for output: y for the following
// indices\n index: 1 Got: 2 Expected: 1"); else as the node that makes it
// runs, naming the node ("running Concat node. Name:'Concat_0' ...
// OrtValue shape verification failed. Current shape:{2,1} Requested
// shape:{2,2}").
var (
	ortOutputCheck = regexp.MustCompile(`Got invalid dimensions for output: (\S+) for the following indices`)
	ortAxisCheck   = regexp.MustCompile(`index: (\d+) Got: (\d+) Expected: (\d+)`)
	ortShapeCheck  = regexp.MustCompile(`OrtValue shape verification failed\. Current shape:\{([0-9,]*)\} Requested shape:\{([0-9,]*)\}`)
	ortNode        = regexp.MustCompile(`Name:'([^']*)'`)
)

// float16Mismatch explains a run that failed (err) as ONNX Runtime fails
// one whose float16 output the runner allocated (see float16Outputs, in a
// run of items whose stacked inputs have the given shapes) in another
// shape than the model makes, naming the output, or the outputs it may be
// where ONNX Runtime names only its node and several were allocated in
// that shape. It returns nil for any other failure. onnxruntime_go cannot
// return a float16 output that ONNX Runtime makes (it copies one byte of
// each element, and fails), so the shape the model makes is known only
// from ONNX Runtime's words.
func (r *Runner) float16Mismatch(err error, inputs [][]int64, items int) error {
	if len(r.float16Outs) == 0 {
		return nil
	}
	text := err.Error()
	var outs []int // the outputs it may be
	var allocated, made []int64
	inferred := false // ONNX Runtime knew the shape before the run, whatever the lengths
	if m := ortOutputCheck.FindStringSubmatch(text); m != nil {
		inferred = true
		k := slices.IndexFunc(r.sig.Outputs, func(p onnxio.Port) bool { return p.Name == m[1] })
		plan, ok := r.float16Outs[k]
		if !ok {
			return nil
		}
		outs = []int{k}
		allocated = outputShape(plan, inputs, items)
		made = slices.Clone(allocated)
		for _, axis := range ortAxisCheck.FindAllStringSubmatch(text, -1) {
			a, _ := strconv.Atoi(axis[1])
			if n, err := strconv.ParseInt(axis[3], 10, 64); err == nil && a < len(made) {
				made[a] = n
			}
		}
	} else if m := ortShapeCheck.FindStringSubmatch(text); m != nil {
		allocated, made = parseShape(m[1]), parseShape(m[2])
		for k := range r.sig.Outputs {
			if plan, ok := r.float16Outs[k]; ok && slices.Equal(outputShape(plan, inputs, items), allocated) {
				outs = append(outs, k)
			}
		}
	}
	if len(outs) == 0 {
		return nil
	}
	what := fmt.Sprintf("output %q declares %s", r.sig.Outputs[outs[0]].Name, declaredShape(r.sig.Outputs[outs[0]]))
	if len(outs) > 1 {
		names := make([]string, len(outs))
		for i, k := range outs {
			names[i] = strconv.Quote(r.sig.Outputs[k].Name)
		}
		what = "one of the outputs " + strings.Join(names, ", ") + " declares its shape"
	}
	node := ""
	if m := ortNode.FindStringSubmatch(text); m != nil {
		node = fmt.Sprintf(" (at node %q)", m[1])
	}
	fixedOnly := len(made) == len(allocated)
	for _, k := range outs {
		plan := r.float16Outs[k]
		for a := range min(len(plan), len(made), len(allocated)) {
			if allocated[a] != made[a] && plan[a].size == 0 {
				fixedOnly = false
			}
		}
	}
	return &float16ShapeError{
		msg: fmt.Sprintf("onnx: %s, which is %s in a run of %s, but the model makes it %s%s: re-export it declaring the shape it has (%s)",
			what, shapeText(allocated), itemCount(items), shapeText(made), node, float16Why),
		otherLengthsMayFit: fixedOnly && !inferred && r.lengthsVary(),
	}
}

// parseShape reads ONNX Runtime's "2,1" as [2, 1].
func parseShape(s string) []int64 {
	var shape []int64
	for _, d := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return nil
		}
		shape = append(shape, n)
	}
	return shape
}
