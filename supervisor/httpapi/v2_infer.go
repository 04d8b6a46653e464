package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/streamer-dev/streamer/supervisor"
)

// inferState is the working memory of one v2 inference request, pooled
// with its buffers: the body, the inputs' data, the items and the answer.
// The items a TensorModel makes may alias the inputs' data, which points
// into the body and the arena, so a state goes back to the pool only once
// nothing can still read them: after an answer, or a refusal before the
// request was submitted (after a failed submission the supervisor may still
// be running items whose request has timed out).
type inferState struct {
	body  bytes.Buffer
	arena []byte  // the JSON inputs' data in the binary layout
	dims  []int64 // the inputs' shapes, one after another
	req   v2Request

	byModel  []int    // for each of the model's inputs, the request input that feeds it
	outputOf []int    // for each requested output, its index in the model's outputs
	rows     int      // the request's batch size: the items it makes
	maxCopy  int64    // the most bytes of unbatched inputs the items may copy in all (MaxBody)
	maxRows  int      // the most rows a request may have (MaxItems)
	cursors  [][]byte // per model input, its data not yet cut into rows
	row      []Tensor // one row's inputs, as Item takes them
	items    predictRequest

	answers  [][]Tensor
	selected []selectedOutput
	out      []byte // the answer
}

// selectedOutput is an output the answer carries.
type selectedOutput struct {
	spec    int  // index in the model's outputs
	batched bool // the rows are stacked on a new first axis
	binary  bool
	dt      dtype
	shape   []int64 // every row's shape
	size    int     // the bytes of all its rows
}

func (h *handler) getInferState() *inferState {
	st := h.inferStates.Get().(*inferState)
	st.body.Reset()
	st.arena = st.arena[:0]
	st.dims = st.dims[:0]
	st.req = v2Request{inputs: st.req.inputs[:0], outputs: st.req.outputs[:0]}
	st.rows = 0
	st.maxCopy = h.maxBody
	st.maxRows = h.maxRows
	st.items = predictRequest{items: st.items.items[:0]}
	st.answers = st.answers[:0]
	st.selected = st.selected[:0]
	st.out = st.out[:0]
	return st
}

// putInferState pools st unless it grew past what is worth keeping. The
// slices that hold the model's items and answers are cleared, so that the
// pool does not keep them alive.
func (h *handler) putInferState(st *inferState) {
	if st.body.Cap() > maxPooledBuffer || cap(st.arena) > maxPooledBuffer || cap(st.out) > maxPooledBuffer {
		return
	}
	clear(st.items.items[:cap(st.items.items)])
	clear(st.answers[:cap(st.answers)])
	clear(st.selected[:cap(st.selected)])
	clear(st.row)
	clear(st.cursors)
	h.inferStates.Put(st)
}

