package onnxio_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/numtext/numtexttest"
	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

const (
	halfInf    = numtexttest.HalfInf
	halfMax    = numtexttest.HalfMax
	halfNegBit = 0x8000
)

func TestFloat16EveryHalfRoundTrips(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := onnxio.Float16Frombits(h)
		if back := onnxio.Float16Bits(f); back != h {
			t.Fatalf("%#04x reads as %v (bits %#016x), which converts back to %#04x", h, f, math.Float64bits(f), back)
		}
		exp := h >> 10 & 0x1f
		switch {
		case exp == 0x1f && h&0x3ff != 0:
			if !math.IsNaN(f) || math.Signbit(f) != (h&halfNegBit != 0) {
				t.Fatalf("%#04x reads as %v; want a NaN of its sign", h, f)
			}
		case exp == 0x1f:
			if !math.IsInf(f, 0) || math.Signbit(f) != (h&halfNegBit != 0) {
				t.Fatalf("%#04x reads as %v; want an infinity of its sign", h, f)
			}
		default:
			if want := numtexttest.HalfValue(h); f != want || math.Signbit(f) != math.Signbit(want) {
				t.Fatalf("%#04x reads as %v; want %v", h, f, want)
			}
		}
	}
	for h, want := range map[uint16]float64{0x3c00: 1, 0xc000: -2, halfMax: 65504, 0x0400: 0x1p-14, 0x0001: 0x1p-24, 0x3555: 0.333251953125} {
		if got := onnxio.Float16Frombits(h); got != want {
			t.Errorf("Float16Frombits(%#04x) = %v, want %v", h, got, want)
		}
	}
}

// TestFloat16RoundsToNearestEven holds every pair of neighbouring halves
// against their midpoint: the midpoint goes to the even one, anything a hair
// off it to the nearer one; for both signs, into and out of the subnormals,
// and from the largest half into infinity.
func TestFloat16RoundsToNearestEven(t *testing.T) {
	for h := uint16(0); h < halfInf; h++ {
		lo, hi := numtexttest.HalfValue(h), math.Ldexp(1, 16) // above 65504 the next "half" is 2^16: infinity
		if h < halfMax {
			hi = numtexttest.HalfValue(h + 1)
		}
		mid := (lo + hi) / 2 // exact: halves have 11 significant bits
		even := h
		if h&1 == 1 {
			even = h + 1
		}
		for _, sign := range []float64{1, -1} {
			bit := uint16(0)
			if sign < 0 {
				bit = halfNegBit
			}
			for _, tc := range []struct {
				f    float64
				want uint16
			}{
				{sign * lo, h}, {sign * mid, even},
				{sign * math.Nextafter(mid, 0), h}, {sign * math.Nextafter(mid, math.Inf(1)), h + 1},
			} {
				if got := onnxio.Float16Bits(tc.f); got != tc.want|bit {
					t.Fatalf("Float16Bits(%v) = %#04x, want %#04x", tc.f, got, tc.want|bit)
				}
			}
		}
	}
}

func TestFloat16SpecialValues(t *testing.T) {
	tests := []struct {
		f    float64
		want uint16
	}{
		{0, 0}, {math.Copysign(0, -1), 0x8000},
		{math.Inf(1), halfInf}, {math.Inf(-1), 0xfc00},
		{65519.99, halfMax}, {65520, halfInf}, {-65520, 0xfc00}, {1e300, halfInf}, {-math.MaxFloat64, 0xfc00},
		{0x1p-24, 0x0001}, {0x1p-25, 0}, {-0x1p-25, 0x8000}, {math.Nextafter(0x1p-25, 1), 0x0001}, {3 * 0x1p-25, 0x0002},
		{0x1p-14 - 0x1p-25, 0x0400}, {0x1p-14 - 0x1p-24, 0x03ff}, {5e-324, 0}, {-1e-300, 0x8000},
		{math.Float64frombits(0x7ff8000000000000), 0x7e00},  // the quiet NaN
		{math.Float64frombits(0xfff0100000000000), 0xfc04},  // a signalling NaN keeps its top payload bits
		{math.Float64frombits(0x7ff0000000000001), 0x7e00},  // a payload below what a half keeps: still a NaN
		{math.Float64frombits(0x7ff0000000000000), halfInf}, // and infinity is not one
	}
	for _, tt := range tests {
		if got := onnxio.Float16Bits(tt.f); got != tt.want {
			t.Errorf("Float16Bits(%v, bits %#016x) = %#04x, want %#04x", tt.f, math.Float64bits(tt.f), got, tt.want)
		}
	}
}

