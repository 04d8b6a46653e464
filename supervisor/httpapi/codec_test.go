package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// The transcoding itself is tested in internal/wire; these tests hold what
// Generic adds: the error wording clients see, and dst left alone on error.

func TestGenericFromJSON(t *testing.T) {
	item, key, err := Generic{}.FromJSON(json.RawMessage(`{"b": 1, "a": [true]}`))
	if err != nil || key != "" || string(item) != "\x82\xa1b\x01\xa1a\x91\xc3" {
		t.Fatalf("FromJSON = %x %q %v", item, key, err)
	}
	_, _, err = Generic{}.FromJSON(json.RawMessage(`{"a":}`))
	var e *wire.Error
	if err == nil || err.Error() != `not valid JSON: offset 5: invalid character '}' looking for a value` || !errors.As(err, &e) {
		t.Errorf("FromJSON of a broken object: error %v", err)
	}
}

func TestGenericAppendJSON(t *testing.T) {
	got, err := Generic{}.AppendJSON([]byte("prefix:"), []byte{0x92, 0x01, 0xa1, 'x'})
	if err != nil || string(got) != `prefix:[1,"x"]` {
		t.Errorf("AppendJSON = %s, %v", got, err)
	}
	// Never valid msgpack; and an array whose second element, an
	// extension of an unknown type, has no JSON form.
	for _, output := range [][]byte{{0xc1}, {0x92, 0x01, 0xd4, 0x05, 0x01}} {
		dst := []byte("keep")
		got, err := Generic{}.AppendJSON(dst, output)
		if err == nil || !strings.HasPrefix(err.Error(), "model output has no JSON form: offset ") {
			t.Errorf("AppendJSON(%x): error %v", output, err)
		}
		if string(got) != "keep" {
			t.Errorf("AppendJSON(%x): on error dst became %q, want it unchanged", output, got)
		}
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
