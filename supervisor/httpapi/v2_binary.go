package httpapi

import (
	"strconv"
	"strings"
)

// This file reads the bodies of the binary tensor data extension: a JSON
// header of Inference-Header-Content-Length bytes, then the raw tensors of
// the inputs that carry a binary_data_size parameter, one after another in
// the order of "inputs". The answer takes the same form when some output
// is asked for as binary data (see writeAnswer).

// InferenceHeaderLength is the header of the binary tensor data extension
// that gives the length of a body's JSON part, in requests and answers.
// Its presence, not the Content-Type, makes a request binary.
const InferenceHeaderLength = "Inference-Header-Content-Length"

// jsonHeaderLength reads the Inference-Header-Content-Length values of a
// request whose body has bodyLen bytes: the JSON part is the whole body
// without the header, and binary says the header was sent.
func jsonHeaderLength(values []string, bodyLen int) (n int, binary bool, err error) {
	if len(values) == 0 {
		return bodyLen, false, nil
	}
	if len(values) > 1 {
		return 0, false, badRequest(InferenceHeaderLength + " is given " + strconv.Itoa(len(values)) + " times; send it once")
	}
	text := strings.TrimSpace(values[0])
	v, perr := strconv.ParseInt(text, 10, 64)
	switch {
	case perr != nil || v < 0 || strings.HasPrefix(text, "+"): // digits alone, as Content-Length
		return 0, false, badRequest(InferenceHeaderLength + " must be the JSON header's length in bytes, a whole number from 0, got " +
			strconv.Quote(values[0]))
	case v > int64(bodyLen):
		return 0, false, badRequest(InferenceHeaderLength + " is " + strconv.FormatInt(v, 10) + " but the body has only " +
			strconv.Itoa(bodyLen) + " bytes")
	}
	return int(v), true, nil
}

// binaryWithoutHeader refuses a request that has binary inputs but no
// Inference-Header-Content-Length, or returns nil when it has none.
func (st *inferState) binaryWithoutHeader() error {
	for i := range st.req.inputs {
		if in := &st.req.inputs[i]; in.binarySize >= 0 {
			ref := tensorRef{what: "input", index: i, name: in.name}
			return badRequest(ref.String() + " has a binary_data_size parameter, but the request has no " + InferenceHeaderLength +
				" header to say where the JSON ends and the binary data starts")
		}
	}
	return nil
}

// attachBinary gives the inputs that carry binary_data_size their data from
// rest, the body after the JSON header. The data is checked against the
// datatype and shape later, with the JSON data (see v2Input.checkData).
func (st *inferState) attachBinary(rest []byte, binary bool) error {
	offset := 0
	last := -1
	for i := range st.req.inputs {
		in := &st.req.inputs[i]
		if in.binarySize < 0 {
			continue
		}
		ref := tensorRef{what: "input", index: i, name: in.name}
		if !binary {
			return st.binaryWithoutHeader()
		}
		if in.binarySize > int64(len(rest)-offset) {
			return badRequest(ref.String() + ": binary_data_size " + strconv.FormatInt(in.binarySize, 10) + " runs past the end of the body: " +
				strconv.Itoa(len(rest)-offset) + " bytes of binary data are left for it (" + strconv.Itoa(len(rest)) +
				" follow the JSON header)")
		}
		end := offset + int(in.binarySize)
		in.data = rest[offset:end:end]
		offset, last = end, i
	}
	if offset == len(rest) {
		return nil
	}
	if last < 0 {
		return badRequest(strconv.Itoa(len(rest)) + " bytes follow the JSON header (" + InferenceHeaderLength +
			"), but no input has a binary_data_size parameter")
	}
	ref := tensorRef{what: "input", index: last, name: st.req.inputs[last].name}
	return badRequest(strconv.Itoa(len(rest)-offset) + " bytes follow the binary data of the last binary input, " + ref.String() +
		": the binary_data_size parameters add up to " + strconv.Itoa(offset) + " of the " + strconv.Itoa(len(rest)) +
		" bytes after the JSON header")
}
