package onnxio

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/streamer-dev/streamer/internal/numtext"
	"github.com/streamer-dev/streamer/internal/wire"
)

// builder fills one input tensor from nested arrays, learning and checking
// the shape as it goes. Nesting is bounded by the input's rank, so a deeply
// nested body is refused at the first level too many.
type builder struct {
	port  *Port
	rank  int
	shape []int64 // lengths per depth, -1 until seen
	index []int   // position of the current value, for messages
	data  []byte
	// detail says what is wrong with the structure, after errShape.
	detail string
}

// errShape marks a structure that does not match the input's rank or is
// ragged; the caller reports the shape that was sent.
var errShape = errors.New("shape mismatch")

func newBuilder(p *Port) *builder {
	b := &builder{port: p, rank: len(p.ItemShape)}
	b.shape = make([]int64, b.rank)
	for i := range b.shape {
		b.shape[i] = -1
	}
	b.index = make([]int, 0, b.rank)
	n := int64(1)
	for _, d := range p.ItemShape {
		if !d.Dynamic() {
			n *= d.Size
		}
	}
	if n > 0 && n < 1<<20 {
		b.data = make([]byte, 0, n*int64(p.DType.Size()))
	}
	return b
}

// enter is called where an array starts, before its length is known: an
// array nested deeper than the input's rank is refused before its contents
// are read.
func (b *builder) enter() error {
	if len(b.index) >= b.rank {
		return errShape
	}
	return nil
}

// array is called for an array of n elements at the current depth, before
// its elements are read when n is known up front (msgpack), after them
// otherwise (JSON).
func (b *builder) array(n int) error {
	depth := len(b.index)
	if depth >= b.rank {
		return errShape
	}
	d := b.port.ItemShape[depth]
	switch {
	case b.shape[depth] >= 0 && b.shape[depth] != int64(n):
		b.detail = fmt.Sprintf(" with rows of different lengths along axis %d (%d and %d)", depth, b.shape[depth], n)
		return errShape
	case n == 0 || !d.Dynamic() && int64(n) != d.Size:
		return errShape
	}
	b.shape[depth] = int64(n)
	return nil
}

// leaf checks that a value sits at the innermost depth.
func (b *builder) leaf() error {
	if len(b.index) != b.rank {
		if len(b.index) > 0 {
			b.detail = " with a single value at " + b.at() + " where an array belongs"
		}
		return errShape
	}
	return nil
}

func (b *builder) push(i int) { b.index = append(b.index, i) }
func (b *builder) pop()       { b.index = b.index[:len(b.index)-1] }

