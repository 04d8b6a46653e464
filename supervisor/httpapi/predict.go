package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/wire"
	"github.com/streamer-dev/streamer/supervisor"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// TimeoutHeader carries a request's deadline in milliseconds, as an
// alternative to the body's timeout_ms; when both are given the shorter wins.
const TimeoutHeader = "X-Timeout-Ms"

// bodyFormat is how a /predict body is encoded; the answer uses the same
// encoding (form requests are answered in JSON).
type bodyFormat int

const (
	formatJSON bodyFormat = iota
	formatMsgpack
	formatForm
)

// acceptedTypes is named in the 415 answer.
const acceptedTypes = "application/json, application/msgpack (or application/x-msgpack), application/x-www-form-urlencoded"

// charsetOf is the charset parameter among a media type's params
// ("; charset=utf-8; ..."), unquoted; "" when there is none.
func charsetOf(params string) string {
	for params != "" {
		var param string
		param, params, _ = strings.Cut(params, ";")
		name, value, _ := strings.Cut(param, "=")
		if strings.EqualFold(strings.TrimSpace(name), "charset") {
			return strings.Trim(strings.TrimSpace(value), `"`)
		}
	}
	return ""
}

// formatOf reads the Content-Type header. A missing header means JSON.
func formatOf(contentType string) (bodyFormat, error) {
	if contentType == "" || contentType == "application/json" {
		return formatJSON, nil
	}
	mediaType, params, _ := strings.Cut(contentType, ";")
	mediaType = strings.TrimSpace(mediaType)
	switch {
	case strings.EqualFold(mediaType, "application/json"):
		return formatJSON, notUTF8Charset(contentType, params, "JSON")
	case strings.EqualFold(mediaType, "application/msgpack"), strings.EqualFold(mediaType, "application/x-msgpack"):
		return formatMsgpack, nil
	case strings.EqualFold(mediaType, "application/x-www-form-urlencoded"):
		return formatForm, notUTF8Charset(contentType, params, "a form")
	}
	return 0, &requestError{
		status: http.StatusUnsupportedMediaType,
		msg:    "unsupported content type " + strconv.Quote(contentType) + "; send " + acceptedTypes,
	}
}

// notUTF8Charset refuses a text body (what) whose content type names a
// charset other than UTF-8 (or its subset US-ASCII): it is read as UTF-8,
// and its text would reach the model changed.
func notUTF8Charset(contentType, params, what string) error {
	charset := charsetOf(params)
	if charset == "" || strings.EqualFold(charset, "utf-8") || strings.EqualFold(charset, "us-ascii") {
		return nil
	}
	return &requestError{
		status: http.StatusUnsupportedMediaType,
		msg:    "content type " + strconv.Quote(contentType) + ": " + what + " is read as UTF-8; send it in UTF-8, with charset=utf-8 or no charset",
	}
}

// predictRequest is a decoded /predict body.
type predictRequest struct {
	items   [][]byte
	keys    []string // nil unless the codec gave some item a key
	timeout time.Duration
}

// addItem records the next encoded item and its batch key.
func (p *predictRequest) addItem(item []byte, key string) {
	p.items = append(p.items, item)
	if key != "" && p.keys == nil {
		p.keys = make([]string, len(p.items)-1, cap(p.items))
	}
	if p.keys != nil {
		p.keys = append(p.keys, key)
	}
}

// fuller is a Backend that can tell, cheaply, that it would refuse any
// request now.
type fuller interface{ Full() bool }

// fullMessage answers a request that arrives while the queue is full,
// before its body is read: refusing must cost less than serving, or an
// overload starves the model of the work it was admitting.
var fullMessage = supervisor.ErrOverloaded.Error() + ": the request was refused unread; send it again later"

// largeBody is how many times the mean body a request announces to be
// read even when the queue is full (see refusedFull): as many as the
// times the mean size a request of many items is (see
// supervisor.Config.MaxQueue).
const largeBody = 2