// halfModel is a codec for a one-input model: x float16 [batch, n] → y
// float16 [batch, n].
func halfModel(t testing.TB, pad map[string]float64) *onnxio.Codec {
	t.Helper()
	return vectorModel(t, onnxpb.TensorProto_FLOAT16, pad)
}

// vectorModel is a codec for a one-input model: x elem [batch, n] → y elem
// [batch, n].
func vectorModel(t testing.TB, elem onnxpb.TensorProto_DataType, pad map[string]float64) *onnxio.Codec {
	t.Helper()
	sig, err := onnxio.Parse(handModel([]*onnxpb.ValueInfoProto{tensorValue("x", elem, "batch", "n")}, []*onnxpb.ValueInfoProto{tensorValue("y", elem, "batch", "n")}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := onnxio.NewCodec(sig, pad)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// parseHalf sends text as the one element of the half model's input.
func parseHalf(t *testing.T, c *onnxio.Codec, text string) (uint16, error) {
	t.Helper()
	item, _, err := c.FromJSON([]byte("[" + text + "]"))
	if err != nil {
		return 0, err
	}
	in := decode(t, item)
	if in[0].DType != onnxio.Float16 || len(in[0].Data) != 2 {
		t.Fatalf("%s became %s %x, want one float16", text, in[0].DType, in[0].Data)
	}
	return binary.LittleEndian.Uint16(in[0].Data), nil
}

// TestFloat16FromJSONRoundsOnceFromTheText: a float16 input reads its
// JSON text through numtext, which rounds it once (numtext's own tests try
// the rest).
func TestFloat16FromJSONRoundsOnceFromTheText(t *testing.T) {
	c := halfModel(t, nil)
	tests := []struct {
		text string
		want uint16 // ignored when refused
		fits bool
	}{
		// The cases of numtext's tests that show the codec reads through
		// it: a plain number, one past the largest half, texts on either
		// side of a midpoint, the midpoint itself, and a huge exponent.
		{"1", 0x3c00, true}, {"-2", 0xc000, true}, {"65519.999999999999999", halfMax, true},
		{"65520", 0, false}, {"1e400", 0, false},
		{"1.0004882812500001", 0x3c01, true},
		{"1.00048828124999999", 0x3c00, true},
		{"1.00048828125", 0x3c00, true}, // the midpoint itself: to even
		{"0.1e10000000", 0, false},
	}
	for _, tt := range tests {
		name := tt.text
		if len(name) > 40 {
			name = name[:20] + "..." + name[len(name)-20:]
		}
		got, err := parseHalf(t, c, tt.text)
		switch {
		case !tt.fits && (err == nil || !strings.Contains(err.Error(), "which does not fit float16")):
			t.Errorf("%s: %#04x, %v; want refused as not fitting float16", name, got, err)
		case tt.fits && (err != nil || got != tt.want):
			t.Errorf("%s: %#04x, %v; want %#04x", name, got, err, tt.want)
		}
		if ref, ok := numtexttest.NearestHalf(tt.text); ok != tt.fits || ok && ref != tt.want {
			t.Errorf("%s: the reference rounds to %#04x (fits %v); the table says %#04x (fits %v)", name, ref, ok, tt.want, tt.fits)
		}
	}
}

func TestFloat16JSONOutputsReadBackExactly(t *testing.T) {
	c := halfModel(t, nil)
	var finite []byte
	for i := range 1 << 16 {
		if h := uint16(i); h&halfInf != halfInf {
			finite = binary.LittleEndian.AppendUint16(finite, h)
		}
	}
	n := int64(len(finite) / 2)
	out, err := onnxio.EncodeOutput(c.Signature(), []onnxio.Tensor{{DType: onnxio.Float16, Shape: []int64{n}, Data: finite}})
	if err != nil {
		t.Fatal(err)
	}
	text, err := c.AppendJSON(nil, out)
	if err != nil {
		t.Fatal(err)
	}
	item, _, err := c.FromJSON(text)
	if err != nil {
		t.Fatalf("the JSON of every finite half does not read back: %v", err)
	}
	for i, elem := range strings.Split(strings.Trim(string(text), "[]"), ",") {
		h := binary.LittleEndian.Uint16(finite[2*i:])
		if f, err := strconv.ParseFloat(elem, 32); err != nil || f != onnxio.Float16Frombits(h) {
			t.Fatalf("half %#04x is written as %s, which reads as the float32 %v (%v), not the half's %v", h, elem, f, err, onnxio.Float16Frombits(h))
		}
	}
	if back := decode(t, item)[0].Data; !bytes.Equal(back, finite) {
		for i := 0; i < len(back); i += 2 {
			if back[i] != finite[i] || back[i+1] != finite[i+1] {
				t.Fatalf("half %#04x is written as %s, which reads back as %#04x", binary.LittleEndian.Uint16(finite[i:]),
					strings.Split(strings.Trim(string(text), "[]"), ",")[i/2], binary.LittleEndian.Uint16(back[i:]))
			}
		}
	}
	for _, tt := range []struct {
		bits uint16
		want string
	}{
		{0x3c00, "1"}, {0x8000, "-0"}, {0x3e00, "1.5"}, {0x2e66, "0.099975586"}, {0x3555, "0.33325195"}, {halfMax, "65504"}, {0x7800, "32768"},
		{0x0001, "5.9604645e-08"}, {0x03ff, "6.097555e-05"}, {0x0400, "6.1035156e-05"}, {0x3c01, "1.0009766"}, {0x6400, "1024"}, {0xfbfe, "-65472"},
		{halfInf, "null"}, {0xfc00, "null"}, {0x7e00, "null"}, {0xfc01, "null"},
	} {
		out, err := onnxio.EncodeOutput(c.Signature(), []onnxio.Tensor{{DType: onnxio.Float16, Shape: []int64{1}, Data: binary.LittleEndian.AppendUint16(nil, tt.bits)}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.AppendJSON(nil, out); err != nil || string(got) != "["+tt.want+"]" {
			t.Errorf("%#04x is written as %s (%v), want [%s]", tt.bits, got, err, tt.want)
		}
	}
}

func TestFloat16FromMsgpack(t *testing.T) {
	c := halfModel(t, nil)
	raw := []byte{0x01, 0x7c, 0x00, 0xfc, 0x00, 0x80, 0xff, 0x7b} // a signalling NaN, -Inf, -0, 65504
	tests := []struct {
		name  string
		value any
		want  []byte
	}{
		{"tensor map, taken as it is", tensorMap("float16", []int{4}, raw), raw},
		{"numbers of every msgpack kind", []any{float32(1.5), -2.5, int8(-3), uint16(65504), uint64(0)}, []byte{0x00, 0x3e, 0x00, 0xc1, 0x00, 0xc2, 0xff, 0x7b, 0, 0}},
		{"non-finite floats", []any{math.Inf(1), float32(math.Inf(-1))}, []byte{0x00, 0x7c, 0x00, 0xfc}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item, _, err := c.FromMsgpack(mustMsgpack(t, tt.value))
			if err != nil {
				t.Fatal(err)
			}
			if got := decode(t, item)[0]; got.DType != onnxio.Float16 || !bytes.Equal(got.Data, tt.want) {
				t.Fatalf("got %s %x, want float16 %x", got.DType, got.Data, tt.want)
			}
		})
	}
	for _, bad := range []struct {
		value any
		want  string
	}{
		{[]any{uint32(65520)}, "got 65520 at [0], which does not fit float16"},
		{[]any{1e10}, "got 1e+10 at [0], which does not fit float16"},
		{[]any{true}, "got true at [0], which does not fit float16"},
		{tensorMap("float16", []int{2}, []byte{1, 2, 3}), "data has 3 bytes, but shape [2] of float16 needs 4"},
		{tensorMap("float32", []int{1}, f32bytes(1)), "want float16 [n]; got dtype float32"},
	} {
		if _, _, err := c.FromMsgpack(mustMsgpack(t, bad.value)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: error %v, want one containing %q", bad.value, err, bad.want)
		}
	}

	out, err := onnxio.EncodeOutput(c.Signature(), []onnxio.Tensor{{DType: onnxio.Float16, Shape: []int64{4}, Data: raw}})
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		DType string  `msgpack:"dtype"`
		Shape []int64 `msgpack:"shape"`
		Data  []byte  `msgpack:"data"`
	}
	if err := msgpack.Unmarshal(out, &answer); err != nil || answer.DType != "float16" || fmt.Sprint(answer.Shape) != "[4]" || !bytes.Equal(answer.Data, raw) {
		t.Fatalf("msgpack output %+v (%v), want the float16 tensor map as it was", answer, err)
	}
	if text, err := c.AppendJSON(nil, out); err != nil || string(text) != "[null,null,-0,65504]" {
		t.Fatalf("JSON output %s (%v), want [null,null,-0,65504]", text, err)
	}
}

func TestFloat16Padding(t *testing.T) {
	c := halfModel(t, map[string]float64{"x": 1.5})
	if _, value, ok := c.Padded(0); !ok || !bytes.Equal(value, []byte{0x00, 0x3e}) {
		t.Fatalf("padding value %x (%v), want the half 1.5 (00 3e)", value, ok)
	}
	if _, err := onnxio.NewCodec(c.Signature(), map[string]float64{"x": 1e6}); err == nil || !strings.Contains(err.Error(), "does not fit input \"x\"'s dtype float16") {
		t.Fatalf("padding with 1e6: %v", err)
	}
}

// TestIntegersFromJSONAreReadFromTheText: an integer input takes a number
// written with a fraction or an exponent when its text is a whole number,
// read digit by digit. Through a float64 first, 9007199254740993.0 would
// reach the model as ...992, 1.0000000000000001 and 1e-400 would pass as
// whole, and the largest int64 would be refused as too large.
func TestIntegersFromJSONAreReadFromTheText(t *testing.T) {
	var (
		i64     = onnxpb.TensorProto_INT64
		u64     = onnxpb.TensorProto_UINT64
		i8      = onnxpb.TensorProto_INT8
		boolean = onnxpb.TensorProto_BOOL
	)
	tests := []struct {
		elem onnxpb.TensorProto_DataType
		text string
		want []byte // nil when the text is refused as not fitting
	}{
		{i64, "9007199254740993.0", i64bytes(9007199254740993)},
		{i64, "9223372036854775807.0", i64bytes(math.MaxInt64)},
		{i64, "-9223372036854775808e0", i64bytes(math.MinInt64)},
		{i64, "922337203685477580.70E+1", i64bytes(math.MaxInt64)},
		{i64, "1.5e1", i64bytes(15)},
		{i64, "-0.0", i64bytes(0)},
		{i64, "0.000e99999999999999999999", i64bytes(0)},
		{i64, "9007199254740993.5", nil},
		{i64, "1.0000000000000001", nil},
		{i64, "1e-400", nil},
		{i64, "9223372036854775808.0", nil},
		{i64, "1e19", nil},
		{i64, "1e400", nil},
		{u64, "18446744073709551615.0", binary.LittleEndian.AppendUint64(nil, math.MaxUint64)},
		{u64, "1.8446744073709551616e19", nil},
		{u64, "-1.0", nil},
		{i8, "-128.00", []byte{0x80}},
		{i8, "1.28e2", nil},
		{boolean, "1.0", []byte{1}},
		{boolean, "0e5", []byte{0}},
		{boolean, "2.0", nil},
		{boolean, "0.5", nil},
	}
	for _, tt := range tests {
		dtype := onnxio.DType(tt.elem)
		item, _, err := vectorModel(t, tt.elem, nil).FromJSON([]byte("[" + tt.text + "]"))
		switch {
		case tt.want == nil:
			if want := "got " + tt.text + " at [0], which does not fit " + dtype.String(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s %s: error %v, want one containing %q", dtype, tt.text, err, want)
			}
		case err != nil:
			t.Errorf("%s %s: %v", dtype, tt.text, err)
		default:
			if got := decode(t, item)[0].Data; !bytes.Equal(got, tt.want) {
				t.Errorf("%s %s: became %x, want %x", dtype, tt.text, got, tt.want)
			}
		}
	}
}

// TestDtypesCodecCarriesEveryDtype sends the extremes of every dtype to the
// dtypes model, in JSON and as msgpack tensor maps, and renders them back.
func TestDtypesCodecCarriesEveryDtype(t *testing.T) {
	c := codec(t, onnxtest.Dtypes, nil)
	cases := onnxtest.DtypeCases()
	var fields, answers []string
	want := make([]onnxio.Tensor, len(cases))
	maps := map[string]any{}
	for i, dc := range cases {
		texts := make([]string, len(dc.Values))
		answer := make([]string, len(dc.Values))
		for k, v := range dc.Values {
			texts[k], answer[k] = v.JSON, v.Answer
		}
		fields = append(fields, fmt.Sprintf("%q: [%s]", dc.Input, strings.Join(texts, ", ")))
		answers = append(answers, fmt.Sprintf("%q:[%s]", dc.Output, strings.Join(answer, ",")))
		dtype, err := onnxio.ParseDType(dc.DType)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = onnxio.Tensor{DType: dtype, Shape: []int64{int64(len(dc.Values))}, Data: dc.Bytes(dc.Values)}
		maps[dc.Input] = tensorMap(dc.DType, []int{len(dc.Values)}, dc.Bytes(dc.Values))
	}
	item, key, err := c.FromJSON([]byte("{" + strings.Join(fields, ", ") + "}"))
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, decode(t, item), want)
	if key != "12;6;6;4;3;3;3;2;2;2;2;2" {
		t.Errorf("key %q, want each input's length", key)
	}
	item, _, err = c.FromMsgpack(mustMsgpack(t, maps))
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, decode(t, item), want)

	out, err := onnxio.EncodeOutput(c.Signature(), want)
	if err != nil {
		t.Fatal(err)
	}
	text, err := c.AppendJSON(nil, out)
	if wantText := "{" + strings.Join(answers, ",") + "}"; err != nil || string(text) != wantText {
		t.Fatalf("JSON outputs\n got %s (%v)\nwant %s", text, err, wantText)
	}
	if !json.Valid(text) {
		t.Fatalf("invalid JSON %s", text)
	}
}

// FuzzFloat16FromJSON holds the codec's rounding of JSON numbers to halves
// against numtexttest.NearestHalf's exact one.
func FuzzFloat16FromJSON(f *testing.F) {
	for _, seed := range []string{"1", "-0", "0.1", "65504", "65519.999999999999999", "65520", "1.0004882812500001",
		"2.98023223876953125e-8", "6.1e-5", "1e-400", "-3.5E+2", "123456789012345678901234567890e-30", "0.1e10000000", "100048828125e-11"} {
		f.Add(seed)
	}
	c := halfModel(f, nil)
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 64 || !numtexttest.IsJSONNumber(text) {
			return // bounded: the reference's exact arithmetic grows with the exponent
		}
		got, err := parseHalf(t, c, text)
		want, fits := numtexttest.NearestHalf(text)
		switch {
		case !fits && err == nil:
			t.Fatalf("%s: accepted as %#04x; it rounds to infinity", text, got)
		case fits && (err != nil || got != want):
			t.Fatalf("%s: %#04x (%v), want %#04x", text, got, err, want)
		}
	})
}
