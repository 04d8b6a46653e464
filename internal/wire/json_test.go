package wire

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/wire/wiretest"
)

func TestJSONToMsgpackEncodings(t *testing.T) {
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
		{`9223372036854775808`, "cf8000000000000000"}, // past int64: a uint64, exact
		{`9223372036854775809`, "cf8000000000000001"},
		{`18446744073709551615`, "cfffffffffffffffff"},
		{`18446744073709551616`, "cb43f0000000000000"}, // past uint64: a float
		{`-9223372036854775809`, "cbc3e0000000000000"}, // below int64: a float
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
		{`"\uD83D\uDE00"`, "a4f09f9880"},
		{`"\ufffd"`, "a3efbfbd"},         // U+FFFD sent as such is text like any other
		{"\"\xef\xbf\xbd\"", "a3efbfbd"}, // the same in UTF-8
		{"\"\xc3\xa9\\n\"", "a3c3a90a"},  // UTF-8 beside an escape
		{`"a\"\\\/\b\f\n\r\t"`, "a961225c2f080c0a0d09"},
		{`[]`, "90"},
		{`[1, [2, []]]`, "920192" + "0290"},
		{`{}`, "80"},
		{`{"b": 1, "a": [true]}`, "82a16201a16191c3"}, // key order kept
		{" \t\n\r[ 1 , 2 ]\n", "920102"},
	}
	for _, tt := range tests {
		got, err := JSONToMsgpack([]byte("prefix:"), []byte(tt.json))
		if err != nil {
			t.Errorf("JSONToMsgpack(%s): %v", tt.json, err)
			continue
		}
		if hex.EncodeToString(got) != hex.EncodeToString([]byte("prefix:"))+tt.hex {
			t.Errorf("JSONToMsgpack(%s) = %x, want prefix: then %s", tt.json, got, tt.hex)
		}
	}
}

func TestJSONToMsgpackHeaderSizes(t *testing.T) {
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
			got, err := JSONToMsgpack(nil, []byte(in))
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
	want, err := wiretest.ReferenceJSON(jsonText)
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

func TestJSONToMsgpackRefusesInvalid(t *testing.T) {
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
		{"\xef\xbb\xbf[1]", `offset 0: the text starts with a byte-order mark (EF BB BF)`},
		{"\xff\xfe[\x001\x00]\x00", `offset 0: invalid byte 0xff looking for a value: not UTF-8`},
		{`[é]`, `invalid character 'é' looking for a value`},
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
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "nesting deeper than 10000"},
		{strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), "nesting deeper than 10000"},
	}
	for _, tt := range tests {
		_, err := JSONToMsgpack(nil, []byte(tt.json))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.want) || e.Error() != fmt.Sprintf("offset %d: %s", e.Offset, e.Problem) {
			t.Errorf("JSONToMsgpack(%.40q) error %v, want an *Error containing %q", tt.json, err, tt.want)
		}
		if json.Valid([]byte(tt.json)) && !strings.Contains(tt.want, "out of range") {
			t.Errorf("test case %q is valid JSON", tt.json)
		}
	}
	// The deepest nesting encoding/json allows still works.
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := JSONToMsgpack(nil, []byte(deep)); err != nil {
		t.Errorf("%d nested arrays: %v", MaxDepth, err)
	}
}

// TestJSONToMsgpackRefusesStringsThatAreNotText: a string encoding/json
// would change to U+FFFD (invalid UTF-8, a lone surrogate escape) is
// refused, saying what is wrong and where, rather than changed.
func TestJSONToMsgpackRefusesStringsThatAreNotText(t *testing.T) {
	const (
		notUTF8 = "string is not valid UTF-8: byte "
		lone    = "string has a lone surrogate escape "
	)
	tests := []struct {
		json   string
		want   string
		offset int // of the byte or escape at fault
	}{
		{"\"a\xffb\"", notUTF8 + "0xff", 2},
		{"\"ok\xc3\"", notUTF8 + "0xc3", 3},                        // cut short
		{"\"\xc0\xaf\"", notUTF8 + "0xc0", 1},                      // overlong
		{"\"\xed\xa0\x80\"", notUTF8 + "0xed", 1},                  // a surrogate in UTF-8
		{"\"\\n\xff\"", notUTF8 + "0xff", 3},                       // beside an escape
		{"[1, [\"\xfe\"]]", notUTF8 + "0xfe", 6},                   // nested
		{"{\"\xff\": 1}", notUTF8 + "0xff", 2},                     // a key
		{`"\ud800"`, lone + `\ud800, which is not valid UTF-8`, 1}, // high, alone
		{`"\udc00"`, lone + `\udc00`, 1},                           // low, alone
		{`"\uDC00"`, lone + `\uDC00`, 1},                           // as written
		{`"x\ud800y"`, lone + `\ud800`, 2},                         // high, then a letter
		{`"\ud800\u0041"`, lone + `\ud800`, 1},                     // high, then not a low one
		{`"\udc00\ud800"`, lone + `\udc00`, 1},                     // the pair reversed
		{`"\ud83d\ud83d\ude00"`, lone + `\ud83d`, 1},               // high, high, low
		{`"\ud83d\ude00\udc00"`, lone + `\udc00`, 13},              // a pair, then a low one
		{`{"k": ["\ud800"]}`, lone + `\ud800`, 8},
		{`{"\udfff": 1}`, lone + `\udfff`, 2},
	}
	for _, tt := range tests {
		item, err := JSONToMsgpack([]byte("prefix:"), []byte(tt.json))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Problem, tt.want) || e.Offset != tt.offset {
			t.Errorf("JSONToMsgpack(%q) = %x, %v; want an *Error at offset %d containing %q", tt.json, item, err, tt.offset, tt.want)
		}
		if !json.Valid([]byte(tt.json)) {
			t.Errorf("test case %q is not JSON encoding/json takes", tt.json)
		}
	}
}

