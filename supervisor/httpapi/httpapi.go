// Package httpapi is streamer's HTTP front: it turns POST /predict bodies
// (JSON, msgpack or the form fields of the original service-streamer
// clients) and Open Inference Protocol (KServe v2) inference requests into
// supervisor requests, maps their outcome to HTTP statuses, and serves the
// health, readiness, model, stats and worker endpoints.
//
// Routes:
//
//	POST /predict      {"inputs": [item, ...], "timeout_ms": N} → {"outputs": [...]}
//	GET  /healthz      200 while the process runs
//	GET  /readyz       200 when a worker can take work, else 503
//	GET  /v1/models    the configured model description
//	GET  /v1/stats     the supervisor's counters and the mean batch size
//	GET  /v1/workers   one entry per worker slot
//	GET  /metrics      Prometheus metrics (see metrics.go)
//	GET  /             a status page that shows the above, live
//	POST /admin/reload   replace every worker (only with Config.Admin)
//	POST /admin/workers  {"workers": N}: scale to N workers (only with Config.Admin)
//
// and the Open Inference Protocol (KServe v2) REST routes, for the model
// in Config.Tensors:
//
//	GET  /v2                          server metadata: name, version, extensions
//	GET  /v2/health/live              200 {"live": true} while the process runs
//	GET  /v2/health/ready             200 {"ready": true} when a worker can take work, else 503
//	GET  /v2/models/{model}           the model's metadata
//	GET  /v2/models/{model}/ready     200 {"name", "ready": true}, else 503
//	POST /v2/models/{model}/infer     {"inputs": [tensor, ...]} → {"outputs": [tensor, ...]}
//
// and those Triton adds, which its clients and perf_analyzer call (see
// v2_triton.go):
//
//	GET  /v2/models/{model}/config    the model in Triton's configuration: max_batch_size, dims
//	GET  /v2/models[/{model}]/stats   the counters in Triton's statistics
//	POST /v2/repository/index         the served model and its state
//
// (the model routes also as /v2/models/{model}/versions/{v}/...; a version
// must be one of the model's when it lists any). The same protocol's gRPC
// service is GRPC (see v2_grpc.go), served from New's handler.
//
// A /predict body is JSON (also when Content-Type is missing), msgpack
// (application/msgpack or application/x-msgpack, the same map; the answer is
// msgpack too), or a form with one field s per string item, as the original
// service-streamer clients send (answered in JSON). A form body that starts
// with '{' is read as JSON, since that is what curl -d sends. The deadline is
// timeout_ms in the body or the X-Timeout-Ms header, a positive whole number
// of milliseconds; the shorter wins, and with neither there is none.
//
// A v2 inference request's batched inputs (TensorSpec.Batched) are cut on
// their first axis into rows, each row made into one item with the
// unbatched inputs whole, and the items submitted as one request; the
// answer stacks the rows of every output on a new first axis. Its data is
// JSON (its elements in row-major order, in arrays nested any way, or the
// one element alone when there is one) or, with the binary tensor data
// extension, raw bytes after a JSON header of Inference-Header-Content-Length
// bytes; outputs asked for with "binary_data": true (or all, with the
// request parameter "binary_data_output": true) come back the same way.
// In JSON, FP16 data is read and written as numbers, NaN and ±Inf are
// written as null (and null in an array of data is read as NaN; null for
// any optional member is the member left out), and BYTES elements are
// strings of text: an input's string that is not valid UTF-8 (or has a
// lone surrogate escape) is refused, and so is an answer whose output has
// bytes that are not, naming the output and the element (400), rather
// than write U+FFFD in their place: the client asks for it as binary data. The request parameter
// "timeout", in microseconds, sets the deadline as timeout_ms does for
// /predict (0 is none); "priority" is accepted and ignored, since the batcher has no
// priorities; other parameters are ignored. The classification extension is
// not served: an output asked for with a classification is refused.
//
// A body on either route may be compressed (Content-Encoding gzip, or
// deflate: zlib-wrapped as HTTP has it, or raw deflate, which some clients
// send under that name and which never starts as zlib data does); the
// body limit bounds it both as sent and decompressed, and the
// Inference-Header-Content-Length of a v2 request counts the decompressed
// body's JSON, as Triton reads it. A body that is not what its coding says
// is 400, one decompressed past the limit 413, and another coding, or two
// at once, 415 with Accept-Encoding: gzip, deflate.
//
// An answer given before a body is read to its end (a body over the limit,
// a full queue, a content type not read, a route that takes no body) is
// sent at once when the body is larger than net/http reads by itself, and
// the rest of the body is then read and thrown away, within the server's
// read deadline (http.Server.ReadTimeout) and up to four times the body
// limit, so that clients which send their whole body before they read
// get their answer and not a reset connection (see discardUnread).
//
// Errors are always JSON, {"error": "..."}, with a status that says whose
// fault it is: 4xx for the request, 429/503 for load and availability, 504 for
// a deadline, 422 for an item the model refused or that crashes it (named
// by its row on the v2 route), 500 for
// the rest.
package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamer-dev/streamer/internal/buildinfo"
	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor"
)

