package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// benchItems are the items the httpapi benchmarks send: one sentence, and a
// small tensor as nested arrays with a label.
var benchItems = []struct{ name, json string }{
	{"string", `"The quick brown fox jumps over the [MASK] dog."`},
	{"object", `{"label": "cat", "pixels": [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4], [-1.5, 2.25, 1e-3, 42]], "ok": true, "n": null}`},
}

// BenchmarkJSONToMsgpack holds the transcoder against what it replaces:
// encoding/json into an interface value, then msgpack.Marshal.
func BenchmarkJSONToMsgpack(b *testing.B) {
	for _, bc := range benchItems {
		raw := []byte(bc.json)
		b.Run(bc.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			var dst []byte
			for b.Loop() {
				var err error
				if dst, err = JSONToMsgpack(dst[:0], raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/reference", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					b.Fatal(err)
				}
				if _, err := msgpack.Marshal(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMsgpackToJSON holds the hand-written walker against the same
// transcoding through msgpack.Decoder's primitives (decoderToJSON): the
// figure in MsgpackToJSON's comment.
func BenchmarkMsgpackToJSON(b *testing.B) {
	for _, bc := range benchItems {
		item, err := JSONToMsgpack(nil, []byte(bc.json))
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range []struct {
			name string
			fn   func(dst, data []byte) ([]byte, error)
		}{{"wire", MsgpackToJSON}, {"decoder", decoderToJSON}} {
			b.Run(bc.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(item)))
				var dst []byte
				for b.Loop() {
					if dst, err = impl.fn(dst[:0], item); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSkipMsgpack holds SkipMsgpack against a bounded skip through
// msgpack.Decoder (decoderSkip): on a small item, and on a 1 MiB tensor
// sent as bin.
func BenchmarkSkipMsgpack(b *testing.B) {
	small, err := JSONToMsgpack(nil, []byte(benchItems[1].json))
	if err != nil {
		b.Fatal(err)
	}
	tensor, err := msgpack.Marshal(map[string]any{"dtype": "float32", "shape": []int{512, 512}, "data": make([]byte, 1<<20)})
	if err != nil {
		b.Fatal(err)
	}
	for _, item := range []struct {
		name string
		data []byte
	}{{"object", small}, {"bin1MiB", tensor}} {
		b.Run(item.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if n, err := SkipMsgpack(item.data, MaxDepth); err != nil || n != len(item.data) {
					b.Fatal(n, err)
				}
			}
		})
		b.Run(item.name+"/decoder", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if n, err := decoderSkip(item.data); err != nil || n != len(item.data) {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// decoderSkip skips one value with msgpack.Decoder, recursing itself into
// arrays and maps so that nesting stays bounded, as a Decoder-based
// SkipMsgpack would have to.
func decoderSkip(data []byte) (int, error) {
	rd := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(rd)
	var skip func(depth int) error
	skip = func(depth int) error {
		c, err := dec.PeekCode()
		if err != nil {
			return err
		}
		var n int
		switch {
		case IsArray(c):
			n, err = dec.DecodeArrayLen()
		case IsMap(c):
			n, err = dec.DecodeMapLen()
			n *= 2
		default:
			return dec.Skip()
		}
		if err != nil {
			return err
		}
		if depth > MaxDepth {
			return errors.New("too deep")
		}
		for range n {
			if err := skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	err := skip(0)
	return len(data) - rd.Len(), err
}

// decoderToJSON is MsgpackToJSON written on msgpack.Decoder's primitives,
// for the kinds the benchmark items hold, with the same output writers.
func decoderToJSON(dst, data []byte) ([]byte, error) {
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(data))
	return decoderValue(dec, dst)
}

func decoderValue(dec *msgpack.Decoder, dst []byte) ([]byte, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return dst, err
	}
	switch {
	case IsArray(c):
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return dst, err
		}
		dst = append(dst, '[')
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = decoderValue(dec, dst); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case IsMap(c):
		n, err := dec.DecodeMapLen()
		if err != nil {
			return dst, err
		}
		dst = append(dst, '{')
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			key, err := dec.DecodeString()
			if err != nil {
				return dst, err
			}
			if dst, err = appendStringJSON(dst, key); err != nil {
				return dst, err
			}
			dst = append(dst, ':')
			if dst, err = decoderValue(dec, dst); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case msgpcode.IsString(c):
		s, err := dec.DecodeString()
		if err != nil {
			return dst, err
		}
		return appendStringJSON(dst, s)
	case c == msgpcode.Double:
		f, err := dec.DecodeFloat64()
		return appendJSONFloat(dst, f, 64), err
	case c == msgpcode.True || c == msgpcode.False:
		v, err := dec.DecodeBool()
		return strconv.AppendBool(dst, v), err
	case c == msgpcode.Nil:
		return append(dst, "null"...), dec.DecodeNil()
	}
	v, err := dec.DecodeInt64()
	return strconv.AppendInt(dst, v, 10), err
}

// appendStringJSON writes s as MsgpackToJSON writes a str, refusing one
// that is not valid UTF-8.
func appendStringJSON(dst []byte, s string) ([]byte, error) {
	dst, bad := appendJSONString(dst, []byte(s))
	if bad >= 0 {
		return dst, errors.New("a str that is not valid UTF-8")
	}
	return dst, nil
}

func TestDecoderToJSONAgrees(t *testing.T) {
	for _, bc := range benchItems {
		item, err := JSONToMsgpack(nil, []byte(bc.json))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := MsgpackToJSON(nil, item)
		if got, err := decoderToJSON(nil, item); err != nil || !bytes.Equal(got, want) {
			t.Errorf("decoderToJSON(%s) = %s, %v; want %s", bc.name, got, err, want)
		}
		if n, err := decoderSkip(item); err != nil || n != len(item) {
			t.Errorf("decoderSkip(%s) = %d, %v; want %d", bc.name, n, err, len(item))
		}
	}
}
