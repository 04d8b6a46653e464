package wire

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A JSONScanner walks one JSON text without building Go values: it
// validates it, finds the extent of values, and transcodes values to
// msgpack. It is the hot path of every JSON request, where encoding/json's
// reflection and interface values cost more than the rest of the request
// handling. Its errors are *Error values, worded as encoding/json words its
// syntax errors.
//
// What decodes a string (Key, JSONToMsgpack) refuses one that is not valid
// UTF-8 or that has a lone surrogate escape (\ud800 without a \udc00-\udfff
// after it), where encoding/json would put U+FFFD in its place: the text
// the client sent would reach the model changed. Skip checks syntax alone,
// so that a value the caller ignores, or decodes on its own, costs no more.
//
// The zero value walks an empty text; NewJSONScanner starts on data.
type JSONScanner struct {
	data []byte
	pos  int
}

// NewJSONScanner returns a scanner at the start of data.
func NewJSONScanner(data []byte) JSONScanner { return JSONScanner{data: data} }

// Offset is the byte offset of the scanner in the text.
func (s *JSONScanner) Offset() int { return s.pos }

// Remaining is the count of bytes of the text after the scanner.
func (s *JSONScanner) Remaining() int { return len(s.data) - s.pos }

// Peek moves past white space and returns the next byte; false at the end
// of the text.
func (s *JSONScanner) Peek() (byte, bool) {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return 0, false
	}
	return s.data[s.pos], true
}

// Consume moves past white space and then past c if c is next, and reports
// whether it was.
func (s *JSONScanner) Consume(c byte) bool { return s.consume(c) }

// Skip validates the next value and moves past it, returning its text.
// depth is the number of arrays and objects around it, counted against
// MaxDepth.
func (s *JSONScanner) Skip(depth int) ([]byte, error) {
	s.skipSpace()
	begin := s.pos
	if _, err := s.value(nil, false, depth); err != nil {
		return nil, err
	}
	return s.data[begin:s.pos], nil
}

// Key reads an object key and the colon after it, and returns the key's
// text with its escapes decoded. Unless it has escapes, the key is a
// sub-slice of the text, not a copy.
func (s *JSONScanner) Key() ([]byte, error) {
	if c, ok := s.Peek(); !ok || c != '"' {
		return nil, s.Unexpected("looking for an object key")
	}
	begin := s.pos + 1
	if _, err := s.str(nil, false); err != nil {
		return nil, err
	}
	key := s.data[begin : s.pos-1]
	if !plainASCII(key) { // rare: an escaped key, or one past ASCII
		var err error
		if key, err = decodeKey(key, begin); err != nil {
			return nil, err
		}
	}
	if !s.consume(':') {
		return nil, s.Unexpected("after an object key")
	}
	return key, nil
}

// plainASCII reports whether b is ASCII without a backslash: a key as keys
// almost always are, its text its bytes. Byte by byte, inlined: a key is a
// few bytes, for which bytes.IndexByte and utf8.Valid cost more in their
// calls than in their work (9 ns of 21 for Key, against 2 ns this way).
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// decodeKey decodes the key text raw, which starts at offset in the text.
func decodeKey(raw []byte, offset int) ([]byte, error) {
	if bytes.IndexByte(raw, '\\') >= 0 {
		return appendUnescapedText(nil, raw, offset)
	}
	return raw, checkUTF8(raw, offset)
}

// End checks that nothing but white space is left.
func (s *JSONScanner) End() error { return s.end() }

func (s *JSONScanner) errorf(format string, args ...any) error {
	return errorAt(s.pos, format, args...)
}

// Unexpected describes the next byte (or the end of the text) as an error
// found in context, e.g. "after an array element".
func (s *JSONScanner) Unexpected(context string) error {
	if s.pos >= len(s.data) {
		return s.errorf("unexpected end of JSON %s", context)
	}
	switch r, size := utf8.DecodeRune(s.data[s.pos:]); {
	case r == '\ufeff' && s.pos == 0:
		return s.errorf("the text starts with a byte-order mark (EF BB BF), which JSON sent over a network must not have")
	case r == utf8.RuneError && size <= 1:
		return s.errorf("invalid byte 0x%02x %s: not UTF-8", s.data[s.pos], context)
	default:
		return s.errorf("invalid character %q %s", r, context)
	}
}