// infer serves POST /v2/models/{model}[/versions/{v}]/infer for the model
// whose metadata is meta.
func (h *handler) infer(w http.ResponseWriter, r *http.Request, meta ModelMetadata, version string) {
	coding, err := h.checkHeaders(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	refused, full := h.refusedFull(w, r)
	if refused {
		return
	}
	st := h.getInferState()
	inUse, err := h.inferWith(st, w, r, meta, version, coding, full)
	if err != nil {
		h.fail(w, r, err)
	}
	if !inUse {
		h.putInferState(st)
	}
}

// inferWith runs the request and writes its answer, or returns why not;
// coding is the body's content coding, and full says the queue had no
// room as it came (see refusedFull).
// inUse says the supervisor may still read the request's items: it failed
// after they were submitted (a deadline, a canceled client) while some of
// them may be queued or running.
func (h *handler) inferWith(st *inferState, w http.ResponseWriter, r *http.Request, meta ModelMetadata, version string, coding contentCoding, full bool) (inUse bool, err error) {
	inflated, err := h.readBody(w, r, &st.body, coding, full)
	defer h.inflated.give(inflated)
	if err != nil {
		return false, err
	}
	if err := st.read(r.Header, meta, h.tensors); err != nil {
		h.countRejected(err)
		return false, err
	}
	answers, err := h.run(r.Context(), &st.items)
	if err != nil {
		return true, byRow(err)
	}
	jsonLen, err := st.writeAnswer(h.tensors, meta, version, answers)
	if err != nil {
		return false, err
	}
	h.requests.count(http.StatusOK, nil)
	if jsonLen < 0 {
		h.writeBody(w, http.StatusOK, h.jsonType, st.out)
		return false, nil
	}
	w.Header()[InferenceHeaderLength] = []string{strconv.Itoa(jsonLen)}
	h.writeBody(w, http.StatusOK, h.octetType, st.out)
	return false, nil
}

// rowError is an item's error as a v2 answer words it: by the row, which
// the item is (encodeItems makes one item of each row, in order), where
// /predict says "item". It unwraps to the item's error, whose status it
// keeps.
type rowError struct{ item *supervisor.ItemError }

// byRow words err by the row when it is an item's. The backends return an
// item's error as a bare *supervisor.ItemError; anything wrapped around
// one is left as it is, rather than lose what it says.
func byRow(err error) error {
	if item, ok := err.(*supervisor.ItemError); ok {
		return &rowError{item}
	}
	return err
}

func (e *rowError) Error() string {
	if e.item.Every {
		return "every row: " + e.item.Err.Error()
	}
	return "row " + strconv.Itoa(e.item.Index) + ": " + e.item.Err.Error()
}

func (e *rowError) Unwrap() error { return e.item }

// read turns the body in st.body into st.items: it reads the JSON and the
// binary data, checks them against the model's metadata, has the model
// encode every row, and sets the deadline.
func (st *inferState) read(header http.Header, meta ModelMetadata, model TensorModel) error {
	body := st.body.Bytes()
	headerLen, binary, err := jsonHeaderLength(header[InferenceHeaderLength], len(body))
	if err != nil {
		return err
	}
	if err := st.parse(body[:headerLen], binary); err != nil {
		return err
	}
	if err := st.attachBinary(body[headerLen:], binary); err != nil {
		return err
	}
	if err := st.makeItems(meta, model); err != nil {
		return err
	}
	return applyTimeoutHeader(header, &st.items)
}

// makeItems matches the request's inputs and outputs, read in whichever
// form, with the model's, checks them, encodes every row and sets the
// deadline.
func (st *inferState) makeItems(meta ModelMetadata, model TensorModel) error {
	if err := st.match(meta); err != nil {
		return err
	}
	if err := st.checkCopies(meta); err != nil {
		return err
	}
	if err := st.encodeItems(model, meta); err != nil {
		return err
	}
	st.items.timeout = st.req.timeout
	return nil
}

// specIndex finds the spec called name.
func specIndex(specs []TensorSpec, name []byte) int {
	for i := range specs {
		if specs[i].Name == string(name) {
			return i
		}
	}
	return -1
}

// match pairs the request's inputs and outputs with the model's, checks
// each input against its spec, and finds the batch size.
func (st *inferState) match(meta ModelMetadata) error {
	st.byModel = resize(st.byModel, len(meta.Inputs))
	for j := range st.byModel {
		st.byModel[j] = -1
	}
	for i := range st.req.inputs {
		in := &st.req.inputs[i]
		j := specIndex(meta.Inputs, in.name)
		switch {
		case j < 0:
			why := "unknown input " + strconv.Quote(string(in.name))
			if meta.Fixed != nil {
				if fixed := meta.Fixed(string(in.name)); fixed != "" {
					why = fixed
				}
			}
			return badRequest(why + "; model " + strconv.Quote(meta.Name) + " takes " + quoteNames(meta.Inputs))
		case st.byModel[j] >= 0:
			return badRequest("input " + strconv.Quote(string(in.name)) + " is given twice")
		}
		st.byModel[j] = i
		if err := checkInput(in, meta.Inputs[j]); err != nil {
			return err
		}
	}
	for j, i := range st.byModel {
		if i < 0 {
			spec := meta.Inputs[j]
			return badRequest("missing input " + strconv.Quote(spec.Name) + " (" + spec.Datatype + ", shape " +
				formatShape(spec.Shape) + "); model " + strconv.Quote(meta.Name) + " takes " + quoteNames(meta.Inputs))
		}
	}
	if err := st.matchOutputs(meta); err != nil {
		return err
	}
	return st.batchSize(meta)
}

// checkInput checks an input's datatype and shape against its spec, then
// its data against its shape.
func checkInput(in *v2Input, spec TensorSpec) error {
	if string(in.datatype) != spec.Datatype {
		return badRequest("input " + strconv.Quote(spec.Name) + ": datatype " + string(in.datatype) + " was sent, the model takes " + spec.Datatype)
	}
	if len(in.shape) != len(spec.Shape) {
		return badRequest("input " + strconv.Quote(spec.Name) + ": shape " + formatShape(in.shape) + " has " + strconv.Itoa(len(in.shape)) +
			" axes, the model takes " + strconv.Itoa(len(spec.Shape)) + " (shape " + formatShape(spec.Shape) + ")")
	}
	for a, want := range spec.Shape {
		if want >= 0 && in.shape[a] != want {
			return badRequest("input " + strconv.Quote(spec.Name) + ": shape " + formatShape(in.shape) + " has " + strconv.FormatInt(in.shape[a], 10) +
				" on axis " + strconv.Itoa(a) + ", the model takes " + strconv.FormatInt(want, 10) + " (shape " + formatShape(spec.Shape) + ")")
		}
	}
	return in.checkData()
}

// matchOutputs finds each requested output among the model's.
func (st *inferState) matchOutputs(meta ModelMetadata) error {
	st.outputOf = resize(st.outputOf, len(st.req.outputs))
	for i, out := range st.req.outputs {
		k := specIndex(meta.Outputs, out.name)
		if k < 0 {
			return badRequest("unknown output " + strconv.Quote(string(out.name)) + " requested; model " +
				strconv.Quote(meta.Name) + " gives " + quoteNames(meta.Outputs))
		}
		for _, earlier := range st.outputOf[:i] {
			if earlier == k {
				return badRequest("output " + strconv.Quote(string(out.name)) + " is requested twice")
			}
		}
		st.outputOf[i] = k
	}
	return nil
}

// maxRows bounds the rows of one request before the model encodes them
// when Config.MaxItems does not, or is larger: rows of no elements cost no
// bytes, so the body's size does not bound them.
const maxRows = 1 << 16

// batchSize finds the rows of the batched inputs, which must agree; a
// request without batched inputs is one item.
func (st *inferState) batchSize(meta ModelMetadata) error {
	rows, first := int64(-1), -1
	for j, spec := range meta.Inputs {
		if !spec.Batched {
			continue
		}
		if len(spec.Shape) == 0 {
			return fmt.Errorf("the model's metadata marks input %q as batched but gives it no axes", spec.Name)
		}
		in := &st.req.inputs[st.byModel[j]]
		switch n := in.shape[0]; {
		case rows < 0:
			rows, first = n, j
		case n != rows:
			return badRequest(fmt.Sprintf("input %q has %d rows (shape %s) but input %q has %d: the batched inputs must agree on the first axis",
				spec.Name, n, formatShape(in.shape), meta.Inputs[first].Name, rows))
		}
	}
	switch {
	case rows < 0:
		rows = 1
	case rows > int64(st.maxRows):
		err := &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(
			"the request has %d rows (input %q); one request takes at most %d", rows, meta.Inputs[first].Name, st.maxRows)}
		if rows <= maxRows {
			// Items counted rejected, as the supervisor counts a request
			// of more than its MaxItems; not the rows of a request past
			// any server's bound, which may claim billions of empty rows.
			err.items = int(rows)
		}
		return err
	case rows == 0:
		return badRequest(fmt.Sprintf("the request has no rows: input %q has shape %s; send at least one row on the first axis",
			meta.Inputs[first].Name, formatShape(st.req.inputs[st.byModel[first]].shape)))
	}
	st.rows = int(rows)
	return nil
}

