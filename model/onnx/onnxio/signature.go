// Package onnxio is an ONNX model's edge: it reads the model's inputs and
// outputs from the file, without its weights and without ONNX Runtime, and
// turns request items (JSON or msgpack) into the tensors a worker stacks into
// batches, refusing any item that does not fit the model before it is
// queued. It also encodes a worker's per-item outputs and renders them back
// as JSON.
//
// An item is one sample without its batch axis. A model with one input takes
// the bare value ([[0.1, 0.2], ...]); any model also takes an object keyed by
// input name. msgpack bodies may send a tensor as a map {"dtype", "shape",
// "data"} with data the little-endian element bytes.
package onnxio

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
)

// ErrNotONNX is returned by Parse for bytes that are not an ONNX model.
var ErrNotONNX = errors.New("not an ONNX model")

// Dim is one axis of a declared shape.
type Dim struct {
	// Size is the axis length when it is fixed; 0 when it is dynamic.
	Size int64
	// Param is a dynamic axis's symbolic name ("batch", "seq"), if it has one.
	// Axes of different tensors with the same name have the same length.
	Param string
}

// Dynamic reports whether the axis may take any length.
func (d Dim) Dynamic() bool { return d.Size <= 0 }

// String is the size, the symbolic name, or "?" for an unnamed dynamic axis.
func (d Dim) String() string {
	switch {
	case !d.Dynamic():
		return strconv.FormatInt(d.Size, 10)
	case d.Param != "":
		return d.Param
	}
	return "?"
}

// MarshalJSON writes a fixed axis as its size, a named dynamic axis as its
// name and an unnamed one as null.
func (d Dim) MarshalJSON() ([]byte, error) {
	switch {
	case !d.Dynamic():
		return strconv.AppendInt(nil, d.Size, 10), nil
	case d.Param != "":
		return json.Marshal(d.Param)
	}
	return []byte("null"), nil
}

// Shape is a declared shape.
type Shape []Dim

// String writes the shape as "[batch, 4]".
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Port is one input or output of the model.
type Port struct {
	// Name is the graph's name for the value.
	Name string `json:"name"`
	// DType is the element type.
	DType DType `json:"dtype"`
	// Shape is the declared shape, batch axis included. It is nil for an
	// output whose shape the model does not declare.
	Shape Shape `json:"shape"`
	// Batched reports whether the leading axis is the batch axis; an
	// unbatched input (a scalar such as a sample rate) is taken whole from
	// each item.
	Batched bool `json:"batched"`
	// ItemShape is Shape without the batch axis: what one item carries.
	ItemShape Shape `json:"item_shape"`
}

// describe writes "float32 [seq, 3]" for error messages.
func (p Port) describe() string {
	return p.DType.String() + " " + p.ItemShape.String()
}

// BatchMode is how items of a model are stacked into a run.
type BatchMode string

// The batch modes.
const (
	// Stacked: the inputs have a dynamic leading axis; items with the same
	// batch key run together, stacked along it.
	Stacked BatchMode = "stacked"
	// OneByOne: the model cannot take several items in one run (its batch
	// axis is fixed at 1, it has none, or an output has none); a batch's
	// items run one after the other.
	OneByOne BatchMode = "one-by-one"
)

// Signature is what a model takes and gives.
type Signature struct {
	// Inputs are the values a caller feeds, in the graph's order.
	Inputs []Port `json:"inputs"`
	// Outputs are the values the model answers, in the graph's order.
	Outputs []Port `json:"outputs"`
	// Mode is how items are run.
	Mode BatchMode `json:"mode"`
	// Why explains a OneByOne mode.
	Why string `json:"why,omitempty"`
	// IRVersion and Opset describe the file (Opset is the default domain's).
	IRVersion int64 `json:"ir_version"`
	Opset     int64 `json:"opset"`
	// Producer is the tool that wrote the file.
	Producer string `json:"producer,omitempty"`
	// ExternalData lists the files that hold weights kept outside the
	// model file, as the file names them: relative to its folder.
	ExternalData []string `json:"-"`
	// Defaulted lists the graph inputs that are weights too: their value
	// is in the file, and they are not served as inputs (see Fixed).
	Defaulted []string `json:"-"`
}

