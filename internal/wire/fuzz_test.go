package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/wire/wiretest"
)

var jsonSeeds = wiretest.JSONSeeds

// FuzzJSONToMsgpack checks the transcoder against encoding/json: it takes
// exactly the texts encoding/json takes whose strings are text (see
// isText), and keeps their values, integers that fit a uint64 exact.
func FuzzJSONToMsgpack(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{`"\ud800"`, `["\ud83d\ude00", "\udc00x"]`, `{"\\ud800": 18446744073709551615}`, `-9223372036854775809`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		item, err := JSONToMsgpack(nil, data)
		want, refErr := wiretest.ReferenceJSON(data)
		if refErr == nil && !isText(data) {
			refErr = errors.New("a string is not text")
		}
		if (err == nil) != (refErr == nil) {
			t.Fatalf("JSONToMsgpack(%q) error %v, encoding/json error %v", data, err, refErr)
		}
		if err != nil {
			return
		}
		var got any
		if err := msgpack.Unmarshal(item, &got); err != nil {
			t.Fatalf("JSONToMsgpack(%q) = %x, not msgpack: %v", data, item, err)
		}
		if got = normalize(got); !reflect.DeepEqual(got, want) {
			t.Fatalf("JSONToMsgpack(%q) holds %#v, want %#v", data, got, want)
		}
	})
}

// FuzzMsgpackToJSON checks that whatever msgpack the transcoder accepts
// becomes valid JSON that says what the msgpack library reads there.
func FuzzMsgpackToJSON(f *testing.F) {
	for _, v := range []any{
		nil, "héllo", []byte{1, 2}, 1.5, float32(2.5), int64(-1 << 40), uint64(1 << 63),
		map[string]any{"a": []any{1, "b", nil, true}}, time.Unix(1, 2),
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0x82, 0x01, 0x02, 0xc0, 0xc3})
	f.Add([]byte{0x92, 0xa2, 'a', 0xff, 0x81, 0xa1, 0xfe, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := MsgpackToJSON(nil, data)
		if err != nil {
			return
		}
		got, err := wiretest.ReferenceJSON(out)
		if err != nil {
			t.Fatalf("MsgpackToJSON(%x) = %s, not valid JSON: %v", data, out, err)
		}
		v, ok := referenceMsgpack(data)
		if !ok {
			return
		}
		if !allText(v) {
			t.Fatalf("MsgpackToJSON(%x) = %s, from a str that is not UTF-8", data, out)
		}
		v, ok = stringKeyed(v)
		if !ok {
			return
		}
		ref, err := json.Marshal(v)
		if err != nil {
			return
		}
		want, err := wiretest.ReferenceJSON(ref)
		if err != nil {
			t.Fatalf("reference JSON %s: %v", ref, err)
		}
		if !sameJSON(got, want) {
			t.Fatalf("MsgpackToJSON(%x) = %s, encoding/json says %s", data, out, ref)
		}
	})
}

// referenceMsgpack decodes data with the msgpack library, maps as
// map[any]any. It reports false where the library refuses data, or panics,
// as it does on a map keyed by bytes, which a Go map cannot hold.
func referenceMsgpack(data []byte) (v any, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
	return v, dec.Decode(&v) == nil
}

// allText reports whether every string in v, map keys included, is
// valid UTF-8.
func allText(v any) bool {
	switch x := v.(type) {
	case string:
		return utf8.ValidString(x)
	case []any:
		for _, e := range x {
			if !allText(e) {
				return false
			}
		}
	case map[any]any:
		for k, e := range x {
			if !allText(k) || !allText(e) {
				return false
			}
		}
	}
	return true
}

// stringKeyed turns maps whose keys are all strings into map[string]any. It
// reports false for values encoding/json renders differently from
// MsgpackToJSON: maps with other keys, timestamps (rendered in local time).
func stringKeyed(v any) (any, bool) {
	switch x := v.(type) {
	case time.Time:
		return nil, false
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, false
			}
			if m[ks], ok = stringKeyed(e); !ok {
				return nil, false
			}
		}
		return m, true
	case []any:
		for i := range x {
			var ok bool
			if x[i], ok = stringKeyed(x[i]); !ok {
				return nil, false
			}
		}
	}
	return v, true
}

// sameJSON compares decoded JSON, numbers by value.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		}
		return false
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y || math.IsNaN(x) && math.IsNaN(y)
		}
		return false
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k := range x {
			if !sameJSON(x[k], y[k]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// FuzzSkipMsgpack checks the walker's idea of where a msgpack value ends
// against the msgpack library's, and MsgpackReader.Skip against both.
func FuzzSkipMsgpack(f *testing.F) {
	for _, v := range []any{
		nil, "x", []byte{1}, 1.5, float32(1), int64(-1 << 40), uint64(1 << 63), time.Unix(1, 2),
		map[string]any{"a": []any{1, "b", nil, true, map[string]any{}}}, make([]int, 20),
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(append(b, 0x01))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := SkipMsgpack(data, MaxDepth)
		rd := bytes.NewReader(data)
		refErr := msgpack.NewDecoder(rd).Skip()
		refEnd := len(data) - rd.Len()
		switch {
		case err == nil && refErr != nil:
			t.Fatalf("SkipMsgpack(%x) accepted %d bytes; the library refuses: %v", data, n, refErr)
		case err == nil && n != refEnd:
			t.Fatalf("SkipMsgpack(%x) ends at %d, the library at %d", data, n, refEnd)
		case err != nil && refErr == nil && !strings.Contains(err.Error(), "nesting") && !errors.As(err, new(*LengthError)):
			t.Fatalf("SkipMsgpack(%x): %v; the library skips %d bytes", data, err, refEnd)
		}
		r := NewMsgpackReader(data)
		defer r.Release()
		raw, rerr := r.Skip(0)
		if (rerr == nil) != (err == nil) || rerr == nil && (len(raw) != n || r.Len() != len(data)-n) {
			t.Fatalf("MsgpackReader.Skip(%x) = %d bytes, %v; SkipMsgpack = %d, %v", data, len(raw), rerr, n, err)
		}
		if rerr != nil && rerr.Error() != err.Error() {
			t.Fatalf("MsgpackReader.Skip(%x): %v; SkipMsgpack: %v", data, rerr, err)
		}
	})
}
