package main

// End-to-end conformance tests of the Open Inference Protocol (KServe v2)
// REST routes and its binary tensor data extension, through the real
// binary: the demo and test ONNX models and the built-ins, every route,
// JSON, binary and mixed bodies, and every refusal. Served outputs are
// compared byte for byte with what /predict answers for the same items,
// and for the demo with onnxtest's reference.

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// v2Metadata is the model metadata answer.
type v2Metadata struct {
	Name     string   `json:"name"`
	Versions []string `json:"versions"`
	Platform string   `json:"platform"`
	Inputs   []v2Spec `json:"inputs"`
	Outputs  []v2Spec `json:"outputs"`
}

type v2Spec struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func specsString(specs []v2Spec) string {
	parts := make([]string, len(specs))
	for i, s := range specs {
		parts[i] = fmt.Sprintf("%s %s %v", s.Name, s.Datatype, s.Shape)
	}
	return strings.Join(parts, "; ")
}

// demoRows are n rows of demo features, flat.
func demoRows(rng *rand.Rand, n int) tensorData {
	d := tensorData{name: "features", datatype: "FP32", shape: []int64{int64(n), 4}}
	for range n {
		for _, v := range features(rng) {
			d.values = append(d.values, v)
		}
	}
	return d
}

// checkDemoReference compares probs with the reference for each row.
func checkDemoReference(t *testing.T, ref *onnxtest.Reference, in tensorData, probs v2Output) {
	t.Helper()
	got := floats(probs.bytes(t))
	x := floats(in.bytes())
	for i := 0; i < len(x)/4; i++ {
		row := []float32{float32(x[4*i]), float32(x[4*i+1]), float32(x[4*i+2]), float32(x[4*i+3])}
		for j, w := range ref.Demo(row) {
			if g := got[3*i+j]; math.Abs(g-w) > onnxTolerance {
				t.Errorf("row %d probs[%d] = %v, want %v", i, j, g, w)
			}
		}
	}
}

// TestV2EveryRouteOfTheDemo walks the health, server, model and readiness
// routes, with and without the version, and answers 404 for another model
// or version on each.
func TestV2EveryRouteOfTheDemo(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Demo)
	for _, path := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/demo/ready", "/v2/models/demo/versions/1/ready"} {
		if status, msg := s.getV2(t, path, nil); status != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200", path, status, msg)
		}
	}
	var server struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		Extensions []string `json:"extensions"`
	}
	if status, msg := s.getV2(t, "/v2", &server); status != http.StatusOK || server.Name == "" || server.Version == "" ||
		!slices.Contains(server.Extensions, "binary_tensor_data") {
		t.Errorf("GET /v2: %d %s %+v; want a name, a version and the binary_tensor_data extension", status, msg, server)
	}
	for _, path := range []string{"/v2/models/demo", "/v2/models/demo/versions/1"} {
		var meta v2Metadata
		if status, msg := s.getV2(t, path, &meta); status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, msg)
		}
		if meta.Name != "demo" || meta.Platform != "onnxruntime_onnx" || !slices.Contains(meta.Versions, "1") ||
			specsString(meta.Inputs) != "features FP32 [-1 4]" || specsString(meta.Outputs) != "probs FP32 [-1 3]" {
			t.Errorf("GET %s: %+v", path, meta)
		}
	}
	for _, path := range []string{"/v2/models/iris", "/v2/models/iris/ready", "/v2/models/demo/versions/2", "/v2/models/demo/versions/2/ready"} {
		if status, msg := s.getV2(t, path, nil); status != http.StatusNotFound || msg == "" {
			t.Errorf("GET %s: %d %q, want 404 with an error", path, status, msg)
		}
	}
	in := demoRows(rand.New(rand.NewPCG(1, 2)), 1)
	for _, path := range []string{"/v2/models/iris/infer", "/v2/models/demo/versions/2/infer"} {
		a := s.infer(t, path, v2Request{Inputs: []v2Input{in.flat()}})
		wantError(t, "POST "+path, a, http.StatusNotFound)
	}
	if a := s.infer(t, "/v2/models/demo/versions/1/infer", v2Request{Inputs: []v2Input{in.flat()}}); a.Status != http.StatusOK || a.ModelName != "demo" {
		t.Errorf("infer with the version: %s", a)
	}
}

