// Package onnxtest builds streamer's test and demo ONNX models and computes
// what they should answer with plain Go loops over the same weights, read
// back from the model files, independently of ONNX Runtime. The generator in
// testdata/gen writes the models with Build; tests compare served outputs
// with the reference functions.
package onnxtest

//go:generate go run ../../../testdata/gen -root ../../..

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
)

// The models Build knows, by name.
const (
	// MLP is a small classifier: features float32 [batch, 4] → probs float32
	// [batch, 3], through one hidden layer of 16 with ReLU and a softmax.
	MLP = "mlp"
	// Demo is the embedded demo and benchmark classifier: features float32
	// [batch, 4] → probs float32 [batch, 3], through a residual tower of
	// DemoDepth tanh layers of width DemoWidth that share one weight matrix,
	// so that each item costs real compute while the file stays small.
	Demo = "demo"
	// Seq maps each step of a sequence: x float32 [batch, seq, 3] → y
	// float32 [batch, seq, 4] = tanh(x·W + b). Padding x is safe: each step's
	// output depends on that step alone.
	Seq = "seq"
	// Multi has several inputs and outputs of different dtypes: token ids
	// int64 [batch, seq] with their mask bool [batch, seq], an unbatched
	// scale float64 [] and an offset int32 [batch]; it answers the masked
	// mean embedding pooled float32 [batch, 4], count int64 [batch] (true
	// mask entries), scaled float64 [batch] (offset × scale), above bool
	// [batch] (count > offset) and next int32 [batch] (offset + 1). Padding
	// ids and mask together is safe: padded steps are masked out.
	Multi = "multi"
	// Fixed has its batch axis fixed at 1: x float32 [1, 4] → y float32
	// [1, 2] = tanh(x·W + b), and energy float32 [] (a scalar, no batch
	// axis) = the sum of y's squares.
	Fixed = "fixed"
	// Dtypes has one input per dtype streamer serves, in_fp16 float16
	// [batch, n_fp16] to in_bool bool [batch, n_bool] (DtypeCases lists
	// them), each passed by Identity to an output of its dtype and shape
	// (out_fp16 ...). Every input has a second axis of its own name, so an
	// item sends each at its own length, and each may be padded alone.
	Dtypes = "dtypes"
)

// The demo tower's size.
const (
	DemoWidth = 512
	DemoDepth = 64
)

// Vocabulary is the number of token ids Multi embeds (ids 0 to 9).
const Vocabulary = 10

// Names lists the models Build knows.
func Names() []string { return []string{MLP, Demo, Seq, Multi, Fixed, Dtypes} }

// Build returns the ONNX bytes of the named model. The bytes are the same on
// every call: weights come from a fixed seed.
func Build(name string) ([]byte, error) {
	var g *graph
	switch name {
	case MLP:
		g = buildMLP()
	case Demo:
		g = buildDemo()
	case Seq:
		g = buildSeq()
	case Multi:
		g = buildMulti()
	case Fixed:
		g = buildFixed()
	case Dtypes:
		g = buildDtypes()
	default:
		return nil, fmt.Errorf("onnxtest: no model %q", name)
	}
	m := &onnxpb.ModelProto{
		IrVersion:       8,
		ProducerName:    "streamer testdata/gen",
		ProducerVersion: "1",
		DocString:       g.doc,
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: "", Version: 17}},
		Graph:           g.proto(name),
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// graph collects nodes, weights and the interface of one model.
type graph struct {
	doc     string
	nodes   []*onnxpb.NodeProto
	weights []*onnxpb.TensorProto
	inputs  []*onnxpb.ValueInfoProto
	outputs []*onnxpb.ValueInfoProto
	rng     *rand.Rand
}

