package httpapi

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/wire/wiretest"
	"github.com/streamer-dev/streamer/supervisor"
)

// fakeBackend answers requests the way a test says; by default it echoes
// every item. It records the last request and its context.
type fakeBackend struct {
	mu      sync.Mutex
	submit  func(ctx context.Context, req supervisor.Request) (*answer, error)
	last    supervisor.Request
	lastCtx context.Context
	calls   int
	ready   bool
	stats   supervisor.Stats
	slots   []supervisor.SlotStatus
}

func (b *fakeBackend) PredictRequest(ctx context.Context, req supervisor.Request) ([][]byte, error) {
	b.mu.Lock()
	b.last, b.lastCtx = req, ctx
	b.calls++
	submit := b.submit
	b.mu.Unlock()
	f := echoAnswer(req)
	if submit != nil {
		var err error
		if f, err = submit(ctx, req); err != nil {
			return nil, err
		}
	}
	return f.Result(ctx)
}

func (b *fakeBackend) Ready() bool                    { return b.ready }
func (b *fakeBackend) Stats() supervisor.Stats        { return b.stats }
func (b *fakeBackend) Slots() []supervisor.SlotStatus { return b.slots }

func (b *fakeBackend) lastRequest() (supervisor.Request, context.Context, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last, b.lastCtx, b.calls
}

// answer is a fake backend's reply to one request, completed item by item
// from any goroutine, and waited for as supervisor.Future's Result is.
type answer struct {
	mu      sync.Mutex
	outputs [][]byte
	errs    []error
	left    int
	done    chan struct{}
}

func newAnswer(n int) *answer {
	return &answer{outputs: make([][]byte, n), errs: make([]error, n), left: n, done: make(chan struct{})}
}

func (a *answer) complete(i int, output []byte, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outputs[i], a.errs[i] = output, err
	if a.left--; a.left == 0 {
		close(a.done)
	}
}

// Result waits for every item, or for ctx, with the errors the real Future
// gives: the first failed item's as an *supervisor.ItemError, ErrDeadline
// or ErrCanceled when ctx ends first.
func (a *answer) Result(ctx context.Context) ([][]byte, error) {
	select {
	case <-a.done:
	case <-ctx.Done():
		select {
		case <-a.done: // answered as the wait ended: the answer wins
		default:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: %v", supervisor.ErrDeadline, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %v", supervisor.ErrCanceled, ctx.Err())
		}
	}
	for i, err := range a.errs {
		if err != nil {
			return a.outputs, &supervisor.ItemError{Index: i, Err: err}
		}
	}
	return a.outputs, nil
}

func echoAnswer(req supervisor.Request) *answer {
	f := newAnswer(len(req.Items))
	for i, it := range req.Items {
		f.complete(i, it, nil)
	}
	return f
}

// do runs one request through h in process.
func do(t testing.TB, h http.Handler, method, path, contentType string, body []byte, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// errorOf decodes a JSON error answer, failing the test when it is not one.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error answer has Content-Type %q, want application/json; body %q", ct, rec.Body.String())
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("error answer %q is not {\"error\": \"...\"}: %v", rec.Body.String(), err)
	}
	return e.Error
}

var mustMsgpack = wiretest.MustMsgpack

// pickyCodec refuses the JSON or msgpack string "bad" and gives the string
// "other" its own batch key.
type pickyCodec struct{ Generic }

func (c pickyCodec) check(item []byte) ([]byte, string, error) {
	var s string
	if msgpack.Unmarshal(item, &s) == nil {
		switch s {
		case "bad":
			return nil, "", errors.New("the model does not take \"bad\"")
		case "other":
			return item, "other-key", nil
		}
	}
	return item, "", nil
}

func (c pickyCodec) FromJSON(raw json.RawMessage) ([]byte, string, error) {
	item, _, err := c.Generic.FromJSON(raw)
	if err != nil {
		return nil, "", err
	}
	return c.check(item)
}

func (c pickyCodec) FromMsgpack(raw msgpack.RawMessage) ([]byte, string, error) {
	return c.check(raw)
}

// truncate drops the last n bytes of b.
func truncate(b []byte, n int) []byte { return b[: len(b)-n : len(b)-n] }

