package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/bench/httpclient"
	"github.com/streamer-dev/streamer/supervisor"
)

// setUp makes the sender for the chosen API, starting a server when needed.
// The returned func stops what was started.
func (cfg *Config) setUp(ctx context.Context, item any) (sender, statsSource, func(), error) {
	if cfg.API == APIGo {
		return cfg.goAPI(ctx, item)
	}
	target, stop := cfg.Target, func() {}
	grpcAddr := ""
	if cfg.Protocol == ProtocolGRPC {
		var err error
		if grpcAddr, err = cfg.grpcTarget(); err != nil {
			return nil, nil, nil, err
		}
	}
	if target == "" {
		var err error
		if target, stop, err = startServer(ctx, cfg.Server, cfg.Token); err != nil {
			return nil, nil, nil, err
		}
	}
	send, stats, closeIdle, err := cfg.httpAPI(target, grpcAddr, item)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return send, stats, func() { closeIdle(); stop() }, nil
}

// httpAPI makes the sender that posts to target's /predict: the lean client
// of package httpclient over plain http, Go's standard client over https;
// or, for ProtocolGRPC, that calls the gRPC service at grpcAddr. The
// returned func closes the idle connections.
func (cfg *Config) httpAPI(target, grpcAddr string, item any) (sender, statsSource, func(), error) {
	u, err := parseTarget(target)
	if err != nil {
		return nil, nil, nil, err
	}
	base := strings.TrimSuffix(u.String(), "/")
	var transport http.RoundTripper = http.DefaultTransport
	if cfg.RootCAs != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg.tlsConfig()
		transport = t
	}
	plain := &http.Client{Timeout: cfg.RequestTimeout, Transport: withToken(transport, cfg.Token)}
	stats := httpStats(plain, base+"/v1/stats")
	if cfg.Protocol == ProtocolGRPC {
		send, closeAll, err := cfg.grpcSender(plain, base, grpcAddr, item)
		return send, stats, closeAll, err
	}
	path, body, headers, err := cfg.requestFor(plain, base, item)
	if err != nil {
		return nil, nil, nil, err
	}
	if u.Scheme == "http" {
		if cfg.Token != "" {
			headers = append(headers, "Authorization: Bearer "+cfg.Token)
		}
		c := httpclient.New(u, path, body, cfg.Concurrency, headers...)
		c.Timeout = cfg.RequestTimeout
		return leanSender(c), stats, c.CloseIdle, nil
	}
	client := &http.Client{Timeout: cfg.RequestTimeout, Transport: withToken(&http.Transport{
		MaxIdleConns:        cfg.Concurrency * 2,
		MaxIdleConnsPerHost: cfg.Concurrency * 2,
		IdleConnTimeout:     time.Minute,
		TLSClientConfig:     cfg.tlsConfig(),
	}, cfg.Token)}
	return httpSender(client, base+path, body, headers), stats, client.CloseIdleConnections, nil
}

// tlsConfig is how the load's clients check an https target: against
// RootCAs, or the system's when it is nil.
func (cfg *Config) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}
}

// requestFor returns the path, body and extra header lines ("Name: value")
// of the request every client sends.
func (cfg *Config) requestFor(client *http.Client, base string, item any) (string, []byte, []string, error) {
	if cfg.Protocol == ProtocolV2 || cfg.Protocol == ProtocolV2Binary {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return cfg.v2Request(ctx, client, base, item)
	}
	inputs := make([]any, cfg.ItemsPerRequest)
	for i := range inputs {
		inputs[i] = item
	}
	body, err := json.Marshal(map[string]any{"inputs": inputs})
	return "/predict", body, nil, err
}

// leanSender sends with c. A request cut short by the end of the load is
// no error.
func leanSender(c *httpclient.Client) sender {
	return func(ctx context.Context) (string, error) {
		status, excerpt, err := c.Post(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return "", nil
		case errors.Is(err, httpclient.ErrTimeout):
			return kindTimeout, err
		case err != nil:
			return kindConnection, err
		case status != http.StatusOK:
			return "http " + strconv.Itoa(status), serverSaid(excerpt)
		}
		return "", nil
	}
}

