package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/streamer-dev/streamer/supervisor"
)

// fakeAdmin records the changes asked of it and fails them as told.
type fakeAdmin struct {
	mu      sync.Mutex
	workers int
	err     error
	calls   []string
}

func (a *fakeAdmin) Reload(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, "reload")
	return a.err
}

func (a *fakeAdmin) SetWorkers(_ context.Context, n int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, fmt.Sprintf("set %d", n))
	if a.err == nil {
		a.workers = n
	}
	return a.err
}

func (a *fakeAdmin) Workers() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.workers
}

func TestAdminRoutes(t *testing.T) {
	failed := fmt.Errorf("slot 1: %w: worker gave up: bad model", supervisor.ErrStartFailed)
	tests := []struct {
		name       string
		err        error
		method     string
		path, body string
		status     int
		want       string // in the body
		call       string // the change asked, "" for none
	}{
		{"reload", nil, "POST", "/admin/reload", "", 200, `{"reloaded":3}`, "reload"},
		{"reload with an empty object", nil, "POST", "/admin/reload", "{}", 200, `{"reloaded":3}`, "reload"},
		{"reload that fails", failed, "POST", "/admin/reload", "", 500, "slot 1: new worker failed to start: worker gave up: bad model", "reload"},
		{"reload already running", fmt.Errorf("reload: %w", supervisor.ErrBusy), "POST", "/admin/reload", "", 409, "already running", "reload"},
		{"reload while shutting down", fmt.Errorf("reload: %w", supervisor.ErrShuttingDown), "POST", "/admin/reload", "", 503, "shutting down", "reload"},
		{"reload with a body", nil, "POST", "/admin/reload", `{"force": true}`, 400, "unknown field", ""},
		{"reload by GET", nil, "GET", "/admin/reload", "", 405, "use POST", ""},
		{"scale", nil, "POST", "/admin/workers", `{"workers": 5}`, 200, `{"workers":5}`, "set 5"},
		{"scale that fails", failed, "POST", "/admin/workers", `{"workers": 5}`, 500, "slot 1: new worker failed", "set 5"},
		{"scale already running", supervisor.ErrBusy, "POST", "/admin/workers", `{"workers": 5}`, 409, "already running", "set 5"},
		{"scale to zero", nil, "POST", "/admin/workers", `{"workers": 0}`, 400, `\"workers\": 0: want 1 to 1024`, ""},
		{"scale too far", nil, "POST", "/admin/workers", `{"workers": 100000}`, 400, "want 1 to 1024", ""},
		{"scale without a count", nil, "POST", "/admin/workers", `{}`, 400, `no \"workers\" field`, ""},
		{"scale with no body", nil, "POST", "/admin/workers", ``, 400, "the body is empty", ""},
		{"scale by a string", nil, "POST", "/admin/workers", `{"workers": "5"}`, 400, "cannot unmarshal string", ""},
		{"scale by broken JSON", nil, "POST", "/admin/workers", `{"workers": 5`, 400, "body: unexpected EOF", ""},
		{"scale by two values", nil, "POST", "/admin/workers", `{"workers": 5} {}`, 400, "more than one JSON value", ""},
		{"scale with a typo", nil, "POST", "/admin/workers", `{"worker": 5}`, 400, `unknown field \"worker\"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			admin := &fakeAdmin{workers: 3, err: tc.err}
			h := New(Config{Backend: &fakeBackend{}, Admin: admin})
			rec := do(t, h, tc.method, tc.path, "application/json", []byte(tc.body))
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("%s %s %s: %d %s, want %d with %s", tc.method, tc.path, tc.body, rec.Code, rec.Body, tc.status, tc.want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want JSON", ct)
			}
			var want []string
			if tc.call != "" {
				want = []string{tc.call}
			}
			if fmt.Sprint(admin.calls) != fmt.Sprint(want) {
				t.Errorf("changes asked: %v, want %v", admin.calls, want)
			}
		})
	}
}

// Without an Admin the admin routes do not exist, like any unknown path.
func TestAdminRoutesAbsentWithoutAdmin(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{}})
	for _, path := range []string{"/admin/reload", "/admin/workers"} {
		rec := do(t, h, http.MethodPost, path, "application/json", []byte(`{"workers": 2}`))
		if rec.Code != http.StatusNotFound || !strings.Contains(errorOf(t, rec), "no route") {
			t.Errorf("POST %s without Admin: %d %s, want 404 naming no route", path, rec.Code, rec.Body)
		}
	}
}
