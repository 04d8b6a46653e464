package onnx_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// dtypesItem is one item of the dtypes model: for each input (in the
// model's order), the values it sends.
type dtypesItem [][]onnxtest.DtypeValue

// pick makes an item that sends, of each input's values, those at the
// given positions (modulo their number).
func pick(positions ...int) dtypesItem {
	var item dtypesItem
	for _, c := range onnxtest.DtypeCases() {
		var vs []onnxtest.DtypeValue
		for _, p := range positions {
			vs = append(vs, c.Values[p%len(c.Values)])
		}
		item = append(item, vs)
	}
	return item
}

// every makes an item that sends all of each input's values.
func every() dtypesItem {
	var item dtypesItem
	for _, c := range onnxtest.DtypeCases() {
		item = append(item, c.Values)
	}
	return item
}

func (it dtypesItem) json() string {
	var fields []string
	for j, c := range onnxtest.DtypeCases() {
		texts := make([]string, len(it[j]))
		for k, v := range it[j] {
			texts[k] = v.JSON
		}
		fields = append(fields, fmt.Sprintf("%q: [%s]", c.Input, strings.Join(texts, ", ")))
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// answer is the item's JSON answer, as the codec writes it.
func (it dtypesItem) answer() string {
	var fields []string
	for j, c := range onnxtest.DtypeCases() {
		texts := make([]string, len(it[j]))
		for k, v := range it[j] {
			texts[k] = v.Answer
		}
		fields = append(fields, fmt.Sprintf("%q:[%s]", c.Output, strings.Join(texts, ",")))
	}
	return "{" + strings.Join(fields, ",") + "}"
}

// inputs are the item's input elements, by input name.
func (it dtypesItem) inputs() map[string][]byte {
	m := map[string][]byte{}
	for j, c := range onnxtest.DtypeCases() {
		m[c.Input] = c.Bytes(it[j])
	}
	return m
}

// checkDtypes compares one item's outputs with the reference, element for
// element, dtype and shape.
func checkDtypes(t *testing.T, ref *onnxtest.Reference, what string, inputs map[string][]byte, out []onnxio.Tensor) {
	t.Helper()
	want := ref.Dtypes(inputs)
	for k, c := range onnxtest.DtypeCases() {
		got := out[k]
		n := int64(len(want[c.Output]) / c.Size)
		if got.DType.String() != c.DType || !equalShape(got.Shape, n) || !bytes.Equal(got.Data, want[c.Output]) {
			t.Errorf("%s %s: %s %v %x, want %s [%d] %x", what, c.Output, got.DType, got.Shape, got.Data, c.DType, n, want[c.Output])
		}
	}
}

// TestEveryDtypeThroughONNXRuntime runs the extremes of every served dtype
// through ONNX Runtime, float16 included, in batches that mix items of
// different lengths: items with the same lengths share a run, the others
// are kept apart, and every element comes back as it went.
func TestEveryDtypeThroughONNXRuntime(t *testing.T) {
	r := open(t, modelSpec(t, onnxtest.Dtypes))
	ref := reference(t, onnxtest.Dtypes)
	items := []dtypesItem{every(), pick(0), every(), pick(1), pick(0, 1), pick(2), pick(1, 0)}
	const keys = 3 // all values; one; two
	jsonItems := make([]string, len(items))
	for i, it := range items {
		jsonItems[i] = it.json()
	}
	encoded := encode(t, r, jsonItems...)
	for i, out := range predict(t, r, encoded) {
		checkDtypes(t, ref, fmt.Sprintf("item %d", i), items[i].inputs(), out)
	}
	if r.Runs() != keys {
		t.Errorf("%d runs, want %d: one per distinct set of lengths", r.Runs(), keys)
	}
	outs, err := r.Predict(context.Background(), encoded[:2])
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range outs {
		text, err := r.Codec().AppendJSON(nil, out)
		if want := items[i].answer(); err != nil || string(text) != want {
			t.Errorf("item %d as JSON:\n got %s (%v)\nwant %s", i, text, err, want)
		}
	}
}

// TestNonFiniteFloatsThroughONNXRuntime sends infinities and NaNs, with
// their payloads, which only msgpack (or a Go program) can carry: they come
// back bit for bit.
func TestNonFiniteFloatsThroughONNXRuntime(t *testing.T) {
	r := open(t, modelSpec(t, onnxtest.Dtypes))
	ref := reference(t, onnxtest.Dtypes)
	nonFinite := map[string][]uint64{
		"float16": {0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01},
		"float32": {0x7f800000, 0xff800000, 0x7fc00000, 0xffc00123, 0x7f800001},
		"float64": {math.Float64bits(math.Inf(1)), math.Float64bits(math.Inf(-1)), math.Float64bits(math.NaN()), 0xfff8000000000abc, 0x7ff0000000000001},
	}
	inputs := map[string][]byte{}
	var tensors []onnxio.Tensor
	for _, c := range onnxtest.DtypeCases() {
		values := c.Values[:1]
		if bits, ok := nonFinite[c.DType]; ok {
			values = nil
			for _, b := range bits {
				values = append(values, onnxtest.DtypeValue{Bits: b})
			}
		}
		dtype, err := onnxio.ParseDType(c.DType)
		if err != nil {
			t.Fatal(err)
		}
		inputs[c.Input] = c.Bytes(values)
		tensors = append(tensors, onnxio.Tensor{DType: dtype, Shape: []int64{int64(len(values))}, Data: inputs[c.Input]})
	}
	outs := predict(t, r, [][]byte{onnxio.EncodeItem(tensors)})
	checkDtypes(t, ref, "non-finite item", inputs, outs[0])
}

// TestPaddedDtypes pads every input, float16 included, so that items of
// different lengths share one run; each answer is cropped back to the
// item's own lengths.
func TestPaddedDtypes(t *testing.T) {
	spec := modelSpec(t, onnxtest.Dtypes)
	spec.Pad = map[string]float64{}
	for _, c := range onnxtest.DtypeCases() {
		spec.Pad[c.Input] = 1
	}
	r := open(t, spec)
	ref := reference(t, onnxtest.Dtypes)
	items := []dtypesItem{pick(0), every(), pick(1, 2), pick(3, 0, 1)}
	jsonItems := make([]string, len(items))
	for i, it := range items {
		jsonItems[i] = it.json()
	}
	for i, out := range predict(t, r, encode(t, r, jsonItems...)) {
		checkDtypes(t, ref, fmt.Sprintf("item %d", i), items[i].inputs(), out)
	}
	if r.Runs() != 1 {
		t.Errorf("%d runs, want 1: padded, every item shares the run", r.Runs())
	}
}

// float16Model writes a one-node model: x → Identity → y, with the given
// interface.
func float16Model(t *testing.T, x, y *onnxpb.ValueInfoProto) string {
	t.Helper()
	m := &onnxpb.ModelProto{
		IrVersion:   8,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: 17}},
		Graph: &onnxpb.GraphProto{
			Name:   "float16",
			Node:   []*onnxpb.NodeProto{{OpType: "Identity", Input: []string{x.GetName()}, Output: []string{y.GetName()}}},
			Input:  []*onnxpb.ValueInfoProto{x},
			Output: []*onnxpb.ValueInfoProto{y},
		},
	}
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "float16.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// half declares a float16 value; dims are sizes, names, or "" for an
// unnamed dynamic axis; shapeless leaves the shape undeclared.
func half(name string, shapeless bool, dims ...any) *onnxpb.ValueInfoProto {
	tensor := &onnxpb.TypeProto_Tensor{ElemType: int32(onnxpb.TensorProto_FLOAT16)}
	if !shapeless {
		tensor.Shape = &onnxpb.TensorShapeProto{}
		for _, d := range dims {
			dim := &onnxpb.TensorShapeProto_Dimension{}
			switch d := d.(type) {
			case int:
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}
			case string:
				if d != "" {
					dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}
				}
			}
			tensor.Shape.Dim = append(tensor.Shape.Dim, dim)
		}
	}
	return &onnxpb.ValueInfoProto{Name: name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tensor}}}
}

