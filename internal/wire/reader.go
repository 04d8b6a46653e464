package wire

import (
	"bytes"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// A MsgpackReader reads msgpack values one by one from a byte slice, with
// every announced length checked against the bytes left, so that corrupt or
// hostile input cannot make it allocate or recurse without bound. Strings
// and byte strings come back as sub-slices of the input, not copies. Its
// errors are *Error and *LengthError values; a read that fails does not
// move the reader.
//
// Headers, strings, integers and skips are read by this package's walker;
// other scalars through Decoder, the msgpack library's decoder at the same
// position. The walker is kept for what a request body needs because the
// library's Decoder took twice as long to read one (httpapi's
// decodeMsgpack on BenchmarkDecodeBody's body, medians of 5 on a 2-vCPU
// VM: 246 ns with Decoder's PeekCode, DecodeMapLen, DecodeBytesLen and
// DecodeArrayLen, 125 ns walked by hand): every Decoder call goes through
// an io.ByteScanner.
//
// Use NewMsgpackReader, and Release when done.
type MsgpackReader struct {
	s msgpackScanner // the input and, until dec exists, the position
	// dec is nil until Decoder is first called; from then on decInput's
	// position is the reader's. Most readers (a request body's) never need
	// one, and cost no allocation.
	dec      *msgpack.Decoder
	decInput *bytes.Reader
}

// NewMsgpackReader returns a reader at the start of data.
func NewMsgpackReader(data []byte) *MsgpackReader {
	return &MsgpackReader{s: msgpackScanner{data: data, maxDepth: MaxDepth}}
}

// Release gives back the decoder Decoder took from the msgpack library's
// pool, if it did. Neither the reader nor its Decoder may be used after.
func (r *MsgpackReader) Release() {
	if r.dec != nil {
		msgpack.PutDecoder(r.dec)
		r.dec, r.decInput = nil, nil
	}
}

// Decoder is the msgpack library's decoder at the reader's position, for
// scalars the reader has no method for (DecodeFloat32, DecodeBool, ...);
// what it reads moves the reader too. Its errors are the library's.
func (r *MsgpackReader) Decoder() *msgpack.Decoder {
	if r.dec == nil {
		r.decInput = bytes.NewReader(r.s.data)
		_, _ = r.decInput.Seek(int64(r.s.pos), io.SeekStart)
		r.dec = msgpack.GetDecoder()
		r.dec.Reset(r.decInput)
	}
	return r.dec
}

// Len is the number of bytes left.
func (r *MsgpackReader) Len() int { return len(r.s.data) - r.Offset() }

// Offset is the byte offset of the reader in the input.
func (r *MsgpackReader) Offset() int { return r.walker().pos }

// walker returns the walker at the reader's position, catching up with
// what the decoder read, if there is one.
func (r *MsgpackReader) walker() *msgpackScanner {
	if r.decInput != nil {
		r.s.pos = len(r.s.data) - r.decInput.Len()
	}
	return &r.s
}

// done ends a read that started at start: on error the reader goes back
// there; otherwise the decoder, if there is one, follows the walker.
func (r *MsgpackReader) done(start int, err error) {
	if err != nil {
		r.s.pos = start
	}
	if r.decInput != nil {
		_, _ = r.decInput.Seek(int64(r.s.pos), io.SeekStart)
	}
}

// PeekCode returns the code of the next value without moving past it.
func (r *MsgpackReader) PeekCode() (byte, error) {
	s := r.walker()
	if s.pos >= len(s.data) {
		return 0, s.errorf("truncated: want a value")
	}
	return s.data[s.pos], nil
}

// ArrayLen reads an array header and returns its length; nil reads as -1.
// A length that cannot fit in the bytes left is a *LengthError.
func (r *MsgpackReader) ArrayLen() (int, error) {
	s := r.walker()
	start := s.pos
	n, err := s.containerLen(0x90, msgpcode.Array16, 1, "an array")
	r.done(start, err)
	return n, err
}

// MapLen reads a map header and returns its number of entries; nil reads
// as -1. A number that cannot fit in the bytes left is a *LengthError.
func (r *MsgpackReader) MapLen() (int, error) {
	s := r.walker()
	start := s.pos
	n, err := s.containerLen(0x80, msgpcode.Map16, 2, "a map")
	r.done(start, err)
	return n, err
}

// StringBytes reads a string and returns its bytes without copying them.
func (r *MsgpackReader) StringBytes() ([]byte, error) {
	s := r.walker()
	start := s.pos
	b, err := s.byteString(0xa0, 0xbf, msgpcode.Str8, "a string")
	r.done(start, err)
	return b, err
}

// Bin reads a byte string (msgpack bin) without copying it.
func (r *MsgpackReader) Bin() ([]byte, error) {
	s := r.walker()
	start := s.pos
	b, err := s.byteString(0, 0, msgpcode.Bin8, "bytes (msgpack bin)")
	r.done(start, err)
	return b, err
}

// Int64 reads an integer of any msgpack width that fits an int64.
func (r *MsgpackReader) Int64() (int64, error) {
	s := r.walker()
	start := s.pos
	v, err := s.integer()
	r.done(start, err)
	return v, err
}

// Skip moves past the next value, checking only that it is whole (as
// SkipMsgpack does), and returns its bytes without copying them. depth is
// the number of arrays and maps around the value, counted against MaxDepth.
func (r *MsgpackReader) Skip(depth int) ([]byte, error) {
	s := r.walker()
	start := s.pos
	err := s.skip(depth)
	r.done(start, err)
	if err != nil {
		return nil, err
	}
	return s.data[start:s.pos:s.pos], nil
}

// containerLen reads an array or map header: fix is the fix form's code,
// code16 the 16-bit form's (the 32-bit one follows it); each element takes
// at least perElement bytes.
func (s *msgpackScanner) containerLen(fix, code16 byte, perElement int, what string) (int, error) {
	if s.pos >= len(s.data) {
		return 0, s.errorf("truncated: want %s", what)
	}
	c := s.data[s.pos]
	switch {
	case c == msgpcode.Nil:
		s.pos++
		return -1, nil
	case c&0xf0 == fix:
		s.pos++
		n := int(c & 0x0f)
		return n, s.checkCount(n, perElement)
	case c == code16 || c == code16+1:
		s.pos++
		n, err := s.length(2 << (c - code16))
		if err != nil {
			return 0, err
		}
		return n, s.checkCount(n, perElement)
	}
	return 0, s.errorf("want %s, found code 0x%02x", what, c)
}

// byteString reads a string or a bin without copying it: fixLow to fixHigh
// are its fix codes (none when both are 0), code8 the code of its 8-bit
// form (the 16- and 32-bit ones follow it).
func (s *msgpackScanner) byteString(fixLow, fixHigh, code8 byte, what string) ([]byte, error) {
	if s.pos >= len(s.data) {
		return nil, s.errorf("truncated: want %s", what)
	}
	c := s.data[s.pos]
	var n int
	switch {
	case fixHigh != 0 && fixLow <= c && c <= fixHigh:
		s.pos++
		n = int(c - fixLow)
	case code8 <= c && c <= code8+2:
		s.pos++
		var err error
		if n, err = s.length(1 << (c - code8)); err != nil {
			return nil, err
		}
	default:
		return nil, s.errorf("want %s, found %s", what, KindOf(c))
	}
	b, err := s.take(n)
	if err != nil {
		return nil, err
	}
	return b[:n:n], nil
}

// integer reads a whole number of any msgpack integer width that fits an
// int64.
func (s *msgpackScanner) integer() (int64, error) {
	if s.pos >= len(s.data) {
		return 0, s.errorf("truncated: want an integer")
	}
	start := s.pos
	c := s.data[s.pos]
	switch {
	case c <= 0x7f || c >= 0xe0:
		s.pos++
		return int64(int8(c)), nil
	case msgpcode.Uint8 <= c && c <= msgpcode.Uint64:
		s.pos++
		b, err := s.take(1 << (c - msgpcode.Uint8))
		if err != nil {
			return 0, err
		}
		u := bigEndian(b)
		if u > math.MaxInt64 {
			return 0, errorAt(start, "integer %d is out of range", u)
		}
		return int64(u), nil
	case msgpcode.Int8 <= c && c <= msgpcode.Int64:
		s.pos++
		b, err := s.take(1 << (c - msgpcode.Int8))
		if err != nil {
			return 0, err
		}
		shift := 64 - 8*len(b) // sign-extend
		return int64(bigEndian(b)<<shift) >> shift, nil
	}
	return 0, s.errorf("want an integer, found code 0x%02x", c)
}

// IsArray reports whether c, a msgpack code, starts an array.
func IsArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

// IsMap reports whether c, a msgpack code, starts a map.
func IsMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// KindOf names the kind of msgpack value that starts with code c, as an
// error message would: "an array", "a string", "nil".
func KindOf(c byte) string {
	switch {
	case IsArray(c):
		return "an array"
	case IsMap(c):
		return "a map"
	case msgpcode.IsString(c):
		return "a string"
	case msgpcode.IsBin(c):
		return "bytes"
	case c == msgpcode.Nil:
		return "nil"
	case c == msgpcode.True || c == msgpcode.False:
		return "a bool"
	case msgpcode.IsExt(c):
		return "an extension value"
	case msgpcode.IsFixedNum(c), c >= msgpcode.Float && c <= msgpcode.Int64:
		return "a number"
	}
	// 0xc1: msgpack never writes it.
	return fmt.Sprintf("the byte 0x%02x, which begins no msgpack value", c)
}
