package httpapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/supervisor"
)

// compressions are the ways a client compresses a body, with the
// Content-Encoding it sends: deflate as HTTP has it (zlib-wrapped, as
// tritonclient's zlib.compress writes it) and raw, as some clients send it.
var compressions = []struct{ name, header string }{
	{"gzip", "gzip"},
	{"deflate", "deflate"},
	{"raw deflate", "deflate"},
}

// compress encodes body as compression name says.
func compress(t testing.TB, name string, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch name {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	case "raw deflate":
		w, _ = flate.NewWriter(&buf, flate.DefaultCompression)
	default:
		t.Fatalf("no compression %q", name)
	}
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCompressedPredictBodiesAreRead: a /predict body compressed with gzip
// or deflate, in JSON or msgpack, gets the answer its plain form gets, and
// so do the spellings of the header clients use.
func TestCompressedPredictBodiesAreRead(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}})
	bodies := []struct{ contentType string }{{"application/json"}, {"application/msgpack"}}
	plain := map[string][]byte{
		"application/json":    []byte(`{"inputs": ["a", {"b": [1, 2.5, null]}, "` + strings.Repeat("long ", 200) + `"], "timeout_ms": 5000}`),
		"application/msgpack": mustMsgpack(t, map[string]any{"inputs": []any{"a", map[string]any{"b": []any{1, 2.5, nil}}}}),
	}
	for _, b := range bodies {
		want := do(t, h, http.MethodPost, "/predict", b.contentType, plain[b.contentType])
		if want.Code != http.StatusOK {
			t.Fatalf("%s, plain: %d %s", b.contentType, want.Code, want.Body)
		}
		for _, c := range compressions {
			sent := compress(t, c.name, plain[b.contentType])
			got := do(t, h, http.MethodPost, "/predict", b.contentType, sent, "Content-Encoding", c.header)
			if got.Code != http.StatusOK || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
				t.Errorf("%s, %s: %d %q; want the plain body's %q", b.contentType, c.name, got.Code, got.Body, want.Body)
			}
		}
	}
	json := plain["application/json"]
	want := do(t, h, http.MethodPost, "/predict", "application/json", json).Body.String()
	for _, header := range [][]string{
		{"Content-Encoding", "x-gzip"},
		{"Content-Encoding", "GZip"},
		{"Content-Encoding", "identity, gzip"},
		{"Content-Encoding", "identity", "Content-Encoding", " gzip "},
	} {
		got := do(t, h, http.MethodPost, "/predict", "application/json", compress(t, "gzip", json), header...)
		if got.Code != http.StatusOK || got.Body.String() != want {
			t.Errorf("gzip with %q: %d %s", header, got.Code, got.Body)
		}
	}
	if got := do(t, h, http.MethodPost, "/predict", "application/json", json, "Content-Encoding", "identity"); got.Code != http.StatusOK || got.Body.String() != want {
		t.Errorf("identity: %d %s", got.Code, got.Body)
	}
}

// TestCompressedV2BinaryBodyIsRead: a v2 request with binary tensor data,
// compressed whole, is read as its plain form is; its
// Inference-Header-Content-Length counts the JSON of the decompressed body,
// as tritonclient sends it and Triton reads it.
func TestCompressedV2BinaryBodyIsRead(t *testing.T) {
	m := mixedRequest()
	h, body, hl := m.h, m.body, m.headerLength
	want := do(t, h, http.MethodPost, "/v2/models/m/infer", "application/octet-stream", body, InferenceHeaderLength, hl)
	if want.Code != http.StatusOK {
		t.Fatalf("plain: %d %s", want.Code, want.Body)
	}
	for _, c := range compressions {
		got := do(t, h, http.MethodPost, "/v2/models/m/infer", "application/octet-stream", compress(t, c.name, body),
			InferenceHeaderLength, hl, "Content-Encoding", c.header)
		if got.Code != http.StatusOK || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) ||
			got.Header().Get(InferenceHeaderLength) != want.Header().Get(InferenceHeaderLength) {
			t.Errorf("%s: %d %q; want the plain body's %q", c.name, got.Code, got.Body, want.Body)
		}
	}
	// A length counted in the compressed body is not the JSON's.
	sent := compress(t, "gzip", body)
	rec := do(t, h, http.MethodPost, "/v2/models/m/infer", "application/octet-stream", sent,
		InferenceHeaderLength, strconv.Itoa(len(sent)), "Content-Encoding", "gzip")
	if rec.Code != http.StatusBadRequest {
		t.Errorf("%s of the compressed body's length: %d %s; want 400", InferenceHeaderLength, rec.Code, rec.Body)
	}
}