// TestV2DemoJSONBinaryAndReference: the same rows as flat JSON, nested
// JSON, binary in and out, and binary out on request by output, all give
// the bytes /predict gives, which match the reference.
func TestV2DemoJSONBinaryAndReference(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Demo)
	in := demoRows(rand.New(rand.NewPCG(7, 7)), 5)
	predicted := s.predictRows(t, 5, []tensorData{in})
	tests := []struct {
		name       string
		req        v2Request
		wantBinary bool
	}{
		{"flat JSON", v2Request{ID: "flat-1", Inputs: []v2Input{in.flat()}}, false},
		{"nested JSON", v2Request{ID: "nested", Inputs: []v2Input{in.nested()}}, false},
		{"binary in, JSON out", v2Request{Inputs: []v2Input{in.binaryInput()}}, false},
		{"binary in and out (binary_data_output)", v2Request{Inputs: []v2Input{in.binaryInput()}, Parameters: map[string]any{"binary_data_output": true}}, true},
		{"JSON in, binary out by output", v2Request{Inputs: []v2Input{in.flat()}, Outputs: []v2RequestOutput{{Name: "probs", Parameters: map[string]any{"binary_data": true}}}}, true},
		{"requested output as JSON", v2Request{Inputs: []v2Input{in.binaryInput()}, Outputs: []v2RequestOutput{{Name: "probs", Parameters: map[string]any{"binary_data": false}}}}, false},
		{"priority is accepted", v2Request{Inputs: []v2Input{in.flat()}, Parameters: map[string]any{"priority": 3}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := s.infer(t, "/v2/models/demo/infer", tt.req)
			if a.Status != http.StatusOK || len(a.Outputs) != 1 {
				t.Fatalf("%s", a)
			}
			if a.ModelName != "demo" || a.ID != tt.req.ID {
				t.Errorf("model_name %q id %q; want demo and %q", a.ModelName, a.ID, tt.req.ID)
			}
			probs := a.output(t, "probs")
			if (probs.binary != nil) != tt.wantBinary || probs.Datatype != "FP32" {
				t.Errorf("probs: %s, binary %v; want binary %v", probs.Datatype, probs.binary != nil, tt.wantBinary)
			}
			if tt.wantBinary && a.Header.Get(headerLength) == "" {
				t.Errorf("binary outputs without %s", headerLength)
			}
			checkSameAsPredict(t, probs, predicted, "")
			checkDemoReference(t, ref, in, probs)
		})
	}
	t.Run("null for what a Pydantic client leaves unset", func(t *testing.T) {
		data, err := json.Marshal(in.jsonValues())
		if err != nil {
			t.Fatal(err)
		}
		body := `{"id":null,"parameters":null,"inputs":[{"name":"features","shape":[5,4],"datatype":"FP32","parameters":null,"data":` +
			string(data) + `}],"outputs":[{"name":"probs","parameters":{"binary_data":null}}]}`
		a, err := s.v2(http.MethodPost, "/v2/models/demo/infer", []byte(body), "Content-Type", "application/json")
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusOK || len(a.Outputs) != 1 || a.ID != "" || bytes.Contains(a.Body, []byte(`"id"`)) {
			t.Fatalf("%s; want 200 with probs and no id", a)
		}
		checkSameAsPredict(t, a.output(t, "probs"), predicted, "")
	})
}

// TestV2DemoRefusals: each bad request is 400 (404 for the model), naming
// the input or output and what was wanted and sent, and the server keeps
// serving.
func TestV2DemoRefusals(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Demo)
	good := demoRows(rand.New(rand.NewPCG(3, 3)), 2)
	with := func(mutate func(*v2Input)) v2Request {
		in := good.flat()
		mutate(&in)
		return v2Request{Inputs: []v2Input{in}}
	}
	tests := []struct {
		name string
		req  v2Request
		want []string
	}{
		{"an unknown input", with(func(in *v2Input) { in.Name = "featurez" }), []string{"featurez"}},
		{"no inputs", v2Request{Inputs: []v2Input{}}, []string{"features"}},
		{"another datatype", with(func(in *v2Input) { in.Datatype = "FP64" }), []string{"features", "FP32", "FP64"}},
		{"an unknown datatype", with(func(in *v2Input) { in.Datatype = "FLOAT" }), []string{"features", "FLOAT"}},
		{"a fixed axis of another length", v2Request{Inputs: []v2Input{{Name: "features", Datatype: "FP32", Shape: []int64{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}}}}, []string{"features", "4", "3"}},
		{"another rank", v2Request{Inputs: []v2Input{{Name: "features", Datatype: "FP32", Shape: []int64{8}, Data: good.jsonValues()}}}, []string{"features"}},
		{"another rank and fewer values", v2Request{Inputs: []v2Input{{Name: "features", Datatype: "FP32", Shape: []int64{2, 4, 1}, Data: []float32{1, 2, 3, 4}}}},
			[]string{"features", "[2,4,1] has 3 axes", "the model takes 2"}},
		{"another rank in binary", v2Request{Inputs: []v2Input{{Name: "features", Datatype: "FP32", Shape: []int64{2, 4, 1}, binary: good.bytes()[:16]}}},
			[]string{"features", "[2,4,1] has 3 axes", "the model takes 2"}},
		{"fewer values than the shape", with(func(in *v2Input) { in.Data = good.jsonValues()[:7] }), []string{"features", "8", "7"}},
		{"nested data short of the shape", with(func(in *v2Input) { in.Data = [][]float32{{1, 2, 3}, {4, 5, 6}} }), []string{"features", "6 elements", "8"}},
		{"a string for FP32", with(func(in *v2Input) { in.Data = []any{"a", 2, 3, 4, 5, 6, 7, 8} }), []string{"features"}},
		{"binary of another size", v2Request{Inputs: []v2Input{{Name: "features", Datatype: "FP32", Shape: []int64{2, 4}, binary: good.bytes()[:28]}}}, []string{"features", "32", "28"}},
		{"an unknown output", v2Request{Inputs: []v2Input{good.flat()}, Outputs: []v2RequestOutput{{Name: "logits"}}}, []string{"logits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, tt.name, s.infer(t, "/v2/models/demo/infer", tt.req), http.StatusBadRequest, tt.want...)
		})
	}
	for _, body := range []string{`{`, `{"inputs": "x"}`, `[]`} {
		a, err := s.v2(http.MethodPost, "/v2/models/demo/infer", []byte(body), "Content-Type", "application/json")
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, "body "+body, a, http.StatusBadRequest)
	}
	// A header length past the body, and binary data past the header's.
	body, _, _ := encodeV2(v2Request{Inputs: []v2Input{good.binaryInput()}})
	for _, header := range []string{fmt.Sprint(len(body) + 1), "x", fmt.Sprint(len(body) - 40)} {
		a, err := s.v2(http.MethodPost, "/v2/models/demo/infer", body, "Content-Type", "application/octet-stream", headerLength, header)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, headerLength+" "+header, a, http.StatusBadRequest)
	}
	if a := s.infer(t, "/v2/models/demo/infer", v2Request{Inputs: []v2Input{good.flat()}}); a.Status != http.StatusOK {
		t.Errorf("a good request after the refusals: %s", a)
	}
}

