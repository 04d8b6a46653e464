package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/supervisor"
)

// v2ErrorCase is a request that must be refused: its status and the
// substrings its error must hold.
type v2ErrorCase struct {
	name    string
	model   *tensorEcho // nil: errorModel()
	body    string
	header  []string
	want    int
	wantMsg []string
}

// errorModel takes x, FP32 batched [-1, 3], and y, INT8 unbatched [2].
func errorModel() *tensorEcho {
	return echoModel(spec("x", "FP32", true, -1, 3), spec("y", "INT8", false, 2))
}

// oneInput is a model of one batched input of the datatype.
func oneInput(datatype string) *tensorEcho { return echoModel(spec("v", datatype, true, -1)) }

const (
	goodX = `{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}`
	goodY = `{"name":"y","shape":[2],"datatype":"INT8","data":[1,2]}`
)

func inputsBody(inputs ...string) string {
	return `{"inputs":[` + strings.Join(inputs, ",") + `]}`
}

func valuesBody(datatype, data string) string {
	n := strings.Count(data, ",") + 1
	return inputsBody(`{"name":"v","shape":[` + strconv.Itoa(n) + `],"datatype":"` + datatype + `","data":` + data + `}`)
}

func runV2ErrorCases(t *testing.T, tests []v2ErrorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := tt.model
			if model == nil {
				model = errorModel()
			}
			backend := &fakeBackend{ready: true}
			rec := do(t, newV2(model, backend), http.MethodPost, "/v2/models/m/infer", "", []byte(tt.body), tt.header...)
			if rec.Code != tt.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body, tt.want)
			}
			msg := errorOf(t, rec)
			for _, w := range tt.wantMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if _, _, calls := backend.lastRequest(); tt.want == 400 && calls != 0 {
				t.Errorf("a refused request reached the backend %d times", calls)
			}
		})
	}
}

