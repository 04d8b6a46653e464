package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Codec turns the items of a request body into the bytes a model reads, and
// a model's outputs back into JSON. It is the one place that knows what the
// served model expects, so that a bad item is refused before it is queued.
type Codec interface {
	// FromJSON encodes one item given as JSON. key groups items that may
	// share a batch ("" for all). An error names what is wrong with the item.
	FromJSON(raw json.RawMessage) (item []byte, key string, err error)
	// FromMsgpack encodes one item given as msgpack.
	FromMsgpack(raw msgpack.RawMessage) (item []byte, key string, err error)
	// AppendJSON appends the JSON form of one model output to dst.
	AppendJSON(dst []byte, output []byte) ([]byte, error)
}

// Generic is the Codec for models that take any msgpack value: a JSON item
// becomes the msgpack encoding of the same value, a msgpack item passes as
// it is, and every item shares one batch key.
type Generic struct{}

// FromJSON re-encodes the JSON value as msgpack.
func (Generic) FromJSON(raw json.RawMessage) ([]byte, string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, "", fmt.Errorf("not valid JSON: %w", err)
	}
	b, err := msgpack.Marshal(jsonNumbers(v))
	return b, "", err
}

// FromMsgpack checks the item is one whole msgpack value and passes it on.
func (Generic) FromMsgpack(raw msgpack.RawMessage) ([]byte, string, error) {
	return raw, "", nil
}

// AppendJSON decodes the msgpack output and appends it as JSON.
func (Generic) AppendJSON(dst []byte, output []byte) ([]byte, error) {
	var v any
	if err := msgpack.Unmarshal(output, &v); err != nil {
		return dst, fmt.Errorf("model output is not msgpack: %w", err)
	}
	b, err := json.Marshal(jsonSafe(v))
	if err != nil {
		return dst, fmt.Errorf("model output has no JSON form: %w", err)
	}
	return append(dst, b...), nil
}

// jsonNumbers turns json.Number leaves into int64 or float64, so that
// integers stay integers in msgpack.
func jsonNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = jsonNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = jsonNumbers(x[k])
		}
	}
	return v
}

// jsonSafe turns what msgpack decodes into values encoding/json accepts:
// maps with non-string keys get string keys.
func jsonSafe(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = jsonSafe(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = jsonSafe(x[k])
		}
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, val := range x {
			m[fmt.Sprint(k)] = jsonSafe(val)
		}
		return m
	}
	return v
}