// TestDecompressedBodyIsBoundedByMaxBody: the body limit holds for the body
// decompressed: one of exactly the limit is read, one a byte over it, or a
// bomb of megabytes sent in a few kilobytes, is 413 saying so, on both
// routes.
func TestDecompressedBodyIsBoundedByMaxBody(t *testing.T) {
	const maxBody = 4096
	h := New(Config{Backend: &fakeBackend{ready: true}, MaxBody: maxBody, Tensors: oneInput("BYTES")})
	padded := func(n int) []byte {
		body := []byte(`{"inputs": ["`)
		body = append(body, bytes.Repeat([]byte("a"), n-len(body)-len(`"]}`))...)
		return append(body, `"]}`...)
	}
	bomb := bytes.Repeat([]byte{' '}, 2<<20)
	for _, c := range compressions {
		if rec := do(t, h, http.MethodPost, "/predict", "application/json", compress(t, c.name, padded(maxBody)), "Content-Encoding", c.header); rec.Code != http.StatusOK {
			t.Errorf("%s of %d bytes, the limit: %d %s; want 200", c.name, maxBody, rec.Code, rec.Body)
		}
		for _, tc := range []struct{ name, path string }{
			{"a byte over the limit", "/predict"},
			{"a bomb", "/predict"},
			{"a bomb", "/v2/models/m/infer"},
		} {
			body := padded(maxBody + 1)
			if tc.name == "a bomb" {
				body = bomb
			}
			sent := compress(t, c.name, body)
			rec := do(t, h, http.MethodPost, tc.path, "application/json", sent, "Content-Encoding", c.header)
			if rec.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s, %s of %d bytes sent: %d %s; want 413", tc.path, c.name, len(sent), rec.Code, rec.Body)
			}
			msg := errorOf(t, rec)
			if !strings.Contains(msg, "limit of 4096 bytes") || !strings.Contains(msg, "after decompression") || !strings.Contains(msg, c.header) {
				t.Errorf("%s, %s: %q; want it to name the limit, the coding, and that it holds after decompression", tc.path, c.name, msg)
			}
		}
	}
}

// TestCorruptCompressedBodyIs400: a body that is not what its
// Content-Encoding says is 400 naming the coding, on both routes.
func TestCorruptCompressedBodyIs400(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, Tensors: oneInput("INT8")})
	plain := []byte(`{"inputs": ["a"]}`)
	gz := compress(t, "gzip", plain)
	badCRC := bytes.Clone(gz)
	badCRC[len(badCRC)-8] ^= 0xff
	for _, tc := range []struct {
		name, coding string
		body         []byte
		says         string
	}{
		{"not gzip at all", "gzip", plain, "invalid header"},
		{"gzip cut short", "gzip", gz[:len(gz)-6], "unexpected EOF"},
		{"gzip with a wrong checksum", "gzip", badCRC, "checksum"},
		{"gzip followed by other bytes", "gzip", append(bytes.Clone(gz), "a tail, not a gzip member"...), "invalid header"},
		{"no gzip data", "gzip", nil, "unexpected EOF"},
		{"not deflate at all", "deflate", plain, "corrupt input"},
		{"deflate cut short", "deflate", compress(t, "deflate", plain)[:8], "unexpected EOF"},
		{"deflate followed by other bytes", "deflate", append(compress(t, "deflate", plain), "tail"...), "4 bytes follow the end of the compressed data"},
		{"raw deflate followed by other bytes", "deflate", append(compress(t, "raw deflate", plain), "tail"...), "4 bytes follow the end of the compressed data"},
	} {
		for _, path := range []string{"/predict", "/v2/models/m/infer"} {
			rec := do(t, h, http.MethodPost, path, "application/json", tc.body, "Content-Encoding", tc.coding)
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("%s, %s: %d %s; want 400", path, tc.name, rec.Code, rec.Body)
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, "not valid "+tc.coding+" data") || !strings.Contains(msg, tc.says) {
				t.Errorf("%s, %s: %q; want it to name %s and say %q", path, tc.name, msg, tc.coding, tc.says)
			}
		}
	}
}