func TestPredictRefusesBadInput(t *testing.T) {
	msgpackMap := func(kv ...any) []byte {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return mustMsgpack(t, m)
	}
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        []byte
		header      []string
		wantStatus  int
		wantMsg     []string // substrings of the error message
	}{
		{name: "malformed JSON", body: []byte(`{"inputs": [1,`), wantStatus: 400, wantMsg: []string{"malformed JSON body"}},
		{name: "JSON garbage", body: []byte(`hello`), wantStatus: 400, wantMsg: []string{"malformed JSON body"}},
		{name: "JSON not an object", body: []byte(`[1, 2]`), wantStatus: 400, wantMsg: []string{"must be a JSON object", "array"}},
		{name: "inputs not an array", body: []byte(`{"inputs": 3}`), wantStatus: 400, wantMsg: []string{`"inputs" must be an array`, "number"}},
		{name: "missing inputs", body: []byte(`{"timeout_ms": 5}`), wantStatus: 400, wantMsg: []string{`missing "inputs"`}},
		{name: "null inputs", body: []byte(`{"inputs": null}`), wantStatus: 400, wantMsg: []string{`missing "inputs"`}},
		{name: "empty inputs", body: []byte(`{"inputs": []}`), wantStatus: 400, wantMsg: []string{`empty "inputs"`}},
		{name: "empty body", body: nil, wantStatus: 400, wantMsg: []string{"malformed JSON body"}},
		{name: "negative timeout_ms", body: []byte(`{"inputs": [1], "timeout_ms": -5}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" must not be negative`}},
		{name: "fractional timeout_ms", body: []byte(`{"inputs": [1], "timeout_ms": 1.5}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be a whole number`}},
		{name: "timeout_ms with an exponent", body: []byte(`{"inputs": [1], "timeout_ms": 1e20}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be a whole number of milliseconds written in digits, got "1e20"`}},
		{name: "timeout_ms past int64", body: []byte(`{"inputs": [1], "timeout_ms": 99999999999999999999}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" 99999999999999999999 is out of range: at most 9223372036854`}},
		{name: "timeout_ms past a duration", body: []byte(`{"inputs": [1], "timeout_ms": 9223372036854776}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" 9223372036854776 is out of range: at most 9223372036854`}},
		{name: "bad timeout header", body: []byte(`{"inputs": [1]}`), header: []string{TimeoutHeader, "soon"}, wantStatus: 400, wantMsg: []string{TimeoutHeader, `"soon"`}},
		{name: "zero timeout_ms", body: []byte(`{"inputs": [1], "timeout_ms": 0}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be positive, got 0: leave it out for no deadline`}},
		{name: "zero timeout header", body: []byte(`{"inputs": [1]}`), header: []string{TimeoutHeader, "0"}, wantStatus: 400, wantMsg: []string{TimeoutHeader + " must be positive, got 0: leave it out for no deadline"}},
		{name: "empty timeout header", body: []byte(`{"inputs": [1]}`), header: []string{TimeoutHeader, ""}, wantStatus: 400, wantMsg: []string{TimeoutHeader + " is empty", "leave it out for no deadline"}},
		{name: "negative timeout header", body: []byte(`{"inputs": [1]}`), header: []string{TimeoutHeader, "-5"}, wantStatus: 400, wantMsg: []string{TimeoutHeader + " must not be negative, got -5"}},
		{name: "msgpack zero timeout", contentType: "application/msgpack", body: msgpackMap("inputs", []any{1}, "timeout_ms", 0), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be positive, got 0`}},
		{name: "form zero timeout", contentType: "application/x-www-form-urlencoded", body: []byte("s=a&timeout_ms=0"), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be positive, got 0`}},
		{name: "form empty timeout", contentType: "application/x-www-form-urlencoded", body: []byte("s=a&timeout_ms="), wantStatus: 400, wantMsg: []string{`"timeout_ms" is empty`}},
		{name: "timeout header past a duration", body: []byte(`{"inputs": [1]}`), header: []string{TimeoutHeader, "9223372036854776"}, wantStatus: 400, wantMsg: []string{TimeoutHeader, "is out of range"}},
		{name: "timeout header past int64", body: []byte(`{"inputs": [1]}`), header: []string{TimeoutHeader, "99999999999999999999"}, wantStatus: 400, wantMsg: []string{TimeoutHeader, "is out of range"}},
		{name: "timeout_ms far below zero", body: []byte(`{"inputs": [1], "timeout_ms": -99999999999999999999}`), wantStatus: 400, wantMsg: []string{`"timeout_ms" must not be negative`}},
		{name: "form timeout past int64", contentType: "application/x-www-form-urlencoded", body: []byte("s=a&timeout_ms=99999999999999999999"), wantStatus: 400, wantMsg: []string{`"timeout_ms" 99999999999999999999 is out of range`}},
		{name: "codec refuses JSON item", body: []byte(`{"inputs": ["good", "bad"]}`), wantStatus: 400, wantMsg: []string{"item 1", `does not take "bad"`}},
		{name: "codec refuses msgpack item", contentType: "application/msgpack", body: msgpackMap("inputs", []any{"bad"}), wantStatus: 400, wantMsg: []string{"item 0", `does not take "bad"`}},
		{name: "codec refuses form item", contentType: "application/x-www-form-urlencoded", body: []byte("s=a&s=b&s=bad"), wantStatus: 400, wantMsg: []string{"item 2", `does not take "bad"`}},
		{name: "msgpack garbage", contentType: "application/msgpack", body: []byte{0xc1, 0x00}, wantStatus: 400, wantMsg: []string{"must be a msgpack map", "the byte 0xc1, which begins no msgpack value"}},
		{name: "msgpack a number", contentType: "application/msgpack", body: []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, wantStatus: 400, wantMsg: []string{"must be a msgpack map", "not a number"}},
		{name: "JSON labelled msgpack", contentType: "application/msgpack", body: []byte(`{"inputs": [1]}`), wantStatus: 400, wantMsg: []string{"this one is JSON: send it as application/json"}},
		{name: "msgpack not a map", contentType: "application/msgpack", body: mustMsgpack(t, []int{1}), wantStatus: 400, wantMsg: []string{"must be a msgpack map"}},
		{name: "msgpack truncated item", contentType: "application/msgpack", body: truncate(msgpackMap("inputs", []any{"a", "b"}), 1), wantStatus: 400, wantMsg: []string{"malformed msgpack body", "item 1"}},
		{name: "msgpack inputs not an array", contentType: "application/msgpack", body: msgpackMap("inputs", "x"), wantStatus: 400, wantMsg: []string{`"inputs" must be an array`}},
		{name: "msgpack missing inputs", contentType: "application/msgpack", body: msgpackMap("other", 1), wantStatus: 400, wantMsg: []string{`missing "inputs"`}},
		{name: "msgpack nil inputs", contentType: "application/msgpack", body: msgpackMap("inputs", nil), wantStatus: 400, wantMsg: []string{`missing "inputs"`}},
		{name: "msgpack empty inputs", contentType: "application/msgpack", body: msgpackMap("inputs", []any{}), wantStatus: 400, wantMsg: []string{`empty "inputs"`}},
		{name: "msgpack trailing bytes", contentType: "application/msgpack", body: append(msgpackMap("inputs", []any{1}), 0x01), wantStatus: 400, wantMsg: []string{"1 bytes after the map"}},
		{name: "msgpack absurd item count", contentType: "application/msgpack", body: []byte("\x81\xa6inputs\xdd\xff\xff\xff\xff"), wantStatus: 400, wantMsg: []string{"announces 4294967295 items"}},
		{name: "msgpack bad timeout", contentType: "application/msgpack", body: msgpackMap("inputs", []any{1}, "timeout_ms", "x"), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be a whole number`}},
		{name: "msgpack negative timeout", contentType: "application/msgpack", body: msgpackMap("inputs", []any{1}, "timeout_ms", -1), wantStatus: 400, wantMsg: []string{`"timeout_ms" must not be negative`}},
		{name: "form without s", contentType: "application/x-www-form-urlencoded", body: []byte("x=1"), wantStatus: 400, wantMsg: []string{`missing form field "s"`}},
		{name: "malformed form", contentType: "application/x-www-form-urlencoded", body: []byte("s=%zz"), wantStatus: 400, wantMsg: []string{"malformed form body"}},
		{name: "form bad timeout", contentType: "application/x-www-form-urlencoded", body: []byte("s=a&timeout_ms=x"), wantStatus: 400, wantMsg: []string{`"timeout_ms" must be a whole number`}},
		{name: "body too large", body: []byte(`{"inputs": ["` + strings.Repeat("x", 2000) + `"]}`), wantStatus: 413, wantMsg: []string{"larger than the limit of 1024 bytes"}},
		{name: "JSON in another charset", contentType: "application/json; charset=ISO-8859-1", body: []byte("{\"inputs\": [\"caf\xe9\"]}"), wantStatus: 415, wantMsg: []string{`"application/json; charset=ISO-8859-1"`, "read as UTF-8"}},
		{name: "form in another charset", contentType: "application/x-www-form-urlencoded; charset=iso-8859-1", body: []byte("s=caf%E9"), wantStatus: 415, wantMsg: []string{`"application/x-www-form-urlencoded; charset=iso-8859-1"`, "a form is read as UTF-8"}},
		{name: "unsupported content type", contentType: "text/plain; charset=utf-8", body: []byte("hi"), wantStatus: 415, wantMsg: []string{`"text/plain; charset=utf-8"`, "application/json", "application/msgpack", "application/x-www-form-urlencoded"}},
		{name: "timeout header with a sign", header: []string{"X-Timeout-Ms", "+5"}, body: []byte(`{"inputs": [1]}`), wantStatus: 400, wantMsg: []string{"written in digits", `"+5"`}},
		{name: "timeout header twice", header: []string{"X-Timeout-Ms", "500", "X-Timeout-Ms", "0"}, body: []byte(`{"inputs": [1]}`), wantStatus: 400, wantMsg: []string{"X-Timeout-Ms is given 2 times"}},
		{name: "body in a coding it does not read", body: []byte(`{"inputs": [1]}`), header: []string{"Content-Encoding", "br"}, wantStatus: 415, wantMsg: []string{`Content-Encoding "br" is not supported`, "gzip or deflate", "uncompressed"}},
		{name: "GET predict", method: http.MethodGet, wantStatus: 405, wantMsg: []string{"method not allowed", "POST"}},
		{name: "POST healthz", method: http.MethodPost, path: "/healthz", wantStatus: 405, wantMsg: []string{"method not allowed", "GET"}},
		{name: "unknown path", method: http.MethodGet, path: "/nope", wantStatus: 404, wantMsg: []string{`"/nope"`, "/predict"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := &fakeBackend{}
			h := New(Config{Backend: backend, Codec: pickyCodec{}, MaxBody: 1024})
			method, path := tt.method, tt.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/predict"
			}
			rec := do(t, h, method, path, tt.contentType, tt.body, tt.header...)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body.String())
			}
			msg := errorOf(t, rec)
			for _, want := range tt.wantMsg {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
			if _, _, calls := backend.lastRequest(); calls != 0 {
				t.Errorf("a refused request reached the backend %d times", calls)
			}
		})
	}
}

func TestPredictRefusesBodyOfUnknownLengthOverLimit(t *testing.T) {
	backend := &fakeBackend{}
	h := New(Config{Backend: backend, MaxBody: 100})
	body := `{"inputs": ["` + strings.Repeat("x", 500) + `"]}`
	req := httptest.NewRequest(http.MethodPost, "/predict", io.MultiReader(strings.NewReader(body)))
	req.ContentLength = -1 // chunked: only reading finds the size
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413; body %s", rec.Code, rec.Body.String())
	}
	if msg := errorOf(t, rec); !strings.Contains(msg, "limit of 100 bytes") {
		t.Errorf("error %q does not name the limit", msg)
	}
}

func TestPredictAnswersEachContentType(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		body        []byte
		wantItems   []any // what the backend must receive, decoded from msgpack
		wantJSON    string
		wantMsgpack []any
	}{
		{
			name:      "JSON without content type",
			body:      []byte(`{"inputs": ["a", 2, {"k": [1.5, true, null]}]}`),
			wantItems: []any{"a", int8(2), map[string]any{"k": []any{1.5, true, nil}}},
			wantJSON:  `{"outputs":["a",2,{"k":[1.5,true,null]}]}`,
		},
		{
			name:        "JSON with charset",
			contentType: "application/json; charset=utf-8",
			body:        []byte(`{"inputs": ["x"]}`),
			wantItems:   []any{"x"},
			wantJSON:    `{"outputs":["x"]}`,
		},
		{
			name:        "msgpack",
			contentType: "application/msgpack",
			body:        mustMsgpack(t, map[string]any{"inputs": []any{"a", []byte{1, 2}, 3.25}, "extra": []int{1}}),
			wantItems:   []any{"a", []byte{1, 2}, 3.25},
			wantMsgpack: []any{"a", []byte{1, 2}, 3.25},
		},
		{
			name:        "x-msgpack",
			contentType: "application/x-msgpack",
			body:        mustMsgpack(t, map[string]any{"inputs": []any{int8(-1)}}),
			wantItems:   []any{int8(-1)},
			wantMsgpack: []any{int8(-1)},
		},
		{
			name:        "JSON sent as a form, as curl -d does",
			contentType: "application/x-www-form-urlencoded",
			body:        []byte(` {"inputs": ["x", 1]}`),
			wantItems:   []any{"x", int8(1)},
			wantJSON:    `{"outputs":["x",1]}`,
		},
		{
			name:        "form",
			contentType: "application/x-www-form-urlencoded",
			body:        []byte(url.Values{"s": {"I love [MASK].", "héllo & bye"}}.Encode()),
			wantItems:   []any{"I love [MASK].", "héllo & bye"},
			wantJSON:    `{"outputs":["I love [MASK].","héllo & bye"]}`,
		},
		{
			name:        "form that names its charset",
			contentType: "application/x-www-form-urlencoded; charset=UTF-8",
			body:        []byte("s=h%C3%A9llo"),
			wantItems:   []any{"héllo"},
			wantJSON:    `{"outputs":["héllo"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := &fakeBackend{}
			h := New(Config{Backend: backend})
			rec := do(t, h, http.MethodPost, "/predict", tt.contentType, tt.body)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d; body %s", rec.Code, rec.Body.String())
			}
			req, _, _ := backend.lastRequest()
			var got []any
			for _, it := range req.Items {
				var v any
				if err := msgpack.Unmarshal(it, &v); err != nil {
					t.Fatalf("backend got an item that is not msgpack: %x", it)
				}
				got = append(got, v)
			}
			if !reflect.DeepEqual(got, tt.wantItems) {
				t.Errorf("backend got items %#v, want %#v", got, tt.wantItems)
			}
			if req.Keys != nil {
				t.Errorf("Keys = %q, want nil when the codec sets none", req.Keys)
			}
			if tt.wantMsgpack != nil {
				if ct := rec.Header().Get("Content-Type"); ct != "application/msgpack" {
					t.Errorf("Content-Type %q, want application/msgpack", ct)
				}
				var out struct {
					Outputs []any `msgpack:"outputs"`
				}
				if err := msgpack.Unmarshal(rec.Body.Bytes(), &out); err != nil {
					t.Fatalf("answer is not msgpack: %v", err)
				}
				if !reflect.DeepEqual(out.Outputs, tt.wantMsgpack) {
					t.Errorf("outputs %#v, want %#v", out.Outputs, tt.wantMsgpack)
				}
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if got := strings.TrimSpace(rec.Body.String()); got != tt.wantJSON {
				t.Errorf("answer %s, want %s", got, tt.wantJSON)
			}
		})
	}
}