// DefaultMaxBody is the request body limit used when Config.MaxBody is zero.
const DefaultMaxBody = 8 << 20

// Backend runs the requests the handler accepts. *supervisor.Streamer
// implements it; so can anything else that answers with supervisor's
// errors (a front end feeding remote GPU nodes, a test fake).
type Backend interface {
	// PredictRequest runs the request's items and waits for their outputs.
	// It fails at once, with an error wrapping one of supervisor's sentinel
	// errors, when the request cannot be admitted, and otherwise as
	// supervisor.Future's Result does.
	PredictRequest(ctx context.Context, req supervisor.Request) ([][]byte, error)
	// Ready reports whether some worker can take work now.
	Ready() bool
	// Stats is a snapshot of the counters.
	Stats() supervisor.Stats
	// Slots describes every worker slot.
	Slots() []supervisor.SlotStatus
}

// RejectCounter is what a Backend may also do: count as rejected the
// items of a request the handler refused before handing it over (a v2
// request of more rows than MaxItems), so that its Stats count them as
// they count the items of a request it refuses itself. *supervisor.Streamer
// and the Redis front end do.
type RejectCounter interface {
	CountRejected(items int)
}

// countRejected has the backend count the items of a request refused with
// err before it was handed over, when err says how many and the backend
// counts them.
func (h *handler) countRejected(err error) {
	var reqErr *requestError
	if c, ok := h.backend.(RejectCounter); ok && errors.As(err, &reqErr) && reqErr.items > 0 {
		c.CountRejected(reqErr.items)
	}
}

// Config sets up the handler. Only Backend is required.
type Config struct {
	// Backend runs the requests. Required.
	Backend Backend
	// Codec turns request items into model items and outputs into JSON.
	// Nil means Generic{}.
	Codec Codec
	// MaxBody is the largest request body accepted, in bytes; larger ones get
	// 413. Zero means DefaultMaxBody.
	MaxBody int64
	// Logger receives a line for a request that fails on the server's
	// side (5xx), the first of its kind at once and then at most every few
	// seconds with a count of those held back (those at debug level); nil
	// discards them.
	Logger *slog.Logger
	// Model is served as JSON at GET /v1/models; nil serves {"model":"unknown"}.
	Model any
	// WriteTimeout bounds the writing of each answer, from its first byte:
	// a client that stops reading is dropped after it. It does not bound
	// the wait for the model, unlike http.Server.WriteTimeout, which counts
	// from the end of the request's headers. Zero means no bound.
	WriteTimeout time.Duration
	// AllowedOrigins lists the browser origins (scheme://host[:port]) whose
	// pages may call the API; "*" allows every origin. A request that
	// carries any other Origin header is refused with 403 before it runs,
	// so that a web page cannot make a browser on the server's machine run
	// inference on a loopback API. Requests without an Origin header (curl,
	// programs) are not affected. CORS preflight requests of allowed origins
	// are answered. Each is compared as a browser writes its origin: the
	// scheme and host in lower case, and no port when it is the scheme's
	// default (so https://App.example:443 allows https://app.example).
	// Empty allows no origin.
	AllowedOrigins []string
	// Admin, when set, serves POST /admin/reload and POST /admin/workers
	// (see admin.go); nil serves no admin route. The routes change what
	// every client gets: put them behind authentication.
	Admin Admin
	// Tensors is the served model as the Open Inference Protocol (KServe
	// v2) routes see it: /v2/models/{name}, its ready and infer routes and
	// their /versions/{v} forms answer for it. Nil answers them 404; the
	// /v2 server metadata and health routes are served either way.
	Tensors TensorModel
	// ServerName is the server's name in the GET /v2 answer; empty means
	// DefaultServerName.
	ServerName string
	// ServerVersion is the server's version in the GET /v2 answer; empty
	// means the main module's version in the binary's build information,
	// or "devel" when it has none.
	ServerVersion string
	// MaxBatchSize is the most items one batch holds (the supervisor's
	// BatchSize), and MaxQueueDelay the longest an item waits for
	// batch-mates (its MaxLatency): the v2 model configuration
	// (GET /v2/models/{model}/config) gives them as Triton's
	// max_batch_size and dynamic_batching. Zero leaves them out.
	MaxBatchSize  int
	MaxQueueDelay time.Duration
	// MaxItems is the most items one request may carry (the supervisor's
	// MaxItems): a v2 request of more rows is refused with 413 before its
	// rows are encoded. Zero means 65536.
	MaxItems int
	// Metrics are served on GET /metrics beside the API's own: those of
	// what stands before the API, such as a listener that turns
	// connections away before any request reaches the handler. Nil adds
	// none.
	Metrics prometheus.Collector
}

