package httpapi

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/wire"
)

// This file reads the JSON of a v2 inference request:
//
//	{"id": "...", "parameters": {...},
//	 "inputs": [{"name", "shape", "datatype", "data" | "parameters": {"binary_data_size": N}}, ...],
//	 "outputs": [{"name", "parameters": {"binary_data": bool}}, ...]}
//
// with a wire.JSONScanner, as /predict's bodies are read: no Go values are
// built for the data, whose elements go straight into the binary layout.

// v2Input is one entry of a request's "inputs".
type v2Input struct {
	name     []byte // nil until read; points into the body unless escaped
	datatype []byte
	dtype    dtype
	shape    []int64 // into inferState.dims once the request is read
	shapeAt  int     // where shape starts in dims; -1 while missing
	rank     int
	// raw is the text of "data" when it came before "datatype" and could
	// not be converted as it was read.
	raw []byte
	// dataAt and dataEnd locate the converted "data" in inferState.arena;
	// elements counts its elements.
	dataAt, dataEnd int
	elements        int64
	hasData         bool
	binarySize      int64 // -1 without binary_data_size
	// dataName names where the data came from in the refusals of
	// checkData, when not "data" or binary data: the gRPC fields.
	dataName string
	// data is the tensor in the binary layout: a slice of the arena or of
	// the body's binary part.
	data []byte
}

// v2Output is one entry of a request's "outputs".
type v2Output struct {
	name   []byte
	binary int8 // binary_data: 0 when not given, 1 true, -1 false
}

// v2Request is a read inference request.
type v2Request struct {
	id           []byte // the JSON text of "id", a string; nil when missing
	timeout      time.Duration
	binaryOutput bool // the binary_data_output parameter
	inputs       []v2Input
	outputs      []v2Output
}

// malformedJSON is the refusal of a JSON body for the scanner's err: a
// body malformed, or, well formed, with a string that is not text.
func malformedJSON(err error) error {
	if errors.Is(err, wire.ErrNotText) {
		return badRequest("JSON body: " + err.Error())
	}
	return badRequest("malformed JSON body: " + err.Error())
}

// field names a part of the request in errors: a top-level member, or a
// member of an input or output. It is built into a string only for an
// error, so that the hot path does not pay for the message.
type field struct {
	ref  tensorRef // what is "" for a top-level member
	name string
}

func (f field) String() string {
	switch {
	case f.ref.what == "":
		return f.name
	case f.name == "":
		return f.ref.String()
	}
	return f.ref.String() + ": " + f.name
}

func topField(name string) field { return field{name: name} }

// eachMember walks the object at s, calling member with each key; member
// reads the value. what names the object in errors. null is an object
// without members (see skipNull).
func eachMember(s *wire.JSONScanner, what field, depth int, member func(key []byte) error) error {
	if c, ok := s.Peek(); ok && c != '{' {
		value, err := s.Skip(depth)
		if err != nil {
			return malformedJSON(err)
		}
		if string(value) == "null" {
			return nil
		}
		return badRequest(what.String() + " must be a JSON object, not " + jsonKind(value))
	}
	if !s.Consume('{') {
		return malformedJSON(s.Unexpected("looking for " + what.String()))
	}
	if s.Consume('}') {
		return nil
	}
	for {
		key, err := s.Key()
		if err != nil {
			return malformedJSON(err)
		}
		if err := member(key); err != nil {
			return err
		}
		if s.Consume(',') {
			continue
		}
		if s.Consume('}') {
			return nil
		}
		return malformedJSON(s.Unexpected("after an object value"))
	}
}

// eachElement walks the array at s, calling element with each index;
// element reads the value. null is an empty array.
func eachElement(s *wire.JSONScanner, what field, depth int, element func(i int) error) error {
	if c, ok := s.Peek(); ok && c != '[' {
		value, err := s.Skip(depth)
		if err != nil {
			return malformedJSON(err)
		}
		if string(value) == "null" {
			return nil
		}
		return badRequest(what.String() + " must be an array, not " + jsonKind(value))
	}
	if !s.Consume('[') {
		return malformedJSON(s.Unexpected("looking for " + what.String()))
	}
	if s.Consume(']') {
		return nil
	}
	for i := 0; ; i++ {
		if err := element(i); err != nil {
			return err
		}
		if s.Consume(',') {
			continue
		}
		if s.Consume(']') {
			return nil
		}
		return malformedJSON(s.Unexpected("after an array element"))
	}
}

