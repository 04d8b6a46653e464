package httpapi

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestGenericFromJSONEncodings(t *testing.T) {
	tests := []struct {
		json string
		hex  string // the exact msgpack bytes
	}{
		{`0`, "00"},
		{`127`, "7f"},
		{`128`, "cc80"},
		{`-1`, "ff"},
		{`-32`, "e0"},
		{`-33`, "d0df"},
		{`-0`, "00"},
		{`200`, "ccc8"},
		{`65535`, "cdffff"},
		{`70000`, "ce00011170"},
		{`4294967296`, "cf0000000100000000"},
		{`9223372036854775807`, "cf7fffffffffffffff"},
		{`-200`, "d1ff38"},
		{`-70000`, "d2fffeee90"},
		{`-9223372036854775808`, "d38000000000000000"},
		{`9223372036854775808`, "cb43e0000000000000"}, // past int64: a float
		{`1.5`, "cb3ff8000000000000"},
		{`1.0`, "cb3ff0000000000000"},
		{`1e2`, "cb4059000000000000"},
		{`-2.5E-3`, "cbbf647ae147ae147b"},
		{`true`, "c3"},
		{`false`, "c2"},
		{`null`, "c0"},
		{`""`, "a0"},
		{`"abc"`, "a3616263"},
		{`"\u00e9"`, "a2c3a9"},
		{`"\ud83d\ude00"`, "a4f09f9880"},
		{`"\ud800"`, "a3efbfbd"},         // lone surrogate
		{`"\ud800x"`, "a4efbfbd78"},      // lone surrogate, then a letter
		{`"\ud800\u0041"`, "a4efbfbd41"}, // high surrogate, then not a low one
		{`"a\"\\\/\b\f\n\r\t"`, "a961225c2f080c0a0d09"},
		{"\"\xff\"", "a3efbfbd"}, // invalid UTF-8
		{`[]`, "90"},
		{`[1, [2, []]]`, "920192" + "0290"},
		{`{}`, "80"},
		{`{"b": 1, "a": [true]}`, "82a16201a16191c3"}, // key order kept
		{" \t\n\r[ 1 , 2 ]\n", "920102"},
	}
	for _, tt := range tests {
		got, key, err := Generic{}.FromJSON(json.RawMessage(tt.json))
		if err != nil {
			t.Errorf("FromJSON(%s): %v", tt.json, err)
			continue
		}
		if hex.EncodeToString(got) != tt.hex {
			t.Errorf("FromJSON(%s) = %x, want %s", tt.json, got, tt.hex)
		}
		if key != "" {
			t.Errorf("FromJSON(%s) key %q, want none", tt.json, key)
		}
	}
}

func TestGenericFromJSONHeaderSizes(t *testing.T) {
	for _, n := range []int{0, 15, 16, 31, 32, 255, 256, 65535, 65536} {
		str := strings.Repeat("x", n)
		arr := "[" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "]"
		var obj strings.Builder
		obj.WriteString("{")
		for i := range n {
			if i > 0 {
				obj.WriteString(",")
			}
			fmt.Fprintf(&obj, `"k%d":%d`, i, i%100)
		}
		obj.WriteString("}")
		for _, in := range []string{strconv.Quote(str), arr, obj.String(), `"\n` + str + `"`} {
			got, _, err := Generic{}.FromJSON(json.RawMessage(in))
			if err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			assertSameValue(t, []byte(in), got)
		}
	}
}

// assertSameValue checks the msgpack item holds the value of the JSON text.
func assertSameValue(t testing.TB, jsonText, item []byte) {
	t.Helper()
	want, err := referenceJSON(jsonText)
	if err != nil {
		t.Fatalf("reference decode of %.80s: %v", jsonText, err)
	}
	var got any
	if err := msgpack.Unmarshal(item, &got); err != nil {
		t.Fatalf("item %x is not msgpack: %v", item, err)
	}
	if got = normalize(got); !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON %.80s became %#v, want %#v", jsonText, got, want)
	}
}

// referenceJSON decodes JSON the way encoding/json does, with numbers as
// int64 when they fit and float64 otherwise; out of range is an error.
func referenceJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more after the value: %v", err)
	}
	return jsonNumbers(v)
}

func jsonNumbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, err
		}
		return f, nil
	case []any:
		for i := range x {
			var err error
			if x[i], err = jsonNumbers(x[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range x {
			var err error
			if x[k], err = jsonNumbers(x[k]); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// normalize turns the integer types msgpack decodes into int64.
func normalize(v any) any {
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		if x > math.MaxInt64 {
			return x
		}
		return int64(x)
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalize(x[k])
		}
	}
	return v
}

func TestGenericFromJSONRefusesInvalid(t *testing.T) {
	tests := []struct {
		json string
		want string
	}{
		{``, "unexpected end of JSON"},
		{`   `, "unexpected end of JSON"},
		{`{"a":}`, `offset 5: invalid character '}' looking for a value`},
		{`[1,]`, `invalid character ']' looking for a value`},
		{`[1 2]`, `invalid character '2' after an array element`},
		{`{"a" 1}`, `invalid character '1' after an object key`},
		{`{"a":1 "b":2}`, `after an object value`},
		{`{1:2}`, `looking for an object key`},
		{`01`, `invalid character '1' after the top-level value`},
		{`1 2`, `after the top-level value`},
		{`1.`, `after a decimal point`},
		{`1.e3`, `after a decimal point`},
		{`1e`, `in an exponent`},
		{`1e+`, `in an exponent`},
		{`-`, `in a number`},
		{`-a`, `in a number`},
		{`+1`, `looking for a value`},
		{`.5`, `looking for a value`},
		{`"abc`, `unexpected end of JSON in a string`},
		{`"\x"`, `in a string escape`},
		{`"\u12"`, `in a \u escape`},
		{`"\u12g4"`, `in a \u escape`},
		{"\"a\nb\"", `in a string`},
		{`tru`, `in literal true`},
		{`nul`, `in literal null`},
		{`fals`, `in literal false`},
		{`True`, `looking for a value`},
		{`1e400`, `number 1e400 is out of range`},
		{`-1e400`, `out of range`},
		{strings.Repeat("[", maxNesting+1) + strings.Repeat("]", maxNesting+1), "nesting deeper than 10000"},
		{strings.Repeat(`{"a":`, maxNesting+1) + "1" + strings.Repeat("}", maxNesting+1), "nesting deeper than 10000"},
	}
	for _, tt := range tests {
		_, _, err := Generic{}.FromJSON(json.RawMessage(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "not valid JSON: ") {
			t.Errorf("FromJSON(%.40q) error %v, want one containing %q", tt.json, err, tt.want)
		}
		if json.Valid([]byte(tt.json)) && !strings.Contains(tt.want, "out of range") {
			t.Errorf("test case %q is valid JSON", tt.json)
		}
	}
	// The deepest nesting encoding/json allows still works.
	deep := strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting)
	if _, _, err := (Generic{}).FromJSON(json.RawMessage(deep)); err != nil {
		t.Errorf("%d nested arrays: %v", maxNesting, err)
	}
}

func TestGenericFromMsgpackCopies(t *testing.T) {
	raw := msgpack.RawMessage{0xa1, 'x'}
	item, key, err := Generic{}.FromMsgpack(raw)
	if err != nil || key != "" || !bytes.Equal(item, raw) {
		t.Fatalf("FromMsgpack = %x %q %v", item, key, err)
	}
	raw[1] = 'y'
	if item[1] != 'x' {
		t.Error("the item aliases the raw bytes, which the caller reuses")
	}
}

func TestGenericAppendJSON(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	tests := []struct {
		name  string
		value any    // encoded with msgpack.Marshal, unless raw is set
		raw   string // hex msgpack
		want  string
	}{
		{name: "nil", value: nil, want: `null`},
		{name: "bools", value: []bool{true, false}, want: `[true,false]`},
		{name: "fixint", value: int8(5), want: `5`},
		{name: "negative fixint", value: int8(-5), want: `-5`},
		{name: "int8", raw: "d080", want: `-128`},
		{name: "int16", raw: "d1ff38", want: `-200`},
		{name: "int32", raw: "d2fffeee90", want: `-70000`},
		{name: "int64", value: int64(math.MinInt64), want: `-9223372036854775808`},
		{name: "uint8", raw: "ccff", want: `255`},
		{name: "uint16", raw: "cdffff", want: `65535`},
		{name: "uint32", raw: "ceffffffff", want: `4294967295`},
		{name: "uint64", value: uint64(math.MaxUint64), want: `18446744073709551615`},
		{name: "float32", value: float32(0.1), want: `0.1`},
		{name: "float64", value: 0.1, want: `0.1`},
		{name: "whole float", value: 3.0, want: `3`},
		{name: "big float", value: 1e21, want: `1e+21`},
		{name: "below big", value: 1e20, want: `100000000000000000000`},
		{name: "small float", value: 1e-7, want: `1e-7`},
		{name: "not small", value: 1e-6, want: `0.000001`},
		{name: "float32 small", value: float32(1e-7), want: `1e-7`},
		{name: "negative zero", value: math.Copysign(0, -1), want: `-0`},
		{name: "string", value: "héllo <&>", want: `"héllo <&>"`},
		{name: "escapes", value: "\"\\\n\r\t\x01\x1f", want: `"\"\\\n\r\t\u0001\u001f"`},
		{name: "invalid UTF-8", raw: "a3" + "61ff62", want: `"a\ufffdb"`},
		{name: "str8", value: strings.Repeat("y", 40), want: `"` + strings.Repeat("y", 40) + `"`},
		{name: "str16", value: strings.Repeat("z", 300), want: `"` + strings.Repeat("z", 300) + `"`},
		{name: "bin", value: []byte{0, 1, 2, 250}, want: `"AAEC+g=="`},
		{name: "timestamp 96", value: ts, want: `"2024-05-06T07:08:09.123456789Z"`},
		{name: "timestamp 32", raw: "d6ff" + "00000001", want: `"1970-01-01T00:00:01Z"`},
		{name: "timestamp 64", raw: "d7ff" + "0000000400000002", want: `"1970-01-01T00:00:02.000000001Z"`},
		{name: "array16", value: make([]int8, 20), want: `[` + strings.TrimSuffix(strings.Repeat("0,", 20), ",") + `]`},
		{name: "map", value: map[string]any{"a": []any{1.5, "x", nil}}, want: `{"a":[1.5,"x",null]}`},
		{name: "map keys in order", raw: "82" + "a162" + "01" + "a161" + "02", want: `{"b":1,"a":2}`},
		{name: "scalar keys", raw: "85" + "0101" + "c302" + "c003" + "cb3ff800000000000004" + "c4016105", want: `{"1":1,"true":2,"null":3,"1.5":4,"YQ==":5}`},
		{name: "map16", raw: "de0001" + "a16b" + "c0", want: `{"k":null}`},
		{name: "array32", raw: "dd00000001" + "c3", want: `[true]`},
		{name: "map32", raw: "df00000001" + "a16b" + "c2", want: `{"k":false}`},
		{name: "bin16", raw: "c50001" + "ff", want: `"/w=="`},
		{name: "str32", raw: "db00000001" + "41", want: `"A"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := decodeHex(t, tt.raw)
			if tt.raw == "" {
				data = mustMsgpack(t, tt.value)
			}
			got, err := Generic{}.AppendJSON([]byte("prefix:"), data)
			if err != nil {
				t.Fatalf("AppendJSON(%x): %v", data, err)
			}
			if string(got) != "prefix:"+tt.want {
				t.Errorf("AppendJSON(%x) = %s, want prefix:%s", data, got, tt.want)
			}
			if !json.Valid(got[len("prefix:"):]) {
				t.Errorf("AppendJSON(%x) = %s is not valid JSON", data, got)
			}
		})
	}
}

func decodeHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGenericAppendJSONRefuses(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want string
	}{
		{"empty", "", "truncated: want a value"},
		{"never used code", "c1", "invalid msgpack code 0xc1"},
		{"NaN", "cb7ff8000000000001", "float NaN has no JSON form"},
		{"Inf", "cb7ff0000000000000", "float +Inf has no JSON form"},
		{"float32 -Inf", "caff800000", "float -Inf has no JSON form"},
		{"unknown extension", "d40501", "extension type 5 has no JSON form"},
		{"odd timestamp", "c703ff010203", "timestamp of 3 bytes"},
		{"truncated string", "a361", "truncated"},
		{"truncated str8", "d9", "truncated"},
		{"truncated int", "cd01", "truncated"},
		{"truncated array", "9301", "truncated"},
		{"lying array32", "ddffffffff", "4294967295 elements announced"},
		{"lying map16", "deffff", "65535 elements announced"},
		{"trailing bytes", "0102", "1 bytes after the value"},
		{"array key", "81" + "9101" + "01", "a map key that is an array or a map"},
		{"map key", "81" + "80" + "01", "a map key that is an array or a map"},
		{"missing key", "81", "truncated"},
		{"bad value in map", "81a161c1", "invalid msgpack code 0xc1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			got, err := Generic{}.AppendJSON(dst, decodeHex(t, tt.hex))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
			if string(got) != "keep" {
				t.Errorf("on error dst became %q, want it unchanged", got)
			}
		})
	}
	deep := append(bytes.Repeat([]byte{0x91}, maxNesting+1), 0x01)
	if _, err := (Generic{}).AppendJSON(nil, deep); err == nil || !strings.Contains(err.Error(), "nesting deeper") {
		t.Errorf("%d nested arrays: %v", maxNesting+1, err)
	}
}

func TestGenericRoundTrip(t *testing.T) {
	inputs := []string{
		`{"text": "I love [MASK].", "scores": [0.25, -1, 1e-9, 123456789012], "ok": true, "none": null, "nested": {"a": [[]], "b": {}}}`,
		`"\u2028 \ud83d\ude00 \"quoted\" \\ / \b\f\n\r\t"`,
		`[1.5, 2, -3, 9223372036854775807, -9223372036854775808, 18446744073709551616]`,
	}
	for _, in := range inputs {
		item, _, err := Generic{}.FromJSON(json.RawMessage(in))
		if err != nil {
			t.Fatalf("FromJSON(%s): %v", in, err)
		}
		out, err := Generic{}.AppendJSON(nil, item)
		if err != nil {
			t.Fatalf("AppendJSON(%x): %v", item, err)
		}
		want, _ := referenceJSON([]byte(in))
		got, err := referenceJSON(out)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("round trip of %s gave %s (%v)", in, out, err)
		}
	}
}