// handler serves every route. It holds no per-request state: buffers come
// from pools so that the hot path allocates little.
type handler struct {
	backend Backend
	codec   Codec
	maxBody int64
	log     *slog.Logger
	failed  repeats.Lines // the lines of requests failed (500), held back when they repeat (see logFailed)
	model   any
	admin   Admin
	tensors TensorModel

	serverMetadata serverMetadataBody // the GET /v2 answer

	writeTimeout time.Duration
	discardLimit int64           // the most read of a body answered unread (see discardUnread)
	origins      map[string]bool // allowed Origin values; "*" for any

	maxBatchSize  int           // the v2 configuration's max_batch_size (0: none)
	maxQueueDelay time.Duration // its dynamic batching's queue delay
	maxRows       int           // the most rows of a v2 request

	bufs        sync.Pool // *bytes.Buffer: request bodies and responses
	inferStates sync.Pool // *inferState: the v2 inference requests' memory
	inflaters   sync.Pool // *inflater: decompressors of compressed bodies
	inflated    budget    // the decompressed bodies' bytes held (see inflatedBudget)

	requests requestCounts
	metrics  http.Handler

	// Header values are shared, never mutated: setting a header from them
	// saves an allocation per response.
	jsonType    []string
	msgpackType []string
	octetType   []string
	retryAfter  []string
	codings     []string // the Accept-Encoding of a 415 for a content coding
	fullBody    []byte   // the JSON answer to a request refused for a full queue

	// bodyMean is the mean length of the bodies read of late, in bytes
	// (see refusedFull).
	bodyMean atomic.Int64
}

