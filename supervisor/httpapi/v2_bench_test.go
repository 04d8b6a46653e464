package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// passModel is the cheapest TensorModel: an item is its one input's row as
// it is, and an answer is one output of the same datatype and row shape,
// so that the benchmarks measure the handler, not a model's codec.
type passModel struct {
	meta     ModelMetadata
	rowShape []int64
}

func newPassModel(datatype string, rowShape ...int64) *passModel {
	shape := append([]int64{-1}, rowShape...)
	return &passModel{
		meta: ModelMetadata{Name: "m", Inputs: []TensorSpec{spec("x", datatype, true, shape...)},
			Outputs: []TensorSpec{spec("y", datatype, true, shape...)}},
		rowShape: rowShape,
	}
}

func (m *passModel) Metadata() ModelMetadata { return m.meta }

func (m *passModel) Item(inputs []Tensor) ([]byte, string, error) { return inputs[0].Data, "", nil }

func (m *passModel) Outputs(answer []byte) ([]Tensor, error) {
	return []Tensor{{Name: "y", Datatype: m.meta.Outputs[0].Datatype, Shape: m.rowShape, Data: answer}}, nil
}

// v2BenchCase is a request body, JSON or binary.
type v2BenchCase struct {
	name   string
	model  *passModel
	body   []byte
	header string // Inference-Header-Content-Length; "" for JSON
}

func v2BenchCases() []v2BenchCase {
	const rows, width = 8, 16
	var values []string
	var fp32 []float32
	for i := range rows * width {
		v := float32(i)*0.25 - 3
		values = append(values, strconv.FormatFloat(float64(v), 'g', -1, 32))
		fp32 = append(fp32, v)
	}
	sentence := "The quick brown fox jumps over the [MASK] dog."
	fpModel, bytesModel := newPassModel("FP32", width), newPassModel("BYTES")
	jsonFP32 := `{"id":"b1","inputs":[{"name":"x","shape":[8,16],"datatype":"FP32","data":[` + strings.Join(values, ",") + `]}]}`
	var nestedRows []string
	for r := range rows {
		nestedRows = append(nestedRows, "["+strings.Join(values[r*width:(r+1)*width], ",")+"]")
	}
	jsonFP32Nested := `{"id":"b1","inputs":[{"name":"x","shape":[8,16],"datatype":"FP32","data":[` + strings.Join(nestedRows, ",") + `]}]}`
	jsonBytes := `{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":["` + sentence + `"]}]}`
	binFP32, hlFP32 := binaryRequest(`{"id":"b1","parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[8,16],"datatype":"FP32",`+
		`"parameters":{"binary_data_size":512}}]}`, f32s(fp32...))
	bs := bytesElements(sentence)
	binBytes, hlBytes := binaryRequest(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[1],"datatype":"BYTES",`+
		`"parameters":{"binary_data_size":`+strconv.Itoa(len(bs))+`}}]}`, bs)
	return []v2BenchCase{
		{"json/fp32-8x16", fpModel, []byte(jsonFP32), ""},
		{"json/fp32-8x16-nested", fpModel, []byte(jsonFP32Nested), ""},
		{"json/bytes-1", bytesModel, []byte(jsonBytes), ""},
		{"binary/fp32-8x16", fpModel, binFP32, hlFP32},
		{"binary/bytes-1", bytesModel, binBytes, hlBytes},
	}
}

// BenchmarkV2Infer measures POST /v2/models/m/infer in process, with an
// echoing Backend and a model that costs nothing: JSON bodies (the data
// parsed into the binary layout and written back as JSON; flat, and nested
// one array per row) and binary ones (binary in, binary out), for a batch
// of 8 rows of 16 FP32 and for one sentence as BYTES.
func BenchmarkV2Infer(b *testing.B) {
	for _, bc := range v2BenchCases() {
		b.Run(bc.name, func(b *testing.B) {
			h := New(Config{Backend: &fakeBackend{}, Tensors: bc.model})
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", bytes.NewReader(bc.body))
				if bc.header != "" {
					req.Header.Set(InferenceHeaderLength, bc.header)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
				}
			}
		})
	}
}

// BenchmarkV2InferDecode measures reading a v2 body alone: the JSON walk,
// the data's conversion and the checks against the model, without HTTP
// and without the answer.
func BenchmarkV2InferDecode(b *testing.B) {
	for _, bc := range v2BenchCases() {
		b.Run(bc.name, func(b *testing.B) {
			h := New(Config{Backend: &fakeBackend{}, Tensors: bc.model}).(*handler)
			meta := bc.model.Metadata()
			header := http.Header{}
			if bc.header != "" {
				header.Set(InferenceHeaderLength, bc.header)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				st := h.getInferState()
				st.body.Write(bc.body)
				if err := st.read(header, meta, bc.model); err != nil {
					b.Fatal(err)
				}
				h.putInferState(st)
			}
		})
	}
}