// skipNull moves past the value at s if it is null, and reports whether
// it was. Every optional member is read as absent when null, as clients
// built on Pydantic models send the optional fields they leave unset.
func skipNull(s *wire.JSONScanner, depth int) (bool, error) {
	if c, ok := s.Peek(); !ok || c != 'n' {
		return false, nil
	}
	if _, err := s.Skip(depth); err != nil {
		return false, malformedJSON(err)
	}
	return true, nil
}

// stringValue reads a string and returns its text, a slice of the body
// unless it has escapes or invalid UTF-8.
func stringValue(s *wire.JSONScanner, what field, depth int) ([]byte, error) {
	text, err := s.Skip(depth)
	if err != nil {
		return nil, malformedJSON(err)
	}
	if text[0] != '"' {
		return nil, badRequest(what.String() + " must be a string, not " + jsonKind(text))
	}
	raw := text[1 : len(text)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw, nil
	}
	out, bad, size := appendText(nil, raw)
	if bad >= 0 {
		return nil, badRequest(what.String() + " " + notTextWhy(raw[bad:bad+size]))
	}
	return out, nil
}

// intValue reads a whole number that fits an int64.
func intValue(s *wire.JSONScanner, what field, depth int) (int64, error) {
	text, err := s.Skip(depth)
	if err != nil {
		return 0, malformedJSON(err)
	}
	if !isNumber(text) || !isIntegerText(text) {
		return 0, badRequest(what.String() + " must be a whole number, not " + describeValue(text))
	}
	n, ok := parseIntText(text)
	if !ok {
		return 0, badRequest(what.String() + " is " + describeValue(text) + ", past what a 64-bit integer holds")
	}
	return n, nil
}

// boolValue reads true or false.
func boolValue(s *wire.JSONScanner, what field, depth int) (bool, error) {
	text, err := s.Skip(depth)
	if err != nil {
		return false, malformedJSON(err)
	}
	switch string(text) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badRequest(what.String() + " must be true or false, not " + describeValue(text))
}

// skipValue moves past a value the handler ignores.
func skipValue(s *wire.JSONScanner, depth int) error {
	if _, err := s.Skip(depth); err != nil {
		return malformedJSON(err)
	}
	return nil
}

// parse reads the request's JSON into st.req, converting the inputs'
// data into st.arena. binary says the request gave the JSON's length in
// an Inference-Header-Content-Length header.
func (st *inferState) parse(body []byte, binary bool) error {
	s := wire.NewJSONScanner(body)
	if c, ok := s.Peek(); ok && c != '{' {
		value, err := s.Skip(0)
		if err != nil {
			return malformedJSON(err)
		}
		return badRequest(`body must be a JSON object {"inputs": [...]}, not ` + jsonKind(value))
	}
	seenInputs, seenOutputs := false, false
	err := eachMember(&s, topField("the request"), 0, func(key []byte) error {
		switch string(key) {
		case "id":
			if null, err := skipNull(&s, 1); null || err != nil {
				return err
			}
			text, err := s.Skip(1)
			if err != nil {
				return malformedJSON(err)
			}
			if text[0] != '"' {
				return badRequest(`"id" must be a string, not ` + jsonKind(text))
			}
			// Echoed as it came: text, or refused rather than changed.
			if raw := text[1 : len(text)-1]; !utf8.Valid(raw) || bytes.IndexByte(raw, '\\') >= 0 {
				if _, bad, size := appendText(nil, raw); bad >= 0 {
					return badRequest(`"id" ` + notTextWhy(raw[bad:bad+size]))
				}
			}
			st.req.id = text
			return nil
		case "parameters":
			return eachMember(&s, topField(`"parameters"`), 1, func(key []byte) error { return st.requestParameter(&s, key) })
		case "inputs":
			if seenInputs {
				return badRequest(`"inputs" is given twice`)
			}
			seenInputs = true
			return eachElement(&s, topField(`"inputs"`), 1, func(i int) error { return st.parseInput(&s, i) })
		case "outputs":
			if seenOutputs {
				return badRequest(`"outputs" is given twice`)
			}
			seenOutputs = true
			return eachElement(&s, topField(`"outputs"`), 1, func(i int) error { return st.parseOutput(&s, i) })
		}
		return skipValue(&s, 1)
	})
	if err != nil {
		return err
	}
	if err := s.End(); err != nil {
		if !binary {
			if err := st.binaryWithoutHeader(); err != nil {
				return err
			}
		}
		return malformedJSON(err)
	}
	if !seenInputs {
		return badRequest(`missing "inputs": send {"inputs": [{"name", "shape", "datatype", "data"}, ...]}`)
	}
	return st.finishInputs()
}