// Fixed says why a caller may not send the input named name, when the
// model file gives it a value of its own ("" for a name it does not know
// at all). Exporters list weights among the inputs (PyTorch's
// keep_initializers_as_inputs), which ONNX Runtime then lets a caller
// override; served, every weight would be an input.
func (s *Signature) Fixed(name string) string {
	if !slices.Contains(s.Defaulted, name) {
		return ""
	}
	return fmt.Sprintf("input %q has a value in the model file (a weight, listed among its inputs as some exporters list weights), and streamer serves the model with that value: it takes no other", name)
}

// Interface spells the model's inputs and outputs, with their names, dtypes
// and declared shapes: "inputs x float32 [batch, 3]; outputs y float32
// [batch, 4]". Two models with equal interfaces take and give the same.
func (s *Signature) Interface() string {
	var b strings.Builder
	for i, ports := range [][]Port{s.Inputs, s.Outputs} {
		b.WriteString([]string{"inputs", "; outputs"}[i])
		for j, p := range ports {
			if j > 0 {
				b.WriteByte(',')
			}
			shape := "(no shape)"
			if p.Shape != nil {
				shape = p.Shape.String()
			}
			fmt.Fprintf(&b, " %s %s %s", p.Name, p.DType, shape)
		}
	}
	return b.String()
}

// Input returns the index of the input called name, or -1.
func (s *Signature) Input(name string) int {
	for i, p := range s.Inputs {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// externalData is TensorProto's data_location of a weight kept in a file
// of its own.
const externalData = 1

// Parse reads the signature of the ONNX model in data. It reads only the
// graph's interface; the weights are skipped.
func Parse(data []byte) (*Signature, error) {
	var m onnxpb.ModelHeader
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotONNX, err)
	}
	if m.GetIrVersion() <= 0 || m.GetGraph() == nil || len(m.GetOpsetImport()) == 0 {
		return nil, fmt.Errorf("%w: it has no ir_version, graph or opset_import", ErrNotONNX)
	}
	sig := &Signature{IRVersion: m.GetIrVersion(), Producer: m.GetProducerName()}
	for _, o := range m.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			sig.Opset = o.GetVersion()
		}
	}
	weights := map[string]bool{}
	for _, w := range m.GetGraph().GetInitializer() {
		weights[w.GetName()] = true
		if w.GetDataLocation() != externalData {
			continue
		}
		for _, e := range w.GetExternalData() {
			if e.GetKey() == "location" && !slices.Contains(sig.ExternalData, e.GetValue()) {
				sig.ExternalData = append(sig.ExternalData, e.GetValue())
			}
		}
	}
	for _, vi := range m.GetGraph().GetInput() {
		if weights[vi.GetName()] {
			// A weight listed as an input by an old exporter.
			sig.Defaulted = append(sig.Defaulted, vi.GetName())
			continue
		}
		p, err := port(vi, true)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", vi.GetName(), err)
		}
		sig.Inputs = append(sig.Inputs, p)
	}
	for _, vi := range m.GetGraph().GetOutput() {
		p, err := port(vi, false)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", vi.GetName(), err)
		}
		sig.Outputs = append(sig.Outputs, p)
	}
	if len(sig.Inputs) == 0 || len(sig.Outputs) == 0 {
		return nil, fmt.Errorf("the model has %d inputs and %d outputs; streamer serves models with at least one of each", len(sig.Inputs), len(sig.Outputs))
	}
	sig.decideBatching()
	for _, p := range sig.Outputs {
		if n := p.fixedBytes(); n > MaxAnswerBytes {
			return nil, fmt.Errorf("output %q (%s): one item's answer would take %.3g bytes, beyond the %d MiB a worker sends back in one answer", p.Name, p.describe(), n, MaxAnswerBytes>>20)
		}
	}
	return sig, nil
}

// MaxAnswerBytes bounds the bytes of one batch's answers: a worker sends
// them back in one frame, of at most the worker pipe's default frame
// limit (ipc.DefaultMaxFrame). A model whose declared fixed axes make one
// item's output larger is refused when it is read, rather than have the
// worker allocate it on every request.
const MaxAnswerBytes = 256 << 20

// fixedBytes is the size one item's value takes along its fixed axes
// (dynamic ones counted as 1), as a float so that no product overflows.
func (p Port) fixedBytes() float64 {
	n := float64(p.DType.Size())
	for _, d := range p.ItemShape {
		if !d.Dynamic() {
			n *= float64(d.Size)
		}
	}
	return n
}

