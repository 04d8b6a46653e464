package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/streamer-dev/streamer/internal/wire"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/plugin"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// modelVersion is the one version of the served model the v2 routes know.
const modelVersion = "1"

// The v2 view of a model that takes any msgpack value: one BYTES input and
// one BYTES output, one item per element.
const (
	bytesInput    = "input"
	bytesOutput   = "output"
	datatypeBytes = "BYTES"
)

// tensorsFor returns the served model as the Open Inference Protocol sees
// it, answering to name: an ONNX model's inputs and outputs, checked by the
// codec codecFor gave it; for the built-ins and plugins, one BYTES input
// and one BYTES output.
func tensorsFor(spec model.Spec, codec httpapi.Codec, name string) (httpapi.TensorModel, error) {
	meta := httpapi.ModelMetadata{Name: name, Versions: []string{modelVersion}}
	if c, ok := codec.(*onnxio.Codec); ok {
		m, err := onnxio.NewTensorModel(c)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", name, err)
		}
		meta.Fixed = c.Signature().Fixed
		return newONNXTensors(meta, m), nil
	}
	meta.Platform = "streamer_" + spec.Runner
	spec1 := httpapi.TensorSpec{Datatype: datatypeBytes, Shape: []int64{-1}, Batched: true}
	in, out := spec1, spec1
	in.Name, out.Name = bytesInput, bytesOutput
	meta.Inputs, meta.Outputs = []httpapi.TensorSpec{in}, []httpapi.TensorSpec{out}
	return bytesTensors{meta: meta}, nil
}

// v2ModelName is the name the v2 routes answer to: --model-name when set;
// else a built-in's name (echo, sleep, chaos), an ONNX file's base name
// without .onnx (demo for the embedded demo), or a plugin binary's base
// name.
func (o serveOptions) v2ModelName(spec model.Spec) (string, error) {
	if o.v2Name != "" {
		if strings.ContainsFunc(o.v2Name, func(r rune) bool { return r == '/' || !unicode.IsGraphic(r) || unicode.IsSpace(r) }) {
			return "", fmt.Errorf("--model-name %q: want a name without '/' or spaces: it is a segment of the /v2/models/NAME path", o.v2Name)
		}
		if o.v2Name == "." || o.v2Name == ".." {
			// Clients clean such a segment out of their paths.
			return "", fmt.Errorf("--model-name %q: want a name, not a path's dot segment: a client's /v2/models/%s/... would never reach it", o.v2Name, o.v2Name)
		}
		return o.v2Name, nil
	}
	switch spec.Runner {
	case onnx.SpecRunner:
		settings, err := onnx.SettingsOf(spec)
		if err != nil {
			return "", err
		}
		base := filepath.Base(settings.Path)
		if ext := filepath.Ext(base); strings.EqualFold(ext, ".onnx") && len(base) > len(ext) {
			base = base[:len(base)-len(ext)]
		}
		return base, nil
	case plugin.Runner:
		return filepath.Base(o.plugin), nil
	}
	return spec.Runner, nil
}

// onnxTensors adapts onnxio's TensorModel, whose types mirror httpapi's
// field for field, to the HTTP layer.
type onnxTensors struct {
	meta  httpapi.ModelMetadata
	model *onnxio.TensorModel
}

func newONNXTensors(meta httpapi.ModelMetadata, m *onnxio.TensorModel) onnxTensors {
	meta.Platform = onnxio.Platform
	inputs, outputs := m.Specs()
	for _, s := range inputs {
		meta.Inputs = append(meta.Inputs, httpapi.TensorSpec(s))
	}
	for _, s := range outputs {
		meta.Outputs = append(meta.Outputs, httpapi.TensorSpec(s))
	}
	return onnxTensors{meta: meta, model: m}
}

func (m onnxTensors) Metadata() httpapi.ModelMetadata { return m.meta }