// multiRequest is a batch of rows of the multi model: ids and mask of one
// length, a scale for the whole request, an offset per row.
func multiRequest(rng *rand.Rand, rows, seq int) []tensorData {
	ids := tensorData{name: "ids", datatype: "INT64", shape: []int64{int64(rows), int64(seq)}}
	mask := tensorData{name: "mask", datatype: "BOOL", shape: []int64{int64(rows), int64(seq)}}
	offset := tensorData{name: "offset", datatype: "INT32", shape: []int64{int64(rows)}}
	for range rows {
		for range seq {
			ids.values = append(ids.values, int64(rng.IntN(onnxtest.Vocabulary)))
			mask.values = append(mask.values, rng.IntN(3) != 0)
		}
		offset.values = append(offset.values, int32(rng.IntN(5)))
	}
	scale := tensorData{name: "scale", datatype: "FP64", shape: []int64{}, values: []any{1.5}}
	return []tensorData{ids, mask, scale, offset}
}

// TestV2SeveralInputsOfDifferentDatatypes: the multi model (ids INT64 and
// mask BOOL with a variable axis, scale FP64 without batch axis, offset
// INT32), all JSON, all binary and mixed, with all outputs or some, in
// JSON or binary; every output is /predict's for the same items and the
// reference's.
func TestV2SeveralInputsOfDifferentDatatypes(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Multi)
	var meta v2Metadata
	if status, msg := s.getV2(t, "/v2/models/multi", &meta); status != http.StatusOK ||
		specsString(meta.Inputs) != "ids INT64 [-1 -1]; mask BOOL [-1 -1]; scale FP64 []; offset INT32 [-1]" ||
		specsString(meta.Outputs) != "pooled FP32 [-1 4]; count INT64 [-1]; scaled FP64 [-1]; above BOOL [-1]; next INT32 [-1]" {
		t.Errorf("GET /v2/models/multi: %d %s %+v", status, msg, meta)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	inputs := multiRequest(rng, 3, 4)
	predicted := s.predictRows(t, 3, inputs, "scale")
	forms := []struct {
		name string
		form func(int, tensorData) v2Input
	}{
		{"flat JSON", func(_ int, d tensorData) v2Input { return d.flat() }},
		{"nested JSON", func(_ int, d tensorData) v2Input { return d.nested() }},
		{"JSON a list per row, the scalar bare", func(_ int, d tensorData) v2Input { return d.rowLists() }},
		{"binary", func(_ int, d tensorData) v2Input { return d.binaryInput() }},
		{"mixed", func(i int, d tensorData) v2Input { return []func() v2Input{d.binaryInput, d.flat, d.nested}[i%3]() }},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			req := v2Request{ID: f.name}
			for i, d := range inputs {
				req.Inputs = append(req.Inputs, f.form(i, d))
			}
			a := s.infer(t, "/v2/models/multi/infer", req)
			if a.Status != http.StatusOK || len(a.Outputs) != 5 || a.ID != f.name {
				t.Fatalf("%s", a)
			}
			for _, o := range meta.Outputs {
				checkSameAsPredict(t, a.output(t, o.Name), predicted, o.Name)
			}
			checkMultiReference(t, ref, inputs, a)
		})
	}
	t.Run("requested outputs, one binary", func(t *testing.T) {
		req := v2Request{Outputs: []v2RequestOutput{{Name: "above"}, {Name: "pooled", Parameters: map[string]any{"binary_data": true}}}}
		for _, d := range inputs {
			req.Inputs = append(req.Inputs, d.flat())
		}
		a := s.infer(t, "/v2/models/multi/infer", req)
		if a.Status != http.StatusOK || len(a.Outputs) != 2 {
			t.Fatalf("%s; want the two outputs asked for", a)
		}
		above, pooled := a.output(t, "above"), a.output(t, "pooled")
		if above.binary != nil || pooled.binary == nil {
			t.Errorf("above binary %v, pooled binary %v; want JSON and binary", above.binary != nil, pooled.binary != nil)
		}
		if !bytes.Contains(above.Data, []byte("true")) && !bytes.Contains(above.Data, []byte("false")) {
			t.Errorf("BOOL output as JSON: %s, want true and false", above.Data)
		}
		checkSameAsPredict(t, above, predicted, "above")
		checkSameAsPredict(t, pooled, predicted, "pooled")
	})
}

