package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// Admin changes the workers behind a Backend at run time.
// *supervisor.Streamer implements it. A Backend without it (a front end
// feeding remote GPU nodes) has no admin routes.
type Admin interface {
	// Reload replaces every worker by a freshly started one, as
	// supervisor.Streamer's Reload does.
	Reload(ctx context.Context) error
	// SetWorkers changes the number of workers to n, as
	// supervisor.Streamer's SetWorkers does.
	SetWorkers(ctx context.Context, n int) error
	// Workers is the number of workers taking batches.
	Workers() int
}

// MaxAdminWorkers is the most workers POST /admin/workers may ask for.
const MaxAdminWorkers = supervisor.MaxWorkers

// maxAdminBody bounds an admin request's body.
const maxAdminBody = 4 << 10

// workersBody is what POST /admin/workers takes.
const workersBody = `{"workers": N}, N from 1 to 1024`

// serveAdmin serves the admin routes when the handler has an Admin, and
// reports whether r was one of them.
func (h *handler) serveAdmin(w http.ResponseWriter, r *http.Request) bool {
	if h.admin == nil {
		return false
	}
	switch r.URL.Path {
	case "/admin/reload":
		h.adminPost(w, r, h.reload)
	case "/admin/workers":
		h.adminPost(w, r, h.setWorkers)
	default:
		return false
	}
	return true
}

// adminPost runs an admin change. It is not cut short when its client
// goes away: a reload abandoned half-way is no use to anyone.
func (h *handler) adminPost(w http.ResponseWriter, r *http.Request, change func(context.Context, http.ResponseWriter, *http.Request) (any, error)) {
	if r.Method != http.MethodPost {
		h.methodNotAllowed(w, http.MethodPost)
		return
	}
	body, err := change(context.WithoutCancel(r.Context()), w, r)
	if err != nil {
		status := StatusOf(err)
		if status >= 500 && !errors.Is(err, supervisor.ErrShuttingDown) {
			h.log.Error("admin request failed", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		}
		h.writeError(w, status, err.Error())
		return
	}
	h.writeJSON(w, http.StatusOK, body)
}

func (h *handler) reload(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error) {
	if err := readAdminBody(w, r, nil, "no body, or {}"); err != nil {
		return nil, err
	}
	if err := h.admin.Reload(ctx); err != nil {
		return nil, err
	}
	return map[string]int{"reloaded": h.admin.Workers()}, nil
}

func (h *handler) setWorkers(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error) {
	var req struct {
		Workers *int `json:"workers"`
	}
	if err := readAdminBody(w, r, &req, workersBody); err != nil {
		return nil, err
	}
	switch {
	case req.Workers == nil:
		return nil, badRequest(`body: no "workers" field; want ` + workersBody)
	case *req.Workers < 1 || *req.Workers > MaxAdminWorkers:
		return nil, badRequest(fmt.Sprintf(`"workers": %d: want 1 to %d`, *req.Workers, MaxAdminWorkers))
	}
	if err := h.admin.SetWorkers(ctx, *req.Workers); err != nil {
		return nil, err
	}
	return map[string]int{"workers": h.admin.Workers()}, nil
}

// readAdminBody decodes the JSON body into v, refusing unknown fields and
// naming what it wants; a nil v takes an empty body or an empty object.
// The server's read timeout is lifted once the body is in, so that it does
// not cut the change short.
func readAdminBody(w http.ResponseWriter, r *http.Request, v any, want string) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		return badRequest("read body: " + err.Error())
	}
	if d, ok := w.(readDeadliner); ok {
		_ = d.SetReadDeadline(time.Time{})
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if v == nil {
			return nil
		}
		return badRequest("the body is empty; want " + want)
	}
	if v == nil {
		v = &struct{}{}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("body: " + err.Error() + "; want " + want)
	}
	if dec.More() {
		return badRequest("body: more than one JSON value; want " + want)
	}
	return nil
}
