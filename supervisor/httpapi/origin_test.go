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
			if exposed := rec.Header().Get("Access-Control-Expose-Headers"); (tc.allowOrigin != "" && rec.Code == http.StatusOK) != (exposed == "Retry-After, Accept-Encoding, "+InferenceHeaderLength) {
				t.Errorf("Access-Control-Expose-Headers %q on a %d; want Retry-After, Accept-Encoding and %s exposed to an allowed page's request, and nothing else", exposed, rec.Code, InferenceHeaderLength)
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

// An origin configured in another case, or with its scheme's default port,
// allows the pages whose browser writes it the one way browsers do: compared
// as written, it never matched, and those pages got 403 without a clue.
func TestAnOriginIsComparedAsABrowserWritesIt(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"HTTPS://App.Example:443", "http://Local.Example:80/", "http://other.example:8080"}})
	body := []byte(`{"inputs": ["x"]}`)
	for origin, want := range map[string]int{
		"https://app.example":       http.StatusOK,
		"http://local.example":      http.StatusOK,
		"http://other.example:8080": http.StatusOK,
		"http://app.example":        http.StatusForbidden,
		"https://app.example:8443":  http.StatusForbidden,
		"http://other.example":      http.StatusForbidden,
	} {
		if rec := do(t, h, http.MethodPost, "/predict", "application/json", body, "Origin", origin); rec.Code != want {
			t.Errorf("Origin %s: %d (%s), want %d", origin, rec.Code, rec.Body.String(), want)
		}
	}
}

// An IP address written otherwise than the shortest way, or a port with
// leading zeros or none after its colon, allows the page whose browser
// writes it the one way browsers do. Before, such an origin never matched.
func TestAnOriginsAddressIsComparedAsABrowserWritesIt(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{
		"http://[0:0:0:0:0:0:0:1]:44211", "https://[2001:0DB8:0:0::1]:8443", "http://[::1]:", "http://[::1]:044212",
		"http://[::ffff:127.0.0.1]:8080", "http://10.0.0.1:0080",
	}})
	body := []byte(`{"inputs": ["x"]}`)
	for origin, want := range map[string]int{
		"http://[::1]:44211":          http.StatusOK,
		"https://[2001:db8::1]:8443":  http.StatusOK,
		"http://[::1]":                http.StatusOK,
		"http://[::1]:44212":          http.StatusOK,
		"http://[::ffff:7f00:1]:8080": http.StatusOK,
		"http://10.0.0.1":             http.StatusOK,
		"http://[::1]:44213":          http.StatusForbidden,
		"https://[::1]":               http.StatusForbidden,
	} {
		if rec := do(t, h, http.MethodPost, "/predict", "application/json", body, "Origin", origin); rec.Code != want {
			t.Errorf("Origin %s: %d (%s), want %d", origin, rec.Code, rec.Body.String(), want)
		}
	}
}

// A page may send a compressed body, which the API takes: its preflight
// allows Content-Encoding.
func TestAPreflightAllowsACompressedBody(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"https://app.example"}})
	rec := do(t, h, http.MethodOptions, "/predict", "", nil, "Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-encoding, content-type")
	if allowed := rec.Header().Get("Access-Control-Allow-Headers"); rec.Code != http.StatusNoContent || !strings.Contains(allowed, "Content-Encoding") {
		t.Errorf("preflight: %d, Access-Control-Allow-Headers %q; want 204 allowing Content-Encoding", rec.Code, allowed)
	}
}
