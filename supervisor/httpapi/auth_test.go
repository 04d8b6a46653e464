package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/supervisor"
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

// unreadyBackend is a backend that is not ready, and says why.
type unreadyBackend struct {
	fakeBackend
	why error
}

func (b *unreadyBackend) NotReady() error { return b.why }

// TestReadyzTellsWhyOnlyWithTheToken: a /readyz that needs no token says
// why the server is not ready only to a caller with the token, for the
// reason may name the infrastructure behind it; without the token, or with
// a wrong one, it is the same 503, saying only whether the server shuts
// down. With no token required, anyone is told.
func TestReadyzTellsWhyOnlyWithTheToken(t *testing.T) {
	outage := fmt.Errorf("%w: redis at 127.0.0.1:22990 does not serve: dial tcp: connection refused", supervisor.ErrUnavailable)
	draining := fmt.Errorf("broker: front end closing: %w", supervisor.ErrShuttingDown)
	tests := []struct {
		name   string
		why    error
		token  bool     // the server requires one
		header []string // the probe's
		want   string
	}{
		{"no token required", outage, false, nil, outage.Error()},
		{"without the token", outage, true, nil, notReadyWithheld},
		{"with a wrong token", outage, true, []string{"Authorization", "Bearer guess"}, notReadyWithheld},
		{"with the token", outage, true, []string{"Authorization", "Bearer s3cret"}, outage.Error()},
		{"shutting down, without the token", draining, true, nil, ShuttingDown},
		{"shutting down, with the token", draining, true, []string{"Authorization", "Bearer s3cret"}, draining.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Config{Backend: &unreadyBackend{why: tc.why}})
			if tc.token {
				h = RequireToken("s3cret", h)
			}
			rec := do(t, h, http.MethodGet, "/readyz", "", nil, tc.header...)
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d (%s), want 503", rec.Code, rec.Body)
			}
			if msg := errorOf(t, rec); msg != tc.want {
				t.Errorf("says %q, want %q", msg, tc.want)
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

// TestUnauthorizedReadableByAllowedOrigin: the 401 to a page of an allowed
// origin carries Access-Control-Allow-Origin, and exposes its challenge,
// so that the page sees the refusal rather than a CORS failure; one to a
// page of any other origin, or to a request with no Origin, lets no page
// read it.
func TestUnauthorizedReadableByAllowedOrigin(t *testing.T) {
	h := RequireToken("s3cret", New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"https://app.example"}}))
	open := RequireToken("s3cret", New(Config{Backend: &fakeBackend{ready: true}, AllowedOrigins: []string{"*"}}))
	tests := []struct {
		name        string
		handler     http.Handler
		header      []string
		allowOrigin string
	}{
		{"allowed origin", h, []string{"Origin", "https://app.example"}, "https://app.example"},
		{"allowed origin, wrong token", h, []string{"Origin", "https://app.example", "Authorization", "Bearer guess"}, "https://app.example"},
		{"any origin with *", open, []string{"Origin", "https://elsewhere.example"}, "https://elsewhere.example"},
		{"another origin", h, []string{"Origin", "https://evil.example"}, ""},
		{"two origins", h, []string{"Origin", "https://app.example", "Origin", "https://evil.example"}, ""},
		{"no origin", h, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, tc.handler, http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["x"]}`), tc.header...)
			if rec.Code != http.StatusUnauthorized {
				t.Fatalf("status %d (%s), want 401", rec.Code, rec.Body)
			}
			hdr := rec.Header()
			if got := hdr.Get("Access-Control-Allow-Origin"); got != tc.allowOrigin {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tc.allowOrigin)
			}
			exposed := strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "WWW-Authenticate")
			if want := tc.allowOrigin != ""; exposed != want {
				t.Errorf("Access-Control-Expose-Headers %q; WWW-Authenticate exposed %v, want %v", hdr.Get("Access-Control-Expose-Headers"), exposed, want)
			}
			if tc.allowOrigin != "" && !slices.Contains(hdr.Values("Vary"), "Origin") {
				t.Errorf("Vary %q, want Origin among them", hdr.Values("Vary"))
			}
		})
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
