package main

// A small client of the Open Inference Protocol (KServe v2) over HTTP, for
// the end-to-end tests, written from the protocol's text: JSON bodies, and
// the binary tensor data extension (the JSON header, its length in the
// Inference-Header-Content-Length header, then each binary tensor's bytes
// in order, each sized by its binary_data_size parameter). It also turns
// any tensor, whichever form it travelled in, into the extension's byte
// layout, so that answers compare exactly.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// headerLength is the binary extension's header: the JSON part's length.
const headerLength = "Inference-Header-Content-Length"

// v2Input is one input of a request. Data holds its JSON form; binary, when
// set, is sent after the JSON instead.
type v2Input struct {
	Name       string         `json:"name"`
	Shape      []int64        `json:"shape"`
	Datatype   string         `json:"datatype"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       any            `json:"data,omitempty"`
	binary     []byte
}

// v2RequestOutput asks for one output, as binary with binary_data.
type v2RequestOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// v2Request is an inference request.
type v2Request struct {
	ID         string            `json:"id,omitempty"`
	Parameters map[string]any    `json:"parameters,omitempty"`
	Inputs     []v2Input         `json:"inputs"`
	Outputs    []v2RequestOutput `json:"outputs,omitempty"`
}

// v2Output is one output of an answer; binary holds its bytes when it came
// as binary data.
type v2Output struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]any  `json:"parameters"`
	Data       json.RawMessage `json:"data"`
	binary     []byte
}

// v2Answer is a decoded answer to any v2 route.
type v2Answer struct {
	Status       int
	Header       http.Header
	Body         []byte
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	ID           string     `json:"id"`
	Outputs      []v2Output `json:"outputs"`
	Error        string     `json:"error"`
}

func (a v2Answer) String() string {
	body := a.Body
	if n, err := strconv.Atoi(a.Header.Get(headerLength)); err == nil && n <= len(body) {
		body = body[:n]
	}
	return fmt.Sprintf("status %d, body %s", a.Status, bytes.TrimSpace(body))
}

// output returns the output called name, failing the test without it.
func (a v2Answer) output(t *testing.T, name string) v2Output {
	t.Helper()
	for _, o := range a.Outputs {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("the answer has no output %q: %s", name, a)
	return v2Output{}
}

// encodeV2 writes the request's body and its content type: JSON alone, or
// with the binary inputs after it.
func encodeV2(req v2Request) (body []byte, header []string, err error) {
	var tail []byte
	req.Inputs = append([]v2Input(nil), req.Inputs...)
	for i, in := range req.Inputs {
		if in.binary == nil {
			continue
		}
		params := map[string]any{"binary_data_size": len(in.binary)}
		for k, v := range in.Parameters {
			params[k] = v
		}
		req.Inputs[i].Parameters, req.Inputs[i].Data = params, nil
		tail = append(tail, in.binary...)
	}
	body, err = json.Marshal(req)
	if err != nil || tail == nil {
		return body, []string{"Content-Type", "application/json"}, err
	}
	header = []string{"Content-Type", "application/octet-stream", headerLength, strconv.Itoa(len(body))}
	return append(body, tail...), header, nil
}

// infer posts req to path, failing the test on a transport error or an
// answer that is not the protocol's.
func (s *server) infer(t *testing.T, path string, req v2Request) v2Answer {
	t.Helper()
	a, err := s.tryInfer(path, req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryInfer posts req to path and decodes the answer; safe from any goroutine.
func (s *server) tryInfer(path string, req v2Request) (v2Answer, error) {
	body, header, err := encodeV2(req)
	if err != nil {
		return v2Answer{}, err
	}
	return s.v2(http.MethodPost, path, body, header...)
}

// v2 sends one request to a v2 route and decodes its answer, the binary
// outputs included.
func (s *server) v2(method, path string, body []byte, header ...string) (v2Answer, error) {
	contentType := ""
	if len(header) >= 2 && header[0] == "Content-Type" {
		contentType, header = header[1], header[2:]
	}
	status, data, hdr, err := s.do(context.Background(), method, path, contentType, body, header...)
	if err != nil {
		return v2Answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	a := v2Answer{Status: status, Header: hdr, Body: data}
	head, tail := data, []byte(nil)
	if v := hdr.Get(headerLength); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > len(data) {
			return a, fmt.Errorf("%s %s: %s %q for a body of %d bytes", method, path, headerLength, v, len(data))
		}
		head, tail = data[:n], data[n:]
	}
	if len(head) > 0 {
		if err := json.Unmarshal(head, &a); err != nil {
			return a, fmt.Errorf("%s %s: answer with status %d is not JSON: %q", method, path, status, head)
		}
	}
	if status != http.StatusOK && a.Error == "" && len(head) > 0 {
		return a, fmt.Errorf("%s %s: %s, without an error", method, path, a)
	}
	for i, o := range a.Outputs {
		size, ok := o.Parameters["binary_data_size"]
		if !ok {
			continue
		}
		n, ok := size.(float64)
		if !ok || n < 0 || int(n) > len(tail) {
			return a, fmt.Errorf("%s %s: output %q has binary_data_size %v, with %d bytes left", method, path, o.Name, size, len(tail))
		}
		a.Outputs[i].binary, tail = tail[:int(n)], tail[int(n):]
	}
	if len(tail) != 0 {
		return a, fmt.Errorf("%s %s: %d bytes after the binary outputs", method, path, len(tail))
	}
	return a, nil
}

// getV2 sends GET path and decodes the JSON answer into v (when not nil),
// returning the status.
func (s *server) getV2(t *testing.T, path string, v any) (int, string) {
	t.Helper()
	status, body, err := s.get(path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	if status == http.StatusOK && v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return status, e.Error
}

// tensorData is one tensor the tests send: its values flat, in row-major
// order (numbers, bools, strings or []byte for BYTES).
type tensorData struct {
	name, datatype string
	shape          []int64
	values         []any
}

// flat is the input with its data as one flat JSON array.
func (d tensorData) flat() v2Input {
	return v2Input{Name: d.name, Shape: d.shape, Datatype: d.datatype, Data: d.jsonValues()}
}

// nested is the input with its data as nested JSON arrays of its shape. A
// scalar's data is still an array, of its one element: the protocol's data
// is always an array.
func (d tensorData) nested() v2Input {
	values := d.jsonValues()
	if len(d.shape) == 0 {
		return d.flat()
	}
	var nest func(shape []int64, values []any) any
	nest = func(shape []int64, values []any) any {
		if len(shape) == 0 {
			return values[0]
		}
		n := int(shape[0])
		rows := make([]any, n)
		step := 0
		if n > 0 {
			step = len(values) / n
		}
		for i := range rows {
			rows[i] = nest(shape[1:], values[i*step:(i+1)*step])
		}
		return rows
	}
	return v2Input{Name: d.name, Shape: d.shape, Datatype: d.datatype, Data: nest(d.shape, values)}
}

// rowLists is the input with its data as one flat JSON array per row, as
// numpy's reshape(n, -1).tolist() gives it, and a scalar's as its element
// alone, not in an array: forms Triton takes beside flat and nested data.
func (d tensorData) rowLists() v2Input {
	values := d.jsonValues()
	in := v2Input{Name: d.name, Shape: d.shape, Datatype: d.datatype}
	if len(d.shape) == 0 {
		in.Data = values[0]
		return in
	}
	rows := make([]any, d.shape[0])
	for i := range rows {
		step := len(values) / len(rows)
		rows[i] = values[i*step : (i+1)*step]
	}
	in.Data = rows
	return in
}

// binaryInput is the input sent as binary data.
func (d tensorData) binaryInput() v2Input {
	return v2Input{Name: d.name, Shape: d.shape, Datatype: d.datatype, binary: d.bytes()}
}

func (d tensorData) jsonValues() []any {
	values := make([]any, len(d.values))
	for i, v := range d.values {
		if b, ok := v.([]byte); ok {
			v = string(b)
		}
		values[i] = v
	}
	return values
}

// bytes is the tensor in the binary extension's layout.
func (d tensorData) bytes() []byte {
	var b []byte
	for _, v := range d.values {
		var err error
		if b, err = appendElement(b, d.datatype, v); err != nil {
			panic(fmt.Sprintf("tensor %s: %v", d.name, err))
		}
	}
	return b
}

// elementSize is the bytes of one element of a fixed-size datatype.
func elementSize(datatype string) int {
	switch datatype {
	case "BOOL", "INT8", "UINT8":
		return 1
	case "INT16", "UINT16", "FP16":
		return 2
	case "INT32", "UINT32", "FP32":
		return 4
	case "INT64", "UINT64", "FP64":
		return 8
	}
	return 0
}

// appendElement appends one element in the extension's layout: a number
// given as any Go number or json.Number, a bool, or BYTES as a string or
// []byte.
func appendElement(b []byte, datatype string, v any) ([]byte, error) {
	if datatype == "BYTES" {
		var e []byte
		switch v := v.(type) {
		case string:
			e = []byte(v)
		case []byte:
			e = v
		default:
			return b, fmt.Errorf("BYTES element %v (%T)", v, v)
		}
		return append(binary.LittleEndian.AppendUint32(b, uint32(len(e))), e...), nil
	}
	if flag, ok := v.(bool); ok {
		if datatype != "BOOL" {
			return b, fmt.Errorf("%s element %v", datatype, v)
		}
		if flag {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	}
	text := fmt.Sprint(v)
	switch datatype {
	case "INT8", "INT16", "INT32", "INT64":
		n, err := strconv.ParseInt(text, 10, 8*elementSize(datatype))
		if err != nil {
			return b, err
		}
		return append(b, binary.LittleEndian.AppendUint64(nil, uint64(n))[:elementSize(datatype)]...), nil
	case "UINT8", "UINT16", "UINT32", "UINT64":
		n, err := strconv.ParseUint(text, 10, 8*elementSize(datatype))
		if err != nil {
			return b, err
		}
		return append(b, binary.LittleEndian.AppendUint64(nil, n)[:elementSize(datatype)]...), nil
	case "FP32":
		f, err := strconv.ParseFloat(text, 32)
		if err != nil {
			return b, err
		}
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f))), nil
	case "FP64":
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return b, err
		}
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(f)), nil
	case "FP16":
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return b, err
		}
		return binary.LittleEndian.AppendUint16(b, halfBits(f)), nil
	}
	return b, fmt.Errorf("datatype %q", datatype)
}

// halfBits rounds f to the nearest IEEE half float, ties to even.
func halfBits(f float64) uint16 {
	var sign uint16
	if math.Signbit(f) {
		sign, f = 0x8000, -f
	}
	switch {
	case math.IsNaN(f):
		return sign | 0x7e00
	case f >= 65520: // halfway past the largest half, 65504
		return sign | 0x7c00
	case f < 0x1p-14: // subnormal: multiples of 2^-24
		return sign | uint16(math.RoundToEven(f*0x1p24))
	}
	frac, exp := math.Frexp(f) // f = frac × 2^exp, frac in [0.5, 1)
	e := exp - 1
	q := math.RoundToEven((frac*2 - 1) * 1024)
	if q == 1024 {
		q, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(q)
}

// bytes is the output in the binary extension's layout, from its binary
// data or from its JSON data, flat or nested.
func (o v2Output) bytes(t *testing.T) []byte {
	t.Helper()
	if o.binary != nil {
		return o.binary
	}
	dec := json.NewDecoder(bytes.NewReader(o.Data))
	dec.UseNumber()
	var data any
	if err := dec.Decode(&data); err != nil {
		t.Fatalf("output %s: data %s: %v", o.Name, o.Data, err)
	}
	var out []byte
	var walk func(v any)
	walk = func(v any) {
		if list, ok := v.([]any); ok {
			for _, e := range list {
				walk(e)
			}
			return
		}
		var err error
		if out, err = appendElement(out, o.Datatype, v); err != nil {
			t.Fatalf("output %s: %v", o.Name, err)
		}
	}
	walk(data)
	if out == nil {
		out = []byte{}
	}
	return out
}

// elements splits BYTES data into its elements.
func elements(t *testing.T, data []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 4 {
			t.Fatalf("BYTES data ends inside a length: %x", data)
		}
		n := int(binary.LittleEndian.Uint32(data))
		if n > len(data)-4 {
			t.Fatalf("BYTES element of %d bytes with %d left", n, len(data)-4)
		}
		out, data = append(out, data[4:4+n]), data[4+n:]
	}
	return out
}

// floats reads FP32 data.
func floats(data []byte) []float64 {
	out := make([]float64, len(data)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
	}
	return out
}

// onnxDtypes names the v2 datatypes as /predict's tensor maps spell them.
var onnxDtypes = map[string]string{
	"BOOL": "bool", "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
	"UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
	"FP16": "float16", "FP32": "float32", "FP64": "float64",
}

// predictTensor is a tensor map of a /predict msgpack body or answer.
type predictTensor struct {
	DType string  `msgpack:"dtype"`
	Shape []int64 `msgpack:"shape"`
	Data  []byte  `msgpack:"data"`
}

// row is row i of a batched tensor, or the whole tensor when unbatched.
func (d tensorData) row(i int, batched bool) predictTensor {
	data, shape := d.bytes(), d.shape
	if batched {
		n := len(data) / int(shape[0])
		data, shape = data[i*n:(i+1)*n], shape[1:]
	}
	if shape == nil {
		shape = []int64{}
	}
	return predictTensor{DType: onnxDtypes[d.datatype], Shape: shape, Data: data}
}

// predictRows sends the request's rows as /predict msgpack items (each a
// map by input name of tensor maps; unbatched inputs whole in every item)
// and returns each item's outputs by name.
func (s *server) predictRows(t *testing.T, rows int, inputs []tensorData, unbatched ...string) []map[string]predictTensor {
	t.Helper()
	items := make([]map[string]predictTensor, rows)
	for i := range items {
		items[i] = map[string]predictTensor{}
		for _, in := range inputs {
			items[i][in.name] = in.row(i, !contains(unbatched, in.name))
		}
	}
	body, err := msgpack.Marshal(map[string]any{"inputs": items})
	if err != nil {
		t.Fatal(err)
	}
	status, data, _ := s.post(t, "application/msgpack", body)
	if status != http.StatusOK {
		t.Fatalf("/predict: status %d: %s", status, data)
	}
	var answer struct {
		Outputs []msgpack.RawMessage `msgpack:"outputs"`
	}
	if err := msgpack.Unmarshal(data, &answer); err != nil || len(answer.Outputs) != rows {
		t.Fatalf("/predict answer: %v, %d outputs for %d rows", err, len(answer.Outputs), rows)
	}
	outs := make([]map[string]predictTensor, rows)
	for i, raw := range answer.Outputs {
		// A model with one output answers its tensor map, one with several
		// a map of them by name.
		var one predictTensor
		if err := msgpack.Unmarshal(raw, &one); err == nil && one.DType != "" {
			outs[i] = map[string]predictTensor{"": one}
		} else if err := msgpack.Unmarshal(raw, &outs[i]); err != nil {
			t.Fatalf("/predict output %d: %v", i, err)
		}
	}
	return outs
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// checkSameAsPredict checks that output o of a v2 answer is, row by row
// and byte for byte, what /predict answered for the same items (name ""
// for the one output of a model that has one).
func checkSameAsPredict(t *testing.T, o v2Output, predicted []map[string]predictTensor, name string) {
	t.Helper()
	var want []byte
	var itemShape []int64
	for i, outs := range predicted {
		p, ok := outs[name]
		if !ok {
			t.Fatalf("/predict item %d has no output %q", i, name)
		}
		want = append(want, p.Data...)
		itemShape = p.Shape
		if onnxDtypes[o.Datatype] != p.DType {
			t.Errorf("output %s: datatype %s; /predict says %s", o.Name, o.Datatype, p.DType)
		}
	}
	wantShape := fmt.Sprint(append([]int64{int64(len(predicted))}, itemShape...))
	if fmt.Sprint(o.Shape) != wantShape {
		t.Errorf("output %s: shape %v; /predict's items make %s", o.Name, o.Shape, wantShape)
	}
	if got := o.bytes(t); !bytes.Equal(got, want) {
		t.Errorf("output %s: %x\n/predict answered %x", o.Name, got, want)
	}
}

// wantError checks a refused request: its status, and an error that holds
// every part of want.
func wantError(t *testing.T, what string, a v2Answer, status int, want ...string) {
	t.Helper()
	if a.Status != status {
		t.Errorf("%s: %s; want %d", what, a, status)
		return
	}
	for _, w := range want {
		if !strings.Contains(a.Error, w) {
			t.Errorf("%s: error %q lacks %q", what, a.Error, w)
		}
	}
}

// bytesItem is the /predict msgpack item of a BYTES element: a str when it
// is text, else a bin.
func bytesItem(e []byte) any {
	if utf8.Valid(e) {
		return string(e)
	}
	return e
}