// port reads one declared value. Inputs must declare a shape: it is what an
// item is checked against.
func port(vi *onnxpb.ValueInfoProto, input bool) (Port, error) {
	p := Port{Name: vi.GetName()}
	if p.Name == "" {
		return p, errors.New("the value has no name")
	}
	t := vi.GetType()
	if t.GetTensorType() == nil {
		kind := "a value of unknown type"
		switch {
		case t.GetSequenceType() != nil:
			kind = "a sequence"
		case t.GetMapType() != nil:
			kind = "a map"
		case t.GetSparseTensorType() != nil:
			kind = "a sparse tensor"
		case t.GetOptionalType() != nil:
			kind = "an optional"
		}
		if t.GetSequenceType() != nil {
			// The sequence most often met.
			return p, errors.New("it is a sequence; streamer serves dense tensors only (a classifier converted by sklearn-onnx answers its probabilities as a sequence of maps, unless converted with options={'zipmap': False}, which answers them as a tensor)")
		}
		return p, fmt.Errorf("it is %s; streamer serves dense tensors only", kind)
	}
	dtype, err := dtypeOfONNX(t.GetTensorType().GetElemType())
	if err != nil {
		return p, err
	}
	p.DType = dtype
	shape := t.GetTensorType().GetShape()
	if shape == nil {
		if input {
			return p, errors.New("the model does not declare its shape; re-export it with shapes")
		}
		return p, nil
	}
	p.Shape = Shape{}
	for a, d := range shape.GetDim() {
		dim := Dim{Param: d.GetDimParam()}
		if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
			switch {
			case v.DimValue > 0:
				dim = Dim{Size: v.DimValue}
			case v.DimValue == 0:
				// Not a dynamic axis: an axis declared 0 long holds nothing,
				// and no item (every axis at least 1 long) could fit it.
				return p, fmt.Errorf("axis %d is declared 0 long (dim_value 0), and streamer serves no empty values; re-export the model with that axis dynamic (a dim_param) or its real length", a)
			}
		}
		p.Shape = append(p.Shape, dim)
	}
	return p, nil
}

// decideBatching finds the batch axis. Inputs whose leading axis is dynamic
// are stacked along it, unless the names the file gives its axes say
// otherwise. Only a name chosen for the axis counts (see chosenName): the
// names exporters make up for axes they were not told of say nothing.
//
//   - When some input names its leading axis like a batch axis ("batch",
//     "batch_size", "N"), an input leading with an axis of another chosen
//     name (a table's "vocab") is taken whole, not stacked.
//   - An input with an axis further in named like a batch axis, its
//     leading axis not (a time-major [seq, batch, 2]), has items run one
//     by one, each input taken whole.
//
// When no input has a dynamic leading axis, inputs whose leading axis is
// fixed at 1 carry it and items run one by one. Inputs left (scalars,
// fixed leading axes) are taken whole from each item. An output is cut
// along its leading axis unless its names say that is not the batch axis
// (see leadsWithBatch); such an output makes items run one by one.
func (s *Signature) decideBatching() {
	leadingDynamic := func(p Port) bool { return len(p.Shape) > 0 && p.Shape[0].Dynamic() }
	leadingOne := func(p Port) bool { return len(p.Shape) > 0 && p.Shape[0].Size == 1 }
	batchNames := s.batchNames()
	batched := func(p Port) bool {
		if !leadingDynamic(p) {
			return false
		}
		name := chosenName(p.Shape[0].Param)
		return len(batchNames) == 0 || name == "" || batchNames[name]
	}
	s.Mode = Stacked
	switch {
	case !anyPort(s.Inputs, leadingDynamic):
		s.Mode = OneByOne
		if anyPort(s.Inputs, leadingOne) {
			batched = leadingOne
			s.Why = "the model's batch axis is fixed at 1"
		} else {
			batched = func(Port) bool { return false }
			s.Why = "the model's inputs have no batch axis"
		}
	default:
		for _, p := range s.Inputs {
			if a, ok := batchLikeInside(p); ok {
				s.Mode = OneByOne
				s.Why = fmt.Sprintf("input %q's axis %d is named %s, but its leading axis is %s, so the leading axis is not taken for the batch axis; each input is taken whole",
					p.Name, a, p.Shape[a].Param, p.Shape[0])
				batched = func(Port) bool { return false }
				break
			}
		}
	}
	for i := range s.Inputs {
		s.Inputs[i].setBatched(batched(s.Inputs[i]))
	}
	for i := range s.Outputs {
		p := &s.Outputs[i]
		// An output with no declared shape is assumed to carry the batch
		// axis, as exporters write it; the worker checks its length.
		switch {
		case p.Shape == nil:
			p.setBatched(s.Mode == Stacked)
		case batched(*p) && leadsWithBatch(*p, batchNames):
			p.setBatched(true)
		default:
			p.setBatched(false)
		}
		if s.Mode == Stacked && !p.Batched {
			s.Mode = OneByOne
			s.Why = fmt.Sprintf("output %q has no batch axis, so items cannot share a run", p.Name)
			if len(p.Shape) > 0 && p.Shape[0].Dynamic() {
				s.Why = fmt.Sprintf("output %q leads with axis %s, which its names say is not the batch axis, so items cannot share a run", p.Name, p.Shape[0])
			}
		}
	}
}

