package httpapi

import (
	"net/http"
	"strings"
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