// maxTimeoutMicros is the longest timeout a time.Duration holds.
const maxTimeoutMicros = math.MaxInt64 / int64(time.Microsecond)

// timeoutParameter reads the request's "timeout": a whole number of
// microseconds, at most maxTimeoutMicros, 0 for none (as Triton reads it);
// the message says which rule the value breaks.
func timeoutParameter(s *wire.JSONScanner) (time.Duration, error) {
	const what = `parameter "timeout"`
	text, err := s.Skip(2)
	if err != nil {
		return 0, malformedJSON(err)
	}
	if !isNumber(text) || !isIntegerText(text) {
		return 0, badRequest(what + " (microseconds) must be a whole number, not " + describeValue(text))
	}
	// The text is a JSON integer, so the only error is one of range.
	us, err := strconv.ParseInt(string(text), 10, 64)
	switch {
	case us < 0:
		return 0, badRequest(what + " must be 0 (none) or a positive number of microseconds, not " + describeValue(text))
	case err != nil || us > maxTimeoutMicros:
		return 0, badRequest(what + " " + describeValue(text) + " is out of range: at most " + strconv.FormatInt(maxTimeoutMicros, 10) + " microseconds")
	}
	return time.Duration(us) * time.Microsecond, nil
}

// requestParameter reads one of the request's parameters: timeout (in
// microseconds), binary_data_output, and priority, which is checked and
// ignored, since the batcher has no priorities. A request of a sequence
// (a sequence_id but 0 or "", or sequence_start or sequence_end true) is
// refused: a stateful model's client would take answers served without
// its sequence's state for right ones. Others, and any that is null, are
// ignored.
func (st *inferState) requestParameter(s *wire.JSONScanner, key []byte) error {
	if null, err := skipNull(s, 2); null || err != nil {
		return err
	}
	switch string(key) {
	case "sequence_id", "sequence_start", "sequence_end":
		text, err := s.Skip(2)
		if err != nil {
			return malformedJSON(err)
		}
		if string(text) == "0" || string(text) == `""` || string(text) == "false" {
			return nil // not a sequence's
		}
		return sequenceRefusal(string(key))
	case "timeout":
		var err error
		st.req.timeout, err = timeoutParameter(s)
		return err
	case "priority":
		_, err := intValue(s, topField(`parameter "priority"`), 2)
		return err
	case "binary_data_output":
		var err error
		st.req.binaryOutput, err = boolValue(s, topField(`parameter "binary_data_output"`), 2)
		return err
	}
	return skipValue(s, 2)
}

// inputKeys are the keys of an input that parseInput reads.
var inputKeys = [...]string{"name", "datatype", "shape", "data", "parameters"}

// parseInput reads inputs[i].
func (st *inferState) parseInput(s *wire.JSONScanner, i int) error {
	st.req.inputs = append(st.req.inputs, v2Input{shapeAt: -1, binarySize: -1})
	in := &st.req.inputs[len(st.req.inputs)-1]
	ref := tensorRef{what: "input", index: i}
	var seen [len(inputKeys)]bool
	err := eachMember(s, field{ref: ref}, 2, func(key []byte) error {
		ref.name = in.name
		// A key given again would change what the data already read was
		// checked and converted against.
		for k, name := range inputKeys {
			if string(key) == name {
				if seen[k] {
					return badRequest(ref.String() + `: "` + name + `" is given twice`)
				}
				seen[k] = true
			}
		}
		var err error
		switch string(key) {
		case "name":
			in.name, err = stringValue(s, field{ref, `"name"`}, 3)
		case "datatype":
			if in.datatype, err = stringValue(s, field{ref, `"datatype"`}, 3); err == nil {
				err = in.resolveDatatype(ref)
			}
		case "shape":
			// A null shape is none: "missing", not the shape of a scalar.
			var null bool
			if null, err = skipNull(s, 3); !null && err == nil {
				err = st.parseShape(s, in, ref)
			}
		case "data":
			err = st.parseData(s, in, ref)
		case "parameters":
			err = eachMember(s, field{ref, `"parameters"`}, 3, func(key []byte) error {
				if null, err := skipNull(s, 4); null || err != nil {
					return err
				}
				if sharedMemoryParameter(key) {
					return refuseSharedMemory(s, ref)
				}
				if string(key) != "binary_data_size" {
					return skipValue(s, 4)
				}
				n, err := intValue(s, field{ref, "binary_data_size"}, 4)
				if err == nil && n < 0 {
					err = badRequest(ref.String() + ": binary_data_size must not be negative, got " + strconv.FormatInt(n, 10))
				}
				in.binarySize = n
				return err
			})
		default:
			err = skipValue(s, 3)
		}
		return err
	})
	if err != nil {
		return err
	}
	ref.name = in.name
	switch {
	case in.name == nil:
		return badRequest(ref.String() + `: missing "name"`)
	case in.datatype == nil:
		return badRequest(ref.String() + `: missing "datatype"`)
	case in.shapeAt < 0:
		return badRequest(ref.String() + `: missing "shape"`)
	case in.hasData && in.binarySize >= 0:
		return badRequest(ref.String() + ` has both "data" and a binary_data_size parameter; send one`)
	case !in.hasData && in.binarySize < 0:
		return badRequest(ref.String() + ` has neither "data" nor a binary_data_size parameter`)
	}
	return nil
}

