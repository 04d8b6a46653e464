package onnxtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
)

// Reference computes what a test model answers, with plain loops in float64
// over the weights read from the model file.
type Reference struct {
	weights map[string]weight
	// identities maps the output of each Identity node to its input.
	identities map[string]string
}

type weight struct {
	dims []int64
	f32  []float32
	i64  []int64
	i32  []int32
}

// Load reads the weights of the model file at path.
func Load(path string) (*Reference, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadBytes(data)
}

// LoadBytes reads the weights of a model's ONNX bytes.
func LoadBytes(data []byte) (*Reference, error) {
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("onnxtest: parse model: %w", err)
	}
	r := &Reference{weights: map[string]weight{}, identities: map[string]string{}}
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() == "Identity" && len(n.GetInput()) == 1 && len(n.GetOutput()) == 1 {
			r.identities[n.GetOutput()[0]] = n.GetInput()[0]
		}
	}
	for _, t := range m.GetGraph().GetInitializer() {
		w := weight{dims: t.GetDims()}
		raw := t.GetRawData()
		switch onnxpb.TensorProto_DataType(t.GetDataType()) {
		case onnxpb.TensorProto_FLOAT:
			for i := 0; i+4 <= len(raw); i += 4 {
				w.f32 = append(w.f32, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
			}
		case onnxpb.TensorProto_INT64:
			for i := 0; i+8 <= len(raw); i += 8 {
				w.i64 = append(w.i64, int64(binary.LittleEndian.Uint64(raw[i:])))
			}
		case onnxpb.TensorProto_INT32:
			for i := 0; i+4 <= len(raw); i += 4 {
				w.i32 = append(w.i32, int32(binary.LittleEndian.Uint32(raw[i:])))
			}
		default:
			return nil, fmt.Errorf("onnxtest: weight %q has data type %d", t.GetName(), t.GetDataType())
		}
		r.weights[t.GetName()] = w
	}
	return r, nil
}

// float returns a float32 weight, panicking when the file lacks it: the
// reference and the generator disagree, which is a bug in this package.
func (r *Reference) float(name string) weight {
	w, ok := r.weights[name]
	if !ok || w.f32 == nil {
		panic(fmt.Sprintf("onnxtest: the model has no float weight %q", name))
	}
	return w
}

// dense computes x·W + b for one row x, W [in, out].
func (r *Reference) dense(prefix string, x []float64) []float64 {
	return affine(r.float(prefix+".weight"), r.float(prefix+".bias"), x)
}

func affine(w, b weight, x []float64) []float64 {
	in, out := int(w.dims[0]), int(w.dims[1])
	if len(x) != in {
		panic(fmt.Sprintf("onnxtest: %d values for a layer of %d inputs", len(x), in))
	}
	y := make([]float64, out)
	for j := range out {
		sum := float64(b.f32[j])
		for i := range in {
			sum += x[i] * float64(w.f32[i*out+j])
		}
		y[j] = sum
	}
	return y
}

func widen(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func softmax(x []float64) []float64 {
	top := math.Inf(-1)
	for _, v := range x {
		top = math.Max(top, v)
	}
	var sum float64
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = math.Exp(v - top)
		sum += y[i]
	}
	for i := range y {
		y[i] /= sum
	}
	return y
}

func apply(x []float64, f func(float64) float64) []float64 {
	for i, v := range x {
		x[i] = f(v)
	}
	return x
}

// MLP answers one item of the MLP model: 4 features → 3 probabilities.
func (r *Reference) MLP(features []float32) []float64 {
	h := apply(r.dense("hidden", widen(features)), func(v float64) float64 { return math.Max(v, 0) })
	return softmax(r.dense("classifier", h))
}

// Demo answers one item of the demo model: 4 features → 3 probabilities.
func (r *Reference) Demo(features []float32) []float64 {
	h := apply(r.dense("embed", widen(features)), math.Tanh)
	w, b := r.float("block.weight"), r.float("block.bias")
	for range DemoDepth {
		z := apply(affine(w, b, h), math.Tanh)
		for i := range h {
			h[i] += z[i]
		}
	}
	return softmax(r.dense("classifier", h))
}

// Seq answers one item of the seq model: steps of 3 values → steps of 4.
func (r *Reference) Seq(steps [][]float32) [][]float64 {
	out := make([][]float64, len(steps))
	for t, x := range steps {
		out[t] = apply(r.dense("step", widen(x)), math.Tanh)
	}
	return out
}

// MultiOut is one item's answer from the multi model.
type MultiOut struct {
	Pooled []float64
	Count  int64
	Scaled float64
	Above  bool
	Next   int32
}

// Multi answers one item of the multi model.
func (r *Reference) Multi(ids []int64, mask []bool, scale float64, offset int32) MultiOut {
	table := r.float("embedding")
	width := int(table.dims[1])
	out := MultiOut{Pooled: make([]float64, width)}
	for t, id := range ids {
		if !mask[t] {
			continue
		}
		out.Count++
		for j := range width {
			out.Pooled[j] += float64(table.f32[int(id)*width+j])
		}
	}
	for j := range out.Pooled {
		out.Pooled[j] /= math.Max(float64(out.Count), 1)
	}
	out.Scaled = float64(offset) * scale
	out.Above = out.Count > int64(offset)
	out.Next = offset + 1
	return out
}

// Fixed answers one item of the fixed-batch model: 4 values → y (2 values)
// and energy, the sum of y's squares.
func (r *Reference) Fixed(x []float32) (y []float64, energy float64) {
	y = apply(r.dense("layer", widen(x)), math.Tanh)
	for _, v := range y {
		energy += v * v
	}
	return y, energy
}

// Dtypes answers one item of the dtypes model: each output is the input its
// Identity node reads, element for element. inputs maps input names to
// their little-endian elements; the answer maps output names to theirs.
func (r *Reference) Dtypes(inputs map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for _, c := range DtypeCases() {
		in, ok := r.identities[c.Output]
		if !ok {
			panic(fmt.Sprintf("onnxtest: the model has no Identity node giving %q", c.Output))
		}
		out[c.Output] = append([]byte(nil), inputs[in]...)
	}
	return out
}

// RepoRoot finds the repository's root from the working directory: the
// nearest folder above it with streamer's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/streamer-dev/streamer\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("onnxtest: no streamer go.mod above the working directory")
}

// Path returns the path of the named model file in the repository: the demo
// model next to the package that embeds it, the others in testdata/models.
func Path(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if name == Demo {
		return filepath.Join(root, "model", "onnx", "demo", "demo.onnx"), nil
	}
	return filepath.Join(root, "testdata", "models", name+".onnx"), nil
}