func TestPredictJSONKeys(t *testing.T) {
	tests := []struct {
		body       string
		wantStatus int
	}{
		{`{"\u0069nputs": [1]}`, 200},                     // an escaped key is still "inputs"
		{`{"INPUTS": [1]}`, 400},                          // keys match exactly
		{`{"inputs": [1], "inputs": [2]}`, 400},           // given twice
		{`{"other": {"inputs": []}, "inputs": [1]}`, 200}, // unknown members are skipped
		{`{"inputs": [1], "timeout_ms": null}`, 200},      // null is no timeout
		{`{"inputs": [1], "timeout_ms": "5"}`, 400},       // a string is not a number
		{`{"inputs": [1], "timeout_ms": 99999999999999999999}`, 400},
	}
	for _, tt := range tests {
		h := New(Config{Backend: &fakeBackend{}})
		rec := do(t, h, http.MethodPost, "/predict", "", []byte(tt.body))
		if rec.Code != tt.wantStatus {
			t.Errorf("%s: status %d (%s), want %d", tt.body, rec.Code, rec.Body.String(), tt.wantStatus)
		}
	}
}

func TestPredictKeepsOrderWhenItemsFinishOutOfOrder(t *testing.T) {
	backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
		f := newAnswer(len(req.Items))
		for i := len(req.Items) - 1; i >= 0; i-- {
			go f.complete(i, req.Items[i], nil)
		}
		return f, nil
	}}
	h := New(Config{Backend: backend})
	var inputs []int
	for i := range 40 {
		inputs = append(inputs, i*7)
	}
	body, _ := json.Marshal(map[string]any{"inputs": inputs})
	rec := do(t, h, http.MethodPost, "/predict", "application/json", body)
	var out struct{ Outputs []int }
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
		t.Fatalf("status %d, body %s: %v", rec.Code, rec.Body.String(), err)
	}
	if !reflect.DeepEqual(out.Outputs, inputs) {
		t.Errorf("outputs %v, want %v", out.Outputs, inputs)
	}
}