func TestV2InferRefusesBadJSON(t *testing.T) {
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "malformed", body: `{"inputs": [`, want: 400, wantMsg: []string{"malformed JSON body"}},
		{name: "empty body", body: ``, want: 400, wantMsg: []string{"malformed JSON body"}},
		{name: "not an object", body: `[1]`, want: 400, wantMsg: []string{"must be a JSON object", "array"}},
		{name: "trailing garbage", body: inputsBody(goodX, goodY) + `x`, want: 400, wantMsg: []string{"malformed JSON body"}},
		{name: "missing inputs", body: `{"id":"a"}`, want: 400, wantMsg: []string{`missing "inputs"`}},
		{name: "inputs twice", body: `{"inputs":[],"inputs":[]}`, want: 400, wantMsg: []string{`"inputs" is given twice`}},
		{name: "inputs not an array", body: `{"inputs":{}}`, want: 400, wantMsg: []string{`"inputs" must be an array`, "object"}},
		{name: "input not an object", body: `{"inputs":[` + goodX + `,7]}`, want: 400, wantMsg: []string{"inputs[1] must be a JSON object", "number"}},
		{name: "id not a string", body: `{"id":5,"inputs":[` + goodX + `]}`, want: 400, wantMsg: []string{`"id" must be a string`}},
		{name: "missing name", body: inputsBody(`{"shape":[1],"datatype":"FP32","data":[1]}`), want: 400, wantMsg: []string{`inputs[0]: missing "name"`}},
		{name: "name not a string", body: inputsBody(`{"name":1}`), want: 400, wantMsg: []string{`inputs[0]: "name" must be a string`}},
		{name: "missing datatype", body: inputsBody(`{"name":"x","shape":[1,3],"data":[1,2,3]}`), want: 400, wantMsg: []string{`input "x": missing "datatype"`}},
		{name: "missing shape", body: inputsBody(`{"name":"x","datatype":"FP32","data":[1,2,3]}`), want: 400, wantMsg: []string{`input "x": missing "shape"`}},
		{name: "shape null", body: inputsBody(`{"name":"x","shape":null,"datatype":"FP32","data":[1,2,3]}`), want: 400, wantMsg: []string{`input "x": missing "shape"`}},
		{name: "missing data", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32"}`), want: 400,
			wantMsg: []string{`input "x" has neither "data" nor a binary_data_size`}},
		{name: "datatype null", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":null,"data":[1,2,3]}`), want: 400,
			wantMsg: []string{`input "x": "datatype" must be a string, not null`}},
		{name: "data null without binary data", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":null}`), want: 400,
			wantMsg: []string{`input "x" has neither "data" nor a binary_data_size parameter`}},
		{name: "unknown datatype", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FLOAT","data":[1,2,3]}`), want: 400,
			wantMsg: []string{`input "x": unknown datatype "FLOAT"`, "FP32"}},
		{name: "negative axis", body: inputsBody(`{"name":"x","shape":[-1,3],"datatype":"FP32","data":[1,2,3]}`), want: 400,
			wantMsg: []string{`input "x": "shape" axis 0 is -1`}},
		{name: "fractional axis", body: inputsBody(`{"name":"x","shape":[1.5],"datatype":"FP32","data":[1]}`), want: 400,
			wantMsg: []string{`input "x": "shape" axis must be a whole number`, "1.5"}},
		{name: "an axis past 64 bits", body: inputsBody(`{"name":"x","shape":[18446744073709551615,3],"datatype":"FP32","data":[1]}`), want: 400,
			wantMsg: []string{`input "x": "shape" axis is 18446744073709551615, past what a 64-bit integer holds`}},
		{name: "too many axes", body: inputsBody(`{"name":"x","shape":[` + strings.Repeat("1,", 64) + `1],"datatype":"FP32","data":[1]}`), want: 400,
			wantMsg: []string{`input "x": "shape" has more than 64 axes`}},
		{name: "data a string for FP32", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":"abc"}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" is "abc", not a number (FP32)`}},
		{name: "data an object", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":{"a":[1,2,3]}}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" is an object, not a number (FP32)`}},
		{name: "data an element for three", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":1}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" has 1 element, shape [1,3] has 3`}},
		{name: "data nested past 64 arrays", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":`+
			strings.Repeat("[", 65)+"1,2,3"+strings.Repeat("]", 65)+`}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" nests arrays more than 64 deep`}},
		{name: "data unclosed", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":[[1,2],3}`, goodY), want: 400,
			wantMsg: []string{"malformed JSON body"}},
		{name: "data before datatype and shape", body: inputsBody(`{"data":[1,2],"name":"x","datatype":"FP32","shape":[1,3]}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" has 2 elements, shape [1,3] has 3`}},
		{name: "outputs not an array", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":3}`, want: 400, wantMsg: []string{`"outputs" must be an array`}},
		{name: "output without name", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"parameters":{}}]}`, want: 400,
			wantMsg: []string{`outputs[0]: missing "name"`}},
		// The output's name names what is answered: a second one would
		// answer another output than the first named, or its parameters
		// would be those of the one given last.
		{name: "output name twice", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x","name":"y"}]}`, want: 400,
			wantMsg: []string{`output "x": "name" is given twice`}},
		{name: "output parameters twice", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x","parameters":{"binary_data":true},"parameters":{}}]}`,
			want: 400, wantMsg: []string{`output "x": "parameters" is given twice`}},
		{name: "binary_data not a boolean", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x","parameters":{"binary_data":1}}]}`,
			want: 400, wantMsg: []string{`output "x": binary_data must be true or false`}},
		{name: "classification", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x","parameters":{"classification":3}}]}`,
			want: 400, wantMsg: []string{`output "x": classification is not served`}},
		{name: "a sequence's request", body: `{"parameters":{"sequence_id":5,"sequence_start":true},"inputs":[` + goodX + `,` + goodY + `]}`,
			want: 400, wantMsg: []string{`parameter "sequence_id": sequences are not served`}},
		{name: "a sequence's end", body: `{"parameters":{"sequence_id":0,"sequence_end":true},"inputs":[` + goodX + `,` + goodY + `]}`,
			want: 400, wantMsg: []string{`parameter "sequence_end": sequences are not served`}},
		{name: "a sequence of a string id", body: `{"parameters":{"sequence_id":"s-1"},"inputs":[` + goodX + `,` + goodY + `]}`,
			want: 400, wantMsg: []string{`parameter "sequence_id": sequences are not served`}},
		{name: "an output to shared memory", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x","parameters":{"shared_memory_region":"o0","shared_memory_byte_size":24}}]}`,
			want: 400, wantMsg: []string{`output "x": shared memory is not served`}},
		{name: "an input from shared memory", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{"shared_memory_region":"i0","shared_memory_byte_size":12}}`, goodY),
			want: 400, wantMsg: []string{`input "x": shared memory is not served`}},
		{name: "binary_data_size negative", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{"binary_data_size":-4}}`),
			want: 400, wantMsg: []string{`input "x": binary_data_size must not be negative`}},
		// A key given again after the data would change what the data was
		// read as: a shape, or a datatype whose elements are of another size.
		{name: "shape again after the data", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3],"shape":[3,1]}`, goodY),
			want: 400, wantMsg: []string{`input "x": "shape" is given twice`}},
		{name: "datatype again after the data", body: inputsBody(`{"name":"x","datatype":"INT32","shape":[1,3],"data":[1,2,3],"datatype":"FP32"}`, goodY),
			want: 400, wantMsg: []string{`input "x": "datatype" is given twice`}},
		{name: "data twice", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3],"data":[4,5,6]}`, goodY),
			want: 400, wantMsg: []string{`input "x": "data" is given twice`}},
		{name: "name twice", body: inputsBody(`{"name":"x","name":"y","shape":[1,3],"datatype":"FP32","data":[1,2,3]}`, goodY),
			want: 400, wantMsg: []string{`"name" is given twice`}},
		{name: "parameters twice", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{},"parameters":{},"data":[1,2,3]}`, goodY),
			want: 400, wantMsg: []string{`input "x": "parameters" is given twice`}},
	})
}

func TestV2InferRefusesInputsTheModelDoesNotTake(t *testing.T) {
	twoBatched := echoModel(spec("a", "FP32", true, -1), spec("b", "FP32", true, -1, 2))
	weighted := errorModel()
	weighted.meta.Fixed = func(name string) string {
		if name == "w" {
			return `input "w" has a value in the model file`
		}
		return ""
	}
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "an input the model file fixes", model: weighted, body: inputsBody(goodX, goodY, `{"name":"w","shape":[1],"datatype":"FP32","data":[1]}`), want: 400,
			wantMsg: []string{`input "w" has a value in the model file; model "m" takes "x", "y"`}},
		{name: "an unknown input beside it", model: weighted, body: inputsBody(goodX, goodY, `{"name":"z","shape":[1],"datatype":"FP32","data":[1]}`), want: 400,
			wantMsg: []string{`unknown input "z"; model "m" takes "x", "y"`}},
		{name: "unknown input", body: inputsBody(goodX, goodY, `{"name":"z","shape":[1],"datatype":"FP32","data":[1]}`), want: 400,
			wantMsg: []string{`unknown input "z"`, `model "m" takes "x", "y"`}},
		{name: "missing input", body: inputsBody(goodX), want: 400, wantMsg: []string{`missing input "y"`, "INT8", "[2]"}},
		{name: "duplicate input", body: inputsBody(goodX, goodY, goodX), want: 400, wantMsg: []string{`input "x" is given twice`}},
		{name: "datatype mismatch", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP64","data":[1,2,3]}`, goodY), want: 400,
			wantMsg: []string{`input "x": datatype FP64 was sent, the model takes FP32`}},
		{name: "rank mismatch", body: inputsBody(`{"name":"x","shape":[3],"datatype":"FP32","data":[1,2,3]}`, goodY), want: 400,
			wantMsg: []string{`input "x": shape [3] has 1 axes, the model takes 2 (shape [-1,3])`}},
		// The shape is checked against the model's before the data against
		// the shape: a request of the wrong rank is told so.
		{name: "rank mismatch, data of another count", model: echoModel(spec("x", "FP32", true, -1, 4)),
			body: inputsBody(`{"name":"x","shape":[2,4,1],"datatype":"FP32","data":[1,2,3,4]}`), want: 400,
			wantMsg: []string{`input "x": shape [2,4,1] has 3 axes, the model takes 2 (shape [-1,4])`}},
		{name: "rank mismatch, data before the shape", model: echoModel(spec("x", "FP32", true, -1, 4)),
			body: inputsBody(`{"name":"x","datatype":"FP32","data":[1,2,3,4],"shape":[2,4,1]}`), want: 400,
			wantMsg: []string{`input "x": shape [2,4,1] has 3 axes, the model takes 2 (shape [-1,4])`}},
		{name: "fixed axis mismatch, data of another count", body: inputsBody(`{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2]}`, goodY), want: 400,
			wantMsg: []string{`input "x": shape [1,4] has 4 on axis 1, the model takes 3 (shape [-1,3])`}},
		{name: "fixed axis mismatch", body: inputsBody(`{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}`, goodY), want: 400,
			wantMsg: []string{`input "x": shape [1,4] has 4 on axis 1, the model takes 3 (shape [-1,3])`}},
		{name: "unbatched fixed axis mismatch", body: inputsBody(goodX, `{"name":"y","shape":[3],"datatype":"INT8","data":[1,2,3]}`), want: 400,
			wantMsg: []string{`input "y": shape [3] has 3 on axis 0, the model takes 2`}},
		{name: "flat data too short", body: inputsBody(`{"name":"x","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5]}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" has 5 elements, shape [2,3] has 6`}},
		{name: "flat data too long", body: inputsBody(goodX, `{"name":"y","shape":[2],"datatype":"INT8","data":[1,2,3]}`), want: 400,
			wantMsg: []string{`input "y": "data" has 3 elements, shape [2] has 2`}},
		{name: "nested data short on an axis", body: inputsBody(`{"name":"x","shape":[2,3],"datatype":"FP32","data":[[1,2,3],[4,5]]}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" has 5 elements, shape [2,3] has 6`}},
		{name: "nested data with too many rows", body: inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":[[1,2,3],[4,5,6]]}`, goodY), want: 400,
			wantMsg: []string{`input "x": "data" has 6 elements, shape [1,3] has 3`}},
		{name: "batch sizes disagree", model: twoBatched, body: inputsBody(`{"name":"a","shape":[2],"datatype":"FP32","data":[1,2]}`,
			`{"name":"b","shape":[3,2],"datatype":"FP32","data":[1,2,3,4,5,6]}`), want: 400,
			wantMsg: []string{`input "b" has 3 rows (shape [3,2]) but input "a" has 2`}},
		{name: "no rows", body: inputsBody(`{"name":"x","shape":[0,3],"datatype":"FP32","data":[]}`, goodY), want: 400,
			wantMsg: []string{`the request has no rows: input "x" has shape [0,3]`}},
		{name: "too many rows", model: echoModel(spec("e", "FP32", true, -1, 0)),
			body: inputsBody(`{"name":"e","shape":[1000000000000,0],"datatype":"FP32","data":[]}`), want: 413,
			wantMsg: []string{`the request has 1000000000000 rows (input "e"); one request takes at most 65536`}},
		{name: "a shape of too many elements", model: echoModel(spec("e", "FP32", true, -1, -1)),
			body: inputsBody(`{"name":"e","shape":[4611686018427387904,4],"datatype":"FP32","data":[]}`), want: 400,
			wantMsg: []string{`input "e": shape [4611686018427387904,4] has too many elements`}},
		{name: "unknown output", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x"},{"name":"nope"}]}`, want: 400,
			wantMsg: []string{`unknown output "nope" requested`, `gives "x", "y"`}},
		{name: "output requested twice", body: `{"inputs":[` + goodX + `,` + goodY + `],"outputs":[{"name":"x"},{"name":"x"}]}`, want: 400,
			wantMsg: []string{`output "x" is requested twice`}},
	})
}

