package onnxio

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxRank bounds the rank of any tensor streamer reads, and so the depth of
// the nested arrays it walks.
const maxRank = 32

// reader decodes msgpack from a byte slice with every length checked against
// the bytes left, so that corrupt or hostile input cannot make it allocate
// or recurse without bound. Byte strings come back as sub-slices of the
// input, not copies.
type reader struct {
	data []byte
	rd   bytes.Reader
	dec  *msgpack.Decoder
}

func newReader(data []byte) *reader {
	r := &reader{data: data}
	r.rd.Reset(data)
	r.dec = msgpack.GetDecoder()
	r.dec.Reset(&r.rd)
	return r
}

func (r *reader) release() {
	msgpack.PutDecoder(r.dec)
	r.dec = nil
}

func (r *reader) left() int   { return r.rd.Len() }
func (r *reader) offset() int { return len(r.data) - r.rd.Len() }

func (r *reader) peek() (byte, error) {
	c, err := r.dec.PeekCode()
	if err == io.EOF {
		return 0, io.ErrUnexpectedEOF
	}
	return c, err
}

// arrayLen reads an array header; nil is an error.
func (r *reader) arrayLen() (int, error) {
	n, err := r.dec.DecodeArrayLen()
	switch {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, errors.New("got nil, want an array")
	case n > r.left():
		return 0, fmt.Errorf("array of %d elements in %d bytes", n, r.left())
	}
	return n, nil
}

// mapLen reads a map header; nil is an error.
func (r *reader) mapLen() (int, error) {
	n, err := r.dec.DecodeMapLen()
	switch {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, errors.New("got nil, want a map")
	case n > r.left()/2:
		return 0, fmt.Errorf("map of %d entries in %d bytes", n, r.left())
	}
	return n, nil
}

// shape reads an array of non-negative dimensions.
func (r *reader) shape() ([]int64, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("shape: %w", err)
	}
	if n > maxRank {
		return nil, fmt.Errorf("shape has %d dimensions; at most %d are served", n, maxRank)
	}
	shape := make([]int64, n)
	for i := range shape {
		if shape[i], err = r.dec.DecodeInt64(); err != nil {
			return nil, fmt.Errorf("shape: dimension %d: %w", i, err)
		}
		if shape[i] < 0 {
			return nil, fmt.Errorf("shape: dimension %d is %d", i, shape[i])
		}
	}
	return shape, nil
}

// bin reads a byte string without copying it.
func (r *reader) bin() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if !msgpcode.IsBin(c) {
		return nil, fmt.Errorf("got %s, want bytes (msgpack bin)", kindOf(c))
	}
	n, err := r.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > r.left() {
		return nil, fmt.Errorf("%d bytes announced, %d left", n, r.left())
	}
	start := r.offset()
	if _, err := r.rd.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return r.data[start : start+n : start+n], nil
}

// skip passes over one value, refusing nesting deeper than depth.
func (r *reader) skip(depth int) error {
	c, err := r.peek()
	if err != nil {
		return err
	}
	var n int
	switch {
	case isArray(c):
		n, err = r.arrayLen()
	case isMap(c):
		n, err = r.mapLen()
		n *= 2
	default:
		return r.dec.Skip()
	}
	if err != nil {
		return err
	}
	if depth <= 0 {
		return errors.New("values nest too deeply")
	}
	for range n {
		if err := r.skip(depth - 1); err != nil {
			return err
		}
	}
	return nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// kindOf names the msgpack value that starts with code c.
func kindOf(c byte) string {
	switch {
	case isArray(c):
		return "an array"
	case isMap(c):
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
	}
	return "a number"
}