// at writes the current position as "[1, 2]".
func (b *builder) at() string {
	parts := make([]string, len(b.index))
	for i, x := range b.index {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// misfit reports a value that does not fit the input's dtype.
func (b *builder) misfit(value string) error {
	at := ""
	if len(b.index) > 0 {
		at = " at " + b.at()
	}
	return fmt.Errorf("input %q: want %s; got %s%s, which does not fit %s", b.port.Name, b.port.describe(), value, at, b.port.DType)
}

// tensor finishes the tensor and checks it against the declared item shape.
func (b *builder) tensor() (Tensor, error) {
	t := Tensor{DType: b.port.DType, Shape: b.shape, Data: b.data}
	for k, d := range b.port.ItemShape {
		if t.Shape[k] == 0 || !d.Dynamic() && t.Shape[k] != d.Size {
			return t, b.wrongShape(shapeString(t.Shape))
		}
	}
	return t, nil
}

func (b *builder) wrongShape(sent string) error {
	extra := ""
	if b.rank > 0 {
		extra = ", every axis at least 1 long"
	}
	return fmt.Errorf("input %q: want %s (rank %d%s); got %s", b.port.Name, b.port.describe(), b.rank, extra, sent)
}

func shapeString(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "shape [" + strings.Join(parts, ", ") + "]"
}

// parseJSON reads one input's value: nested JSON arrays of numbers (or
// booleans), a bare number for a rank-0 input.
func parseJSON(p *Port, raw []byte) (Tensor, error) {
	b := newBuilder(p)
	w := jsonWalker{b: b, s: wire.NewJSONScanner(raw)}
	err := w.value()
	if err == nil {
		if c, more := w.s.Peek(); more {
			err = fmt.Errorf("input %q: unexpected %q after the value", p.Name, c)
		}
	}
	if errors.Is(err, errShape) {
		return Tensor{}, b.wrongShape(describeJSON(raw) + b.detail)
	}
	if err != nil {
		return Tensor{}, err
	}
	return b.tensor()
}

// jsonWalker fills a builder from JSON, through a wire.JSONScanner.
type jsonWalker struct {
	b *builder
	s wire.JSONScanner
}

func (w *jsonWalker) value() error {
	c, ok := w.s.Peek()
	if !ok {
		return fmt.Errorf("input %q: the value ends too early", w.b.port.Name)
	}
	switch {
	case c == '[':
		return w.array()
	case c == '-' || '0' <= c && c <= '9':
		return w.number()
	case c == 't' || c == 'f':
		return w.boolean()
	case c == 'n':
		if err := w.b.leaf(); err != nil {
			return err
		}
		return w.b.misfit("null")
	}
	if len(w.b.index) == 0 {
		return errShape // a string or an object where the input was expected
	}
	return w.b.misfit("a " + jsonKindOf(c))
}

// malformed wraps an error of the scanner's.
func (w *jsonWalker) malformed(err error) error {
	return fmt.Errorf("input %q: %w", w.b.port.Name, err)
}

// array reads an array's elements, then checks its length: JSON does not
// say how long an array is before its end, and counting first would read
// it twice.
func (w *jsonWalker) array() error {
	if err := w.b.enter(); err != nil {
		return err
	}
	w.s.Consume('[')
	n := 0
	if !w.s.Consume(']') {
		for more := true; more; n++ {
			w.b.push(n)
			if err := w.value(); err != nil {
				return err
			}
			w.b.pop()
			switch {
			case w.s.Consume(']'):
				more = false
			case !w.s.Consume(','):
				return w.malformed(w.s.Unexpected("after an array element"))
			}
		}
	}
	return w.b.array(n)
}

// countElements counts the elements of the array that starts at s, which
// it validates; s is a copy, so the caller's scanner does not move. depth
// is the number of arrays around this one. Only error messages need it.
func countElements(s wire.JSONScanner, depth int) (int, error) {
	s.Consume('[')
	if s.Consume(']') {
		return 0, nil
	}
	for n := 1; ; n++ {
		if _, err := s.Skip(depth + 1); err != nil {
			return 0, err
		}
		if s.Consume(',') {
			continue
		}
		if s.Consume(']') {
			return n, nil
		}
		return 0, s.Unexpected("after an array element")
	}
}

func (w *jsonWalker) number() error {
	text, err := w.s.Skip(len(w.b.index))
	if err != nil {
		return w.malformed(err)
	}
	if err := w.b.leaf(); err != nil {
		return err
	}
	var ok bool
	w.b.data, ok, err = appendJSONNumber(w.b.data, w.b.port.DType, string(text))
	if err != nil {
		return fmt.Errorf("input %q: malformed number %q", w.b.port.Name, text)
	}
	if !ok {
		return w.b.misfit(string(text))
	}
	return nil
}

func (w *jsonWalker) boolean() error {
	text, err := w.s.Skip(len(w.b.index))
	if err != nil {
		return w.malformed(err)
	}
	if err := w.b.leaf(); err != nil {
		return err
	}
	v := string(text) == "true"
	var ok bool
	if w.b.data, ok = appendBool(w.b.data, w.b.port.DType, v); !ok {
		return w.b.misfit(strconv.FormatBool(v))
	}
	return nil
}

// appendJSONNumber converts a JSON number's text. A float32 input parses the
// text at 32 bits and a float16 input rounds it exactly, so that the value is
// rounded once. An integer input takes a text with a fraction or an exponent
// when the text itself is a whole number, read digit by digit: through a
// float64, 9007199254740993.0 would lose its last digit and
// 1.0000000000000001 would pass as whole.
func appendJSONNumber(dst []byte, d DType, text string) ([]byte, bool, error) {
	if text == "" || text[0] == '+' {
		return dst, false, errors.New("malformed")
	}
	switch d {
	case Float16:
		h, finite, err := numtext.ParseFloat16(text)
		if err != nil || !finite {
			return dst, false, rangeOrSyntax(err)
		}
		return appendU16(dst, h), true, nil
	case Float32:
		f, err := strconv.ParseFloat(text, 32)
		if err != nil {
			return dst, false, rangeOrSyntax(err)
		}
		dst, ok := appendFloat32(dst, d, float32(f))
		return dst, ok, nil
	case Float64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return dst, false, rangeOrSyntax(err)
		}
		dst, ok := appendFloat(dst, d, f)
		return dst, ok, nil
	}
	if strings.ContainsAny(text, ".eE") {
		digits, whole, huge := numtext.WholeDigits(text)
		if !whole || huge {
			return dst, false, nil
		}
		text = digits
	}
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		dst, ok := appendInt(dst, d, i)
		return dst, ok, nil
	} else if !errors.Is(err, strconv.ErrRange) {
		return dst, false, err
	}
	if u, err := strconv.ParseUint(text, 10, 64); err == nil {
		dst, ok := appendUint(dst, d, u)
		return dst, ok, nil
	}
	return dst, false, nil // a whole number beyond 64 bits fits nothing integral
}

// rangeOrSyntax turns an out-of-range parse into "does not fit" (nil) and
// keeps a syntax error.
func rangeOrSyntax(err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return nil
	}
	return err
}

