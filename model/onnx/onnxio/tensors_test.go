package onnxio_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

func tensorModel(t testing.TB, c *onnxio.Codec) *onnxio.TensorModel {
	t.Helper()
	m, err := onnxio.NewTensorModel(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// specs writes specs as "name DATATYPE [shape] batched".
func specs(ss []onnxio.TensorSpec) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		b := "unbatched"
		if s.Batched {
			b = "batched"
		}
		parts[i] = fmt.Sprintf("%s %s %v %s", s.Name, s.Datatype, s.Shape, b)
	}
	return strings.Join(parts, "; ")
}

func TestTensorModelDescribesTheModel(t *testing.T) {
	f32 := onnxpb.TensorProto_FLOAT
	noBatchAxis, err := onnxio.Parse(handModel(
		[]*onnxpb.ValueInfoProto{tensorValue("x", f32, 3), tensorValue("gain", onnxpb.TensorProto_DOUBLE)},
		[]*onnxpb.ValueInfoProto{tensorValue("y", f32, 3)}))
	if err != nil {
		t.Fatal(err)
	}
	undeclared, err := onnxio.Parse(handModel(
		[]*onnxpb.ValueInfoProto{tensorValue("x", f32, "batch", "n")},
		[]*onnxpb.ValueInfoProto{{Name: "y", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(f32)}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		sig             *onnxio.Signature
		inputs, outputs string
	}{
		{"mlp", signature(t, onnxtest.MLP), "features FP32 [-1 4] batched", "probs FP32 [-1 3] batched"},
		{"seq: a dynamic axis is -1", signature(t, onnxtest.Seq), "x FP32 [-1 -1 3] batched", "y FP32 [-1 -1 4] batched"},
		{"multi: an input without batch axis", signature(t, onnxtest.Multi),
			"ids INT64 [-1 -1] batched; mask BOOL [-1 -1] batched; scale FP64 [] unbatched; offset INT32 [-1] batched",
			"pooled FP32 [-1 4] batched; count INT64 [-1] batched; scaled FP64 [-1] batched; above BOOL [-1] batched; next INT32 [-1] batched"},
		{"fixed: a batch axis of 1 is the request's, and a scalar output is per item", signature(t, onnxtest.Fixed),
			"x FP32 [-1 4] batched", "y FP32 [-1 2] batched; energy FP32 [-1] batched"},
		{"no batch axis: a request is one item", noBatchAxis, "x FP32 [3] unbatched; gain FP64 [] unbatched", "y FP32 [3] unbatched"},
		{"an output of undeclared shape has the batch axis alone", undeclared, "x FP32 [-1 -1] batched", "y FP32 [-1] batched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := onnxio.NewCodec(tt.sig, nil)
			if err != nil {
				t.Fatal(err)
			}
			inputs, outputs := tensorModel(t, c).Specs()
			if got := specs(inputs); got != tt.inputs {
				t.Errorf("inputs:\n got %s\nwant %s", got, tt.inputs)
			}
			if got := specs(outputs); got != tt.outputs {
				t.Errorf("outputs:\n got %s\nwant %s", got, tt.outputs)
			}
		})
	}
}

func TestDatatypeNamesEveryServedDType(t *testing.T) {
	want := map[onnxio.DType]string{
		onnxio.Bool: "BOOL", onnxio.Uint8: "UINT8", onnxio.Uint16: "UINT16", onnxio.Uint32: "UINT32", onnxio.Uint64: "UINT64",
		onnxio.Int8: "INT8", onnxio.Int16: "INT16", onnxio.Int32: "INT32", onnxio.Int64: "INT64",
		onnxio.Float32: "FP32", onnxio.Float64: "FP64",
	}
	for d, name := range want {
		if got := onnxio.Datatype(d); got != name {
			t.Errorf("Datatype(%s) = %q, want %q", d, got, name)
		}
	}
	// Whatever dtypes are served, each has a v2 name of its size.
	for v := range 256 {
		d := onnxio.DType(v)
		if !d.Valid() {
			continue
		}
		name := onnxio.Datatype(d)
		if name == "" {
			t.Errorf("served dtype %s has no v2 datatype", d)
		}
		if bits := strings.TrimLeft(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"); bits != "" && bits != fmt.Sprint(8*d.Size()) {
			t.Errorf("Datatype(%s) = %s, but the dtype is %d bytes", d, name, d.Size())
		}
	}
}

// tensorMaps is the msgpack /predict item that carries the same tensors as
// a v2 request row: a map by input name, in the row's order, of {"dtype",
// "shape", "data"}.
func tensorMaps(t *testing.T, sig *onnxio.Signature, inputs []onnxio.NamedTensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check(enc.EncodeMapLen(len(inputs)))
	for i, in := range inputs {
		shape := make([]int, len(in.Shape))
		for k, d := range in.Shape {
			shape[k] = int(d)
		}
		check(enc.EncodeString(in.Name))
		check(enc.EncodeMapLen(3))
		check(enc.EncodeString("dtype"))
		check(enc.EncodeString(sig.Inputs[i].DType.String()))
		check(enc.EncodeString("shape"))
		check(enc.Encode(shape))
		check(enc.EncodeString("data"))
		check(enc.EncodeBytes(in.Data))
	}
	return buf.Bytes()
}

func named(name, datatype string, shape []int64, data []byte) onnxio.NamedTensor {
	return onnxio.NamedTensor{Name: name, Datatype: datatype, Shape: shape, Data: data}
}

func multiRow(ids []int64, mask []byte, scale float64, offset int32) []onnxio.NamedTensor {
	return []onnxio.NamedTensor{
		named("ids", "INT64", []int64{int64(len(ids))}, i64bytes(ids...)),
		named("mask", "BOOL", []int64{int64(len(mask))}, mask),
		named("scale", "FP64", []int64{}, f64bytes(scale)),
		named("offset", "INT32", []int64{}, i32bytes(offset)),
	}
}

// TestTensorItemIsTheMsgpackItem holds Item to the codec's msgpack path:
// the same tensors give the same item bytes and the same batch key, or the
// same error.
func TestTensorItemIsTheMsgpackItem(t *testing.T) {
	tests := []struct {
		name   string
		codec  *onnxio.Codec
		inputs []onnxio.NamedTensor
		fails  string // part of the error, when it must fail
	}{
		{"mlp", codec(t, onnxtest.MLP, nil), []onnxio.NamedTensor{named("features", "FP32", []int64{4}, f32bytes(5.1, 3.5, 1.4, 0.2))}, ""},
		{"seq", codec(t, onnxtest.Seq, nil), []onnxio.NamedTensor{named("x", "FP32", []int64{2, 3}, f32bytes(1, 2, 3, 4, 5, 6))}, ""},
		{"seq padded", codec(t, onnxtest.Seq, map[string]float64{"x": 0}), []onnxio.NamedTensor{named("x", "FP32", []int64{2, 3}, f32bytes(1, 2, 3, 4, 5, 6))}, ""},
		{"multi", codec(t, onnxtest.Multi, nil), multiRow([]int64{1, 2, 9}, []byte{1, 1, 0}, 0.5, -7), ""},
		{"multi padded", codec(t, onnxtest.Multi, map[string]float64{"ids": 0, "mask": 0}), multiRow([]int64{1, 2}, []byte{1, 0}, 3, 2), ""},
		{"fixed", codec(t, onnxtest.Fixed, nil), []onnxio.NamedTensor{named("x", "FP32", []int64{4}, f32bytes(1, 2, 3, 4))}, ""},
		{"wrong rank", codec(t, onnxtest.MLP, nil), []onnxio.NamedTensor{named("features", "FP32", []int64{2, 2}, f32bytes(1, 2, 3, 4))}, `input "features": want float32 [4] (rank 1, every axis at least 1 long); got shape [2, 2]`},
		{"fixed axis of the wrong length", codec(t, onnxtest.MLP, nil), []onnxio.NamedTensor{named("features", "FP32", []int64{3}, f32bytes(1, 2, 3))}, "got shape [3]"},
		{"an empty axis", codec(t, onnxtest.Seq, nil), []onnxio.NamedTensor{named("x", "FP32", []int64{0, 3}, []byte{})}, "got shape [0, 3]"},
		{"data too short", codec(t, onnxtest.MLP, nil), []onnxio.NamedTensor{named("features", "FP32", []int64{4}, f32bytes(1, 2, 3))}, "data has 12 bytes, but shape [4] of float32 needs 16"},
		{"a bool of 2", codec(t, onnxtest.Multi, nil), multiRow([]int64{1}, []byte{2}, 1, 1), `input "mask": byte 0 of bool data is 2`},
		{"axes named alike disagree", codec(t, onnxtest.Multi, nil), multiRow([]int64{1, 2}, []byte{1}, 1, 1), `input "mask": axis 0 (seq) is 1 long, but input "ids" has seq = 2`},
		{"a scalar sent as a vector", codec(t, onnxtest.Multi, nil), append(multiRow([]int64{1}, []byte{1}, 1, 1)[:2],
			named("scale", "FP64", []int64{1}, f64bytes(1)), named("offset", "INT32", []int64{}, i32bytes(1))), `input "scale": want float64 [] (rank 0); got shape [1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := tt.codec.Signature()
			wantItem, wantKey, wantErr := tt.codec.FromMsgpack(tensorMaps(t, sig, tt.inputs))
			item, key, err := tensorModel(t, tt.codec).Item(tt.inputs)
			if tt.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tt.fails) {
					t.Fatalf("error %v, want one with %q", err, tt.fails)
				}
				if wantErr == nil || wantErr.Error() != err.Error() {
					t.Errorf("error %q; the msgpack path says %v", err, wantErr)
				}
				return
			}
			if err != nil || wantErr != nil {
				t.Fatalf("Item: %v; msgpack path: %v", err, wantErr)
			}
			if !bytes.Equal(item, wantItem) || key != wantKey {
				t.Errorf("item %x key %q; the msgpack path gives %x key %q", item, key, wantItem, wantKey)
			}
		})
	}
}

func TestTensorItemRefusesWhatTheProtocolSends(t *testing.T) {
	features := func(datatype string) []onnxio.NamedTensor {
		return []onnxio.NamedTensor{named("features", datatype, []int64{4}, f32bytes(1, 2, 3, 4))}
	}
	swapped := multiRow([]int64{1}, []byte{1}, 1, 1)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	tests := []struct {
		name   string
		codec  *onnxio.Codec
		inputs []onnxio.NamedTensor
		want   string
	}{
		{"another datatype", codec(t, onnxtest.MLP, nil), features("FP64"), `input "features": want datatype FP32; got FP64`},
		{"BYTES", codec(t, onnxtest.MLP, nil), features("BYTES"), `input "features": want datatype FP32; got BYTES`},
		{"a dtype's own name", codec(t, onnxtest.MLP, nil), features("float32"), `input "features": want datatype FP32; got float32`},
		{"too few inputs", codec(t, onnxtest.Multi, nil), multiRow([]int64{1}, []byte{1}, 1, 1)[:3],
			"the item has 3 inputs; the model's inputs are ids (INT64 [-1, -1]), mask (BOOL [-1, -1]), scale (FP64 []), offset (INT32 [-1])"},
		{"out of order", codec(t, onnxtest.Multi, nil), swapped, `input 0 is "mask", but the model's input 0 is "ids"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tensorModel(t, tt.codec).Item(tt.inputs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestTensorItemDoesNotAliasItsInputs(t *testing.T) {
	c := codec(t, onnxtest.Multi, nil)
	row := multiRow([]int64{1, 2}, []byte{1, 0}, 0.5, 3)
	item, key, err := tensorModel(t, c).Item(row)
	if err != nil {
		t.Fatal(err)
	}
	before, beforeKey := bytes.Clone(item), key
	for _, in := range row {
		for i := range in.Data {
			in.Data[i] = 0xff
		}
	}
	if !bytes.Equal(item, before) || key != beforeKey {
		t.Error("the item changed with the request's buffers")
	}
}

func TestTensorOutputsDecodeTheAnswer(t *testing.T) {
	multi := codec(t, onnxtest.Multi, nil)
	outs := []onnxio.Tensor{
		{DType: onnxio.Float32, Shape: []int64{4}, Data: f32bytes(1, 2, 3, 4)},
		{DType: onnxio.Int64, Shape: []int64{}, Data: i64bytes(2)},
		{DType: onnxio.Float64, Shape: []int64{}, Data: f64bytes(1.5)},
		{DType: onnxio.Bool, Shape: []int64{}, Data: []byte{1}},
		{DType: onnxio.Int32, Shape: []int64{}, Data: i32bytes(4)},
	}
	answer, err := onnxio.EncodeOutput(multi.Signature(), outs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tensorModel(t, multi).Outputs(answer)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"pooled", "count", "scaled", "above", "next"}
	datatypes := []string{"FP32", "INT64", "FP64", "BOOL", "INT32"}
	if len(got) != len(outs) {
		t.Fatalf("%d outputs, want %d", len(got), len(outs))
	}
	for i, g := range got {
		if g.Name != names[i] || g.Datatype != datatypes[i] || !equalInts(g.Shape, outs[i].Shape) || !bytes.Equal(g.Data, outs[i].Data) {
			t.Errorf("output %d: %+v, want %s %s %v %x", i, g, names[i], datatypes[i], outs[i].Shape, outs[i].Data)
		}
	}

	mlp := codec(t, onnxtest.MLP, nil)
	one := onnxio.Tensor{DType: onnxio.Float32, Shape: []int64{3}, Data: f32bytes(0.25, 0.5, 0.25)}
	answer, err = onnxio.EncodeOutput(mlp.Signature(), []onnxio.Tensor{one})
	if err != nil {
		t.Fatal(err)
	}
	got, err = tensorModel(t, mlp).Outputs(answer)
	if err != nil || len(got) != 1 || got[0].Name != "probs" || got[0].Datatype != "FP32" || !bytes.Equal(got[0].Data, one.Data) {
		t.Errorf("mlp: %+v, %v", got, err)
	}

	for _, bad := range [][]byte{nil, {0xc0}, answer[:len(answer)-1], append(bytes.Clone(answer), 0)} {
		if _, err := tensorModel(t, mlp).Outputs(bad); err == nil || !strings.Contains(err.Error(), "model output") {
			t.Errorf("Outputs(%x) = %v, want a model output error", bad, err)
		}
	}
}

// FuzzTensorItem holds Item against the msgpack path for any shapes and
// data: both accept the same rows, with the same item and key, and refuse
// the same ones with the same message.
func FuzzTensorItem(f *testing.F) {
	f.Add(uint8(3), uint8(3), []byte{1, 1, 0}, uint8(0), uint8(0), []byte{})
	f.Add(uint8(2), uint8(1), []byte{2}, uint8(1), uint8(0), []byte{0, 0, 0, 0, 0, 0, 0xe0, 0x3f})
	f.Add(uint8(0), uint8(1), []byte{}, uint8(0), uint8(1), []byte{1, 2, 3})
	c := codec(f, onnxtest.Multi, map[string]float64{"ids": 0, "mask": 0})
	m := tensorModel(f, c)
	f.Fuzz(func(t *testing.T, nIDs, nMask uint8, mask []byte, scaleRank, offsetRank uint8, tail []byte) {
		ids := make([]byte, 8*int(nIDs))
		scalar := func(rank uint8) []int64 { return make([]int64, rank%2) }
		withOnes := func(s []int64) []int64 {
			for i := range s {
				s[i] = 1
			}
			return s
		}
		row := []onnxio.NamedTensor{
			named("ids", "INT64", []int64{int64(nIDs)}, ids),
			named("mask", "BOOL", []int64{int64(nMask)}, mask),
			named("scale", "FP64", withOnes(scalar(scaleRank)), append(f64bytes(0.5), tail...)),
			named("offset", "INT32", withOnes(scalar(offsetRank)), i32bytes(int32(binary.LittleEndian.Uint16(append(tail, 0, 0))))),
		}
		item, key, err := m.Item(row)
		wantItem, wantKey, wantErr := c.FromMsgpack(tensorMaps(t, c.Signature(), row))
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("Item: %v; msgpack path: %v", err, wantErr)
		case err != nil && wantErr.Error() != err.Error():
			t.Fatalf("Item: %q; msgpack path: %q", err, wantErr)
		case err == nil && (!bytes.Equal(item, wantItem) || key != wantKey):
			t.Fatalf("Item %x %q; msgpack path %x %q", item, key, wantItem, wantKey)
		case err == nil:
			checkAccepted(t, c, item)
		}
	})
}
