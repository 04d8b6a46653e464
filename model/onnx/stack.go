//go:build cgo

package onnx

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// stack builds input j of a run from the items: stacked along a new leading
// batch axis for a batched input, padded along its padded axes to the
// longest item; taken from the first item for an input without a batch axis
// (the items' batch key guarantees they agree).
func (r *Runner) stack(j int, items [][]onnxio.Tensor) onnxio.Tensor {
	first := items[0][j]
	if !r.sig.Inputs[j].Batched {
		return first
	}
	shape := append([]int64{int64(len(items))}, first.Shape...)
	axes, value, padded := r.codec.Padded(j)
	if padded {
		for _, it := range items[1:] {
			for k, n := range it[j].Shape {
				if axes[k] && n > shape[k+1] {
					shape[k+1] = n
				}
			}
		}
	}
	size := int64(first.DType.Size())
	perItem := size
	for _, n := range shape[1:] {
		perItem *= n
	}
	data := make([]byte, perItem*int64(len(items)))
	if padded {
		fill(data, value)
	}
	for i, it := range items {
		dst := data[int64(i)*perItem : int64(i+1)*perItem]
		if padded {
			copyBlock(dst, shape[1:], it[j].Data, it[j].Shape, size)
		} else {
			copy(dst, it[j].Data)
		}
	}
	return onnxio.Tensor{DType: first.DType, Shape: shape, Data: data}
}

// Padding must not let an item make a run far larger than the items' own
// data: items [1 × 200000] and [200000 × 1] padded together are 200000 ×
// 200000. A run of padded items holds at most padGrowth times their own
// bytes, or padAllowance bytes, whichever is more; items beyond that run
// apart, so that no item causes an allocation beyond a bound of its own
// size.
const (
	padGrowth    = 4
	padAllowance = 1 << 20
)

// padRun is a run being formed by padRuns: its items, their own bytes and
// the longest shape of each input so far.
type padRun struct {
	idx     []int
	own     float64
	longest [][]int64
}

// padRuns splits items that share a batch key (idx, into decoded) into runs
// whose padded inputs stay within the bound above. Items keep their order
// within a run; an item joins the first run it fits.
func (r *Runner) padRuns(idx []int, decoded [][]onnxio.Tensor) [][]int {
	if !r.padding || len(idx) < 2 {
		return [][]int{idx}
	}
	var runs []*padRun
	for _, i := range idx {
		joined := false
		for _, run := range runs {
			if joined = r.tryJoin(run, i, decoded[i]); joined {
				break
			}
		}
		if !joined {
			run := &padRun{longest: make([][]int64, len(r.sig.Inputs))}
			r.tryJoin(run, i, decoded[i])
			runs = append(runs, run)
		}
	}
	out := make([][]int, len(runs))
	for k, run := range runs {
		out[k] = run.idx
	}
	return out
}

// tryJoin adds item i to run when the run stays within the bound, and
// reports whether it did. An empty run always takes the item: alone, it is
// not padded.
func (r *Runner) tryJoin(run *padRun, i int, item []onnxio.Tensor) bool {
	longest := make([][]int64, len(item))
	own, padded := run.own, 0.0
	n := float64(len(run.idx) + 1)
	for j, t := range item {
		own += float64(len(t.Data))
		longest[j] = append([]int64(nil), t.Shape...)
		for k := range longest[j] {
			if run.longest[j] != nil && run.longest[j][k] > longest[j][k] {
				longest[j][k] = run.longest[j][k]
			}
		}
		size := float64(t.DType.Size())
		for _, d := range longest[j] {
			size *= float64(d)
		}
		if r.sig.Inputs[j].Batched {
			size *= n
		}
		padded += size
	}
	if len(run.idx) > 0 && padded > max(padGrowth*own, padAllowance) {
		return false
	}
	run.idx, run.own, run.longest = append(run.idx, i), own, longest
	return true
}

// fill repeats one element's bytes over data.
func fill(data, value []byte) {
	if len(value) == 0 {
		return
	}
	n := copy(data, value)
	for n < len(data) {
		n += copy(data[n:], data[:n])
	}
}

// copyBlock copies the row-major tensor src (shape srcShape) into the corner
// of dst (shape dstShape), axis by axis as far as both reach: into a larger
// dst it pads (the rest of dst keeps its bytes), into a smaller one it
// crops. Elements are size bytes.
func copyBlock(dst []byte, dstShape []int64, src []byte, srcShape []int64, size int64) {
	if len(srcShape) == 0 {
		copy(dst[:size], src[:size])
		return
	}
	inner := func(shape []int64) int64 {
		n := size
		for _, d := range shape[1:] {
			n *= d
		}
		return n
	}
	dstStride, srcStride := inner(dstShape), inner(srcShape)
	rows := min(srcShape[0], dstShape[0])
	if len(srcShape) == 1 {
		copy(dst[:rows*size], src[:rows*size])
		return
	}
	for i := range rows {
		copyBlock(dst[i*dstStride:], dstShape[1:], src[i*srcStride:], srcShape[1:], size)
	}
}