func (s *JSONScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// end checks nothing but white space follows the value.
func (s *JSONScanner) end() error {
	s.skipSpace()
	if s.pos != len(s.data) {
		return s.Unexpected("after the top-level value")
	}
	return nil
}

// consume advances past c if it is next, after white space.
func (s *JSONScanner) consume(c byte) bool {
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// value reads one value. When emit is set its msgpack encoding is appended
// to dst; otherwise it is only validated and skipped.
func (s *JSONScanner) value(dst []byte, emit bool, depth int) ([]byte, error) {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return dst, s.Unexpected("looking for a value")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.object(dst, emit, depth+1)
	case c == '[':
		return s.array(dst, emit, depth+1)
	case c == '"':
		return s.str(dst, emit)
	case c == '-' || '0' <= c && c <= '9':
		return s.number(dst, emit)
	case c == 't':
		return s.literal(dst, emit, "true", 0xc3)
	case c == 'f':
		return s.literal(dst, emit, "false", 0xc2)
	case c == 'n':
		return s.literal(dst, emit, "null", 0xc0)
	}
	return dst, s.Unexpected("looking for a value")
}

func (s *JSONScanner) literal(dst []byte, emit bool, word string, code byte) ([]byte, error) {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return dst, s.Unexpected("in literal " + word)
	}
	s.pos += len(word)
	if emit {
		dst = append(dst, code)
	}
	return dst, nil
}

// Containers are written after a placeholder of maxHeader bytes; once the
// element count is known, finishHeader writes the shortest header and moves
// the content up to it.
const maxHeader = 5

func (s *JSONScanner) array(dst []byte, emit bool, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, s.errorf("nesting deeper than %d", MaxDepth)
	}
	s.pos++ // '['
	start := len(dst)
	if emit {
		dst = append(dst, make([]byte, maxHeader)...)
	}
	n := 0
	if s.consume(']') {
		return finishHeader(dst, start, emit, n, arrayHeader), nil
	}
	for {
		var err error
		if dst, err = s.value(dst, emit, depth); err != nil {
			return dst, err
		}
		n++
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return finishHeader(dst, start, emit, n, arrayHeader), nil
		}
		return dst, s.Unexpected("after an array element")
	}
}

func (s *JSONScanner) object(dst []byte, emit bool, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, s.errorf("nesting deeper than %d", MaxDepth)
	}
	s.pos++ // '{'
	start := len(dst)
	if emit {
		dst = append(dst, make([]byte, maxHeader)...)
	}
	n := 0
	if s.consume('}') {
		return finishHeader(dst, start, emit, n, mapHeader), nil
	}
	for {
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return dst, s.Unexpected("looking for an object key")
		}
		var err error
		if dst, err = s.str(dst, emit); err != nil {
			return dst, err
		}
		if !s.consume(':') {
			return dst, s.Unexpected("after an object key")
		}
		if dst, err = s.value(dst, emit, depth); err != nil {
			return dst, err
		}
		n++
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return finishHeader(dst, start, emit, n, mapHeader), nil
		}
		return dst, s.Unexpected("after an object value")
	}
}

// str reads a string. Without escapes (the usual case) its bytes are
// copied as they are; otherwise it is unescaped. When it is emitted, text
// that is not valid UTF-8 and lone surrogate escapes are refused.
func (s *JSONScanner) str(dst []byte, emit bool) ([]byte, error) {
	s.pos++ // opening quote
	begin := s.pos
	plain := true
	for {
		if s.pos >= len(s.data) {
			return dst, s.Unexpected("in a string")
		}
		c := s.data[s.pos]
		switch {
		case c == '"':
			raw := s.data[begin:s.pos]
			s.pos++
			if !emit {
				return dst, nil
			}
			if !plain {
				return appendUnescaped(dst, raw, begin)
			}
			if err := checkUTF8(raw, begin); err != nil {
				return dst, err
			}
			dst = appendStrHeader(dst, len(raw))
			return append(dst, raw...), nil
		case c < 0x20:
			return dst, s.Unexpected("in a string")
		case c == '\\':
			plain = false
			if err := s.escape(); err != nil {
				return dst, err
			}
			continue
		}
		s.pos++
	}
}

