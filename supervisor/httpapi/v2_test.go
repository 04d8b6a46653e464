package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// tensorEcho is a fake TensorModel: an item is its row's inputs in
// msgpack, and an answer decodes back into the tensors it holds. Behind the
// echoing fakeBackend every output is thus the input of the same name. It
// records the inputs of every Item call.
type tensorEcho struct {
	meta   ModelMetadata
	key    func(inputs []Tensor) string // the batch key; nil: ""
	refuse func(inputs []Tensor) error  // nil: take every row
	// outputs, when set, replaces the decoding of answers.
	outputs func(answer []byte) ([]Tensor, error)

	mu   sync.Mutex
	rows [][]Tensor
}

// wireTensor is a Tensor in tensorEcho's items.
type wireTensor struct {
	Name     string  `msgpack:"n"`
	Datatype string  `msgpack:"d"`
	Shape    []int64 `msgpack:"s"`
	Data     []byte  `msgpack:"b"`
}

func (m *tensorEcho) Metadata() ModelMetadata { return m.meta }

func (m *tensorEcho) Item(inputs []Tensor) ([]byte, string, error) {
	if len(inputs) != len(m.meta.Inputs) {
		return nil, "", errors.New("wrong number of inputs")
	}
	for i, in := range inputs {
		if in.Name != m.meta.Inputs[i].Name || in.Datatype != m.meta.Inputs[i].Datatype {
			return nil, "", errors.New("inputs out of the metadata's order")
		}
	}
	if m.refuse != nil {
		if err := m.refuse(inputs); err != nil {
			return nil, "", err
		}
	}
	row := make([]Tensor, len(inputs))
	wire := make([]wireTensor, len(inputs))
	for i, in := range inputs {
		row[i] = Tensor{Name: in.Name, Datatype: in.Datatype, Shape: slices.Clone(in.Shape), Data: slices.Clone(in.Data)}
		wire[i] = wireTensor(row[i])
	}
	m.mu.Lock()
	m.rows = append(m.rows, row)
	m.mu.Unlock()
	item, err := msgpack.Marshal(wire)
	key := ""
	if m.key != nil {
		key = m.key(inputs)
	}
	return item, key, err
}

func (m *tensorEcho) Outputs(answer []byte) ([]Tensor, error) {
	if m.outputs != nil {
		return m.outputs(answer)
	}
	var wire []wireTensor
	if err := msgpack.Unmarshal(answer, &wire); err != nil {
		return nil, err
	}
	out := make([]Tensor, len(wire))
	for i, w := range wire {
		out[i] = Tensor(w)
	}
	return out, nil
}

// itemRows returns the inputs of every Item call so far.
func (m *tensorEcho) itemRows() [][]Tensor {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.rows)
}

func spec(name, datatype string, batched bool, shape ...int64) TensorSpec {
	return TensorSpec{Name: name, Datatype: datatype, Shape: shape, Batched: batched}
}

// echoModel is a tensorEcho named m whose outputs are its inputs.
func echoModel(inputs ...TensorSpec) *tensorEcho {
	return &tensorEcho{meta: ModelMetadata{Name: "m", Platform: "test", Inputs: inputs, Outputs: inputs}}
}

func newV2(model TensorModel, backend *fakeBackend) http.Handler {
	if backend == nil {
		backend = &fakeBackend{ready: true}
	}
	return New(Config{Backend: backend, Tensors: model})
}

// v2Answer is an inference answer; numbers stay as their JSON text.
type v2Answer struct {
	ModelName    string  `json:"model_name"`
	ModelVersion *string `json:"model_version"`
	ID           *string `json:"id"`
	Outputs      []struct {
		Name       string         `json:"name"`
		Datatype   string         `json:"datatype"`
		Shape      []int64        `json:"shape"`
		Data       []any          `json:"data"`
		Parameters map[string]any `json:"parameters"`
	} `json:"outputs"`
}

// decodeJSONText decodes JSON with numbers kept as their text.
func decodeJSONText(t *testing.T, text []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %q: %v", text, err)
	}
}

// answerOf decodes a 200 answer, JSON or binary, into its JSON part and
// the binary data of each output sent so.
func answerOf(t *testing.T, rec *httptest.ResponseRecorder) (v2Answer, map[string][]byte) {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200; body %q", rec.Code, rec.Body.String())
	}
	body := rec.Body.Bytes()
	header := rec.Header().Get(InferenceHeaderLength)
	ct := rec.Header().Get("Content-Type")
	if header == "" {
		if ct != "application/json" {
			t.Fatalf("JSON answer has Content-Type %q", ct)
		}
		var a v2Answer
		decodeJSONText(t, body, &a)
		return a, nil
	}
	if ct != "application/octet-stream" {
		t.Fatalf("binary answer has Content-Type %q", ct)
	}
	n, err := strconv.Atoi(header)
	if err != nil || n > len(body) {
		t.Fatalf("%s %q for a body of %d bytes", InferenceHeaderLength, header, len(body))
	}
	var a v2Answer
	decodeJSONText(t, body[:n], &a)
	rest := body[n:]
	bins := map[string][]byte{}
	for _, o := range a.Outputs {
		size, ok := o.Parameters["binary_data_size"].(json.Number)
		if !ok {
			continue
		}
		if o.Data != nil {
			t.Errorf("output %q has both data and binary_data_size", o.Name)
		}
		k, _ := strconv.Atoi(size.String())
		if k > len(rest) {
			t.Fatalf("output %q: binary_data_size %d, %d bytes left", o.Name, k, len(rest))
		}
		bins[o.Name], rest = rest[:k], rest[k:]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes after the binary outputs", len(rest))
	}
	return a, bins
}

// jsonValues decodes a JSON array text as answerOf decodes data.
func jsonValues(t *testing.T, text string) []any {
	t.Helper()
	var v []any
	decodeJSONText(t, []byte(text), &v)
	return v
}

