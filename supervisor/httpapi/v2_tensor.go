package httpapi

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/numtext"
	"github.com/streamer-dev/streamer/internal/wire"
)

// This file holds the v2 datatypes and the conversions of their elements
// between JSON and the binary layout Tensor.Data describes.

// elementKind is how the elements of a datatype are read and written.
type elementKind uint8

const (
	kindBool elementKind = iota
	kindUint
	kindInt
	kindHalf
	kindFloat
	kindBytes
)

// dtype is a v2 datatype as the handler uses it.
type dtype struct {
	name string
	kind elementKind
	size int // bytes per element; 0 for BYTES, whose elements vary
}

// dtypeOf looks up a datatype by its v2 name, which is case-sensitive.
func dtypeOf(name []byte) (dtype, bool) {
	switch string(name) { // no allocation: the compiler compares in place
	case "BOOL":
		return dtype{"BOOL", kindBool, 1}, true
	case "UINT8":
		return dtype{"UINT8", kindUint, 1}, true
	case "UINT16":
		return dtype{"UINT16", kindUint, 2}, true
	case "UINT32":
		return dtype{"UINT32", kindUint, 4}, true
	case "UINT64":
		return dtype{"UINT64", kindUint, 8}, true
	case "INT8":
		return dtype{"INT8", kindInt, 1}, true
	case "INT16":
		return dtype{"INT16", kindInt, 2}, true
	case "INT32":
		return dtype{"INT32", kindInt, 4}, true
	case "INT64":
		return dtype{"INT64", kindInt, 8}, true
	case "FP16":
		return dtype{"FP16", kindHalf, 2}, true
	case "FP32":
		return dtype{"FP32", kindFloat, 4}, true
	case "FP64":
		return dtype{"FP64", kindFloat, 8}, true
	case "BYTES":
		return dtype{"BYTES", kindBytes, 0}, true
	}
	return dtype{}, false
}

// datatypeNames is named when a request gives a datatype the protocol lacks.
const datatypeNames = "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64 or BYTES"

// maxRank bounds the axes of a tensor, and the arrays nested in its JSON
// data: no framework goes past 64 (NumPy's limit).
const maxRank = 64

// elementCount is the number of elements of shape, false when an axis is
// negative or the product overflows.
func elementCount(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// formatShape writes shape as JSON, e.g. [2,3].
func formatShape(shape []int64) string {
	return string(appendShape(nil, shape))
}

func appendShape(dst []byte, shape []int64) []byte {
	dst = append(dst, '[')
	for i, d := range shape {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, d, 10)
	}
	return append(dst, ']')
}

// checkData says what is wrong with data as the elements of shape in the
// binary layout: its size for fixed-size types, the length prefixes of
// BYTES; "" when nothing is.
func checkData(dt dtype, shape []int64, data []byte) string {
	count, ok := elementCount(shape)
	if !ok {
		return "shape " + formatShape(shape) + " has a negative axis or too many elements"
	}
	if dt.kind != kindBytes {
		if want := int64(dt.size); count > math.MaxInt64/want || count*want != int64(len(data)) {
			return strconv.Itoa(len(data)) + " bytes of data do not match shape " + formatShape(shape) + " of " + dt.name +
				" (" + strconv.FormatInt(count, 10) + " elements of " + strconv.Itoa(dt.size) + " bytes)"
		}
		return ""
	}
	rest := data
	for i := int64(0); i < count; i++ {
		var problem string
		if _, rest, problem = nextBytesElement(rest); problem != "" {
			return "BYTES element " + strconv.FormatInt(i, 10) + " of " + strconv.FormatInt(count, 10) + " (shape " +
				formatShape(shape) + "): " + problem
		}
	}
	if len(rest) != 0 {
		return strconv.Itoa(len(rest)) + " bytes follow the last of the " + strconv.FormatInt(count, 10) +
			" BYTES elements of shape " + formatShape(shape)
	}
	return ""
}