func TestPredictMsgpackManyItemsRoundTrip(t *testing.T) {
	// 70 000 items need the array32 header in the answer; 20 need array16.
	for _, n := range []int{1, 15, 16, 20, 70000} {
		items := make([]any, n)
		for i := range items {
			items[i] = fmt.Sprintf("item-%d", i)
		}
		h := New(Config{Backend: &fakeBackend{}})
		rec := do(t, h, http.MethodPost, "/predict", "application/msgpack", mustMsgpack(t, map[string]any{"inputs": items}))
		var out struct {
			Outputs []any `msgpack:"outputs"`
		}
		if err := msgpack.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
			t.Fatalf("n=%d: status %d: %v", n, rec.Code, err)
		}
		if !reflect.DeepEqual(out.Outputs, items) {
			t.Errorf("n=%d: outputs differ from inputs", n)
		}
	}
}

func TestPredictPassesCodecKeys(t *testing.T) {
	backend := &fakeBackend{}
	h := New(Config{Backend: backend, Codec: pickyCodec{}})
	rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": ["a", "other", "b"]}`))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	req, _, _ := backend.lastRequest()
	if want := []string{"", "other-key", ""}; !reflect.DeepEqual(req.Keys, want) {
		t.Errorf("Keys %q, want %q", req.Keys, want)
	}
}