func TestV2InferRefusesValuesThatDoNotFit(t *testing.T) {
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "INT8 too large", model: oneInput("INT8"), body: valuesBody("INT8", `[1,200]`), want: 400,
			wantMsg: []string{`input "v": element 1 is 200, which does not fit INT8`}},
		{name: "INT8 too small", model: oneInput("INT8"), body: valuesBody("INT8", `[-129]`), want: 400, wantMsg: []string{"element 0 is -129, which does not fit INT8"}},
		{name: "INT16", model: oneInput("INT16"), body: valuesBody("INT16", `[32768]`), want: 400, wantMsg: []string{"32768, which does not fit INT16"}},
		{name: "INT32", model: oneInput("INT32"), body: valuesBody("INT32", `[0,0,-2147483649]`), want: 400, wantMsg: []string{"element 2 is -2147483649, which does not fit INT32"}},
		{name: "INT64", model: oneInput("INT64"), body: valuesBody("INT64", `[9223372036854775808]`), want: 400, wantMsg: []string{"does not fit INT64"}},
		{name: "UINT8 negative", model: oneInput("UINT8"), body: valuesBody("UINT8", `[-1]`), want: 400, wantMsg: []string{"element 0 is -1, which does not fit UINT8"}},
		{name: "UINT16", model: oneInput("UINT16"), body: valuesBody("UINT16", `[65536]`), want: 400, wantMsg: []string{"65536, which does not fit UINT16"}},
		{name: "UINT32", model: oneInput("UINT32"), body: valuesBody("UINT32", `[4294967296]`), want: 400, wantMsg: []string{"does not fit UINT32"}},
		{name: "UINT64", model: oneInput("UINT64"), body: valuesBody("UINT64", `[18446744073709551616]`), want: 400, wantMsg: []string{"does not fit UINT64"}},
		{name: "integer with a fraction", model: oneInput("INT32"), body: valuesBody("INT32", `[1.5]`), want: 400, wantMsg: []string{"element 0 is 1.5, not a whole number (INT32)"}},
		{name: "whole float too large", model: oneInput("UINT8"), body: valuesBody("UINT8", `[3e2]`), want: 400, wantMsg: []string{"element 0 is 3e2, which does not fit UINT8"}},
		// A float64 would round these to whole numbers that fit.
		{name: "a fraction past a float's digits", model: oneInput("INT64"), body: valuesBody("INT64", `[1.0000000000000000001]`), want: 400, wantMsg: []string{"element 0 is 1.0000000000000000001, not a whole number (INT64)"}},
		{name: "a fraction past a float's digits at the top", model: oneInput("INT8"), body: valuesBody("INT8", `[127.0000000000000001]`), want: 400, wantMsg: []string{"not a whole number (INT8)"}},
		{name: "just past INT64 with a fraction", model: oneInput("INT64"), body: valuesBody("INT64", `[9223372036854775808.0]`), want: 400, wantMsg: []string{"which does not fit INT64"}},
		{name: "a negative UINT8 written as a float", model: oneInput("UINT8"), body: valuesBody("UINT8", `[-1.0]`), want: 400, wantMsg: []string{"element 0 is -1.0, which does not fit UINT8"}},
		{name: "a huge exponent", model: oneInput("INT32"), body: valuesBody("INT32", `[1e99999999999999999999]`), want: 400, wantMsg: []string{"which does not fit INT32"}},
		{name: "a tiny exponent", model: oneInput("INT32"), body: valuesBody("INT32", `[1e-99999999999999999999]`), want: 400, wantMsg: []string{"not a whole number (INT32)"}},
		{name: "integer as a string", model: oneInput("INT32"), body: valuesBody("INT32", `["1"]`), want: 400, wantMsg: []string{`element 0 is "1", not a whole number (INT32)`}},
		{name: "BOOL as a number", model: oneInput("BOOL"), body: valuesBody("BOOL", `[true,1]`), want: 400, wantMsg: []string{"element 1 is 1, not true or false (BOOL)"}},
		{name: "FP16 too large", model: oneInput("FP16"), body: valuesBody("FP16", `[65520]`), want: 400, wantMsg: []string{"element 0 is 65520, which does not fit FP16"}},
		{name: "FP32 too large", model: oneInput("FP32"), body: valuesBody("FP32", `[1e39]`), want: 400, wantMsg: []string{"element 0 is 1e39, which does not fit FP32"}},
		{name: "FP64 too large", model: oneInput("FP64"), body: valuesBody("FP64", `[1e309]`), want: 400, wantMsg: []string{"which does not fit FP64"}},
		{name: "FP32 as a string", model: oneInput("FP32"), body: valuesBody("FP32", `["NaN"]`), want: 400, wantMsg: []string{`element 0 is "NaN", not a number (FP32)`}},
		{name: "BYTES as a number", model: oneInput("BYTES"), body: valuesBody("BYTES", `["a",2]`), want: 400, wantMsg: []string{"element 1 is 2, not a string (BYTES)"}},
		{name: "BYTES as an object", model: oneInput("BYTES"), body: valuesBody("BYTES", `[{"a":1}]`), want: 400, wantMsg: []string{"element 0 is an object, not a string (BYTES)"}},
	})
}