// serverSaid is the failure an answer's body describes, nil when empty.
func serverSaid(body []byte) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	return errors.New(string(body))
}

// httpSender posts body with Go's standard client (used for https).
func httpSender(client *http.Client, url string, body []byte, headers []string) sender {
	return func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return "client", err
		}
		req.Header.Set("Content-Type", "application/json")
		for _, h := range headers {
			name, value, _ := strings.Cut(h, ":")
			req.Header.Set(name, strings.TrimSpace(value))
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", nil
			}
			if netErr, ok := errors.AsType[net.Error](err); ok && netErr.Timeout() {
				return kindTimeout, err
			}
			return kindConnection, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, httpclient.ExcerptBytes))
			_, _ = io.Copy(io.Discard, resp.Body)
			return fmt.Sprintf("http %d", resp.StatusCode), serverSaid(excerpt)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return "", nil
	}
}

// withToken makes base send token as the bearer token of every request;
// base itself when token is empty.
func withToken(base http.RoundTripper, token string) http.RoundTripper {
	if token == "" {
		return base
	}
	return tokenTransport{base: base, header: "Bearer " + token}
}

type tokenTransport struct {
	base   http.RoundTripper
	header string
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.header)
	return t.base.RoundTrip(r)
}

// httpStats reads GET url, the server's /v1/stats.
func httpStats(client *http.Client, url string) statsSource {
	return func(ctx context.Context) (serverStats, error) {
		var st struct {
			supervisor.Stats
			// Broker is a server's behind Redis: a front end alone says
			// what it knows of Redis; a node, its own traffic too.
			Broker *struct {
				FrontEnd json.RawMessage `json:"front_end"`
				Node     json.RawMessage `json:"node"`
			} `json:"broker"`
		}
		err := getJSON(ctx, client, url, &st)
		frontEnd := st.Broker != nil && st.Broker.FrontEnd != nil && st.Broker.Node == nil
		return serverStats{Stats: st.Stats, frontEnd: frontEnd}, err
	}
}

// getJSON decodes the JSON answer of GET url into v.
func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The server's own words, so that a failure says why.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// goAPI runs a supervisor in this process, with worker processes, and sends
// msgpack items through Predict.
func (cfg *Config) goAPI(ctx context.Context, item any) (sender, statsSource, func(), error) {
	if cfg.Supervisor == nil {
		return nil, nil, nil, errors.New("--api go: no supervisor config")
	}
	encoded, err := msgpack.Marshal(item)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--input: encode as msgpack: %w", err)
	}
	st, stop, err := startSupervisor(ctx, cfg.Supervisor)
	if err != nil {
		return nil, nil, nil, err
	}
	items := make([][]byte, cfg.ItemsPerRequest)
	for i := range items {
		items[i] = encoded
	}
	send := func(ctx context.Context) (string, error) {
		if _, err := st.Predict(ctx, items); err != nil {
			if ctx.Err() != nil {
				return "", nil
			}
			return errorKind(err), err
		}
		return "", nil
	}
	stats := func(context.Context) (serverStats, error) { return serverStats{Stats: st.Stats()}, nil }
	return send, stats, stop, nil
}

// startSupervisor starts the supervisor that makeConfig describes and waits
// for all its workers. The returned func shuts it down.
func startSupervisor(ctx context.Context, makeConfig func() (supervisor.Config, error)) (*supervisor.Streamer, func(), error) {
	cfg, err := makeConfig()
	if err != nil {
		return nil, nil, err
	}
	st, err := supervisor.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("start workers: %w", err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = st.Shutdown(ctx)
	}
	if err := waitReady(ctx, cfg.Workers, func(context.Context) ([]supervisor.SlotStatus, error) { return st.Slots(), nil }); err != nil {
		stop()
		return nil, nil, err
	}
	return st, stop, nil
}

// errorKind names a Go API error by its sentinel.
func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{supervisor.ErrOverloaded, "overloaded"}, {supervisor.ErrUnavailable, "unavailable"},
		{supervisor.ErrShuttingDown, "shutting down"}, {supervisor.ErrDeadline, "deadline"},
		{supervisor.ErrPoison, "poison"}, {supervisor.ErrModel, "model"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}