// checkMultiReference compares a multi answer with the reference, row by row.
func checkMultiReference(t *testing.T, ref *onnxtest.Reference, inputs []tensorData, a v2Answer) {
	t.Helper()
	ids, mask, scale, offset := inputs[0], inputs[1], inputs[2], inputs[3]
	rows, seq := int(ids.shape[0]), int(ids.shape[1])
	pooled := floats(a.output(t, "pooled").bytes(t))
	count := a.output(t, "count").bytes(t)
	for i := range rows {
		var rowIDs []int64
		var rowMask []bool
		for k := range seq {
			rowIDs = append(rowIDs, ids.values[i*seq+k].(int64))
			rowMask = append(rowMask, mask.values[i*seq+k].(bool))
		}
		want := ref.Multi(rowIDs, rowMask, scale.values[0].(float64), offset.values[i].(int32))
		for j, w := range want.Pooled {
			if g := pooled[4*i+j]; math.Abs(g-w) > onnxTolerance {
				t.Errorf("row %d pooled[%d] = %v, want %v", i, j, g, w)
			}
		}
		if c := int64(count[8*i]); c != want.Count {
			t.Errorf("row %d count %d, want %d", i, c, want.Count)
		}
	}
}

// TestV2MultiRefusals: each input wrong in its own way is refused with
// 400, naming it with what it wants and what came.
func TestV2MultiRefusals(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Multi)
	rng := rand.New(rand.NewPCG(8, 9))
	base := multiRequest(rng, 2, 3)
	request := func(mutate func([]v2Input) []v2Input) v2Request {
		var ins []v2Input
		for _, d := range base {
			ins = append(ins, d.flat())
		}
		return v2Request{Inputs: mutate(ins)}
	}
	tests := []struct {
		name string
		req  v2Request
		want []string
	}{
		{"an input missing", request(func(ins []v2Input) []v2Input { return ins[:3] }), []string{"offset"}},
		{"an input twice", request(func(ins []v2Input) []v2Input { return append(ins, ins[0]) }), []string{"ids"}},
		{"INT32 for INT64", request(func(ins []v2Input) []v2Input { ins[0].Datatype = "INT32"; return ins }), []string{"ids", "INT64", "INT32"}},
		{"a fraction for INT64", request(func(ins []v2Input) []v2Input { ins[0].Data = []any{1, 2.5, 3, 4, 5, 6}; return ins }), []string{"ids", "2.5"}},
		{"a number out of INT32's range", request(func(ins []v2Input) []v2Input { ins[3].Data = []any{1, int64(1) << 40}; return ins }), []string{"offset"}},
		{"a number for BOOL", request(func(ins []v2Input) []v2Input { ins[1].Data = []any{true, 2, false, true, true, true}; return ins }), []string{"mask"}},
		{"a BOOL byte of 2", request(func(ins []v2Input) []v2Input {
			ins[1] = v2Input{Name: "mask", Datatype: "BOOL", Shape: []int64{2, 3}, binary: []byte{1, 0, 2, 1, 1, 1}}
			return ins
		}), []string{"mask"}},
		{"axes named alike disagree", request(func(ins []v2Input) []v2Input {
			ins[1] = v2Input{Name: "mask", Datatype: "BOOL", Shape: []int64{2, 2}, Data: []bool{true, true, false, true}}
			return ins
		}), []string{"mask", "ids"}},
		{"batches of different sizes", request(func(ins []v2Input) []v2Input {
			ins[3] = v2Input{Name: "offset", Datatype: "INT32", Shape: []int64{3}, Data: []int32{1, 2, 3}}
			return ins
		}), []string{"offset"}},
		{"the unbatched input with a batch axis", request(func(ins []v2Input) []v2Input {
			ins[2] = v2Input{Name: "scale", Datatype: "FP64", Shape: []int64{2}, Data: []float64{1, 2}}
			return ins
		}), []string{"scale"}},
		{"a string for the scalar", request(func(ins []v2Input) []v2Input { ins[2].Data = "1.5"; return ins }), []string{"scale", "not a number"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, tt.name, s.infer(t, "/v2/models/multi/infer", tt.req), http.StatusBadRequest, tt.want...)
		})
	}
}