func TestPredictMapsErrors(t *testing.T) {
	tests := []struct {
		name       string
		submitErr  error // returned by SubmitRequest
		itemErr    error // else item 2 of 3 fails with it
		wantStatus int
		wantMsg    string
	}{
		{name: "overloaded", submitErr: fmt.Errorf("submit: %w", supervisor.ErrOverloaded), wantStatus: 429, wantMsg: "overloaded"},
		{name: "unavailable", submitErr: supervisor.ErrUnavailable, wantStatus: 503, wantMsg: "unavailable"},
		{name: "shutting down", submitErr: supervisor.ErrShuttingDown, wantStatus: 503, wantMsg: ShuttingDown},
		{name: "bad request", submitErr: fmt.Errorf("%w: no items", supervisor.ErrBadRequest), wantStatus: 400, wantMsg: "no items"},
		{name: "other submit error", submitErr: errors.New("disk on fire"), wantStatus: 500, wantMsg: "disk on fire"},
		{name: "poison item", itemErr: fmt.Errorf("%w: worker exited", supervisor.ErrPoison), wantStatus: 422, wantMsg: "item 2: item crashes the model"},
		{name: "model rejects item", itemErr: fmt.Errorf("%w: shape mismatch", supervisor.ErrModel), wantStatus: 422, wantMsg: "item 2: model error: shape mismatch"},
		{name: "item deadline", itemErr: supervisor.ErrDeadline, wantStatus: 504, wantMsg: "item 2: deadline passed"},
		{name: "item canceled", itemErr: supervisor.ErrCanceled, wantStatus: StatusClientClosedRequest, wantMsg: "canceled"},
		{name: "item unavailable", itemErr: supervisor.ErrUnavailable, wantStatus: 503, wantMsg: "item 2: unavailable"},
		{name: "item shutting down", itemErr: supervisor.ErrShuttingDown, wantStatus: 503, wantMsg: "item 2: shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
				if tt.submitErr != nil {
					return nil, tt.submitErr
				}
				f := newAnswer(len(req.Items))
				for i, it := range req.Items {
					if i == 2 {
						f.complete(i, nil, tt.itemErr)
					} else {
						f.complete(i, it, nil)
					}
				}
				return f, nil
			}}
			h := New(Config{Backend: backend, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1, 2, 3]}`))
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body.String())
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("error %q does not contain %q", msg, tt.wantMsg)
			}
			retry := rec.Header().Get("Retry-After")
			if (tt.wantStatus == 429 || tt.wantStatus == 503) != (retry == "1") {
				t.Errorf("Retry-After %q with status %d", retry, rec.Code)
			}
			if logged := strings.Contains(logs.String(), "level=ERROR"); logged != (tt.wantStatus == 500) {
				t.Errorf("error logged = %v for status %d: %q", logged, rec.Code, logs.String())
			}
		})
	}
}

// TestFailedRequestsAreNotLoggedEachAtError: a model that fails every
// batch fails every request: the first of its kind is logged at error
// level, and the next ones, within a few seconds, at debug level only; a
// failure of another kind is logged at once.
func TestFailedRequestsAreNotLoggedEachAtError(t *testing.T) {
	var logs bytes.Buffer
	fail := fmt.Errorf("%w: the worker died", supervisor.ErrModelFailed)
	backend := &fakeBackend{submit: func(context.Context, supervisor.Request) (*answer, error) { return nil, fail }}
	h := New(Config{Backend: backend, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for range 50 {
		if rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1]}`)); rec.Code != 500 {
			t.Fatalf("status %d, want 500", rec.Code)
		}
	}
	fail = errors.New("disk on fire")
	do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1]}`))
	errorLines := strings.Count(logs.String(), `level=ERROR msg="predict failed"`)
	debugLines := strings.Count(logs.String(), `level=DEBUG msg="predict failed"`)
	if errorLines != 2 || debugLines != 49 || !strings.Contains(logs.String(), "disk on fire") {
		t.Errorf("51 failed requests of two kinds: %d lines at error level and %d at debug, want 2 and 49:\n%s", errorLines, debugLines, logs.String())
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 200},
		{supervisor.ErrOverloaded, 429},
		{supervisor.ErrUnavailable, 503},
		{supervisor.ErrShuttingDown, 503},
		{supervisor.ErrDeadline, 504},
		{&supervisor.ItemError{Index: 4, Err: supervisor.ErrPoison}, 422},
		{&supervisor.ItemError{Index: 0, Err: supervisor.ErrModel}, 422},
		{supervisor.ErrCanceled, StatusClientClosedRequest},
		{supervisor.ErrBadRequest, 400},
		{context.Canceled, 500},
		{badRequest("x"), 400},
		{fmt.Errorf("reload: %w", supervisor.ErrBusy), 409},
		{supervisor.ErrNotStarted, 503},
	}
	for _, tt := range tests {
		if got := StatusOf(tt.err); got != tt.want {
			t.Errorf("StatusOf(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestPredictOutputWithoutJSONFormIs500(t *testing.T) {
	backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
		f := newAnswer(len(req.Items))
		f.complete(0, []byte{0xc1}, nil) // 0xc1 is never valid msgpack
		return f, nil
	}}
	h := New(Config{Backend: backend})
	rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1]}`))
	if rec.Code != 500 {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	if msg := errorOf(t, rec); !strings.Contains(msg, "output 0") || !strings.Contains(msg, "no JSON form") {
		t.Errorf("error %q does not say which output is broken and why", msg)
	}
}