func TestV2InferTakesWholeFloatsForIntegers(t *testing.T) {
	model := oneInput("INT16")
	answer, _ := answerOf(t, postV2(t, newV2(model, nil), "/v2/models/m/infer", valuesBody("INT16", `[2.0,-3e2,-0]`)))
	if want := jsonValues(t, `[2,-300,0]`); fmt.Sprint(answer.Outputs[0].Data) != fmt.Sprint(want) {
		t.Errorf("output %v, want %v", answer.Outputs[0].Data, want)
	}
}

// A whole number written with a fraction or an exponent keeps every
// digit, past what a float64 holds too.
func TestV2InferTakesWholeFloatsForIntegersExactly(t *testing.T) {
	for _, tc := range []struct{ datatype, data, want string }{
		{"INT64", `[9007199254740993.0,-9223372036854775808.000,92233720368547758.07e2]`, `[9007199254740993,-9223372036854775808,9223372036854775807]`},
		{"UINT64", `[18446744073709551615.0,1844674407370955161.5e1,-0.0]`, `[18446744073709551615,18446744073709551615,0]`},
		{"INT8", `[127.000,-12.8e1,0.0e99999999999999999999,0.5e1]`, `[127,-128,0,5]`},
	} {
		answer, _ := answerOf(t, postV2(t, newV2(oneInput(tc.datatype), nil), "/v2/models/m/infer", valuesBody(tc.datatype, tc.data)))
		if want := jsonValues(t, tc.want); fmt.Sprint(answer.Outputs[0].Data) != fmt.Sprint(want) {
			t.Errorf("%s %s: output %v, want %v", tc.datatype, tc.data, answer.Outputs[0].Data, want)
		}
	}
}