// nextBytesElement splits the BYTES element that starts data from the
// rest; problem says why it cannot.
func nextBytesElement(data []byte) (element, rest []byte, problem string) {
	if len(data) < 4 {
		return nil, nil, "the 4-byte length prefix is cut short: " + strconv.Itoa(len(data)) + " bytes are left"
	}
	n := binary.LittleEndian.Uint32(data)
	if uint64(n) > uint64(len(data)-4) {
		return nil, nil, "the length prefix says " + strconv.FormatUint(uint64(n), 10) + " bytes, but " +
			strconv.Itoa(len(data)-4) + " are left"
	}
	return data[4 : 4+n], data[4+n:], ""
}

// skipBytesElements returns data after its first n BYTES elements, which
// checkData has vetted.
func skipBytesElements(data []byte, n int64) []byte {
	for ; n > 0; n-- {
		data = data[4+binary.LittleEndian.Uint32(data):]
	}
	return data
}

// tensorRef names the tensor an error is about: an input or output by name
// once its name is known, else by its place in the request.
type tensorRef struct {
	what  string // "input" or "output"
	index int
	name  []byte
}

func (r tensorRef) String() string {
	if r.name != nil {
		return r.what + " " + strconv.Quote(string(r.name))
	}
	return r.what + "s[" + strconv.Itoa(r.index) + "]"
}

// jsonDataReader converts the value of "data" into the binary layout,
// appending to dst. The elements are read in the order they come, as
// Triton reads them: inside arrays nested in any way (flat, one array per
// row, nested to the shape), or alone, for a tensor of one element. Only
// their count is checked against the shape, once the shape has been
// checked against the model's (see v2Input.checkData).
type jsonDataReader struct {
	// s is a copy of the caller's scanner, put back when done: a pointer
	// here would send the caller's scanner to the heap, as escape analysis
	// sees dst, which does escape, and s as one.
	s     wire.JSONScanner
	dt    dtype
	ref   tensorRef
	dst   []byte
	count int64 // elements read so far
}

// appendJSONData reads the data at s for the tensor ref of type dt,
// appends its elements in the binary layout to dst, and counts them.
func appendJSONData(dst []byte, s *wire.JSONScanner, dt dtype, ref tensorRef) ([]byte, int64, error) {
	d := jsonDataReader{s: *s, dt: dt, ref: ref, dst: dst}
	err := d.read()
	*s = d.s
	return d.dst, d.count, err
}

// countElements says "1 element" or "n elements".
func countElements(n int64) string {
	if n == 1 {
		return "1 element"
	}
	return strconv.FormatInt(n, 10) + " elements"
}

// read reads the value at the scanner: an element, or an array of
// elements and arrays, nested up to maxRank deep. It walks the nesting
// with a loop rather than by recursion, which would make the scanner
// escape to the heap.
func (d *jsonDataReader) read() error {
	depth := 0 // the arrays open around the scanner
	for {
		if d.s.Consume('[') {
			if depth++; depth > maxRank {
				return badRequest(d.ref.String() + `: "data" nests arrays more than ` + strconv.Itoa(maxRank) +
					" deep, deeper than a tensor has axes")
			}
			if !d.s.Consume(']') {
				continue // on to the array's first entry
			}
			depth-- // an empty array: a value like any other
		} else if err := d.element(depth); err != nil {
			return err
		}
		// After a value: close the arrays that end here, then go on to the
		// next entry of the innermost one still open.
		for {
			if depth == 0 {
				return nil
			}
			if d.s.Consume(',') {
				break
			}
			if !d.s.Consume(']') {
				return malformedJSON(d.s.Unexpected("after an array element"))
			}
			depth--
		}
	}
}

// element reads one element, inside depth arrays, and appends it in the
// binary layout.
func (d *jsonDataReader) element(depth int) error {
	text, err := d.s.Skip(depth)
	if err != nil {
		return malformedJSON(err)
	}
	var problem string
	switch d.dt.kind {
	case kindBool:
		problem = d.appendBool(text)
	case kindUint, kindInt:
		problem = d.appendInteger(text)
	case kindHalf, kindFloat:
		problem = d.appendFloat(text)
	case kindBytes:
		problem = d.appendBytes(text)
	}
	if problem != "" && depth == 0 {
		return badRequest(d.ref.String() + `: "data" ` + problem)
	}
	if problem != "" {
		return badRequest(d.ref.String() + ": element " + strconv.FormatInt(d.count, 10) + " " + problem)
	}
	d.count++
	return nil
}