// TestPredictRefusesStringsThatAreNotText: a JSON item holding a string
// that is not valid UTF-8, or has a lone surrogate escape, is refused
// naming the item, where encoding/json would hand the model U+FFFD; so is
// a form field s whose escapes decode to bytes that are not text, which
// reached the model, whose answer then had no JSON form (a 500).
func TestPredictRefusesStringsThatAreNotText(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	tests := []struct {
		contentType string
		body        string
		want        string
	}{
		{form, "s=ok&s=%ff%fe", `item 1: form field s: offset 0: string is not valid UTF-8: byte 0xff; send text in UTF-8`},
		{form, "s=caf%E9", `item 0: form field s: offset 3: string is not valid UTF-8: byte 0xe9`},
		{"application/json", "{\"inputs\": [\"\\udc00\", \"a\xffb\"]}", `item 0: offset 1: string has a lone surrogate escape \udc00, which is not valid UTF-8`},
		{"application/json", "{\"inputs\": [\"ok\", \"a\xffb\"]}", `item 1: offset 2: string is not valid UTF-8: byte 0xff`},
		{"application/json", `{"inputs": [1, {"k": ["\ud83d\u0041"]}]}`, `item 1: offset 8: string has a lone surrogate escape \ud83d`},
		{"application/json", "{\"inputs\": [{\"\xc3\": 1}]}", `item 0: offset 2: string is not valid UTF-8: byte 0xc3`},
		{"application/json", "{\"inputs\": [1], \"\\ud800\": 2}", `JSON body: offset 17: string has a lone surrogate escape \ud800`},
	}
	for _, tt := range tests {
		backend := &fakeBackend{}
		rec := do(t, New(Config{Backend: backend}), http.MethodPost, "/predict", tt.contentType, []byte(tt.body))
		if rec.Code != http.StatusBadRequest || !strings.Contains(errorOf(t, rec), tt.want) {
			t.Errorf("body %q: status %d %s, want 400 saying %q", tt.body, rec.Code, rec.Body, tt.want)
		}
		if _, _, calls := backend.lastRequest(); calls != 0 {
			t.Errorf("body %q: a refused request reached the backend", tt.body)
		}
	}
}

