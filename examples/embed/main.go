// Command embed is a complete Go program that serves its own model from its
// own net/http server, with streamer's batching and worker processes. It is
// both the server and, started again by the supervisor, each of its workers:
// main asks workerproc.Started first, and a worker never reaches the server
// code.
//
// The model, "shout", upper-cases strings and appends a suffix taken from
// its settings; it stands in for a model that wants a GPU process of its own.
//
//	go run ./examples/embed --listen 127.0.0.1:8080 --workers 2
//	curl -d '{"texts":["hello","world"]}' 127.0.0.1:8080/shout
//
// With --broker redis://HOST:PORT/DB, several copies of it share one Redis:
// each sends its requests through Redis and runs, on its own workers,
// those of any copy (broker.NewFrontEnd and broker.NewNode). Copies of
// another --suffix are another model, which Redis refuses beside this one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/workerproc"
)

func main() {
	// Started by a supervisor: be a worker, and never come back.
	if workerproc.Started() {
		workerproc.Main(openModel)
	}
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	workers := flag.Int("workers", 2, "worker processes")
	suffix := flag.String("suffix", "!", "what the model appends to every answer")
	redisURL := flag.String("broker", "", "redis://host:port/db shared with other copies of this program (empty: serve alone)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := serve(*listen, *workers, *suffix, *redisURL, log); err != nil {
		log.Error("embed", "err", err)
		os.Exit(1)
	}
}

// serve runs the server until SIGTERM or SIGINT, then drains it. With a
// redisURL, its requests go through Redis, and its workers serve those of
// every copy.
func serve(listen string, workers int, suffix, redisURL string, log *slog.Logger) error {
	spec, err := model.NewSpec("shout", shoutSettings{Suffix: suffix})
	if err != nil {
		return err
	}
	st, err := supervisor.New(supervisor.Config{
		Workers:    workers,
		BatchSize:  32,
		MaxLatency: 5 * time.Millisecond,
		Logger:     log,
		// Path is left empty: the workers are this program, started again.
		Process: supervisor.ProcessConfig{Model: spec},
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := st.Start(ctx); err != nil {
		return err
	}
	var via predictor = st
	stops := []func(context.Context) error{st.Shutdown}
	if redisURL != "" {
		front, shutdown, err := throughRedis(ctx, redisURL, st, workers, suffix, log)
		if err != nil {
			_ = st.Shutdown(context.Background())
			return err
		}
		via, stops = front, append(shutdown, stops...)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		for _, stop := range stops {
			_ = stop(context.Background())
		}
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /shout", shoutHandler(via))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	drained := make(chan error, 1)
	go func() {
		<-ctx.Done()
		drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Stop taking requests and finish those in flight; then stop the
		// front end, the node and the workers, in that order.
		err := srv.Shutdown(drain)
		for _, stop := range stops {
			err = errors.Join(err, stop(drain))
		}
		drained <- err
	}()
	fmt.Printf("listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-drained
}

// predictor is what the handler sends items to: the local streamer, or a
// front end that sends them through Redis.
type predictor interface {
	Predict(ctx context.Context, items [][]byte) ([][]byte, error)
}

// throughRedis starts a node that serves the items on Redis with st, and
// a front end that sends this server's requests there; it returns the
// front end and their shutdowns, in order. The model's id says that the
// suffix is part of the model: a copy of another refuses to start.
func throughRedis(ctx context.Context, url string, st *supervisor.Streamer, workers int, suffix string, log *slog.Logger) (*broker.FrontEnd, []func(context.Context) error, error) {
	// The Redis client's own complaints (each retry to dial) go to the log
	// at debug level rather than to stderr as plain text.
	broker.SendRedisLogTo(log)
	cfg := broker.Config{
		URL:    url,
		Model:  broker.ModelID{Wire: "msgpack strings", Name: "shout" + suffix, Label: "shout with suffix " + strconv.Quote(suffix)},
		Logger: log,
	}
	node, err := broker.NewNode(broker.NodeConfig{Config: cfg, Streamer: st, Capacity: workers * 32 * 2})
	if err != nil {
		return nil, nil, err
	}
	front, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: cfg})
	if err != nil {
		_ = node.Shutdown(context.Background())
		return nil, nil, err
	}
	stops := []func(context.Context) error{front.Close, node.Shutdown}
	for _, start := range []func(context.Context) error{node.Start, front.Start} {
		err := start(ctx)
		if err != nil && !errors.Is(err, supervisor.ErrUnavailable) {
			// A refusal, another model under the prefix: only mending
			// the setup helps, so stop.
			for _, stop := range stops {
				_ = stop(context.Background())
			}
			return nil, nil, err
		}
		if err != nil {
			log.Warn("started without redis; retrying", "err", err)
		}
	}
	return front, stops, nil
}

// shoutRequest and shoutAnswer are the HTTP API's JSON.
type shoutRequest struct {
	Texts []any `json:"texts"`
}

type shoutAnswer struct {
	Texts []string `json:"texts,omitempty"`
	Error string   `json:"error,omitempty"`
}

// maxShoutBody is the largest request body read, in bytes.
const maxShoutBody = 1 << 20

// shoutHandler encodes each text as one item, lets the streamer batch them
// with other requests' items, and answers with the model's outputs. A body
// over maxShoutBody gets 413, as retrying it unchanged cannot succeed; any
// other that does not decode gets 400.
func shoutHandler(st predictor) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req shoutRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxShoutBody)).Decode(&req); err != nil {
			status := http.StatusBadRequest
			if errors.As(err, new(*http.MaxBytesError)) {
				status = http.StatusRequestEntityTooLarge
			}
			answer(w, status, shoutAnswer{Error: "body: " + err.Error()})
			return
		}
		items := make([][]byte, len(req.Texts))
		for i, text := range req.Texts {
			items[i], _ = msgpack.Marshal(text) // a decoded JSON value always encodes
		}
		outputs, err := st.Predict(r.Context(), items)
		if err != nil {
			answer(w, statusOf(err), shoutAnswer{Error: err.Error()})
			return
		}
		texts := make([]string, len(outputs))
		for i, out := range outputs {
			if err := msgpack.Unmarshal(out, &texts[i]); err != nil {
				answer(w, http.StatusInternalServerError, shoutAnswer{Error: err.Error()})
				return
			}
		}
		answer(w, http.StatusOK, shoutAnswer{Texts: texts})
	}
}