func TestV2InferRefusesBadBinaryBodies(t *testing.T) {
	xBin := func(size int) string {
		return `{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}`
	}
	bytesModel := oneInput("BYTES")
	bytesHeader := func(n, size int) string {
		return inputsBody(`{"name":"v","shape":[` + strconv.Itoa(n) + `],"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}`)
	}
	binaryCase := func(name string, model *tensorEcho, header string, data []byte, wantMsg ...string) v2ErrorCase {
		body, hl := binaryRequest(header, data)
		return v2ErrorCase{name: name, model: model, body: string(body), header: []string{InferenceHeaderLength, hl}, want: 400, wantMsg: wantMsg}
	}
	good := inputsBody(xBin(12), goodY)
	tests := []v2ErrorCase{
		{name: "header length not a number", body: good, header: []string{InferenceHeaderLength, "ten"}, want: 400,
			wantMsg: []string{InferenceHeaderLength, `"ten"`}},
		{name: "header length negative", body: good, header: []string{InferenceHeaderLength, "-1"}, want: 400, wantMsg: []string{InferenceHeaderLength, `"-1"`}},
		{name: "header length signed", body: good, header: []string{InferenceHeaderLength, "+" + strconv.Itoa(len(good))}, want: 400, wantMsg: []string{InferenceHeaderLength, "whole number"}},
		{name: "header length past the body", body: good, header: []string{InferenceHeaderLength, strconv.Itoa(len(good) + 1)}, want: 400,
			wantMsg: []string{InferenceHeaderLength + " is " + strconv.Itoa(len(good)+1), "only " + strconv.Itoa(len(good)) + " bytes"}},
		{name: "binary input without the header", body: good + string(f32s(1, 2, 3)), want: 400,
			wantMsg: []string{`input "x" has a binary_data_size parameter, but the request has no ` + InferenceHeaderLength}},
		binaryCase("size past the end", nil, inputsBody(xBin(12), goodY), f32s(1, 2),
			`input "x": binary_data_size 12 runs past the end of the body: 8 bytes`),
		binaryCase("bytes after the binary inputs", nil, inputsBody(xBin(12), goodY), f32s(1, 2, 3, 4),
			`4 bytes follow the binary data of the last binary input, input "x"`, "add up to 12 of the 16"),
		binaryCase("bytes but no binary input", nil, inputsBody(goodX, goodY), []byte{1, 2},
			"2 bytes follow the JSON header", "no input has a binary_data_size"),
		binaryCase("size does not match the shape", nil, inputsBody(xBin(8), goodY), f32s(1, 2),
			`input "x": binary data: 8 bytes of data do not match shape [1,3] of FP32 (3 elements of 4 bytes)`),
		binaryCase("rank mismatch, data of another size", echoModel(spec("x", "FP32", true, -1, 4)),
			inputsBody(`{"name":"x","shape":[2,4,1],"datatype":"FP32","parameters":{"binary_data_size":16}}`), f32s(1, 2, 3, 4),
			`input "x": shape [2,4,1] has 3 axes, the model takes 2 (shape [-1,4])`),
		binaryCase("rank mismatch, BYTES cut short", bytesModel,
			inputsBody(`{"name":"v","shape":[1,1],"datatype":"BYTES","parameters":{"binary_data_size":5}}`), append(le32(100), 'a'),
			`input "v": shape [1,1] has 2 axes, the model takes 1 (shape [-1])`),
		binaryCase("both data and binary_data_size", nil,
			inputsBody(`{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3],"parameters":{"binary_data_size":12}}`, goodY), f32s(1, 2, 3),
			`input "x" has both "data" and a binary_data_size parameter`),
		binaryCase("BYTES length past the data", bytesModel, bytesHeader(1, 7), append(le32(100), "abc"...),
			`input "v": binary data: BYTES element 0 of 1`, "the length prefix says 100 bytes, but 3 are left"),
		binaryCase("BYTES length prefix cut short", bytesModel, bytesHeader(2, 6), append(bytesElements("a"), 0),
			`input "v": binary data: BYTES element 1 of 2`, "the 4-byte length prefix is cut short"),
		binaryCase("BYTES elements fewer than the shape", bytesModel, bytesHeader(3, 10), bytesElements("a", "b"),
			`input "v": binary data: BYTES element 2 of 3`, "cut short: 0 bytes are left"),
		binaryCase("BYTES bytes after the elements", bytesModel, bytesHeader(1, 7), append(bytesElements("a"), 9, 9),
			`input "v": binary data: 2 bytes follow the last of the 1 BYTES elements`),
	}
	runV2ErrorCases(t, tests)
}

func TestV2InferTimeoutParameter(t *testing.T) {
	input := `"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1]}]`
	tests := []struct {
		name   string
		params string
		header []string
		want   time.Duration
	}{
		{name: "timeout", params: `{"timeout":80000}`, want: 80 * time.Millisecond},
		{name: "shorter header wins", params: `{"timeout":5000000}`, header: []string{TimeoutHeader, "70"}, want: 70 * time.Millisecond},
		{name: "shorter timeout wins", params: `{"timeout":50000,"priority":3,"other":{"a":[1]}}`, header: []string{TimeoutHeader, "5000"}, want: 50 * time.Millisecond},
		{name: "header alone", params: `{"priority":1}`, header: []string{TimeoutHeader, "60"}, want: 60 * time.Millisecond},
		{name: "header and a timeout of none", params: `{"timeout":0}`, header: []string{TimeoutHeader, "60"}, want: 60 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := blockingBackend()
			h := newV2(echoModel(spec("x", "INT8", true, -1)), backend)
			start := time.Now()
			rec := postV2(t, h, "/v2/models/m/infer", `{"parameters":`+tt.params+`,`+input+`}`, tt.header...)
			if rec.Code != http.StatusGatewayTimeout || !strings.Contains(errorOf(t, rec), "deadline") {
				t.Fatalf("status %d (%s), want 504 naming the deadline", rec.Code, rec.Body)
			}
			req, ctx, _ := backend.lastRequest()
			if d := req.Deadline.Sub(start); d < tt.want-time.Millisecond || d > tt.want+time.Second {
				t.Errorf("Request.Deadline is %s after the start, want %s", d, tt.want)
			}
			if cd, ok := ctx.Deadline(); !ok || !cd.Equal(req.Deadline) {
				t.Errorf("context deadline %v (set %v), want the request's %v", cd, ok, req.Deadline)
			}
		})
	}
	// A timeout of 0 is none, as Triton reads it.
	for _, params := range []string{`{"priority":2,"x":null}`, `{"timeout":0}`, `{"timeout":-0}`} {
		backend := &fakeBackend{}
		rec := postV2(t, newV2(echoModel(spec("x", "INT8", true, -1)), backend), "/v2/models/m/infer", `{"parameters":`+params+`,`+input+`}`)
		if req, _, _ := backend.lastRequest(); rec.Code != 200 || !req.Deadline.IsZero() {
			t.Errorf("parameters %s: status %d, deadline %v; want 200 and none", params, rec.Code, req.Deadline)
		}
	}
	xModel := echoModel(spec("x", "INT8", true, -1))
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "negative timeout", body: `{"parameters":{"timeout":-5},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" must be 0 (none) or a positive number of microseconds, not -5`}},
		{name: "fractional timeout", body: `{"parameters":{"timeout":1.5},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" (microseconds) must be a whole number, not 1.5`}},
		{name: "timeout as a string", body: `{"parameters":{"timeout":"soon"},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" (microseconds) must be a whole number, not "soon"`}},
		{name: "timeout past a duration", body: `{"parameters":{"timeout":9223372036854776},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" 9223372036854776 is out of range: at most 9223372036854775 microseconds`}},
		{name: "timeout of the largest int64", body: `{"parameters":{"timeout":9223372036854775807},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" 9223372036854775807 is out of range: at most 9223372036854775 microseconds`}},
		{name: "timeout past int64", body: `{"parameters":{"timeout":9223372036854775808},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" 9223372036854775808 is out of range: at most 9223372036854775 microseconds`}},
		{name: "timeout of 26 digits", body: `{"parameters":{"timeout":10000000000000000000000000},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" 10000000000000000000000000 is out of range: at most 9223372036854775 microseconds`}},
		{name: "timeout far below zero", body: `{"parameters":{"timeout":-9223372036854775809},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" must be 0 (none) or a positive number of microseconds, not -9223372036854775809`}},
		{name: "timeout with an exponent", body: `{"parameters":{"timeout":1e25},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "timeout" (microseconds) must be a whole number, not 1e25`}},
		{name: "priority not an integer", body: `{"parameters":{"priority":"high"},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "priority" must be a whole number`}},
		{name: "binary_data_output not a boolean", body: `{"parameters":{"binary_data_output":"yes"},` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`parameter "binary_data_output" must be true or false`}},
		{name: "parameters not an object", body: `{"parameters":[],` + input + `}`, model: xModel, want: 400,
			wantMsg: []string{`"parameters" must be a JSON object`}},
		{name: "bad timeout header", body: `{` + input + `}`, header: []string{TimeoutHeader, "soon"}, model: xModel, want: 400,
			wantMsg: []string{TimeoutHeader}},
		{name: "zero timeout header", body: `{` + input + `}`, header: []string{TimeoutHeader, "0"}, model: xModel, want: 400,
			wantMsg: []string{TimeoutHeader + " must be positive, got 0"}},
		{name: "empty timeout header", body: `{` + input + `}`, header: []string{TimeoutHeader, ""}, model: xModel, want: 400,
			wantMsg: []string{TimeoutHeader + " is empty"}},
	})
}