// TestV2BatchAxisFixedAtOne: the fixed model takes requests of many rows
// (its items run one by one), and its scalar output gains the batch axis.
func TestV2BatchAxisFixedAtOne(t *testing.T) {
	s, ref := startONNX(t, onnxtest.Fixed)
	var meta v2Metadata
	if status, msg := s.getV2(t, "/v2/models/fixed", &meta); status != http.StatusOK ||
		specsString(meta.Inputs) != "x FP32 [-1 4]" || specsString(meta.Outputs) != "y FP32 [-1 2]; energy FP32 [-1]" {
		t.Errorf("GET /v2/models/fixed: %d %s %+v", status, msg, meta)
	}
	in := demoRows(rand.New(rand.NewPCG(4, 4)), 3)
	in.name = "x"
	predicted := s.predictRows(t, 3, []tensorData{in})
	a := s.infer(t, "/v2/models/fixed/infer", v2Request{Inputs: []v2Input{in.binaryInput()}, Parameters: map[string]any{"binary_data_output": true}})
	if a.Status != http.StatusOK {
		t.Fatalf("%s", a)
	}
	checkSameAsPredict(t, a.output(t, "y"), predicted, "y")
	checkSameAsPredict(t, a.output(t, "energy"), predicted, "energy")
	x, energy := floats(in.bytes()), floats(a.output(t, "energy").bytes(t))
	for i := range 3 {
		_, want := ref.Fixed([]float32{float32(x[4*i]), float32(x[4*i+1]), float32(x[4*i+2]), float32(x[4*i+3])})
		if math.Abs(energy[i]-want) > onnxTolerance {
			t.Errorf("row %d energy %v, want %v", i, energy[i], want)
		}
	}
}

// TestV2NestedDataOfThreeAxes: rows of a sequence model ([batch, seq, 3])
// sent as JSON nested to the shape, or as one flat list per row, are read
// as sent flat, and answered as /predict answers the same rows.
func TestV2NestedDataOfThreeAxes(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Seq)
	rng := rand.New(rand.NewPCG(5, 5))
	in := tensorData{name: "x", datatype: "FP32", shape: []int64{3, 2, 3}}
	for range 3 * 2 * 3 {
		in.values = append(in.values, float32(rng.NormFloat64()))
	}
	predicted := s.predictRows(t, 3, []tensorData{in})
	for _, input := range []v2Input{in.nested(), in.flat(), in.rowLists()} {
		a := s.infer(t, "/v2/models/seq/infer", v2Request{Inputs: []v2Input{input}, Parameters: map[string]any{"binary_data_output": true}})
		if a.Status != http.StatusOK {
			t.Fatalf("data %v: %s", input.Data, a)
		}
		checkSameAsPredict(t, a.output(t, "y"), predicted, "") // its one output
	}
}

// dtypeValues are values of each datatype for the identity model, its
// extremes among them, each exact in its type (FP16 ones in half floats).
var dtypeValues = map[string][]any{
	"BOOL":   {true, false, false, true},
	"INT8":   {int64(-128), int64(127), int64(0), int64(-1)},
	"INT16":  {int64(-32768), int64(32767), int64(7), int64(-2)},
	"INT32":  {int64(math.MinInt32), int64(math.MaxInt32), int64(0), int64(42)},
	"INT64":  {int64(math.MinInt64), int64(math.MaxInt64), int64(1)<<53 + 1, int64(-3)},
	"UINT8":  {uint64(0), uint64(255), uint64(1), uint64(128)},
	"UINT16": {uint64(0), uint64(65535), uint64(9), uint64(300)},
	"UINT32": {uint64(0), uint64(math.MaxUint32), uint64(5), uint64(1) << 31},
	"UINT64": {uint64(0), uint64(math.MaxUint64), uint64(1)<<53 + 1, uint64(12)},
	"FP16":   {0.5, -1.25, 65504.0, 0x1p-24, 0.0999755859375, math.Copysign(0, -1)},
	"FP32":   {float32(1.5), float32(-0.1), float32(math.MaxFloat32), float32(math.SmallestNonzeroFloat32)},
	"FP64":   {0.1, -2.5, math.MaxFloat64, math.SmallestNonzeroFloat64},
}

