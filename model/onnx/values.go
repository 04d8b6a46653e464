//go:build cgo

package onnx

import (
	"errors"
	"fmt"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// newValue wraps t's bytes, without copying them, as an ONNX Runtime
// tensor; a rank-0 tensor becomes a scalar. Tensors of rank 1 or more,
// float16 ones included, are CustomDataTensors of t's bytes, which a run
// reads, or fills when the tensor is an output.
func newValue(t onnxio.Tensor) (ort.Value, error) {
	if len(t.Shape) > 0 {
		return ort.NewCustomDataTensor(ort.Shape(t.Shape), t.Data, ort.TensorElementDataType(t.DType))
	}
	switch t.DType {
	case onnxio.Float32:
		return newScalar[float32](t.Data)
	case onnxio.Float64:
		return newScalar[float64](t.Data)
	case onnxio.Int8:
		return newScalar[int8](t.Data)
	case onnxio.Int16:
		return newScalar[int16](t.Data)
	case onnxio.Int32:
		return newScalar[int32](t.Data)
	case onnxio.Int64:
		return newScalar[int64](t.Data)
	case onnxio.Uint8:
		return newScalar[uint8](t.Data)
	case onnxio.Uint16:
		return newScalar[uint16](t.Data)
	case onnxio.Uint32:
		return newScalar[uint32](t.Data)
	case onnxio.Uint64:
		return newScalar[uint64](t.Data)
	case onnxio.Bool:
		return newScalar[bool](t.Data)
	case onnxio.Float16:
		return nil, errors.New(errFloat16Scalar) // Open refuses such models
	}
	return nil, fmt.Errorf("dtype %s is not served", t.DType)
}

func newScalar[T ort.TensorData](data []byte) (ort.Value, error) {
	var v T
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), data)
	return ort.NewScalar(v)
}

// valueTensor reads a tensor ONNX Runtime produced. The bytes are Go memory
// that outlives the value.
func valueTensor(v ort.Value) (onnxio.Tensor, error) {
	switch v := v.(type) {
	case *ort.Tensor[float32]:
		return tensorOf(onnxio.Float32, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[float64]:
		return tensorOf(onnxio.Float64, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[int8]:
		return tensorOf(onnxio.Int8, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[int16]:
		return tensorOf(onnxio.Int16, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[int32]:
		return tensorOf(onnxio.Int32, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[int64]:
		return tensorOf(onnxio.Int64, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[uint8]:
		return tensorOf(onnxio.Uint8, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[uint16]:
		return tensorOf(onnxio.Uint16, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[uint32]:
		return tensorOf(onnxio.Uint32, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[uint64]:
		return tensorOf(onnxio.Uint64, v.GetShape(), v.GetData()), nil
	case *ort.Tensor[bool]:
		return tensorOf(onnxio.Bool, v.GetShape(), v.GetData()), nil
	case *ort.CustomDataTensor:
		return scalarOrCustom(v)
	}
	return scalarTensor(v)
}

func tensorOf[T any](dtype onnxio.DType, shape ort.Shape, data []T) onnxio.Tensor {
	return onnxio.Tensor{DType: dtype, Shape: []int64(shape), Data: bytesOf(data)}
}

// bytesOf views a typed slice as its bytes; they are little-endian on every
// machine streamer runs on (Open checks).
func bytesOf[T any](data []T) []byte {
	if len(data) == 0 {
		return []byte{}
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*int(unsafe.Sizeof(zero)))
}

func scalarOrCustom(v *ort.CustomDataTensor) (onnxio.Tensor, error) {
	dtype := onnxio.DType(v.DataType())
	if !dtype.Valid() {
		return onnxio.Tensor{}, fmt.Errorf("element type %d is not served", int(v.DataType()))
	}
	return onnxio.Tensor{DType: dtype, Shape: []int64(v.GetShape()), Data: v.GetData()}, nil
}

// scalarTensor reads the scalars newValue made for scalar outputs.
func scalarTensor(v ort.Value) (onnxio.Tensor, error) {
	switch v := v.(type) {
	case *ort.Scalar[float32]:
		return scalarOf(onnxio.Float32, v.GetData()), nil
	case *ort.Scalar[float64]:
		return scalarOf(onnxio.Float64, v.GetData()), nil
	case *ort.Scalar[int8]:
		return scalarOf(onnxio.Int8, v.GetData()), nil
	case *ort.Scalar[int16]:
		return scalarOf(onnxio.Int16, v.GetData()), nil
	case *ort.Scalar[int32]:
		return scalarOf(onnxio.Int32, v.GetData()), nil
	case *ort.Scalar[int64]:
		return scalarOf(onnxio.Int64, v.GetData()), nil
	case *ort.Scalar[uint8]:
		return scalarOf(onnxio.Uint8, v.GetData()), nil
	case *ort.Scalar[uint16]:
		return scalarOf(onnxio.Uint16, v.GetData()), nil
	case *ort.Scalar[uint32]:
		return scalarOf(onnxio.Uint32, v.GetData()), nil
	case *ort.Scalar[uint64]:
		return scalarOf(onnxio.Uint64, v.GetData()), nil
	case *ort.Scalar[bool]:
		return scalarOf(onnxio.Bool, v.GetData()), nil
	}
	return onnxio.Tensor{}, fmt.Errorf("the model produced a %s, not a tensor", v.GetONNXType())
}

func scalarOf[T any](dtype onnxio.DType, v T) onnxio.Tensor {
	return onnxio.Tensor{DType: dtype, Shape: []int64{}, Data: bytesOf([]T{v})}
}
