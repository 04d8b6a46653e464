package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// The protocols an http run can speak.
const (
	// ProtocolPredict posts {"inputs": [item, ...]} to /predict.
	ProtocolPredict = "predict"
	// ProtocolV2 posts an Open Inference Protocol (KServe v2) request with
	// JSON data to /v2/models/{model}/infer.
	ProtocolV2 = "v2"
	// ProtocolV2Binary posts the same request with its tensors, and asks
	// for its outputs, in the binary tensor data extension.
	ProtocolV2Binary = "v2-binary"
)

// v2Spec is the part of a v2 model's metadata a request is built from.
type v2Spec struct {
	Name   string `json:"name"`
	Inputs []struct {
		Name     string  `json:"name"`
		Datatype string  `json:"datatype"`
		Shape    []int64 `json:"shape"`
	} `json:"inputs"`
}

// v2Request reads the model's v2 metadata from base and returns the path,
// body and extra header lines of an infer request that carries item
// ItemsPerRequest times, as JSON or binary data.
func (cfg *Config) v2Request(ctx context.Context, client *http.Client, base string, item any) (path string, body []byte, headers []string, err error) {
	if cfg.ModelName == "" {
		return "", nil, nil, fmt.Errorf("--protocol %s: the model's v2 name is not known", cfg.Protocol)
	}
	path = "/v2/models/" + url.PathEscape(cfg.ModelName)
	spec, err := cfg.v2Spec(ctx, client, base)
	if err != nil {
		return "", nil, nil, err
	}
	values, err := v2Values(spec, item)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--input: %w", err)
	}
	type input struct {
		Name       string         `json:"name"`
		Shape      []int64        `json:"shape"`
		Datatype   string         `json:"datatype"`
		Data       []any          `json:"data,omitempty"`
		Parameters map[string]int `json:"parameters,omitempty"`
	}
	var req struct {
		Inputs     []input         `json:"inputs"`
		Parameters map[string]bool `json:"parameters,omitempty"`
	}
	var raw []byte
	n := cfg.ItemsPerRequest
	for i, in := range spec.Inputs {
		shape, flat, err := flatten(values[i], in.Datatype)
		if err != nil {
			return "", nil, nil, fmt.Errorf("--input: input %q: %w", in.Name, err)
		}
		one := input{Name: in.Name, Datatype: in.Datatype, Shape: append([]int64{int64(n)}, shape...)}
		data := make([]any, 0, n*len(flat))
		for range n {
			data = append(data, flat...)
		}
		if cfg.Protocol == ProtocolV2Binary {
			start := len(raw)
			if raw, err = appendBinary(raw, in.Datatype, data); err != nil {
				return "", nil, nil, fmt.Errorf("input %q: %w", in.Name, err)
			}
			one.Parameters = map[string]int{"binary_data_size": len(raw) - start}
		} else {
			one.Data = data
		}
		req.Inputs = append(req.Inputs, one)
	}
	if cfg.Protocol == ProtocolV2Binary {
		req.Parameters = map[string]bool{"binary_data_output": true}
	}
	header, err := json.Marshal(req)
	if err != nil {
		return "", nil, nil, err
	}
	if cfg.Protocol == ProtocolV2Binary {
		headers = []string{"Inference-Header-Content-Length: " + strconv.Itoa(len(header))}
	}
	return path + "/infer", append(header, raw...), headers, nil
}

// v2Spec reads the model's v2 metadata from base.
func (cfg *Config) v2Spec(ctx context.Context, client *http.Client, base string) (v2Spec, error) {
	var spec v2Spec
	if cfg.ModelName == "" {
		return spec, fmt.Errorf("--protocol %s: the model's v2 name is not known", cfg.Protocol)
	}
	if err := getJSON(ctx, client, base+"/v2/models/"+url.PathEscape(cfg.ModelName), &spec); err != nil {
		hint := ""
		if cfg.Target != "" {
			hint = fmt.Sprintf(" (bench asks for model %q; --model-name NAME asks for the one the target serves)", cfg.ModelName)
		}
		return spec, fmt.Errorf("--protocol %s: read the model's metadata%s: %w", cfg.Protocol, hint, err)
	}
	return spec, nil
}

// v2Values pairs the model's inputs with the values of item: the item
// itself for a model of one input, else an object keyed by input name.
func v2Values(spec v2Spec, item any) ([]any, error) {
	if len(spec.Inputs) == 1 {
		if obj, ok := item.(map[string]any); ok && len(obj) == 1 && obj[spec.Inputs[0].Name] != nil {
			return []any{obj[spec.Inputs[0].Name]}, nil
		}
		return []any{item}, nil
	}
	obj, ok := item.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("model %s has %d inputs: give the item as an object keyed by input name", spec.Name, len(spec.Inputs))
	}
	values := make([]any, len(spec.Inputs))
	for i, in := range spec.Inputs {
		v, ok := obj[in.Name]
		if !ok {
			return nil, fmt.Errorf("no value for input %q of model %s", in.Name, spec.Name)
		}
		values[i] = v
	}
	return values, nil
}