func (in *v2Input) resolveDatatype(ref tensorRef) error {
	var ok bool
	if in.dtype, ok = dtypeOf(in.datatype); !ok {
		return badRequest(ref.String() + ": unknown datatype " + strconv.Quote(string(in.datatype)) + "; the datatypes are " + datatypeNames)
	}
	return nil
}

// parseShape reads an input's shape into st.dims.
func (st *inferState) parseShape(s *wire.JSONScanner, in *v2Input, ref tensorRef) error {
	in.shapeAt, in.rank = len(st.dims), 0
	return eachElement(s, field{ref, `"shape"`}, 3, func(int) error {
		d, err := intValue(s, field{ref, `"shape" axis`}, 4)
		if err != nil {
			return err
		}
		if d < 0 {
			return badRequest(ref.String() + `: "shape" axis ` + strconv.Itoa(in.rank) + " is " + strconv.FormatInt(d, 10) +
				"; a request's shape has no variable axes")
		}
		if in.rank++; in.rank > maxRank {
			return badRequest(ref.String() + `: "shape" has more than ` + strconv.Itoa(maxRank) + " axes")
		}
		st.dims = append(st.dims, d)
		return nil
	})
}

// parseData reads an input's data: converted at once when its datatype is
// known (clients send it first), else kept to convert later. A null is no
// data (the input's data may come binary).
func (st *inferState) parseData(s *wire.JSONScanner, in *v2Input, ref tensorRef) error {
	if null, err := skipNull(s, 3); null || err != nil {
		return err
	}
	in.hasData = true
	if in.dtype.name == "" {
		var err error
		in.raw, err = s.Skip(3)
		if err != nil {
			return malformedJSON(err)
		}
		return nil
	}
	return st.convert(s, in, ref)
}

func (st *inferState) convert(s *wire.JSONScanner, in *v2Input, ref tensorRef) error {
	if in.dtype.size > 0 && in.rank > 0 {
		// The shape came first, as clients send it: the data's bytes are
		// sized once, rather than doubling as they fill (a body of
		// zeros for an INT64 tensor held 15 times its size as it grew).
		// As many as the text left may hold: an element and its comma
		// take two bytes at least.
		if want, ok := elementCount(st.dims[in.shapeAt : in.shapeAt+in.rank]); ok {
			st.arena = growBytes(st.arena, int(min(want, int64(s.Remaining()/2+1)))*in.dtype.size)
		}
	}
	in.dataAt = len(st.arena)
	var err error
	st.arena, in.elements, err = appendJSONData(st.arena, s, in.dtype, ref)
	in.dataEnd = len(st.arena)
	return err
}

// finishInputs converts the data kept for later and points every input at
// its shape and data, now that dims and the arena no longer grow.
func (st *inferState) finishInputs() error {
	for i := range st.req.inputs {
		in := &st.req.inputs[i]
		if in.raw != nil {
			s := wire.NewJSONScanner(in.raw)
			if err := st.convert(&s, in, tensorRef{what: "input", index: i, name: in.name}); err != nil {
				return err
			}
		}
	}
	for i := range st.req.inputs {
		in := &st.req.inputs[i]
		in.shape = st.dims[in.shapeAt : in.shapeAt+in.rank : in.shapeAt+in.rank]
		if in.hasData {
			in.data = st.arena[in.dataAt:in.dataEnd:in.dataEnd]
		}
	}
	return nil
}

