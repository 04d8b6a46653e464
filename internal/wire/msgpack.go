package wire

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// msgpackScanner walks msgpack bytes without building Go values: it
// transcodes a value to JSON (MsgpackToJSON) or finds where one ends
// (SkipMsgpack).
type msgpackScanner struct {
	data     []byte
	pos      int
	maxDepth int  // how deep arrays and maps may nest
	inKey    bool // the scalar read is a map's key (see float)
}

func (s *msgpackScanner) errorf(format string, args ...any) error {
	return errorAt(s.pos, format, args...)
}

// take returns the next n bytes.
func (s *msgpackScanner) take(n int) ([]byte, error) {
	if n < 0 || len(s.data)-s.pos < n {
		return nil, s.errorf("truncated: want %d more bytes, have %d", n, len(s.data)-s.pos)
	}
	b := s.data[s.pos : s.pos+n]
	s.pos += n
	return b, nil
}

// length reads a big-endian length of size bytes (1, 2 or 4).
func (s *msgpackScanner) length(size int) (int, error) {
	b, err := s.take(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(b[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(b)), nil
	}
	return int(binary.BigEndian.Uint32(b)), nil
}

// value appends the JSON form of the next value to dst.
func (s *msgpackScanner) value(dst []byte, depth int) ([]byte, error) {
	if depth > s.maxDepth {
		return dst, s.errorf("nesting deeper than %d", s.maxDepth)
	}
	if s.pos >= len(s.data) {
		return dst, s.errorf("truncated: want a value")
	}
	c := s.data[s.pos]
	s.pos++
	switch {
	case c <= 0x7f:
		return strconv.AppendInt(dst, int64(c), 10), nil
	case c >= 0xe0:
		return strconv.AppendInt(dst, int64(int8(c)), 10), nil
	case c <= 0x8f:
		return s.object(dst, int(c&0x0f), depth)
	case c <= 0x9f:
		return s.array(dst, int(c&0x0f), depth)
	case c <= 0xbf:
		return s.str(dst, int(c&0x1f))
	}
	return s.tagged(dst, c, depth)
}

// tagged handles the codes 0xc0 to 0xdf.
func (s *msgpackScanner) tagged(dst []byte, c byte, depth int) ([]byte, error) {
	switch c {
	case 0xc0:
		return append(dst, "null"...), nil
	case 0xc2:
		return append(dst, "false"...), nil
	case 0xc3:
		return append(dst, "true"...), nil
	case 0xc4, 0xc5, 0xc6:
		n, err := s.length(1 << (c - 0xc4))
		if err != nil {
			return dst, err
		}
		return s.bin(dst, n)
	case 0xc7, 0xc8, 0xc9:
		n, err := s.length(1 << (c - 0xc7))
		if err != nil {
			return dst, err
		}
		return s.ext(dst, n)
	case 0xca:
		b, err := s.take(4)
		if err != nil {
			return dst, err
		}
		return s.float(dst, float64(math.Float32frombits(binary.BigEndian.Uint32(b))), 32)
	case 0xcb:
		b, err := s.take(8)
		if err != nil {
			return dst, err
		}
		return s.float(dst, math.Float64frombits(binary.BigEndian.Uint64(b)), 64)
	case 0xcc, 0xcd, 0xce, 0xcf:
		b, err := s.take(1 << (c - 0xcc))
		if err != nil {
			return dst, err
		}
		return strconv.AppendUint(dst, bigEndian(b), 10), nil
	case 0xd0, 0xd1, 0xd2, 0xd3:
		b, err := s.take(1 << (c - 0xd0))
		if err != nil {
			return dst, err
		}
		shift := 64 - 8*len(b) // sign-extend
		return strconv.AppendInt(dst, int64(bigEndian(b)<<shift)>>shift, 10), nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return s.ext(dst, 1<<(c-0xd4))
	case 0xd9, 0xda, 0xdb:
		n, err := s.length(1 << (c - 0xd9))
		if err != nil {
			return dst, err
		}
		return s.str(dst, n)
	case 0xdc, 0xdd:
		n, err := s.length(2 << (c - 0xdc))
		if err != nil {
			return dst, err
		}
		return s.array(dst, n, depth)
	case 0xde, 0xdf:
		n, err := s.length(2 << (c - 0xde))
		if err != nil {
			return dst, err
		}
		return s.object(dst, n, depth)
	}
	return dst, errorAt(s.pos-1, "invalid msgpack code 0x%02x", c)
}

func bigEndian(b []byte) uint64 {
	var u uint64
	for _, x := range b {
		u = u<<8 | uint64(x)
	}
	return u
}

// float writes f; NaN and the infinities, which JSON has no number for, as
// null, as an ONNX model's outputs are written (onnxio); as a map's key,
// which is a string, as NaN, +Inf and -Inf, told apart from one another
// and from null. (A key's text can still be another key's: the string
// "NaN", or the int 1 beside the float 1.0.)
func (s *msgpackScanner) float(dst []byte, f float64, bits int) ([]byte, error) {
	switch {
	case (math.IsNaN(f) || math.IsInf(f, 0)) && s.inKey:
		return strconv.AppendFloat(dst, f, 'g', -1, 64), nil
	case math.IsNaN(f) || math.IsInf(f, 0):
		return append(dst, "null"...), nil
	}
	return appendJSONFloat(dst, f, bits), nil
}

// appendJSONFloat writes f the way JavaScript and encoding/json do: plain
// decimals, switching to an exponent below 1e-6 and from 1e21.
func appendJSONFloat(dst []byte, f float64, bits int) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' { // e-07 → e-7
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// str writes a str of n bytes. One that is not valid UTF-8 is refused,
// where encoding/json would write U+FFFD in its place: bytes that are not
// text travel as a bin, which JSON carries as base64.
func (s *msgpackScanner) str(dst []byte, n int) ([]byte, error) {
	b, err := s.take(n)
	if err != nil {
		return dst, err
	}
	dst, bad := appendJSONString(dst, b)
	if bad >= 0 {
		return dst, errorAt(s.pos-n+bad, "a str that is not valid UTF-8 (byte 0x%02x) has no JSON form: "+
			"bytes that are not text go as a bin, which JSON carries as base64", b[bad])
	}
	return dst, nil
}

func (s *msgpackScanner) bin(dst []byte, n int) ([]byte, error) {
	b, err := s.take(n)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"'), nil
}

// ext reads an extension value of n data bytes. Only timestamps (type -1)
// have a JSON form.
func (s *msgpackScanner) ext(dst []byte, n int) ([]byte, error) {
	typ, err := s.take(1)
	if err != nil {
		return dst, err
	}
	data, err := s.take(n)
	if err != nil {
		return dst, err
	}
	if int8(typ[0]) != -1 {
		return dst, s.errorf("msgpack extension type %d has no JSON form", int8(typ[0]))
	}
	var t time.Time
	switch n {
	case 4:
		t = time.Unix(int64(binary.BigEndian.Uint32(data)), 0)
	case 8:
		v := binary.BigEndian.Uint64(data)
		t = time.Unix(int64(v&(1<<34-1)), int64(v>>34))
	case 12:
		t = time.Unix(int64(binary.BigEndian.Uint64(data[4:])), int64(binary.BigEndian.Uint32(data[:4])))
	default:
		return dst, s.errorf("msgpack timestamp of %d bytes; want 4, 8 or 12", n)
	}
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), nil
}