func (d *jsonDataReader) appendBool(text []byte) string {
	switch string(text) {
	case "true":
		d.dst = append(d.dst, 1)
	case "false":
		d.dst = append(d.dst, 0)
	default:
		return "is " + describeValue(text) + ", not true or false (BOOL)"
	}
	return ""
}

// appendInteger appends an integer element, range-checked against the
// datatype. A number written with a fraction or exponent is taken when the
// text itself is a whole number (1.0, 2e3), judged digit by digit: no
// float's rounding may make 1.0000000000000000001 whole or change
// 9007199254740993.0.
func (d *jsonDataReader) appendInteger(text []byte) string {
	if !isNumber(text) {
		return "is " + describeValue(text) + ", not a whole number (" + d.dt.name + ")"
	}
	digits := string(text)
	if !isIntegerText(text) {
		var whole, huge bool
		digits, whole, huge = numtext.WholeDigits(digits)
		switch {
		case !whole:
			return "is " + string(text) + ", not a whole number (" + d.dt.name + ")"
		case huge:
			return "is " + string(text) + ", which does not fit " + d.dt.name
		}
	}
	bits := d.dt.size * 8
	var u uint64
	var err error
	if d.dt.kind == kindUint && digits[0] != '-' {
		u, err = strconv.ParseUint(digits, 10, bits)
	} else {
		var v int64
		v, err = strconv.ParseInt(digits, 10, bits)
		if d.dt.kind == kindUint && v != 0 { // -0 is 0; every other negative number is out of range
			err = strconv.ErrRange
		}
		u = uint64(v)
	}
	if err != nil {
		return "is " + string(text) + ", which does not fit " + d.dt.name
	}
	switch d.dt.size {
	case 1:
		d.dst = append(d.dst, byte(u))
	case 2:
		d.dst = binary.LittleEndian.AppendUint16(d.dst, uint16(u))
	case 4:
		d.dst = binary.LittleEndian.AppendUint32(d.dst, uint32(u))
	default:
		d.dst = binary.LittleEndian.AppendUint64(d.dst, u)
	}
	return ""
}

// appendFloat appends a floating-point element. null stands for NaN, since
// JSON has no NaN and the answers write NaN as null; a finite number too
// large for the datatype is refused rather than made infinite.
func (d *jsonDataReader) appendFloat(text []byte) string {
	if string(text) == "null" {
		switch {
		case d.dt.kind == kindHalf:
			d.dst = binary.LittleEndian.AppendUint16(d.dst, halfNaN)
		case d.dt.size == 4:
			d.dst = binary.LittleEndian.AppendUint32(d.dst, floatNaN)
		default:
			d.dst = binary.LittleEndian.AppendUint64(d.dst, doubleNaN)
		}
		return ""
	}
	if !isNumber(text) {
		return "is " + describeValue(text) + ", not a number (" + d.dt.name + ")"
	}
	if d.dt.kind == kindHalf {
		return d.appendHalf(text)
	}
	bits := d.dt.size * 8 // a float32 is parsed straight to 32 bits: one rounding, not two
	f, err := strconv.ParseFloat(string(text), bits)
	if err != nil {
		return "is " + string(text) + ", which does not fit " + d.dt.name
	}
	if bits == 32 {
		d.dst = binary.LittleEndian.AppendUint32(d.dst, math.Float32bits(float32(f)))
	} else {
		d.dst = binary.LittleEndian.AppendUint64(d.dst, math.Float64bits(f))
	}
	return ""
}

// appendHalf appends an FP16 element, rounded once from its text: through
// a float64, a text a hair off a midpoint between two halves would land on
// it.
func (d *jsonDataReader) appendHalf(text []byte) string {
	h, finite, err := numtext.ParseFloat16(string(text))
	switch {
	case err != nil:
		return "is " + string(text) + ", which does not fit " + d.dt.name
	case !finite:
		return "is " + string(text) + ", which does not fit " + d.dt.name + " (its largest value is 65504)"
	}
	d.dst = binary.LittleEndian.AppendUint16(d.dst, h)
	return ""
}

