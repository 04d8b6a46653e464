package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestRequireToken(t *testing.T) {
	api := New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"https://app.example"}})
	h := RequireToken("s3cret", api)
	body := []byte(`{"inputs": ["x"]}`)
	tests := []struct {
		name      string
		method    string
		path      string
		header    []string
		want      int
		challenge string // WWW-Authenticate on a 401
	}{
		{"predict without a token", http.MethodPost, "/predict", nil, http.StatusUnauthorized, challenge},
		{"predict with a wrong token", http.MethodPost, "/predict", []string{"Authorization", "Bearer s3cre"}, http.StatusUnauthorized, invalidChallenge},
		{"predict with a longer token", http.MethodPost, "/predict", []string{"Authorization", "Bearer s3cret2"}, http.StatusUnauthorized, invalidChallenge},
		{"predict with another scheme", http.MethodPost, "/predict", []string{"Authorization", "Basic s3cret"}, http.StatusUnauthorized, challenge},
		{"predict with an empty bearer", http.MethodPost, "/predict", []string{"Authorization", "Bearer "}, http.StatusUnauthorized, challenge},
		{"predict with the token", http.MethodPost, "/predict", []string{"Authorization", "Bearer s3cret"}, http.StatusOK, ""},
		{"scheme in lower case", http.MethodPost, "/predict", []string{"Authorization", "bearer s3cret"}, http.StatusOK, ""},
		{"stats without a token", http.MethodGet, "/v1/stats", nil, http.StatusUnauthorized, challenge},
		{"unknown route without a token", http.MethodGet, "/admin/reload", nil, http.StatusUnauthorized, challenge},
		{"stats with the token", http.MethodGet, "/v1/stats", []string{"Authorization", "Bearer s3cret"}, http.StatusOK, ""},
		{"healthz without a token", http.MethodGet, "/healthz", nil, http.StatusOK, ""},
		{"readyz without a token", http.MethodGet, "/readyz", nil, http.StatusOK, ""},
		{"v2 live without a token", http.MethodGet, "/v2/health/live", nil, http.StatusOK, ""},
		{"v2 ready without a token", http.MethodGet, "/v2/health/ready", nil, http.StatusOK, ""},
		{"v2 server metadata without a token", http.MethodGet, "/v2", nil, http.StatusUnauthorized, challenge},
		{"v2 model ready without a token", http.MethodGet, "/v2/models/m/ready", nil, http.StatusUnauthorized, challenge},
		{"preflight without a token", http.MethodOptions, "/predict", []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST"}, http.StatusNoContent, ""},
		{"preflight of another origin", http.MethodOptions, "/predict", []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}, http.StatusForbidden, ""},
		{"OPTIONS that is no preflight", http.MethodOptions, "/predict", []string{"Origin", "https://app.example"}, http.StatusUnauthorized, challenge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, h, tc.method, tc.path, "application/json", body, tc.header...)
			if rec.Code != tc.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if rec.Code == http.StatusUnauthorized {
				if msg := errorOf(t, rec); !strings.Contains(msg, "token") {
					t.Errorf("refusal %q does not mention the token", msg)
				}
			}
		})
	}
}

func TestPreflightAllowsAuthorization(t *testing.T) {
	h := RequireToken("s3cret", New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"*"}}))
	rec := do(t, h, http.MethodOptions, "/predict", "", nil,
		"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization")
	if rec.Code != http.StatusNoContent {
		t.Fatalf("preflight status %d, want %d", rec.Code, http.StatusNoContent)
	}
	if got := rec.Header().Get("Access-Control-Allow-Headers"); !strings.Contains(got, "Authorization") {
		t.Errorf("preflight allows headers %q; a page could not send its token", got)
	}
}

func TestRequireTokenRefusesEmpty(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("RequireToken accepted an empty token")
		}
	}()
	RequireToken("", New(Config{Backend: &fakeBackend{}}))
}