// TestPredictKeepsIntegersExact: a JSON integer past int64 that fits a
// uint64 reaches the model as a msgpack uint64 and comes back as it was
// sent; past that, or below int64, it is a float64.
func TestPredictKeepsIntegersExact(t *testing.T) {
	backend := &fakeBackend{}
	body := `{"inputs": [18446744073709551615, 9223372036854775809, -9223372036854775808, 18446744073709551616, -9223372036854775809]}`
	rec := do(t, New(Config{Backend: backend}), http.MethodPost, "/predict", "application/json", []byte(body))
	want := `{"outputs":[18446744073709551615,9223372036854775809,-9223372036854775808,18446744073709552000,-9223372036854776000]}`
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != want {
		t.Fatalf("status %d %s, want 200 %s", rec.Code, rec.Body, want)
	}
	req, _, _ := backend.lastRequest()
	for i, item := range []string{"cfffffffffffffffff", "cf8000000000000001", "d38000000000000000", "cb43f0000000000000", "cbc3e0000000000000"} {
		if got := hex.EncodeToString(req.Items[i]); got != item {
			t.Errorf("item %d reached the model as %s, want %s", i, got, item)
		}
	}
}

// TestPredictOutputStrNotUTF8Is500: a str output that is not valid UTF-8
// has no JSON form, as an extension has none: refused naming the output,
// not written with U+FFFD. Bytes go as a bin, which JSON carries as base64.
func TestPredictOutputStrNotUTF8Is500(t *testing.T) {
	outputs := [][]byte{{0xc4, 0x02, 0xff, 0x00}, {0xa3, 'a', 0xff, 'b'}}
	backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
		f := newAnswer(len(req.Items))
		for i := range req.Items {
			f.complete(i, outputs[i], nil)
		}
		return f, nil
	}}
	h := New(Config{Backend: backend})
	rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1, 2]}`))
	if msg := errorOf(t, rec); rec.Code != 500 || !strings.Contains(msg, "output 1: model output has no JSON form: offset 2: a str that is not valid UTF-8 (byte 0xff)") {
		t.Errorf("status %d %q, want 500 naming output 1 and its byte", rec.Code, msg)
	}
	rec = do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1]}`))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"outputs":["/wA="]}` {
		t.Errorf("a bin output: status %d %s, want 200 with base64", rec.Code, rec.Body)
	}
}

func TestPredictMsgpackOutputThatIsNotMsgpackIs500(t *testing.T) {
	for _, output := range [][]byte{{0xc1}, {0x01, 0x02}, {0xa3, 'a'}} {
		backend := &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
			f := newAnswer(len(req.Items))
			f.complete(0, req.Items[0], nil)
			f.complete(1, output, nil)
			return f, nil
		}}
		h := New(Config{Backend: backend})
		rec := do(t, h, http.MethodPost, "/predict", "application/msgpack", mustMsgpack(t, map[string]any{"inputs": []int{1, 2}}))
		if rec.Code != 500 {
			t.Fatalf("output %x: status %d, want 500", output, rec.Code)
		}
		if msg := errorOf(t, rec); !strings.Contains(msg, "output 1 is not one msgpack value") {
			t.Errorf("output %x: error %q does not name the broken output", output, msg)
		}
	}
}

// blockingBackend never answers on its own: the test or the deadline does.
func blockingBackend() *fakeBackend {
	return &fakeBackend{submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
		return newAnswer(len(req.Items)), nil
	}}
}

func TestPredictDeadline(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		header []string
		want   time.Duration
	}{
		{name: "body", body: `{"inputs": [1], "timeout_ms": 80}`, want: 80 * time.Millisecond},
		{name: "header", body: `{"inputs": [1]}`, header: []string{TimeoutHeader, "60"}, want: 60 * time.Millisecond},
		{name: "shorter header wins", body: `{"inputs": [1], "timeout_ms": 5000}`, header: []string{TimeoutHeader, "70"}, want: 70 * time.Millisecond},
		{name: "shorter body wins", body: `{"inputs": [1], "timeout_ms": 50}`, header: []string{TimeoutHeader, "5000"}, want: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := blockingBackend()
			h := New(Config{Backend: backend})
			start := time.Now()
			rec := do(t, h, http.MethodPost, "/predict", "", []byte(tt.body), tt.header...)
			took := time.Since(start)
			if rec.Code != http.StatusGatewayTimeout {
				t.Fatalf("status %d, want 504; body %s", rec.Code, rec.Body.String())
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, "deadline") {
				t.Errorf("error %q does not mention the deadline", msg)
			}
			if took < tt.want || took > tt.want+2*time.Second {
				t.Errorf("answered after %s, want about %s", took, tt.want)
			}
			req, ctx, _ := backend.lastRequest()
			if d := req.Deadline.Sub(start); d < tt.want-time.Millisecond || d > tt.want+time.Second {
				t.Errorf("Request.Deadline is %s after the start, want %s", d, tt.want)
			}
			if cd, ok := ctx.Deadline(); !ok || !cd.Equal(req.Deadline) {
				t.Errorf("context deadline %v (set %v), want the request's %v", cd, ok, req.Deadline)
			}
		})
	}
}

func TestPredictWithoutTimeoutHasNoDeadline(t *testing.T) {
	backend := &fakeBackend{}
	h := New(Config{Backend: backend})
	if rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1]}`)); rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	req, ctx, _ := backend.lastRequest()
	if !req.Deadline.IsZero() {
		t.Errorf("Deadline %v, want none", req.Deadline)
	}
	if _, ok := ctx.Deadline(); ok {
		t.Error("context has a deadline, want none")
	}
}

