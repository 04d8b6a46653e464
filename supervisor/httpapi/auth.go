package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// RequireToken returns a handler that passes a request on to next only when
// it carries the header "Authorization: Bearer <token>". Others get 401 with
// a WWW-Authenticate challenge and a JSON error, before next sees them.
// When next is New's handler, the 401 to a request from a browser page of
// an allowed origin (Config.AllowedOrigins) carries the CORS headers that
// let the page read it and its challenge.
//
// Four kinds of request pass without the token: the health routes,
// /healthz, /readyz and the v2 protocol's /v2/health/live and
// /v2/health/ready, so that load balancers and orchestrators can probe the
// server without holding the secret (they say whether it lives and is
// ready, and nothing of its model, nor why it is not ready: that is told
// only to a caller with the token); GET / itself, the status page, a
// static file that holds no data and asks for the token to fetch what it
// shows (a browser cannot send one for a page it is told to open); and
// CORS preflights (OPTIONS with Origin and Access-Control-Request-Method),
// which browsers send without credentials and which New's handler answers
// without running anything. Such a request that lacks the token is marked
// in its context, so that New's handler tells it nothing the token
// guards.
//
// The token is compared through its SHA-256 digest in constant time, so the
// time an answer takes tells neither how much of a guess was right nor how
// long the token is. RequireToken panics on an empty token, which would let
// every request through. A Token's Guard is the same handler, for a token
// that may be replaced while it serves.
func RequireToken(token string, next http.Handler) http.Handler {
	return NewToken(token).Guard(next)
}

// Token is the bearer token a server requires (see RequireToken), kept as
// its SHA-256 digest, which Set replaces while the server serves: the
// requests that begin after it need the new token.
type Token struct {
	digest atomic.Pointer[[sha256.Size]byte]
	// Refused, when set before the token guards anything, is told of each
	// request its guard refuses: its client's address, and whether it
	// carried a token (a wrong one) or none.
	Refused func(remote string, carried bool)
}

// NewToken returns the Token of token. It panics on an empty token, which
// would let every request through.
func NewToken(token string) *Token {
	t := &Token{}
	t.Set(token)
	return t
}

// Set makes token the one required from now on. It panics on an empty
// token.
func (t *Token) Set(token string) {
	if token == "" {
		panic("httpapi: an empty token")
	}
	digest := sha256.Sum256([]byte(token))
	t.digest.Store(&digest)
}

// Matches reports whether got is the token. The digests are compared, in
// constant time: the time it takes tells neither how much of a guess was
// right nor how long the token is.
func (t *Token) Matches(got string) bool {
	digest := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(digest[:], t.digest.Load()[:]) == 1
}

// Guard returns RequireToken's handler, which requires t of the requests
// it passes on to next.
func (t *Token) Guard(next http.Handler) http.Handler {
	return &tokenGuard{token: t, next: next}
}

// tokenGuard is RequireToken's handler.
type tokenGuard struct {
	token *Token
	next  http.Handler
}

// Answers of the guard. The challenge follows RFC 6750: a request with no
// credentials gets the bare challenge, one with wrong credentials is told
// its token is invalid.
const (
	challenge        = `Bearer realm="streamer"`
	invalidChallenge = `Bearer realm="streamer", error="invalid_token"`
	missingToken     = "this server requires a token: send the header Authorization: Bearer TOKEN"
	wrongToken       = "the bearer token is not valid for this server"
)

func (g *tokenGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refusal, msg := g.check(r)
	switch {
	case refusal == "":
		g.next.ServeHTTP(w, r)
	case exemptFromToken(r):
		if r.ContentLength != 0 {
			boundAnonymousRead(w)
		}
		g.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), anonymousKey{}, true)))
	default:
		if refused := g.token.Refused; refused != nil {
			refused(r.RemoteAddr, refusal == invalidChallenge)
		}
		if o, ok := g.next.(refusalOriginer); ok {
			o.refusalOrigin(w, r)
		}
		unauthorized(w, r, refusal, msg)
	}
}