// refusedFull answers 429, and says so, when the backend would refuse any
// request now, before the body is read (see fullMessage). What the headers alone say is
// wrong with a request is answered before (checkHeaders): its answer does
// not change with room, and a 429 would have the client retry in vain. A
// request that announces a body far larger than most is read all the
// same: likely a request of many items, it has room kept for it once its
// items are counted (see supervisor.Config.MaxQueue), where refused unread
// it would be refused so for as long as small requests keep the queue
// full to its last place: then full says so. Such a body does not count
// in the mean, which follows the bodies read while the queue has room:
// bodies read only for their size would push it up, until a client
// announcing twice the mean each time had every body read, and large
// requests were refused unread once more.
func (h *handler) refusedFull(w http.ResponseWriter, r *http.Request) (refused, full bool) {
	if f, ok := h.backend.(fuller); !ok || !f.Full() {
		return false, false
	}
	if mean := h.bodyMean.Load(); mean > 0 && r.ContentLength >= largeBody*mean {
		return false, true
	}
	w.Header()["Retry-After"] = h.retryAfter
	h.requests.count(http.StatusTooManyRequests, nil)
	h.writeBody(w, http.StatusTooManyRequests, h.jsonType, h.fullBody)
	return true, true
}

// checkHeaders returns the content coding of a request's body, or what its
// headers say is wrong with it, before its body: a coding not read, or a
// body announced larger than the limit.
func (h *handler) checkHeaders(r *http.Request) (contentCoding, error) {
	coding, err := codingOf(r.Header)
	if err != nil {
		return 0, err
	}
	if r.ContentLength > h.maxBody {
		return 0, h.tooLarge()
	}
	return coding, nil
}