// checkCount refuses a count of elements that cannot fit in the bytes left,
// each element taking at least perElement bytes, before looping over it.
func (s *msgpackScanner) checkCount(n, perElement int) error {
	if left := len(s.data) - s.pos; n > left/perElement {
		return &LengthError{Offset: s.pos, Announced: n, Left: left}
	}
	return nil
}

func (s *msgpackScanner) array(dst []byte, n, depth int) ([]byte, error) {
	if err := s.checkCount(n, 1); err != nil {
		return dst, err
	}
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = s.value(dst, depth+1); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

func (s *msgpackScanner) object(dst []byte, n, depth int) ([]byte, error) {
	if err := s.checkCount(n, 2); err != nil {
		return dst, err
	}
	dst = append(dst, '{')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = s.key(dst, depth+1); err != nil {
			return dst, err
		}
		dst = append(dst, ':')
		if dst, err = s.value(dst, depth+1); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// key writes a map key as a JSON string: strings as they are, scalars as
// their JSON text. Containers cannot be keys.
func (s *msgpackScanner) key(dst []byte, depth int) ([]byte, error) {
	if s.pos >= len(s.data) {
		return dst, s.errorf("truncated: want a map key")
	}
	c := s.data[s.pos]
	if 0xa0 <= c && c <= 0xbf || 0xd9 <= c && c <= 0xdb {
		return s.value(dst, depth)
	}
	if 0x80 <= c && c <= 0x9f || c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf {
		return dst, s.errorf("a map key that is an array or a map has no JSON form")
	}
	start := len(dst)
	s.inKey = true
	dst, err := s.value(dst, depth)
	s.inKey = false
	if err != nil {
		return dst, err
	}
	if dst[start] == '"' { // binary or timestamp: already a string
		return dst, nil
	}
	dst = append(dst, 0, 0)
	copy(dst[start+1:], dst[start:len(dst)-2])
	dst[start] = '"'
	dst[len(dst)-1] = '"'
	return dst, nil
}

// appendJSONString writes s as a JSON string, HTML characters left alone.
// It stops at the first byte that is not UTF-8 and returns its index, else
// -1.
func appendJSONString(dst, s []byte) ([]byte, int) {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return dst, i
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), -1
}

// MsgpackToJSON appends the JSON form of the one msgpack value in data to
// dst. Binary becomes a base64 string and timestamps RFC 3339 strings, as
// encoding/json writes []byte and time.Time; map keys that are not strings
// become their JSON text as a string; NaN and ±Inf, which JSON has no
// number for, become null. Strings that are not valid UTF-8 (which
// encoding/json would change), other extension types, and maps or arrays
// as map keys are errors.
// On error the returned slice holds a partial encoding.
//
// It walks the bytes itself rather than through msgpack.Decoder: the same
// transcoding on the Decoder's primitives (decoderToJSON, in the tests)
// takes 1.8 to 3.7 times as long on the benchmark items and allocates, as
// DecodeString copies every string (BenchmarkMsgpackToJSON, medians of 5 on
// a 2-vCPU VM: a sentence 63 ns against 165 ns, a small object 533 ns
// against 1 173 ns).
func MsgpackToJSON(dst, data []byte) ([]byte, error) {
	s := msgpackScanner{data: data, maxDepth: MaxDepth}
	dst, err := s.value(dst, 0)
	if err != nil {
		return dst, err
	}
	if s.pos != len(data) {
		return dst, s.errorf("%d bytes after the value", len(data)-s.pos)
	}
	return dst, nil
}

// SkipMsgpack returns the length of the msgpack value that starts data,
// checking only that it is whole: that every code is one msgpack defines,
// that every length fits in the bytes left, and that arrays and maps nest
// no more than maxDepth deep (a scalar is at depth 0, the elements of an
// array at depth 1). A decoder of a fixed schema can skip the fields it
// does not know with it, so that a newer peer may add some.
//
// It walks the bytes itself rather than calling msgpack.Decoder.Skip,
// which does not bound nesting and reads what it skips into a buffer of its
// own: a bounded skip around Decoder.Skip (decoderSkip, in the tests) takes
// 25 µs against 0.09 µs for a tensor map holding 1 MiB of bin, and 660 ns
// against 208 ns for a small object (BenchmarkSkipMsgpack, medians of 5 on
// a 2-vCPU VM).
func SkipMsgpack(data []byte, maxDepth int) (int, error) {
	s := msgpackScanner{data: data, maxDepth: maxDepth}
	if err := s.skip(0); err != nil {
		return 0, err
	}
	return s.pos, nil
}

// skip moves past the next value, checking only that it is whole.
func (s *msgpackScanner) skip(depth int) error {
	if depth > s.maxDepth {
		return s.errorf("nesting deeper than %d", s.maxDepth)
	}
	if s.pos >= len(s.data) {
		return s.errorf("truncated: want a value")
	}
	c := s.data[s.pos]
	s.pos++
	var elems, size int // elements to skip, bytes to skip
	var err error
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c <= 0x8f:
		elems = 2 * int(c&0x0f)
	case c <= 0x9f:
		elems = int(c & 0x0f)
	case c <= 0xbf:
		size = int(c & 0x1f)
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		size, err = s.length(1 << (c - 0xc4))
	case c == 0xc7 || c == 0xc8 || c == 0xc9:
		size, err = s.length(1 << (c - 0xc7))
		size++ // the type byte
	case c == 0xca:
		size = 4
	case c == 0xcb:
		size = 8
	case 0xcc <= c && c <= 0xcf:
		size = 1 << (c - 0xcc)
	case 0xd0 <= c && c <= 0xd3:
		size = 1 << (c - 0xd0)
	case 0xd4 <= c && c <= 0xd8:
		size = 1 + 1<<(c-0xd4)
	case c == 0xd9 || c == 0xda || c == 0xdb:
		size, err = s.length(1 << (c - 0xd9))
	case c == 0xdc || c == 0xdd:
		elems, err = s.length(2 << (c - 0xdc))
	case c == 0xde || c == 0xdf:
		elems, err = s.length(2 << (c - 0xde))
		elems *= 2
	default:
		return errorAt(s.pos-1, "invalid msgpack code 0x%02x", c)
	}
	if err != nil {
		return err
	}
	if _, err := s.take(size); err != nil {
		return err
	}
	if err := s.checkCount(elems, 1); err != nil {
		return err
	}
	for range elems {
		if err := s.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