// New returns the HTTP handler for cfg. It panics when cfg.Backend is nil,
// since no request could ever be served.
func New(cfg Config) http.Handler {
	if cfg.Backend == nil {
		panic("httpapi: Config.Backend is nil")
	}
	h := &handler{
		backend:       cfg.Backend,
		codec:         cfg.Codec,
		maxBody:       cfg.MaxBody,
		log:           cfg.Logger,
		model:         cfg.Model,
		admin:         cfg.Admin,
		tensors:       cfg.Tensors,
		writeTimeout:  cfg.WriteTimeout,
		maxBatchSize:  max(cfg.MaxBatchSize, 0),
		maxQueueDelay: cfg.MaxQueueDelay,
		maxRows:       maxRows,
		jsonType:      []string{"application/json"},
		msgpackType:   []string{"application/msgpack"},
		octetType:     []string{"application/octet-stream"},
		retryAfter:    []string{"1"},
		codings:       []string{acceptedCodings},
		serverMetadata: serverMetadataBody{
			Name:       cmp.Or(cfg.ServerName, DefaultServerName),
			Version:    cmp.Or(cfg.ServerVersion, buildinfo.Version()),
			Extensions: []string{"binary_tensor_data", "model_configuration", "statistics"}, // the protocol extensions served
		},
	}
	if h.codec == nil {
		h.codec = Generic{}
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBody
	}
	// A byte under the largest: a body is read to one byte past the
	// limit to tell one over it, which at the largest would wrap.
	h.maxBody = min(h.maxBody, math.MaxInt64-1)
	if cfg.MaxItems > 0 {
		h.maxRows = min(cfg.MaxItems, maxRows)
	}
	h.discardLimit = discardLimit(h.maxBody)
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.model == nil {
		h.model = map[string]string{"model": "unknown"}
	}
	h.origins = make(map[string]bool, len(cfg.AllowedOrigins))
	for _, o := range cfg.AllowedOrigins {
		h.origins[browserOrigin(o)] = true
	}
	h.bufs.New = func() any { return new(bytes.Buffer) }
	h.inferStates.New = func() any { return new(inferState) }
	h.inflaters.New = func() any { return new(inflater) }
	h.inflated.bound = inflatedBudget(h.maxBody)
	h.metrics = metricsHandler(h.backend, &h.requests, cfg.Metrics)
	h.fullBody, _ = json.Marshal(errorBody{Error: fullMessage})
	h.fullBody = append(h.fullBody, '\n')
	return h
}

// maxPooledBuffer keeps one huge request from pinning its memory in the pool.
const maxPooledBuffer = 1 << 20

func (h *handler) getBuffer() *bytes.Buffer {
	b := h.bufs.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func (h *handler) putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		h.bufs.Put(b)
	}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 && r.ProtoMajor == 1 && expectsContinue(r.Header) {
		h.serveExpecting(w, r)
		return
	}
	h.route(w, r)
	if r.ContentLength > smallBody || r.ContentLength < 0 {
		h.discardUnread(w, r)
	}
}

// serveExpecting answers a request whose client waits for 100 Continue
// before it sends its body. Answered without its body being asked for (a
// 413, 415, 429...), the client sends none, and the connection is closed
// as the answer goes: net/http would wait for the body, up to 256 KiB of
// it, until --read-timeout, holding the connection.
func (h *handler) serveExpecting(w http.ResponseWriter, r *http.Request) {
	body := &askedBody{ReadCloser: r.Body}
	r.Body = body
	h.route(w, r)
	// net/http's own body again, before the answer goes: by its type,
	// net/http knows not to wait for a body it did not ask for.
	r.Body = body.ReadCloser
	if !body.asked {
		sendAndClose(w)
	}
}

// askedBody is a request body that tells whether it was read: for a
// client waiting for 100 Continue, whether it was asked for.
type askedBody struct {
	io.ReadCloser
	asked bool
}

func (b *askedBody) Read(p []byte) (int, error) {
	b.asked = true
	return b.ReadCloser.Read(p)
}

// route answers r.
func (h *handler) route(w http.ResponseWriter, r *http.Request) {
	if origin, ok := r.Header["Origin"]; ok && !h.crossOrigin(w, r, origin) {
		return
	}
	switch r.URL.Path {
	case "/predict":
		if r.Method != http.MethodPost {
			h.methodNotAllowed(w, http.MethodPost)
			return
		}
		h.predict(w, r)
	case "/healthz":
		h.get(w, r, func() (int, any) { return http.StatusOK, map[string]string{"status": "ok"} })
	case "/readyz":
		h.get(w, r, func() (int, any) { return h.readiness(anonymous(r)) })
	case "/v1/models":
		h.get(w, r, func() (int, any) { return http.StatusOK, h.model })
	case "/v1/stats":
		h.get(w, r, h.stats)
	case "/v1/workers":
		h.get(w, r, func() (int, any) { return http.StatusOK, h.backend.Slots() })
	case "/metrics":
		h.serveRead(w, r, h.metrics)
	case "/":
		h.serveRead(w, r, statusPage)
	default:
		if h.serveV2(w, r) || h.serveAdmin(w, r) {
			return
		}
		h.writeError(w, http.StatusNotFound, "no route "+strconv.Quote(r.URL.Path)+
			"; the routes are POST /predict, GET /, /healthz, /readyz, /metrics, /v1/models, /v1/stats, /v1/workers, "+
			"and the v2 inference protocol's GET /v2, /v2/health/live, /v2/health/ready, /v2/models/{model}[/versions/{v}], "+
			"/v2/models/{model}[/versions/{v}]/ready, /config, /stats, /v2/models/stats, "+
			"POST /v2/models/{model}[/versions/{v}]/infer, /v2/repository/index")
	}
}

