package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/wire"
	"github.com/streamer-dev/streamer/internal/wire/wiretest"
)

var jsonSeeds = wiretest.JSONSeeds

// FuzzPredictJSONBody checks the JSON body decoder against encoding/json:
// a body is answered 200 exactly when it is a JSON object whose "inputs" is
// a non-empty array of items and whose timeout_ms, if any, is a whole
// positive number a duration holds, or null; otherwise 400, never a panic.
func FuzzPredictJSONBody(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	for _, ms := range []string{"0", "-0", "1", "9223372036854775", "9223372036854776"} {
		f.Add([]byte(`{"inputs": [1], "timeout_ms": ` + ms + `}`))
	}
	for _, s := range []string{`{"inputs": ["\udc00", "a"]}`, "{\"inputs\": [\"a\xffb\"]}", `{"\ud800": 1, "inputs": [1]}`, "{\"x\": \"\xff\", \"inputs\": [1]}"} {
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
// and each top-level member is looked at, duplicates included. A key or an
// item with a string that is not text (invalid UTF-8, a lone surrogate
// escape), which encoding/json reads as U+FFFD, is refused: whether a
// string is text is wire.JSONToMsgpack's to say, held against an oracle of
// its own in internal/wire (FuzzJSONToMsgpack).
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
		before := dec.InputOffset()
		key, _ := dec.Token()
		rawKey := body[before:dec.InputOffset()] // after a comma and white space, if any
		if !isText(rawKey[bytes.IndexByte(rawKey, '"'):]) {
			return http.StatusBadRequest
		}
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
			if json.Unmarshal(raw, &ms) != nil || ms != nil && (*ms <= 0 || *ms > maxTimeoutMs) {
				return http.StatusBadRequest
			}
		}
	}
	if len(inputs) == 0 {
		return http.StatusBadRequest
	}
	for _, raw := range inputs {
		if _, err := wiretest.ReferenceJSON(raw); err != nil || !isText(raw) { // e.g. a number out of range
			return http.StatusBadRequest
		}
	}
	return http.StatusOK
}

// isText reports whether the strings of raw, JSON that encoding/json
// takes, are text (see expectedJSONStatus).
func isText(raw []byte) bool {
	_, err := wire.JSONToMsgpack(nil, raw)
	var e *wire.Error
	return !errors.As(err, &e) || !strings.HasPrefix(e.Problem, "string ")
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

// FuzzCompressedBody holds the compressed path against the plain one: a
// body compressed by the standard library's writers gets the answer its
// plain form gets, and bytes sent as gzip or deflate whatever they hold
// are answered 200, 400 or 413, never a panic or a 5xx.
func FuzzCompressedBody(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), uint8(0))
	}
	f.Add([]byte(`{"inputs": ["a"]}`), uint8(1))
	f.Add([]byte(`{"inputs": ["a"]}`), uint8(2))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"), uint8(3))
	f.Add([]byte("\x78\x9c\x03\x00\x00\x00\x00\x01"), uint8(4))
	h := New(Config{Backend: &fakeBackend{}, MaxBody: 64 << 10})
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		if mode %= 5; mode >= 3 {
			header := []string{"gzip", "deflate"}[mode-3]
			rec := do(t, h, http.MethodPost, "/predict", "application/json", body, "Content-Encoding", header)
			if c := rec.Code; c != http.StatusOK && c != http.StatusBadRequest && c != http.StatusRequestEntityTooLarge {
				t.Fatalf("%x as %s: status %d: %s", body, header, c, rec.Body)
			}
			return
		}
		c := compressions[mode]
		want := do(t, h, http.MethodPost, "/predict", "application/json", body)
		got := do(t, h, http.MethodPost, "/predict", "application/json", compress(t, c.name, body), "Content-Encoding", c.header)
		if got.Code != want.Code || got.Code == http.StatusOK && !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Fatalf("%q as %s: %d %s; plain: %d %s", body, c.name, got.Code, got.Body, want.Code, want.Body)
		}
	})
}