// UnprovenOutputs lists, for a stacked model, the outputs cut along a
// leading axis that nothing in the file names the batch axis: an output
// with no declared shape, or one whose dynamic leading axis has a name no
// stacked input's leading axis shares and that is not named like a batch
// axis (the exporters' made-up names among them). Such an axis may be
// something else: a count of detections, or what is left of a reduction
// over the batch. Whether it is shows only as the model runs.
func (s *Signature) UnprovenOutputs() []int {
	if s.Mode != Stacked {
		return nil
	}
	leading := map[string]bool{}
	for _, p := range s.Inputs {
		if p.Batched && p.Shape[0].Param != "" {
			leading[p.Shape[0].Param] = true
		}
	}
	var unproven []int
	for k, p := range s.Outputs {
		if !p.Batched {
			continue
		}
		if p.Shape == nil || p.Shape[0].Dynamic() && !leading[p.Shape[0].Param] && !batchLike(chosenName(p.Shape[0].Param)) {
			unproven = append(unproven, k)
		}
	}
	return unproven
}

// Unbatch takes output k for one without a batch axis, found so as the
// model ran (see UnprovenOutputs): each item gets it whole, so items run
// one by one, for the reason why.
func (s *Signature) Unbatch(k int, why string) {
	s.Outputs[k].setBatched(false)
	s.Mode = OneByOne
	s.Why = why
}

// batchNames are the chosen names of the inputs' dynamic leading axes that
// are named like a batch axis: empty when no input names its batch axis.
func (s *Signature) batchNames() map[string]bool {
	names := map[string]bool{}
	for _, p := range s.Inputs {
		if len(p.Shape) > 0 && p.Shape[0].Dynamic() && batchLike(chosenName(p.Shape[0].Param)) {
			names[p.Shape[0].Param] = true
		}
	}
	return names
}

// leadsWithBatch reports whether the output's leading axis is the batch
// axis: fixed (at 1, in a one-by-one model), or dynamic with no axis
// further in named like a batch axis, and with a name that is made up,
// like a batch axis, or one of batchNames when the inputs name theirs.
func leadsWithBatch(p Port, batchNames map[string]bool) bool {
	if !p.Shape[0].Dynamic() {
		return true
	}
	if _, ok := batchLikeInside(p); ok {
		return false
	}
	name := chosenName(p.Shape[0].Param)
	return name == "" || len(batchNames) == 0 || batchNames[name] || batchLike(name)
}

// batchLikeInside returns an axis past the leading one that is named like a
// batch axis, when the leading axis does not have that name.
func batchLikeInside(p Port) (int, bool) {
	for a, d := range p.Shape {
		if a > 0 && batchLike(chosenName(d.Param)) && (!p.Shape[0].Dynamic() || p.Shape[0].Param != d.Param) {
			return a, true
		}
	}
	return 0, false
}

// batchLike reports whether an axis name says the axis is a batch axis.
func batchLike(param string) bool {
	lower := strings.ToLower(param)
	return strings.Contains(lower, "batch") || lower == "bs" || param == "N"
}

// chosenName is an axis's name when somebody chose it, and "" for the
// names exporters make up for the dynamic axes they were not told of:
// PyTorch's "input_dynamic_axes_1" and "Addoutput_dim_0", TensorFlow's
// "unk__12". Those say nothing of what the axis is.
func chosenName(param string) string {
	if strings.HasPrefix(param, "unk__") || strings.Contains(param, "dynamic_axes_") || strings.Contains(param, "output_dim_") {
		return ""
	}
	return param
}

func (p *Port) setBatched(b bool) {
	p.Batched = b
	p.ItemShape = p.Shape
	if b && len(p.Shape) > 0 {
		p.ItemShape = p.Shape[1:]
	}
}

func anyPort(ports []Port, f func(Port) bool) bool {
	for _, p := range ports {
		if f(p) {
			return true
		}
	}
	return false
}
