package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

var jsonSeeds = []string{
	`{"inputs": ["a", 1, 2.5, true, null, {"k": [1, {}]}], "timeout_ms": 100}`,
	`{"inputs": []}`, `{}`, `[]`, `"\ud83d\ude00\u00e9\n"`, `-0.5e-3`, `1e400`,
	`{"a":1,"a":2}`, "\"\xff\"", `{"inputs": [1,]}`, ` 123 `, `[[[[]]]]`,
	`{"inputs": null, "timeout_ms": 1.5}`, `9223372036854775808`,
}

// FuzzGenericFromJSON checks the transcoder against encoding/json: it takes
// exactly the texts encoding/json takes, and keeps their values.
func FuzzGenericFromJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		item, _, err := Generic{}.FromJSON(json.RawMessage(data))
		want, refErr := referenceJSON(data)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("FromJSON(%q) error %v, encoding/json error %v", data, err, refErr)
		}
		if err != nil {
			return
		}
		var got any
		if err := msgpack.Unmarshal(item, &got); err != nil {
			t.Fatalf("FromJSON(%q) = %x, not msgpack: %v", data, item, err)
		}
		if got = normalize(got); !reflect.DeepEqual(got, want) {
			t.Fatalf("FromJSON(%q) holds %#v, want %#v", data, got, want)
		}
	})
}

// FuzzGenericAppendJSON checks that whatever msgpack the transcoder accepts
// becomes valid JSON that says what the msgpack library reads there.
func FuzzGenericAppendJSON(f *testing.F) {
	for _, v := range []any{
		nil, "héllo", []byte{1, 2}, 1.5, float32(2.5), int64(-1 << 40), uint64(1 << 63),
		map[string]any{"a": []any{1, "b", nil, true}}, time.Unix(1, 2),
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0x82, 0x01, 0x02, 0xc0, 0xc3})
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Generic{}.AppendJSON(nil, data)
		if err != nil {
			return
		}
		got, err := referenceJSON(out)
		if err != nil {
			t.Fatalf("AppendJSON(%x) = %s, not valid JSON: %v", data, out, err)
		}
		dec := msgpack.NewDecoder(bytes.NewReader(data))
		dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		v, ok := stringKeyed(v)
		if !ok {
			return
		}
		ref, err := json.Marshal(v)
		if err != nil {
			return
		}
		want, err := referenceJSON(ref)
		if err != nil {
			t.Fatalf("reference JSON %s: %v", ref, err)
		}
		if !sameJSON(got, want) {
			t.Fatalf("AppendJSON(%x) = %s, encoding/json says %s", data, out, ref)
		}
	})
}

// stringKeyed turns maps whose keys are all strings into map[string]any. It
// reports false for values encoding/json renders differently from
// AppendJSON: maps with other keys, timestamps (rendered in local time).
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

// FuzzPredictJSONBody checks the JSON body decoder against encoding/json:
// a body is answered 200 exactly when it is a JSON object whose "inputs" is
// a non-empty array of items and whose timeout_ms, if any, is a whole
// non-negative number; otherwise 400, never a panic.
func FuzzPredictJSONBody(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	h := New(Config{Backend: &fakeBackend{}})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := do(t, h, http.MethodPost, "/predict", "application/json", body)
		want := expectedJSONStatus(body)
		if rec.Code != want {
			t.Fatalf("body %q: status %d (%s), want %d", body, rec.Code, rec.Body.String(), want)
		}
		if rec.Code == http.StatusOK {
			var out struct{ Outputs []json.RawMessage }
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Outputs) == 0 {
				t.Fatalf("body %q: answer %s: %v", body, rec.Body.String(), err)
			}
		}
	})
}

