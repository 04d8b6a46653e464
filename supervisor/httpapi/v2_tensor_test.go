package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/wire"
)

// TestV2HalfDataRoundsOnceFromTheText: an FP16 element is rounded from its
// text once. Through a float64 first, a text a hair off a midpoint between
// two halves lands on it and goes to the even half, and one a hair below
// 65520 (halfway to 2^16) becomes infinite and is refused.
func TestV2HalfDataRoundsOnceFromTheText(t *testing.T) {
	dt, _ := dtypeOf([]byte("FP16"))
	tests := []struct {
		text    string
		want    uint16
		problem string // in the error when the element is refused
	}{
		{text: "1.000488281250000000000001", want: 0x3c01},
		{text: "1.00048828125", want: 0x3c00}, // the midpoint itself: to even
		{text: "1.000488281249999999999999", want: 0x3c00},
		{text: "65519.999999999999999", want: 0x7bff},
		{text: "-65519.999999999999999", want: 0xfbff},
		{text: "2.980232238769531250000001e-8", want: 0x0001},
		{text: "0.1", want: 0x2e66},
		{text: "65520", problem: "element 0 is 65520, which does not fit FP16 (its largest value is 65504)"},
		{text: "1e400", problem: "element 0 is 1e400, which does not fit FP16"},
	}
	for _, tt := range tests {
		s := wire.NewJSONScanner([]byte("[" + tt.text + "]"))
		got, n, err := appendJSONData(nil, &s, dt, tensorRef{what: "input", name: []byte("x")})
		switch {
		case tt.problem != "":
			if err == nil || !strings.Contains(err.Error(), tt.problem) {
				t.Errorf("%s: % x, %v; want an error containing %q", tt.text, got, err, tt.problem)
			}
		case err != nil || n != 1 || !bytes.Equal(got, binary.LittleEndian.AppendUint16(nil, tt.want)):
			t.Errorf("%s: %d elements % x, %v; want %#04x", tt.text, n, got, err, tt.want)
		}
	}
}

// TestAppendTextMatchesEncodingJSON: JSON strings decode as
// encoding/json decodes them, invalid UTF-8 and lone surrogates included;
// appendText decodes the strings that are text the same, and stops at the
// first byte or escape of one that is not.
func TestAppendTextMatchesEncodingJSON(t *testing.T) {
	for _, s := range textSeeds {
		checkText(t, []byte(s))
	}
}