func TestPredictClientGoneCancelsContext(t *testing.T) {
	submitted := make(chan context.Context, 1)
	backend := &fakeBackend{submit: func(ctx context.Context, req supervisor.Request) (*answer, error) {
		submitted <- ctx
		return newAnswer(len(req.Items)), nil
	}}
	srv := httptest.NewServer(New(Config{Backend: backend}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/predict", strings.NewReader(`{"inputs": [1]}`))
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	var serverCtx context.Context
	select {
	case serverCtx = <-submitted:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the backend")
	}
	cancel()
	select {
	case <-serverCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context given to the backend did not end when the client went away")
	}
	if err := <-errc; err == nil {
		t.Error("the canceled client request succeeded")
	}
}

func TestGetRoutes(t *testing.T) {
	backend := &fakeBackend{
		ready: true,
		stats: supervisor.Stats{Submitted: 10, Answered: 9, Batches: 3, BatchSizes: []uint64{0, 1, 0, 2},
			Dispatch: supervisor.DispatchStats{Full: 1, Waited: 2, WaitAddedMs: 1.5}, Cost: supervisor.CostStats{Fitted: true, FixedMs: 10, PerItemMs: 0.1, Batches: 3},
			Returns: supervisor.ReturnStats{Share: 0.9, FirstMs: 0.5, GapMs: 0.05}},
		slots: []supervisor.SlotStatus{{Slot: 0, State: supervisor.SlotReady, PID: 42, CUDA: "1", Restarts: 2}},
	}
	h := New(Config{Backend: backend, Model: map[string]any{"model": "echo", "workers": 1}})
	tests := []struct {
		path string
		want string
	}{
		{"/healthz", `{"status":"ok"}`},
		{"/readyz", `{"status":"ready"}`},
		{"/v1/models", `{"model":"echo","workers":1}`},
		{"/v1/stats", `{"submitted":10,"answered":9,"failed":0,"rejected":0,"expired":0,"canceled":0,"batches":3,"batch_sizes":[0,1,0,2],"queued":0,"room_kept":0,"crashes":0,"poisoned":0,"dispatch":{"full":1,"idle":0,"waited":2,"max_latency":0,"deadline":0,"retry":0,"recalled":0,"wait_added_ms":1.5},"cost":{"fitted":true,"fixed_ms":10,"per_item_ms":0.1,"batches":3},"returns":{"share":0.9,"first_ms":0.5,"gap_ms":0.05},"latency":{"queue_wait":{"bounds_s":null,"counts":null,"sum_s":0},"compute":{"bounds_s":null,"counts":null,"sum_s":0},"end_to_end":{"bounds_s":null,"counts":null,"sum_s":0}},"reloads":0,"reload_failures":0,"mean_batch_size":2.3333333333333335,"requests":{"canceled":0,"failed":0,"ok":0,"poisoned":0,"rejected":0,"timed_out":0}}`},
		{"/v1/workers", `[{"slot":0,"state":"ready","pid":42,"cuda_visible_devices":"1","restarts":2,"in_flight":0,"batches":0,"crashes":0}]`},
	}
	for _, tt := range tests {
		rec := do(t, h, http.MethodGet, tt.path, "", nil)
		if rec.Code != 200 {
			t.Errorf("GET %s: status %d", tt.path, rec.Code)
		}
		if got := strings.TrimSpace(rec.Body.String()); got != tt.want {
			t.Errorf("GET %s = %s, want %s", tt.path, got, tt.want)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q", tt.path, ct)
		}
	}
}

func TestReadyzFollowsBackend(t *testing.T) {
	for _, ready := range []bool{true, false} {
		h := New(Config{Backend: &fakeBackend{ready: ready}})
		rec := do(t, h, http.MethodGet, "/readyz", "", nil)
		want := map[bool]int{true: 200, false: 503}[ready]
		if rec.Code != want {
			t.Errorf("ready=%v: status %d, want %d", ready, rec.Code, want)
		}
		health := do(t, h, http.MethodGet, "/healthz", "", nil)
		if health.Code != 200 {
			t.Errorf("ready=%v: /healthz status %d, want 200 while the process runs", ready, health.Code)
		}
	}
}

func TestModelDefaultsToUnknown(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{}})
	rec := do(t, h, http.MethodGet, "/v1/models", "", nil)
	if got := strings.TrimSpace(rec.Body.String()); got != `{"model":"unknown"}` {
		t.Errorf("GET /v1/models = %s", got)
	}
}

func TestNewWithoutBackendPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted a nil Backend")
		}
	}()
	New(Config{})
}