func newGraph(seed uint64, doc string) *graph {
	return &graph{doc: doc, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

func (g *graph) proto(name string) *onnxpb.GraphProto {
	return &onnxpb.GraphProto{
		Name:        name,
		Node:        g.nodes,
		Initializer: g.weights,
		Input:       g.inputs,
		Output:      g.outputs,
	}
}

// node adds an operator; attributes are given as name/value pairs.
func (g *graph) node(op string, inputs []string, output string, attrs ...*onnxpb.AttributeProto) string {
	g.nodes = append(g.nodes, &onnxpb.NodeProto{
		OpType:    op,
		Name:      fmt.Sprintf("%s_%d", op, len(g.nodes)),
		Input:     inputs,
		Output:    []string{output},
		Attribute: attrs,
	})
	return output
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}
}

// randomWeight adds a float32 weight drawn from a normal distribution with
// standard deviation std.
func (g *graph) randomWeight(name string, std float64, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(g.rng.NormFloat64() * std)
	}
	return g.floatWeight(name, data, dims...)
}

func (g *graph) floatWeight(name string, data []float32, dims ...int64) string {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	g.weights = append(g.weights, &onnxpb.TensorProto{
		Name: name, Dims: dims, DataType: int32(onnxpb.TensorProto_FLOAT), RawData: raw,
	})
	return name
}

func (g *graph) int64Weight(name string, data []int64, dims ...int64) string {
	raw := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	g.weights = append(g.weights, &onnxpb.TensorProto{
		Name: name, Dims: dims, DataType: int32(onnxpb.TensorProto_INT64), RawData: raw,
	})
	return name
}

func (g *graph) int32Weight(name string, data []int32, dims ...int64) string {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	g.weights = append(g.weights, &onnxpb.TensorProto{
		Name: name, Dims: dims, DataType: int32(onnxpb.TensorProto_INT32), RawData: raw,
	})
	return name
}

// value declares a graph input or output; dims are int64 sizes or string
// names of dynamic axes.
func value(name string, elem onnxpb.TensorProto_DataType, dims ...any) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch d := d.(type) {
		case int:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}
		case string:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}
		default:
			panic(fmt.Sprintf("onnxtest: dimension %v is neither int nor string", d))
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{
		Name: name,
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(elem), Shape: shape},
		}},
	}
}

const float32Type = onnxpb.TensorProto_FLOAT

// dense adds x·W + b, for x [batch, in], with weights of standard deviation
// gain/√in.
func (g *graph) dense(x, prefix string, in, out int64, gain float64) string {
	w := g.randomWeight(prefix+".weight", gain/math.Sqrt(float64(in)), in, out)
	b := g.randomWeight(prefix+".bias", 0.1, out)
	return g.node("Gemm", []string{x, w, b}, prefix+".out")
}

func buildMLP() *graph {
	g := newGraph(1, "A small MLP classifier: 4 features, one hidden ReLU layer of 16, softmax over 3 classes.")
	g.inputs = append(g.inputs, value("features", float32Type, "batch", 4))
	h := g.node("Relu", []string{g.dense("features", "hidden", 4, 16, 1)}, "hidden.relu")
	logits := g.dense(h, "classifier", 16, 3, 1)
	g.node("Softmax", []string{logits}, "probs", intAttr("axis", -1))
	g.outputs = append(g.outputs, value("probs", float32Type, "batch", 3))
	return g
}

func buildDemo() *graph {
	g := newGraph(2, fmt.Sprintf("Demo classifier: 4 features, a residual tower of %d tanh layers of width %d sharing one weight matrix, softmax over 3 classes.", DemoDepth, DemoWidth))
	g.inputs = append(g.inputs, value("features", float32Type, "batch", 4))
	h := g.node("Tanh", []string{g.dense("features", "embed", 4, DemoWidth, 1)}, "embed.tanh")
	w := g.randomWeight("block.weight", 0.5/math.Sqrt(DemoWidth), DemoWidth, DemoWidth)
	b := g.randomWeight("block.bias", 0.1, DemoWidth)
	for l := range DemoDepth {
		z := g.node("Gemm", []string{h, w, b}, fmt.Sprintf("block%d.gemm", l))
		t := g.node("Tanh", []string{z}, fmt.Sprintf("block%d.tanh", l))
		h = g.node("Add", []string{h, t}, fmt.Sprintf("block%d.out", l))
	}
	// The tower's activations grow with its depth; a small classifier keeps
	// the probabilities away from 0 and 1.
	logits := g.dense(h, "classifier", DemoWidth, 3, 0.04)
	g.node("Softmax", []string{logits}, "probs", intAttr("axis", -1))
	g.outputs = append(g.outputs, value("probs", float32Type, "batch", 3))
	return g
}

