package onnxio

import (
	"errors"
	"fmt"

	"github.com/streamer-dev/streamer/internal/wire"
)

// maxRank bounds the rank of any tensor streamer reads, and so the depth of
// the nested arrays it walks.
const maxRank = 32

// reader is a wire.MsgpackReader with what this package reads on top of it:
// arrays and maps that must not be nil, and shapes.
type reader struct {
	*wire.MsgpackReader
	data []byte // the input, for error messages about its shape
}

func newReader(data []byte) reader {
	return reader{MsgpackReader: wire.NewMsgpackReader(data), data: data}
}

// arrayLen reads an array header; nil is an error.
func (r reader) arrayLen() (int, error) {
	n, err := r.ArrayLen()
	if err == nil && n < 0 {
		return 0, errors.New("got nil, want an array")
	}
	return n, err
}

// mapLen reads a map header; nil is an error.
func (r reader) mapLen() (int, error) {
	n, err := r.MapLen()
	if err == nil && n < 0 {
		return 0, errors.New("got nil, want a map")
	}
	return n, err
}

// shape reads an array of non-negative dimensions.
func (r reader) shape() ([]int64, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("shape: %w", err)
	}
	if n > maxRank {
		return nil, fmt.Errorf("shape has %d dimensions; at most %d are served", n, maxRank)
	}
	shape := make([]int64, n)
	for i := range shape {
		if shape[i], err = r.Int64(); err != nil {
			return nil, fmt.Errorf("shape: dimension %d: %w", i, err)
		}
		if shape[i] < 0 {
			return nil, fmt.Errorf("shape: dimension %d is %d", i, shape[i])
		}
	}
	return shape, nil
}