// checkData checks the input's data, JSON or binary, against its shape.
// It runs once the shape has been checked against the model's, so that an
// input of the wrong rank is told that rather than that its data does not
// fill the shape it was sent with.
func (in *v2Input) checkData() error {
	ref := tensorRef{what: "input", name: in.name}
	if in.binarySize >= 0 {
		if problem := checkData(in.dtype, in.shape, in.data); problem != "" {
			return badRequest(ref.String() + ": " + cmp.Or(in.dataName, "binary data") + ": " + problem)
		}
		return nil
	}
	want, ok := elementCount(in.shape)
	if !ok {
		return badRequest(ref.String() + ": shape " + formatShape(in.shape) + " has too many elements")
	}
	if in.elements != want {
		return badRequest(ref.String() + ": " + cmp.Or(in.dataName, `"data"`) + " has " + countElements(in.elements) + ", shape " +
			formatShape(in.shape) + " has " + strconv.FormatInt(want, 10))
	}
	return nil
}

// parseOutput reads outputs[i].
func (st *inferState) parseOutput(s *wire.JSONScanner, i int) error {
	st.req.outputs = append(st.req.outputs, v2Output{})
	out := &st.req.outputs[len(st.req.outputs)-1]
	ref := tensorRef{what: "output", index: i}
	var seenName, seenParameters bool
	err := eachMember(s, field{ref: ref}, 2, func(key []byte) error {
		ref.name = out.name
		switch string(key) {
		case "name":
			if seenName {
				return badRequest(ref.String() + `: "name" is given twice`)
			}
			seenName = true
			var err error
			out.name, err = stringValue(s, field{ref, `"name"`}, 3)
			return err
		case "parameters":
			if seenParameters {
				return badRequest(ref.String() + `: "parameters" is given twice`)
			}
			seenParameters = true
			return eachMember(s, field{ref, `"parameters"`}, 3, func(key []byte) error { return out.parameter(s, key, ref) })
		}
		return skipValue(s, 3)
	})
	if err == nil && out.name == nil {
		ref.name = nil
		err = badRequest(ref.String() + `: missing "name"`)
	}
	return err
}

// parameter reads one of an output's parameters: binary_data, and
// classification, which is refused unless 0, since the classification
// extension is not served: answering the raw output instead would mislead.
// So is a shared-memory region to write the output to. Others, and any
// that is null, are ignored.
func (out *v2Output) parameter(s *wire.JSONScanner, key []byte, ref tensorRef) error {
	if null, err := skipNull(s, 4); null || err != nil {
		return err
	}
	if sharedMemoryParameter(key) {
		return refuseSharedMemory(s, ref)
	}
	switch string(key) {
	case "binary_data":
		binary, err := boolValue(s, field{ref, "binary_data"}, 4)
		out.binary = -1
		if binary {
			out.binary = 1
		}
		return err
	case "classification":
		n, err := intValue(s, field{ref, "classification"}, 4)
		if err == nil && n != 0 {
			err = classificationRefusal(ref)
		}
		return err
	}
	return skipValue(s, 4)
}

// sharedMemoryParameter says whether key is a parameter of the
// shared-memory extensions, which name a region registered with the
// server to read an input from or write an output to.
func sharedMemoryParameter(key []byte) bool {
	switch string(key) {
	case "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset":
		return true
	}
	return false
}

// refuseSharedMemory skips a shared-memory parameter of the tensor ref (at
// depth 4) and says that the extension is not served: an output answered
// in the body instead of the region would be read from a region the
// server never wrote.
func refuseSharedMemory(s *wire.JSONScanner, ref tensorRef) error {
	if err := skipValue(s, 4); err != nil {
		return err
	}
	return sharedMemoryRefusal(ref)
}

// sequenceRefusal refuses the parameter key of a sequence's request.
func sequenceRefusal(key string) error {
	return badRequest(`parameter "` + key + `": sequences are not served (the server keeps no state from one request to the next, ` +
		"as a stateful model's sequence batcher would); send each request whole, without sequence parameters")
}

// classificationRefusal refuses an output asked for with a classification.
func classificationRefusal(ref tensorRef) error {
	return badRequest(ref.String() + ": classification is not served (the server does not implement the classification extension); " +
		"ask for the output without it")
}

// sharedMemoryRefusal refuses a shared-memory parameter of the tensor ref.
func sharedMemoryRefusal(ref tensorRef) error {
	return badRequest(ref.String() + ": shared memory is not served (the server does not implement the shared-memory extensions); " +
		"send the data in the request and take it from the answer")
}

// echoID is the request's id as the answer writes it: its JSON text,
// which the scanner and the request's read have checked is text.
func echoID(dst, id []byte) []byte { return append(dst, id...) }
