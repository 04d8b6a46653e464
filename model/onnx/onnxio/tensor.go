package onnxio

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/vmihailenco/msgpack/v5"
)

// Tensor is one value: its element type, its shape and its elements as
// little-endian bytes in row-major order.
type Tensor struct {
	DType DType
	Shape []int64
	Data  []byte
}

// elements returns the number of elements the shape holds, or false when a
// dimension is negative or the count overflows.
func elements(shape []int64) (int64, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// checkData reports whether Data holds exactly the shape's elements and,
// for bool, whether every byte is 0 or 1.
func (t Tensor) checkData() error {
	n, ok := elements(t.Shape)
	size := int64(t.DType.Size())
	if !ok || size == 0 || n > math.MaxInt64/size {
		return fmt.Errorf("shape %v of %s is not a valid tensor shape", t.Shape, t.DType)
	}
	if int64(len(t.Data)) != n*size {
		return fmt.Errorf("data has %d bytes, but shape %v of %s needs %d", len(t.Data), t.Shape, t.DType, n*size)
	}
	if t.DType == Bool {
		for i, b := range t.Data {
			if b > 1 {
				return fmt.Errorf("byte %d of bool data is %d; a bool is 0 or 1", i, b)
			}
		}
	}
	return nil
}

// EncodeItem encodes one item's input tensors, in the model's input order,
// as the msgpack bytes a worker decodes: an array of [dtype, shape, data]
// arrays. The codec produces these; a Go program that submits items to a
// supervisor directly may call it too.
func EncodeItem(inputs []Tensor) []byte {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	_ = enc.EncodeArrayLen(len(inputs)) // writes to a bytes.Buffer do not fail
	for _, t := range inputs {
		_ = enc.EncodeArrayLen(3)
		_ = enc.EncodeUint8(uint8(t.DType))
		encodeShape(enc, t.Shape)
		_ = enc.EncodeBytes(t.Data)
	}
	return buf.Bytes()
}

func encodeShape(enc *msgpack.Encoder, shape []int64) {
	_ = enc.EncodeArrayLen(len(shape))
	for _, d := range shape {
		_ = enc.EncodeInt(d)
	}
}

// DecodeItem reads what EncodeItem wrote. It checks the encoding, not the
// model: Codec.Check does that.
func DecodeItem(item []byte) ([]Tensor, error) {
	d := newReader(item)
	defer d.Release()
	n, err := d.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("item is not an array of tensors: %w", err)
	}
	// Grown as tensors are read, not made as long as the header says: an
	// item from Redis, which anyone with its password writes, that
	// declares millions of tensors in a few bytes each must not make the
	// worker allocate tens of times its size before it is refused.
	inputs := make([]Tensor, 0, min(n, 8))
	for i := range n {
		t, err := d.itemTensor()
		if err != nil {
			return nil, fmt.Errorf("item tensor %d: %w", i, err)
		}
		inputs = append(inputs, t)
	}
	if d.Len() != 0 {
		return nil, fmt.Errorf("item has %d bytes after its tensors", d.Len())
	}
	return inputs, nil
}

func (d reader) itemTensor() (Tensor, error) {
	var t Tensor
	n, err := d.arrayLen()
	if err != nil || n != 3 {
		return t, fmt.Errorf("want a [dtype, shape, data] array (%d fields, %v)", n, err)
	}
	dtype, err := d.Decoder().DecodeUint8()
	if err != nil {
		return t, fmt.Errorf("dtype: %w", err)
	}
	t.DType = DType(dtype)
	if !t.DType.Valid() {
		return t, fmt.Errorf("dtype %d is not served", dtype)
	}
	if t.Shape, err = d.shape(); err != nil {
		return t, err
	}
	if t.Data, err = d.Bin(); err != nil {
		return t, fmt.Errorf("data: %w", err)
	}
	return t, t.checkData()
}

// outputKeys are the keys of a tensor map, in the order they are written.
const (
	keyDType = "dtype"
	keyShape = "shape"
	keyData  = "data"
)