// TestV2EveryDatatype: the identity model of testdata/models/dtypes.onnx
// answers each input with itself, as JSON, as binary and mixed; each
// output is its input, byte for byte, and /predict's for the same items.
func TestV2EveryDatatype(t *testing.T) {
	path, err := onnxtest.Path("dtypes")
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		t.Fatalf("the dtypes test model is missing: %v", err)
	}
	s := startServer(t, "--model", path, "--intra-op-threads", "1")
	var meta v2Metadata
	if status, msg := s.getV2(t, "/v2/models/dtypes", &meta); status != http.StatusOK {
		t.Fatalf("GET /v2/models/dtypes: %d %s", status, msg)
	}
	seen := map[string]bool{}
	var inputs []tensorData
	outputOf := map[string]string{} // input name → the output of its datatype
	for _, in := range meta.Inputs {
		values, ok := dtypeValues[in.Datatype]
		if !ok {
			t.Fatalf("input %s: datatype %s has no test values", in.Name, in.Datatype)
		}
		seen[in.Datatype] = true
		if len(in.Shape) == 0 || in.Shape[0] != -1 {
			t.Fatalf("input %s: shape %v, want the batch axis first", in.Name, in.Shape)
		}
		d := tensorData{name: in.Name, datatype: in.Datatype, shape: []int64{2}}
		for k, dim := range in.Shape[1:] {
			if dim < 0 {
				dim = int64(2 + k)
			}
			d.shape = append(d.shape, dim)
		}
		n := 1
		for _, dim := range d.shape {
			n *= int(dim)
		}
		for i := range n {
			d.values = append(d.values, values[i%len(values)])
		}
		inputs = append(inputs, d)
		for _, out := range meta.Outputs {
			if out.Datatype == in.Datatype {
				outputOf[in.Name] = out.Name
			}
		}
	}
	for datatype := range dtypeValues {
		if !seen[datatype] {
			t.Errorf("the model has no %s input", datatype)
		}
	}
	predicted := s.predictRows(t, 2, inputs)
	forms := []struct {
		name string
		form func(int, tensorData) v2Input
		out  map[string]any
	}{
		{"JSON", func(_ int, d tensorData) v2Input { return d.flat() }, nil},
		{"nested JSON in, binary out", func(_ int, d tensorData) v2Input { return d.nested() }, map[string]any{"binary_data_output": true}},
		{"binary", func(_ int, d tensorData) v2Input { return d.binaryInput() }, map[string]any{"binary_data_output": true}},
		{"binary in, JSON out", func(_ int, d tensorData) v2Input { return d.binaryInput() }, nil},
		{"mixed", func(i int, d tensorData) v2Input { return []func() v2Input{d.flat, d.binaryInput}[i%2]() }, nil},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			req := v2Request{Parameters: f.out}
			for i, d := range inputs {
				req.Inputs = append(req.Inputs, f.form(i, d))
			}
			a := s.infer(t, "/v2/models/dtypes/infer", req)
			if a.Status != http.StatusOK {
				t.Fatalf("%s", a)
			}
			for _, d := range inputs {
				o := a.output(t, outputOf[d.name])
				if got := o.bytes(t); o.Datatype != d.datatype || !bytes.Equal(got, d.bytes()) {
					t.Errorf("%s: output %s %s %x, want %s %x", d.name, o.Name, o.Datatype, got, d.datatype, d.bytes())
				}
				checkSameAsPredict(t, o, predicted, o.Name)
			}
		})
	}
}

// bytesElements is a BYTES input of the built-ins.
func bytesElements(values ...any) tensorData {
	return tensorData{name: "input", datatype: "BYTES", shape: []int64{int64(len(values))}, values: values}
}