func TestV2InferMapsBackendErrors(t *testing.T) {
	tests := []struct {
		name       string
		submitErr  error
		itemErr    error
		wantStatus int
		wantMsg    string
	}{
		{name: "overloaded", submitErr: fmt.Errorf("submit: %w", supervisor.ErrOverloaded), wantStatus: 429, wantMsg: "overloaded"},
		{name: "unavailable", submitErr: supervisor.ErrUnavailable, wantStatus: 503, wantMsg: "unavailable"},
		{name: "too large", submitErr: fmt.Errorf("%w: 3 items", supervisor.ErrTooLarge), wantStatus: 413, wantMsg: "too large"},
		{name: "other submit error", submitErr: errors.New("disk on fire"), wantStatus: 500, wantMsg: "disk on fire"},
		// An item is a row: the answer names it so, where /predict says "item".
		{name: "model rejects a row", itemErr: fmt.Errorf("%w: shape mismatch", supervisor.ErrModel), wantStatus: 422, wantMsg: "row 2: model error: shape mismatch"},
		{name: "poison row", itemErr: fmt.Errorf("%w: worker exited", supervisor.ErrPoison), wantStatus: 422, wantMsg: "row 2: item crashes the model"},
		{name: "every row", submitErr: &supervisor.ItemError{Err: fmt.Errorf("%w: batch refused", supervisor.ErrModel), Every: true},
			wantStatus: 422, wantMsg: "every row: model error: batch refused"},
		{name: "a row too large", submitErr: &supervisor.ItemError{Index: 1, Err: fmt.Errorf("%w: the item is 9 bytes", supervisor.ErrTooLarge)},
			wantStatus: 413, wantMsg: "row 1: request too large: the item is 9 bytes"},
		{name: "row deadline", itemErr: supervisor.ErrDeadline, wantStatus: 504, wantMsg: "deadline passed"},
		{name: "model failed", itemErr: fmt.Errorf("%w: 2 outputs for 3 items", supervisor.ErrModelFailed), wantStatus: 500, wantMsg: "model failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
				if tt.submitErr != nil {
					return nil, tt.submitErr
				}
				f := newAnswer(len(req.Items))
				for i, it := range req.Items {
					if i == 2 {
						f.complete(i, nil, tt.itemErr)
					} else {
						f.complete(i, it, nil)
					}
				}
				return f, nil
			}}
			h := New(Config{Backend: backend, Tensors: oneInput("INT8"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			rec := postV2(t, h, "/v2/models/m/infer", valuesBody("INT8", `[1,2,3]`))
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("error %q does not contain %q", msg, tt.wantMsg)
			}
			if retry := rec.Header().Get("Retry-After"); (tt.wantStatus == 429 || tt.wantStatus == 503) != (retry == "1") {
				t.Errorf("Retry-After %q with status %d", retry, rec.Code)
			}
			if logged := strings.Contains(logs.String(), "level=ERROR"); logged != (tt.wantStatus == 500) {
				t.Errorf("error logged = %v for status %d: %q", logged, rec.Code, logs.String())
			}
			// The handler is whole after the failure: a good request passes.
			backend.mu.Lock()
			backend.submit = nil
			backend.mu.Unlock()
			if rec := postV2(t, h, "/v2/models/m/infer", valuesBody("INT8", `[4,5,6]`)); rec.Code != 200 ||
				!strings.Contains(rec.Body.String(), `"data":[4,5,6]`) {
				t.Errorf("the request after the failure: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

func TestV2InferItemRefusedByTheModel(t *testing.T) {
	model := oneInput("INT8")
	model.refuse = func(inputs []Tensor) error {
		if inputs[0].Data[0] == 13 {
			return errors.New(`input "v": the model does not take 13`)
		}
		return nil
	}
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "refused row", model: model, body: valuesBody("INT8", `[1,13,2]`), want: 400, wantMsg: []string{`row 1: input "v": the model does not take 13`}},
	})
}

// TestV2InferModelAnswersThatCannotBeStacked: answers the rows of which
// disagree, or that do not hold what they say, are the model's fault.
func TestV2InferModelAnswersThatCannotBeStacked(t *testing.T) {
	tests := []struct {
		name    string
		outputs func(row byte) ([]Tensor, error)
		wantMsg []string
	}{
		{"shapes differ", func(row byte) ([]Tensor, error) {
			return []Tensor{{Name: "v", Datatype: "INT8", Shape: []int64{int64(row)}, Data: make([]byte, row)}}, nil
		}, []string{`output "v": row 1 has shape [2] but row 0 has [1]`}},
		{"datatypes differ", func(row byte) ([]Tensor, error) {
			if row == 2 {
				return []Tensor{{Name: "v", Datatype: "UINT8", Data: []byte{1}}}, nil
			}
			return []Tensor{{Name: "v", Datatype: "INT8", Data: []byte{1}}}, nil
		}, []string{`output "v": row 1 is UINT8 but row 0 is INT8`}},
		{"data does not match the shape", func(row byte) ([]Tensor, error) {
			return []Tensor{{Name: "v", Datatype: "INT32", Shape: []int64{2}, Data: []byte{1, 2, 3}}}, nil
		}, []string{`output "v", row 0: 3 bytes of data do not match shape [2] of INT32`}},
		{"output missing", func(row byte) ([]Tensor, error) {
			return []Tensor{{Name: "w", Datatype: "INT8", Data: []byte{1}}}, nil
		}, []string{`row 0: the model's answer has no output "v"`}},
		{"unknown datatype", func(row byte) ([]Tensor, error) {
			return []Tensor{{Name: "v", Datatype: "COMPLEX", Data: []byte{1}}}, nil
		}, []string{`output "v": the model answered with unknown datatype "COMPLEX"`}},
		{"undecodable answer", func(row byte) ([]Tensor, error) {
			return nil, errors.New("truncated answer")
		}, []string{"row 0: decode the model's answer: truncated answer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := oneInput("INT8")
			model.outputs = func(answer []byte) ([]Tensor, error) {
				var in []wireTensor
				if err := msgpack.Unmarshal(answer, &in); err != nil {
					return nil, err
				}
				return tt.outputs(in[0].Data[0])
			}
			var logs bytes.Buffer
			h := New(Config{Backend: &fakeBackend{}, Tensors: model, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			rec := postV2(t, h, "/v2/models/m/infer", valuesBody("INT8", `[1,2]`))
			if rec.Code != 500 {
				t.Fatalf("status %d (%s), want 500", rec.Code, rec.Body)
			}
			msg := errorOf(t, rec)
			for _, w := range tt.wantMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if !strings.Contains(logs.String(), "level=ERROR") {
				t.Error("the model's fault was not logged")
			}
		})
	}
}

// TestV2InferFullQueueIsRefusedBeforeTheBody: as /predict, a full queue is
// answered 429 before the body is read.
func TestV2InferFullQueueIsRefusedBeforeTheBody(t *testing.T) {
	b := &fullBackend{fakeBackend{ready: true}}
	h := New(Config{Backend: b, Tensors: oneInput("INT8")})
	rec := postV2(t, h, "/v2/models/m/infer", `{"inputs": [`)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || !strings.Contains(errorOf(t, rec), "overloaded") {
		t.Fatalf("status %d, Retry-After %q, %s; want 429, 1 and overloaded", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if _, _, calls := b.lastRequest(); calls != 0 {
		t.Fatalf("the backend was called %d times", calls)
	}
}

// TestV2InferIsCounted: v2 requests count in the request metrics as
// /predict's do.
func TestV2InferIsCounted(t *testing.T) {
	h := newV2(oneInput("INT8"), nil)
	postV2(t, h, "/v2/models/m/infer", valuesBody("INT8", `[1]`))
	postV2(t, h, "/v2/models/m/infer", valuesBody("INT8", `[1000]`))
	counts := &h.(*handler).requests.byOutcome
	if ok, rejected := counts[0].Load(), counts[1].Load(); ok != 1 || rejected != 1 {
		t.Errorf("counted %d ok and %d rejected, want 1 and 1", ok, rejected)
	}
}

func TestV2InferRefusesLargeBodies(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{}, Tensors: oneInput("INT8"), MaxBody: 64})
	rec := postV2(t, h, "/v2/models/m/infer", valuesBody("INT8", "["+strings.Repeat("1,", 40)+"1]"))
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(errorOf(t, rec), "64 bytes") {
		t.Errorf("status %d (%s), want 413 naming the limit", rec.Code, rec.Body)
	}
}

// TestV2InferKeepsTheItemsOfATimedOutRequest: the items a model makes may
// alias the request's memory, and the supervisor may still read them after
// their request has timed out, so that memory is not reused by the next
// request.
func TestV2InferKeepsTheItemsOfATimedOutRequest(t *testing.T) {
	held := make(chan [][]byte, 1)
	backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
		held <- req.Items
		return newAnswer(len(req.Items)), nil // never answered
	}}
	h := newV2(newPassModel("INT8"), backend) // its items alias the body
	first := `{"parameters":{"timeout":20000},"inputs":[{"name":"x","shape":[3],"datatype":"INT8","data":[1,2,3]}]}`
	if rec := postV2(t, h, "/v2/models/m/infer", first); rec.Code != http.StatusGatewayTimeout {
		t.Fatalf("status %d (%s), want 504", rec.Code, rec.Body)
	}
	items := <-held
	backend.mu.Lock()
	backend.submit = nil
	backend.mu.Unlock()
	for range 3 {
		if rec := postV2(t, h, "/v2/models/m/infer", strings.Replace(valuesBody("INT8", `[7,8,9]`), `"v"`, `"x"`, 1)); rec.Code != 200 {
			t.Fatalf("status %d (%s)", rec.Code, rec.Body)
		}
	}
	if got := bytes.Join(items, nil); !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Errorf("the timed-out request's items now hold % x, want 01 02 03", got)
	}
}

// An input without a batch axis is copied into every row's item: a small
// body of many rows must not make items past what the server takes in a
// body, and just under that it is served.
func TestV2InferBoundsTheCopiesOfUnbatchedInputs(t *testing.T) {
	model := echoModel(spec("x", "UINT8", true, -1), spec("w", "FP32", false, 16))
	w := `{"name":"w","shape":[16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`
	body := func(rows int) string {
		data := strings.TrimSuffix(strings.Repeat("1,", rows), ",")
		return inputsBody(`{"name":"x","shape":[`+strconv.Itoa(rows)+`],"datatype":"UINT8","data":[`+data+`]}`, w)
	}
	h := New(Config{Backend: &fakeBackend{ready: true}, Tensors: model, MaxBody: 64 * 20})
	if rec := postV2(t, h, "/v2/models/m/infer", body(20)); rec.Code != http.StatusOK {
		t.Errorf("20 rows of 64 bytes copied, at the limit: %d %s", rec.Code, rec.Body)
	}
	rec := postV2(t, h, "/v2/models/m/infer", body(21))
	if msg := rec.Body.String(); rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "21 rows") || !strings.Contains(msg, "fewer rows") {
		t.Errorf("21 rows: %d %s; want 413 saying the rows copy too much", rec.Code, msg)
	}
	if n := len(model.itemRows()); n != 20 {
		t.Errorf("the model encoded %d items; want the 20 of the request served and none of the one refused", n)
	}
}