// EncodeOutput encodes one item's outputs, in the model's output order, as
// the msgpack a client receives: a {"dtype", "shape", "data"} map for a
// model with one output, and a map from output name to such maps for a model
// with several.
func EncodeOutput(sig *Signature, outputs []Tensor) ([]byte, error) {
	if len(outputs) != len(sig.Outputs) {
		return nil, fmt.Errorf("%d outputs for a model with %d", len(outputs), len(sig.Outputs))
	}
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	if len(outputs) == 1 {
		encodeTensorMap(enc, outputs[0])
		return buf.Bytes(), nil
	}
	_ = enc.EncodeMapLen(len(outputs))
	for i, t := range outputs {
		_ = enc.EncodeString(sig.Outputs[i].Name)
		encodeTensorMap(enc, t)
	}
	return buf.Bytes(), nil
}

func encodeTensorMap(enc *msgpack.Encoder, t Tensor) {
	_ = enc.EncodeMapLen(3)
	_ = enc.EncodeString(keyDType)
	_ = enc.EncodeString(t.DType.String())
	_ = enc.EncodeString(keyShape)
	encodeShape(enc, t.Shape)
	_ = enc.EncodeString(keyData)
	_ = enc.EncodeBytes(t.Data)
}

// DecodeOutput reads what EncodeOutput wrote.
func DecodeOutput(sig *Signature, output []byte) ([]Tensor, error) {
	d := newReader(output)
	defer d.Release()
	outs := make([]Tensor, len(sig.Outputs))
	if len(sig.Outputs) == 1 {
		t, err := d.tensorMap()
		if err != nil {
			return nil, err
		}
		outs[0] = t
	} else {
		if err := d.outputMap(sig, outs); err != nil {
			return nil, err
		}
	}
	if d.Len() != 0 {
		return nil, fmt.Errorf("output has %d bytes after its value", d.Len())
	}
	return outs, nil
}

func (d reader) outputMap(sig *Signature, outs []Tensor) error {
	n, err := d.mapLen()
	if err != nil || n != len(outs) {
		return fmt.Errorf("want a map of %d outputs (%d entries, %v)", len(outs), n, err)
	}
	seen := make([]bool, len(outs))
	for range n {
		name, err := d.Decoder().DecodeString()
		if err != nil {
			return fmt.Errorf("output name: %w", err)
		}
		i := -1
		for j, p := range sig.Outputs {
			if p.Name == name {
				i = j
			}
		}
		if i < 0 || seen[i] {
			return fmt.Errorf("unexpected output %q", name)
		}
		seen[i] = true
		if outs[i], err = d.tensorMap(); err != nil {
			return fmt.Errorf("output %q: %w", name, err)
		}
	}
	return nil
}

// tensorMap reads a {"dtype", "shape", "data"} map.
func (d reader) tensorMap() (Tensor, error) {
	var t Tensor
	n, err := d.mapLen()
	if err != nil {
		return t, fmt.Errorf("want a {dtype, shape, data} map: %w", err)
	}
	var have [3]bool
	for range n {
		key, err := d.Decoder().DecodeString()
		if err != nil {
			return t, fmt.Errorf("tensor map key: %w", err)
		}
		switch key {
		case keyDType:
			var name string
			if name, err = d.Decoder().DecodeString(); err == nil {
				t.DType, err = ParseDType(name)
			}
			have[0] = true
		case keyShape:
			t.Shape, err = d.shape()
			have[1] = true
		case keyData:
			t.Data, err = d.Bin()
			have[2] = true
		default:
			err = fmt.Errorf("unknown key %q; a tensor map has dtype, shape and data", key)
		}
		if err != nil {
			return t, fmt.Errorf("tensor %s: %w", key, err)
		}
	}
	if !have[0] || !have[1] || !have[2] {
		return t, errors.New(`a tensor map needs "dtype", "shape" and "data"`)
	}
	return t, t.checkData()
}