// TestFloat16ModelsTheRunnerCannotServe: onnxruntime_go passes float16
// tensors only as bytes the runner allocates, so a float16 scalar, or a
// float16 output whose shape is not known before the run, is refused before
// any worker starts, and by Open, naming the value.
func TestFloat16ModelsTheRunnerCannotServe(t *testing.T) {
	tests := []struct {
		name string
		x, y *onnxpb.ValueInfoProto
		want string
	}{
		{"scalar input", half("x", false), half("y", false), `input "x": a float16 scalar (rank 0) cannot be passed`},
		{"scalar output", half("x", false, "batch", 1), half("y", false), `output "y": a float16 scalar (rank 0) cannot be passed`},
		{"output without shape", half("x", false, "batch", 2), half("y", true), `output "y": a float16 output needs a declared shape`},
		{"unnamed output axis", half("x", false, "batch", "n"), half("y", false, "batch", ""), `output "y": axis 1 (?) of a float16 output must be fixed, the batch axis, or named like an input axis`},
		{"output axis named like no input's", half("x", false, "batch", "n"), half("y", false, "batch", "m"), `output "y": axis 1 (m) of a float16 output`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := onnx.Settings{Path: float16Model(t, tt.x, tt.y), IntraOpThreads: 1}
			err := onnx.Check(spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "onnxruntime_go") {
				t.Fatalf("Check: %v; want an error containing %q that says why", err, tt.want)
			}
			if r, err := onnx.Open(context.Background(), spec); err == nil || !strings.Contains(err.Error(), tt.want) {
				if r != nil {
					_ = r.Close()
				}
				t.Fatalf("Open: %v; want an error containing %q", err, tt.want)
			}
		})
	}

	// Fixed axes, the batch axis even when unnamed, and axes named like an
	// input's serve: the runner knows their lengths.
	path := float16Model(t, half("x", false, "", "n", 2), half("y", false, "", "n", 2))
	r := open(t, onnx.Settings{Path: path, IntraOpThreads: 1})
	items := encode(t, r, `[[1, 2], [3, 4], [5, 6]]`, `[[-0.5, 65504]]`, `[[7, 8], [9, 10], [11, 12]]`)
	want := []string{`[[1,2],[3,4],[5,6]]`, `[[-0.5,65504]]`, `[[7,8],[9,10],[11,12]]`}
	outs, err := r.Predict(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range outs {
		if text, err := r.Codec().AppendJSON(nil, out); err != nil || string(text) != want[i] {
			t.Errorf("item %d: %s (%v), want %s", i, text, err, want[i])
		}
	}
	if r.Runs() != 2 {
		t.Errorf("%d runs, want 2", r.Runs())
	}
}