// crossOrigin vets a request sent by a browser page on behalf of origin. It
// answers the request itself, and returns false, when the origin is not
// allowed or the request is a CORS preflight.
func (h *handler) crossOrigin(w http.ResponseWriter, r *http.Request, origin []string) bool {
	if !h.originAllowed(origin) {
		name := strings.Join(origin, ", ")
		h.writeError(w, http.StatusForbidden, "requests from the web page origin "+strconv.Quote(name)+
			" are not allowed; to let pages from it call this API, add it to the server's allowed origins (streamer serve --allow-origin)")
		return false
	}
	hdr := w.Header()
	hdr.Set("Access-Control-Allow-Origin", origin[0])
	hdr.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		// The headers of ours a page needs, which a browser hides unless
		// told: when to come back after a 429 or 503, and where a v2
		// answer's JSON header ends and its binary tensors begin.
		// And, after a 415, the encodings a body may come in.
		hdr.Set("Access-Control-Expose-Headers", "Retry-After, Accept-Encoding, "+InferenceHeaderLength)
		return true
	}
	hdr.Set("Access-Control-Allow-Methods", "GET, HEAD, POST")
	hdr.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Content-Encoding, "+TimeoutHeader+", "+InferenceHeaderLength)
	hdr.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return false
}

// browserOrigin writes origin as a browser sends it in its Origin header:
// scheme and host in lower case, an IP address in its shortest form
// (http://[::1], not http://[0:0:0:0:0:0:0:1]), the port without leading
// zeros and without the scheme's default, no trailing slash. A configured
// origin written otherwise would never match.
func browserOrigin(origin string) string {
	origin = strings.TrimSuffix(origin, "/")
	scheme, host, ok := strings.Cut(origin, "://")
	if !ok {
		return origin // "*", or what the caller checked no further
	}
	scheme, host = strings.ToLower(scheme), strings.ToLower(host)
	name, port := host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if addr, err := netip.ParseAddr(name); err == nil && addr.Zone() == "" {
		name = browserIP(addr)
	}
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	if scheme == "https" && port == "443" || scheme == "http" && port == "80" {
		port = ""
	}
	if port == "" {
		if strings.Contains(name, ":") {
			return scheme + "://[" + name + "]"
		}
		return scheme + "://" + name
	}
	return scheme + "://" + net.JoinHostPort(name, port)
}

// browserIP writes addr as a browser's URL parser does: IPv4 dotted,
// IPv6 in its shortest form, the IPv4 in an IPv4-mapped address in hex
// (::ffff:7f00:1).
func browserIP(addr netip.Addr) string {
	if !addr.Is4In6() {
		return addr.String()
	}
	b := addr.As16()
	return fmt.Sprintf("::ffff:%x:%x", uint16(b[12])<<8|uint16(b[13]), uint16(b[14])<<8|uint16(b[15]))
}

// originAllowed reports whether a request whose Origin header values are
// origin comes from a page allowed to call the API.
func (h *handler) originAllowed(origin []string) bool {
	return len(origin) == 1 && (h.origins["*"] || h.origins[origin[0]])
}

// refusalOrigin lets a page of r's origin, when it is allowed, read an
// answer that refuses r before the handler sees it: RequireToken's 401,
// and its WWW-Authenticate challenge, which a browser hides from the page
// unless told to expose it. It sets nothing for any other origin, whose
// page is told nothing, as it would have been refused anyway.
func (h *handler) refusalOrigin(w http.ResponseWriter, r *http.Request) {
	origin, ok := r.Header["Origin"]
	if !ok || !h.originAllowed(origin) {
		return
	}
	hdr := w.Header()
	hdr.Set("Access-Control-Allow-Origin", origin[0])
	hdr.Set("Access-Control-Expose-Headers", "WWW-Authenticate")
	hdr.Add("Vary", "Origin")
}

