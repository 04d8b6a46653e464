package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestOriginIsVetted(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"https://app.example/"}})
	open := New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"*"}})
	body := []byte(`{"inputs": ["x"]}`)
	tests := []struct {
		name        string
		handler     http.Handler
		method      string
		header      []string
		want        int
		allowOrigin string
	}{
		{"no origin", h, http.MethodPost, nil, http.StatusOK, ""},
		{"other origin", h, http.MethodPost, []string{"Origin", "https://evil.example"}, http.StatusForbidden, ""},
		{"null origin", h, http.MethodPost, []string{"Origin", "null"}, http.StatusForbidden, ""},
		{"allowed origin", h, http.MethodPost, []string{"Origin", "https://app.example"}, http.StatusOK, "https://app.example"},
		{"any origin with *", open, http.MethodPost, []string{"Origin", "https://evil.example"}, http.StatusOK, "https://evil.example"},
		{"preflight of an allowed origin", h, http.MethodOptions, []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST"}, http.StatusNoContent, "https://app.example"},
		{"preflight of another origin", h, http.MethodOptions, []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}, http.StatusForbidden, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, tc.handler, tc.method, "/predict", "application/x-www-form-urlencoded", body, tc.header...)
			if rec.Code != tc.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if got := rec.Header().Get("Access-Control-Allow-Origin"); got != tc.allowOrigin {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tc.allowOrigin)
			}
			if exposed := rec.Header().Get("Access-Control-Expose-Headers"); (tc.allowOrigin != "" && rec.Code == http.StatusOK) != (exposed == "Retry-After, "+InferenceHeaderLength) {
				t.Errorf("Access-Control-Expose-Headers %q on a %d; want Retry-After and %s exposed to an allowed page's request, and nothing else", exposed, rec.Code, InferenceHeaderLength)
			}
			if rec.Code == http.StatusForbidden {
				if msg := errorOf(t, rec); !strings.Contains(msg, "allowed origins") {
					t.Errorf("refusal %q does not say how to allow the origin", msg)
				}
			}
			if rec.Code == http.StatusNoContent && !strings.Contains(rec.Header().Get("Access-Control-Allow-Methods"), "POST") {
				t.Errorf("preflight allows methods %q, want POST among them", rec.Header().Get("Access-Control-Allow-Methods"))
			}
		})
	}
}