// TestKeyRefusesKeysThatAreNotText: Key decodes a key, so it refuses one
// that is not text as JSONToMsgpack refuses a string.
func TestKeyRefusesKeysThatAreNotText(t *testing.T) {
	for _, text := range []string{"{\"a\xff\": 1}", `{"\ud800": 1}`, "{\"\\t\xff\": 1}"} {
		s := NewJSONScanner([]byte(text))
		s.Consume('{')
		if key, err := s.Key(); err == nil || !strings.Contains(err.Error(), "offset ") {
			t.Errorf("Key of %q = %q, %v; want an error", text, key, err)
		}
	}
	s := NewJSONScanner([]byte(`{"\ud83d\ude00\n": 1}`))
	s.Consume('{')
	if key, err := s.Key(); err != nil || string(key) != "😀\n" {
		t.Errorf("Key = %q, %v; want %q", key, err, "😀\n")
	}
}

// TestSkipTakesStringsThatAreNotText: Skip checks syntax alone; the caller
// that decodes what it skipped checks the text.
func TestSkipTakesStringsThatAreNotText(t *testing.T) {
	text := "[\"\xff\", \"\\ud800\"]"
	s := NewJSONScanner([]byte(text))
	if got, err := s.Skip(0); err != nil || string(got) != text {
		t.Errorf("Skip(%q) = %q, %v", text, got, err)
	}
}

// isText reports whether every string of data, which encoding/json takes,
// is valid UTF-8 without a lone surrogate escape: whether JSONToMsgpack
// takes it too. Outside its strings, valid JSON has neither bytes past
// ASCII nor backslashes.
func isText(data []byte) bool {
	if !utf8.Valid(data) {
		return false
	}
	escape := func(i int) rune { // the \uXXXX at data[i], else -1
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return -1
		}
		r, _ := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(r)
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r := escape(i)
		switch {
		case r < 0:
			i++ // past the escaped character
		case 0xdc00 <= r && r <= 0xdfff:
			return false
		case 0xd800 <= r && r <= 0xdbff:
			if low := escape(i + 6); low < 0xdc00 || low > 0xdfff {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}

func TestIsText(t *testing.T) {
	for text, want := range map[string]bool{
		`"a"`: true, `"\ud83d\ude00"`: true, `"\\ud800"`: true, `"\\\ud83d\ude00"`: true, `"\u0041\n"`: true,
		`"\ud800"`: false, `"\udc00"`: false, `"\\\ud800"`: false, `"\ud800\u0041"`: false, "\"\xff\"": false,
		`["\ud83d\ude00", "\ud83d"]`: false,
	} {
		if got := isText([]byte(text)); got != want {
			t.Errorf("isText(%q) = %v, want %v", text, got, want)
		}
	}
}

// A string that is not text is told apart from malformed JSON: its error
// is ErrNotText, a syntax error's is not.
func TestNotTextIsToldFromMalformed(t *testing.T) {
	for text, notText := range map[string]bool{
		`["\ud800"]`: true, "[\"a\xffb\"]": true, "{\"\xc3\": 1}": true,
		`["a"`: false, `[1,]`: false, `{"a" 1}`: false,
	} {
		_, err := JSONToMsgpack(nil, []byte(text))
		var e *Error
		if err == nil || !errors.As(err, &e) || errors.Is(err, ErrNotText) != notText {
			t.Errorf("JSONToMsgpack(%q): %v; want a *Error, ErrNotText %v", text, err, notText)
		}
	}
}