// appendBytes appends a BYTES element: the string's bytes after a 4-byte
// length. A string that is not text is refused, where encoding/json would
// change it: the model would get other bytes than the client meant.
func (d *jsonDataReader) appendBytes(text []byte) string {
	if text[0] != '"' {
		return "is " + describeValue(text) + ", not a string (BYTES)"
	}
	start := len(d.dst)
	d.dst = append(d.dst, 0, 0, 0, 0)
	raw := text[1 : len(text)-1]
	var bad, size int
	if d.dst, bad, size = appendText(d.dst, raw); bad >= 0 {
		d.dst = d.dst[:start]
		return notText(raw[bad : bad+size])
	}
	n := len(d.dst) - start - 4
	if uint64(n) > math.MaxUint32 {
		return "is longer than a BYTES element can be (4 GiB)"
	}
	binary.LittleEndian.PutUint32(d.dst[start:], uint32(n))
	return ""
}

// isNumber reports whether the validated JSON value text is a number.
func isNumber(text []byte) bool {
	return text[0] == '-' || '0' <= text[0] && text[0] <= '9'
}

// isIntegerText reports whether the JSON number text has neither a
// fraction nor an exponent.
func isIntegerText(text []byte) bool {
	return !bytes.ContainsAny(text, ".eE")
}

// describeValue names a JSON value in an error: short scalars as they are,
// the rest by kind.
func describeValue(text []byte) string {
	if len(text) <= 32 && text[0] != '[' && text[0] != '{' {
		return string(text)
	}
	return jsonKind(text)
}

// notText says why the BYTES element whose part bad (a byte, or an
// escape) is not text is refused.
func notText(bad []byte) string {
	return notTextWhy(bad) + "; send bytes that are not text as binary data (a binary_data_size parameter)"
}

// notTextWhy says why a string whose part bad (a byte, or an escape) is
// not text is refused.
func notTextWhy(bad []byte) string {
	if bad[0] == '\\' {
		return "is a string with a lone surrogate escape " + string(bad) + ", which is not valid UTF-8: an escape from " +
			`\ud800 to \udfff must be a high surrogate (\ud800-\udbff) followed by a low one (\udc00-\udfff)`
	}
	return "is a string that is not valid UTF-8 (byte 0x" + strconv.FormatUint(uint64(bad[0]), 16) + ")"
}

// appendText appends the text of a JSON string body (syntax-checked, its
// quotes removed) with its escapes decoded, up to the first byte that is
// not UTF-8 or the first lone surrogate escape, which have no text to
// decode to: bad is its index in raw and size its length (1 or 6), or bad
// is -1 when raw has neither.
func appendText(dst, raw []byte) (out []byte, bad, size int) {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return append(dst, raw...), -1, 0
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			r, next, ok := unescape(raw, i)
			if !ok {
				return dst, i, next - i
			}
			dst = utf8.AppendRune(dst, r)
			i = next
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				return dst, i, 1
			}
			dst = append(dst, raw[i:i+n]...)
			i += n
		}
	}
	return dst, -1, 0
}

// unescape decodes the syntax-checked escape at raw[i] and returns its
// rune and the index after it. A surrogate pair is joined; a lone
// surrogate is not ok, next being the index after its escape.
func unescape(raw []byte, i int) (r rune, next int, ok bool) {
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
		if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
			if joined := utf16.DecodeRune(r, hex4(raw[i+2:])); joined != utf8.RuneError {
				return joined, i + 6, true
			}
		}
		return 0, i, false
	}
	return rune(raw[i+1]), i + 2, true // \" \\ \/
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// appendJSONString writes s as a JSON string, with U+FFFD for each byte
// that is not UTF-8, as encoding/json writes it: for names and the id,
// which the server or the client chose as text. A BYTES element of an
// answer that is not text is refused instead (appendJSONElements).
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	for {
		var bad int
		if dst, bad = appendJSONChars(dst, s); bad < 0 {
			return append(dst, '"')
		}
		dst = append(dst, `\ufffd`...)
		s = s[bad+1:]
	}
}