// get serves a read-only route: GET or HEAD, answered with body's JSON.
func (h *handler) get(w http.ResponseWriter, r *http.Request, body func() (int, any)) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.methodNotAllowed(w, "GET, HEAD")
		return
	}
	status, v := body()
	h.writeJSON(w, status, v)
}

// readiness is the /readyz answer. Its 503 says why the server is not
// ready, except to an anonymous caller (a probe let through without the
// token; see RequireToken): the reason may name what lies behind the
// server (a front end's Redis, its address and its error), so such a
// caller is told only whether the server shuts down. A caller with the
// token is told the reason, and so is any caller when no token is
// required.
func (h *handler) readiness(anonymous bool) (int, any) {
	if h.backend.Ready() {
		return http.StatusOK, map[string]string{"status": "ready"}
	}
	return http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": h.notReadyReason(anonymous)}
}

// notReadyWithheld is the reason an anonymous caller is told (see
// readiness) unless the server shuts down.
const notReadyWithheld = "not ready: the reason is told to requests that carry the token"

// notReadyReason says why the backend is not ready; to an anonymous
// caller, only whether it shuts down.
func (h *handler) notReadyReason(anonymous bool) string {
	var err error
	if b, ok := h.backend.(unreadier); ok {
		err = b.NotReady()
	}
	switch {
	case err == supervisor.ErrShuttingDown: // bare: says no more than its name
		return ShuttingDown
	case anonymous && errors.Is(err, supervisor.ErrShuttingDown):
		return ShuttingDown
	case anonymous:
		return notReadyWithheld
	case err != nil:
		return err.Error()
	}
	return "no worker is ready"
}

// unreadier is a Backend that says why it is not ready: a local streamer
// (no worker ready, or shutting down), or a front end behind Redis
// (package broker), whose workers are elsewhere.
type unreadier interface{ NotReady() error }

// statsBody is the /v1/stats answer: the supervisor's counters and the one
// figure derived from them that everybody asks for.
type statsBody struct {
	supervisor.Stats
	MeanBatchSize float64 `json:"mean_batch_size"`
	// Requests counts the prediction requests answered, by outcome, as
	// streamer_requests_total does: a request refused before its body
	// was read (a full queue) counts here, and none of its items does.
	Requests map[string]uint64 `json:"requests"`
	// Broker is what a Backend behind Redis says of its traffic there.
	Broker any `json:"broker,omitempty"`
}

// brokerStatser is a Backend that goes through a broker (package broker)
// and counts what it did there: claims, duplicates, the shared backlog.
type brokerStatser interface{ BrokerStats() any }

func (h *handler) stats() (int, any) {
	s := h.backend.Stats()
	body := statsBody{Stats: s, MeanBatchSize: s.MeanBatchSize(), Requests: make(map[string]uint64, len(requestOutcomes))}
	for i, outcome := range requestOutcomes {
		body.Requests[outcome] = h.requests.byOutcome[i].Load()
	}
	if b, ok := h.backend.(brokerStatser); ok {
		body.Broker = b.BrokerStats()
	}
	return http.StatusOK, body
}

func (h *handler) methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	h.writeError(w, http.StatusMethodNotAllowed, "method not allowed; use "+allow)
}

// writeJSON answers with v encoded as JSON.
func (h *handler) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.log.Error("encode response", "err", err)
		h.writeError(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	h.writeBody(w, status, h.jsonType, append(b, '\n'))
}

func (h *handler) writeBody(w http.ResponseWriter, status int, contentType []string, body []byte) {
	if d, ok := w.(writeDeadliner); ok && h.writeTimeout > 0 {
		_ = d.SetWriteDeadline(time.Now().Add(h.writeTimeout))
	}
	hdr := w.Header()
	hdr["Content-Type"] = contentType
	hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