// statusOf maps the streamer's errors to HTTP statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, supervisor.ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, supervisor.ErrModel), errors.Is(err, supervisor.ErrPoison):
		return http.StatusUnprocessableEntity
	case errors.Is(err, supervisor.ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, supervisor.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, supervisor.ErrUnavailable), errors.Is(err, supervisor.ErrShuttingDown):
		return http.StatusServiceUnavailable
	case errors.Is(err, supervisor.ErrDeadline):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func answer(w http.ResponseWriter, status int, a shoutAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// shoutSettings travel to every worker in the model's Spec.
type shoutSettings struct {
	Suffix string `json:"suffix"`
}

// openModel opens the model a worker is told to serve.
func openModel(_ context.Context, spec model.Spec) (model.Model, error) {
	if spec.Runner != "shout" {
		return nil, fmt.Errorf("%w: this program serves shout, not %q", model.ErrUnknownModel, spec.Runner)
	}
	var settings shoutSettings
	if err := spec.Decode(&settings); err != nil {
		return nil, err
	}
	return shout{settings: settings, pid: os.Getpid()}, nil
}

// shout upper-cases each text of a batch. An item that is not a string
// fails alone; the others are answered.
type shout struct {
	settings shoutSettings
	pid      int
}

func (m shout) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	outputs := make([][]byte, len(items))
	var errs []error
	for i, item := range items {
		var text string
		// A null would decode as "" with no error: it is no text either.
		if err := msgpack.Unmarshal(item, &text); err != nil || isNull(item) {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = errors.New("want a string")
			continue
		}
		outputs[i], _ = msgpack.Marshal(strings.ToUpper(text) + m.settings.Suffix)
	}
	if errs != nil {
		return outputs, &model.ItemErrors{Errs: errs}
	}
	return outputs, nil
}

func (m shout) Close() error { return nil }

// isNull says whether item is msgpack's nil, a JSON null.
func isNull(item []byte) bool { return len(item) == 1 && item[0] == 0xc0 }

// Describe names the model in the worker's ready message and the logs.
func (m shout) Describe() string { return fmt.Sprintf("shout%q in pid %d", m.settings.Suffix, m.pid) }
