// Package wire reads and writes the two encodings items travel in, JSON and
// msgpack, without building Go values: it transcodes one into the other,
// walks JSON texts and msgpack values, and finds where a value ends.
//
// The transcoders are hand-written because they are the hot path of every
// request: on small items they run seven to twelve times faster than
// encoding/json followed by msgpack.Marshal, and allocate nothing but their
// output (BenchmarkJSONToMsgpack). The msgpack side walks the bytes itself
// where msgpack.Decoder was measured to cost more (MsgpackToJSON,
// SkipMsgpack, and MsgpackReader's headers, strings and integers say by how
// much), and leaves the other scalars to the Decoder (MsgpackReader.Decoder).
//
// Every walker bounds nesting (by MaxDepth unless told a bound) and checks
// every announced length against the bytes left, so that hostile input can
// neither exhaust the stack nor make it allocate more than its size. Errors
// about the input are *Error values (*LengthError for an array or map that
// announces more elements than can follow) that say at which byte offset
// the problem was found.
package wire

import (
	"errors"
	"fmt"
)

// MaxDepth bounds how deep arrays and objects (maps) may nest, as
// encoding/json does, so that a hostile body cannot exhaust the stack.
const MaxDepth = 10000

// An Error is input that a walker refuses: malformed, truncated, nested
// deeper than allowed, or without a form in the other encoding.
type Error struct {
	// Offset is the byte offset in the input at which the problem was found.
	Offset int
	// Problem says what is wrong, e.g. "invalid character '}' looking for a
	// value" or "truncated: want 3 more bytes, have 1".
	Problem string

	notText bool // see ErrNotText
}

// Error writes "offset N: problem".
func (e *Error) Error() string { return fmt.Sprintf("offset %d: %s", e.Offset, e.Problem) }

// ErrNotText is what errors.Is finds in an Error for a JSON string that is
// well formed but not text (not valid UTF-8, or a lone surrogate escape):
// the JSON is not malformed, but has no text to give.
var ErrNotText = errors.New("a JSON string that is not text")

// Is reports whether target is ErrNotText and e is for a string that is
// not text.
func (e *Error) Is(target error) bool { return target == ErrNotText && e.notText }

func errorAt(offset int, format string, args ...any) *Error {
	return &Error{Offset: offset, Problem: fmt.Sprintf(format, args...)}
}

// A LengthError is an msgpack array or map that announces more elements
// than the bytes left could hold: a truncated or lying input, refused
// before anything is allocated for it.
type LengthError struct {
	// Offset is the byte offset just after the header.
	Offset int
	// Announced is the number of elements (or entries) the header announces.
	Announced int
	// Left is the number of bytes after the header.
	Left int
}

// Error writes "offset N: truncated: A elements announced, L bytes left".
func (e *LengthError) Error() string {
	return fmt.Sprintf("offset %d: truncated: %d elements announced, %d bytes left", e.Offset, e.Announced, e.Left)
}