// appendJSONChars writes s escaped as a JSON string's characters are, up
// to the first byte that is not UTF-8, which no JSON string can hold: bad
// is its index, or -1 when there is none.
func appendJSONChars(dst, s []byte) (out []byte, bad int) {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
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
			return append(dst, s[start:i]...), i
		}
		i += size
	}
	return append(dst, s[start:]...), -1
}

func appendJSONStringText(dst []byte, s string) []byte {
	// The compiler makes no copy of s: the conversion is neither kept nor
	// written to.
	return appendJSONString(dst, []byte(s))
}

// appendJSONElements appends the elements of data, a tensor of dt in the
// binary layout that checkData has vetted, as comma-separated JSON values;
// first says whether one has been written before them. It stops at the
// first BYTES element that is not valid UTF-8, which a JSON string cannot
// hold but changed: bad is its index, or -1 when there is none.
func appendJSONElements(dst []byte, dt dtype, data []byte, first bool) (out []byte, bad int64) {
	for i := int64(0); len(data) > 0; i++ {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		switch dt.kind {
		case kindBool:
			if data[0] != 0 {
				dst = append(dst, "true"...)
			} else {
				dst = append(dst, "false"...)
			}
		case kindUint:
			dst = strconv.AppendUint(dst, readUint(data, dt.size), 10)
		case kindInt:
			dst = strconv.AppendInt(dst, readInt(data, dt.size), 10)
		case kindHalf:
			dst = appendJSONFloat(dst, float64(halfToFloat32(binary.LittleEndian.Uint16(data))), 32)
		case kindFloat:
			if dt.size == 4 {
				dst = appendJSONFloat(dst, float64(math.Float32frombits(binary.LittleEndian.Uint32(data))), 32)
			} else {
				dst = appendJSONFloat(dst, math.Float64frombits(binary.LittleEndian.Uint64(data)), 64)
			}
		case kindBytes:
			var element []byte
			element, data, _ = nextBytesElement(data)
			var at int
			if dst, at = appendJSONChars(append(dst, '"'), element); at >= 0 {
				return dst, i
			}
			dst = append(dst, '"')
			continue
		}
		data = data[dt.size:]
	}
	return dst, -1
}

// notJSONText refuses to write the element bad of the output called name,
// BYTES that are not valid UTF-8, as JSON: the client asks for it as binary
// data, which holds any bytes, rather than get U+FFFD in their place.
func notJSONText(name string, bad int64) error {
	return badRequest("output " + strconv.Quote(name) + ": element " + strconv.FormatInt(bad, 10) +
		" is bytes that are not valid UTF-8, which a JSON string cannot hold; ask for the output as binary data " +
		`("binary_data": true in its "parameters", or "binary_data_output": true in the request's)`)
}

func readUint(b []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func readInt(b []byte, size int) int64 {
	switch size {
	case 1:
		return int64(int8(b[0]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// appendJSONFloat writes f as encoding/json does (plain decimals, an
// exponent below 1e-6 and from 1e21, the shortest text that reads back as
// the same value of its size), and NaN and ±Inf, which JSON cannot hold,
// as null.
func appendJSONFloat(dst []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
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

// The quiet NaNs of IEEE 754 half, single and double precision that null
// reads as: the canonical ones, the top bit of the fraction alone set, as
// numpy writes NaN. (Go's math.NaN() sets the lowest bit as well.)
const (
	halfNaN   = 0x7e00
	floatNaN  = 0x7fc00000
	doubleNaN = 0x7ff8000000000000
)

// halfToFloat32 widens the IEEE 754 half h exactly.
func halfToFloat32(h uint16) float32 {
	return float32(numtext.Float16Frombits(h))
}

// quoteNames lists names for an error: "a", "b".
func quoteNames(specs []TensorSpec) string {
	if len(specs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, s := range specs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(s.Name))
	}
	return b.String()
}

// growBytes returns b with room for n more bytes, allocated once: where
// slices.Grow may allocate the room twice over (built with -race, it does).
func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	grown := make([]byte, len(b), len(b)+n)
	copy(grown, b)
	return grown
}