func (h *handler) predict(w http.ResponseWriter, r *http.Request) {
	format, err := formatOf(r.Header.Get("Content-Type"))
	var coding contentCoding
	if err == nil {
		coding, err = h.checkHeaders(r)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	refused, full := h.refusedFull(w, r)
	if refused {
		return
	}
	body := h.getBuffer()
	inflated, err := h.readBody(w, r, body, coding, full)
	defer h.inflated.give(inflated)
	if err != nil {
		h.putBuffer(body)
		h.fail(w, r, err)
		return
	}
	if format == formatForm && looksLikeJSONObject(body.Bytes()) {
		format = formatJSON // curl -d sends JSON labelled as a form
	}
	var req predictRequest
	switch format {
	case formatJSON:
		err = h.decodeJSON(body.Bytes(), &req)
	case formatMsgpack:
		err = h.decodeMsgpack(body.Bytes(), &req)
	case formatForm:
		err = h.decodeForm(body.Bytes(), &req)
	}
	// The body's bytes are no longer referenced, the items being copies:
	// its buffer, as large as the body, is not held while the model runs.
	h.putBuffer(body)
	if err == nil {
		err = applyTimeoutHeader(r.Header, &req)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	outputs, err := h.run(r.Context(), &req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := h.getBuffer()
	defer h.putBuffer(out)
	contentType := h.jsonType
	if format == formatMsgpack {
		contentType = h.msgpackType
		err = appendMsgpackOutputs(out, outputs)
	} else {
		err = h.appendJSONOutputs(out, outputs)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.requests.count(http.StatusOK, nil)
	h.writeBody(w, http.StatusOK, contentType, out.Bytes())
}

// run submits the request and waits for its outputs. The deadline, if any,
// bounds both the supervisor's scheduling and this wait; the request's
// context ends when the client goes away, which cancels undispatched items.
func (h *handler) run(ctx context.Context, req *predictRequest) ([][]byte, error) {
	sreq := supervisor.Request{Items: req.items, Keys: req.keys}
	if req.timeout > 0 {
		sreq.Deadline = time.Now().Add(req.timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, sreq.Deadline)
		defer cancel()
	}
	return h.backend.PredictRequest(ctx, sreq)
}

// looksLikeJSONObject reports whether body starts like a JSON object. A form
// body never does: its first field name would begin with '{'.
func looksLikeJSONObject(body []byte) bool {
	s := wire.NewJSONScanner(body)
	c, ok := s.Peek()
	return ok && c == '{'
}

// readDeadliner and writeDeadliner are what http.ResponseController uses
// of net/http's ResponseWriter; asserting them directly costs no allocation.
type (
	readDeadliner  interface{ SetReadDeadline(time.Time) error }
	writeDeadliner interface{ SetWriteDeadline(time.Time) error }
)

// initialBodyBuffer is the most readBody sets aside for a body before its
// bytes arrive.
const initialBodyBuffer = 64 << 10

// readBody reads the whole body into buf, decompressed from coding,
// refusing more than maxBody bytes as sent or decompressed. One read while
// the queue has no room (full) does not count in the mean (see
// refusedFull).
//
// A compressed body, decompressed, is counted in the inflated budget (see
// inflatedBudget) and refused 429 past it: inflated is what it counted,
// for the caller to give back once the request is done.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer, coding contentCoding, full bool) (inflated int64, err error) {
	if coding == identity {
		return 0, h.readSent(w, r, buf, full)
	}
	sent := h.getBuffer()
	defer h.putBuffer(sent)
	if err := h.readSent(w, r, sent, full); err != nil {
		return 0, err
	}
	if err := h.decompress(coding, sent.Bytes(), buf); err != nil {
		return 0, err
	}
	n := int64(buf.Len())
	if !h.inflated.take(n) {
		return 0, inflatedFull(h.inflated.bound)
	}
	return n, nil
}

// readSent reads the whole body as sent into buf, refusing more than
// maxBody bytes, and counts it in the mean of the bodies sent unless the
// queue had no room as it came (full).
func (h *handler) readSent(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer, full bool) error {
	if r.ContentLength > h.maxBody {
		return h.tooLarge()
	}
	if r.ContentLength > 0 {
		// The announced length only sizes the first read: memory follows
		// the bytes that arrive, so a client that announces megabytes and
		// sends one byte holds no more than initialBodyBuffer.
		buf.Grow(int(min(r.ContentLength, initialBodyBuffer)) + bytes.MinRead)
	}
	// A body of announced length is cut there by net/http already, and
	// that length is within maxBody (checked above): only a chunked one
	// needs a limit, an allocation a request. It is read one byte past
	// maxBody, to tell a body over it; http.MaxBytesReader would have the
	// connection closed after the 413, where a body announced too long
	// keeps it once read through (see discardUnread).
	var body io.Reader = r.Body
	if r.ContentLength < 0 {
		body = &io.LimitedReader{R: r.Body, N: min(h.maxBody, math.MaxInt64-1) + 1}
	}
	_, err := buf.ReadFrom(body)
	if err != nil {
		return h.bodyError(err)
	}
	if int64(buf.Len()) > h.maxBody {
		return h.tooLarge()
	}
	// A mean over the last few dozen, roughly: a race between two
	// requests loses one of them, which matters little.
	switch mean := h.bodyMean.Load(); {
	case full:
	case mean == 0:
		h.bodyMean.Store(int64(buf.Len()))
	default:
		h.bodyMean.Store(mean + (int64(buf.Len())-mean)/16)
	}
	// The server's ReadTimeout bounds reading the request; lifted now, it
	// does not cut short the wait for the model (net/http would cancel the
	// request's context when it fires).
	if d, ok := w.(readDeadliner); ok {
		_ = d.SetReadDeadline(time.Time{})
	}
	return nil
}

// bodyError says why reading a body failed. Apart from readBody, so that
// the targets errors.As needs are allocated only when there is an error.
func (h *handler) bodyError(err error) error {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		return &requestError{status: http.StatusRequestTimeout, msg: "the request body did not arrive within the server's read timeout"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		// A client that left with its body half sent reads the same as
		// one that sent less than it announced, which would read this.
		return badRequest("the request body ended before the length its Content-Length announced")
	}
	return badRequest("read request body: " + err.Error())
}

func (h *handler) tooLarge() error {
	return &requestError{
		status: http.StatusRequestEntityTooLarge,
		msg:    "request body is larger than the limit of " + strconv.FormatInt(h.maxBody, 10) + " bytes",
	}
}

// decodeJSON reads {"inputs": [item, ...], "timeout_ms": N}. It walks the
// body once with a wire.JSONScanner and hands each item's bytes to the
// codec, without building Go values for the items.
func (h *handler) decodeJSON(body []byte, req *predictRequest) error {
	s := wire.NewJSONScanner(body)
	if c, ok := s.Peek(); ok && c != '{' {
		value, err := s.Skip(0)
		if err != nil {
			return malformedJSON(err)
		}
		return badRequest(`body must be a JSON object {"inputs": [...]}, not ` + jsonKind(value))
	}
	if !s.Consume('{') {
		return badRequest("malformed JSON body: " + s.Unexpected(`looking for {"inputs": [...]}`).Error())
	}
	seenInputs := false
	for first := true; ; first = false {
		if first && s.Consume('}') {
			break
		}
		key, err := objectKey(&s, first)
		if err != nil {
			return malformedJSON(err)
		}
		switch key {
		case "inputs":
			if seenInputs {
				return badRequest(`"inputs" is given twice`)
			}
			seenInputs = true
			err = h.decodeJSONInputs(&s, req)
		case "timeout_ms":
			err = decodeJSONTimeout(&s, req)
		default:
			if _, err = s.Skip(1); err != nil {
				err = malformedJSON(err)
			}
		}
		if err != nil {
			return err
		}
		if s.Consume(',') {
			continue
		}
		if s.Consume('}') {
			break
		}
		return badRequest("malformed JSON body: " + s.Unexpected("after an object value").Error())
	}
	if err := s.End(); err != nil {
		return malformedJSON(err)
	}
	return checkItemCount(len(req.items), req.items == nil)
}

// objectKey reads `"key":` of the body's top-level object and returns the
// key when it is one the body may have, else "".
func objectKey(s *wire.JSONScanner, first bool) (string, error) {
	if c, ok := s.Peek(); first && (!ok || c != '"') {
		return "", s.Unexpected("looking for an object key or }")
	}
	key, err := s.Key()
	if err != nil {
		return "", err
	}
	switch string(key) { // no allocation: the compiler compares in place
	case "inputs":
		return "inputs", nil
	case "timeout_ms":
		return "timeout_ms", nil
	}
	return "", nil
}

// decodeJSONInputs reads the inputs array, encoding each item as it goes.
// null counts as missing.
func (h *handler) decodeJSONInputs(s *wire.JSONScanner, req *predictRequest) error {
	if c, ok := s.Peek(); ok && c != '[' {
		value, err := s.Skip(1)
		if err != nil {
			return malformedJSON(err)
		}
		if string(value) == "null" {
			return nil
		}
		return badRequest(`"inputs" must be an array of items, not ` + jsonKind(value))
	}
	if !s.Consume('[') {
		return badRequest("malformed JSON body: " + s.Unexpected(`looking for "inputs"`).Error())
	}
	req.items = make([][]byte, 0, 4)
	if s.Consume(']') {
		return nil
	}
	for i := 0; ; i++ {
		raw, err := s.Skip(2)
		if err != nil {
			return malformedJSON(err)
		}
		item, key, err := h.codec.FromJSON(json.RawMessage(raw))
		if err != nil {
			return itemError(i, err)
		}
		req.addItem(item, key)
		if s.Consume(',') {
			continue
		}
		if s.Consume(']') {
			return nil
		}
		return badRequest("malformed JSON body: " + s.Unexpected("after an item").Error())
	}
}

// decodeJSONTimeout reads timeout_ms: a whole number, or null for none.
func decodeJSONTimeout(s *wire.JSONScanner, req *predictRequest) error {
	text, err := s.Skip(1)
	if err != nil {
		return malformedJSON(err)
	}
	if string(text) == "null" {
		return nil
	}
	if text[0] != '-' && (text[0] < '0' || '9' < text[0]) {
		return badRequest(`"timeout_ms" must be a whole number of milliseconds, not ` + string(text))
	}
	req.timeout, err = parseTimeoutMs(`"timeout_ms"`, string(text))
	return err
}

// parseTimeoutMs reads text, the value of what, as a timeout: a whole
// number of milliseconds in digits, positive, at most maxTimeoutMs; the
// message says which rule it breaks.
func parseTimeoutMs(what, text string) (time.Duration, error) {
	ms, err := strconv.ParseInt(text, 10, 64)
	if strings.HasPrefix(text, "+") {
		err = strconv.ErrSyntax // digits alone, as the body's number is
	}
	switch {
	case text == "":
		return 0, badRequest(what + " is empty: give a positive whole number of milliseconds, or leave it out for no deadline")
	case errors.Is(err, strconv.ErrRange) && strings.HasPrefix(text, "-"):
		return 0, badRequest(what + " must not be negative, got " + text)
	case errors.Is(err, strconv.ErrRange):
		return 0, badRequest(what + " " + text + " is out of range: at most " + strconv.FormatInt(maxTimeoutMs, 10))
	case err != nil:
		return 0, badRequest(what + " must be a whole number of milliseconds written in digits, got " + strconv.Quote(text))
	}
	return timeoutMs(what, ms)
}

// timeoutMs checks ms, the value of what, as a timeout: positive, at most
// maxTimeoutMs. Zero is refused rather than taken for no deadline: a
// deadline of now has always passed, and no deadline is said by leaving the
// field out (or null), in every place a timeout is given.
func timeoutMs(what string, ms int64) (time.Duration, error) {
	switch {
	case ms < 0:
		return 0, badRequest(what + " must not be negative, got " + strconv.FormatInt(ms, 10))
	case ms == 0:
		return 0, badRequest(what + " must be positive, got 0: leave it out for no deadline")
	case ms > maxTimeoutMs:
		return 0, badRequest(what + " " + strconv.FormatInt(ms, 10) + " is out of range: at most " + strconv.FormatInt(maxTimeoutMs, 10))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// maxTimeoutMs is the longest timeout a request may give, in milliseconds:
// the longest a time.Duration holds.
const maxTimeoutMs = math.MaxInt64 / int64(time.Millisecond)

// parseIntText parses a validated JSON number that must be a whole number
// that fits an int64.
func parseIntText(text []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(text), 10, 64)
	return n, err == nil
}

// jsonKind names the kind of the JSON value that starts data.
func jsonKind(data []byte) string {
	switch data[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func checkItemCount(n int, missing bool) error {
	switch {
	case missing:
		return badRequest(`missing "inputs": send {"inputs": [item, ...]}`)
	case n == 0:
		return badRequest(`empty "inputs": send at least one item`)
	}
	return nil
}

// applyTimeoutHeader takes the deadline of the header, when it is there,
// if it is shorter than the body's. A header given empty is refused, as a
// body's empty timeout_ms would be: only its absence means no deadline.
func applyTimeoutHeader(header http.Header, req *predictRequest) error {
	values, ok := header[TimeoutHeader]
	if !ok {
		return nil
	}
	if len(values) > 1 {
		// Which one would a proxy, or the client, have meant?
		return badRequest(fmt.Sprintf("%s is given %d times: give it once", TimeoutHeader, len(values)))
	}
	t, err := parseTimeoutMs(TimeoutHeader, strings.TrimSpace(values[0]))
	if err != nil {
		return err
	}
	if req.timeout == 0 || t < req.timeout {
		req.timeout = t
	}
	return nil
}

func itemError(index int, err error) error {
	return badRequest(fmt.Sprintf("item %d: %v", index, err))
}

// decodeMsgpack reads a msgpack map {"inputs": [item, ...], "timeout_ms": N}.
// Each item is checked to be one whole value and handed to the codec as a
// slice of the body.
func (h *handler) decodeMsgpack(body []byte, req *predictRequest) error {
	r := wire.NewMsgpackReader(body)
	defer r.Release()
	if c, err := r.PeekCode(); err != nil || !wire.IsMap(c) {
		if looksLikeJSONObject(body) {
			return badRequest(`body must be a msgpack map {"inputs": [...]}, and this one is JSON: send it as application/json`)
		}
		return badRequest(`body must be a msgpack map {"inputs": [...]}` + notA(c, err))
	}
	fields, err := r.MapLen()
	if err != nil {
		return badRequest("malformed msgpack body: " + err.Error())
	}
	seenInputs := false
	for range fields {
		key, err := r.StringBytes()
		if err != nil {
			return badRequest("malformed msgpack body: map key: " + err.Error())
		}
		switch string(key) {
		case "inputs":
			if seenInputs {
				return badRequest(`"inputs" is given twice`)
			}
			seenInputs = true
			err = h.decodeMsgpackInputs(r, req)
		case "timeout_ms":
			err = decodeMsgpackTimeout(r, req)
		default:
			if _, err = r.Skip(1); err != nil {
				err = badRequest("malformed msgpack body: " + string(key) + ": " + err.Error())
			}
		}
		if err != nil {
			return err
		}
	}
	if left := r.Len(); left != 0 {
		return badRequest("malformed msgpack body: " + strconv.Itoa(left) + " bytes after the map")
	}
	return checkItemCount(len(req.items), req.items == nil)
}

// notA says what a body that is not a map is instead.
func notA(code byte, err error) string {
	if err != nil {
		return ": " + err.Error()
	}
	return ", not " + wire.KindOf(code)
}

// decodeMsgpackInputs reads the inputs array; nil counts as missing. The
// announced length is checked against the bytes left before anything is
// allocated for it.
func (h *handler) decodeMsgpackInputs(r *wire.MsgpackReader, req *predictRequest) error {
	if c, err := r.PeekCode(); err == nil && c != msgpcode.Nil && !wire.IsArray(c) {
		return badRequest(`"inputs" must be an array of items, not ` + wire.KindOf(c))
	}
	n, err := r.ArrayLen()
	if err != nil {
		var tooLong *wire.LengthError
		if errors.As(err, &tooLong) {
			return badRequest(`malformed msgpack body: "inputs" announces ` + strconv.Itoa(tooLong.Announced) + " items in the " + strconv.Itoa(tooLong.Left) + " bytes left")
		}
		return badRequest(`"inputs" must be an array of items: ` + err.Error())
	}
	if n < 0 {
		return nil
	}
	req.items = make([][]byte, 0, n)
	for i := range n {
		raw, err := r.Skip(2)
		if err != nil {
			return badRequest(fmt.Sprintf("malformed msgpack body: item %d: %v", i, err))
		}
		item, key, err := h.codec.FromMsgpack(msgpack.RawMessage(raw))
		if err != nil {
			return itemError(i, err)
		}
		req.addItem(item, key)
	}
	return nil
}

// decodeMsgpackTimeout reads timeout_ms: an integer, or nil for none.
func decodeMsgpackTimeout(r *wire.MsgpackReader, req *predictRequest) error {
	if c, err := r.PeekCode(); err == nil && c == msgpcode.Nil {
		_, err = r.Skip(1)
		return err
	}
	ms, err := r.Int64()
	if err != nil {
		return badRequest(`"timeout_ms" must be a whole number of milliseconds: ` + err.Error())
	}
	req.timeout, err = timeoutMs(`"timeout_ms"`, ms)
	return err
}

// decodeForm reads the original service-streamer's client format: one form
// field s per item, each a string. Each becomes a msgpack string item; one
// that is not valid UTF-8 is refused, as JSON strings are.
func (h *handler) decodeForm(body []byte, req *predictRequest) error {
	values, err := url.ParseQuery(string(body))
	if err != nil {
		return badRequest("malformed form body: " + err.Error())
	}
	strs, ok := values["s"]
	if !ok {
		return badRequest(`missing form field "s": send one s=... per item`)
	}
	if ms, ok := values["timeout_ms"]; ok {
		if req.timeout, err = parseTimeoutMs(`"timeout_ms"`, ms[0]); err != nil {
			return err
		}
	}
	req.items = make([][]byte, 0, len(strs))
	for i, s := range strs {
		if !utf8.ValidString(s) {
			// Its percent escapes decode to bytes that are not text.
			return itemError(i, fmt.Errorf("form field s: %w; send text in UTF-8, or bytes in msgpack as a bin", wire.CheckText([]byte(s))))
		}
		raw, err := msgpack.Marshal(s)
		if err != nil {
			return itemError(i, err)
		}
		item, key, err := h.codec.FromMsgpack(raw)
		if err != nil {
			return itemError(i, err)
		}
		req.addItem(item, key)
	}
	return nil
}

// appendJSONOutputs writes {"outputs":[...]} with each output in its JSON
// form. An output that has none is the model's fault: 500.
func (h *handler) appendJSONOutputs(out *bytes.Buffer, outputs [][]byte) error {
	out.WriteString(`{"outputs":[`)
	for i, o := range outputs {
		if i > 0 {
			out.WriteByte(',')
		}
		b, err := h.codec.AppendJSON(out.AvailableBuffer(), o)
		if err != nil {
			return fmt.Errorf("output %d: %w", i, err)
		}
		out.Write(b)
	}
	out.WriteString("]}\n")
	return nil
}

// appendMsgpackOutputs writes the msgpack map {"outputs": [...]}. The
// outputs are msgpack already and are spliced in as they are, once checked
// to be one whole value each: a broken model must not corrupt the answer.
func appendMsgpackOutputs(out *bytes.Buffer, outputs [][]byte) error {
	for i, o := range outputs {
		n, err := wire.SkipMsgpack(o, wire.MaxDepth)
		if err == nil && n != len(o) {
			err = &wire.Error{Offset: n, Problem: strconv.Itoa(len(o)-n) + " bytes after the value"}
		}
		if err != nil {
			return fmt.Errorf("output %d is not one msgpack value: %w", i, err)
		}
	}
	out.WriteByte(0x81) // a map of one entry
	out.WriteString("\xa7outputs")
	switch n := len(outputs); {
	case n < 16:
		out.WriteByte(0x90 | byte(n))
	case n <= 0xffff:
		out.Write([]byte{0xdc, byte(n >> 8), byte(n)})
	default:
		out.Write([]byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	}
	for _, o := range outputs {
		out.Write(o)
	}
	return nil
}