// TestV2InferRefusesStringsThatAreNotText: a BYTES element in JSON that is
// not valid UTF-8, or has a lone surrogate escape, is refused naming the
// input and the element, where encoding/json would hand the model U+FFFD.
func TestV2InferRefusesStringsThatAreNotText(t *testing.T) {
	model := func() *tensorEcho { return echoModel(spec("input", "BYTES", true, -1)) }
	body := func(data string) string {
		return inputsBody(`{"name":"input","datatype":"BYTES","shape":[2],"data":` + data + `}`)
	}
	const (
		lone   = `is a string with a lone surrogate escape `
		bad    = `is a string that is not valid UTF-8 (byte 0x`
		binary = "send bytes that are not text as binary data"
	)
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "a lone high surrogate", model: model(), body: body(`["\ud800","a"]`), want: 400,
			wantMsg: []string{`input "input": element 0 ` + lone + `\ud800, which is not valid UTF-8`, binary}},
		{name: "a lone low surrogate", model: model(), body: body(`["a","x\uDC00"]`), want: 400,
			wantMsg: []string{`input "input": element 1 ` + lone + `\uDC00`}},
		{name: "a high surrogate then not a low one", model: model(), body: body(`["a",["\ud83d\u0041"]]`), want: 400,
			wantMsg: []string{`input "input": element 1 ` + lone + `\ud83d`}},
		{name: "invalid UTF-8", model: model(), body: body("[\"ok\",\"a\xffb\"]"), want: 400,
			wantMsg: []string{`input "input": element 1 ` + bad + `ff)`, binary}},
		{name: "invalid UTF-8 beside an escape", model: model(), body: body("[\"\\n\xc3\",\"a\"]"), want: 400,
			wantMsg: []string{`input "input": element 0 ` + bad + `c3)`}},
		{name: "the brief's two", model: model(), body: body("[\"\\ud800\",\"a\xffb\"]"), want: 400,
			wantMsg: []string{`input "input": element 0 ` + lone + `\ud800`}},
		{name: "the one element bare", model: echoModel(spec("input", "BYTES", true, -1)),
			body: inputsBody(`{"name":"input","datatype":"BYTES","shape":[1],"data":"\udfff"}`), want: 400,
			wantMsg: []string{`input "input": "data" ` + lone + `\udfff`}},
	})
}

