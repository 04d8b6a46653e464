package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/streamer-dev/streamer/supervisor"
)

// StatusClientClosedRequest answers a request whose client went away before
// its answer was ready. Nobody reads it; it shows in access logs.
const StatusClientClosedRequest = 499

// requestError is a request the handler refuses before submitting it: its
// status and a message naming the problem.
type requestError struct {
	status int
	msg    string
	// acceptEncoding says the request's content coding is refused: the
	// answer names those accepted in its Accept-Encoding header.
	acceptEncoding bool
	// items is how many items the request would have made, counted
	// rejected by the backend (see RejectCounter); 0 when not known.
	items int
}

func (e *requestError) Error() string { return e.msg }

func badRequest(msg string) *requestError {
	return &requestError{status: http.StatusBadRequest, msg: msg}
}

// StatusOf maps an error from the supervisor (or a Future, or an admin
// change: Reload, SetWorkers) to the HTTP status that tells the client what
// happened.
func StatusOf(err error) int {
	var reqErr *requestError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &reqErr):
		return reqErr.status
	case errors.Is(err, supervisor.ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, supervisor.ErrUnavailable), errors.Is(err, supervisor.ErrShuttingDown), errors.Is(err, supervisor.ErrNotStarted):
		return http.StatusServiceUnavailable
	case errors.Is(err, supervisor.ErrBusy):
		return http.StatusConflict
	case errors.Is(err, supervisor.ErrDeadline):
		return http.StatusGatewayTimeout
	case errors.Is(err, supervisor.ErrPoison), errors.Is(err, supervisor.ErrModel):
		return http.StatusUnprocessableEntity
	case errors.Is(err, supervisor.ErrModelFailed):
		return http.StatusInternalServerError
	case errors.Is(err, supervisor.ErrCanceled):
		return StatusClientClosedRequest
	case errors.Is(err, supervisor.ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, supervisor.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// ShuttingDown is the answer's message to a request refused because the
// server is shutting down, whichever part of it refused the request.
const ShuttingDown = "shutting down: this server takes no more requests"

// fail answers a failed request with the status err maps to.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := StatusOf(err)
	msg := err.Error()
	if err == supervisor.ErrShuttingDown { // bare: says no more than its name
		msg = ShuttingDown
	}
	h.requests.count(status, err)
	if e, ok := err.(*requestError); ok && e.acceptEncoding {
		w.Header()["Accept-Encoding"] = h.codings
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		// A full queue, no worker able to run, Redis down, a server
		// draining: each passes, and a client that retries should.
		w.Header()["Retry-After"] = h.retryAfter
	case http.StatusInternalServerError:
		h.logFailed(r.URL.Path, r.RemoteAddr, err)
	}
	h.writeError(w, status, msg)
}

// logFailed logs a request failed for the server's fault or the model's
// (500): the first of its kind at once, then at most every repeats.Every,
// saying how many were held back; the others go to debug level. A model
// that fails every batch fails every request, and a line each filled the
// log by thousands a second. The kind is the failure's: the model's, or
// any other.
func (h *handler) logFailed(path, remote string, err error) {
	kind := "other"
	if errors.Is(err, supervisor.ErrModelFailed) {
		kind = "model failed"
	}
	h.failed.Log(h.log, slog.LevelError, kind, "predict failed", "path", path, "remote", remote, "err", err)
}

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

func (h *handler) writeError(w http.ResponseWriter, status int, msg string) {
	b, err := json.Marshal(errorBody{Error: msg})
	if err != nil { // a string always encodes; keep the answer JSON regardless
		b = []byte(`{"error":"internal error"}`)
	}
	h.writeBody(w, status, h.jsonType, append(b, '\n'))
}