var textSeeds = []string{
	`"plain"`, `""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`,
	`"\ude00\ud83d"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, "\"\xff\xfe\"", "\"ok\xc3\"", "\"é\"", `"\uFFFD\uabcd"`,
}

func checkText(t *testing.T, text []byte) {
	t.Helper()
	s := wire.NewJSONScanner(text)
	raw, err := s.Skip(0)
	if err != nil || s.End() != nil || raw[0] != '"' {
		return
	}
	var want string
	if err := json.Unmarshal(text, &want); err != nil {
		t.Fatalf("encoding/json refuses %q, which the scanner takes: %v", text, err)
	}
	got, bad, size := appendText(nil, raw[1:len(raw)-1])
	switch {
	case isText(text) != (bad < 0):
		t.Fatalf("appendText(%q) stops at %d; is it text: %v", text, bad, isText(text))
	case bad < 0 && string(got) != want:
		t.Fatalf("appendText(%q) = %q, encoding/json says %q", text, got, want)
	case bad >= 0 && (!isText(quote(raw[1:1+bad])) || isText(quote(raw[1+bad:1+bad+size]))):
		t.Fatalf("appendText(%q) stops at %d, %d bytes, not at the first part that is not text", text, bad, size)
	}
}

// quote is the string body b in quotes.
func quote(b []byte) []byte { return append(append([]byte{'"'}, b...), '"') }

func FuzzAppendText(f *testing.F) {
	for _, s := range textSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) { checkText(t, text) })
}

// TestAppendJSONStringMatchesEncodingJSON: the strings written are valid
// JSON that decodes as encoding/json decodes its own encoding of them.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c\n\r\t\x00\x1f", "é😀", "\xff\xfe", "ok\xc3", "\u2028<&>"} {
		got := appendJSONString(nil, []byte(s))
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("appendJSONString(%q) = %s, not JSON: %v", s, got, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack || !utf8.ValidString(back) {
			t.Errorf("appendJSONString(%q) decodes to %q, encoding/json's to %q", s, back, wantBack)
		}
	}
}

// TestAppendJSONFloatMatchesEncodingJSON: numbers are written as
// encoding/json writes float64 and float32.
func TestAppendJSONFloatMatchesEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, 1, -2.5, 0.1, 1e-7, 123456789, 1e20, 1e21, 1.5e300, 5e-324, math.MaxFloat64, -1e-6} {
		want, _ := json.Marshal(f)
		if got := appendJSONFloat(nil, f, 64); string(got) != string(want) {
			t.Errorf("float64 %v: %s, encoding/json writes %s", f, got, want)
		}
		f32 := float32(f)
		if math.IsInf(float64(f32), 0) {
			continue
		}
		want, _ = json.Marshal(f32)
		if got := appendJSONFloat(nil, float64(f32), 32); string(got) != string(want) {
			t.Errorf("float32 %v: %s, encoding/json writes %s", f32, got, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := appendJSONFloat(nil, f, 64); string(got) != "null" {
			t.Errorf("%v: %s, want null", f, got)
		}
	}
}

func TestParseModelPath(t *testing.T) {
	tests := []struct {
		rest string
		want v2Route
		ok   bool
	}{
		{"m", v2Route{model: "m"}, true},
		{"m/ready", v2Route{model: "m", action: "ready"}, true},
		{"m/infer", v2Route{model: "m", action: "infer"}, true},
		{"m/versions/2", v2Route{model: "m", version: "2"}, true},
		{"m/versions/2/infer", v2Route{model: "m", version: "2", action: "infer"}, true},
		{"m/versions/2/ready", v2Route{model: "m", version: "2", action: "ready"}, true},
		{"", v2Route{}, false},
		{"m/", v2Route{}, false},
		{"m/versions/", v2Route{}, false},
		{"m/versions", v2Route{}, false},
		{"m/versions/2/", v2Route{}, false},
		{"m/versions/2/infer/x", v2Route{}, false},
		{"m/stats", v2Route{model: "m", action: "stats"}, true},
		{"m/versions/2/config", v2Route{model: "m", version: "2", action: "config"}, true},
		{"m/trace", v2Route{}, false},
	}
	for _, tt := range tests {
		got, ok := parseModelPath(tt.rest)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseModelPath(%q) = %+v, %v; want %+v, %v", tt.rest, got, ok, tt.want, tt.ok)
		}
	}
}

// fuzzModel takes f, FP32 batched [-1, 2]; s, BYTES batched [-1]; and u,
// INT8 unbatched [1].
func fuzzModel() *tensorEcho {
	return echoModel(spec("f", "FP32", true, -1, 2), spec("s", "BYTES", true, -1), spec("u", "INT8", false, 1))
}

// FuzzV2BinaryBody feeds the binary tensor data reader a JSON header and
// the bytes after it. Whatever they are, the answer is 200 or 400, never a
// panic; a 200 is framed right and gives back the tensors sent.
func FuzzV2BinaryBody(f *testing.F) {
	fs, ss, us := f32s(1, 2, 3, 4), bytesElements("ab", ""), []byte{7}
	bin := func(name, datatype, shape string, size int) string {
		return `{"name":"` + name + `","datatype":"` + datatype + `","shape":` + shape + `,"parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}`
	}
	f.Add([]byte(`{"inputs":[`+bin("f", "FP32", "[2,2]", 16)+`,`+bin("s", "BYTES", "[2]", len(ss))+`,`+bin("u", "INT8", "[1]", 1)+`]}`),
		append(append(append([]byte(nil), fs...), ss...), us...))
	f.Add([]byte(`{"parameters":{"binary_data_output":true},"inputs":[`+bin("s", "BYTES", "[2]", len(ss))+
		`,{"name":"f","datatype":"FP32","shape":[2,2],"data":[[1,2],[3,4]]},`+bin("u", "INT8", "[1]", 1)+`]}`),
		append(append([]byte(nil), ss...), us...))
	f.Add([]byte(`{"inputs":[`+bin("s", "BYTES", "[1]", 9)+`]}`), []byte{9, 0, 0, 0, 'x'})
	f.Add([]byte(`{"inputs":[`+bin("f", "FP32", "[1,2]", 8)+`]}`), f32s(1))
	f.Add([]byte(`{"inputs":[]}`), []byte{1, 2, 3})
	f.Add([]byte(`{"inputs":[`), []byte(nil))
	f.Fuzz(func(t *testing.T, header, rest []byte) {
		model := fuzzModel()
		h := newV2(model, nil)
		body := append(append([]byte(nil), header...), rest...)
		rec := do(t, h, http.MethodPost, "/v2/models/m/infer", "application/octet-stream", body, InferenceHeaderLength, strconv.Itoa(len(header)))
		switch rec.Code {
		case http.StatusBadRequest:
			errorOf(t, rec)
			return
		case http.StatusOK:
		default:
			t.Fatalf("header %q, rest % x: status %d (%s), want 200 or 400", header, rest, rec.Code, rec.Body)
		}
		answer, bins := answerOf(t, rec)
		if len(answer.Outputs) != 3 {
			t.Fatalf("answer with %d outputs, want 3", len(answer.Outputs))
		}
		rows := model.itemRows()
		for name, data := range bins {
			if want := rowsData(rows, name); !bytes.Equal(data, want) {
				t.Fatalf("binary output %q is % x, the model's rows hold % x", name, data, want)
			}
		}
	})
}

