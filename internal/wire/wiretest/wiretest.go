// Package wiretest holds what the tests of the wire codecs and of their
// users share: the reference decoder a fast codec is held against, and the
// seed texts of their fuzzers, and the reference msgpack encoder.
package wiretest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// JSONSeeds are JSON texts, valid and not, that every JSON fuzzer starts from.
var JSONSeeds = []string{
	`{"inputs": ["a", 1, 2.5, true, null, {"k": [1, {}]}], "timeout_ms": 100}`,
	`{"inputs": []}`, `{}`, `[]`, `"\ud83d\ude00\u00e9\n"`, `-0.5e-3`, `1e400`,
	`{"a":1,"a":2}`, "\"\xff\"", `{"inputs": [1,]}`, ` 123 `, `[[[[]]]]`,
	`{"inputs": null, "timeout_ms": 1.5}`, `9223372036854775808`,
}

// ReferenceJSON decodes JSON the way encoding/json does, with numbers as
// int64 when they fit, uint64 when that fits (as JSONToMsgpack keeps
// them), and float64 otherwise; out of range is an error.
func ReferenceJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more after the value: %v", err)
	}
	return numbers(v)
}

func numbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u, nil
		}
		return strconv.ParseFloat(string(x), 64)
	case []any:
		for i := range x {
			var err error
			if x[i], err = numbers(x[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range x {
			var err error
			if x[k], err = numbers(x[k]); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// MustMsgpack encodes v with the msgpack library, the reference encoder,
// failing the test when it cannot.
func MustMsgpack(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