// checkCopies refuses a request whose unbatched inputs, which every row's
// item carries whole, would make its items hold more than maxCopy bytes of
// their copies: a small body of many rows would otherwise take memory
// without bound.
func (st *inferState) checkCopies(meta ModelMetadata) error {
	if st.rows <= 1 {
		return nil
	}
	var each int64
	for j, spec := range meta.Inputs {
		if !spec.Batched {
			each += int64(len(st.req.inputs[st.byModel[j]].data))
		}
	}
	if each == 0 || each*int64(st.rows) <= st.maxCopy {
		return nil
	}
	return &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(
		"the request's %d rows would each carry its inputs without a batch axis (%d bytes): %d bytes in all, over the %d the server takes (--max-body); send fewer rows per request",
		st.rows, each, each*int64(st.rows), st.maxCopy)}
}

// encodeItems cuts the batched inputs into rows and has the model encode
// each row, with the unbatched inputs whole, into one item.
func (st *inferState) encodeItems(model TensorModel, meta ModelMetadata) error {
	st.row = resize(st.row, len(meta.Inputs))
	st.cursors = resize(st.cursors, len(meta.Inputs))
	for j := range meta.Inputs {
		st.cursors[j] = st.req.inputs[st.byModel[j]].data
	}
	if cap(st.items.items) < st.rows {
		st.items.items = make([][]byte, 0, st.rows)
	}
	for r := range st.rows {
		for j, spec := range meta.Inputs {
			in := &st.req.inputs[st.byModel[j]]
			t := &st.row[j]
			*t = Tensor{Name: spec.Name, Datatype: spec.Datatype, Shape: in.shape, Data: in.data}
			if spec.Batched {
				t.Shape = in.shape[1:]
				t.Data, st.cursors[j] = st.cutRow(in, st.cursors[j])
			}
		}
		item, key, err := model.Item(st.row)
		if err != nil {
			return badRequest("row " + strconv.Itoa(r) + ": " + err.Error())
		}
		st.items.addItem(item, key)
	}
	return nil
}

