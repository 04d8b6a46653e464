package httpapi

import (
	_ "embed"
	"net/http"
	"strconv"
)

// statusHTML is the page served at GET /: it fetches /v1/models, /v1/stats
// and /v1/workers every second and shows them. It is one file with its
// script and style inline, so that it works with no network beyond this
// server.
//
//go:embed status.html
var statusHTML []byte

// statusPage serves statusHTML. Its content security policy lets it talk to
// this server only, and to nothing else.
var statusPage = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Content-Length", strconv.Itoa(len(statusHTML)))
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
	hdr.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(statusHTML)
	}
})

// serveRead serves a read-only route with next: GET or HEAD only.
func (h *handler) serveRead(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.methodNotAllowed(w, "GET, HEAD")
		return
	}
	next.ServeHTTP(w, r)
}