func (m onnxTensors) Item(inputs []httpapi.Tensor) ([]byte, string, error) {
	named := make([]onnxio.NamedTensor, len(inputs))
	for i, t := range inputs {
		named[i] = onnxio.NamedTensor(t)
	}
	return m.model.Item(named)
}

func (m onnxTensors) Outputs(answer []byte) ([]httpapi.Tensor, error) {
	named, err := m.model.Outputs(answer)
	if err != nil {
		return nil, err
	}
	tensors := make([]httpapi.Tensor, len(named))
	for i, t := range named {
		tensors[i] = httpapi.Tensor(t)
	}
	return tensors, nil
}

// bytesTensors is the v2 view of a model that takes any msgpack value (the
// built-ins and plugins): one BYTES input, "input", and one BYTES output,
// "output", both of shape [-1], one item per element. An element is the
// item a /predict JSON string would be: a msgpack str when it is valid
// UTF-8, else a msgpack bin. An answer that is a str or bin is the output
// element's bytes; any other value its JSON text, as /predict writes it.
type bytesTensors struct{ meta httpapi.ModelMetadata }

func (m bytesTensors) Metadata() httpapi.ModelMetadata { return m.meta }

func (m bytesTensors) Item(inputs []httpapi.Tensor) ([]byte, string, error) {
	if len(inputs) != 1 || inputs[0].Name != bytesInput {
		return nil, "", fmt.Errorf("the model's one input is %q (BYTES [-1]); got %d inputs", bytesInput, len(inputs))
	}
	in := inputs[0]
	if in.Datatype != datatypeBytes {
		return nil, "", fmt.Errorf("input %q: want datatype BYTES; got %s", bytesInput, in.Datatype)
	}
	if len(in.Shape) != 0 {
		return nil, "", fmt.Errorf("input %q: want one element per item (shape [-1]); got rows of shape %v", bytesInput, in.Shape)
	}
	element, err := oneElement(in.Data)
	if err != nil {
		return nil, "", fmt.Errorf("input %q: %w", bytesInput, err)
	}
	var item []byte
	if utf8.Valid(element) {
		item, err = msgpack.Marshal(string(element))
	} else {
		item, err = msgpack.Marshal(element)
	}
	return item, "", err
}

// oneElement reads the one BYTES element of data: its 4-byte little-endian
// length, then its bytes.
func oneElement(data []byte) ([]byte, error) {
	if len(data) < 4 {
		return nil, fmt.Errorf("BYTES data of %d bytes has no 4-byte length", len(data))
	}
	n := binary.LittleEndian.Uint32(data)
	if uint64(n) != uint64(len(data)-4) {
		return nil, fmt.Errorf("BYTES data holds %d bytes after a length of %d; want one element", len(data)-4, n)
	}
	return data[4:], nil
}

func (m bytesTensors) Outputs(answer []byte) ([]httpapi.Tensor, error) {
	element, err := answerBytes(answer)
	if err != nil {
		return nil, fmt.Errorf("model output: %w", err)
	}
	data := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(element)), uint32(len(element)))
	data = append(data, element...)
	return []httpapi.Tensor{{Name: bytesOutput, Datatype: datatypeBytes, Shape: []int64{}, Data: data}}, nil
}

// answerBytes is the element an answer stands for: a str's or bin's bytes,
// or any other value's JSON text.
func answerBytes(answer []byte) ([]byte, error) {
	if len(answer) == 0 {
		return nil, errors.New("empty answer")
	}
	if c := answer[0]; !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return wire.MsgpackToJSON(nil, answer)
	}
	r := wire.NewMsgpackReader(answer)
	defer r.Release()
	var element []byte
	var err error
	if msgpcode.IsBin(answer[0]) {
		element, err = r.Bin()
	} else {
		element, err = r.StringBytes()
	}
	if err == nil && r.Len() != 0 {
		err = fmt.Errorf("%d bytes after the value", r.Len())
	}
	return element, err
}