// describeJSON says what shape a JSON value has, for an error message: the
// lengths along its first elements, or what else it is.
func describeJSON(raw []byte) string {
	s := wire.NewJSONScanner(raw)
	var shape []int64
	for depth := 0; depth <= maxRank; depth++ {
		c, ok := s.Peek()
		if !ok {
			return "nothing"
		}
		if c != '[' {
			if depth == 0 {
				return "a " + jsonKindOf(c)
			}
			return shapeString(shape)
		}
		n, err := countElements(s, depth)
		if err != nil {
			return "malformed JSON"
		}
		shape = append(shape, int64(n))
		if n == 0 {
			return shapeString(shape)
		}
		s.Consume('[')
	}
	return "arrays nested more than " + strconv.Itoa(maxRank) + " deep"
}

func jsonKindOf(c byte) string {
	switch c {
	case '{':
		return "JSON object"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '[':
		return "array"
	}
	return "number"
}

// parseMsgpack reads one input's value from msgpack: nested arrays of
// numbers, a bare number for a rank-0 input, or a tensor map
// {"dtype", "shape", "data"}.
func parseMsgpack(p *Port, r reader) (Tensor, error) {
	c, err := r.PeekCode()
	if err != nil {
		return Tensor{}, fmt.Errorf("input %q: %w", p.Name, err)
	}
	if wire.IsMap(c) {
		t, err := r.tensorMap()
		if err != nil {
			return t, fmt.Errorf("input %q: %w", p.Name, err)
		}
		return t, checkTensor(p, t)
	}
	start := r.Offset()
	b := newBuilder(p)
	err = b.msgpack(r)
	if errors.Is(err, errShape) {
		return Tensor{}, b.wrongShape(describeMsgpack(r.data[start:]) + b.detail)
	}
	if err != nil {
		return Tensor{}, err
	}
	return b.tensor()
}

func (b *builder) msgpack(r reader) error {
	c, err := r.PeekCode()
	if err != nil {
		return fmt.Errorf("input %q: %w", b.port.Name, err)
	}
	if wire.IsArray(c) {
		n, err := r.arrayLen()
		if err != nil {
			return fmt.Errorf("input %q: %w", b.port.Name, err)
		}
		if err := b.array(n); err != nil {
			return err
		}
		for i := range n {
			b.push(i)
			if err := b.msgpack(r); err != nil {
				return err
			}
			b.pop()
		}
		return nil
	}
	if err := b.leaf(); err != nil {
		return err
	}
	return b.msgpackScalar(r, c)
}

func (b *builder) msgpackScalar(r reader, c byte) error {
	var ok bool
	var text string
	switch {
	case msgpcode.IsFixedNum(c) || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64:
		v, err := r.Decoder().DecodeInt64()
		if err != nil {
			return fmt.Errorf("input %q: %w", b.port.Name, err)
		}
		b.data, ok = appendInt(b.data, b.port.DType, v)
		text = strconv.FormatInt(v, 10)
	case c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64:
		v, err := r.Decoder().DecodeUint64()
		if err != nil {
			return fmt.Errorf("input %q: %w", b.port.Name, err)
		}
		b.data, ok = appendUint(b.data, b.port.DType, v)
		text = strconv.FormatUint(v, 10)
	case c == msgpcode.Float:
		v, err := r.Decoder().DecodeFloat32()
		if err != nil {
			return fmt.Errorf("input %q: %w", b.port.Name, err)
		}
		b.data, ok = appendFloat32(b.data, b.port.DType, v)
		text = strconv.FormatFloat(float64(v), 'g', -1, 32)
	case c == msgpcode.Double:
		v, err := r.Decoder().DecodeFloat64()
		if err != nil {
			return fmt.Errorf("input %q: %w", b.port.Name, err)
		}
		b.data, ok = appendFloat(b.data, b.port.DType, v)
		text = strconv.FormatFloat(v, 'g', -1, 64)
	case c == msgpcode.True || c == msgpcode.False:
		v, err := r.Decoder().DecodeBool()
		if err != nil {
			return fmt.Errorf("input %q: %w", b.port.Name, err)
		}
		b.data, ok = appendBool(b.data, b.port.DType, v)
		text = strconv.FormatBool(v)
	default:
		if len(b.index) == 0 {
			return errShape
		}
		return b.misfit(wire.KindOf(c))
	}
	if !ok {
		return b.misfit(text)
	}
	return nil
}

// describeMsgpack says what shape a msgpack value has, for an error message.
func describeMsgpack(data []byte) string {
	r := newReader(data)
	defer r.Release()
	var shape []int64
	for depth := 0; depth <= maxRank; depth++ {
		c, err := r.PeekCode()
		if err != nil {
			return "malformed msgpack"
		}
		if !wire.IsArray(c) {
			if depth == 0 {
				return wire.KindOf(c)
			}
			return shapeString(shape)
		}
		n, err := r.arrayLen()
		if err != nil {
			return "malformed msgpack"
		}
		shape = append(shape, int64(n))
		if n == 0 {
			return shapeString(shape)
		}
	}
	return "arrays nested more than " + strconv.Itoa(maxRank) + " deep"
}
