package onnxtest

import (
	"encoding/binary"

	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
)

// DtypeCase is one input of the Dtypes model, with its output and values at
// its type's extremes.
type DtypeCase struct {
	// DType is the element type's name as requests spell it ("float16").
	DType string
	// Input and Output are the names of the pair ("in_fp16", "out_fp16");
	// Axis names their second axis ("n_fp16"), which each input has alone.
	Input, Output, Axis string
	// Size is the number of bytes of one element.
	Size int
	// Values are the type's extremes (largest and smallest finite values,
	// the smallest normal and subnormal ones, -0) and a few plain ones, as
	// JSON can carry them; NaN and infinities travel only in msgpack.
	Values []DtypeValue

	elem onnxpb.TensorProto_DataType
}

// DtypeValue is one element: as a client writes it in JSON, as streamer
// writes it back, and its bits.
type DtypeValue struct {
	// JSON is the value as sent ("6.103515625e-05").
	JSON string
	// Answer is the value as a JSON answer spells it: the shortest text
	// that reads back as the same element, for a float16 the shortest that
	// reads back as the same float32 ("6.1035156e-05").
	Answer string
	// Bits are the element's bits: the IEEE bits of a float, the two's
	// complement of an integer, 0 or 1 for a bool. The element is their
	// low Size bytes, little-endian.
	Bits uint64
}