// expectedJSONStatus decides with encoding/json what /predict must answer.
// Keys match exactly (encoding/json's struct fields would match any case),
// and each top-level member is looked at, duplicates included.
func expectedJSONStatus(body []byte) int {
	if !json.Valid(body) {
		return http.StatusBadRequest
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return http.StatusBadRequest
	}
	var inputs []json.RawMessage
	seenInputs := false
	for dec.More() {
		key, _ := dec.Token()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			panic(err) // valid JSON always decodes
		}
		switch key {
		case "inputs":
			if seenInputs || json.Unmarshal(raw, &inputs) != nil {
				return http.StatusBadRequest
			}
			seenInputs = true
		case "timeout_ms":
			var ms *int64
			if json.Unmarshal(raw, &ms) != nil || ms != nil && *ms < 0 {
				return http.StatusBadRequest
			}
		}
	}
	if len(inputs) == 0 {
		return http.StatusBadRequest
	}
	for _, raw := range inputs {
		if _, err := referenceJSON(raw); err != nil { // e.g. a number out of range
			return http.StatusBadRequest
		}
	}
	return http.StatusOK
}

// FuzzPredictMsgpackBody feeds arbitrary msgpack bodies: the answer is 200
// or 400, and a 200 echoes items that the msgpack library reads as the body's.
func FuzzPredictMsgpackBody(f *testing.F) {
	for _, v := range []any{
		map[string]any{"inputs": []any{"a", 1, []byte{2}}, "timeout_ms": 50},
		map[string]any{"inputs": []any{}}, map[string]any{}, []any{1}, "x",
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	h := New(Config{Backend: &fakeBackend{}})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := do(t, h, http.MethodPost, "/predict", "application/msgpack", body)
		switch rec.Code {
		case http.StatusOK:
			var out struct {
				Outputs []msgpack.RawMessage `msgpack:"outputs"`
			}
			if err := msgpack.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Outputs) == 0 {
				t.Fatalf("body %x: answer %x: %v", body, rec.Body.Bytes(), err)
			}
			var in struct {
				Inputs []msgpack.RawMessage `msgpack:"inputs"`
			}
			if err := msgpack.Unmarshal(body, &in); err != nil {
				t.Fatalf("body %x accepted, but the msgpack library refuses it: %v", body, err)
			}
			if len(in.Inputs) != len(out.Outputs) {
				t.Fatalf("body %x: %d inputs, %d outputs", body, len(in.Inputs), len(out.Outputs))
			}
			for i := range in.Inputs {
				if !bytes.Equal(in.Inputs[i], out.Outputs[i]) {
					t.Fatalf("body %x: output %d is %x, want %x", body, i, out.Outputs[i], in.Inputs[i])
				}
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("body %x: status %d: %s", body, rec.Code, rec.Body.String())
		}
	})
}

// FuzzMsgpackSkip checks the scanner's idea of where a msgpack value ends
// against the msgpack library's.
func FuzzMsgpackSkip(f *testing.F) {
	for _, v := range []any{
		nil, "x", []byte{1}, 1.5, float32(1), int64(-1 << 40), uint64(1 << 63), time.Unix(1, 2),
		map[string]any{"a": []any{1, "b", nil, true, map[string]any{}}}, make([]int, 20),
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(append(b, 0x01))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := msgpackScanner{data: data}
		err := s.skip(0)
		rd := bytes.NewReader(data)
		refErr := msgpack.NewDecoder(rd).Skip()
		refEnd := len(data) - rd.Len()
		switch {
		case err == nil && refErr != nil:
			t.Fatalf("skip(%x) accepted %d bytes; the library refuses: %v", data, s.pos, refErr)
		case err == nil && s.pos != refEnd:
			t.Fatalf("skip(%x) ends at %d, the library at %d", data, s.pos, refEnd)
		case err != nil && refErr == nil && !strings.Contains(err.Error(), "nesting") && !strings.Contains(err.Error(), "announced"):
			t.Fatalf("skip(%x): %v; the library skips %d bytes", data, err, refEnd)
		}
	})
}