// refusalOriginer is New's handler, which knows the origins allowed: it
// lets the page of an allowed origin read the 401 the guard answers for it,
// rather than see a CORS failure.
type refusalOriginer interface {
	refusalOrigin(w http.ResponseWriter, r *http.Request)
}

// check vets r's token: it returns the WWW-Authenticate challenge and the
// message of the 401 that refuses it, or "" for a request that carries the
// token.
func (g *tokenGuard) check(r *http.Request) (refusal, msg string) {
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return challenge, missingToken
	}
	if !g.token.Matches(token) {
		return invalidChallenge, wrongToken
	}
	return "", ""
}

// anonymousKey marks, in its context, a request that RequireToken let
// through without the token (see exemptFromToken): its answer says nothing
// that the token guards.
type anonymousKey struct{}

// anonymous reports whether r came through RequireToken without the token.
// A request served with no token required is not anonymous: the server
// keeps nothing from anyone.
func anonymous(r *http.Request) bool {
	marked, _ := r.Context().Value(anonymousKey{}).(bool)
	return marked
}

// unauthorizedDiscard bounds what is read, and thrown away, of the body of
// a request refused for its token, so that a client that sends its whole
// body before it reads gets its 401 rather than a reset connection (see
// discardUnread): the default body limit, since the guard does not know
// the handler's. Reading it costs the server no more than a client with
// the token may make it read.
const unauthorizedDiscard = DefaultMaxBody

// exemptFromToken reports whether r may pass without a token.
func exemptFromToken(r *http.Request) bool {
	switch {
	case r.URL.Path == "/healthz" || r.URL.Path == "/readyz",
		r.URL.Path == "/v2/health/live" || r.URL.Path == "/v2/health/ready":
		return true
	case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return true // the status page: static, its data is guarded
	case r.Method == http.MethodOptions:
		// Only a real preflight: New's handler answers it itself, with 204
		// for an allowed origin and 403 otherwise, and never routes it.
		return r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
	}
	return false
}

// bearerToken takes the token out of an Authorization header value. The
// scheme is case-insensitive (RFC 7235); an empty token is no token.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// anonymousReadTime bounds the reading of a body sent without the token:
// one refused for it (see unauthorized), or sent to a route that takes
// none (see exemptFromToken). Read until --read-timeout, a body sent a
// byte at a time would let a client without the token hold its
// connection, and its place under --max-connections, for as long, where
// a connection that sends nothing gives its place after a second (see
// the listener's reclaimAfter): a few hundred such clients would keep out
// every client with the token. In a second, a client on a fast network
// sends the megabytes it may; a slower one is reset while it sends, as a
// client past the bounds of the reading is.
const anonymousReadTime = time.Second

// boundAnonymousRead cuts the reading of w's request body short at
// anonymousReadTime from now. Net/http sets the read deadline again for
// the connection's next request.
func boundAnonymousRead(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(anonymousReadTime))
}

// unauthorized answers r with 401 and the server's usual JSON error body.
// What is read of its body is read within anonymousReadTime: net/http
// reads a small body before it sends the answer, and discardUnread a
// larger one after.
func unauthorized(w http.ResponseWriter, r *http.Request, challenge, msg string) {
	if r.ContentLength != 0 {
		boundAnonymousRead(w)
	}
	body, _ := json.Marshal(errorBody{Error: msg})
	body = append(body, '\n')
	hdr := w.Header()
	hdr.Set("WWW-Authenticate", challenge)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	// Its length, so that it is whole on the wire when discardUnread
	// flushes it and then closes the connection.
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(body)
	switch {
	case r.ContentLength != 0 && r.ProtoMajor == 1 && expectsContinue(r.Header):
		// Its client sends no body, not asked for it: see serveExpecting.
		sendAndClose(w)
	case r.ContentLength > smallBody || r.ContentLength < 0:
		discardUnread(w, r, unauthorizedDiscard)
	}
}
