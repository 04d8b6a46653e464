package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// fullBackend says its queue is full.
type fullBackend struct{ fakeBackend }

func (*fullBackend) Full() bool { return true }

// TestFullQueueIsRefusedBeforeTheBody: with the queue full, a request is
// answered 429 before its body is read or decoded, even a malformed one.
func TestFullQueueIsRefusedBeforeTheBody(t *testing.T) {
	b := &fullBackend{fakeBackend{ready: true}}
	h := New(Config{Backend: b})
	rec := do(t, h, http.MethodPost, "/predict", "application/json", []byte(`{"inputs": [`))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("status %d, Retry-After %q; want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	if msg := errorOf(t, rec); !strings.Contains(msg, "overloaded") {
		t.Errorf("error %q does not say the server is overloaded", msg)
	}
	if _, _, calls := b.lastRequest(); calls != 0 {
		t.Fatalf("the backend was called %d times", calls)
	}
}

// TestWhatTheHeadersSayIsAnsweredBeforeAFullQueue: with the queue full, a
// request whose headers alone show it can never succeed gets its own
// answer, without Retry-After, on both routes: a 429 would have its client
// send it again in vain for as long as the overload lasts.
func TestWhatTheHeadersSayIsAnsweredBeforeAFullQueue(t *testing.T) {
	b := &fullBackend{fakeBackend{ready: true}}
	h := New(Config{Backend: b, MaxBody: 16, Tensors: oneInput("INT8")})
	for _, c := range []struct {
		name, path, contentType string
		body                    string
		header                  http.Header
		want                    int
	}{
		{"a content type it cannot read", "/predict", "text/plain", `{"inputs": ["a"]}`, nil, http.StatusUnsupportedMediaType},
		{"a body in a coding it does not read", "/predict", "application/json", `{"inputs": ["a"]}`, http.Header{"Content-Encoding": {"br"}}, http.StatusUnsupportedMediaType},
		{"a body over --max-body", "/predict", "application/json", `{"inputs": ["a", "b", "c"]}`, nil, http.StatusRequestEntityTooLarge},
		{"a v2 body over --max-body", "/v2/models/m/infer", "application/json", `{"inputs": [{"name": "x"}]}`, nil, http.StatusRequestEntityTooLarge},
		{"a v2 body in a coding it does not read", "/v2/models/m/infer", "application/json", `{}`, http.Header{"Content-Encoding": {"br"}}, http.StatusUnsupportedMediaType},
	} {
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.contentType)
		for k, v := range c.header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want || rec.Header().Get("Retry-After") != "" {
			t.Errorf("%s, the queue full: %d, Retry-After %q; want %d without Retry-After", c.name, rec.Code, rec.Header().Get("Retry-After"), c.want)
		}
	}
	// A body that is only known bad once read is refused unread.
	rec := do(t, h, http.MethodPost, "/v2/models/m/infer", "application/json", []byte(`{`))
	if rec.Code != http.StatusTooManyRequests {
		t.Errorf("a malformed v2 body, the queue full: %d; want 429", rec.Code)
	}
	if msg := errorOf(t, rec); !strings.Contains(msg, "unread") {
		t.Errorf("a malformed v2 body, the queue full: %q; want it to say the request was not read", msg)
	}
}

// toggledBackend says its queue is full while full is set.
type toggledBackend struct {
	fakeBackend
	full atomic.Bool
}

func (b *toggledBackend) Full() bool { return b.full.Load() }

// TestAFarLargerBodyIsReadWhenTheQueueIsFull: with the queue full, a
// request that announces a body far larger than those read of late is
// read all the same, so that the backend counts its items (and keeps room
// for them, refusing it), where the usual ones are refused unread.
func TestAFarLargerBodyIsReadWhenTheQueueIsFull(t *testing.T) {
	b := &toggledBackend{fakeBackend: fakeBackend{ready: true}}
	h := New(Config{Backend: b})
	small := []byte(`{"inputs": ["a", "b"]}`)
	for range 20 {
		if rec := do(t, h, http.MethodPost, "/predict", "application/json", small); rec.Code != http.StatusOK {
			t.Fatalf("a small request, the queue not full: %d", rec.Code)
		}
	}
	b.full.Store(true)
	_, _, before := b.lastRequest()
	if rec := do(t, h, http.MethodPost, "/predict", "application/json", small); rec.Code != http.StatusTooManyRequests || !strings.Contains(errorOf(t, rec), "unread") {
		t.Fatalf("a small request, the queue full: %d %q; want 429, refused unread", rec.Code, errorOf(t, rec))
	}
	if _, _, calls := b.lastRequest(); calls != before {
		t.Fatalf("a small request with the queue full reached the backend")
	}
	large := []byte(`{"inputs": [` + strings.Repeat(`"item", `, 4) + `"last"]}`)
	do(t, h, http.MethodPost, "/predict", "application/json", large)
	last, _, calls := b.lastRequest()
	if calls != before+1 || len(last.Items) != 5 {
		t.Fatalf("a request of %d bytes beside bodies of %d, the queue full: backend called %d times, with %d items; want once, with 5", len(large), len(small), calls-before, len(last.Items))
	}
	// Bodies read only for their size leave the mean where it was: the
	// 50th large body is read as the first was.
	for range 50 {
		do(t, h, http.MethodPost, "/predict", "application/json", large)
	}
	if _, _, after := b.lastRequest(); after != calls+50 {
		t.Fatalf("%d of 50 large bodies reached the backend with the queue full; want all", after-calls)
	}
}