// escape validates the escape sequence at pos and moves past it.
func (s *JSONScanner) escape() error {
	s.pos++ // backslash
	if s.pos >= len(s.data) {
		return s.Unexpected("in a string escape")
	}
	switch s.data[s.pos] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos++
		return nil
	case 'u':
		s.pos++
		for range 4 {
			if s.pos >= len(s.data) || unhex(s.data[s.pos]) < 0 {
				return s.Unexpected(`in a \u escape`)
			}
			s.pos++
		}
		return nil
	}
	return s.Unexpected("in a string escape")
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// appendUnescaped appends the msgpack string for the syntax-checked string
// body raw, which starts at offset in the text.
func appendUnescaped(dst []byte, raw []byte, offset int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, maxHeader)...)
	dst, err := appendUnescapedText(dst, raw, offset)
	if err != nil {
		return dst[:start], err
	}
	return finishHeader(dst, start, true, len(dst)-start-maxHeader, strHeader), nil
}

// appendUnescapedText appends the text of the syntax-checked string body
// raw, which starts at offset in the text, escapes decoded. It refuses a
// byte that is not UTF-8 and a lone surrogate escape, which have no text
// to decode to but U+FFFD.
func appendUnescapedText(dst []byte, raw []byte, offset int) ([]byte, error) {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			r, next, ok := unescapeAt(raw, i)
			if !ok {
				return dst, loneSurrogate(raw[i:i+6], offset+i)
			}
			dst = utf8.AppendRune(dst, r)
			i = next
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, notUTF8(c, offset+i)
			}
			dst = append(dst, raw[i:i+size]...)
			i += size
		}
	}
	return dst, nil
}

// unescapeAt decodes the escape at raw[i] (a backslash) and returns the rune
// and the index after it. A surrogate pair is joined; a lone surrogate is
// not ok.
func unescapeAt(raw []byte, i int) (r rune, next int, ok bool) {
	switch raw[i+1] {
	case 'b':
		return '\b', i + 2, true
	case 'f':
		return '\f', i + 2, true
	case 'n':
		return '\n', i + 2, true
	case 'r':
		return '\r', i + 2, true
	case 't':
		return '\t', i + 2, true
	case 'u':
		r := hex4(raw[i+2:])
		i += 6
		if !utf16.IsSurrogate(r) {
			return r, i, true
		}
		if i+5 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
			if joined := utf16.DecodeRune(r, hex4(raw[i+2:])); joined != utf8.RuneError {
				return joined, i + 6, true
			}
		}
		return 0, i, false
	}
	return rune(raw[i+1]), i + 2, true // '"', '\\' or '/'
}

// CheckText is nil when s is valid UTF-8, and otherwise the error that
// names its first byte that is not, at its offset in s (errors.Is finds
// ErrNotText in it): for text that came in another form than a JSON string.
func CheckText(s []byte) error { return checkUTF8(s, 0) }

// checkUTF8 refuses the string body raw, which starts at offset in the
// text, unless it is valid UTF-8.
func checkUTF8(raw []byte, offset int) error {
	if utf8.Valid(raw) {
		return nil
	}
	for i := 0; ; {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size == 1 {
			return notUTF8(raw[i], offset+i)
		}
		i += size
	}
}

// notUTF8 is the error for the byte c, at offset, of a string that is not
// valid UTF-8.
func notUTF8(c byte, offset int) error {
	e := errorAt(offset, "string is not valid UTF-8: byte 0x%02x", c)
	e.notText = true
	return e
}

// loneSurrogate is the error for the escape esc, at offset, of a UTF-16
// surrogate without its pair.
func loneSurrogate(esc []byte, offset int) error {
	e := errorAt(offset, "string has a lone surrogate escape %s, which is not valid UTF-8: an escape "+
		"from \\ud800 to \\udfff must be a high surrogate (\\ud800-\\udbff) followed by a low one (\\udc00-\\udfff)", esc)
	e.notText = true
	return e
}

func hex4(b []byte) rune {
	return unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3])
}

