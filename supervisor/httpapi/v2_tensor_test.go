package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"net/http"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/wire"
)

// TestHalfRoundTrip: every half-precision value widens and rounds back to
// itself (NaNs to a NaN).
func TestHalfRoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := halfToFloat32(uint16(h))
		back, ok := halfFromFloat64(float64(f))
		if isNaN := h&0x7c00 == 0x7c00 && h&0x3ff != 0; isNaN {
			if !math.IsNaN(float64(f)) || back&0x7c00 != 0x7c00 || back&0x3ff == 0 || !ok {
				t.Fatalf("NaN %#04x became %v and %#04x", h, f, back)
			}
			continue
		}
		if !ok || back != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x (ok %v)", h, f, back, ok)
		}
	}
}

func TestHalfFromFloat64RoundsToNearestEven(t *testing.T) {
	tests := []struct {
		f    float64
		want uint16
		ok   bool
	}{
		{1, 0x3c00, true},
		{-2, 0xc000, true},
		{0, 0, true},
		{math.Copysign(0, -1), 0x8000, true},
		{1 + 1.0/2048, 0x3c00, true},               // halfway between 1 and the next: to even, 1
		{1 + 3.0/2048, 0x3c02, true},               // halfway between 0x3c01 and 0x3c02: to even
		{1 + 1.0/2048 + 1.0/(1<<20), 0x3c01, true}, // past halfway: up
		{65504, 0x7bff, true},                      // the largest half
		{65519.99, 0x7bff, true},                   // below halfway to 65536: down
		{65520, 0, false},                          // halfway to 65536, ties to even: infinite, refused
		{-1e6, 0, false},
		{math.Inf(1), 0x7c00, true},
		{math.Inf(-1), 0xfc00, true},
		{6.103515625e-05, 0x0400, true},         // the smallest normal
		{5.960464477539063e-08, 0x0001, true},   // the smallest subnormal, 2^-24
		{math.Ldexp(1, -25), 0, true},           // halfway between 0 and 2^-24: to even, 0
		{math.Ldexp(3, -26), 0x0001, true},      // past halfway: up
		{math.Ldexp(3, -25), 0x0002, true},      // halfway between 1 and 2 units: to even, 2
		{math.Ldexp(5, -25), 0x0002, true},      // halfway between 2 and 3 units: to even, 2
		{math.Ldexp(1023.5, -24), 0x0400, true}, // the largest subnormal rounds up into the normals
		{1e-300, 0, true},
		{-5e-324, 0x8000, true},
	}
	for _, tt := range tests {
		got, ok := halfFromFloat64(tt.f)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("halfFromFloat64(%v) = %#04x, %v; want %#04x, %v", tt.f, got, ok, tt.want, tt.ok)
		}
	}
	if h, ok := halfFromFloat64(math.NaN()); !ok || h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN became %#04x", h)
	}
}

// TestHalfFromFloat64IsNearest checks the rounding against the two halves
// around values between every pair of neighbours.
func TestHalfFromFloat64IsNearest(t *testing.T) {
	for h := uint16(0); h < 0x7bff; h++ {
		lo, hi := float64(halfToFloat32(h)), float64(halfToFloat32(h+1))
		for _, frac := range []float64{0.25, 0.4999, 0.5, 0.5001, 0.75} {
			f := lo + (hi-lo)*frac
			got, ok := halfFromFloat64(f)
			want := h
			if frac > 0.5 || frac == 0.5 && h&1 == 1 {
				want = h + 1
			}
			if !ok || got != want {
				t.Fatalf("halfFromFloat64(%v) (%v of the way from %#04x) = %#04x, want %#04x", f, frac, h, got, want)
			}
		}
	}
}

// TestAppendUnquotedMatchesEncodingJSON: JSON strings decode as
// encoding/json decodes them, invalid UTF-8 and lone surrogates included.
func TestAppendUnquotedMatchesEncodingJSON(t *testing.T) {
	for _, s := range unquoteSeeds {
		checkUnquoted(t, []byte(s))
	}
}

var unquoteSeeds = []string{
	`"plain"`, `""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`,
	`"\ude00\ud83d"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, "\"\xff\xfe\"", "\"ok\xc3\"", "\"é\"", `"\uFFFD\uabcd"`,
}

func checkUnquoted(t *testing.T, text []byte) {
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
	if got := appendUnquoted(nil, raw[1:len(raw)-1]); string(got) != want {
		t.Fatalf("appendUnquoted(%q) = %q, encoding/json says %q", text, got, want)
	}
}

func FuzzAppendUnquoted(f *testing.F) {
	for _, s := range unquoteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) { checkUnquoted(t, text) })
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

// FuzzWholeDigits holds wholeDigits against math/big's exact reading of
// the same number, for JSON numbers built of a sign, digits, a fraction
// and a bounded exponent (big.Rat would spend seconds on a huge one).
func FuzzWholeDigits(f *testing.F) {
	f.Add(false, "1", "0", int16(0))
	f.Add(true, "92233720368547758", "07", int16(2))
	f.Add(false, "0", "000", int16(-5))
	f.Add(false, "1", "0000000000000000001", int16(0))
	f.Add(false, "12", "30", int16(-1))
	f.Fuzz(func(t *testing.T, neg bool, intPart, frac string, exponent int16) {
		if intPart == "" || !isDigits(intPart) || !isDigits(frac) || len(intPart) > 1 && intPart[0] == '0' {
			return
		}
		text := intPart + "." + frac
		if frac == "" {
			text = intPart + "e" + strconv.Itoa(int(exponent))
		} else if exponent != 0 {
			text += "E" + strconv.Itoa(int(exponent))
		}
		if neg {
			text = "-" + text
		}
		exact, ok := new(big.Rat).SetString(text)
		if !ok {
			t.Fatalf("math/big does not read %q", text)
		}
		digits, whole, huge := wholeDigits([]byte(text))
		if whole != exact.IsInt() {
			t.Fatalf("wholeDigits(%q) whole = %v, math/big says %v", text, whole, exact.IsInt())
		}
		if !whole {
			return
		}
		num := exact.Num()
		if tooMany := len(new(big.Int).Abs(num).String()) > maxWholeDigits; huge != tooMany {
			t.Fatalf("wholeDigits(%q) huge = %v, math/big says %s", text, huge, num)
		}
		if !huge && digits != num.String() {
			t.Fatalf("wholeDigits(%q) = %s, math/big says %s", text, digits, num)
		}
	})
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