// cutRow splits the next row of a batched input from the rest of its data.
func (st *inferState) cutRow(in *v2Input, rest []byte) (row, after []byte) {
	if in.dtype.kind != kindBytes {
		n := len(in.data) / st.rows
		return rest[:n:n], rest[n:]
	}
	perRow, _ := elementCount(in.shape[1:])
	after = skipBytesElements(rest, perRow)
	n := len(rest) - len(after)
	return rest[:n:n], after
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// writeAnswer decodes every item's answer into tensors, stacks the rows of
// each output the answer carries and writes the answer into st.out. It
// returns the length of the JSON part when some output is sent as binary
// data, else -1. A model answer that cannot be stacked is the model's
// fault, a 500.
func (st *inferState) writeAnswer(model TensorModel, meta ModelMetadata, version string, answers [][]byte) (int, error) {
	if err := st.decodeAnswers(model, answers); err != nil {
		return 0, err
	}
	if err := st.selectOutputs(meta); err != nil {
		return 0, err
	}
	dst := st.out
	dst = append(dst, `{"model_name":`...)
	dst = appendJSONStringText(dst, meta.Name)
	if version == "" && len(meta.Versions) > 0 {
		version = meta.Versions[0]
	}
	if version != "" {
		dst = append(dst, `,"model_version":`...)
		dst = appendJSONStringText(dst, version)
	}
	if st.req.id != nil {
		dst = append(dst, `,"id":`...)
		dst = echoID(dst, st.req.id)
	}
	dst = append(dst, `,"outputs":[`...)
	anyBinary := false
	for i, sel := range st.selected {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = st.appendOutput(dst, meta.Outputs[sel.spec].Name, sel); err != nil {
			return 0, err
		}
		anyBinary = anyBinary || sel.binary
	}
	dst = append(dst, "]}"...)
	jsonLen := -1
	if anyBinary {
		jsonLen = len(dst)
		for _, sel := range st.selected {
			if sel.binary {
				name := meta.Outputs[sel.spec].Name
				for _, tensors := range st.answers {
					dst = append(dst, findTensor(tensors, name, sel.spec).Data...)
				}
			}
		}
	} else {
		dst = append(dst, '\n')
	}
	st.out = dst
	return jsonLen, nil
}

// decodeAnswers decodes every item's answer into tensors, in st.answers.
func (st *inferState) decodeAnswers(model TensorModel, answers [][]byte) error {
	for i, a := range answers {
		tensors, err := model.Outputs(a)
		if err != nil {
			return fmt.Errorf("row %d: decode the model's answer: %w", i, err)
		}
		st.answers = append(st.answers, tensors)
	}
	return nil
}

// selectOutputs lists the outputs the answer carries (those requested, in
// their order, else all the model's) and checks that every row has each,
// with the same datatype and shape, and data that matches them.
func (st *inferState) selectOutputs(meta ModelMetadata) error {
	add := func(k int, binary bool) error {
		sel, err := st.stack(meta.Outputs[k].Name, k)
		// An output the metadata gives no batch axis keeps its shape when the
		// request is one row; rows of several are stacked all the same.
		sel.binary, sel.batched = binary, meta.Outputs[k].Batched || st.rows > 1
		st.selected = append(st.selected, sel)
		return err
	}
	if len(st.req.outputs) == 0 {
		for k := range meta.Outputs {
			if err := add(k, st.req.binaryOutput); err != nil {
				return err
			}
		}
		return nil
	}
	for i, out := range st.req.outputs {
		if err := add(st.outputOf[i], out.binary > 0 || out.binary == 0 && st.req.binaryOutput); err != nil {
			return err
		}
	}
	return nil
}

// stack checks the rows of the output called name, the model's output k.
func (st *inferState) stack(name string, k int) (selectedOutput, error) {
	sel := selectedOutput{spec: k}
	for r, tensors := range st.answers {
		t := findTensor(tensors, name, k)
		if t == nil {
			return sel, fmt.Errorf("row %d: the model's answer has no output %q", r, name)
		}
		if r == 0 {
			var ok bool
			if sel.dt, ok = dtypeOf([]byte(t.Datatype)); !ok {
				return sel, fmt.Errorf("output %q: the model answered with unknown datatype %q", name, t.Datatype)
			}
			sel.shape = t.Shape
		} else {
			if t.Datatype != sel.dt.name {
				return sel, fmt.Errorf("output %q: row %d is %s but row 0 is %s; rows of different datatypes cannot be stacked",
					name, r, t.Datatype, sel.dt.name)
			}
			if !sameShape(t.Shape, sel.shape) {
				return sel, fmt.Errorf("output %q: row %d has shape %s but row 0 has %s; rows of different shapes cannot be stacked",
					name, r, formatShape(t.Shape), formatShape(sel.shape))
			}
		}
		if problem := checkData(sel.dt, t.Shape, t.Data); problem != "" {
			return sel, fmt.Errorf("output %q, row %d: %s", name, r, problem)
		}
		sel.size += len(t.Data)
	}
	return sel, nil
}

// findTensor finds the output called name, which the model gives as its
// output k; an unnamed tensor counts by its place.
func findTensor(tensors []Tensor, name string, k int) *Tensor {
	if k < len(tensors) && (tensors[k].Name == name || tensors[k].Name == "") {
		return &tensors[k]
	}
	for i := range tensors {
		if tensors[i].Name == name {
			return &tensors[i]
		}
	}
	return nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// appendOutput writes one output's JSON: its rows stacked on a new first
// axis (an output without a batch axis is the one row's, as the metadata
// gives it), with its data, or with its size when the data follows as
// binary. BYTES data that JSON cannot hold is refused (see notJSONText).
func (st *inferState) appendOutput(dst []byte, name string, sel selectedOutput) ([]byte, error) {
	dst = append(dst, `{"name":`...)
	dst = appendJSONStringText(dst, name)
	dst = append(dst, `,"datatype":"`...)
	dst = append(dst, sel.dt.name...)
	dst = append(dst, `","shape":[`...)
	if sel.batched {
		dst = strconv.AppendInt(dst, int64(st.rows), 10)
	}
	for i, d := range sel.shape {
		if sel.batched || i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, d, 10)
	}
	dst = append(dst, ']')
	if sel.binary {
		dst = append(dst, `,"parameters":{"binary_data_size":`...)
		dst = strconv.AppendInt(dst, int64(sel.size), 10)
		return append(dst, "}}"...), nil
	}
	dst = append(dst, `,"data":[`...)
	first := true
	perRow, _ := elementCount(sel.shape)
	for r, tensors := range st.answers {
		t := findTensor(tensors, name, sel.spec)
		var bad int64
		if dst, bad = appendJSONElements(dst, sel.dt, t.Data, first); bad >= 0 {
			return dst, notJSONText(name, int64(r)*perRow+bad)
		}
		first = first && len(t.Data) == 0
	}
	return append(dst, "]}"...), nil
}