// TestBodyInAnotherCodingIs415: a coding the server does not read, or two
// at once, is 415 naming those it reads, in the message and in an
// Accept-Encoding header (RFC 7694) that a 415 for the content type lacks.
func TestBodyInAnotherCodingIs415(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, Tensors: oneInput("INT8")})
	for _, coding := range []string{"br", "compress", "zstd", "gzip, gzip", "deflate, gzip"} {
		for _, path := range []string{"/predict", "/v2/models/m/infer"} {
			rec := do(t, h, http.MethodPost, path, "application/json", []byte(`{"inputs": ["a"]}`), "Content-Encoding", coding)
			if rec.Code != http.StatusUnsupportedMediaType || rec.Header().Get("Accept-Encoding") != "gzip, deflate" {
				t.Fatalf("%s, %q: %d, Accept-Encoding %q; want 415 and gzip, deflate", path, coding, rec.Code, rec.Header().Get("Accept-Encoding"))
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, strconv.Quote(coding)) || !strings.Contains(msg, "gzip or deflate") {
				t.Errorf("%s, %q: %q; want it to name the coding and those accepted", path, coding, msg)
			}
		}
	}
	if rec := do(t, h, http.MethodPost, "/predict", "text/plain", []byte("a")); rec.Code != http.StatusUnsupportedMediaType || rec.Header().Get("Accept-Encoding") != "" {
		t.Errorf("a content type not read: %d, Accept-Encoding %q; want 415 without it", rec.Code, rec.Header().Get("Accept-Encoding"))
	}
}

// The largest MaxBody (what --max-body takes at most) reads compressed
// bodies too: reading one byte past it wrapped to a negative limit, and
// every compressed body was refused as corrupt.
func TestCompressedBodiesAreReadUnderTheLargestMaxBody(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, MaxBody: math.MaxInt64})
	plain := []byte(`{"inputs": ["a"]}`)
	want := do(t, h, http.MethodPost, "/predict", "application/json", plain)
	for _, c := range compressions {
		got := do(t, h, http.MethodPost, "/predict", "application/json", compress(t, c.name, plain), "Content-Encoding", c.header)
		if got.Code != http.StatusOK || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Errorf("%s: %d %q; want the plain body's %d %q", c.name, got.Code, got.Body, want.Code, want.Body)
		}
	}
}

// TestDecompressedBodiesHeldAreBounded: the bytes of compressed bodies,
// decompressed, that the requests in progress hold are bounded. Past the
// bound a compressed body gets 429 saying why, with Retry-After; a body
// sent plain is not counted; and once the requests that held the bytes
// are done, the next compressed body is read. Before, a few kilobytes of
// gzip held --max-body each until the model answered, with no bound but
// the queue's count of items.
func TestDecompressedBodiesHeldAreBounded(t *testing.T) {
	backend, held, release := heldBackend()
	h := New(Config{Backend: backend}).(*handler)
	if h.inflated.bound != 1<<30 {
		t.Errorf("the bound for the default body limit is %d; want 1 GiB", h.inflated.bound)
	}
	body := []byte(`{"inputs": ["` + strings.Repeat("a", 1<<20) + `"]}`)
	h.inflated.bound = int64(len(body)) * 3 / 2 // one body, not two
	sent := compress(t, "gzip", body)
	post := func(body []byte, header ...string) <-chan *httptest.ResponseRecorder {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- do(t, h, http.MethodPost, "/predict", "application/json", body, header...) }()
		return done
	}
	first := post(sent, "Content-Encoding", "gzip")
	<-held
	plain := post(body)
	<-held
	select {
	case second := <-post(sent, "Content-Encoding", "gzip"):
		if second.Code != http.StatusTooManyRequests || second.Header().Get("Retry-After") == "" ||
			!strings.Contains(second.Body.String(), "decompressed bodies, the most the server holds") {
			t.Errorf("a compressed body past the bound: %d %q, Retry-After %q; want 429 saying why, with Retry-After",
				second.Code, second.Body, second.Header().Get("Retry-After"))
		}
	case <-held:
		t.Error("a compressed body past the bound was submitted")
	}
	close(release)
	for what, done := range map[string]<-chan *httptest.ResponseRecorder{"the compressed body held": first, "the plain body": plain} {
		if rec := <-done; rec.Code != http.StatusOK {
			t.Errorf("%s: %d %s", what, rec.Code, rec.Body)
		}
	}
	if rec := do(t, h, http.MethodPost, "/predict", "application/json", sent, "Content-Encoding", "gzip"); rec.Code != http.StatusOK {
		t.Errorf("a compressed body once the others are done: %d %s; want 200", rec.Code, rec.Body)
	}
	if n := h.inflated.held.Load(); n != 0 {
		t.Errorf("%d bytes counted held once every request is done; want 0", n)
	}
	if got := inflatedBudget(math.MaxInt64 - 1); got != math.MaxInt64 {
		t.Errorf("the bound for a body limit near the largest: %d; want no bound", got)
	}
}

// heldBackend is a ready backend whose submissions each say so on held,
// then wait until release is closed to answer their items back.
func heldBackend() (backend *fakeBackend, held chan struct{}, release chan struct{}) {
	held, release = make(chan struct{}, 4), make(chan struct{})
	backend = &fakeBackend{ready: true, submit: func(_ context.Context, req supervisor.Request) (*answer, error) {
		held <- struct{}{}
		<-release
		return echoAnswer(req), nil
	}}
	return backend, held, release
}