// number reads a number. Integers that fit an int64 or a uint64 become
// msgpack integers in their shortest form; every other number becomes a
// float64.
func (s *JSONScanner) number(dst []byte, emit bool) ([]byte, error) {
	begin := s.pos
	integer := true
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case s.digits() == 0:
		return dst, s.Unexpected("in a number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		integer = false
		s.pos++
		if s.digits() == 0 {
			return dst, s.Unexpected("after a decimal point")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		integer = false
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return dst, s.Unexpected("in an exponent")
		}
	}
	if !emit {
		return dst, nil
	}
	text := s.data[begin:s.pos]
	if integer {
		switch u, neg, ok := parseMagnitude(text); {
		case ok && !neg:
			return appendUint(dst, u), nil
		case ok && u <= 1<<63:
			return appendInt(dst, -int64(u-1)-1), nil
		}
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || math.IsInf(f, 0) {
		return dst, errorAt(begin, "number %s is out of range", text)
	}
	return appendFloat64(dst, f), nil
}

func (s *JSONScanner) digits() int {
	n := 0
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

// parseMagnitude parses a validated JSON integer into its magnitude and
// sign; false when the magnitude overflows a uint64.
func parseMagnitude(text []byte) (u uint64, neg, ok bool) {
	neg = text[0] == '-'
	if neg {
		text = text[1:]
	}
	for _, c := range text {
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, neg, false
		}
		u = u*10 + d
	}
	return u, neg, true
}

// The msgpack header codes finishHeader writes.
type headerKind int

const (
	strHeader headerKind = iota
	arrayHeader
	mapHeader
)

// finishHeader writes the shortest header for n (elements, entries or
// bytes) in front of the content that follows the maxHeader placeholder at
// dst[start:], moving the content up when the header is shorter.
func finishHeader(dst []byte, start int, emit bool, n int, kind headerKind) []byte {
	if !emit {
		return dst
	}
	var hdr [maxHeader]byte
	var h []byte
	switch kind {
	case strHeader:
		h = appendStrHeader(hdr[:0], n)
	case arrayHeader:
		h = appendContainerHeader(hdr[:0], n, 0x90, 0xdc)
	case mapHeader:
		h = appendContainerHeader(hdr[:0], n, 0x80, 0xde)
	}
	copy(dst[start:], h)
	if shift := maxHeader - len(h); shift > 0 {
		content := start + maxHeader
		copy(dst[start+len(h):], dst[content:])
		dst = dst[:len(dst)-shift]
	}
	return dst
}

func appendStrHeader(dst []byte, n int) []byte {
	switch {
	case n < 32:
		return append(dst, 0xa0|byte(n))
	case n < 1<<8:
		return append(dst, 0xd9, byte(n))
	case n < 1<<16:
		return append(dst, 0xda, byte(n>>8), byte(n))
	}
	return append(dst, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendContainerHeader writes an array or map header: fix is the fixarray
// or fixmap code, code16 the 16-bit form's code (the 32-bit one follows it).
func appendContainerHeader(dst []byte, n int, fix, code16 byte) []byte {
	switch {
	case n < 16:
		return append(dst, fix|byte(n))
	case n < 1<<16:
		return append(dst, code16, byte(n>>8), byte(n))
	}
	return append(dst, code16+1, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendUint writes u in msgpack's shortest integer form.
func appendUint(dst []byte, u uint64) []byte {
	switch {
	case u < 128:
		return append(dst, byte(u))
	case u <= math.MaxUint8:
		return append(dst, 0xcc, byte(u))
	case u <= math.MaxUint16:
		return append(dst, 0xcd, byte(u>>8), byte(u))
	case u <= math.MaxUint32:
		return append(dst, 0xce, byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
	}
	return appendUint64(append(dst, 0xcf), u)
}

// appendInt writes v in msgpack's shortest integer form.
func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(dst, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return append(dst, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return appendUint64(append(dst, 0xd3), uint64(v))
}

func appendFloat64(dst []byte, f float64) []byte {
	return appendUint64(append(dst, 0xcb), math.Float64bits(f))
}

func appendUint64(dst []byte, u uint64) []byte {
	return append(dst, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32), byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
}

// JSONToMsgpack appends the msgpack encoding of the one JSON value in data
// to dst. It takes the texts encoding/json takes but for strings that are
// not valid UTF-8 or have a lone surrogate escape, which encoding/json
// changes to U+FFFD and it refuses. Integers that fit an int64 or a uint64
// become msgpack integers in their shortest form (18446744073709551615 a
// uint64, exact), other numbers float64; object keys keep their order.
// On error the returned slice holds a partial encoding.
func JSONToMsgpack(dst, data []byte) ([]byte, error) {
	s := JSONScanner{data: data}
	dst, err := s.value(dst, true, 0)
	if err != nil {
		return dst, err
	}
	return dst, s.end()
}
