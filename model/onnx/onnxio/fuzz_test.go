package onnxio_test

import (
	"encoding/json"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// fuzzCodecs are codecs of models that cover every input form: one input,
// a sequence, several dtypes with a scalar, every dtype, and padding.
func fuzzCodecs(f *testing.F) []*onnxio.Codec {
	return []*onnxio.Codec{
		codec(f, onnxtest.MLP, nil),
		codec(f, onnxtest.Seq, map[string]float64{"x": 0}),
		codec(f, onnxtest.Multi, nil),
		codec(f, onnxtest.Dtypes, map[string]float64{"in_fp16": 1.5}),
	}
}

// checkAccepted asserts that an item a codec accepted is one the worker
// accepts too.
func checkAccepted(t *testing.T, c *onnxio.Codec, item []byte) {
	inputs, err := onnxio.DecodeItem(item)
	if err != nil {
		t.Fatalf("accepted item does not decode: %v", err)
	}
	if err := c.Check(inputs); err != nil {
		t.Fatalf("accepted item fails Check: %v", err)
	}
}

func FuzzFromJSON(f *testing.F) {
	for _, seed := range []string{
		`[5.1, 3.5, -1.4, 0.2]`, `{"features": [1, 2, 3, 4]}`, `[[1, 2, 3], [4, 5, 6]]`, `[[1, 2, 3], [4, 5]]`,
		`{"ids": [1, 2], "mask": [true, false], "scale": 0.5, "offset": 3}`, `[1e39, 1, 1, 1]`, `[[[[`, `"x"`, `{}`, `[1,,2]`,
		`{"ids": [1, 1.5], "mask": [1, 2], "scale": [1], "offset": 3e10}`, `[-0, 1E+2, -1e-2, 0.0]`,
		`{"in_fp16": [65504, 0.1], "in_fp32": [1], "in_fp64": [1], "in_int8": [-128], "in_int16": [1], "in_int32": [1], "in_int64": [1], "in_uint8": [255], "in_uint16": [1], "in_uint32": [1], "in_uint64": [18446744073709551615], "in_bool": [true]}`,
	} {
		f.Add(seed)
	}
	codecs := fuzzCodecs(f)
	f.Fuzz(func(t *testing.T, raw string) {
		for _, c := range codecs {
			item, _, err := c.FromJSON(json.RawMessage(raw))
			if err == nil {
				checkAccepted(t, c, item)
			}
		}
	})
}

func FuzzFromMsgpack(f *testing.F) {
	for _, seed := range []any{
		[]float32{1, 2, 3, 4}, [][]float64{{1, 2, 3}}, tensorMap("float32", []int{4}, f32bytes(1, 2, 3, 4)),
		map[string]any{"ids": []int{1}, "mask": []bool{true}, "scale": 1.0, "offset": 2},
		map[string]any{"features": tensorMap("float32", []int{4}, f32bytes(1, 2, 3, 4))}, "text", nil,
	} {
		b, err := msgpackMarshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	codecs := fuzzCodecs(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, c := range codecs {
			item, _, err := c.FromMsgpack(raw)
			if err == nil {
				checkAccepted(t, c, item)
			}
		}
	})
}

func FuzzDecodeItem(f *testing.F) {
	f.Add(onnxio.EncodeItem(multiItem))
	f.Add([]byte{0x91, 0x93, 0x01, 0x91, 0x01, 0xc4, 0x04, 0, 0, 0, 0})
	c := codec(f, onnxtest.Multi, nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		inputs, err := onnxio.DecodeItem(raw)
		if err == nil {
			_ = c.Check(inputs) // must not panic on any decoded item
		}
	})
}

func FuzzAppendJSON(f *testing.F) {
	multi := codec(f, onnxtest.Multi, nil)
	out, err := onnxio.EncodeOutput(multi.Signature(), []onnxio.Tensor{
		{DType: onnxio.Float32, Shape: []int64{4}, Data: f32bytes(1, 2, 3, 4)},
		{DType: onnxio.Int64, Shape: []int64{}, Data: i64bytes(1)},
		{DType: onnxio.Float64, Shape: []int64{}, Data: f64bytes(1)},
		{DType: onnxio.Bool, Shape: []int64{}, Data: []byte{1}},
		{DType: onnxio.Int32, Shape: []int64{}, Data: i32bytes(1)},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(out)
	mlp := codec(f, onnxtest.MLP, nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, c := range []*onnxio.Codec{mlp, multi} {
			if b, err := c.AppendJSON(nil, raw); err == nil && !json.Valid(b) {
				t.Fatalf("AppendJSON wrote invalid JSON %s", b)
			}
		}
	})
}

func msgpackMarshal(v any) ([]byte, error) { return msgpack.Marshal(v) }