func buildSeq() *graph {
	g := newGraph(3, "Per-step map of a sequence: y = tanh(x·W + b).")
	g.inputs = append(g.inputs, value("x", float32Type, "batch", "seq", 3))
	w := g.randomWeight("step.weight", 0.6, 3, 4)
	b := g.randomWeight("step.bias", 0.1, 4)
	z := g.node("MatMul", []string{"x", w}, "step.matmul")
	z = g.node("Add", []string{z, b}, "step.add")
	g.node("Tanh", []string{z}, "y")
	g.outputs = append(g.outputs, value("y", float32Type, "batch", "seq", 4))
	return g
}

func buildMulti() *graph {
	g := newGraph(4, "Several inputs and outputs of different dtypes: a masked mean embedding and scalar arithmetic.")
	g.inputs = append(g.inputs,
		value("ids", onnxpb.TensorProto_INT64, "batch", "seq"),
		value("mask", onnxpb.TensorProto_BOOL, "batch", "seq"),
		value("scale", onnxpb.TensorProto_DOUBLE),
		value("offset", onnxpb.TensorProto_INT32, "batch"),
	)
	table := g.randomWeight("embedding", 1, Vocabulary, 4)
	axis1 := g.int64Weight("axis1", []int64{1}, 1)
	axis2 := g.int64Weight("axis2", []int64{2}, 1)
	one := g.floatWeight("one", []float32{1})
	oneInt := g.int32Weight("one_int32", []int32{1})

	emb := g.node("Gather", []string{table, "ids"}, "embedded")
	maskf := g.node("Cast", []string{"mask"}, "mask.float", intAttr("to", int64(onnxpb.TensorProto_FLOAT)))
	mask3 := g.node("Unsqueeze", []string{maskf, axis2}, "mask.expanded")
	masked := g.node("Mul", []string{emb, mask3}, "embedded.masked")
	summed := g.node("ReduceSum", []string{masked, axis1}, "embedded.sum", intAttr("keepdims", 0))
	steps := g.node("ReduceSum", []string{maskf, axis1}, "mask.sum", intAttr("keepdims", 0))
	steps = g.node("Max", []string{steps, one}, "mask.sum.atleast1")
	steps = g.node("Unsqueeze", []string{steps, axis1}, "mask.sum.expanded")
	g.node("Div", []string{summed, steps}, "pooled")

	maskInt := g.node("Cast", []string{"mask"}, "mask.int64", intAttr("to", int64(onnxpb.TensorProto_INT64)))
	g.node("ReduceSum", []string{maskInt, axis1}, "count", intAttr("keepdims", 0))
	offsetD := g.node("Cast", []string{"offset"}, "offset.double", intAttr("to", int64(onnxpb.TensorProto_DOUBLE)))
	g.node("Mul", []string{offsetD, "scale"}, "scaled")
	offsetL := g.node("Cast", []string{"offset"}, "offset.int64", intAttr("to", int64(onnxpb.TensorProto_INT64)))
	g.node("Greater", []string{"count", offsetL}, "above")
	g.node("Add", []string{"offset", oneInt}, "next")

	g.outputs = append(g.outputs,
		value("pooled", float32Type, "batch", 4),
		value("count", onnxpb.TensorProto_INT64, "batch"),
		value("scaled", onnxpb.TensorProto_DOUBLE, "batch"),
		value("above", onnxpb.TensorProto_BOOL, "batch"),
		value("next", onnxpb.TensorProto_INT32, "batch"),
	)
	return g
}

func buildFixed() *graph {
	g := newGraph(5, "A model exported with its batch axis fixed at 1: y = tanh(x·W + b), energy = sum(y²).")
	g.inputs = append(g.inputs, value("x", float32Type, 1, 4))
	z := g.dense("x", "layer", 4, 2, 1)
	g.node("Tanh", []string{z}, "y")
	g.node("ReduceSumSquare", []string{"y"}, "energy", intAttr("keepdims", 0))
	g.outputs = append(g.outputs, value("y", float32Type, 1, 2), value("energy", float32Type))
	return g
}
