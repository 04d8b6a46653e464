package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/wire/wiretest"
)

var mustMsgpack = wiretest.MustMsgpack

func TestMsgpackToJSON(t *testing.T) {
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
		// JSON has no number for these: null, as ONNX outputs have.
		{name: "NaN", raw: "cb7ff8000000000001", want: `null`},
		{name: "Inf", raw: "cb7ff0000000000000", want: `null`},
		{name: "float32 -Inf", raw: "caff800000", want: `null`},
		// As keys, which are strings, they are named: no two become one.
		{name: "NaN and infinite keys", raw: "84" + "cb7ff8000000000001" + "01" + "cb7ff0000000000000" + "02" + "caff800000" + "03" + "a46e756c6c" + "04", want: `{"NaN":1,"+Inf":2,"-Inf":3,"null":4}`},
		{name: "string", value: "héllo <&>", want: `"héllo <&>"`},
		{name: "escapes", value: "\"\\\n\r\t\x01\x1f", want: `"\"\\\n\r\t\u0001\u001f"`},
		{name: "U+FFFD", raw: "a3" + "efbfbd", want: "\"\ufffd\""}, // text like any other
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
			got, err := MsgpackToJSON([]byte("prefix:"), data)
			if err != nil {
				t.Fatalf("MsgpackToJSON(%x): %v", data, err)
			}
			if string(got) != "prefix:"+tt.want {
				t.Errorf("MsgpackToJSON(%x) = %s, want prefix:%s", data, got, tt.want)
			}
			if !json.Valid(got[len("prefix:"):]) {
				t.Errorf("MsgpackToJSON(%x) = %s is not valid JSON", data, got)
			}
		})
	}
}

// offsetOf returns the offset an *Error or a *LengthError names.
func offsetOf(err error) (int, bool) {
	var e *Error
	var le *LengthError
	switch {
	case errors.As(err, &e):
		return e.Offset, true
	case errors.As(err, &le):
		return le.Offset, true
	}
	return 0, false
}

func decodeHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMsgpackToJSONRefuses(t *testing.T) {
	tests := []struct {
		name   string
		hex    string
		want   string
		offset int // where the problem is found
	}{
		{"empty", "", "truncated: want a value", 0},
		{"never used code", "c1", "invalid msgpack code 0xc1", 0},
		{"unknown extension", "d40501", "extension type 5 has no JSON form", 3},
		{"odd timestamp", "c703ff010203", "timestamp of 3 bytes", 6},
		{"truncated string", "a361", "truncated", 1},
		{"truncated str8", "d9", "truncated", 1},
		{"truncated int", "cd01", "truncated", 1},
		{"truncated array", "9301", "truncated", 1},
		{"lying array32", "ddffffffff", "4294967295 elements announced", 5},
		{"lying map16", "deffff", "65535 elements announced", 3},
		{"trailing bytes", "0102", "1 bytes after the value", 1},
		{"array key", "81" + "9101" + "01", "a map key that is an array or a map", 1},
		{"map key", "81" + "80" + "01", "a map key that is an array or a map", 1},
		{"missing key", "81", "truncated", 1},
		{"bad value in map", "81a161c1", "invalid msgpack code 0xc1", 3},
		// A str holds text: bytes that are not are refused, not changed.
		{"str not UTF-8", "a3" + "61ff62", "a str that is not valid UTF-8 (byte 0xff) has no JSON form", 2},
		{"str8 cut short", "d902" + "61c3", "not valid UTF-8 (byte 0xc3)", 3},
		{"str in an array", "92" + "01" + "a3" + "edb080", "not valid UTF-8 (byte 0xed)", 3},
		{"str as a map key", "81" + "a1" + "fe" + "01", "not valid UTF-8 (byte 0xfe)", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := MsgpackToJSON(nil, decodeHex(t, tt.hex))
			offset, ok := offsetOf(err)
			if !ok || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want an *Error or *LengthError containing %q", err, tt.want)
			}
			if offset != tt.offset {
				t.Errorf("error %v at offset %d, want %d", err, offset, tt.offset)
			}
		})
	}
	deep := append(bytes.Repeat([]byte{0x91}, MaxDepth+1), 0x01)
	if _, err := MsgpackToJSON(nil, deep); err == nil || !strings.Contains(err.Error(), "nesting deeper") {
		t.Errorf("%d nested arrays: %v", MaxDepth+1, err)
	}
}

func TestRoundTrip(t *testing.T) {
	inputs := []string{
		`{"text": "I love [MASK].", "scores": [0.25, -1, 1e-9, 123456789012], "ok": true, "none": null, "nested": {"a": [[]], "b": {}}}`,
		`"\u2028 \ud83d\ude00 \"quoted\" \\ / \b\f\n\r\t"`,
		`[1.5, 2, -3, 9223372036854775807, -9223372036854775808, 18446744073709551616]`,
	}
	for _, in := range inputs {
		item, err := JSONToMsgpack(nil, []byte(in))
		if err != nil {
			t.Fatalf("JSONToMsgpack(%s): %v", in, err)
		}
		out, err := MsgpackToJSON(nil, item)
		if err != nil {
			t.Fatalf("MsgpackToJSON(%x): %v", item, err)
		}
		want, _ := wiretest.ReferenceJSON([]byte(in))
		got, err := wiretest.ReferenceJSON(out)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("round trip of %s gave %s (%v)", in, out, err)
		}
	}
}
