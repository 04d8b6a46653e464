package onnxio

// This file is an ONNX model as the Open Inference Protocol (KServe v2)
// sees it: its inputs and outputs with v2 datatype names and shapes, one
// batch row of request tensors turned into the item the codec makes of a
// msgpack body, and one item's answer turned back into named tensors. The
// HTTP layer adapts it to its own TensorModel interface; this package does
// not import it, so that the model's edge stays below the supervisor.

import (
	"fmt"
	"strconv"
	"strings"
)

// Platform is the v2 metadata platform of an ONNX model: the name Triton
// gives models run by ONNX Runtime.
const Platform = "onnxruntime_onnx"

// v2Datatypes maps a dtype's name to its v2 datatype.
var v2Datatypes = map[string]string{
	"bool":  "BOOL",
	"uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
	"int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
	"float16": "FP16", "float32": "FP32", "float64": "FP64",
}

// Datatype is d's v2 datatype name ("FP32" for float32), or "" when the
// protocol has none for it.
func Datatype(d DType) string { return v2Datatypes[d.String()] }

// TensorSpec is one input or output as v2 metadata describes it. Its fields
// are those of the HTTP layer's TensorSpec, so one converts to the other.
type TensorSpec struct {
	Name string
	// Datatype is the v2 name (FP32, INT64, BOOL ...).
	Datatype string
	// Shape is what a request sends or an answer carries: the batch axis
	// first when Batched, then the item's axes; -1 marks the batch axis and
	// every dynamic axis.
	Shape []int64
	// Batched says the first axis is the request's batch axis, one item per
	// row.
	Batched bool
}

// NamedTensor is one tensor of a v2 request row or of an item's answer:
// its elements little-endian in row-major order, a bool one byte (0 or 1).
// Its fields are those of the HTTP layer's Tensor.
type NamedTensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Data     []byte
}

// TensorModel is a model's v2 view, built on its Codec. A TensorModel is
// safe for concurrent use.
//
// Batching, as a v2 request sees it:
//   - An input with a batch axis (the model's dynamic leading axis, or a
//     leading axis fixed at 1 for a model whose items run one by one) is
//     Batched: each row of the request's first axis is one item. A model
//     with a batch axis fixed at 1 still takes requests of many rows, since
//     streamer runs its items one after the other.
//   - An input without a batch axis (a scalar such as a sample rate) is
//     sent whole and goes to every item of the request; its value is part
//     of the batch key, as on /predict.
//   - Every output is Batched when some input is: each item answers its own
//     row. That holds for an output the model declares without a batch
//     axis too (it only occurs in models whose items run one by one, so
//     each run's value belongs to one item): its v2 shape gains the
//     request's batch axis. When no input has a batch axis, a request is
//     one item, and outputs keep the model's shapes.
//   - An output whose shape the model does not declare is listed with the
//     batch axis alone (its own rank is unknown until it is answered).
type TensorModel struct {
	codec   *Codec
	inputs  []TensorSpec
	outputs []TensorSpec
}

// NewTensorModel returns the v2 view of the model c checks items for. It
// fails for a model with a tensor whose dtype the protocol cannot name.
func NewTensorModel(c *Codec) (*TensorModel, error) {
	sig := c.Signature()
	m := &TensorModel{codec: c}
	batched := false
	for _, p := range sig.Inputs {
		batched = batched || p.Batched
	}
	for _, p := range sig.Inputs {
		spec, err := tensorSpec(p, p.Batched)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", p.Name, err)
		}
		m.inputs = append(m.inputs, spec)
	}
	for _, p := range sig.Outputs {
		spec, err := tensorSpec(p, batched)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", p.Name, err)
		}
		m.outputs = append(m.outputs, spec)
	}
	return m, nil
}

// tensorSpec describes p, with the request's batch axis first when batched.
func tensorSpec(p Port, batched bool) (TensorSpec, error) {
	spec := TensorSpec{Name: p.Name, Datatype: Datatype(p.DType), Batched: batched, Shape: []int64{}}
	if spec.Datatype == "" {
		return spec, fmt.Errorf("dtype %s has no v2 datatype", p.DType)
	}
	if batched {
		spec.Shape = append(spec.Shape, -1)
	}
	for _, d := range p.ItemShape {
		if d.Dynamic() {
			spec.Shape = append(spec.Shape, -1)
		} else {
			spec.Shape = append(spec.Shape, d.Size)
		}
	}
	return spec, nil
}

// Specs returns the model's inputs and outputs, in the graph's order. The
// caller must not modify them.
func (m *TensorModel) Specs() (inputs, outputs []TensorSpec) { return m.inputs, m.outputs }

// Item checks one item's inputs, given in the model's input order (for a
// batched input its row, for an unbatched one the whole tensor), and
// returns the item and batch key the codec gives the same tensors sent to
// /predict as msgpack tensor maps, with the codec's checks and messages: an
// error names the input, what it wants and what was sent. The item does not
// alias the inputs' data.
func (m *TensorModel) Item(inputs []NamedTensor) ([]byte, string, error) {
	sig := m.codec.Signature()
	if len(inputs) != len(sig.Inputs) {
		return nil, "", fmt.Errorf("the item has %d inputs; the model's inputs are %s", len(inputs), m.inputList())
	}
	tensors := make([]Tensor, len(inputs))
	for i, in := range inputs {
		p := &sig.Inputs[i]
		if in.Name != p.Name {
			return nil, "", fmt.Errorf("input %d is %q, but the model's input %d is %q; the model's inputs are %s", i, in.Name, i, p.Name, m.inputList())
		}
		if want := m.inputs[i].Datatype; in.Datatype != want {
			return nil, "", fmt.Errorf("input %q: want datatype %s; got %s", p.Name, want, in.Datatype)
		}
		tensors[i] = Tensor{DType: p.DType, Shape: in.Shape, Data: in.Data}
		// Input by input, its data before its shape, as the msgpack path
		// reads tensor maps: a row wrong in several ways gets its message.
		if err := tensors[i].checkData(); err != nil {
			return nil, "", fmt.Errorf("input %q: %w", p.Name, err)
		}
		if err := checkTensor(p, tensors[i]); err != nil {
			return nil, "", err
		}
	}
	return m.codec.finish(tensors)
}

// inputList spells the inputs as v2 metadata does: "features (FP32 [-1, 4])".
func (m *TensorModel) inputList() string {
	parts := make([]string, len(m.inputs))
	for i, s := range m.inputs {
		dims := make([]string, len(s.Shape))
		for k, d := range s.Shape {
			dims[k] = strconv.FormatInt(d, 10)
		}
		parts[i] = fmt.Sprintf("%s (%s [%s])", s.Name, s.Datatype, strings.Join(dims, ", "))
	}
	return strings.Join(parts, ", ")
}

// Outputs decodes one item's answer, as the worker encoded it, into the
// model's outputs in the graph's order, each as the item's own tensor
// (without the request's batch axis). Their data alias answer.
func (m *TensorModel) Outputs(answer []byte) ([]NamedTensor, error) {
	outs, err := DecodeOutput(m.codec.Signature(), answer)
	if err != nil {
		return nil, fmt.Errorf("model output: %w", err)
	}
	tensors := make([]NamedTensor, len(outs))
	for i, t := range outs {
		name := m.outputs[i].Name
		datatype := Datatype(t.DType)
		if datatype == "" {
			return nil, fmt.Errorf("model output %q: dtype %s has no v2 datatype", name, t.DType)
		}
		tensors[i] = NamedTensor{Name: name, Datatype: datatype, Shape: t.Shape, Data: t.Data}
	}
	return tensors, nil
}