// TestV2EchoBytes: the built-ins take one BYTES element per item; text and
// binary elements come back as they went, in JSON and binary, as /predict
// answers them.
func TestV2EchoBytes(t *testing.T) {
	s := startServer(t, "--model", "echo")
	var meta v2Metadata
	if status, msg := s.getV2(t, "/v2/models/echo", &meta); status != http.StatusOK || meta.Platform == "" ||
		specsString(meta.Inputs) != "input BYTES [-1]" || specsString(meta.Outputs) != "output BYTES [-1]" {
		t.Errorf("GET /v2/models/echo: %d %s %+v", status, msg, meta)
	}
	text := bytesElements("a", "héllo, 世界", "", strings.Repeat("x", 300))
	raw := bytesElements([]byte{0xff, 0xfe, 0}, "text", []byte{0x80})
	for _, tt := range []struct {
		name string
		in   tensorData
		req  func(tensorData) v2Request
	}{
		{"JSON", text, func(d tensorData) v2Request { return v2Request{ID: "j", Inputs: []v2Input{d.flat()}} }},
		{"JSON in, binary out", text, func(d tensorData) v2Request {
			return v2Request{Inputs: []v2Input{d.flat()}, Outputs: []v2RequestOutput{{Name: "output", Parameters: map[string]any{"binary_data": true}}}}
		}},
		{"binary elements", raw, func(d tensorData) v2Request {
			return v2Request{Inputs: []v2Input{d.binaryInput()}, Parameters: map[string]any{"binary_data_output": true}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var items []any
			for _, v := range tt.in.values {
				e, _ := appendElement(nil, "BYTES", v)
				items = append(items, bytesItem(e[4:]))
			}
			body, err := msgpack.Marshal(map[string]any{"inputs": items})
			if err != nil {
				t.Fatal(err)
			}
			status, data, _ := s.post(t, "application/msgpack", body)
			var predicted struct {
				Outputs []any `msgpack:"outputs"`
			}
			if status != http.StatusOK || msgpack.Unmarshal(data, &predicted) != nil {
				t.Fatalf("/predict: %d %x", status, data)
			}
			req := tt.req(tt.in)
			a := s.infer(t, "/v2/models/echo/infer", req)
			if a.Status != http.StatusOK || a.ID != req.ID || a.ModelName != "echo" {
				t.Fatalf("%s", a)
			}
			o := a.output(t, "output")
			got := elements(t, o.bytes(t))
			if o.Datatype != "BYTES" || fmt.Sprint(o.Shape) != fmt.Sprint(tt.in.shape) || len(got) != len(items) {
				t.Fatalf("output %s %v with %d elements; want BYTES %v", o.Datatype, o.Shape, len(got), tt.in.shape)
			}
			for i, e := range got {
				want := fmt.Sprint(predicted.Outputs[i])
				if b, ok := predicted.Outputs[i].([]byte); ok {
					want = string(b)
				}
				if string(e) != want || !bytes.Equal(e, elements(t, tt.in.bytes())[i]) {
					t.Errorf("element %d: %q; /predict answered %q to %q", i, e, want, elements(t, tt.in.bytes())[i])
				}
			}
		})
	}
	for _, tt := range []struct {
		name string
		req  v2Request
		want []string
	}{
		{"FP32 for BYTES", v2Request{Inputs: []v2Input{{Name: "input", Datatype: "FP32", Shape: []int64{1}, Data: []float32{1}}}}, []string{"input", "BYTES", "FP32"}},
		{"rows of two elements", v2Request{Inputs: []v2Input{{Name: "input", Datatype: "BYTES", Shape: []int64{1, 2}, Data: []string{"a", "b"}}}}, []string{"input"}},
		{"a number for BYTES", v2Request{Inputs: []v2Input{{Name: "input", Datatype: "BYTES", Shape: []int64{1}, Data: []int{1}}}}, []string{"input"}},
		{"another input name", v2Request{Inputs: []v2Input{{Name: "text", Datatype: "BYTES", Shape: []int64{1}, Data: []string{"a"}}}}, []string{"text"}},
		{"an unknown output", v2Request{Inputs: []v2Input{text.flat()}, Outputs: []v2RequestOutput{{Name: "answer"}}}, []string{"answer"}},
		{"a truncated BYTES element", v2Request{Inputs: []v2Input{{Name: "input", Datatype: "BYTES", Shape: []int64{1}, binary: []byte{5, 0, 0, 0, 'a'}}}}, []string{"input"}},
	} {
		wantError(t, tt.name, s.infer(t, "/v2/models/echo/infer", tt.req), http.StatusBadRequest, tt.want...)
	}
}

// TestV2RowRefusedByTheModel: an item the model refuses is 422 naming its
// row, in the v2 answer's words, where /predict names the same item.
func TestV2RowRefusedByTheModel(t *testing.T) {
	s := startServer(t, "--model", "chaos:reject=bad")
	a := s.infer(t, "/v2/models/chaos/infer", v2Request{Inputs: []v2Input{bytesElements("a", "bad", "c").flat()}})
	wantError(t, "a bad row", a, http.StatusUnprocessableEntity, "row 1: ", `item "bad" rejected`)
	if strings.Contains(a.Error, "item 1") {
		t.Errorf("the v2 answer names the item, not the row: %s", a.Error)
	}
	if p := s.predictJSON(t, "a", "bad", "c"); p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "item 1: ") {
		t.Errorf("/predict: %s, want 422 naming item 1", p)
	}
}

// TestV2ModelNameFlag: --model-name renames the model on the v2 routes;
// its old name is then unknown.
func TestV2ModelNameFlag(t *testing.T) {
	s := startServer(t, "--model", "echo", "--model-name", "parrot")
	var meta v2Metadata
	if status, msg := s.getV2(t, "/v2/models/parrot", &meta); status != http.StatusOK || meta.Name != "parrot" {
		t.Errorf("GET /v2/models/parrot: %d %s %+v", status, msg, meta)
	}
	if status, _ := s.getV2(t, "/v2/models/echo", nil); status != http.StatusNotFound {
		t.Errorf("GET /v2/models/echo: %d, want 404", status)
	}
	a := s.infer(t, "/v2/models/parrot/infer", v2Request{Inputs: []v2Input{bytesElements("hi").flat()}})
	if a.Status != http.StatusOK || a.ModelName != "parrot" || string(elements(t, a.output(t, "output").bytes(t))[0]) != "hi" {
		t.Errorf("infer: %s", a)
	}
}