// DtypeCases lists the Dtypes model's inputs, one per served dtype, in the
// model's order; the values are written out by hand, independently of
// streamer's conversions.
func DtypeCases() []DtypeCase {
	return []DtypeCase{
		{DType: "float16", Input: "in_fp16", Output: "out_fp16", Axis: "n_fp16", Size: 2, elem: onnxpb.TensorProto_FLOAT16, Values: []DtypeValue{
			{"65504", "65504", 0x7bff},
			{"-65504", "-65504", 0xfbff},
			{"6.103515625e-05", "6.1035156e-05", 0x0400},       // the smallest normal, 2^-14
			{"6.097555160522461e-05", "6.097555e-05", 0x03ff},  // the largest subnormal
			{"5.960464477539063e-08", "5.9604645e-08", 0x0001}, // the smallest subnormal, 2^-24
			{"-5.960464477539063e-08", "-5.9604645e-08", 0x8001},
			{"-0", "-0", 0x8000},
			{"0.1", "0.099975586", 0x2e66},             // 0.0999755859375
			{"1.0009765625", "1.0009766", 0x3c01},      // 1 + 2^-10
			{"1.00048828125", "1", 0x3c00},             // halfway between 1 and 1 + 2^-10: to even
			{"-2.98023223876953125e-08", "-0", 0x8000}, // halfway between -0 and -2^-24: to even
			{"65519.99", "65504", 0x7bff},              // just below halfway to infinity
		}},
		{DType: "float32", Input: "in_fp32", Output: "out_fp32", Axis: "n_fp32", Size: 4, elem: onnxpb.TensorProto_FLOAT, Values: []DtypeValue{
			{"3.4028234663852886e38", "3.4028235e+38", 0x7f7fffff},
			{"-3.4028235e38", "-3.4028235e+38", 0xff7fffff},
			{"1.1754943508222875e-38", "1.1754944e-38", 0x00800000},
			{"1e-45", "1e-45", 0x00000001},
			{"-0", "-0", 0x80000000},
			{"0.1", "0.1", 0x3dcccccd},
		}},
		{DType: "float64", Input: "in_fp64", Output: "out_fp64", Axis: "n_fp64", Size: 8, elem: onnxpb.TensorProto_DOUBLE, Values: []DtypeValue{
			{"1.7976931348623157e308", "1.7976931348623157e+308", 0x7fefffffffffffff},
			{"-1.7976931348623157e308", "-1.7976931348623157e+308", 0xffefffffffffffff},
			{"2.2250738585072014e-308", "2.2250738585072014e-308", 0x0010000000000000},
			{"5e-324", "5e-324", 0x0000000000000001},
			{"-0", "-0", 0x8000000000000000},
			{"0.1", "0.1", 0x3fb999999999999a},
		}},
		{DType: "int8", Input: "in_int8", Output: "out_int8", Axis: "n_int8", Size: 1, elem: onnxpb.TensorProto_INT8, Values: []DtypeValue{
			{"-128", "-128", 0x80}, {"127", "127", 0x7f}, {"-1", "-1", 0xff}, {"0", "0", 0},
		}},
		{DType: "int16", Input: "in_int16", Output: "out_int16", Axis: "n_int16", Size: 2, elem: onnxpb.TensorProto_INT16, Values: []DtypeValue{
			{"-32768", "-32768", 0x8000}, {"32767", "32767", 0x7fff}, {"-1", "-1", 0xffff},
		}},
		{DType: "int32", Input: "in_int32", Output: "out_int32", Axis: "n_int32", Size: 4, elem: onnxpb.TensorProto_INT32, Values: []DtypeValue{
			{"-2147483648", "-2147483648", 0x80000000}, {"2147483647", "2147483647", 0x7fffffff}, {"-1", "-1", 0xffffffff},
		}},
		{DType: "int64", Input: "in_int64", Output: "out_int64", Axis: "n_int64", Size: 8, elem: onnxpb.TensorProto_INT64, Values: []DtypeValue{
			{"-9223372036854775808", "-9223372036854775808", 0x8000000000000000},
			{"9223372036854775807", "9223372036854775807", 0x7fffffffffffffff},
			{"-1", "-1", 0xffffffffffffffff},
		}},
		{DType: "uint8", Input: "in_uint8", Output: "out_uint8", Axis: "n_uint8", Size: 1, elem: onnxpb.TensorProto_UINT8, Values: []DtypeValue{
			{"0", "0", 0}, {"255", "255", 0xff},
		}},
		{DType: "uint16", Input: "in_uint16", Output: "out_uint16", Axis: "n_uint16", Size: 2, elem: onnxpb.TensorProto_UINT16, Values: []DtypeValue{
			{"0", "0", 0}, {"65535", "65535", 0xffff},
		}},
		{DType: "uint32", Input: "in_uint32", Output: "out_uint32", Axis: "n_uint32", Size: 4, elem: onnxpb.TensorProto_UINT32, Values: []DtypeValue{
			{"0", "0", 0}, {"4294967295", "4294967295", 0xffffffff},
		}},
		{DType: "uint64", Input: "in_uint64", Output: "out_uint64", Axis: "n_uint64", Size: 8, elem: onnxpb.TensorProto_UINT64, Values: []DtypeValue{
			{"0", "0", 0}, {"18446744073709551615", "18446744073709551615", 0xffffffffffffffff},
		}},
		{DType: "bool", Input: "in_bool", Output: "out_bool", Axis: "n_bool", Size: 1, elem: onnxpb.TensorProto_BOOL, Values: []DtypeValue{
			{"true", "true", 1}, {"false", "false", 0},
		}},
	}
}

// Bytes returns the values' elements, little-endian, one after the other.
func (c DtypeCase) Bytes(values []DtypeValue) []byte {
	out := make([]byte, 0, c.Size*len(values))
	for _, v := range values {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v.Bits)
		out = append(out, b[:c.Size]...)
	}
	return out
}

func buildDtypes() *graph {
	g := newGraph(6, "One input per served dtype, each [batch, n] with an axis of its own, passed by Identity to an output of its dtype and shape.")
	for _, c := range DtypeCases() {
		g.inputs = append(g.inputs, value(c.Input, c.elem, "batch", c.Axis))
		g.node("Identity", []string{c.Input}, c.Output)
		g.outputs = append(g.outputs, value(c.Output, c.elem, "batch", c.Axis))
	}
	return g
}