// flatten returns the shape of one row of value and its elements in
// row-major order. A BYTES row is one element: a string as it is, any
// other value as its JSON text; any other datatype's elements are numbers
// or booleans, checked here so that every protocol refuses, before the
// load, an --input the model cannot take.
func flatten(value any, datatype string) ([]int64, []any, error) {
	if datatype == "BYTES" {
		if s, ok := value.(string); ok {
			return nil, []any{s}, nil
		}
		text, err := json.Marshal(value)
		return nil, []any{string(text)}, err
	}
	var shape []int64
	for v := value; ; {
		a, ok := v.([]any)
		if !ok {
			break
		}
		shape = append(shape, int64(len(a)))
		if len(a) == 0 {
			break
		}
		v = a[0]
	}
	var flat []any
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		if depth == len(shape) {
			switch v.(type) {
			case []any:
				return fmt.Errorf("ragged array")
			case float64, bool:
			default:
				text, _ := json.Marshal(v)
				return fmt.Errorf("element %s is not a number or a boolean, as %s wants", text, datatype)
			}
			flat = append(flat, v)
			return nil
		}
		a, ok := v.([]any)
		if !ok || int64(len(a)) != shape[depth] {
			return fmt.Errorf("ragged array")
		}
		for _, e := range a {
			if err := walk(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return shape, flat, walk(value, 0)
}

// appendBinary appends the elements of data to dst as the binary tensor
// data extension lays out datatype.
func appendBinary(dst []byte, datatype string, data []any) ([]byte, error) {
	for _, e := range data {
		if datatype == "BYTES" {
			s, _ := e.(string)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
			dst = append(dst, s...)
			continue
		}
		var f float64
		switch v := e.(type) {
		case float64:
			f = v
		case bool:
			if v {
				f = 1
			}
		default:
			return nil, fmt.Errorf("element %v is not a number or a boolean", e)
		}
		var err error
		if dst, err = appendNumber(dst, datatype, f); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func appendNumber(dst []byte, datatype string, f float64) ([]byte, error) {
	le := binary.LittleEndian
	switch datatype {
	case "BOOL", "UINT8", "INT8":
		return append(dst, byte(int64(f))), nil
	case "UINT16", "INT16":
		return le.AppendUint16(dst, uint16(int64(f))), nil
	case "UINT32", "INT32":
		return le.AppendUint32(dst, uint32(int64(f))), nil
	case "UINT64":
		return le.AppendUint64(dst, uint64(f)), nil
	case "INT64":
		return le.AppendUint64(dst, uint64(int64(f))), nil
	case "FP16":
		return le.AppendUint16(dst, onnxio.Float16Bits(f)), nil
	case "FP32":
		return le.AppendUint32(dst, math.Float32bits(float32(f))), nil
	case "FP64":
		return le.AppendUint64(dst, math.Float64bits(f)), nil
	}
	return nil, fmt.Errorf("datatype %s has no binary form here", datatype)
}

// checkProtocol validates cfg.Protocol.
func (cfg *Config) checkProtocol() error {
	if cfg.Protocol == "" {
		cfg.Protocol = ProtocolPredict
	}
	if !slices.Contains([]string{ProtocolPredict, ProtocolV2, ProtocolV2Binary, ProtocolGRPC}, cfg.Protocol) {
		return fmt.Errorf("--protocol %q: want predict, v2, v2-binary or grpc", cfg.Protocol)
	}
	if cfg.Protocol != ProtocolPredict && cfg.API == APIGo {
		return fmt.Errorf("--protocol %s is spoken to a server; --api go calls the supervisor directly", cfg.Protocol)
	}
	switch {
	case cfg.GRPCStream && cfg.Protocol != ProtocolGRPC:
		return fmt.Errorf("--grpc-stream goes with --protocol grpc, not %s", cfg.Protocol)
	case cfg.GRPCTarget != "" && cfg.Protocol != ProtocolGRPC:
		return fmt.Errorf("--grpc-target goes with --protocol grpc, not %s", cfg.Protocol)
	case cfg.GRPCTarget != "" && cfg.Target == "":
		return errors.New("--grpc-target goes with --target, whose stats bench reads; the server bench starts gets a gRPC port of its own")
	case cfg.GRPCTarget != "":
		host, port, err := net.SplitHostPort(cfg.GRPCTarget)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
			return fmt.Errorf("--grpc-target %q: want host:port, the target's --grpc-listen, with a port from 1 to 65535", cfg.GRPCTarget)
		}
	}
	return nil
}