// TestCompressedBodies: bodies compressed as tritonclient compresses them
// (gzip, and deflate as zlib.compress writes it) are read on /predict and
// the v2 inference route, a binary request's Inference-Header-Content-Length
// counting the decompressed body's JSON; another coding is 415 naming
// those read.
func TestCompressedBodies(t *testing.T) {
	s := startServer(t, "--model", "echo")
	compress := func(coding string, body []byte) []byte {
		var buf bytes.Buffer
		var w io.WriteCloser = zlib.NewWriter(&buf)
		if coding == "gzip" {
			w = gzip.NewWriter(&buf)
		}
		if _, err := w.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	in := bytesElements("héllo", []byte{0xff, 0}, strings.Repeat("long ", 100))
	for _, coding := range []string{"gzip", "deflate"} {
		status, data, _ := s.post(t, "application/json", compress(coding, []byte(`{"inputs": ["a", "b"]}`)), "Content-Encoding", coding)
		if status != http.StatusOK || strings.TrimSpace(string(data)) != `{"outputs":["a","b"]}` {
			t.Errorf("/predict, %s: %d %s", coding, status, data)
		}
		body, header, err := encodeV2(v2Request{Inputs: []v2Input{in.binaryInput()}, Parameters: map[string]any{"binary_data_output": true}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.v2(http.MethodPost, "/v2/models/echo/infer", compress(coding, body), append(header, "Content-Encoding", coding)...)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusOK || !bytes.Equal(a.output(t, "output").bytes(t), in.bytes()) {
			t.Errorf("v2 binary, %s: %s", coding, a)
		}
	}
	status, data, hdr := s.post(t, "application/json", []byte(`{"inputs": ["a"]}`), "Content-Encoding", "br")
	if status != http.StatusUnsupportedMediaType || hdr.Get("Accept-Encoding") != "gzip, deflate" || !strings.Contains(string(data), "gzip or deflate") {
		t.Errorf("/predict, br: %d, Accept-Encoding %q, %s; want 415 naming gzip and deflate", status, hdr.Get("Accept-Encoding"), data)
	}
}

// TestV2TimeoutParameter: a deadline the sleep model cannot meet is 504,
// at the deadline rather than after the batch; one it can meet is 200, and
// so is a timeout of 0, which is none.
func TestV2TimeoutParameter(t *testing.T) {
	s := startServer(t, "--model", "sleep:2s,0s")
	in := bytesElements("slow").flat()
	start := time.Now()
	a := s.infer(t, "/v2/models/sleep/infer", v2Request{Inputs: []v2Input{in}, Parameters: map[string]any{"timeout": 1}})
	if took := time.Since(start); a.Status != http.StatusGatewayTimeout || a.Error == "" || took > 1500*time.Millisecond {
		t.Errorf("timeout 1: %s after %s; want 504 at once", a, took)
	}
	a = s.infer(t, "/v2/models/sleep/infer", v2Request{Inputs: []v2Input{in}, Parameters: map[string]any{"timeout": 60_000_000}})
	if a.Status != http.StatusOK {
		t.Errorf("a generous timeout: %s", a)
	}
	a = s.infer(t, "/v2/models/sleep/infer", v2Request{Inputs: []v2Input{in}, Parameters: map[string]any{"timeout": 0}})
	if a.Status != http.StatusOK {
		t.Errorf("timeout 0, which is none: %s", a)
	}
	wantError(t, "a timeout that is no number", s.infer(t, "/v2/models/sleep/infer", v2Request{Inputs: []v2Input{in}, Parameters: map[string]any{"timeout": "soon"}}), http.StatusBadRequest, "timeout")
}

// TestV2ThroughRedisFrontEnd: a front end with no workers serves v2 for
// the model it is told, checking items at its edge; a node runs them.
func TestV2ThroughRedisFrontEnd(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	path, ref := onnxModel(t, onnxtest.Demo)
	startBrokerNode(t, rs, "--workers", "1", "--model", path, "--intra-op-threads", "1")
	front := startBrokerFront(t, rs, "--model", path)
	waitReadyz(t, front, http.StatusOK)
	in := demoRows(rand.New(rand.NewPCG(2, 9)), 3)
	a := front.infer(t, "/v2/models/demo/infer", v2Request{Inputs: []v2Input{in.binaryInput()}})
	if a.Status != http.StatusOK {
		t.Fatalf("%s", a)
	}
	checkDemoReference(t, ref, in, a.output(t, "probs"))
	bad := v2Request{Inputs: []v2Input{{Name: "features", Datatype: "FP32", Shape: []int64{1, 3}, Data: []float32{1, 2, 3}}}}
	wantError(t, "a row of 3 features", front.infer(t, "/v2/models/demo/infer", bad), http.StatusBadRequest, "features")
}