// TestV2InferTakesStringsThatAreText: what is text passes as its UTF-8,
// surrogate pairs joined and U+FFFD sent as such kept.
func TestV2InferTakesStringsThatAreText(t *testing.T) {
	model := echoModel(spec("input", "BYTES", true, -1))
	rec := postV2(t, newV2(model, nil), "/v2/models/m/infer",
		inputsBody(`{"name":"input","datatype":"BYTES","shape":[3],"data":["\ud83d\ude00\n","\ufffd","é"]}`))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if got, want := model.itemRows()[0][0].Data, bytesElements("😀\n"); !bytes.Equal(got, want) {
		t.Errorf("row 0 reached the model as % x, want % x", got, want)
	}
	if got, want := model.itemRows()[1][0].Data, bytesElements("\ufffd"); !bytes.Equal(got, want) {
		t.Errorf("row 1 reached the model as % x, want % x", got, want)
	}
}

// TestV2InferRefusesNamesAndIDsThatAreNotText: a tensor's name or
// datatype, or the request's id, that is not text is refused naming it,
// rather than read, or echoed, with U+FFFD in its place; one that is
// text, escapes and pairs included, is served, the id echoed as it came.
func TestV2InferRefusesNamesAndIDsThatAreNotText(t *testing.T) {
	model := func() *tensorEcho { return echoModel(spec("input", "BYTES", true, -1)) }
	const data = `"datatype":"BYTES","shape":[1],"data":["a"]`
	runV2ErrorCases(t, []v2ErrorCase{
		{name: "an input's name", model: model(), body: inputsBody(`{"name":"in\ud800put",` + data + `}`), want: 400,
			wantMsg: []string{`"name" is a string with a lone surrogate escape \ud800`}},
		{name: "an input's datatype", model: model(), body: inputsBody("{\"name\":\"input\",\"datatype\":\"BYT\xffES\",\"shape\":[1],\"data\":[\"a\"]}"), want: 400,
			wantMsg: []string{`"datatype" is a string that is not valid UTF-8 (byte 0xff)`}},
		{name: "an output's name", model: model(),
			body: `{"inputs":[{"name":"input",` + data + `}],"outputs":[{"name":"out\udc00"}]}`, want: 400,
			wantMsg: []string{`"name" is a string with a lone surrogate escape \udc00`}},
		{name: "the id, not UTF-8", model: model(), body: "{\"id\":\"r\xfe1\",\"inputs\":[{\"name\":\"input\"," + data + "}]}", want: 400,
			wantMsg: []string{`"id" is a string that is not valid UTF-8 (byte 0xfe)`}},
		{name: "the id, a lone surrogate", model: model(), body: `{"id":"r\ud83d","inputs":[{"name":"input",` + data + `}]}`, want: 400,
			wantMsg: []string{`"id" is a string with a lone surrogate escape \ud83d`}},
	})
	rec := postV2(t, newV2(model(), nil), "/v2/models/m/infer", `{"id":"r\ud83d\ude00\n","inputs":[{"n\u0061me":"input",`+data+`}]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"id":"r\ud83d\ude00\n"`) {
		t.Errorf("a request whose id and key are text, with escapes: %d %s; want 200 with the id as it came", rec.Code, rec.Body)
	}
}
