package onnxtest

import (
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
)

// Custom is a small model made for one test: an odd interface (a
// time-major input, an output that lies about its shape) that none of the
// committed models has. Its graph is the nodes as given; its weights are
// one-dimensional int64 constants (axes, repeats).
type Custom struct {
	Inputs  []Value
	Outputs []Value
	Nodes   []Node
	// Int64s are weights by name.
	Int64s map[string][]int64
	// External names, by weight, the file that Write keeps the weight's
	// data in, beside the model, as exporters keep large weights.
	External map[string]string
}

// Value declares a graph input or output. Dims are int or int64 for fixed
// axes and string for named dynamic ones; NoShape declares no shape at all.
type Value struct {
	Name    string
	DType   onnxpb.TensorProto_DataType
	Dims    []any
	NoShape bool
}

// Node is one operator. Ints are its integer attributes, IntLists its
// integer-list ones.
type Node struct {
	Op       string
	Inputs   []string
	Output   string
	Ints     map[string]int64
	IntLists map[string][]int64
}

// Build returns the model's ONNX bytes. Its External weights are left
// out: Write writes them.
func (c Custom) Build() ([]byte, error) {
	data, _, err := c.build()
	return data, err
}

// build returns the model's ONNX bytes, and the data of its External
// weights by file name.
func (c Custom) build() ([]byte, map[string][]byte, error) {
	g := &onnxpb.GraphProto{Name: "custom"}
	for _, v := range c.Inputs {
		vi, err := v.proto()
		if err != nil {
			return nil, nil, err
		}
		g.Input = append(g.Input, vi)
	}
	for _, v := range c.Outputs {
		vi, err := v.proto()
		if err != nil {
			return nil, nil, err
		}
		g.Output = append(g.Output, vi)
	}
	for i, n := range c.Nodes {
		node := &onnxpb.NodeProto{OpType: n.Op, Name: fmt.Sprintf("%s_%d", n.Op, i), Input: n.Inputs, Output: []string{n.Output}}
		for name, v := range n.Ints {
			node.Attribute = append(node.Attribute, intAttr(name, v))
		}
		for name, v := range n.IntLists {
			node.Attribute = append(node.Attribute, &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INTS, Ints: v})
		}
		g.Node = append(g.Node, node)
	}
	weights := &graph{}
	for name, v := range c.Int64s {
		weights.int64Weight(name, v, int64(len(v)))
	}
	g.Initializer = weights.weights
	files := map[string][]byte{}
	for _, w := range g.Initializer {
		file, ok := c.External[w.GetName()]
		if !ok {
			continue
		}
		// TensorProto's external_data (13: "location" and the file) and
		// data_location (14: EXTERNAL, 1), which onnxpb does not declare.
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, "location")
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, file)
		unknown := protowire.AppendTag(nil, 13, protowire.BytesType)
		unknown = protowire.AppendBytes(unknown, entry)
		unknown = protowire.AppendTag(unknown, 14, protowire.VarintType)
		unknown = protowire.AppendVarint(unknown, 1)
		files[file] = append(files[file], w.RawData...)
		w.RawData = nil
		w.ProtoReflect().SetUnknown(unknown)
	}
	m := &onnxpb.ModelProto{
		IrVersion:    8,
		ProducerName: "streamer onnxtest.Custom",
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: "", Version: 17}},
		Graph:        g,
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return data, files, err
}

// Write builds the model into dir/name.onnx and returns the file's path.
func (c Custom) Write(dir, name string) (string, error) {
	data, files, err := c.build()
	if err != nil {
		return "", err
	}
	for file, weights := range files {
		if err := os.WriteFile(filepath.Join(dir, file), weights, 0o644); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, name+".onnx")
	return path, os.WriteFile(path, data, 0o644)
}

func (v Value) proto() (*onnxpb.ValueInfoProto, error) {
	if v.NoShape {
		return &onnxpb.ValueInfoProto{Name: v.Name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(v.DType)},
		}}}, nil
	}
	dims := make([]any, len(v.Dims))
	for i, d := range v.Dims {
		switch d := d.(type) {
		case int64:
			dims[i] = int(d)
		case int, string:
			dims[i] = d
		default:
			return nil, fmt.Errorf("onnxtest: %s: dimension %v is neither an integer nor a string", v.Name, d)
		}
	}
	return value(v.Name, v.DType, dims...), nil
}