// FuzzV2DataReadsAsFlat: the elements 0, 1, 2, ... nested in arrays in
// any way (the nesting read from the fuzzer's bytes) read as the same
// elements sent flat, and as many.
func FuzzV2DataReadsAsFlat(f *testing.F) {
	for _, seed := range []string{"", "\x02\x02\x02", "\x00\x02\x02\x01\x00\x02\x01", "\x00\x00\x02\x01\x02\x01\x02", "\x00\x01\x00\x01\x02"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, program []byte) {
		// Each byte of the program opens an array (0), closes one (1), or
		// writes the next element; the data is an array around them.
		nested := []byte{'['}
		depth, n, afterValue := 1, int64(0), false
		for _, op := range program {
			switch {
			case op%3 == 1 && depth > 1:
				nested = append(nested, ']')
				depth--
				afterValue = true
				continue
			case op%3 == 1:
				continue
			}
			if afterValue {
				nested = append(nested, ',')
			}
			if op%3 == 0 && depth < maxRank {
				nested = append(nested, '[')
				depth++
				afterValue = false
				continue
			}
			nested = strconv.AppendInt(nested, n, 10)
			n++
			afterValue = true
		}
		nested = append(nested, bytes.Repeat([]byte{']'}, depth)...)
		flat := []byte{'['}
		for i := range n {
			if i > 0 {
				flat = append(flat, ',')
			}
			flat = strconv.AppendInt(flat, i, 10)
		}
		flat = append(flat, ']')
		dt, _ := dtypeOf([]byte("INT32"))
		read := func(data []byte) ([]byte, int64, error) {
			s := wire.NewJSONScanner(data)
			return appendJSONData(nil, &s, dt, tensorRef{what: "input", name: []byte("x")})
		}
		want, count, err := read(flat)
		if err != nil || count != n {
			t.Fatalf("flat %s: %d elements, %v", flat, count, err)
		}
		got, count, err := read(nested)
		if err != nil || count != n || !bytes.Equal(got, want) {
			t.Fatalf("nested %s: %d elements % x, %v; flat reads as %d: % x", nested, count, got, err, n, want)
		}
	})
}

// TestJSONDataIsSizedOnceByItsShape: an input's JSON data, its shape sent
// before it, is converted into bytes allocated once, not grown by
// doubling: a body of zeros for an INT64 tensor, 2 bytes of JSON an element
// and 8 converted, allocated 15 times its size as it grew.
func TestJSONDataIsSizedOnceByItsShape(t *testing.T) {
	const n = 1 << 17
	body := []byte(`{"inputs":[{"name":"x","datatype":"INT64","shape":[` + strconv.Itoa(n) + `],"data":[0` + strings.Repeat(",0", n-1) + `]}]}`)
	var st inferState
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := st.parse(body, false); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if len(st.arena) != 8*n {
		t.Fatalf("converted %d bytes; want %d", len(st.arena), 8*n)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 12*n {
		t.Errorf("parsing allocated %d bytes for %d bytes converted; want them allocated once", allocated, 8*n)
	}
}
