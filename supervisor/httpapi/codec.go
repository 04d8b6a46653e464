package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/streamer-dev/streamer/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Codec turns the items of a request body into the bytes a model reads, and
// a model's outputs back into JSON. It is the one place that knows what the
// served model expects, so that a bad item is refused before it is queued.
//
// The raw bytes passed to FromJSON and FromMsgpack are only valid during the
// call (they may point into a reused request buffer): an item returned must
// not alias them.
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
//
// JSON integers that fit an int64 or a uint64 become msgpack integers in
// their shortest form, other numbers float64; strings must be text (valid
// UTF-8, no lone surrogate escape); object keys keep their order. Outputs
// go back to JSON with binary as base64 strings and timestamps as RFC 3339
// strings, as encoding/json writes []byte and time.Time; a str output that
// is not valid UTF-8 has no JSON form.
type Generic struct{}

// FromJSON re-encodes the JSON value as msgpack.
func (Generic) FromJSON(raw json.RawMessage) ([]byte, string, error) {
	item, err := wire.JSONToMsgpack(make([]byte, 0, len(raw)+8), raw)
	switch {
	case errors.Is(err, wire.ErrNotText):
		return nil, "", err // well formed: its message says what it lacks
	case err != nil:
		return nil, "", fmt.Errorf("not valid JSON: %w", err)
	}
	return item, "", nil
}

// FromMsgpack copies the item, which the caller has checked is one whole
// msgpack value.
func (Generic) FromMsgpack(raw msgpack.RawMessage) ([]byte, string, error) {
	return append([]byte(nil), raw...), "", nil
}

// AppendJSON appends the JSON form of the msgpack output; on error dst is
// returned as it was.
func (Generic) AppendJSON(dst []byte, output []byte) ([]byte, error) {
	out, err := wire.MsgpackToJSON(dst, output)
	if err != nil {
		return dst, fmt.Errorf("model output has no JSON form: %w", err)
	}
	return out, nil
}