// split cuts output k of a run into the items' outputs. A batched output is
// cut along its leading axis; axes that share their name with a padded input
// axis are cropped back to the item's own length. An output without a batch
// axis (only in one-by-one runs) goes whole to the item.
func (r *Runner) split(k int, out onnxio.Tensor, items [][]onnxio.Tensor, perItem [][]onnxio.Tensor) error {
	p := r.sig.Outputs[k]
	if !p.Batched {
		if len(items) != 1 {
			return fmt.Errorf("has no batch axis, but %d items shared the run", len(items))
		}
		perItem[0][k] = out
		return nil
	}
	if len(out.Shape) == 0 || out.Shape[0] != int64(len(items)) {
		r.unbatch(k, fmt.Sprintf("a run of %s gave it the shape %s", itemCount(len(items)), shapeText(out.Shape)))
		slog.Warn("onnx: this model's items run one by one from now on", "why", r.sig.Why)
		return errUnbatched
	}
	itemShape := out.Shape[1:]
	stride := int64(len(out.Data)) / int64(len(items))
	for i := range items {
		data := out.Data[int64(i)*stride : int64(i+1)*stride]
		shape := r.croppedShape(p, itemShape, items[i])
		if !equalShapes(shape, itemShape) {
			data = crop(data, itemShape, shape, int64(out.DType.Size()))
		}
		perItem[i][k] = onnxio.Tensor{DType: out.DType, Shape: shape, Data: data}
	}
	return nil
}

// croppedShape is the item's own length of each output axis that shares its
// name with a padded input axis.
func (r *Runner) croppedShape(p onnxio.Port, itemShape []int64, item []onnxio.Tensor) []int64 {
	if !r.padding || len(p.ItemShape) != len(itemShape) {
		return itemShape
	}
	var shape []int64
	for a, d := range p.ItemShape {
		if d.Param == "" {
			continue
		}
		for j, in := range r.sig.Inputs {
			axes, _, padded := r.codec.Padded(j)
			for b, id := range in.ItemShape {
				if padded && axes[b] && id.Param == d.Param && item[j].Shape[b] < itemShape[a] {
					if shape == nil {
						shape = append([]int64(nil), itemShape...)
					}
					shape[a] = item[j].Shape[b]
				}
			}
		}
	}
	if shape == nil {
		return itemShape
	}
	return shape
}

func crop(data []byte, from, to []int64, size int64) []byte {
	n := size
	for _, d := range to {
		n *= d
	}
	out := make([]byte, n)
	copyBlock(out, to, data, from, size)
	return out
}

func equalShapes(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// errUnbatched fails a run that found an output's leading axis not to be the
// batch axis: its items run again, one by one.
var errUnbatched = errors.New("the output does not lead with the batch axis; items run one by one")

// unbatch takes output k for one without a batch axis, as a run found it
// (how): from then on each item gets it whole, so items run one by one.
// Were they stacked, a caller could get what the model made of the whole
// run (a sum over it, another item's detections) whenever the output's
// length happened to be the number of items. An output whose declared
// leading axis is named as the batch axis may lie too: an exporter told
// that an axis is the batch axis writes so.
func (r *Runner) unbatch(k int, how string) {
	p := r.sig.Outputs[k]
	advice := "re-export it declaring the shape it has"
	if slices.Contains(r.unproven, k) {
		advice = "name its batch axis like the inputs' when exporting, if it has one"
	}
	r.sig.Unbatch(k, fmt.Sprintf("output %q declares %s, and %s, so its leading axis is not the batch axis; %s", p.Name, declaredShape(p), how, advice))
	r.unproven = slices.DeleteFunc(r.unproven, func(j int) bool { return j == k })
}

// itemCount writes "1 item", "2 items".
func itemCount(n int) string {
	if n == 1 {
		return "1 item"
	}
	return fmt.Sprintf("%d items", n)
}

// declaredShape writes an output's declared shape, or "no shape".
func declaredShape(p onnxio.Port) string {
	if p.Shape == nil {
		return "no shape"
	}
	return p.Shape.String()
}

// shapeText writes a shape as a declared one is written: "[2, 3]".
func shapeText(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
