package onnxio

import (
	"fmt"
	"math"
)

// DType is a tensor's element type. Its values are the ONNX element type
// numbers, which ONNX Runtime uses too.
type DType uint8

// The element types streamer serves. All are fixed-size and travel as
// little-endian bytes; a bool is one byte, 0 or 1, and a float16 is an IEEE
// 754 half (binary16).
const (
	Float32 DType = 1
	Uint8   DType = 2
	Int8    DType = 3
	Uint16  DType = 4
	Int16   DType = 5
	Int32   DType = 6
	Int64   DType = 7
	Bool    DType = 9
	Float16 DType = 10
	Float64 DType = 11
	Uint32  DType = 12
	Uint64  DType = 13
)

var dtypeNames = map[DType]string{
	Float16: "float16", Float32: "float32", Float64: "float64",
	Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Uint8: "uint8", Uint16: "uint16", Uint32: "uint32", Uint64: "uint64",
	Bool: "bool",
}

// onnxTypeNames names the ONNX element types streamer does not serve, so an
// error can say what a model wants.
var onnxTypeNames = map[int32]string{
	8: "string", 14: "complex64", 15: "complex128", 16: "bfloat16",
	17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
	21: "uint4", 22: "int4", 23: "float4e2m1",
}

// String is the dtype's name as requests spell it ("float32").
func (d DType) String() string {
	if name, ok := dtypeNames[d]; ok {
		return name
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Valid reports whether streamer serves d.
func (d DType) Valid() bool {
	_, ok := dtypeNames[d]
	return ok
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16, Float16:
		return 2
	case Float32, Int32, Uint32:
		return 4
	case Float64, Int64, Uint64:
		return 8
	}
	return 0
}

// MarshalText writes the dtype's name, so that JSON shows "float32".
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("no such dtype %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// ParseDType reads a dtype's name. "float" and "double" are accepted as
// aliases of float32 and float64.
func ParseDType(name string) (DType, error) {
	switch name {
	case "float":
		return Float32, nil
	case "double":
		return Float64, nil
	}
	for d, n := range dtypeNames {
		if n == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q; want one of float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool", name)
}

// dtypeOfONNX maps an ONNX element type number to a DType, or says which
// unserved type it is.
func dtypeOfONNX(elem int32) (DType, error) {
	if elem > 0 && elem < 256 && DType(elem).Valid() {
		return DType(elem), nil
	}
	if name, ok := onnxTypeNames[elem]; ok {
		return 0, fmt.Errorf("element type %s is not served (streamer serves float16, float32, float64, int8-64, uint8-64 and bool)", name)
	}
	return 0, fmt.Errorf("unknown element type %d", elem)
}

// The functions below append one element, converted to d, to dst in
// little-endian order. They report false when the value does not fit d: out
// of range, not an integer for an integer type, or not 0/1 for bool.

func appendInt(dst []byte, d DType, v int64) ([]byte, bool) {
	switch d {
	case Float16:
		return appendFloat(dst, d, float64(v)) // exact to 2^53, far beyond the largest half
	case Float32:
		return appendU32(dst, math.Float32bits(float32(v))), true
	case Float64:
		return appendU64(dst, math.Float64bits(float64(v))), true
	case Bool:
		if v != 0 && v != 1 {
			return dst, false
		}
		return append(dst, byte(v)), true
	case Int8:
		return append(dst, byte(v)), v >= math.MinInt8 && v <= math.MaxInt8
	case Int16:
		return appendU16(dst, uint16(v)), v >= math.MinInt16 && v <= math.MaxInt16
	case Int32:
		return appendU32(dst, uint32(v)), v >= math.MinInt32 && v <= math.MaxInt32
	case Int64:
		return appendU64(dst, uint64(v)), true
	}
	if v < 0 {
		return dst, false
	}
	return appendUint(dst, d, uint64(v))
}

func appendUint(dst []byte, d DType, v uint64) ([]byte, bool) {
	switch d {
	case Float16:
		return appendFloat(dst, d, float64(v))
	case Float32:
		return appendU32(dst, math.Float32bits(float32(v))), true
	case Float64:
		return appendU64(dst, math.Float64bits(float64(v))), true
	case Bool:
		if v > 1 {
			return dst, false
		}
		return append(dst, byte(v)), true
	case Uint8:
		return append(dst, byte(v)), v <= math.MaxUint8
	case Uint16:
		return appendU16(dst, uint16(v)), v <= math.MaxUint16
	case Uint32:
		return appendU32(dst, uint32(v)), v <= math.MaxUint32
	case Uint64:
		return appendU64(dst, v), true
	}
	if v > math.MaxInt64 {
		return dst, false
	}
	return appendInt(dst, d, int64(v))
}

// appendFloat converts v. A float fits an integer type only when it is a
// whole number in range; NaN and infinities fit only the float types, and
// a finite value fits a float type only when it does not round to infinity.
func appendFloat(dst []byte, d DType, v float64) ([]byte, bool) {
	switch d {
	case Float16:
		h := Float16Bits(v)
		if math.IsInf(Float16Frombits(h), 0) && !math.IsInf(v, 0) {
			return dst, false
		}
		return appendU16(dst, h), true
	case Float32:
		if !math.IsInf(v, 0) && !math.IsNaN(v) && math.Abs(v) > math.MaxFloat32 {
			return dst, false
		}
		return appendU32(dst, math.Float32bits(float32(v))), true
	case Float64:
		return appendU64(dst, math.Float64bits(v)), true
	}
	if v != math.Trunc(v) || math.IsInf(v, 0) || math.IsNaN(v) {
		return dst, false
	}
	switch {
	case v >= -(1<<63) && v < 1<<63:
		return appendInt(dst, d, int64(v))
	case v >= 0 && v < 1<<64:
		return appendUint(dst, d, uint64(v))
	}
	return dst, false
}

// appendFloat32 stores a value that arrived as a float32 (msgpack float32),
// so that it is not rounded twice.
func appendFloat32(dst []byte, d DType, v float32) ([]byte, bool) {
	if d == Float32 {
		return appendU32(dst, math.Float32bits(v)), true
	}
	return appendFloat(dst, d, float64(v))
}

func appendBool(dst []byte, d DType, v bool) ([]byte, bool) {
	if d != Bool {
		return dst, false
	}
	if v {
		return append(dst, 1), true
	}
	return append(dst, 0), true
}

func appendU16(dst []byte, v uint16) []byte {
	return append(dst, byte(v), byte(v>>8))
}

func appendU32(dst []byte, v uint32) []byte {
	return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func appendU64(dst []byte, v uint64) []byte {
	return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24),
		byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

// One is the value 1 as one element of dtype d, little-endian (true for
// bool), or nil for a dtype without numbers.
func One(d DType) []byte {
	if d == Bool {
		return []byte{1}
	}
	if b, ok := appendFloat(nil, d, 1); ok && len(b) == d.Size() {
		return b
	}
	return nil
}

// Two is the value 2 as one element of a floating-point dtype d,
// little-endian, or nil for any other dtype.
func Two(d DType) []byte {
	switch d {
	case Float16, Float32, Float64:
		b, _ := appendFloat(nil, d, 2)
		return b
	}
	return nil
}