// binaryRequest lays out a binary tensor data body: the JSON header, then
// the parts.
func binaryRequest(header string, parts ...[]byte) ([]byte, string) {
	body := []byte(header)
	for _, p := range parts {
		body = append(body, p...)
	}
	return body, strconv.Itoa(len(header))
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func le64(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func f32s(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func f64s(vs ...float64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// bytesElements lays out BYTES elements: a 4-byte length before each.
func bytesElements(vs ...string) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func postV2(t testing.TB, h http.Handler, path, body string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, h, http.MethodPost, path, "application/json", []byte(body), header...)
}

func TestV2Health(t *testing.T) {
	for _, ready := range []bool{true, false} {
		h := newV2(nil, &fakeBackend{ready: ready})
		live := do(t, h, http.MethodGet, "/v2/health/live", "", nil)
		if live.Code != 200 || strings.TrimSpace(live.Body.String()) != `{"live":true}` {
			t.Errorf("ready=%v: live = %d %s, want 200 {\"live\":true}", ready, live.Code, live.Body)
		}
		rec := do(t, h, http.MethodGet, "/v2/health/ready", "", nil)
		want, wantBody := 200, `{"ready":true}`
		if !ready {
			want, wantBody = 503, `{"ready":false}`
		}
		if rec.Code != want || strings.TrimSpace(rec.Body.String()) != wantBody {
			t.Errorf("ready=%v: ready = %d %s, want %d %s", ready, rec.Code, rec.Body, want, wantBody)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	}
	h := newV2(nil, nil)
	rec := do(t, h, http.MethodPost, "/v2/health/live", "", nil)
	if rec.Code != 405 || rec.Header().Get("Allow") != "GET, HEAD" || !strings.Contains(errorOf(t, rec), "GET") {
		t.Errorf("POST /v2/health/live: %d, Allow %q, %s; want 405 allowing GET, HEAD", rec.Code, rec.Header().Get("Allow"), rec.Body)
	}
}

func TestV2ServerMetadata(t *testing.T) {
	var got serverMetadataBody
	rec := do(t, newV2(nil, nil), http.MethodGet, "/v2", "", nil)
	decodeJSONText(t, rec.Body.Bytes(), &got)
	if rec.Code != 200 || got.Name != "streamer" || got.Version == "" || !slices.Contains(got.Extensions, "binary_tensor_data") {
		t.Errorf("GET /v2 = %d %+v; want streamer, a version and the binary_tensor_data extension", rec.Code, got)
	}
	h := New(Config{Backend: &fakeBackend{}, ServerName: "edge", ServerVersion: "1.2.3"})
	rec = do(t, h, http.MethodGet, "/v2", "", nil)
	if want := `{"name":"edge","version":"1.2.3","extensions":["binary_tensor_data","model_configuration","statistics"]}`; strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("GET /v2 = %s, want %s", rec.Body, want)
	}
}

func TestV2ModelMetadata(t *testing.T) {
	model := echoModel(spec("x", "FP32", true, -1, 3), spec("y", "BYTES", false, 1))
	model.meta.Versions = []string{"1", "2"}
	h := newV2(model, nil)
	want := `{"name":"m","versions":["1","2"],"platform":"test",` +
		`"inputs":[{"name":"x","datatype":"FP32","shape":[-1,3]},{"name":"y","datatype":"BYTES","shape":[1]}],` +
		`"outputs":[{"name":"x","datatype":"FP32","shape":[-1,3]},{"name":"y","datatype":"BYTES","shape":[1]}]}`
	for _, path := range []string{"/v2/models/m", "/v2/models/m/versions/2"} {
		rec := do(t, h, http.MethodGet, path, "", nil)
		if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != want {
			t.Errorf("GET %s = %d %s, want %s", path, rec.Code, rec.Body, want)
		}
	}
	empty := New(Config{Backend: &fakeBackend{}, Tensors: &tensorEcho{meta: ModelMetadata{Name: "e", Inputs: []TensorSpec{{Name: "s", Datatype: "BOOL"}}}}})
	rec := do(t, empty, http.MethodGet, "/v2/models/e/versions/7", "", nil)
	if want := `{"name":"e","platform":"","inputs":[{"name":"s","datatype":"BOOL","shape":[]}],"outputs":[]}`; strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("metadata without versions or outputs = %s, want %s (any version accepted, lists never null)", rec.Body, want)
	}
}

func TestV2ModelReady(t *testing.T) {
	for _, ready := range []bool{true, false} {
		h := newV2(echoModel(spec("x", "FP32", true, -1)), &fakeBackend{ready: ready})
		for _, path := range []string{"/v2/models/m/ready", "/v2/models/m/versions/3/ready"} {
			rec := do(t, h, http.MethodGet, path, "", nil)
			want, wantBody := 200, `{"name":"m","ready":true}`
			if !ready {
				want, wantBody = 503, `{"name":"m","ready":false}`
			}
			if rec.Code != want || strings.TrimSpace(rec.Body.String()) != wantBody {
				t.Errorf("ready=%v: GET %s = %d %s, want %d %s", ready, path, rec.Code, rec.Body, want, wantBody)
			}
		}
	}
}

func TestV2ModelRoutesRefuse(t *testing.T) {
	model := echoModel(spec("x", "FP32", true, -1))
	model.meta.Versions = []string{"1", "2"}
	h := newV2(model, nil)
	none := newV2(nil, nil)
	infer := `{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]}`
	tests := []struct {
		name      string
		handler   http.Handler
		method    string
		path      string
		want      int
		wantMsg   []string
		wantAllow string
	}{
		{"unknown model", h, "GET", "/v2/models/other", 404, []string{`"other"`, `"m"`}, ""},
		{"unknown model ready", h, "GET", "/v2/models/other/ready", 404, []string{`"other"`, `"m"`}, ""},
		{"unknown model infer", h, "POST", "/v2/models/other/infer", 404, []string{`"other"`, `"m"`}, ""},
		{"unknown version", h, "GET", "/v2/models/m/versions/3", 404, []string{`"3"`, "1, 2"}, ""},
		{"unknown version infer", h, "POST", "/v2/models/m/versions/3/infer", 404, []string{`"3"`, "1, 2"}, ""},
		{"no tensor model", none, "GET", "/v2/models/m", 404, []string{"no model is served over the v2"}, ""},
		{"no tensor model infer", none, "POST", "/v2/models/m/infer", 404, []string{"no model is served over the v2"}, ""},
		{"GET infer", h, "GET", "/v2/models/m/infer", 405, []string{"POST"}, "POST"},
		{"POST metadata", h, "POST", "/v2/models/m", 405, []string{"GET"}, "GET, HEAD"},
		{"POST ready", h, "POST", "/v2/models/m/ready", 405, []string{"GET"}, "GET, HEAD"},
		{"POST server metadata", h, "POST", "/v2", 405, []string{"GET"}, "GET, HEAD"},
		{"unknown model route", h, "GET", "/v2/models/m/trace", 404, []string{"no route", "/v2/models/{model}", "/config"}, ""},
		{"empty model name", h, "GET", "/v2/models/", 404, []string{"no route"}, ""},
		{"empty version", h, "GET", "/v2/models/m/versions/", 404, []string{"no route"}, ""},
		{"unknown v2 route", h, "GET", "/v2/trace/setting", 404, []string{"no route", "/v2/health/live", "/v2/repository/index"}, ""},
		{"GET repository index", h, "GET", "/v2/repository/index", 405, []string{"POST"}, "POST"},
		{"config of an unknown model", h, "GET", "/v2/models/other/config", 404, []string{`"other"`, `"m"`}, ""},
		{"POST config", h, "POST", "/v2/models/m/config", 405, []string{"GET"}, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, tt.handler, tt.method, tt.path, "application/json", []byte(infer))
			if rec.Code != tt.want {
				t.Fatalf("%s %s: status %d (%s), want %d", tt.method, tt.path, rec.Code, rec.Body, tt.want)
			}
			msg := errorOf(t, rec)
			for _, w := range tt.wantMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if got := rec.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

// v2DatatypeCases is one tensor of every datatype: its JSON data as sent,
// as answered, and its binary layout.
var v2DatatypeCases = []struct {
	datatype string
	in, out  string
	bin      []byte
}{
	{"BOOL", `[true,false,true]`, `[true,false,true]`, []byte{1, 0, 1}},
	{"UINT8", `[0,7,255]`, `[0,7,255]`, []byte{0, 7, 255}},
	{"UINT16", `[0,258,65535]`, `[0,258,65535]`, le16(0, 258, 65535)},
	{"UINT32", `[0,16909060,4294967295]`, `[0,16909060,4294967295]`, le32(0, 16909060, 4294967295)},
	{"UINT64", `[0,1,18446744073709551615]`, `[0,1,18446744073709551615]`, le64(0, 1, math.MaxUint64)},
	{"INT8", `[-128,-1,127]`, `[-128,-1,127]`, []byte{0x80, 0xff, 0x7f}},
	{"INT16", `[-32768,-2,32767]`, `[-32768,-2,32767]`, le16(0x8000, 0xfffe, 0x7fff)},
	{"INT32", `[-2147483648,-3,2147483647]`, `[-2147483648,-3,2147483647]`, le32(0x80000000, 0xfffffffd, 0x7fffffff)},
	{"INT64", `[-9223372036854775808,-4,9223372036854775807]`, `[-9223372036854775808,-4,9223372036854775807]`,
		le64(1<<63, math.MaxUint64-3, math.MaxInt64)},
	{"FP16", `[1,-2.5,0.1,65504,6e-8,0]`, `[1,-2.5,0.099975586,65504,5.9604645e-8,0]`, le16(0x3c00, 0xc100, 0x2e66, 0x7bff, 0x0001, 0)},
	{"FP32", `[0.1,-1e-7,3.4028235e38]`, `[0.1,-1e-7,3.4028235e+38]`, f32s(0.1, -1e-7, math.MaxFloat32)},
	{"FP64", `[0.1,1e300,-0.5]`, `[0.1,1e+300,-0.5]`, f64s(0.1, 1e300, -0.5)},
	{"BYTES", `["hello","","naïve \"q\"\n\u00e9\ud83d\ude00"]`, `["hello","","naïve \"q\"\né😀"]`, bytesElements("hello", "", "naïve \"q\"\né😀")},
}

// rowsData joins the data of the rows' input called name.
func rowsData(rows [][]Tensor, name string) []byte {
	var b []byte
	for _, row := range rows {
		for _, t := range row {
			if t.Name == name {
				b = append(b, t.Data...)
			}
		}
	}
	return b
}

// TestV2InferEveryDatatype sends a batched tensor of every datatype as JSON
// and as binary data, and asks for it back as JSON and as binary data: the
// model's rows hold the binary layout, and the answer gives the values back.
func TestV2InferEveryDatatype(t *testing.T) {
	for _, tc := range v2DatatypeCases {
		n := len(jsonValues(t, tc.in))
		for _, mode := range []struct {
			name              string
			binaryIn, binOut  bool
			outputsParameters string
		}{
			{name: "json in json out"},
			{name: "json in binary out", binOut: true},
			{name: "binary in json out", binaryIn: true},
			{name: "binary in binary out", binaryIn: true, binOut: true},
		} {
			t.Run(tc.datatype+"/"+mode.name, func(t *testing.T) {
				model := echoModel(spec("t", tc.datatype, true, -1))
				h := newV2(model, nil)
				params := ""
				if mode.binOut {
					params = `"parameters":{"binary_data_output":true},`
				}
				var rec *httptest.ResponseRecorder
				if mode.binaryIn {
					header := `{` + params + `"inputs":[{"name":"t","datatype":"` + tc.datatype + `","shape":[` + strconv.Itoa(n) +
						`],"parameters":{"binary_data_size":` + strconv.Itoa(len(tc.bin)) + `}}]}`
					body, hl := binaryRequest(header, tc.bin)
					rec = do(t, h, http.MethodPost, "/v2/models/m/infer", "application/octet-stream", body, InferenceHeaderLength, hl)
				} else {
					rec = postV2(t, h, "/v2/models/m/infer", `{`+params+`"inputs":[{"name":"t","shape":[`+strconv.Itoa(n)+
						`],"datatype":"`+tc.datatype+`","data":`+tc.in+`}]}`)
				}
				answer, bins := answerOf(t, rec)
				rows := model.itemRows()
				if len(rows) != n {
					t.Fatalf("%d items, want one per row: %d", len(rows), n)
				}
				for i, row := range rows {
					if len(row[0].Shape) != 0 {
						t.Errorf("row %d has shape %v, want [] (the batch axis removed)", i, row[0].Shape)
					}
				}
				if got := rowsData(rows, "t"); !bytes.Equal(got, tc.bin) {
					t.Errorf("the model's rows hold % x, want % x", got, tc.bin)
				}
				if answer.ModelName != "m" || len(answer.Outputs) != 1 {
					t.Fatalf("answer %+v, want model m and one output", answer)
				}
				out := answer.Outputs[0]
				if out.Name != "t" || out.Datatype != tc.datatype || !slices.Equal(out.Shape, []int64{int64(n)}) {
					t.Errorf("output %s %s %v, want t %s [%d]", out.Name, out.Datatype, out.Shape, tc.datatype, n)
				}
				if mode.binOut {
					if !bytes.Equal(bins["t"], tc.bin) {
						t.Errorf("binary output % x, want % x", bins["t"], tc.bin)
					}
				} else if want := jsonValues(t, tc.out); !reflect.DeepEqual(out.Data, want) {
					t.Errorf("output data %v, want %v", out.Data, want)
				}
			})
		}
	}
}

func TestV2InferNestedAndFlatData(t *testing.T) {
	for _, data := range []string{`[[1,2,3],[4,5,6]]`, `[1,2,3,4,5,6]`, ` [ [1, 2, 3] , [4 ,5,6] ] `} {
		model := echoModel(spec("x", "INT32", true, -1, 3))
		backend := &fakeBackend{}
		h := newV2(model, backend)
		rec := postV2(t, h, "/v2/models/m/infer", `{"inputs":[{"name":"x","shape":[2,3],"datatype":"INT32","data":`+data+`}]}`)
		answer, _ := answerOf(t, rec)
		if want := jsonValues(t, `[1,2,3,4,5,6]`); !reflect.DeepEqual(answer.Outputs[0].Data, want) ||
			!slices.Equal(answer.Outputs[0].Shape, []int64{2, 3}) {
			t.Errorf("data %s: output %v %v, want [2,3] %v", data, answer.Outputs[0].Shape, answer.Outputs[0].Data, want)
		}
		rows := model.itemRows()
		if len(rows) != 2 || !bytes.Equal(rows[0][0].Data, le32(1, 2, 3)) || !bytes.Equal(rows[1][0].Data, le32(4, 5, 6)) ||
			!slices.Equal(rows[1][0].Shape, []int64{3}) {
			t.Errorf("data %s: rows %v, want [1 2 3] and [4 5 6] of shape [3]", data, rows)
		}
		if req, _, calls := backend.lastRequest(); calls != 1 || len(req.Items) != 2 {
			t.Errorf("data %s: %d backend calls, last with %d items; want one request of 2 items", data, calls, len(req.Items))
		}
	}
}

// TestV2InferDataNestedAnyWay: data is read as its elements in the order
// they come, whatever arrays hold them, as Triton reads it: one flat list
// per row (what numpy's reshape(n, -1).tolist() gives) is as good as data
// nested to the shape.
func TestV2InferDataNestedAnyWay(t *testing.T) {
	for _, data := range []string{
		`[1,2,3,4,5,6]`,                      // flat
		`[[[1,2,3]],[[4,5,6]]]`,              // nested to the shape
		`[[1,2,3],[4,5,6]]`,                  // one flat list per row
		`[[1,2,3],4,5,6]`,                    // nested, then flat
		`[[[[1],[2],[3]]],[[[4,5,6]]]]`,      // deeper than the shape
		`[[],[1,[2]],[[3,4],5],6,[[[]]]]`,    // ragged, with empty arrays
		` [ [ 1 , 2 ] ,[ 3 ], [4,5 ,6 ]  ] `, // white space
	} {
		model := echoModel(spec("x", "INT32", true, -1, 1, 3))
		rec := postV2(t, newV2(model, nil), "/v2/models/m/infer", `{"inputs":[{"name":"x","shape":[2,1,3],"datatype":"INT32","data":`+data+`}]}`)
		if rec.Code != http.StatusOK {
			t.Errorf("data %s: %d %s, want 200", data, rec.Code, rec.Body)
			continue
		}
		rows := model.itemRows()
		if len(rows) != 2 || !bytes.Equal(rows[0][0].Data, le32(1, 2, 3)) || !bytes.Equal(rows[1][0].Data, le32(4, 5, 6)) ||
			!slices.Equal(rows[1][0].Shape, []int64{1, 3}) {
			t.Errorf("data %s: rows %v, want [1 2 3] and [4 5 6] of shape [1,3]", data, rows)
		}
	}
	// A batch of one row of [5,3], sent as one flat list per row.
	model := echoModel(spec("x", "FP32", true, -1, 5, 3))
	rec := postV2(t, newV2(model, nil), "/v2/models/m/infer",
		`{"inputs":[{"name":"x","shape":[1,5,3],"datatype":"FP32","data":[[0.5,1,1.5,2,2.5,3,3.5,4,4.5,5,5.5,6,6.5,7,7.5]]}]}`)
	if rows := model.itemRows(); rec.Code != http.StatusOK || len(rows) != 1 ||
		!bytes.Equal(rows[0][0].Data, f32s(0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5)) {
		t.Errorf("a row of [5,3] as one list: %d %s, rows %v", rec.Code, rec.Body, rows)
	}
}

// TestV2InferScalarData: a tensor of one element may give its data as the
// element alone, not in an array, as recent Triton takes it.
func TestV2InferScalarData(t *testing.T) {
	tests := []struct {
		datatype, shape, data string
		want                  []byte
	}{
		{"FP64", `[]`, `2.0`, f64s(2)},
		{"FP32", `[1]`, `-0.5`, f32s(-0.5)},
		{"INT8", `[1,1]`, `-3`, []byte{0xfd}},
		{"BOOL", `[]`, `true`, []byte{1}},
		{"BYTES", `[]`, `"hi"`, bytesElements("hi")},
		{"BYTES", `[1]`, `""`, bytesElements("")},
		{"FP16", `[]`, `1`, le16(0x3c00)},
	}
	for _, tt := range tests {
		var shape []int64
		if err := json.Unmarshal([]byte(tt.shape), &shape); err != nil {
			t.Fatal(err)
		}
		model := echoModel(spec("s", tt.datatype, false, shape...))
		rec := postV2(t, newV2(model, nil), "/v2/models/m/infer",
			`{"inputs":[{"name":"s","shape":`+tt.shape+`,"datatype":"`+tt.datatype+`","data":`+tt.data+`}]}`)
		if rows := model.itemRows(); rec.Code != http.StatusOK || len(rows) != 1 || !bytes.Equal(rows[0][0].Data, tt.want) {
			t.Errorf("%s %s data %s: %d %s, rows %v; want one of % x", tt.datatype, tt.shape, tt.data, rec.Code, rec.Body, rows, tt.want)
		}
	}
}

// TestV2InferNestedDataOfThreeAxes: each array counts its own entries,
// not those of the arrays before it on its axis (a request of two rows of
// [2,3] was refused as having 4 entries on axis 1).
func TestV2InferNestedDataOfThreeAxes(t *testing.T) {
	for _, tc := range []struct {
		shape string
		data  string
		rows  [][]uint32
	}{
		{`[2,2,3]`, `[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12]]]`, [][]uint32{{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}},
		{`[3,1,3]`, `[[[1,2,3]],[[4,5,6]],[[7,8,9]]]`, [][]uint32{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}},
		{`[2,0,3]`, `[[],[]]`, [][]uint32{{}, {}}},
	} {
		model := echoModel(spec("x", "INT32", true, -1, -1, 3))
		h := newV2(model, &fakeBackend{})
		rec := postV2(t, h, "/v2/models/m/infer", `{"inputs":[{"name":"x","shape":`+tc.shape+`,"datatype":"INT32","data":`+tc.data+`}]}`)
		if rec.Code != http.StatusOK {
			t.Errorf("shape %s, data %s: %d %s, want 200", tc.shape, tc.data, rec.Code, rec.Body)
			continue
		}
		rows := model.itemRows()
		if len(rows) != len(tc.rows) {
			t.Errorf("shape %s: %d rows, want %d", tc.shape, len(rows), len(tc.rows))
			continue
		}
		for i, want := range tc.rows {
			if !bytes.Equal(rows[i][0].Data, le32(want...)) {
				t.Errorf("shape %s: row %d %v, want %v", tc.shape, i, rows[i][0].Data, want)
			}
		}
	}
	// Still refused: a later array short or long on a middle axis, which
	// makes too few or too many elements.
	for data, count := range map[string]string{`[[[1,2,3],[4,5,6]],[[7,8,9]]]`: "9", `[[[1,2,3],[4,5,6]],[[7,8,9],[1,2,3],[4,5,6]]]`: "15"} {
		h := newV2(echoModel(spec("x", "INT32", true, -1, -1, 3)), &fakeBackend{})
		rec := postV2(t, h, "/v2/models/m/infer", `{"inputs":[{"name":"x","shape":[2,2,3],"datatype":"INT32","data":`+data+`}]}`)
		if want := `"data\" has ` + count + ` elements, shape [2,2,3] has 12`; rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("data %s: %d %s, want 400 saying %s", data, rec.Code, rec.Body, want)
		}
	}
}

// TestV2InferBatchesRows: the batched inputs are cut into rows, the
// unbatched ones go whole to every row, every item goes in one request
// with its key, and the outputs stack the rows.
func TestV2InferBatchesRows(t *testing.T) {
	model := echoModel(spec("text", "BYTES", true, -1), spec("scale", "FP32", false, 2), spec("ids", "INT64", true, -1, 2))
	model.key = func(inputs []Tensor) string { return "len" + strconv.Itoa(len(inputs[0].Data)) }
	backend := &fakeBackend{}
	h := newV2(model, backend)
	rec := postV2(t, h, "/v2/models/m/infer", `{"inputs":[
		{"name":"ids","shape":[3,2],"datatype":"INT64","data":[[1,2],[3,4],[5,6]]},
		{"name":"text","shape":[3],"datatype":"BYTES","data":["a","bb","a"]},
		{"name":"scale","shape":[2],"datatype":"FP32","data":[0.5,2]}]}`)
	answer, _ := answerOf(t, rec)
	req, _, _ := backend.lastRequest()
	if len(req.Items) != 3 || !slices.Equal(req.Keys, []string{"len5", "len6", "len5"}) {
		t.Errorf("request of %d items with keys %q, want 3 with keys len5 len6 len5", len(req.Items), req.Keys)
	}
	rows := model.itemRows()
	for i, row := range rows {
		if row[0].Name != "text" || row[1].Name != "scale" || row[2].Name != "ids" {
			t.Fatalf("row %d inputs %v are not in the metadata's order", i, row)
		}
		if !bytes.Equal(row[1].Data, f32s(0.5, 2)) || !slices.Equal(row[1].Shape, []int64{2}) {
			t.Errorf("row %d: unbatched input %v, want the whole [0.5 2] of shape [2]", i, row[1])
		}
	}
	if len(rows) != 3 || !bytes.Equal(rows[1][0].Data, bytesElements("bb")) || !bytes.Equal(rows[2][2].Data, le64(5, 6)) {
		t.Errorf("rows %v, want text bb in row 1 and ids [5 6] in row 2", rows)
	}
	want := map[string]struct {
		shape []int64
		data  string
	}{
		"text":  {[]int64{3}, `["a","bb","a"]`},
		"scale": {[]int64{3, 2}, `[0.5,2,0.5,2,0.5,2]`},
		"ids":   {[]int64{3, 2}, `[1,2,3,4,5,6]`},
	}
	for i, o := range answer.Outputs {
		w := want[o.Name]
		if o.Name != model.meta.Outputs[i].Name || !slices.Equal(o.Shape, w.shape) || !reflect.DeepEqual(o.Data, jsonValues(t, w.data)) {
			t.Errorf("output %d: %s %v %v, want %s %v %s", i, o.Name, o.Shape, o.Data, model.meta.Outputs[i].Name, w.shape, w.data)
		}
	}
}

// TestV2InferWithoutBatchedInputs: a model with no batched input makes one
// item of the request, and its outputs keep the shape its metadata gives
// them, without a batch axis.
func TestV2InferWithoutBatchedInputs(t *testing.T) {
	model := echoModel(spec("x", "UINT8", false, 2))
	rec := postV2(t, newV2(model, nil), "/v2/models/m/infer", `{"inputs":[{"name":"x","shape":[2],"datatype":"UINT8","data":[9,8]}]}`)
	answer, _ := answerOf(t, rec)
	if len(model.itemRows()) != 1 || !slices.Equal(answer.Outputs[0].Shape, []int64{2}) {
		t.Errorf("%d items, output shape %v; want 1 item and shape [2], as the metadata gives it", len(model.itemRows()), answer.Outputs[0].Shape)
	}
}

// threeOutputs is a model whose answer has outputs a (FP32 [2]), b (BYTES
// [1]) and c (INT8 [1]) for every row of its input x.
func threeOutputs() *tensorEcho {
	m := echoModel(spec("x", "INT8", true, -1))
	m.meta.Outputs = []TensorSpec{spec("a", "FP32", true, -1, 2), spec("b", "BYTES", true, -1, 1), spec("c", "INT8", true, -1)}
	m.outputs = func(answer []byte) ([]Tensor, error) {
		var in []wireTensor
		if err := msgpack.Unmarshal(answer, &in); err != nil {
			return nil, err
		}
		v := int8(in[0].Data[0])
		return []Tensor{
			{Name: "a", Datatype: "FP32", Shape: []int64{2}, Data: f32s(float32(v), float32(v)/2)},
			{Name: "b", Datatype: "BYTES", Shape: []int64{1}, Data: bytesElements("v" + strconv.Itoa(int(v)))},
			{Name: "c", Datatype: "INT8", Data: []byte{byte(-v)}},
		}, nil
	}
	return m
}

func TestV2InferRequestedOutputs(t *testing.T) {
	input := `"inputs":[{"name":"x","shape":[2],"datatype":"INT8","data":[1,2]}]`
	a := `{"name":"a","datatype":"FP32","shape":[2,2],"data":[1,0.5,2,1]}`
	aBin := `{"name":"a","datatype":"FP32","shape":[2,2],"parameters":{"binary_data_size":16}}`
	b := `{"name":"b","datatype":"BYTES","shape":[2,1],"data":["v1","v2"]}`
	bBin := `{"name":"b","datatype":"BYTES","shape":[2,1],"parameters":{"binary_data_size":12}}`
	c := `{"name":"c","datatype":"INT8","shape":[2],"data":[-1,-2]}`
	cBin := `{"name":"c","datatype":"INT8","shape":[2],"parameters":{"binary_data_size":2}}`
	aData, bData, cData := f32s(1, 0.5, 2, 1), bytesElements("v1", "v2"), []byte{0xff, 0xfe}
	tests := []struct {
		name     string
		request  string
		wantJSON string // the answer's JSON (part)
		wantBin  []byte // the binary part; nil for a JSON answer
	}{
		{"all outputs by default", `{` + input + `}`, `{"model_name":"m","outputs":[` + a + `,` + b + `,` + c + `]}`, nil},
		{"requested ones in their order", `{` + input + `,"outputs":[{"name":"c"},{"name":"a"}]}`,
			`{"model_name":"m","outputs":[` + c + `,` + a + `]}`, nil},
		{"one as binary", `{` + input + `,"outputs":[{"name":"b","parameters":{"binary_data":true}},{"name":"c"}]}`,
			`{"model_name":"m","outputs":[` + bBin + `,` + c + `]}`, bData},
		{"binary_data_output for all", `{"parameters":{"binary_data_output":true},` + input + `}`,
			`{"model_name":"m","outputs":[` + aBin + `,` + bBin + `,` + cBin + `]}`, slices.Concat(aData, bData, cData)},
		{"binary_data false overrides binary_data_output", `{"parameters":{"binary_data_output":true},` + input +
			`,"outputs":[{"name":"a","parameters":{"binary_data":false}},{"name":"c"}]}`,
			`{"model_name":"m","outputs":[` + a + `,` + cBin + `]}`, cData},
		{"binary_data false alone", `{` + input + `,"outputs":[{"name":"a","parameters":{"binary_data":false,"classification":0}}]}`,
			`{"model_name":"m","outputs":[` + a + `]}`, nil},
		{"sequence parameters that name no sequence", `{"parameters":{"sequence_id":0,"sequence_start":false,"sequence_end":false},` + input +
			`,"outputs":[{"name":"a"}]}`, `{"model_name":"m","outputs":[` + a + `]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := postV2(t, newV2(threeOutputs(), nil), "/v2/models/m/infer", tt.request)
			answerOf(t, rec) // checks the framing
			body := rec.Body.Bytes()
			if tt.wantBin == nil {
				if got := strings.TrimSpace(string(body)); got != tt.wantJSON {
					t.Errorf("answer\n%s\nwant\n%s", got, tt.wantJSON)
				}
				return
			}
			n, _ := strconv.Atoi(rec.Header().Get(InferenceHeaderLength))
			if got := string(body[:n]); got != tt.wantJSON {
				t.Errorf("JSON header\n%s\nwant\n%s", got, tt.wantJSON)
			}
			if !bytes.Equal(body[n:], tt.wantBin) {
				t.Errorf("binary part % x, want % x", body[n:], tt.wantBin)
			}
		})
	}
}

func TestV2InferEchoesIDAndVersion(t *testing.T) {
	input := `"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1]}]`
	plain := echoModel(spec("x", "INT8", true, -1))
	versioned := echoModel(spec("x", "INT8", true, -1))
	versioned.meta.Versions = []string{"7", "8"}
	tests := []struct {
		name        string
		model       *tensorEcho
		path, body  string
		wantID      *string
		wantVersion *string
	}{
		{"no id, no version", plain, "/v2/models/m/infer", `{` + input + `}`, nil, nil},
		{"id", plain, "/v2/models/m/infer", `{"id":"req-1",` + input + `}`, ptr("req-1"), nil},
		{"escaped id", plain, "/v2/models/m/infer", `{` + input + `,"id":"a\"b\u00e9"}`, ptr(`a"bé`), nil},
		{"version in the path", plain, "/v2/models/m/versions/3/infer", `{` + input + `}`, nil, ptr("3")},
		{"the model's version", versioned, "/v2/models/m/infer", `{` + input + `}`, nil, ptr("7")},
		{"a version of the model's", versioned, "/v2/models/m/versions/8/infer", `{"id":"",` + input + `}`, ptr(""), ptr("8")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, _ := answerOf(t, postV2(t, newV2(tt.model, nil), tt.path, tt.body))
			if !reflect.DeepEqual(answer.ID, tt.wantID) || !reflect.DeepEqual(answer.ModelVersion, tt.wantVersion) {
				t.Errorf("id %v, version %v; want %v, %v", deref(answer.ID), deref(answer.ModelVersion), deref(tt.wantID), deref(tt.wantVersion))
			}
		})
	}
}

// TestV2InferNullIsAbsent: an optional member sent as null, as clients
// built on Pydantic models send the ones they leave unset, is read as
// absent: the request is answered as it would be without it.
func TestV2InferNullIsAbsent(t *testing.T) {
	input := `{"name":"x","shape":[2],"datatype":"INT8","data":[1,2]}`
	answer := `{"model_name":"m","outputs":[{"name":"x","datatype":"INT8","shape":[2],"data":[1,2]}]}`
	tests := []struct {
		name, body string
		binary     []byte // after the JSON, when the body is binary
	}{
		{"as a Pydantic model dumps it", `{"id":null,"parameters":null,"inputs":[{"name":"x","shape":[2],"datatype":"INT8","parameters":null,"data":[1,2]}],"outputs":null}`, nil},
		{"an output's parameters", `{"inputs":[` + input + `],"outputs":[{"name":"x","parameters":null}]}`, nil},
		{"the request's parameters' values", `{"parameters":{"timeout":null,"priority":null,"binary_data_output":null,"sequence_id":null,"sequence_start":null,"sequence_end":null},"inputs":[` + input + `]}`, nil},
		{"an output's parameters' values", `{"inputs":[` + input + `],"outputs":[{"name":"x","parameters":{"binary_data":null,"classification":null,"shared_memory_region":null}}]}`, nil},
		{"an input's parameters' values", `{"inputs":[{"name":"x","shape":[2],"datatype":"INT8","parameters":{"binary_data_size":null,"shared_memory_region":null,"shared_memory_byte_size":null},"data":[1,2]}]}`, nil},
		{"data of a binary input", `{"inputs":[{"name":"x","shape":[2],"datatype":"INT8","data":null,"parameters":{"binary_data_size":2}}]}`, []byte{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := &fakeBackend{}
			h := newV2(echoModel(spec("x", "INT8", true, -1)), backend)
			var header []string
			body := []byte(tt.body)
			if tt.binary != nil {
				var hl string
				body, hl = binaryRequest(tt.body, tt.binary)
				header = []string{InferenceHeaderLength, hl}
			}
			rec := postV2(t, h, "/v2/models/m/infer", string(body), header...)
			if got := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusOK || got != answer {
				t.Fatalf("%d %s, want 200 %s", rec.Code, got, answer)
			}
			if req, _, _ := backend.lastRequest(); !req.Deadline.IsZero() {
				t.Errorf("deadline %v, want none", req.Deadline)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return strconv.Quote(*s)
}

// mixed is a model of three inputs, its handler, and a request to it with
// one input as JSON and two as binary data, the binary ones in the order
// of "inputs": its body and Inference-Header-Content-Length, and the data
// of the binary inputs.
type mixed struct {
	model        *tensorEcho
	h            http.Handler
	body         []byte
	headerLength string
	bData, cData []byte
}

func mixedRequest() mixed {
	m := mixed{model: echoModel(spec("a", "FP32", true, -1, 2), spec("b", "BYTES", true, -1), spec("c", "INT64", false, 1))}
	m.h = newV2(m.model, nil)
	m.bData, m.cData = bytesElements("xyz", "\xff\x00"), le64(42)
	header := `{"inputs":[
		{"name":"c","shape":[1],"datatype":"INT64","parameters":{"binary_data_size":8}},
		{"name":"a","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]},
		{"name":"b","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(len(m.bData)) + `}}],
		"outputs":[{"name":"b","parameters":{"binary_data":true}},{"name":"c"},{"name":"a","parameters":{"binary_data":true}}]}`
	m.body, m.headerLength = binaryRequest(header, m.cData, m.bData)
	return m
}

// TestV2InferMixedBody sends one input as JSON and two as binary data,
// the binary ones in the order of "inputs".
func TestV2InferMixedBody(t *testing.T) {
	m := mixedRequest()
	model, bData, cData := m.model, m.bData, m.cData
	rec := do(t, m.h, http.MethodPost, "/v2/models/m/infer", "", m.body, InferenceHeaderLength, m.headerLength)
	answer, bins := answerOf(t, rec)
	if !bytes.Equal(bins["b"], bData) || !bytes.Equal(bins["a"], f32s(1, 2, 3, 4)) {
		t.Errorf("binary outputs b % x, a % x; want % x and % x", bins["b"], bins["a"], bData, f32s(1, 2, 3, 4))
	}
	if c := answer.Outputs[1]; c.Name != "c" || !reflect.DeepEqual(c.Data, jsonValues(t, `[42,42]`)) || !slices.Equal(c.Shape, []int64{2, 1}) {
		t.Errorf("output c %v %v, want [2,1] [42,42]", c.Shape, c.Data)
	}
	rows := model.itemRows()
	if len(rows) != 2 || !bytes.Equal(rows[1][1].Data, bytesElements("\xff\x00")) || !bytes.Equal(rows[0][2].Data, cData) {
		t.Errorf("rows %v", rows)
	}
}

// TestV2InferBytesThatAreNotUTF8: a JSON answer cannot hold them but
// changed, so it is refused, naming the output and the element (counted
// over the rows stacked) and how to ask for them; as binary data they come
// back exact.
func TestV2InferBytesThatAreNotUTF8(t *testing.T) {
	tests := []struct {
		name     string
		spec     TensorSpec
		shape    string
		elements []string
		want     string
	}{
		{"one per row", spec("b", "BYTES", true, -1), "[3]", []string{"ok", "é", "a\xffb"}, `output "b": element 2 is bytes that are not valid UTF-8`},
		{"two per row", spec("b", "BYTES", true, -1, 2), "[2,2]", []string{"a", "b", "c", "\xc3"}, `output "b": element 3 is bytes that are not valid UTF-8`},
	}
	for _, tt := range tests {
		raw := bytesElements(tt.elements...)
		header := `{"inputs":[{"name":"b","shape":` + tt.shape + `,"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(len(raw)) + `}}]}`
		body, hl := binaryRequest(header, raw)
		h := newV2(echoModel(tt.spec), nil)
		rec := do(t, h, http.MethodPost, "/v2/models/m/infer", "", body, InferenceHeaderLength, hl)
		if msg := errorOf(t, rec); rec.Code != http.StatusBadRequest || !strings.Contains(msg, tt.want) || !strings.Contains(msg, `ask for the output as binary data ("binary_data": true`) {
			t.Errorf("%s: status %d %q, want 400 saying %q and how to ask for binary data", tt.name, rec.Code, msg, tt.want)
		}
		for _, binaryHeader := range []string{
			`{"parameters":{"binary_data_output":true},` + header[1:],
			header[:len(header)-1] + `,"outputs":[{"name":"b","parameters":{"binary_data":true}}]}`,
		} {
			body, hl = binaryRequest(binaryHeader, raw)
			_, bins := answerOf(t, do(t, h, http.MethodPost, "/v2/models/m/infer", "", body, InferenceHeaderLength, hl))
			if !bytes.Equal(bins["b"], raw) {
				t.Errorf("%s: binary output % x, want % x", tt.name, bins["b"], raw)
			}
		}
	}
}

// TestV2InferNaNAndInfinity: JSON has no NaN or ±Inf; the answer writes
// them as null, and null is read as NaN: the canonical quiet NaN of each
// size, as numpy writes it (not Go's math.NaN(), 0x7ff8000000000001).
func TestV2InferNaNAndInfinity(t *testing.T) {
	for datatype, nan := range map[string][]byte{
		"FP16": binary.LittleEndian.AppendUint16(nil, 0x7e00),
		"FP32": binary.LittleEndian.AppendUint32(nil, 0x7fc00000),
		"FP64": binary.LittleEndian.AppendUint64(nil, 0x7ff8000000000000),
	} {
		model := echoModel(spec("f", datatype, true, -1))
		rec := postV2(t, newV2(model, nil), "/v2/models/m/infer", `{"inputs":[{"name":"f","shape":[2],"datatype":"`+datatype+`","data":[null,1]}]}`)
		if answer, _ := answerOf(t, rec); !reflect.DeepEqual(answer.Outputs[0].Data, jsonValues(t, `[null,1]`)) {
			t.Errorf("%s: output %v, want [null,1]", datatype, answer.Outputs[0].Data)
		}
		if got := model.itemRows()[0][0].Data; !bytes.Equal(got, nan) {
			t.Errorf("%s: null reached the model as % x, want the quiet NaN % x", datatype, got, nan)
		}
	}
	data := f32s(float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 2)
	header := `{"inputs":[{"name":"f","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
	body, hl := binaryRequest(header, data)
	rec := do(t, newV2(echoModel(spec("f", "FP32", true, -1)), nil), http.MethodPost, "/v2/models/m/infer", "", body, InferenceHeaderLength, hl)
	if !strings.Contains(rec.Body.String(), `"data":[null,null,null,2]`) {
		t.Errorf("answer %s, want data [null,null,null,2]", rec.Body)
	}
}

// TestV2InferThroughSupervisor serves a tensor model in front of a real
// in-process supervisor, over loopback HTTP, with concurrent clients
// sending binary and JSON requests: every answer holds its own rows.
func TestV2InferThroughSupervisor(t *testing.T) {
	st, err := supervisor.New(supervisor.Config{InProcess: model.Func(echoBatch), Workers: 2, BatchSize: 8, MaxLatency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	srv := httptest.NewServer(New(Config{Backend: st, Tensors: echoModel(spec("x", "INT32", true, -1, 2), spec("s", "BYTES", true, -1))}))
	defer srv.Close()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for r := range 5 {
				n := 1 + (c+r)%4
				ints, strs := make([]uint32, 2*n), make([]string, n)
				for i := range n {
					ints[2*i], ints[2*i+1] = uint32(c*1000+r*10+i), uint32(i)
					strs[i] = fmt.Sprintf("c%d-r%d-%d", c, r, i)
				}
				xs, ss := le32(ints...), bytesElements(strs...)
				header := fmt.Sprintf(`{"id":"c%d-r%d","parameters":{"binary_data_output":true},"inputs":[`+
					`{"name":"x","shape":[%d,2],"datatype":"INT32","parameters":{"binary_data_size":%d}},`+
					`{"name":"s","shape":[%d],"datatype":"BYTES","parameters":{"binary_data_size":%d}}]}`, c, r, n, len(xs), n, len(ss))
				body, hl := binaryRequest(header, xs, ss)
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v2/models/m/infer", bytes.NewReader(body))
				req.Header.Set(InferenceHeaderLength, hl)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				rec := httptest.NewRecorder()
				rec.Code = resp.StatusCode
				for k, v := range resp.Header {
					rec.Header()[k] = v
				}
				_, _ = rec.Body.ReadFrom(resp.Body)
				resp.Body.Close()
				answer, bins := answerOf(t, rec)
				if *answer.ID != fmt.Sprintf("c%d-r%d", c, r) || !bytes.Equal(bins["x"], xs) || !bytes.Equal(bins["s"], ss) {
					t.Errorf("c%d r%d: answer %v with x % x and s %q; want its own rows back", c, r, *answer.ID, bins["x"], bins["s"])
					return
				}
			}
		})
	}
	wg.Wait()
	if s := st.Stats(); s.Answered == 0 || s.Batches == 0 {
		t.Errorf("stats %+v: the rows did not go through the batcher", s)
	}
}
